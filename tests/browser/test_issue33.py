"""Issue #33 in a real browser at 1440×900 and on a 390×844 phone: a bad link answers nothing and
keeps the URL (item 1), the context chart compares what the engine reserves with the budget
(item 2), the serving view's lengths follow the context and stay out of the link (item 5), and no
legend covers a title (bounding boxes) with one colour per accelerator (item 6)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from kvplan.ui.chart_slot import TOGGLE_LABEL

pytestmark = pytest.mark.browser

IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LOAD_MS = 60_000
SIZES = [(1440, 900), (390, 844)]
GIB = 1 << 30

#: Per chart: the legend's, the title's and the axis titles' boxes, and the chart's own box.
BOXES_JS = """(key) => {
  const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  if (!el) return null;
  const box = (node) => { if (!node) return null; const r = node.getBoundingClientRect();
    return (r.width && r.height) ? {x: r.left, y: r.top, w: r.width, h: r.height} : null; };
  return {chart: box(el), legend: box(el.querySelector('.legend')),
          title: box(el.querySelector('.gtitle')), xtitle: box(el.querySelector('.g-xtitle')),
          ytitle: box(el.querySelector('.g-ytitle')),
          colors: el._fullData.filter(t => t.mode === 'markers' && t.marker && t.marker.color)
                         .map(t => [t.name, t.marker.color])};
}"""


def _open(page: Page, url: str, size: tuple[int, int]) -> None:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)


def _overlap(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return False
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def _interactive(page: Page) -> None:
    """Turn on "Interactive chart" under a view's static first chart (kvplan/ui/chart_slot.py)."""
    page.get_by_text(TOGGLE_LABEL, exact=True).click()
    page.wait_for_selector('[data-testid="stPlotlyChart"]', timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)


def _chart_boxes(page: Page, key: str) -> dict:
    page.wait_for_function(f"() => document.querySelector('.st-key-{key} .js-plotly-plot .legend')",
                           timeout=LOAD_MS)
    return page.evaluate(BOXES_JS, key)


@pytest.mark.parametrize("size", SIZES)
def test_bad_link_answers_nothing_and_keeps_the_link(page: Page, app_url: str, size) -> None:
    link = "/?v=1&m=llama-3.1-70x&t=-5&u=abc&g=h100"
    _open(page, app_url + link, size)
    error = page.get_by_test_id("stAlertContentError").first
    expect(error).to_contain_text("This link asks for the model llama-3.1-70x, which is not a model "
                                  "preset here. Closest: llama-3.1-70b, llama-3.1-405b, llama-3.1-8b.")
    expect(error).to_contain_text("asks for the accelerator h100, which is not an accelerator here")
    assert page.get_by_test_id("stMetric").count() == 0
    assert page.get_by_text(re.compile(r"^Fits")).count() == 0
    assert page.url.endswith(link), page.url
    assert error.get_by_role("link", name="llama-3.1-70b").get_attribute("href") == (
        "?v=1&m=llama-3.1-70b&t=-5&u=abc&g=h100")


@pytest.mark.parametrize("size", SIZES)
def test_context_chart_solid_line_is_what_the_engine_reserves(page: Page, app_url: str, size) -> None:
    """Gemma-3-27B at 131,072 tokens under vLLM v0.33: the card's 17.98 GiB and the solid line agree
    (18,878,300,160 B reserved vs 10,757,079,040 B held at the grid's 125,893 tokens)."""
    _open(page, app_url + "/?v=1&m=gemma-3-27b&t=131072&u=1&sk=1&ev=0.33", size)
    page.wait_for_function("() => document.querySelector('.st-key-chart_kv_context .js-plotly-plot')",
                           timeout=LOAD_MS)
    traces = page.evaluate("""() => document.querySelector('.st-key-chart_kv_context .js-plotly-plot')
        ._fullData.map(t => ({name: t.name, dash: (t.line || {}).dash, x: Array.from(t.x || []),
                         y: Array.from(t.y || [])}))""")
    by_name = {t["name"]: t for t in traces}
    reserved, held = by_name["bf16 reserved"], by_name["bf16 held"]
    assert reserved["dash"] == "dash" and held["dash"] == "dot"  # stacked by kind (sk=1)
    at = reserved["x"].index(125893)
    assert reserved["y"][at] == pytest.approx(18_878_300_160 / GIB)
    assert held["y"][at] == pytest.approx(10_757_079_040 / GIB)
    assert max(reserved["x"]) == 1_000_000  # the axis ends past the 131,072-token limit, not at 10M


