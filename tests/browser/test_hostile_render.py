"""Markdown injection in a real browser (issue #17 item 3): user text renders as typed.

AppTest sees the Markdown source; only a browser shows whether ``![a](…)`` became an image or
``[click](…)`` a link. The page must show the payload's characters and hold no element pointing
at the payload's address.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from kvplan.scenario import encode_config

pytestmark = pytest.mark.browser

IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
LOAD_MS = 60_000
EVIL = "https://evil.example"


def _open(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.get_by_test_id("stMetric").first).to_be_visible(timeout=LOAD_MS)
    page.wait_for_selector(IDLE, timeout=LOAD_MS)


def _no_markup_from_user(page: Page) -> None:
    assert page.locator(f'a[href^="{EVIL}"]').count() == 0
    assert page.locator(f'img[src^="{EVIL}"]').count() == 0
    assert page.get_by_test_id("stException").count() == 0


def test_link_values_in_warnings_render_as_text(page: Page, app_url: str):
    """Issue #33: an unusable model and GPU get the blocked-link message (no answer), each value
    shown as typed."""
    model, gpu = f"![a]({EVIL}/a.png)", f"[click]({EVIL})"
    page.goto(f"{app_url}/?v=1&m={quote(model)}&g={quote(gpu)}&t=4096")
    error = page.get_by_test_id("stAlertContentError")
    expect(error.first).to_contain_text(f"asks for the model {model}, which", timeout=LOAD_MS)
    expect(error.first).to_contain_text(f"asks for the accelerator {gpu}, which")
    page.wait_for_selector(IDLE, timeout=LOAD_MS)
    assert page.get_by_test_id("stMetric").count() == 0
    _no_markup_from_user(page)


def test_config_name_renders_as_text(page: Page, app_url: str):
    name = f"**Session expired** [click here to sign in]({EVIL}) ![x]({EVIL}/p.png)"
    config = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "name": name}
    _open(page, f"{app_url}/?v=1&m=custom&c={encode_config(config)}&t=4096")
    header = page.get_by_test_id("stMarkdownContainer").filter(has_text=" on 1 GPU × ").first
    expect(header).to_contain_text(name)
    assert header.locator("strong").first.inner_text() == name   # kvplan's own bold, nothing more
    _no_markup_from_user(page)


def test_hub_id_with_markup_renders_as_text(page: Page, app_url: str):
    """Issue #32 item 6: a Hub id of ``[sign in](…)``, an image or ``<img>`` in the weights box
    shows as typed in the error after Fetch (the id is refused before any request)."""
    _open(page, f"{app_url}/?v=1&t=4096")
    sidebar = page.get_by_test_id("stSidebar")
    box = sidebar.get_by_test_id("stExpander").filter(has_text="Weights from a checkpoint")
    box.get_by_text("Weights from a checkpoint").click()
    field = box.get_by_label("Hugging Face Hub id", exact=True)
    for payload in (f"[sign in]({EVIL})", f"![x]({EVIL}/x.png)", f'<img src="{EVIL}/i.png">'):
        field.fill(payload)
        field.press("Enter")
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        box.get_by_role("button", name="Fetch from the Hub").click()
        page.wait_for_selector(IDLE, timeout=LOAD_MS)
        error = sidebar.get_by_test_id("stAlertContentError")
        expect(error.first).to_contain_text(f"'{payload}' is not a Hub model id")
        _no_markup_from_user(page)
