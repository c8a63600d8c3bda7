"""kvplan dashboard: `streamlit run app.py`. Thin: state from the URL, sidebar, then the views."""

from __future__ import annotations

import streamlit as st

from kvplan.errors import KVPlanError
from kvplan.ui import serving_view, views
from kvplan.ui.sidebar import render_sidebar, resolve_arch, resolve_gpu, sync_from_url, write_url

st.set_page_config(page_title="kvplan — KV-cache memory planner", page_icon="🧮", layout="wide")

link_warnings = sync_from_url()  # first load, Back/Forward or an edited link
scenario = render_sidebar()
write_url(scenario)

st.title("kvplan — KV-cache memory planner")
for message in link_warnings:
    st.warning(message)
views.render_seeds()
views.render_share(scenario)

try:
    arch = resolve_arch(scenario)
    gpu = resolve_gpu(scenario)
except KVPlanError as err:
    st.error(str(err))
    st.stop()

views.guarded("Key numbers", lambda: views.render_kpis(scenario, arch, gpu))

tabs = st.tabs(["KV vs context", "KV vs users", "Memory per accelerator", "Requests that fit",
                "Design comparison", "Serving trade-offs"])
sections = [
    ("KV vs context", views.render_kv_context),
    ("KV vs users", views.render_kv_users),
    ("Memory per accelerator", views.render_memory),
    ("Requests that fit", views.render_requests),
    ("Design comparison", views.render_designs),
    ("Serving trade-offs", lambda s, a, g: serving_view.render(s, a, g)),
]
for tab, (title, render) in zip(tabs, sections, strict=True):
    with tab:
        views.guarded(title, lambda render=render: render(scenario, arch, gpu))
