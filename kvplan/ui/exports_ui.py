"""Download buttons under each chart/table: CSV and PNG, both deferred (built only when someone
clicks: the CSV of a big table is slow to write, and the PNG starts Chromium). Scenario JSON
download/upload lives in ``scenario_json_controls``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from kvplan.errors import KVPlanError, md
from kvplan.png import INSTALL_HINT, PNG_MISSING_HELP, chromium_available, fig_to_png
from kvplan.report import export_name, scenario_from_json, scenario_to_json, to_csv
from kvplan.scenario import Scenario

PNG_SCALE = 2.0
DEFAULT_SIZE = (1000, 560)


def _png_callable(fig: Any) -> Callable[[], bytes]:
    """The PNG of ``fig``, rendered on click; ``fig`` is a figure or a function building it then
    (a view showing its static image builds no go.Figure per rerun)."""

    def render() -> bytes:
        figure = fig() if callable(fig) else fig
        width = int(figure.layout.width or DEFAULT_SIZE[0])
        height = int(figure.layout.height or DEFAULT_SIZE[1])
        return fig_to_png(figure, width, height, PNG_SCALE)

    return render


def page_url() -> str | None:
    """The address the browser shows (``st.context.url``), the base of every exported link."""
    try:
        return st.context.url
    except Exception:  # noqa: BLE001 - no browser session (AppTest, bare mode): the configured base
        return None


def download_buttons(name: str, df: pd.DataFrame, fig: Any, scenario: Scenario) -> None:
    """CSV of ``df`` (units in headers, the absolute link in a last ``scenario_link`` column) and,
    when ``fig`` (a figure, or a function building it on click) is given, a PNG of it, both named
    after the model, accelerator and view (``report.export_name``); without Chromium the PNG slot
    explains how to install it. One horizontal container, not two columns: two elements fewer for
    the browser to build."""
    row = st.container(horizontal=True)
    stem = export_name(scenario, name)
    base = page_url()
    row.download_button("Download CSV", lambda: to_csv(df, scenario, base), file_name=f"{stem}.csv",
                       mime="text/csv", key=f"csv_{name}", on_click="ignore",
                       help="The table behind this view; units in the column headers and the "
                            "scenario's link in the last column (scenario_link).")
    if fig is None:
        return
    if chromium_available():
        row.download_button("Download PNG", _png_callable(fig), file_name=f"{stem}.png",
                           mime="image/png", key=f"png_{name}", on_click="ignore",
                           help="Rendered on the server with kaleido + Chromium.")
    else:
        row.caption(f"PNG export is unavailable: {PNG_MISSING_HELP}")
        row.code(INSTALL_HINT, language="bash")


def scenario_json_controls(scenario: Scenario, key: str = "scenario_json") -> Scenario | None:
    """Download the scenario as JSON, or upload one; returns the uploaded scenario when valid."""
    st.download_button("Download scenario (JSON)", scenario_to_json(scenario),
                       file_name=f"{export_name(scenario, 'scenario')}.json", mime="application/json",
                       key=f"dl_{key}", on_click="ignore")
    upload = st.file_uploader("Load a scenario (JSON)", type=["json"], key=f"up_{key}")
    if upload is None:
        return None
    try:
        return scenario_from_json(upload.getvalue())
    except KVPlanError as exc:
        st.warning(md(exc))
        return None


def report_button(scenario: Scenario) -> None:
    """The one-page PNG report (scenario, link, KPIs per dtype, main charts), rendered on click."""
    from kvplan.report import REPORT_HEIGHT, REPORT_WIDTH, report_figure

    base = page_url()
    if not chromium_available():
        st.caption(f"One-page PNG report unavailable: {PNG_MISSING_HELP}")
        return
    st.download_button("Download one-page report (PNG)",
                       lambda: fig_to_png(report_figure(scenario, link_base=base), REPORT_WIDTH,
                                          REPORT_HEIGHT, 1.0),
                       file_name=f"{export_name(scenario, 'report')}.png", mime="image/png", key="png_report",
                       on_click="ignore")
