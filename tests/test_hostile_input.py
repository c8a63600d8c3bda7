"""Issue #32 "Hostile input, round three": one test per reported item (1–11) and the acceptance lines.

Every input is built here (headers, indexes, FIFOs, a hostile Hub on 127.0.0.1). Each test asserts
the exact message; CLI refusals exit 2 with exactly one line on stderr and never hang (a FIFO or a
device is refused by every file-reading path); dashboard cases run through Streamlit's AppTest
with no exception and no "could not be drawn".
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli
from md_text import unmd
from streamlit.testing.v1 import AppTest
from test_app import make_app, open_boxes
from test_checkpoint import LLAMA
from test_hostile import assert_inert, no_traceback

from kvplan import checkpoint, hub
from kvplan.checkpoint import MAX_FILES, MAX_READ_HEADER_BYTES, MAX_TENSOR_BYTES, MAX_TOTAL_HEADER_BYTES
from kvplan.errors import MESSAGES, KVPlanError, clip, short
from kvplan.report import parse_link, scenario_from_query
from kvplan.ui.weights_view import MAX_UPLOAD_FILES, MAX_UPLOAD_HEADER_BYTES

ROOT = Path(__file__).resolve().parent.parent
FIT = ["--gpu", "h100-sxm", "--tokens", "8"]


def header(entries: dict[str, Any]) -> bytes:
    """A safetensors header (8-byte length + JSON), no tensor data."""
    raw = json.dumps(entries).encode()
    return struct.pack("<Q", len(raw)) + raw


GOOD = header({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM after ``seconds`` (the CLI runs in this process)."""
    def stop(*_: object) -> None:
        raise AssertionError(f"did not finish within {seconds} s (hang)")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli_fails(argv: list[str]) -> str:
    """Exit 2, exactly one line on stderr, no traceback, within 20 s; returns that line."""
    with within(20):
        code, _, err = run_cli(argv)
    assert code == 2, (argv, code, err)
    assert err.startswith("kvplan: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def error_line(code: str, **fields: object) -> str:
    return f"kvplan: error: {KVPlanError(code, **fields)}\n"


def folder_with(tmp_path: Path, files: dict[str, bytes | str]) -> Path:
    """A checkpoint folder: the tiny Llama's config.json and ``files``."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    for name, data in files.items():
        (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return folder


# ------------------------------------------------------------------ a hostile Hub on 127.0.0.1


class HostileHub(BaseHTTPRequestHandler):
    """``/{org}/{name}/resolve/main/{file}`` from ``routes`` (file → bytes, or (status, headers));
    every request is logged with its path, Range and Authorization headers."""

    routes: dict[str, Any]
    log: list[dict[str, Any]]
    delay_s: float = 0.0

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        self.log.append({"path": self.path, "range": self.headers.get("range"),
                         "authorization": self.headers.get("authorization"),
                         "server": self.server.server_address[1]})
        if self.delay_s:
            time.sleep(self.delay_s)
        name = self.path.split("/resolve/main/", 1)[-1]
        route = self.routes.get(name, self.routes.get(self.path))
        if route is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if isinstance(route, tuple):
            status, headers = route
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rng = self.headers.get("range")
        body = route
        if rng and rng.startswith("bytes="):
            start, _, end = rng[6:].partition("-")
            body = route[int(start): int(end) + 1]
            self.send_response(206)
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def hostile_hub(routes: dict[str, Any], delay_s: float = 0.0) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A Hub-like server on 127.0.0.1 only; yields its endpoint and its request log."""
    log: list[dict[str, Any]] = []
    handler = type("Hub", (HostileHub,), {"routes": routes, "log": log, "delay_s": delay_s})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()


def hub_routes(index: object | None, shards: dict[str, bytes] | None = None) -> dict[str, Any]:
    routes: dict[str, Any] = {"config.json": json.dumps(LLAMA).encode(), **(shards or {})}
    if index is not None:
        routes["model.safetensors.index.json"] = (index if isinstance(index, bytes)
                                                  else json.dumps(index).encode())
    return routes


def hub_problem(monkeypatch: pytest.MonkeyPatch, endpoint: str, repo: str = "org/x") -> str:
    """``fit --hf-id``: config.json read, the headers refused — the one line saying why."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with within(60):
        code, out, err = run_cli(["fit", "--hf-id", repo, *FIT])
    assert code == 0 and err == "", err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("Checkpoint headers not read: ")]
    return line.removeprefix("Checkpoint headers not read: ")


# ------------------------------------------------------------------ the dashboard's upload


class Upload:
    """What ``st.file_uploader`` hands the callback: a name and the bytes."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self._data = name, data

    def getvalue(self) -> bytes:
        return self._data


def _upload_script(files: list[tuple[str, bytes]]) -> None:
    """The weights box's upload callback and message, as the sidebar runs them."""
    import streamlit as st

    from kvplan.ui import weights_view

    class _Up:
        def __init__(self, name: str, data: bytes) -> None:
            self.name, self._data = name, data

        def getvalue(self) -> bytes:
            return self._data

    if "done" not in st.session_state:
        st.session_state["done"] = True
        st.session_state["w_headers"] = [_Up(name, data) for name, data in files]
        weights_view.on_headers_upload()
    weights_view._show_error(st.sidebar)
    stored = st.session_state.get("_checkpoint")
    if stored:
        import pandas as pd

        st.dataframe(pd.DataFrame([{"part": part, "checkpoint": size}
                                   for part, size in stored["summary"].bytes_by_part.items()]))


def upload_app(files: list[tuple[str, bytes]]) -> AppTest:
    at = AppTest.from_function(_upload_script, args=(files,), default_timeout=30)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def upload_error(files: list[tuple[str, bytes]]) -> str:
    """The one error the upload shows (Markdown source, user text escaped)."""
    at = upload_app(files)
    (error,) = at.sidebar.error
    assert_inert(error.value)
    at.run()  # a later rerun of the session draws again
    assert not at.exception
    return unmd(error.value)


# ------------------------------------------------------------------ item 1: total_size not a number


@pytest.mark.parametrize("total", ["Infinity", "NaN", "1e400", "-1", "1.5"])
def test_item1_index_total_size_not_a_whole_number(tmp_path, monkeypatch, total):
    text = f'{{"metadata": {{"total_size": {total}}}, "weight_map": {{"w": "model.safetensors"}}}}'
    value = {"Infinity": "inf", "NaN": "nan", "1e400": "inf", "-1": "-1", "1.5": "1.5"}[total]
    folder = folder_with(tmp_path, {"model.safetensors": GOOD + b"\0" * 4,
                                    "model.safetensors.index.json": text})
    index = folder / "model.safetensors.index.json"
    err = cli_fails(["fit", "--checkpoint", str(folder), *FIT])
    assert err == error_line("checkpoint.bad_total", path=clip(index), value=value, limit=MAX_TENSOR_BYTES)
    # the dashboard's upload
    message = upload_error([("model.safetensors.index.json", text.encode())])
    assert message == str(KVPlanError("checkpoint.bad_total", path="model.safetensors.index.json",
                                      value=value, limit=MAX_TENSOR_BYTES))
    # --hf-id: config.json read, the headers refused by name
    with hostile_hub(hub_routes(text.encode())) as (endpoint, _):
        assert hub_problem(monkeypatch, endpoint) == str(KVPlanError(
            "checkpoint.bad_total", path="model.safetensors.index.json", value=value,
            limit=MAX_TENSOR_BYTES))


# ------------------------------------------------------------------ item 2: a dtype that is a list


@pytest.mark.parametrize("dtype", [["F16"], {"F16": 1}, 16, None])
def test_item2_dtype_that_is_not_a_string(tmp_path, dtype):
    bad = header({"w": {"dtype": dtype, "shape": [2], "data_offsets": [0, 4]}})
    folder = folder_with(tmp_path, {"model.safetensors": bad + b"\0" * 4})
    expected = KVPlanError("checkpoint.bad_file", path=clip(folder / "model.safetensors"),
                           detail="tensor w has no valid dtype/shape")
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == f"kvplan: error: {expected}\n"
    assert upload_error([("model.safetensors", bad)]) == str(KVPlanError(
        "checkpoint.bad_file", path="model.safetensors", detail="tensor w has no valid dtype/shape"))


# ------------------------------------------------------------------ item 3: astronomically large shapes


@pytest.mark.parametrize("shape", [[10 ** 3999], [1 << 62] * 1000, [1 << 27, 1 << 27]],
                         ids=["4000-digits", "1000-huge-dims", "just-over-8-PiB"])
def test_item3_shape_over_the_byte_bound(tmp_path, shape):
    bad = header({"w": {"dtype": "F16", "shape": shape}})
    folder = folder_with(tmp_path, {"model.safetensors": bad})
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.too_large", path=clip(folder / "model.safetensors"), limit=MAX_TENSOR_BYTES)
    at = upload_app([("model.safetensors", bad)])
    assert [unmd(e.value) for e in at.sidebar.error] == [str(KVPlanError(
        "checkpoint.too_large", path="model.safetensors", limit=MAX_TENSOR_BYTES))]
    for _ in range(2):  # nothing kept that a later rerun would fail to draw
        at.run()
        no_traceback(at)
        assert not at.dataframe


def test_item3_largest_accepted_tensor_is_exact(tmp_path):
    """8 PiB exactly (2^52 fp16 values) is accepted and stays an exact int64 in the table."""
    ok = header({"w": {"dtype": "F16", "shape": [1 << 26, 1 << 26]}})
    at = upload_app([("model.safetensors", ok)])
    no_traceback(at)
    (table,) = at.dataframe
    assert int(table.value["checkpoint"].sum()) == MAX_TENSOR_BYTES


# ------------------------------------------------------------------ item 4: pp above the layer count


def test_item4_designs_view_with_pp_over_the_layers():
    at = make_app(pp="33", vw="designs")
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    assert MESSAGES["link.gpus_raised"].format(key="pp", value="'33'", need=33) in warnings
    assert not [w for w in warnings if "'n'" in w], warnings  # the link has no n
    table = next(df.value for df in at.dataframe if "kv_bytes_per_token" in df.value.columns)
    assert set(table["error"]) == {str(KVPlanError("parallel.pp_layers", pp=33, layers=32))}


# ------------------------------------------------------------------ item 5: FIFOs and devices


def _special(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json", "model.safetensors"])
def test_item5_checkpoint_files_that_are_not_regular(tmp_path, kind, name):
    folder = folder_with(tmp_path, {} if name == "model.safetensors" else
                         {"model.safetensors": GOOD + b"\0" * 4})
    _special(folder / name, kind)
    what = "a pipe" if kind == "fifo" else "a character device"
    err = cli_fails(["fit", "--checkpoint", str(folder), *FIT])
    if name == "model.safetensors":
        assert err == error_line("checkpoint.bad_file", path=clip(folder / name), detail="not a regular file")
    else:
        assert err == error_line("file.not_regular", path=clip(folder / name, 200), kind=what)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_item5_lengths_csv_that_is_not_regular(tmp_path, kind):
    path = tmp_path / "lengths.csv"
    _special(path, kind)
    what = "a pipe" if kind == "fifo" else "a character device"
    err = cli_fails(["recommend", "--model", "llama-2-7b", "--gpus", "h100-sxm", "--lengths-csv", str(path)])
    assert err == error_line("file.not_regular", path=clip(path, 200), kind=what)


def test_item5_lengths_csv_over_the_limit(tmp_path):
    from kvplan.serving import MAX_CSV_BYTES

    path = tmp_path / "lengths.csv"
    path.write_bytes(b"1,1\n" * (MAX_CSV_BYTES // 4 + 1))
    err = cli_fails(["recommend", "--model", "llama-2-7b", "--gpus", "h100-sxm", "--lengths-csv", str(path)])
    assert err == error_line("csv.too_large", size=MAX_CSV_BYTES + 4, limit=MAX_CSV_BYTES)


# ------------------------------------------------------------------ item 6: markup in the weights box


PAYLOADS = ["[sign in](http://evil.test)", "![x](http://evil.test/x.png)", "<img src=x onerror=alert(1)>",
            "**bold**", ":red[alarm]", "http://evil.test", "www.evil.test", "a@evil.test"]


def test_item6_hub_ids_with_markup_are_shown_as_text(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # never reached: the id is refused
    at = open_boxes(make_app(g="h100-sxm"), "w_weights_box")
    for payload in PAYLOADS:
        at.sidebar.text_input(key="w_hf_id").input(payload)
        at.sidebar.button(key="w_hf_go").click()
        at.run()
        no_traceback(at)
        (error,) = at.sidebar.error
        assert_inert(error.value)
        assert not re.search(r"(?<!\\)[<*]|(?<!\\):red", error.value), error.value
        assert unmd(error.value) == str(KVPlanError("hub.bad_id", repo=clip(payload)))


def test_item6_uploaded_file_name_with_markup_is_shown_as_text():
    name = "![x](http://evil.test/x.png).safetensors"
    message = upload_error([(name, b"\1\0")])
    assert message == str(KVPlanError("checkpoint.bad_file", path=clip(name), detail="shorter than 8 bytes"))


# ------------------------------------------------------------------ item 7: the recommend view's CSV error


def _recommend_csv_script(csv: bytes) -> None:
    """The recommend view with an uploaded lengths CSV (the upload itself replaced by its bytes)."""
    from kvplan.scenario import Scenario, scenario_arch, scenario_gpu
    from kvplan.ui import recommend_view

    scenario = Scenario()
    inputs = recommend_view._inputs
    recommend_view._inputs = lambda s, a: (inputs(s, a)[0], csv)  # type: ignore[assignment]
    try:
        recommend_view.render(scenario, scenario_arch(scenario), scenario_gpu(scenario))
    finally:
        recommend_view._inputs = inputs  # type: ignore[assignment]


def test_item7_recommend_csv_error_is_shown_as_text():
    from kvplan.serving import parse_lengths_csv

    csv = b"prompt,output\n![a](http://e.vl/i),5\n"
    at = AppTest.from_function(_recommend_csv_script, args=(csv,), default_timeout=60)
    at.run()
    no_traceback(at)
    (error,) = at.error
    assert_inert(error.value)
    with pytest.raises(KVPlanError) as info:
        parse_lengths_csv(csv)
    assert unmd(error.value) == str(info.value)


# ------------------------------------------------------------------ item 8: shard names leaving the repo


@pytest.mark.parametrize("shard", ["../../../other/repo/resolve/main/x.safetensors", "/etc/x.safetensors",
                                   "sub/x.safetensors", "..safetensors", "x.safetensors\n", 7,
                                   "model.bin"])
def test_item8_index_shard_names_must_be_plain_file_names(tmp_path, monkeypatch, shard):
    index = {"metadata": {"total_size": 4}, "weight_map": {"w": shard}}
    monkeypatch.setenv("HF_TOKEN", "secret-token")
    with hostile_hub(hub_routes(index)) as (endpoint, log):
        problem = hub_problem(monkeypatch, endpoint)
    assert problem == str(KVPlanError("checkpoint.bad_shard", path="model.safetensors.index.json",
                                      name=short(shard, 60)))
    assert [entry["path"].rsplit("/", 1)[-1] for entry in log] == ["config.json",
                                                                    "model.safetensors.index.json"]
    # the same index in a local folder is refused before any header is read
    folder = folder_with(tmp_path, {"model.safetensors": GOOD + b"\0" * 4,
                                    "model.safetensors.index.json": json.dumps(index)})
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.bad_shard", path=clip(folder / "model.safetensors.index.json"), name=short(shard, 60))


# ------------------------------------------------------------------ item 9: shard count, header bytes, time


def test_item9_index_of_10000_shards_is_refused_before_any_header(monkeypatch):
    index = {"weight_map": {f"t{i}": f"model-{i:05d}.safetensors" for i in range(10_000)}}
    with hostile_hub(hub_routes(index)) as (endpoint, log):
        start = time.monotonic()
        problem = hub_problem(monkeypatch, endpoint)
        assert time.monotonic() - start < 30
    assert problem == str(KVPlanError("hub.too_many_shards", repo="org/x", count="10,000",
                                      limit=hub.MAX_SHARDS))
    assert len(log) == 2  # config.json and the index, nothing else


def test_item9_header_over_the_byte_limit_is_refused_after_one_range(monkeypatch):
    big = struct.pack("<Q", MAX_READ_HEADER_BYTES + 1) + b"{" * 100
    with hostile_hub(hub_routes(None, {"model.safetensors": big})) as (endpoint, log):
        problem = hub_problem(monkeypatch, endpoint)
    assert problem == str(KVPlanError("hub.header_too_large", repo="org/x", name="model.safetensors",
                                      size=MAX_READ_HEADER_BYTES + 1, limit=MAX_READ_HEADER_BYTES))
    shard_requests = [e for e in log if e["path"].endswith("/model.safetensors")]
    assert [e["range"] for e in shard_requests] == [f"bytes=0-{hub.FIRST_RANGE}"]


def test_item9_headers_over_the_total_limit(monkeypatch):
    """The fetch's header budget (``MAX_TOTAL_HEADER_BYTES``, lowered here to under two headers)."""
    assert hub.MAX_TOTAL_HEADER_BYTES == MAX_TOTAL_HEADER_BYTES
    monkeypatch.setattr(hub, "MAX_TOTAL_HEADER_BYTES", 2 * len(GOOD) - 1)
    shards = {f"m{i}.safetensors": GOOD + b"\0" * 4 for i in range(3)}
    index = {"weight_map": {f"w{i}": name for i, name in enumerate(shards)}}
    with hostile_hub(hub_routes(index, shards)) as (endpoint, log):
        problem = hub_problem(monkeypatch, endpoint)
    assert problem == str(KVPlanError("checkpoint.headers_too_large", limit=2 * len(GOOD) - 1))
    assert [e["path"].rsplit("/", 1)[-1] for e in log][2:] == ["m0.safetensors", "m1.safetensors"]


def test_item9_fetch_has_a_total_time_limit(monkeypatch):
    monkeypatch.setattr(hub, "DEADLINE_S", 2.0)
    shards = {f"m{i}.safetensors": GOOD + b"\0" * 4 for i in range(50)}
    index = {"weight_map": {f"w{i}": name for i, name in enumerate(shards)}}
    with hostile_hub(hub_routes(index, shards), delay_s=0.2) as (endpoint, log):
        start = time.monotonic()
        problem = hub_problem(monkeypatch, endpoint)
        elapsed = time.monotonic() - start
    assert problem == str(KVPlanError("hub.timeout", repo="org/x", limit="2"))
    assert elapsed < 8 and len(log) <= 12, (elapsed, len(log))  # 2 s / 0.2 s + 1


def test_item9_token_goes_only_to_the_endpoint_host_never_across_redirects(monkeypatch):
    """The token is sent on the first request of each file to the configured host; a redirect
    (to another port of 127.0.0.1, or back to the same server) never carries it."""
    with hostile_hub({"model.safetensors": GOOD + b"\0" * 4}) as (other, other_log):
        routes = hub_routes({"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}}, {
            "a.safetensors": (302, {"Location": f"{other}/cdn/resolve/main/model.safetensors"}),
            "b.safetensors": (307, {"Location": "/org/x/resolve/main/c.safetensors"}),
            "c.safetensors": header({"v": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})
            + b"\0" * 4})
        with hostile_hub(routes) as (endpoint, log):
            monkeypatch.setenv("HF_TOKEN", "secret-token")
            monkeypatch.setenv("HF_ENDPOINT", endpoint)
            with within(60):
                code, out, err = run_cli(["fit", "--hf-id", "org/x", *FIT, "--json"])
    assert code == 0, err
    assert json.loads(out)["checkpoint"]["total_bytes"] == 8
    first = {e["path"].rsplit("/", 1)[-1]: e["authorization"] for e in log
             if not e["path"].endswith("/c.safetensors")}
    assert first == {"config.json": "Bearer secret-token",
                     "model.safetensors.index.json": "Bearer secret-token",
                     "a.safetensors": "Bearer secret-token", "b.safetensors": "Bearer secret-token"}
    redirected = [e for e in log if e["path"].endswith("/c.safetensors")] + other_log
    assert redirected and all(e["authorization"] is None for e in redirected), redirected


def test_item9_redirect_loops_and_other_schemes_are_refused(monkeypatch):
    loop = (302, {"Location": "/org/x/resolve/main/model.safetensors"})
    routes = hub_routes(None, {"model.safetensors": loop})
    with hostile_hub(routes) as (endpoint, log):
        assert hub_problem(monkeypatch, endpoint) == str(KVPlanError(
            "hub.unavailable", repo="org/x",
            detail=f"model.safetensors: more than {hub.MAX_REDIRECTS} redirects"))
    assert len(log) == 3 + hub.MAX_REDIRECTS  # config.json, the index (404), 1 + 5 hops
    routes = hub_routes(None, {"model.safetensors": (302, {"Location": "file:///etc/passwd"})})
    with hostile_hub(routes) as (endpoint, _):
        assert hub_problem(monkeypatch, endpoint) == str(KVPlanError(
            "hub.unavailable", repo="org/x", detail="model.safetensors: redirect to a non-HTTP address"))


# ------------------------------------------------------------------ item 10: CPU per rerun and per read


def test_item10_upload_file_count_is_limited_before_parsing(monkeypatch):
    from kvplan.ui import weights_view

    parsed: list[str] = []
    monkeypatch.setattr(weights_view, "parse_header", lambda raw, name: parsed.append(name))
    files = [Upload(f"m{i}.safetensors", GOOD) for i in range(MAX_UPLOAD_FILES + 1)]
    with pytest.raises(KVPlanError) as info:
        weights_view.read_uploads(files)
    assert str(info.value) == str(KVPlanError("checkpoint.too_many_uploads",
                                              count=f"{MAX_UPLOAD_FILES + 1:,}", limit=MAX_UPLOAD_FILES))
    assert parsed == []
    assert upload_error([(f.name, f.getvalue()) for f in files]) == str(info.value)


def test_item10_upload_header_bytes_are_limited_before_parsing():
    """Three headers just under Streamlit's 2 MB upload limit: 6 MB > the 4 MB per upload."""
    size = 1_999_000
    big = struct.pack("<Q", size) + b" " * size
    message = upload_error([(f"m{i}.safetensors", big) for i in range(3)])
    assert message == str(KVPlanError("checkpoint.uploads_too_large", size=3 * (size + 8),
                                      limit=MAX_UPLOAD_HEADER_BYTES))


def test_item10_checkpoint_header_limits(tmp_path, monkeypatch):
    """One header over 16 MB is refused by its length (no byte of it parsed); a folder whose
    headers pass the total is refused before any header is parsed."""
    folder = folder_with(tmp_path, {})
    with open(folder / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", MAX_READ_HEADER_BYTES + 1))
        handle.truncate(MAX_READ_HEADER_BYTES + 100)
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.header_too_large", path=clip(folder / "model.safetensors"),
        size=MAX_READ_HEADER_BYTES + 1, limit=MAX_READ_HEADER_BYTES)
    (folder / "model.safetensors").unlink()
    for i in range(3):
        (folder / f"m{i}.safetensors").write_bytes(GOOD + b"\0" * 4)
    monkeypatch.setattr(checkpoint, "MAX_TOTAL_HEADER_BYTES", 2 * len(GOOD) + 1)
    parsed: list[str] = []
    real = checkpoint.parse_header
    monkeypatch.setattr(checkpoint, "parse_header", lambda raw, name: parsed.append(name) or real(raw, name))
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.headers_too_large", limit=2 * len(GOOD) + 1)
    assert parsed == []


# ------------------------------------------------------------------ item 11: nothing accepted silently


def test_item11_index_naming_a_missing_shard(tmp_path):
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors",
                            "c": "model-3.safetensors"}}
    folder = folder_with(tmp_path, {"model-1.safetensors": GOOD + b"\0" * 4,
                                    "model.safetensors.index.json": json.dumps(index)})
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.missing_shard", path=clip(folder / "model.safetensors.index.json"),
        name="model-2.safetensors", count="2")


def test_item11_folder_over_the_file_limit_is_refused_not_cut(tmp_path):
    folder = folder_with(tmp_path, {})
    for i in range(MAX_FILES + 1):
        (folder / f"{i:06d}.safetensors").touch()
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.too_many_files", path=clip(folder), limit=MAX_FILES)


@pytest.mark.parametrize("offsets", [[-4, 0], [0.0, 4.0], [0, 4.5], [4, 0], [True, 5], [0, 1 << 64]])
def test_item11_data_offsets_must_be_whole_and_ordered(tmp_path, offsets):
    bad = header({"w": {"dtype": "F16", "shape": [2], "data_offsets": offsets}})
    folder = folder_with(tmp_path, {"model.safetensors": bad + b"\0" * 4})
    assert cli_fails(["fit", "--checkpoint", str(folder), *FIT]) == error_line(
        "checkpoint.bad_file", path=clip(folder / "model.safetensors"),
        detail="tensor w: data_offsets must be two whole numbers 0 ≤ begin ≤ end")


def test_item11_dtype_aliases_in_the_link_are_shown():
    at = make_app(wd="int4", kd="fp8,bfloat16")
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    for key, value, canonical in (("wd", "int4", "int4_g128"), ("kd", "fp8", "fp8_e4m3"),
                                  ("kd", "bfloat16", "bf16")):
        assert MESSAGES["link.alias"].format(key=key, value=f"'{value}'", canonical=canonical) in warnings
    assert at.query_params["wd"] == "int4_g128"
    _, warnings = scenario_from_query({"kd": "bf16,fp8,fp8_e4m3"}, strict=False)
    assert warnings == [MESSAGES["link.alias"].format(key="kd", value="'fp8'", canonical="fp8_e4m3"),
                        MESSAGES["link.bad_value"].format(key="kd", value="'fp8_e4m3'",
                                                          why="fp8_e4m3 is already listed")]


@pytest.mark.parametrize("text", ["٣", "1_000", "５", "inf", "0x10"])
def test_item11_sv_numbers_are_ascii_as_top_level_keys(text):
    at = make_app(vw="serving", sv=f"n:{text}", gm=text)
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    for start in (f"link parameter 'sv:n'={clip(text)} was not used: ",
                  f"link parameter 'gm'={short(text, 40)} was not used: "):
        assert any(w.startswith(start) for w in warnings), (start, warnings)


def test_item11_repeated_link_keys_are_refused():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params.update({"t": ["5000", "6000"], "u": "3"})
    at.run()
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    assert MESSAGES["link.repeated"].format(key="t", count=2) in warnings
    assert at.query_params.get("t") is None and at.query_params["u"] == "3"
    # scenario files and pasted links refuse it the same way
    scenario, warnings = scenario_from_query(parse_link("?t=5000&t=6000&u=3"), strict=False)
    assert warnings == [MESSAGES["link.repeated"].format(key="t", count=2)] and scenario.users == 3
    with pytest.raises(KVPlanError) as info:
        scenario_from_query(parse_link("?t=5000&t=6000&u=3"))
    assert str(info.value) == str(KVPlanError("scenario.invalid", detail=warnings[0]))


# item 11's log number (1e309 in a vLLM log) moves with the log parsers (engine-io): not here.


# ------------------------------------------------------------------ acceptance: markup in kvplan/ui


#: Streamlit calls whose text is rendered as Markdown.
MARKDOWN_CALLS = {"error", "warning", "info", "success", "markdown", "caption", "toast", "write",
                  "exception", "expander", "subheader", "header", "title"}
#: Functions whose result is safe Markdown: md() escapes user text, md_name() passes identifiers,
#: md_code() makes a code span,
#: md_link_target() keeps only ``?query`` targets; the others format numbers.
SAFE_CALLS = {"md", "md_name", "md_code", "md_link_target", "plural", "exact_bytes", "fmt_bytes",
              "len", "int"}
#: Attributes that hold kvplan's own text, never a user's: the engine's label
#: (``kvplan.engines`` ``Engine.label`` through ``FitResult.engine_label``).
TRUSTED_ATTRIBUTES = {"engine_label"}


def _numeric_spec(spec: ast.JoinedStr) -> bool:
    """``{x:,}``, ``{x:.1f}``, ``{x:d}``, ``{x:g}``: a format a string refuses (ValueError)."""
    text = "".join(v.value for v in spec.values if isinstance(v, ast.Constant))
    return "," in text or text.endswith(tuple("dfFgGeE%n"))


class _Scope:
    """What each local name of one top-level function or class is assigned (``x = …``, ``x += …``,
    ``x.append(…)``): a name is safe when every value it is given is."""

    def __init__(self, tree: ast.AST) -> None:
        self.values: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.values.setdefault(target.id, []).append(node.value)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    self.values.setdefault(node.target.id, []).append(node.value)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "append" and isinstance(node.func.value, ast.Name)):
                self.values.setdefault(node.func.value.id, []).append(ast.List(elts=list(node.args)))

    def safe(self, node: ast.AST, seen: frozenset[str] = frozenset()) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        if isinstance(node, ast.JoinedStr):
            return all(not isinstance(v, ast.FormattedValue)
                       or (v.format_spec is not None and _numeric_spec(v.format_spec))
                       or self.safe(v.value, seen) for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.safe(node.left, seen) and self.safe(node.right, seen)
        if isinstance(node, ast.IfExp):
            return self.safe(node.body, seen) and self.safe(node.orelse, seen)
        if isinstance(node, ast.BoolOp):
            return all(self.safe(v, seen) for v in node.values)
        if isinstance(node, ast.Attribute) and node.attr in TRUSTED_ATTRIBUTES:
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            return node.value.id.isupper()  # an entry of a module constant: kvplan's own text
        if isinstance(node, (ast.List, ast.Tuple)):
            return all(self.safe(e, seen) for e in node.elts)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            return self.safe(node.elt, seen)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in SAFE_CALLS:
                return True
            if isinstance(func, ast.Attribute) and func.attr == "join" and len(node.args) == 1:
                return self.safe(func.value, seen) and self.safe(node.args[0], seen)
            return False
        if isinstance(node, ast.Name):
            if node.id.isupper():  # a module constant
                return True
            if node.id in seen or node.id not in self.values:
                return False
            return all(self.safe(v, seen | {node.id}) for v in self.values[node.id])
        return False


def unescaped_markdown(source: str, name: str) -> list[str]:
    """``name:line: call`` for each Markdown-rendering call whose text is not provably escaped
    (``md``…) or kvplan's own constants and numbers."""
    found = []
    for stmt in ast.parse(source).body:
        scope = _Scope(stmt)
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MARKDOWN_CALLS and node.args
                    and not scope.safe(node.args[0])):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)[:120]}")
    return found


