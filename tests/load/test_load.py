"""Load: 16 concurrent headless Chromium sessions against one ``streamlit run app.py`` server.

Part of the default run (CI); alone: ``./dev test tests/load``; skip it with ``-m "not slow"``.
Each page opens a different link; all must reach
idle with no exception and show their own model and token count; the server's RSS afterwards
(``VmRSS`` of /proc/<pid>/status) must stay under 2 GiB.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from pathlib import Path

import pytest
from load_server import streamlit_app, tree_rss_bytes

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
SESSIONS = 16
RSS_LIMIT = 2 << 30
PRESETS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
           "llama-3.1-405b", "mistral-7b-v0.1", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b",
           "qwen3-8b", "qwen3-32b", "gemma-2-9b", "gemma-3-27b", "phi-3-mini", "deepseek-v3"]

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture(scope="module")
def server(request):
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium")
    with streamlit_app() as (port, proc):
        yield f"http://127.0.0.1:{port}", proc


async def _drive(url: str) -> list[dict]:
    from playwright.async_api import async_playwright

    from kvplan.presets import model_presets

    presets = model_presets()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                           args=CHROMIUM_ARGS)

        async def one(index: int) -> dict:
            preset = PRESETS[index % len(PRESETS)]
            tokens = 1000 + 517 * index
            context = await browser.new_context(viewport={"width": 1400, "height": 1000})
            page = await context.new_page()
            start = time.perf_counter()
            await page.goto(f"{url}/?m={preset}&t={tokens}", timeout=120_000)
            await page.wait_for_selector('[data-testid="stApp"]', timeout=120_000)
            await page.wait_for_timeout(500)
            await page.wait_for_selector(IDLE, timeout=180_000)
            elapsed = time.perf_counter() - start
            exceptions = await page.locator('[data-testid="stException"]').count()
            text = await page.locator('[data-testid="stMain"], section.main, '
                                      '[data-testid="stAppViewContainer"]').first.inner_text()
            await context.close()
            return {"preset": preset, "name": presets[preset].name, "tokens": tokens,
                    "elapsed": elapsed, "exceptions": exceptions, "text": text}

        try:
            return await asyncio.gather(*(one(i) for i in range(SESSIONS)))
        finally:
            await browser.close()


def test_sixteen_concurrent_sessions(server):
    url, proc = server
    # a thread of its own: pytest-playwright's sync fixtures keep an event loop on this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        results = pool.submit(asyncio.run, _drive(url)).result()
    rss = tree_rss_bytes(proc.pid)
    slowest = max(r["elapsed"] for r in results)
    print(f"\n16 sessions: slowest to idle {slowest:.1f} s; server RSS after {rss / 2**20:,.0f} MiB")
    for result in results:
        assert result["exceptions"] == 0, result["preset"]
        assert result["name"] in result["text"], f"{result['preset']}: own model not shown"
        assert f"{result['tokens']:,}" in result["text"], f"{result['preset']}: own tokens not shown"
        others = [r for r in results if r["name"] != result["name"] and r["name"] not in result["name"]]
        for other in others:
            assert f"**{other['name']}** on" not in result["text"]
    assert rss < RSS_LIMIT, f"server RSS {rss / 2**20:,.0f} MiB ≥ 2 GiB"
