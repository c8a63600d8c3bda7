"""kvplan dashboard: `streamlit run app.py`. Thin: state from the URL, sidebar, then the views."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import streamlit as st

from kvplan.errors import KVPlanError, md
from kvplan.ui import calibrate_view, instances_view, lazy, offload_view, recommend_view, serving_view, views
from kvplan.ui.sidebar import (
    VIEWS,
    blocked_link,
    draw_workload_slots,
    outer_inputs,
    render_blocked_link,
    render_model_and_hardware,
    render_workload,
    resolve_arch,
    resolve_gpu,
    scenario_from_widgets,
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
workload_slots = draw_workload_slots()
st.session_state["_outer_inputs"] = outer_inputs()
st.session_state["_link_warnings"] = link_warnings

# One short title line (one line at phone width too) under little empty space (theme.paddingTop in
# .streamlit/config.toml: no st.html style element, whose renderer the browser would load on the
# first render), so the answer is on the first screen; then the answer, then everything else.
st.markdown("#### kvplan · KV-cache planner", help="Plans the GPU memory of an LLM's KV cache "
            "engine by engine; every number says which engine, release and formula it comes from.")


class Slots(NamedTuple):
    """What full runs draw around the fragment, in page order: the fragment's place (``head``), the
    main area's lazy boxes, the container under the KV-budget box, and the view tabs; the fragment
    fills them. A keypress then re-sends none of the 14 blocks of the boxes and tabs (bench/README.md)."""

    head: Any
    boxes: dict[str, Any]
    after_budget: Any
    tabs: list[Any]


def draw_slots() -> Slots | None:
    """The containers of a page that answers; None for a link still waiting to be answered (a model
    or accelerator it names cannot be used: ``blocked_link``) or a model or accelerator that cannot
    be read, where only the fragment's message is shown."""
    if st.session_state.get("_blocked_link") is not None:
        return None
    try:
        scenario = scenario_from_widgets()
        resolve_arch(scenario)
        resolve_gpu(scenario)
    except KVPlanError:
        return None
    head = st.container()
    boxes = {"box_budget": lazy.box(st, "box_budget")}
    after_budget = st.container()
    boxes.update((key, lazy.box(st, key))
                 for key in ("box_seeds", "box_share", "box_calibrate", "box_instances"))
    # Only the open tab runs (lazy tabs); the open tab is part of the link (vw=).
    # A tab's change reruns the page: a fragment may fill only a container it wrote to on the last
    # full run, and writing to all eight (st.empty) would cost every first render and keypress 14
    # elements more.
    tabs = st.tabs(list(VIEWS.values()), key="w_view", on_change="rerun")
    st.session_state["_view_drawn"] = st.session_state.get("w_view")  # the tab they show open
    return Slots(head, boxes, after_budget, tabs)


@st.fragment(key="page")
def page(workload: tuple[Any, dict[str, Any]], slots: Slots | None) -> None:
    """Everything that follows the workload: its sidebar inputs (into ``workload``), the answer, the
    boxes' and the open view's content (into ``slots``); the full run drew both.

    A fragment, so a change of one of its inputs (a keypress on the context length, a widget in a
    box) reruns only this and the browser redraws only its elements, not the
    model-and-hardware inputs, the boxes or the tabs (bench/README.md, issue #33). When its own
    callbacks changed one of those inputs (a named scenario, the calibrated reserve), or a link
    that was waiting is answered now, the whole page is drawn again."""
    state = st.session_state
    redrawn = state.pop("_redrawn", False)  # the run before asked for this one (below)
    if outer_inputs() != state.get("_outer_inputs") or (
            slots is not None and state.get("w_view") != state.get("_view_drawn")):
        st.rerun()  # a callback here changed what the full run drew (inputs, the open tab)
    warnings = state.pop("_link_warnings", [])  # a fragment rerun reads no link
    scenario = render_workload(*workload)
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
    if slots is None:  # drawn without its boxes and views: the link waiting until now
        if not redrawn:  # once: a page that still has no slots then stays as it is, never a loop
            state["_redrawn"] = True
            st.rerun()
        return
    boxes = slots.boxes
    views.guarded("Answer", lambda: views.render_answer(scenario, gpu))
    for message in warnings:
        st.warning(md(message))
    views.guarded("Key numbers", lambda: views.render_kpis(scenario, arch, gpu, boxes["box_budget"],
                                                           slots.after_budget))
    views.render_seeds(boxes["box_seeds"])
    views.render_share(scenario, boxes["box_share"])
    views.guarded("Calibration", lambda: calibrate_view.render(scenario, arch, gpu, boxes["box_calibrate"]))
    views.guarded("Several engines on one GPU",
                  lambda: instances_view.render(scenario, gpu, boxes["box_instances"]))

    # Each view takes only what it uses; the open one is drawn into its tab.
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
    with slots.tabs[list(VIEWS).index(scenario.view)]:
        views.guarded(VIEWS[scenario.view], sections[scenario.view])


slots = draw_slots()
with slots.head if slots is not None else contextlib.nullcontext():
    page(workload_slots, slots)
