"""The offload-tiers view: sessions resident per tier against the context length, beside the GPU pool,
and each tier's bytes per token, host memory and restore bound (``kvplan.offload``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from kvplan.disagg import DisaggQuery
from kvplan.engines.tiers import backends_for
from kvplan.errors import KVPlanError, md
from kvplan.offload import OffloadQuery, offload, tiers_of
from kvplan.plan import Plan
from kvplan.recommend import pd_ratio
from kvplan.scenario import Scenario, scenario_plan
from kvplan.ui.serving_state import bounds, ensure
from kvplan.ui.theme import chart_config, fmt_bytes

_LABELS = {"native": "vLLM native CPU (--kv-offloading-size)", "lmcache": "LMCache (max_local_cpu_size)",
           "hicache": "SGLang HiCache (--hicache-ratio / --hicache-size)"}


def _lengths(limit: int) -> np.ndarray:
    top = max(min(limit, 10_000_000), 1024)
    return np.unique(np.geomspace(1024, top, 40).astype(np.int64))


def render(scenario: Scenario) -> pd.DataFrame | None:
    """The tab; its inputs live in the link's ``sv`` entries (``of_*``, ``serving_state.INPUTS``)."""
    plan = scenario_plan(scenario)
    backends = list(backends_for(plan.engine.id))
    if not backends:
        st.info(md(f"Offload tiers are modelled for vLLM (native, LMCache) and SGLang (HiCache); "
                   f"this scenario runs {plan.engine.label}."))
        return None
    state = st.session_state
    cols = st.columns(4)
    key = ensure("of_backend", scenario, state)
    if state[key] not in backends:  # a link's backend of another engine: this engine's first
        state[key] = backends[0]
    backend = cols[0].selectbox("Tier", backends, format_func=lambda b: _LABELS[b], key=key)
    size = cols[1].number_input("Size (GiB; HiCache: GB, 0 = ratio)", *bounds("of_size"),
                                key=ensure("of_size", scenario, state))
    ram = cols[2].number_input("Host RAM per node (GiB, 0 = not checked)", *bounds("of_ram"),
                               key=ensure("of_ram", scenario, state))
    sessions = cols[3].number_input("Conversations sharing the tier", *bounds("of_sessions"),
                                    key=ensure("of_sessions", scenario, state))
    given = float(int(size)) if backend == "hicache" else float(size)
    query = OffloadQuery.model_validate({"backend": backend, "size_gib": given or None,
                                         "host_ram_gib": ram or None, "sessions": int(sessions) or None})
    try:
        answer = offload(plan, query)
        tiers = tiers_of(plan, query)
    except KVPlanError as err:
        st.warning(md(str(err)))
        return None
    lengths = _lengths(plan.length_limit)
    gpu = plan.pool.max_requests(lengths)
    frame = pd.DataFrame({"context (tokens)": lengths, "GPU pool (sessions)": gpu})
    fig: Any = go.Figure()
    fig.add_trace(go.Scatter(x=lengths, y=gpu, name="GPU pool", mode="lines"))
    for tier in tiers:
        counts = [tier.sessions(int(n)) for n in lengths]
        frame[f"{tier.tier} (sessions)"] = counts
        fig.add_trace(go.Scatter(x=lengths, y=counts, name=tier.tier, mode="lines"))
    fig.update_layout(title="Sessions resident per tier vs context", xaxis_type="log", yaxis_type="log",
                      xaxis_title="context (tokens)", yaxis_title="sessions per instance")
    st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_offload")
    from kvplan.ui import exports_ui

    exports_ui.download_buttons("offload", frame, fig, scenario)
    for row in answer.tiers:
        restore = "–" if row.restore_seconds is None else f"{row.restore_seconds:.4f} s"
        st.markdown(md(f"{row.tier}: {row.sessions_per_instance:,} sessions of {row.tokens:,} tokens per "
                       f"instance ({row.sessions_per_node:,} per node); {row.rank_token_bytes:,} B per "
                       f"token per rank in the tier against {row.gpu_rank_token_bytes:,} B on the GPU; "
                       f"pins {fmt_bytes(row.host_bytes_per_node)} per node; restore ≥ {restore}"))
        st.caption(md(" · ".join(row.formulas) + f" — {row.source}"))
    _render_split(scenario, plan)
    return frame


def _render_split(scenario: Scenario, plan: Plan) -> None:
    """Prefill:decode instances vs traffic for this model, accelerator and TP on both sides (the CLI's
    ``disagg`` sizes each side on its own accelerator and TP)."""
    prompt, output = scenario.tokens, max(scenario.output_tokens, 1)
    rates = [float(r) for r in np.geomspace(0.1, 1000, 25)]
    side = plan.vary(tokens=prompt + output)
    try:
        ratio = pd_ratio(side, side, DisaggQuery(prompt_tokens=prompt, output_tokens=output), rates)
    except KVPlanError as err:
        st.info(md(f"Prefill/decode split: {err}"))
        return
    rows = pd.DataFrame([r.model_dump() for r in ratio.rows]).rename(columns={
        "rps": "traffic (requests/s)", "prefill_instances": "prefill instances (≥)",
        "decode_instances": "decode instances (≥)", "ratio": "P:D ratio"})
    fig: Any = go.Figure()
    fig.add_trace(go.Scatter(x=rows.iloc[:, 0], y=rows.iloc[:, 1], name="prefill instances", mode="lines"))
    fig.add_trace(go.Scatter(x=rows.iloc[:, 0], y=rows.iloc[:, 2], name="decode instances", mode="lines"))
    fig.add_trace(go.Scatter(x=rows.iloc[:, 0], y=rows.iloc[:, 3], name="P:D ratio", mode="lines",
                             yaxis="y2"))
    fig.update_layout(title=f"Prefill:decode instances vs traffic ({prompt:,} + {output:,} tokens)",
                      xaxis_type="log", xaxis_title="traffic (requests/s)", yaxis_title="instances (≥)",
                      yaxis_type="log", yaxis2={"overlaying": "y", "side": "right", "title": "P:D"})
    st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_pd_ratio")
    st.caption(md(" · ".join(ratio.formulas)))
    from kvplan.ui import exports_ui

    exports_ui.download_buttons("pd_ratio", rows, fig, scenario)
