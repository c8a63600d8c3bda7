"""The dashboard in a real browser: links, URL sync, Back, downloads, no exceptions, screenshot.

Run with ``pytest -m browser tests/browser`` (Debian chromium at /usr/bin/chromium; the app is
started by the ``app_url`` fixture).
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest
from playwright.sync_api import Page, expect

from kvplan.report import scenario_from_json
from kvplan.scenario import Scenario
from kvplan.ui.sidebar import VIEWS
from tests.plans import kv_plan

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LOAD_MS = 60_000
LINK_7B = "/?v=1&m=llama-2-7b&e=hf&kd=fp16&t=4096&u=1&g=a100-80gb-sxm"
# HF on an A100 80GB: CUDA total 81,224 MiB = 85,169,537,024 B − weights 13,476,831,232 − the flat
# 1 GiB = 70,618,963,968 B; a 4,096-token fp16 request holds 2,147,483,648 B → 32 requests
EXACT_7B = ("kv_per_token=524,288", "kv_per_request=2,147,483,648", "max_requests=32")
PNG_WIDTH = 2000  # charts leave width unset: exports_ui renders 1000 px × scale 2


def _open(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.get_by_test_id("stMetric").first).to_be_visible(timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)


def _exact(page: Page):
    return page.get_by_test_id("stCaptionContainer").filter(has_text="Exact:")


def _query(page: Page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(page.url).query).items()}


def _no_exception(page: Page) -> None:
    assert page.get_by_test_id("stException").count() == 0


def test_link_shows_expected_numbers(page: Page, app_url: str) -> None:
    _open(page, app_url + LINK_7B)
    for text in EXACT_7B:
        expect(_exact(page)).to_contain_text(text)
    expect(page.get_by_test_id("stMetric").filter(has_text="KV bytes per token")).to_contain_text("512")
    assert _query(page)["m"] == "llama-2-7b"
    _no_exception(page)


def test_budget_section_lists_capacity_and_reserve_terms(page: Page, app_url: str) -> None:
    """Issue #14: the budget section shows the release, the CUDA total beside nvidia-smi's figure and
    each reserve term (Llama-2-7B fp16 on an H100: tests/test_cli.py test_fit_json_numbers)."""
    _open(page, app_url + "/?v=1&m=llama-2-7b&kd=fp16&t=4096&u=1")
    expect(page.get_by_text("vLLM (v1 paged blocks) · vLLM v0.33")).to_have_count(1)
    expander = page.get_by_test_id("stExpander").filter(has_text="KV budget, term by term")
    expander.get_by_text("KV budget, term by term").click()
    expect(expander).to_contain_text("Rules of vLLM v0.33.")
    table = expander.get_by_test_id("stTable")
    for text in ("capacity (CUDA total)", "85,027,979,264", "nvidia-smi total", "85,520,809,984",
                 "reserve: activation_peak", "-742,391,808", "reserve: cuda_graphs", "-408,662,949",
                 # the KV budget: 63,454,725,149 → 63,453,676,573 B when vLLM's RoPE cos/sin cache
                 # joined the weights (Llama-2-7B: 4,096 positions × 128 × 2 B = 1,048,576 B,
                 # rotary_embedding/base.py RotaryEmbedding.__init__)
                 "weights: rope_cache", "-1,048,576", "63,453,676,573"):
        expect(table).to_contain_text(text)
    _no_exception(page)


def test_bad_link_warns_and_keeps_the_other_parameters(page: Page, app_url: str) -> None:
    """A bad engine falls back alone (an unusable model or GPU answers nothing instead:
    ``test_issue33.py``)."""
    _open(page, app_url + "/?v=1&e=no-such-engine&t=4096&u=1&zz=3")
    alerts = page.get_by_test_id("stAlert")
    expect(alerts.filter(has_text="no-such-engine")).to_have_count(1)
    expect(alerts.filter(has_text="'e'")).to_have_count(1)
    expect(alerts.filter(has_text="zz")).to_have_count(1)
    expect(page.get_by_test_id("stMetric").filter(has_text="KV per request at 4,096 tokens")).to_have_count(1)
    query = _query(page)
    assert query.get("t") == "4096" and "e" not in query and "zz" not in query
    _no_exception(page)


def test_widget_change_updates_url_fresh_page_and_back(page: Page, app_url: str) -> None:
    _open(page, app_url + LINK_7B)
    expect(_exact(page)).to_contain_text(EXACT_7B[0])
    before = _exact(page).inner_text()
    tokens = page.get_by_role("spinbutton", name="Exact context length (tokens)")
    tokens.fill("2048")
    tokens.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]t=2048(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    expect(_exact(page)).to_contain_text("kv_per_request=1,073,741,824", timeout=LOAD_MS)
    after = _exact(page).inner_text()
    shared = page.url

    fresh = page.context.new_page()
    _open(fresh, shared)
    expect(_exact(fresh)).to_have_text(after)
    assert _query(fresh) == _query(page)
    _no_exception(fresh)
    fresh.close()

    page.go_back()
    expect(page).to_have_url(re.compile(r"[?&]t=4096(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    expect(_exact(page)).to_have_text(before, timeout=LOAD_MS)
    expect(tokens).to_have_value("4096")
    _no_exception(page)


def test_engine_settings_box_keeps_its_values_closed_and_back_restores_them(page: Page,
                                                                            app_url: str) -> None:
    """The lazy "Engine settings" expander (issue #16, speed): its knobs are not on the page while
    it is closed; a value set while open stays in the link and the numbers after closing, and
    Back restores the previous one."""
    _open(page, app_url + "/?v=1&m=llama-2-7b&e=vllm&kd=fp16&t=4000&u=1&g=a100-80gb-sxm&bs=16")
    sidebar = page.get_by_test_id("stSidebarUserContent")
    block = sidebar.get_by_role("spinbutton", name="Block size (tokens)")
    expect(block).to_have_count(0)
    sidebar.get_by_text("Engine settings", exact=True).click()
    expect(block).to_have_value("16", timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    before = _exact(page).inner_text()
    block.fill("4096")
    block.press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]bs=4096(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    expect(_exact(page)).not_to_have_text(before, timeout=LOAD_MS)
    after = _exact(page).inner_text()
    sidebar.get_by_text("Engine settings", exact=True).click()  # close it
    expect(block).to_have_count(0, timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    assert _query(page)["bs"] == "4096"
    expect(_exact(page)).to_have_text(after)
    expect(sidebar.get_by_test_id("stCaptionContainer").filter(
        has_text="Engine settings changed")).to_contain_text("Block size (tokens) 4096")
    page.go_back()
    expect(page).to_have_url(re.compile(r"[?&]bs=16(&|$)"), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    expect(_exact(page)).to_have_text(before, timeout=LOAD_MS)
    _no_exception(page)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return struct.unpack(">II", data[16:24])


def test_every_download(page: Page, app_url: str, tmp_path: Path) -> None:
    _open(page, app_url + LINK_7B)
    scenario = Scenario.from_query(_query(page))[0]
    seen_csv: list[str] = []
    seen_png: list[str] = []
    tabs = page.get_by_role("tab")
    for index in range(tabs.count()):
        view = list(VIEWS)[index]
        tabs.nth(index).click()
        # the rerun of a lazy tab is done once the link names the view and the app is idle
        pattern = re.compile(rf"[?&]vw={view}(&|$)") if view != "context" else re.compile(r"^(?!.*vw=)")
        expect(page).to_have_url(pattern, timeout=LOAD_MS)
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        expect(tabs.nth(index)).to_have_attribute("aria-selected", "true")
        for prefix, seen in (("csv_", seen_csv), ("png_", seen_png)):
            boxes = page.locator(f'[class*="st-key-{prefix}"]')
            for i in range(boxes.count()):
                box = boxes.nth(i)
                if not box.is_visible():
                    continue
                key = next(c for c in (box.get_attribute("class") or "").split()
                           if c.startswith(f"st-key-{prefix}"))
                if key in seen:
                    continue
                with page.expect_download(timeout=LOAD_MS) as info:
                    box.get_by_role("button").click()
                path = tmp_path / info.value.suggested_filename
                info.value.save_as(path)
                seen.append(key)
                if prefix == "csv_":
                    text = path.read_text(encoding="utf-8")
                    assert not text.startswith("#"), text[:80]  # no comment line for Excel to show
                    df = pd.read_csv(io.StringIO(text))  # no options needed
                    assert df.columns[-1] == "scenario_link", (key, list(df.columns))
                    first = str(df["scenario_link"].iloc[0])
                    link = {k: v[-1] for k, v in parse_qs(first.split("?", 1)[1]).items()}
                    shown = Scenario.from_query(link)[0]  # the link also names the open view
                    assert shown.model_copy(update={"view": scenario.view}) == scenario
                    assert len(df.columns) >= 3 and len(df) >= 1, key
                    assert any("[" in c or "(" in c for c in df.columns), (key, list(df.columns))
                else:
                    width, height = _png_size(path.read_bytes())
                    assert width == PNG_WIDTH and height % 2 == 0 and height >= 600, (key, width, height)
    assert len(seen_csv) >= 5, seen_csv
    assert len(seen_png) >= 5, seen_png
    assert "st-key-csv_kv_vs_context" in seen_csv

    page.get_by_text("Share: link and scenario JSON").click()
    json_box = page.locator('[class*="st-key-dl_scenario"]')
    expect(json_box.first).to_be_visible(timeout=LOAD_MS)
    with page.expect_download(timeout=LOAD_MS) as info:
        json_box.first.get_by_role("button").click()
    raw = Path(info.value.path()).read_bytes()
    assert json.loads(raw)["query"]["m"] == "llama-2-7b"
    reloaded = scenario_from_json(raw)
    assert reloaded.view == list(VIEWS)[-1]  # the last view opened above
    assert reloaded.model_copy(update={"view": scenario.view}) == scenario
    _no_exception(page)


def test_page_has_no_exception_and_screenshot(page: Page, app_url: str, tmp_path: Path) -> None:
    """Full-page screenshot; KVPLAN_UPDATE_SCREENSHOT=1 writes it to docs/ for the README."""
    _open(page, app_url + "/?v=1&m=llama-3.1-70b&g=h100-sxm&n=8&tp=8&t=32768&u=64")
    expect(page.locator(".st-key-static_chart_kv_context img")).to_be_visible(timeout=LOAD_MS)
    page.set_viewport_size({"width": 1400, "height": 2600})  # streamlit scrolls inside stMain
    page.wait_for_timeout(800)  # let plotly finish drawing
    _no_exception(page)
    target = ROOT / "docs" / "screenshot.png" if os.environ.get("KVPLAN_UPDATE_SCREENSHOT") \
        else tmp_path / "screenshot.png"
    target.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000


def test_uploaded_config_is_used_and_travels_in_the_link(page: Page, app_url: str, tmp_path: Path) -> None:
    """Upload a real config.json (Qwen3-8B fixture): the KPIs use it, the link carries its
    architecture (c=), and a broken file shows an error and keeps the model."""
    from kvplan.config_import import parse_config
    from kvplan.sizing import full_length_bytes_per_token

    fixture = ROOT / "tests" / "fixtures" / "configs" / "qwen3.json"
    per_token = full_length_bytes_per_token(kv_plan(parse_config(fixture.read_bytes()), 1, kv_dtype="bf16",
                                                    engine="vllm"))
    assert per_token == 36 * 2 * 8 * 128 * 2  # 147,456 B
    _open(page, app_url + "/?v=1&m=llama-2-7b&kd=bf16&t=4096&u=1")
    page.get_by_text("Use your own config.json").click()
    page.get_by_test_id("stSidebarUserContent").get_by_test_id("stFileUploaderDropzoneInput").first.set_input_files(str(fixture))
    expect(page).to_have_url(re.compile(r"[?&]c="), timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    expect(_exact(page)).to_contain_text(f"kv_per_token={per_token:,}")
    assert _query(page)["m"] == "custom"
    linked = Scenario.from_query(_query(page))[0]
    assert linked.custom_config["num_hidden_layers"] == 36
    broken = tmp_path / "config.json"
    broken.write_text('{"model_type": "llama"}')
    page.get_by_test_id("stSidebarUserContent").get_by_test_id("stFileUploaderDropzoneInput").first.set_input_files(str(broken))
    expect(page.get_by_test_id("stAlertContentError").first).to_contain_text(
        "num_hidden_layers", timeout=LOAD_MS)
    expect(_exact(page)).to_contain_text(f"kv_per_token={per_token:,}")
    _no_exception(page)