@pytest.mark.parametrize("size", SIZES)
def test_serving_lengths_follow_the_context_and_stay_out_of_the_link(page: Page, app_url: str,
                                                                     size) -> None:
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&n=2&tp=2&t=8192&u=32", size)
    if size[0] < 600:  # the phone starts with the sidebar closed
        page.get_by_test_id("stExpandSidebarButton").click()
    tokens = page.get_by_role("spinbutton", name="Exact context length (tokens)")
    tokens.fill("65536")
    tokens.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]t=65536(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    if size[0] < 600:
        page.get_by_test_id("stSidebarCollapseButton").locator("button").click()
    for name, view in (("Serving trade-offs", "serving"), ("Recommend a deployment", "recommend"),
                       ("KV vs context", None)):
        page.get_by_role("tab", name=name).click()
        expect(page).to_have_url(re.compile(rf"[?&]vw={view}(&|$)") if view else
                                 re.compile(r"^(?!.*vw=)"), timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        if view == "serving":
            length = page.get_by_role("spinbutton", name="Maximum length (tokens)").first
            expect(length).to_have_value("65536")
        assert "sv=" not in page.url, page.url


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("link", "key"), [
    ("/?v=1&m=llama-3.1-70b&n=2&tp=2&t=8192&u=32&vw=memory", "chart_memory"),
    ("/?v=1&m=llama-3.1-70b&n=2&tp=2&t=8192&u=32&kd=bf16,fp8_e4m3", "chart_kv_context"),
    ("/?v=1&m=llama-3.1-8b&t=4096&u=16&vw=recommend", "chart_recommend"),
])
def test_no_legend_covers_a_title(page: Page, app_url: str, size, link: str, key: str) -> None:
    _open(page, app_url + link, size)
    if key == "chart_kv_context":  # drawn as a static image first: the interactive chart's boxes
        _interactive(page)
    boxes = _chart_boxes(page, key)
    chart = boxes["chart"]
    for name in ("title", "xtitle", "ytitle"):
        assert not _overlap(boxes["legend"], boxes[name]), (name, boxes)
    assert not _overlap(boxes["title"], boxes["ytitle"]), boxes
    title = boxes["title"]
    assert title["x"] >= chart["x"] - 1 and title["x"] + title["w"] <= chart["x"] + chart["w"] + 1, boxes
    if key == "chart_recommend":
        colors = dict(boxes["colors"])
        assert len(colors) >= 2 and len(set(colors.values())) == len(colors), colors


def test_ctrl_enter_in_the_paste_box_uses_the_config(page: Page, app_url: str) -> None:
    """Item 9: Ctrl+Enter alone (no button) makes the pasted config the model; the page keeps
    working after it (a context change re-answers for the pasted model)."""
    import json

    config = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
              "name": "pasted-tiny"}
    _open(page, app_url + "/?v=1&t=4096", (1440, 900))
    sidebar = page.get_by_test_id("stSidebar")
    box = sidebar.get_by_test_id("stExpander").filter(has_text="Use your own config.json")
    box.get_by_text("Use your own config.json").click()
    area = box.get_by_role("textbox")
    area.fill(json.dumps(config))
    area.press("Control+Enter")
    expect(page).to_have_url(re.compile(r"[?&]m=custom(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    header = page.get_by_test_id("stMarkdownContainer").filter(has_text=" on 1 GPU × ").first
    expect(header).to_contain_text("pasted-tiny")
    tokens = page.get_by_role("spinbutton", name="Exact context length (tokens)")
    tokens.fill("2048")
    tokens.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]t=2048(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    assert "m=custom" in page.url and page.get_by_test_id("stException").count() == 0
    expect(header).to_contain_text("pasted-tiny")


@pytest.mark.parametrize("size", SIZES)
def test_first_chart_is_drawn_without_plotly_then_interactive(page: Page, app_url: str, size) -> None:
    """Issue #33's speed target (first chart drawn ≤ 1.5 s after the first byte): the open view's
    first chart is a static SVG image on the first page, inside its column, and the browser has
    not asked for Plotly's 4.7 MB renderer; "Interactive chart" mounts the Plotly chart with the
    same two lines (bf16 and fp8_e4m3 reserved) and no image, and the choice stays for the
    next view."""
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&n=2&tp=2&t=8192&u=32&kd=bf16,fp8_e4m3", size)
    image = page.locator(".st-key-static_chart_kv_context img")
    expect(image).to_be_visible(timeout=LOAD_MS)
    assert image.evaluate("img => img.complete && img.naturalWidth > 0")
    assert image.get_attribute("src").startswith("data:image/svg+xml;base64,")
    box, main = image.bounding_box(), page.get_by_test_id("stMain").bounding_box()
    assert box and main
    assert box["x"] >= main["x"] - 1 and box["x"] + box["width"] <= main["x"] + main["width"] + 1
    assert page.get_by_test_id("stPlotlyChart").count() == 0
    assert not [url for url in requested if "PlotlyChart" in url], requested
    _interactive(page)
    plot = ".st-key-chart_kv_context .js-plotly-plot"
    page.wait_for_function(f"() => document.querySelector('{plot}') && "
                           f"document.querySelector('{plot}')._fullData", timeout=LOAD_MS)
    names = page.evaluate(f"() => document.querySelector('{plot}')._fullData.map(t => t.name)")
    assert names == ["bf16 reserved", "fp8_e4m3 reserved"]
    assert page.locator(".st-key-static_chart_kv_context").count() == 0
    page.get_by_role("tab", name="KV vs users").click()
    page.wait_for_selector(".st-key-chart_kv_users .js-plotly-plot", timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    assert page.locator('[class*="st-key-static_chart_"]').count() == 0


def test_a_phone_gets_the_interactive_chart_first(browser, app_url: str) -> None:
    """On a phone (an iPhone's User-Agent, 390 × 844) the static drawing would be a third of its
    size, its text unreadable: the first chart is the Plotly chart (kvplan/ui/chart_slot.py
    ``is_phone``), with the toggle on."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844},
        user_agent=("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
                    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"))
    try:
        page = context.new_page()
        page.goto(app_url + "/?v=1&m=llama-3.1-70b&n=2&tp=2&t=8192&u=32&kd=bf16,fp8_e4m3")
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        plot = ".st-key-chart_kv_context .js-plotly-plot"
        page.wait_for_function(f"() => document.querySelector('{plot}') && "
                               f"document.querySelector('{plot}')._fullData", timeout=LOAD_MS)
        assert page.locator('[class*="st-key-static_chart_"]').count() == 0
        assert page.get_by_role("switch", name=TOGGLE_LABEL).is_checked()
    finally:
        context.close()
