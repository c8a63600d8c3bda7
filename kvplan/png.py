"""Server-side PNG export: one persistent kaleido Chromium behind a lock (no Streamlit import).

kaleido's sync server is not thread-safe (concurrent callers get each other's images) and
Streamlit runs every session in its own thread, hence the lock. MathJax is disabled so the render
page never reaches for a CDN. Figures should carry an explicit template (importing Streamlit
changes plotly's default); ``fig_to_png`` sets ``plotly_white`` when a figure has none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from functools import cache
from typing import Any

#: The one plotly template of every kvplan figure, set explicitly (``import streamlit`` changes
#: plotly's default, and the PNG must look like the screen).
TEMPLATE = "plotly_white"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
INSTALL_HINT = "apt-get install -y chromium fonts-liberation"
PNG_MISSING_HELP = (f"PNG export needs Chromium and kaleido on the server; install Chromium with "
                    f"`{INSTALL_HINT}` (and `pip install kaleido`), then restart.")
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_PATHS = ("/usr/bin/chromium", "/usr/lib/chromium/chromium", "/usr/bin/chromium-browser",
          "/usr/bin/google-chrome")

_LOCK = threading.Lock()
_started = False
#: Nice value of the background warm-up thread and so of the Chromium it starts (Linux threads
#: and the processes they spawn inherit it): it yields the CPU to the first page render.
WARM_UP_NICE = 10
_warm_up: threading.Thread | None = None


@cache
def chromium_path() -> str | None:
    """The browser kaleido will use (``BROWSER_PATH`` first, like choreographer), or None."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return next((p for p in _PATHS if os.access(p, os.X_OK)), None)


@cache
def chromium_available() -> bool:
    """True when kaleido is importable and a Chromium binary is on this machine."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return chromium_path() is not None


def _template_name(fig: Any) -> str | None:
    template = fig.layout.template
    return None if template is None or not template.to_plotly_json() else "set"


def warm_up_in_background() -> threading.Thread | None:
    """Start kaleido's Chromium and render one tiny figure in a daemon thread, so the first PNG a
    user asks for does not pay the browser's cold start (≈ 2–5 s). None without Chromium, or when
    ``KVPLAN_PNG_WARM_UP=0`` (the in-process AppTest tests set it: no browser per test process)."""
    global _warm_up
    if os.environ.get("KVPLAN_PNG_WARM_UP") == "0" or not chromium_available():
        return None
    if _warm_up is not None:  # once per process (the launcher and the app may both ask)
        return _warm_up

    def run() -> None:
        import plotly.graph_objects as go

        # this thread only (not Linux / not permitted: warm up unniced); the page renders meanwhile
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WARM_UP_NICE)
        try:
            fig_to_png(go.Figure(go.Scatter(x=[0, 1], y=[0, 1])), 40, 40)
        except Exception:  # noqa: BLE001 - the first real export reports any problem itself
            return

    _warm_up = threading.Thread(target=run, name="kvplan-png-warm-up", daemon=True)
    _warm_up.start()
    return _warm_up


def fig_to_png(fig: Any, width: int | None = None, height: int | None = None, scale: float = 1.0) -> bytes:
    """Render ``fig`` to PNG bytes of ``width × scale`` by ``height × scale`` pixels."""
    global _started
    import kaleido

    if not chromium_available():
        raise RuntimeError(PNG_MISSING_HELP)
    if _template_name(fig) is None:
        import plotly.graph_objects as go

        fig = go.Figure(fig).update_layout(template=TEMPLATE)  # a copy: leave the caller's
    opts = {"format": "png", "width": int(width or fig.layout.width or 900),
            "height": int(height or fig.layout.height or 500), "scale": float(scale)}
    spec = fig.to_dict()
    with _LOCK:
        if not _started:
            kaleido.start_sync_server(mathjax=False, silence_warnings=True)
            _started = True
        return kaleido.calc_fig_sync(spec, opts=opts)
