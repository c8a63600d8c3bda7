"""Real-browser helpers for ``python -m bench``: a ``streamlit run`` server and Playwright + Chromium.

Used by the "browser" (keypress → idle latency) and "rss" (server memory per session) sections of
``bench/__main__.py``. Every wait is bounded; the server and the browser are stopped in ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("KVPLAN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
#: True once the first chart is drawn: a Plotly chart's SVG, or the static SVG image of a view's
#: first chart (kvplan/ui/chart_slot.py) decoded and laid out.
CHART_DRAWN_JS = """() => {
  if (document.querySelector('[data-testid="stPlotlyChart"] .main-svg')) return true;
  const img = document.querySelector('[class*="st-key-static_chart_"] img');
  return !!(img && img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().width > 0);
}"""
#: Milliseconds from the navigation's start to the first byte of the page (``responseStart``).
FIRST_BYTE_JS = "() => performance.getEntriesByType('navigation')[0].responseStart"
#: True once no element waits for its renderer's JS chunk (Streamlit draws a skeleton meanwhile).
NO_SKELETON_JS = """() => !document.querySelector('[data-testid="stSkeleton"]')"""
SLIDER_LABEL = "Context length"
#: Text of the first caption that starts with "Exact:" (kvplan/ui/views.py render_kpis), or null.
EXACT_JS = """() => {
  for (const el of document.querySelectorAll('[data-testid="stCaptionContainer"]')) {
    const text = el.innerText.trim();
    if (text.startsWith('Exact:')) return text;
  }
  return null;
}"""
#: True once that caption exists and differs from ``old``.
CHANGED_JS = """(old) => {
  for (const el of document.querySelectorAll('[data-testid="stCaptionContainer"]')) {
    const text = el.innerText.trim();
    if (text.startsWith('Exact:')) return text !== old;
  }
  return false;
}"""
PRESETS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
           "llama-3.1-405b", "mistral-7b-v0.1", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b",
           "qwen3-8b", "qwen3-32b", "gemma-2-9b", "gemma-3-27b", "phi-3-mini", "deepseek-v3"]

#: The baseline: a select_slider and a caption of its value, nothing else.
MINIMAL_APP = textwrap.dedent("""
    import streamlit as st

    steps = [2 ** i for i in range(24)]
    value = st.sidebar.select_slider("Context length (tokens, log scale)", options=steps,
                                     value=4096, key="w_tokens")
    st.caption(f"Exact: tokens={value:,}")
""")

SERVER_START_TIMEOUT = 90.0     # s, until /_stcore/health answers "ok"
FIRST_RENDER_TIMEOUT = 180_000  # ms, first page load to the Exact caption and idle
RERUN_TIMEOUT = 60_000          # ms, keypress to changed caption, then to idle


def skip_reason() -> str | None:
    """Why the real-browser sections cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} missing: apt-get install -y chromium fonts-liberation"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright not installed in this interpreter"
    if not (ROOT / "app.py").exists():
        return "app.py missing"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``python -m streamlit run SCRIPT`` on a free 127.0.0.1 port (same flags as tests/browser);
    the dashboard through ``python -m kvplan.ui.launch``, as ``./dev app`` serves it."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        handle, name = tempfile.mkstemp(prefix="kvplan-bench-", suffix=".log")
        os.close(handle)
        self.log = Path(name)
        flags = [f"--server.port={self.port}", "--server.address=127.0.0.1", "--server.headless=true",
                 "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"]
        # the dashboard is served as ./dev app serves it (kvplan.ui.launch: imports preloaded)
        launcher = ROOT / "kvplan" / "ui" / "launch.py"
        command = ([sys.executable, "-m", "kvplan.ui.launch", *flags]
                   if script == ROOT / "app.py" and launcher.exists()
                   else [sys.executable, "-m", "streamlit", "run", str(script), *flags])
        with self.log.open("wb") as out:   # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self) -> str:
        return self.log.read_bytes()[-3000:].decode(errors="replace")

    def wait_healthy(self, timeout: float = SERVER_START_TIMEOUT) -> float:
        start = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.tail()}")
            with (contextlib.suppress(OSError),
                  urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as resp):
                if resp.read().strip() == b"ok":
                    return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"streamlit did not answer /_stcore/health:\n{self.tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.log.unlink(missing_ok=True)