def test_no_unescaped_text_reaches_markdown_in_the_ui():
    found = [line for path in sorted((ROOT / "kvplan" / "ui").glob("*.py"))
             for line in unescaped_markdown(path.read_text(encoding="utf-8"), path.name)]
    assert found == []


@pytest.mark.parametrize("call", [
    "st.error(str(err))", "st.warning(f'Does not fit: {err}.')", "sb.error(st.session_state.pop('e'))",
    "st.markdown(f'**{best[\"gpu\"]}**')", "st.caption(' '.join(notes))",
    "st.error(message)\nmessage = str(err)", "st.caption(f'TP {scenario.tp}')"])
def test_the_markup_scan_finds_unescaped_text(call):
    assert unescaped_markdown(f"def view():\n    {call.replace(chr(10), chr(10) + '    ')}\n", "x.py")


@pytest.mark.parametrize("call", [
    "st.error(md(str(err)))", "st.caption(f'TP {scenario.tp:d} · {n:,} tokens · {md(name)}')",
    "lines = ['a']\nlines.append(md(x))\nst.caption('  \\n'.join(lines))", "st.info(MESSAGES['x'])"])
def test_the_markup_scan_accepts_escaped_text(call):
    assert unescaped_markdown(f"def view():\n    {call.replace(chr(10), chr(10) + '    ')}\n", "x.py") == []
