"""Issue #16 in a real browser: the answer first, on the first screen at 1440×900 and 390×844, with
the KV dtypes side by side, the model's context limit, scope labels, the design and serving views
and the parallelism suggestions — each asserted on what the page shows."""

from __future__ import annotations

import base64
import re

import pytest
from playwright.sync_api import Page, expect

from kvplan.ui.chart_slot import TOGGLE_LABEL

pytestmark = pytest.mark.browser

IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LOAD_MS = 60_000
ANSWER = ".st-key-answer"
#: Every Plotly chart's layout: title, axis types and ranges, annotation texts.
LAYOUTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({
  title: (el._fullLayout.title || {}).text || '',
  yaxis: {type: el._fullLayout.yaxis.type, range: el._fullLayout.yaxis.range},
  annotations: (el._fullLayout.annotations || []).map(a => a.text),
}))"""


#: True once no element waits for its renderer's JS chunk: until then Streamlit draws a skeleton of
#: its own height (a metric's is 40 px, the metric 118 px at 390 px wide), so a box measured at idle
#: alone was 520 or 718 px tall by how far the chunks had loaded (bench/browser.py NO_SKELETON_JS).
NO_SKELETON_JS = """() => !document.querySelector('[data-testid="stSkeleton"]')"""


def _open(page: Page, url: str) -> None:
    """Load ``url``: the answer shown, the script idle and every element drawn (no skeleton)."""
    page.goto(url)
    expect(page.locator(ANSWER)).to_be_visible(timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    page.wait_for_function(NO_SKELETON_JS, timeout=LOAD_MS, polling="raf")


def _on_first_screen(page: Page, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    height = page.viewport_size["height"]
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height, (box, height)


def _layouts(page: Page) -> list[dict]:
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length > 0",
                           timeout=LOAD_MS)
    return page.evaluate(LAYOUTS_JS)


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
def test_answer_is_first_and_on_the_first_screen(page: Page, app_url: str, size) -> None:
    """Items 2, 4, 9: the answer card comes before the key numbers, fits on the first screen at
    desktop and phone width, shows each chosen KV dtype, and the title stays on one line."""
    page.set_viewport_size({"width": size[0], "height": size[1]})
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&g=h100-sxm&n=8&tp=8&t=32768&u=64"
                          "&kd=bf16,fp8_e4m3,fp16")
    _on_first_screen(page, ANSWER)
    answer = page.locator(ANSWER)
    metrics = answer.get_by_test_id("stMetric")
    expect(metrics).to_have_count(3, timeout=LOAD_MS)
    # Llama-3.1-70B, TP 8 on H100s at 32,768 tokens: budget ceil(85,027,979,264 × 0.92) =
    # 78,225,740,923 − weights 17,640,734,720 − reserve 2,435,161,292 (sampler 1,024 × 128,256 × 10
    # B = 1,313,341,440; non-torch at TP > 1 590,558,003; graphs 51 × 10,416,899 = 531,261,849) =
    # 58,149,844,911 B: bf16/fp16 blocks of 655,360 B → 88,729 → 88,728 // 2,048 = 43 requests;
    # fp8 blocks of 327,680 B → 177,459 → 86
    for index, (dtype, value) in enumerate((("bf16", "43"), ("fp8_e4m3", "86"), ("fp16", "43"))):
        expect(metrics.nth(index)).to_contain_text(f"{dtype} KV")
        expect(metrics.nth(index).get_by_test_id("stMetricValue")).to_have_text(value)
    expect(answer).to_contain_text("Does not fit (bf16)")
    expect(answer).to_contain_text("KV fp8_e4m3 (fits 86)")
    first_kpi = page.get_by_test_id("stMetric").filter(has_text="KV bytes per token").bounding_box()
    assert first_kpi is not None and first_kpi["y"] > answer.bounding_box()["y"]
    title = page.get_by_text("kvplan · KV-cache planner").bounding_box()
    assert title is not None and title["height"] < 50, title  # one line
    if size[0] == 1440:  # side by side on desktop
        boxes = [metrics.nth(i).bounding_box() for i in range(3)]
        assert len({round(b["y"]) for b in boxes}) == 1, boxes


def test_context_limit_is_flagged_and_drawn(page: Page, app_url: str) -> None:
    """Item 1: Llama-2-7B allows 4,096 positions; 32,768 tokens on an H200 do not fit, the
    warning names vLLM's override, and the KV-vs-context chart carries the limit line."""
    _open(page, app_url + "/?v=1&m=llama-2-7b&g=h200&t=32768&u=1")
    answer = page.locator(ANSWER)
    expect(answer).to_contain_text("exceed the model's context limit of 4,096 "
                                   "(max_position_embeddings 4,096; vLLM v0.33 _get_and_verify_max_len)")
    expect(answer).to_contain_text("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    expect(answer).to_contain_text("use at most 4,096 tokens per request")
    # first drawn as a static SVG image (kvplan/ui/chart_slot.py): the same title and limit line
    src = page.locator(".st-key-static_chart_kv_context img").get_attribute("src", timeout=LOAD_MS)
    svg = base64.b64decode(src.split(",", 1)[1]).decode()
    assert ">KV cache of 1 request(s) vs context</tspan>" in svg and ">model limit 4,096</tspan>" in svg
    page.get_by_text(TOGGLE_LABEL, exact=True).click()  # then the interactive chart's layout
    chart = _layouts(page)[0]
    assert chart["title"].replace("<br>", " ").startswith("KV cache of 1 request(s) vs context length"), chart
    assert "model limit 4,096" in chart["annotations"], chart


def test_scope_labels(page: Page, app_url: str) -> None:
    """Item 3: every figure says per GPU, per replica or whole model."""
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&g=h100-sxm&n=8&tp=8&t=32768&u=8")
    wanted = ("KV bytes per token (whole model)", "KV per request at 32,768 tokens (per GPU)",
              "Weights per GPU", "KV budget per GPU", "Max concurrent requests per replica",
              "Max context at 8 users (per replica)")
    for label in wanted:
        expect(page.get_by_test_id("stMetric").filter(has_text=label)).to_have_count(1, timeout=LOAD_MS)
    expect(page.get_by_text("one TP rank of 8")).to_be_visible()


def test_designs_use_real_head_dims_and_state_mla_replication(page: Page, app_url: str) -> None:
    """Item 5: DeepSeek-V3 as dense MHA = 61 × 128 × (192 + 128) × 2 B = 4,997,120 B/token."""
    _open(page, app_url + "/?v=1&m=deepseek-v3&g=h200&n=8&tp=8&t=4096&u=1&kd=bf16&vw=designs")
    expect(page.get_by_text(re.compile(r"Dense MHA 4,997,120 B"))).to_be_visible(timeout=LOAD_MS)
    expect(page.get_by_text(re.compile(r"MLA is replicated 8×"))).to_be_visible()
    expect(page.get_by_text(re.compile(r"DP-attention"))).to_be_visible()


def test_serving_view_honours_its_inputs_and_sane_axes(page: Page, app_url: str) -> None:
    """Item 6: the allocation chart is for the scenario's model, block size and maximum length from
    the link; the decode-time chart's log axis spans the data, not 10^198."""
    _open(page, app_url + "/?v=1&m=qwen3-8b&t=8192&u=4&vw=serving&sv=block:256;max_len:4096")
    # the view draws several charts; wait for the allocation chart itself (the others may render first)
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot')).some("
        "el => (el._fullLayout.title.text || '').startsWith('KV memory used vs reserved'))",
        timeout=LOAD_MS)
    title = next(c["title"] for c in _layouts(page) if c["title"].startswith("KV memory used vs reserved"))
    assert "Qwen3-8B" in title and "block 256" in title and "max length 4,096" in title, title
    page.get_by_text("6 · Decode / prefill lower bounds vs MLPerf").click()
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot')).some("
        "el => (el._fullLayout.title.text || '').startsWith('Time per output token'))", timeout=LOAD_MS)
    roofline = next(c for c in _layouts(page) if c["title"].startswith("Time per output token"))
    low, high = roofline["yaxis"]["range"]
    assert roofline["yaxis"]["type"] == "log" and -3 < low < high < 5, roofline["yaxis"]


def test_parallelism_messages_name_the_smallest_change(page: Page, app_url: str) -> None:
    """Item 7: 70B on 8 GPUs with TP=1 → set TP=4 (TP=2 holds the weights but not one 32K request:
    tests/test_answer.py derives it); TP=8 on 1 GPU → use 8 GPUs."""
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&g=h100-sxm&n=8&tp=1&t=32768&u=1")
    expect(page.locator(ANSWER)).to_contain_text("set TP=4 (your 8 GPUs allow it; 2 replica(s))")
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&g=h100-sxm&n=1&tp=1&t=32768&u=1")
    expect(page.locator(ANSWER)).to_contain_text("use 4 GPUs with TP=4")
    tp = page.get_by_role("spinbutton", name="TP", exact=True)
    tp.fill("8")
    tp.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]tp=8(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    expect(page.locator(ANSWER)).to_contain_text("use 8 GPUs", timeout=LOAD_MS)
