"""Where a view's first chart goes: its static SVG (``kvplan.ui.svg``) unless the user turned on
"Interactive chart", else (or when the figure has no static form) the Plotly chart.

The static image needs none of Plotly's 4.7 MB renderer, so a first page is drawn without waiting
for its evaluation in the browser (0.9–1.4 s of one long task; bench/README.md, issue #33); the
toggle under the image mounts the Plotly chart (hover values, drag to zoom) in the same place. The
choice is kept for the session (``INTERACTIVE``), whichever view is open; on a phone (``is_phone``)
the Plotly chart is the default, as the static drawing would be too small to read there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from kvplan.ui.theme import chart_config

#: Session key of the choice (the toggle's own key is dropped while no static chart is on screen).
INTERACTIVE = "interactive_charts"
TOGGLE_LABEL = "Interactive chart (hover values, zoom)"


def is_phone(user_agent: str) -> bool:
    """Whether a browser's User-Agent is a phone's (MDN's advice: "Mobi" anywhere in it). A phone
    shows the 1,000-unit-wide static chart at about a third of its size, its text too small to read,
    so there the Plotly chart (laid out for the width) is the default."""
    return "Mobi" in user_agent


def _default_interactive() -> bool:
    try:
        agent = st.context.headers.get("User-Agent") or ""
    except Exception:  # noqa: BLE001 — no request headers outside a browser session (AppTest)
        agent = ""
    return is_phone(str(agent))


def _remember() -> None:
    st.session_state[INTERACTIVE] = bool(st.session_state.get("w_interactive", False))


def show_chart(fig: Callable[[], Any], svg: str | None, key: str, alt: str) -> None:
    """The static ``svg`` of the figure ``fig()`` builds (an ``<img>``: nothing in it runs) with the
    toggle, or the Plotly chart under ``key`` (its CSS class ``st-key-<key>``); the figure is built
    only for the Plotly chart."""
    if INTERACTIVE not in st.session_state:
        st.session_state[INTERACTIVE] = _default_interactive()
    interactive = bool(st.session_state[INTERACTIVE])
    if svg is not None and not interactive:
        with st.container(key=f"static_{key}"):
            st.image(svg, width="stretch", alt=alt)
    else:
        st.plotly_chart(fig(), theme=None, config=chart_config(), key=key)
    if svg is not None:
        st.toggle(TOGGLE_LABEL, value=interactive, key="w_interactive", on_change=_remember,
                  help="The chart is first drawn as a static image (no hover); on, it is the "
                       "interactive Plotly chart, for every view of this session.")
