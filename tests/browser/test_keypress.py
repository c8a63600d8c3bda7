"""Issue #33's keypress in a real browser: a change of the context length reruns only app.py's
fragment, so the browser is sent (and redraws) none of the model-and-hardware inputs, lazy boxes
or view tabs; a callback inside the fragment that changes one of those inputs (a named scenario)
still redraws the whole page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from kvplan.presets import gpus, model_presets
from kvplan.report import named_scenario, named_scenarios

pytestmark = pytest.mark.browser

IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LOAD_MS = 60_000
#: Text of the caption that starts with "Exact:" (kvplan/ui/views.py render_kpis).
EXACT_JS = """() => [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
  .map(el => el.innerText.trim()).find(text => text.startsWith('Exact:')) || null"""
#: The inputs drawn outside the fragment (kvplan/ui/sidebar.py render_model_and_hardware).
OUTER_LABELS = {"Model preset", "Serving engine", "KV-cache dtype(s) — the first one drives the KPIs",
                "Weight dtype", "Accelerator", "GPUs", "TP", "PP"}


def _deltas(frames: list[bytes]) -> list[tuple[str, str]]:
    """(element or block type, label) of each delta the server sent in ``frames``."""
    out = []
    for raw in frames:
        msg = ForwardMsg()
        msg.ParseFromString(raw)
        if msg.WhichOneof("type") != "delta":
            continue
        delta = msg.delta
        if delta.WhichOneof("type") == "new_element":
            kind = delta.new_element.WhichOneof("type")
            out.append((kind, getattr(getattr(delta.new_element, kind), "label", "")))
        elif delta.WhichOneof("type") == "add_block":
            out.append((delta.add_block.WhichOneof("type") or "vertical", ""))
    return out


def test_keypress_sends_only_the_fragments_elements(page: Page, app_url: str) -> None:
    frames: list[bytes] = []
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda payload: frames.append(payload if isinstance(payload, bytes)
                                                       else payload.encode())))
    page.goto(app_url)
    page.wait_for_function(EXACT_JS, timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    first = _deltas(frames)
    assert {label for _, label in first} >= OUTER_LABELS  # the full run draws everything
    assert ("tab_container", "") in first and sum(kind == "expandable" for kind, _ in first) == 10
    slider = page.get_by_role("slider", name="Context length")
    for key in ("ArrowRight", "ArrowLeft"):
        before = page.evaluate(EXACT_JS)
        frames.clear()
        slider.focus()
        page.keyboard.press(key)
        page.wait_for_function(f"() => ({EXACT_JS})() !== {before!r}".replace("\n", " "),
                               timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        sent = _deltas(frames)
        labels = {label for _, label in sent}
        assert not labels & OUTER_LABELS, labels & OUTER_LABELS
        assert {"Context length (tokens, log scale)", "Exact context length (tokens)",
                "Concurrent users (requests)"} <= labels
        kinds = [kind for kind, _ in sent]
        # no lazy box (10 on the page), no view tabs: full runs draw them, the fragment fills them
        assert "expandable" not in kinds and "tab_container" not in kinds and "tab" not in kinds, kinds


def test_named_scenario_inside_the_fragment_redraws_the_sidebar(page: Page, app_url: str) -> None:
    """A seed button lives in a lazy box the fragment fills; its callback sets the model and the
    accelerator, drawn outside the fragment: the whole page is drawn again with them."""
    seed = next(sid for sid in named_scenarios() if named_scenario(sid).model != "llama-3.1-8b")
    scenario = named_scenario(seed)
    page.goto(app_url)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    page.get_by_text("Named scenarios: the seed figures and planning classics").click()
    button = page.locator(f".st-key-seed_{seed}").get_by_role("button")
    button.click()
    expect(page).to_have_url(re.compile(rf"[?&]m={re.escape(scenario.model)}(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    preset = model_presets()[scenario.model]
    expect(page.get_by_role("combobox", name="Model preset")).to_have_value(
        re.compile(rf"^{re.escape(preset.hf_repo)}\b"), timeout=LOAD_MS)
    expect(page.get_by_role("combobox", name="Accelerator")).to_have_value(gpus()[scenario.gpu].name)
    expect(page.get_by_role("spinbutton", name="Exact context length (tokens)")).to_have_value(
        str(scenario.tokens))
