"""kvplan dashboard: `streamlit run app.py`. Thin: state from the URL, sidebar, then the views."""

from __future__ import annotations

import streamlit as st

from kvplan.errors import KVPlanError, md
from kvplan.ui import calibrate_view, recommend_view, serving_view, views
from kvplan.ui.sidebar import (
    VIEWS,
    render_sidebar,
    resolve_arch,
    resolve_gpu,
    sync_from_url,
    write_url,
)

st.set_page_config(page_title="kvplan — KV-cache memory planner", page_icon="🧮", layout="wide")

link_warnings = sync_from_url()  # first load, Back/Forward or an edited link
scenario = render_sidebar()
write_url(scenario)

st.title("kvplan — KV-cache memory planner")
for message in link_warnings:
    st.warning(md(message))
views.render_seeds()
views.render_share(scenario)

try:
    arch = resolve_arch(scenario)
    gpu = resolve_gpu(scenario)
except KVPlanError as err:
    st.error(md(err))
    st.stop()
views.guarded("Calibration", lambda: calibrate_view.render(scenario, arch, gpu))

views.guarded("Key numbers", lambda: views.render_kpis(scenario, arch, gpu))

sections = {
    "context": views.render_kv_context,
    "users": views.render_kv_users,
    "memory": views.render_memory,
    "requests": views.render_requests,
    "designs": views.render_designs,
    "serving": serving_view.render,
    "recommend": recommend_view.render,
}
# Only the open tab runs (lazy tabs); the open tab is part of the link (vw=).
tabs = st.tabs(list(VIEWS.values()), key="w_view", on_change="rerun")
for tab, (view, render) in zip(tabs, sections.items(), strict=True):
    if tab.open:
        with tab:
            views.guarded(VIEWS[view], lambda render=render: render(scenario, arch, gpu))
