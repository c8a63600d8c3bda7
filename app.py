"""kvplan dashboard: `streamlit run app.py`. Thin: state from the URL, sidebar, then the views."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from kvplan.errors import KVPlanError, md
from kvplan.ui import calibrate_view, instances_view, offload_view, recommend_view, serving_view, views
from kvplan.ui.sidebar import (
    VIEWS,
    blocked_link,
    outer_inputs,
    render_blocked_link,
    render_model_and_hardware,
    render_workload,
    resolve_arch,
    resolve_gpu,
    sync_from_url,
    write_url,
)

st.set_page_config(page_title="kvplan — KV-cache memory planner", page_icon="🧮", layout="wide")


@st.cache_resource(show_spinner=False)
def _png_warm_up() -> bool:
    """Once per server process: start the PNG export browser in the background (kvplan.png)."""
    from kvplan.png import warm_up_in_background

    return warm_up_in_background() is not None


_png_warm_up()

link_warnings = sync_from_url()  # first load, Back/Forward or an edited link
render_model_and_hardware()
st.session_state["_outer_inputs"] = outer_inputs()
st.session_state["_link_warnings"] = link_warnings

# One short title line (one line at phone width too) under little empty space (theme.paddingTop in
# .streamlit/config.toml: no st.html style element, whose renderer the browser would load on the
# first render), so the answer is on the first screen; then the answer, then everything else.
st.markdown("#### kvplan · KV-cache planner", help="Plans the GPU memory of an LLM's KV cache "
            "engine by engine; every number says which engine, release and formula it comes from.")


@st.fragment
def page() -> None:
    """Everything that follows the workload: its sidebar inputs, the answer, the boxes, the views.

    A fragment, so a change of one of its inputs (a keypress on the context length, a view tab, a
    box) reruns only this and the browser redraws only its elements, not the model-and-hardware
    inputs above (bench/README.md, issue #33). Its own callbacks may change those (a named
    scenario, the calibrated reserve): then the whole page is drawn again."""
    if outer_inputs() != st.session_state.get("_outer_inputs"):
        st.rerun()
    warnings = st.session_state.pop("_link_warnings", [])  # a fragment rerun reads no link
    scenario = render_workload()
    blocked = blocked_link(scenario)  # a link whose model or GPU cannot be used: kept as typed, unanswered
    if blocked is None:
        write_url(scenario)
    if blocked is not None:
        render_blocked_link(blocked)
        for message in warnings:
            st.warning(md(message))
        return
    try:
        arch = resolve_arch(scenario)
        gpu = resolve_gpu(scenario)
    except KVPlanError as err:
        for message in warnings:
            st.warning(md(message))
        st.error(md(err))
        return
    views.guarded("Answer", lambda: views.render_answer(scenario, gpu))
    for message in warnings:
        st.warning(md(message))
    views.guarded("Key numbers", lambda: views.render_kpis(scenario, arch, gpu))
    views.render_seeds()
    views.render_share(scenario)
    views.guarded("Calibration", lambda: calibrate_view.render(scenario, arch, gpu))
    views.guarded("Several engines on one GPU", lambda: instances_view.render(scenario, gpu))

    # Each view takes only what it uses.
    sections: dict[str, Callable[[], object]] = {
        "context": lambda: views.render_kv_context(scenario, arch),
        "users": lambda: views.render_kv_users(scenario),
        "memory": lambda: views.render_memory(scenario),
        "requests": lambda: views.render_requests(scenario),
        "designs": lambda: views.render_designs(scenario),
        "serving": lambda: serving_view.render(scenario, arch),
        "recommend": lambda: recommend_view.render(scenario, arch, gpu),
        "offload": lambda: offload_view.render(scenario),
    }
    # Only the open tab runs (lazy tabs); the open tab is part of the link (vw=).
    tabs = st.tabs(list(VIEWS.values()), key="w_view", on_change="rerun")
    for tab, (view, render) in zip(tabs, sections.items(), strict=True):
        if tab.open:
            with tab:
                views.guarded(VIEWS[view], render)


page()