@contextlib.contextmanager
def serve(script: Path) -> Iterator[Server]:
    server = Server(script)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A headless Debian Chromium through Playwright (sync API); closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                     timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


def memory_mib(pid: int) -> dict[str, float]:
    """VmHWM (peak RSS) and VmRSS of one process, in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) / 1024
    return out


def _exact_text(page) -> str | None:
    return page.evaluate(EXACT_JS)


def open_idle(page, url: str) -> float:
    """Load ``url``; wait for the "Exact:" caption, then for idle. Returns seconds."""
    return open_idle_and_chart(page, url, chart=False)[0]


def open_idle_and_chart(page, url: str, chart: bool = True) -> tuple[float, float, float]:
    """Seconds from loading ``url`` to idle (the "Exact:" caption shown and the script state
    ``notRunning``) and, with ``chart``, to every element drawn (no skeleton left: each element
    type's renderer chunk loaded, checked from idle on) and from the page's first byte to the first
    chart drawn (a Plotly chart's SVG, or a view's static chart image: ``CHART_DRAWN_JS``; the
    browser may still be loading Plotly's renderer when the script is done)."""
    start = time.perf_counter()
    page.goto(url, timeout=FIRST_RENDER_TIMEOUT, wait_until="commit")
    page.wait_for_function(EXACT_JS, timeout=FIRST_RENDER_TIMEOUT)
    page.wait_for_selector(IDLE, timeout=FIRST_RENDER_TIMEOUT)
    idle = time.perf_counter() - start
    if not chart:
        return idle, idle, idle
    page.wait_for_function(NO_SKELETON_JS, timeout=FIRST_RENDER_TIMEOUT, polling="raf")
    drawn = time.perf_counter() - start
    page.wait_for_function(CHART_DRAWN_JS, timeout=FIRST_RENDER_TIMEOUT, polling="raf")
    chart = time.perf_counter() - start
    return idle, drawn, chart - page.evaluate(FIRST_BYTE_JS) / 1000


def keypress_latencies(url: str, presses: int, warmup: int = 2) -> tuple[float, list[float]]:
    """First render, then seconds from each slider keypress to a changed caption and an idle app.

    Alternates ArrowRight / ArrowLeft on the "Context length" select_slider so the value moves on
    every press (and never sticks at an end); the first ``warmup`` presses are not reported.
    """
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        try:
            page = context.new_page()
            first = open_idle(page, url)
            samples = _press_keys(page, presses, warmup)
            if page.locator('[data-testid="stException"]').count():
                raise RuntimeError("the app shows an exception after the keypresses")
            return first, samples
        finally:
            context.close()


def _press_keys(page, presses: int, warmup: int) -> list[float]:
    """Seconds from each "Context length" keypress to a changed Exact caption and an idle app."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    slider = page.get_by_role("slider", name=SLIDER_LABEL)
    slider.focus(timeout=RERUN_TIMEOUT)
    samples = []
    for i in range(warmup + presses):
        before = _exact_text(page)
        key = "ArrowRight" if i % 2 == 0 else "ArrowLeft"
        start = time.perf_counter()
        page.keyboard.press(key)
        try:
            page.wait_for_function(CHANGED_JS, arg=before, timeout=RERUN_TIMEOUT, polling="raf")
            page.wait_for_selector(IDLE, timeout=RERUN_TIMEOUT)
        except PlaywrightTimeout as exc:
            raise RuntimeError(f"keypress {i} ({key}): no caption change / idle "
                               f"within {RERUN_TIMEOUT / 1000:.0f} s") from exc
        if i >= warmup:
            samples.append(time.perf_counter() - start)
        if not slider.evaluate("el => el === document.activeElement"):
            slider.focus(timeout=RERUN_TIMEOUT)
    return samples


def _switch_tabs(page, switches: int, warmup: int = 2) -> list[float]:
    """Seconds from a click on a view tab to the link naming it and an idle app, alternating the
    first two views ("KV vs context" ⇄ "KV vs users"); each view was opened once (warm-up)."""
    tabs = page.get_by_role("tab")
    samples = []
    for i in range(warmup + switches):
        index = 1 - i % 2
        start = time.perf_counter()
        tabs.nth(index).click()
        page.wait_for_url(lambda url, index=index: ("vw=users" in url) == (index == 1),
                          timeout=RERUN_TIMEOUT)
        page.wait_for_selector(IDLE, timeout=RERUN_TIMEOUT)
        if i >= warmup:
            samples.append(time.perf_counter() - start)
    return samples


def _first_png(page) -> float:
    """Seconds from a click on the first chart's "Download PNG" to the file on disk."""
    button = page.locator(".st-key-png_kv_vs_context").get_by_role("button")
    button.wait_for(timeout=RERUN_TIMEOUT)
    start = time.perf_counter()
    with page.expect_download(timeout=RERUN_TIMEOUT) as info:
        button.click()
    info.value.path()
    return time.perf_counter() - start


def app_session(url: str, presses: int, switches: int, warmup: int = 2) -> dict[str, object]:
    """One fresh page on a fresh server: first render (to idle, and to the chart drawn), the first
    PNG download (clicked as soon as the chart it exports is drawn), slider keypresses and tab
    switches."""
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                      accept_downloads=True)
        try:
            page = context.new_page()
            first, drawn, chart = open_idle_and_chart(page, url)
            png = _first_png(page)
            keys = _press_keys(page, presses, warmup)
            tabs = _switch_tabs(page, switches)
            if page.locator('[data-testid="stException"]').count():
                raise RuntimeError("the app shows an exception")
            return {"first": first, "drawn": drawn, "chart": chart, "png": png, "keys": keys,
                    "tabs": tabs}
        finally:
            context.close()


def minimal_app() -> Path:
    """Write the baseline app to a temp dir; the caller deletes it."""
    folder = Path(tempfile.mkdtemp(prefix="kvplan-bench-minimal-"))
    path = folder / "minimal_app.py"
    path.write_text(MINIMAL_APP)
    return path


def session_links(base: str, count: int) -> list[str]:
    return [f"{base}/?m={PRESETS[i % len(PRESETS)]}&t={1000 + 517 * i}" for i in range(count)]


def open_sessions(browser, links: list[str]) -> tuple[list[object], float]:
    """Open every link in its own context at once; wait until each is rendered and idle.

    Returns the contexts (the caller closes them) and the seconds until the slowest was idle.
    """
    start = time.perf_counter()
    contexts, pages = [], []
    for link in links:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        contexts.append(context)
        page = context.new_page()
        page.goto(link, timeout=FIRST_RENDER_TIMEOUT, wait_until="commit")
        pages.append(page)
    for page in pages:   # all load concurrently; these waits only collect them
        page.wait_for_function(EXACT_JS, timeout=FIRST_RENDER_TIMEOUT)
        page.wait_for_selector(IDLE, timeout=FIRST_RENDER_TIMEOUT)
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"exception shown for {page.url}")
    return contexts, time.perf_counter() - start


def rss_profile(sessions: int = 16) -> dict[str, dict[str, float] | float]:
    """Server memory before any session, with 1 session, and with ``sessions`` concurrent ones.

    Each phase runs on its own fresh server, so VmHWM (peak RSS since start) belongs to that phase.
    """
    out: dict[str, dict[str, float] | float] = {}
    with chromium() as browser:
        for phase, count in (("one", 1), ("many", sessions)):
            with serve(ROOT / "app.py") as server:
                time.sleep(1.0)  # let the server finish its start-up allocations
                if phase == "one":
                    out["before"] = memory_mib(server.pid)
                contexts: list = []
                try:
                    contexts, elapsed = open_sessions(browser, session_links(server.url, count))
                    time.sleep(1.0)
                    out[phase] = memory_mib(server.pid)
                    out[f"{phase}_seconds"] = elapsed
                finally:
                    for context in contexts:
                        with contextlib.suppress(Exception):
                            context.close()
    return out
