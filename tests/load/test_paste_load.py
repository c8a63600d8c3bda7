"""Load: 24 sessions over Streamlit's websocket protocol, each pasting the largest config allowed.

Issue #17 item 5: eight sessions pasting 24 MB each pushed the server from 339 MB to 1.1 GB. Here
every session sends what a browser sends (``BackMsg.rerun_script`` with its widget states): a
config.json of exactly ``MAX_CONFIG_BYTES`` bytes in the paste box and a click on "Use pasted
config". Each must end with its own model in the KPI header and no exception; the server's RSS
(the process and its children, sampled every 0.2 s from the first connection until every session
is done) must stay under 600 MB. A 25th client sends a paste larger than the box allows
(``max_chars`` is a browser-side limit) and must be cut off by the server
(``server.maxWidgetStateSize``).

The protocol: the client connects to ``/_stcore/stream`` (subprotocol ``streamlit``), sends a
``rerun_script`` and reads ``ForwardMsg``s up to ``script_finished``; widget ids come from the
elements it received, the query string from ``page_info_changed`` (as the browser keeps the URL).
The paste box is in the lazy "Use your own config.json" expander, so each session first opens it
(the expander's open state is a widget state, ``kvplan.ui.lazy``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from pathlib import Path

import pytest
from load_server import streamlit_app, tree_rss_bytes

from kvplan.config_import import MAX_CONFIG_BYTES

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 24
RSS_LIMIT = 600 << 20
LLAMA = json.loads((ROOT / "presets" / "models" / "llama-3.1-8b.json").read_text())["config"]

pytestmark = [pytest.mark.slow]


def largest_config(index: int) -> str:
    """A valid config.json of exactly ``MAX_CONFIG_BYTES`` bytes, named for its session."""
    config = {**LLAMA, "name": f"Pasted model {index}", "padding": ""}
    text = json.dumps(config)
    config["padding"] = "x" * (MAX_CONFIG_BYTES - len(text.encode()))
    text = json.dumps(config)
    assert len(text.encode()) == MAX_CONFIG_BYTES
    return text


@pytest.fixture(scope="module")
def server():
    with streamlit_app() as (port, proc):
        yield f"ws://127.0.0.1:{port}/_stcore/stream", proc


class Session:
    """One browser tab, speaking the protocol: reruns with widget states, reads the deltas."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.query = ""
        self.ids: dict[str, str] = {}
        self.markdown: list[str] = []
        self.exceptions: list[str] = []

    async def rerun(self, widgets: list | None = None) -> None:
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ClientState_pb2 import ClientState
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
        from streamlit.proto.WidgetStates_pb2 import WidgetStates

        state = ClientState(query_string=self.query, widget_states=WidgetStates(widgets=widgets or []))
        await self.ws.send(BackMsg(rerun_script=state).SerializeToString())
        self.markdown, self.exceptions = [], []
        while True:
            msg = ForwardMsg()
            msg.ParseFromString(await asyncio.wait_for(self.ws.recv(), timeout=300))
            kind = msg.WhichOneof("type")
            if kind == "page_info_changed":
                self.query = msg.page_info_changed.query_string
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                element = msg.delta.new_element
                which = element.WhichOneof("type")
                body = getattr(element, which)
                if which == "markdown":
                    self.markdown.append(body.body)
                elif which == "exception":
                    self.exceptions.append(body.message)
                key = getattr(body, "id", "").rsplit("-", 1)[-1] if hasattr(body, "id") else ""
                if key:
                    self.ids[key] = body.id
            elif kind == "delta" and msg.delta.WhichOneof("type") == "add_block":
                box = msg.delta.add_block.expandable  # a lazy expander is a widget too
                if msg.delta.add_block.WhichOneof("type") == "expandable" and box.id:
                    self.ids[box.id.rsplit("-", 1)[-1]] = box.id
            elif kind == "script_finished":
                return


async def _paste(url: str, index: int, pasted: list, release: asyncio.Event) -> dict:
    """Open the app, paste, click; stay connected until every session has pasted."""
    import websockets
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None,
                                  open_timeout=120) as ws:
        session = Session(ws)
        await session.rerun()
        opened = WidgetState(id=session.ids["w_config_box"], bool_value=True)  # a click on it
        await session.rerun([opened])
        text = largest_config(index)
        await session.rerun([opened, WidgetState(id=session.ids["w_paste"], string_value=text),
                             WidgetState(id=session.ids["w_paste_go"], trigger_value=True)])
        result = {"index": index, "markdown": session.markdown, "exceptions": session.exceptions,
                  "query": session.query}
        pasted.append(index)
        await release.wait()
        return result


async def _oversized(url: str) -> str:
    """A client that ignores the box's max_chars: the server closes the connection (1009)."""
    import websockets
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None,
                                  open_timeout=120) as ws:
        session = Session(ws)
        await session.rerun()
        opened = WidgetState(id=session.ids["w_config_box"], bool_value=True)
        await session.rerun([opened])
        try:
            await session.rerun([opened, WidgetState(id=session.ids["w_paste"],
                                                     string_value="x" * (24 << 20))])
        except websockets.ConnectionClosed as closed:
            return f"closed {closed.rcvd.code if closed.rcvd else None}"
        return "accepted"


async def _drive(url: str, pid: int) -> tuple[list[dict], str, int]:
    peak = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_bytes(pid))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    pasted: list[int] = []
    release = asyncio.Event()
    try:
        tasks = [asyncio.create_task(_paste(url, i, pasted, release)) for i in range(SESSIONS)]
        while len(pasted) < SESSIONS and not any(t.done() for t in tasks):
            await asyncio.sleep(0.2)
        peak = max(peak, tree_rss_bytes(pid))   # every session connected, every config pasted
        release.set()
        results = await asyncio.gather(*tasks)
        oversized = await _oversized(url)
    finally:
        release.set()
        done.set()
        await sampler
    return results, oversized, peak


def test_24_sessions_paste_the_largest_config(server):
    url, proc = server
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        results, oversized, peak = pool.submit(asyncio.run, _drive(url, proc.pid)).result()
    elapsed = time.monotonic() - start
    print(f"\n{SESSIONS} sessions pasted {MAX_CONFIG_BYTES:,}-byte configs in {elapsed:.1f} s; "
          f"server RSS peak {peak / 2**20:,.0f} MiB")
    for result in results:
        header = next((m for m in result["markdown"] if " on **" in m), "")
        assert result["exceptions"] == [], result["exceptions"]
        assert header.startswith(f"**Pasted model {result['index']}** on **1 GPU × "), header[:200]
        assert "m=custom" in result["query"] and "c=" in result["query"]
        others = [f"Pasted model {r['index']}**" for r in results if r["index"] != result["index"]]
        assert not any(other in header for other in others)
    assert oversized == "closed 1009", oversized
    assert peak < RSS_LIMIT, f"server RSS peak {peak / 2**20:,.0f} MiB ≥ 600 MiB"
