"""Serving trade-offs section: allocation strategies, prefix sharing, offloading, quantized and
static caches, latency lower bounds, window behaviour and what the cache buys (no cache vs cache).

Inputs come from the Scenario (its model, ``tokens``, ``users``, ``prefix_tokens``,
``output_tokens``, ``engine``, ``kv_dtypes``, ``block_size``, ``tp``, and the images each request
brings: ``im``/``iw``/``ih``, whose tokens every prompt and context here includes —
``scenario.scenario_request_tokens``, ``serving.with_image_tokens``) plus local widgets keyed
``sv_*`` (carried in the link as ``sv=``), every one of them used by its chart. Every number comes
from ``kvplan.serving`` / ``kvplan.nocache``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from kvplan.arch import ModelArch
from kvplan.errors import KVPlanError, md, md_name
from kvplan.nocache import compare
from kvplan.scenario import Scenario, scenario_media_tokens, scenario_request_shape, scenario_request_tokens
from kvplan.serving import (
    MLPERF_BOUNDS,
    SHAREGPT_OUTPUT_MEAN,
    SHAREGPT_PROMPT_MEAN,
    SNAPSHOTS,
    LengthDist,
    OffloadResult,
    PrefixResult,
    StaticResult,
    Workload,
    allocation_for_model,
    offloading,
    parse_lengths_csv,
    prefix_caching,
    quantized_cache,
    roofline,
    sample_workload,
    static_cache,
    window_explanations,
    with_image_tokens,
)
from kvplan.ui.cached import cache_key, primary_fit, scenario_from_key
from kvplan.ui.charts import limit_line, marker_line
from kvplan.ui.serving_state import NOCACHE_METRICS, PREFIX_ENGINES, SOURCES, bounds, ensure
from kvplan.ui.theme import SIDE_LEGEND, chart_config, figure_from_dict, new_figure

GIB = 1 << 30
#: At most this many points per series (the users axis is sampled, never one point per user).
MAX_POINTS = 200


def _export(name: str, df: pd.DataFrame, fig: Any, scenario: Scenario) -> None:
    try:
        from kvplan.ui.exports_ui import download_buttons
    except ImportError:  # pragma: no cover - exports module missing
        return
    download_buttons(name, df, fig, scenario)


def _shown(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` for ``st.dataframe``: exact integers beyond int64 (a model at the input limits) become
    text with separators, which Arrow can carry; the CSV keeps them as numbers."""
    def big(value: object) -> bool:
        return isinstance(value, int) and not -(2**63) <= value < 2**63

    out = df.copy()
    for column in out.columns:
        if out[column].dtype == object and out[column].map(big).any():
            out[column] = out[column].map(lambda v: f"{v:,}" if isinstance(v, int) else v)
    return out


def _captions(lines: list[str]) -> None:
    for line in lines:
        st.caption(md(line))


def _guard(body: Callable[[], None]) -> None:
    """A refusal that is the answer (e.g. QuantizedCache on a sliding-window model) is shown as
    information; any other KVPlanError as an error."""
    try:
        body()
    except KVPlanError as exc:
        (st.info if exc.code == "engine.dtype" else st.error)(md(exc))


def _fig(title: str, x: str, y: str) -> go.Figure:
    fig = new_figure()  # explicit plotly_white template (kvplan.ui.theme.apply_template)
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=420,
                      hovermode="x unified", legend=SIDE_LEGEND)
    return fig


def _kv_dtype(scenario: Scenario) -> str:
    return scenario.kv_dtypes[0] if scenario.kv_dtypes else "bf16"


def _budget(scenario: Scenario) -> int:
    """The KV budget per GPU of the scenario's engine (the cached ``kvplan.capacity.fit``)."""
    return primary_fit(cache_key(scenario)).kv_budget_bytes


def render(scenario: Scenario, arch: ModelArch) -> None:
    """Draw the serving section for ``scenario`` (its model is ``arch``; the accelerator and the
    budget come from the cached answers)."""
    st.subheader("Serving trade-offs")
    st.caption("Lower bounds and memory accounting from published engine rules; see each chart's "
               "assumptions. Inputs: the scenario's context, users, shared prefix and output "
               "tokens, plus the controls below.")
    if shape := scenario_request_shape(scenario):
        media = "image and video" if scenario.videos and scenario.images else \
            "video" if scenario.videos else "image"
        st.caption(md(f"Each request: {shape} (sidebar: Serving workload). Every prompt and context "
                      f"below includes the {media} tokens."))
    workload_holder: dict[str, Workload] = {}
    with st.expander("1 · Allocation strategies: contiguous vs paged vs token", expanded=True):
        _guard(lambda: _allocation(scenario, arch, workload_holder))
    with st.expander("2 · Prefix caching", expanded=False):
        _guard(lambda: _prefix(scenario))
    with st.expander("3 · Offloading (transformers offloaded cache)", expanded=False):
        _guard(lambda: _offload(scenario))
    with st.expander("4 · Quantized cache (transformers QuantizedCache)", expanded=False):
        _guard(lambda: _quantized(scenario))
    with st.expander("5 · Static cache waste", expanded=False):
        _guard(lambda: _static(scenario, arch, workload_holder))
    with st.expander("6 · Decode / prefill lower bounds vs MLPerf", expanded=False):
        _guard(lambda: _roofline(scenario))
    with st.expander("7 · Where the cache stops growing (windows)", expanded=False):
        _guard(lambda: _windows(scenario, arch))
    with st.expander("8 · What the cache buys: no cache vs cache options", expanded=False):
        _guard(lambda: _nocache(scenario))


def _workload(scenario: Scenario) -> tuple[Workload | None, int, str]:
    """The sampled (or uploaded) request lengths, each prompt with the scenario's image and video
    tokens."""
    workload, max_len, source = _text_workload(scenario)
    if workload is None:
        return workload, max_len, source
    return (with_image_tokens(workload, scenario_media_tokens(scenario), scenario.images, max_len,
                              scenario.videos), max_len, source)


def _text_workload(scenario: Scenario) -> tuple[Workload | None, int, str]:
    state = st.session_state
    source = st.selectbox("Request lengths", list(SOURCES), format_func=SOURCES.__getitem__,
                          key=ensure("source", scenario, state))
    max_len = st.number_input("Maximum length (tokens)", *bounds("max_len"),
                              key=ensure("max_len", scenario, state))
    n = st.number_input("Requests sampled", *bounds("n"), key=ensure("n", scenario, state))
    seed = st.number_input("Seed", *bounds("seed"), key=ensure("seed", scenario, state))
    if source == "paper":  # the paper's ShareGPT-like lengths, on the scenario's own model
        prompt = LengthDist(kind="lognormal", mean=SHAREGPT_PROMPT_MEAN, sigma=1.0)
        output = LengthDist(kind="lognormal", mean=SHAREGPT_OUTPUT_MEAN, sigma=1.0)
        return sample_workload(int(n), prompt, output, int(seed), int(max_len)), int(max_len), source
    if source == "csv":
        upload = st.file_uploader("CSV of prompt,output token counts", type=["csv"], key="sv_csv")
        if upload is None:
            st.info("Upload a CSV with two columns: prompt tokens, output tokens (≤ 100,000 rows). "
                "An uploaded file does not travel in the link.")
            return None, int(max_len), "none"
        w = parse_lengths_csv(upload.getvalue())
        return w, int(max_len), source
    cols = st.columns(2)
    dists = []
    for col, label in ((cols[0], "prompt"), (cols[1], "output")):
        if source == "fixed":
            dists.append(LengthDist(kind="fixed", value=col.number_input(
                f"{label} tokens", *bounds(f"{label}_fixed"), key=ensure(f"{label}_fixed", scenario, state))))
        elif source == "uniform":
            low = col.number_input(f"{label} min", *bounds(f"{label}_low"),
                                   key=ensure(f"{label}_low", scenario, state))
            high = col.number_input(f"{label} max", *bounds(f"{label}_high"),
                                    key=ensure(f"{label}_high", scenario, state))
            dists.append(LengthDist(kind="uniform", low=low, high=high))
        else:
            mean = col.number_input(f"{label} mean", *bounds(f"{label}_mean"),
                                    key=ensure(f"{label}_mean", scenario, state))
            sigma = col.number_input(f"{label} sigma", *bounds(f"{label}_sigma"),
                                     key=ensure(f"{label}_sigma", scenario, state))
            dists.append(LengthDist(kind="lognormal", mean=mean, sigma=sigma))
    return sample_workload(int(n), dists[0], dists[1], int(seed), int(max_len)), int(max_len), source


def _allocation(scenario: Scenario, arch: ModelArch, holder: dict[str, Workload]) -> None:
    workload, max_len, source = _workload(scenario)
    block = st.number_input("Block size (tokens)", *bounds("block"),
                            key=ensure("block", scenario, st.session_state))
    snapshot = st.radio("Snapshot", list(SNAPSHOTS), horizontal=True,
                        key=ensure("snapshot", scenario, st.session_state),
                        help="in_flight: steady-state continuous batching; final: every request "
                             "has generated its whole output")
    if workload is None:
        return
    result = allocation_for_model(arch, workload, max_len, _kv_dtype(scenario), int(block),
                                  _budget(scenario), snapshot, 0)
    holder["workload"] = workload
    fig = _allocation_figure(result.table, arch.name, max_len, int(block))
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_alloc_chart")
    st.dataframe(_shown(result.table), hide_index=True)
    notes = [f"{arch.name}, KV {_kv_dtype(scenario)}, maximum length {max_len:,} tokens, block "
             f"{int(block):,} tokens, {workload.source}"]
    if source == "paper":
        notes.append(f"ShareGPT-like log-normal lengths (vLLM paper Fig. 11a means {SHAREGPT_PROMPT_MEAN}"
                     f" / {SHAREGPT_OUTPUT_MEAN} tokens, sigma 1 assumed); the paper's own OPT-13B "
                     "case is the named scenario 'opt-13b-vllm-paper'")
    _captions(notes + result.assumptions)
    _export("serving_allocation", result.table, fig, scenario)


def _allocation_figure(table: pd.DataFrame, model: str, max_len: int, block: int) -> go.Figure:
    fig = _fig(f"KV memory used vs reserved per strategy — {model}, max length {max_len:,}, "
               f"block {block:,}", "strategy", "slots (tokens)")
    fig.update_layout(barmode="stack", hovermode="closest")
    for column, label in (("used_tokens", "used"), ("reservation_waste_slots", "reserved ahead"),
                          ("internal_waste_slots", "internal waste")):
        fig.add_bar(x=table["strategy"], y=table[column], name=label,
                    hovertemplate="%{x}<br>" + label + ": %{y:,} slots<extra></extra>")
    for _, row in table.iterrows():
        fig.add_annotation(x=row["strategy"], y=row["reserved_slots"], showarrow=False, yshift=10,
                           text=f"{row['utilization_pct']:.1f}% used")
    return fig


def _prefix(scenario: Scenario) -> None:
    prompt = max(scenario.prefix_tokens + 1, scenario_request_tokens(scenario) - scenario.output_tokens)
    engine = st.selectbox("Engine", list(PREFIX_ENGINES),
                          key=ensure("pf_engine", scenario, st.session_state))
    unit = st.number_input("Block / page size", *bounds("pf_unit"),
                           key=ensure("pf_unit", scenario, st.session_state))
    result, spec = _prefix_data(cache_key(scenario), engine, int(unit))
    curve = result.curve
    fig = figure_from_dict(spec)
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_prefix_chart")
    st.caption(f"Shared: {result.shared_tokens:,} tokens = {result.shared_blocks:,} unit(s) of "
               f"{md_name(result.unit)}; saved {result.saved_bytes / GIB:,.3f} GiB at {scenario.users:,} "
               f"requests (prompt {prompt:,}, output {scenario.output_tokens:,} tokens)")
    _captions(result.assumptions)
    _export("serving_prefix", curve, fig, scenario)


@st.cache_data(max_entries=64, show_spinner=False)
def _prefix_data(key: str, engine: str, unit: int) -> tuple[PrefixResult, dict[str, Any]]:
    scenario, plan = scenario_from_key(key)
    arch = plan.arch
    prompt = max(scenario.prefix_tokens + 1, scenario_request_tokens(scenario) - scenario.output_tokens)
    result = prefix_caching(arch, scenario.users, scenario.prefix_tokens, prompt, scenario.output_tokens,
                            PREFIX_ENGINES[engine], _kv_dtype(scenario), unit,
                            points=MAX_POINTS)
    curve = result.curve
    fig = _fig(f"{scenario.users:,} requests sharing a {scenario.prefix_tokens:,}-token prefix",
               "concurrent requests", "KV memory (GiB)")
    fig.add_scatter(x=curve["requests"], y=curve["without_sharing_bytes"] / GIB,
                    name="without sharing", mode="lines")
    fig.add_scatter(x=curve["requests"], y=curve["with_sharing_bytes"] / GIB,
                    name="with prefix sharing", mode="lines")
    return result, fig.to_dict()


def _offload(scenario: Scenario) -> None:
    c1, c2 = st.columns(2)
    ram = c1.number_input("CPU RAM (GiB)", *bounds("ram"), key=ensure("ram", scenario, st.session_state))
    link = c2.number_input("Host link (GB/s per direction)", *bounds("link"),
                           key=ensure("link", scenario, st.session_state))
    df, r, spec = _offload_data(cache_key(scenario), float(ram), float(link))
    fig = figure_from_dict(spec)
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_offload_chart")
    if not df["fits_cpu"].iloc[-1]:
        st.warning(f"At {int(df['tokens'].iloc[-1]):,} tokens the offloaded KV exceeds {ram:g} GiB "
                   "of CPU RAM.")
    _captions([r.formula, *r.assumptions])
    _export("serving_offload", df, fig, scenario)


@st.cache_data(max_entries=64, show_spinner=False)
def _offload_data(key: str, ram: float,
                  link: float) -> tuple[pd.DataFrame, OffloadResult, dict[str, Any]]:
    scenario, plan = scenario_from_key(key)
    arch, gpu = plan.arch, plan.device
    tokens = np.unique(np.geomspace(1, max(scenario_request_tokens(scenario), 2), 24).astype(np.int64))
    rows = []
    for t in tokens:
        r = offloading(arch, gpu, int(t), scenario.users, _kv_dtype(scenario), int(ram * GIB), link)
        rows.append({"tokens": int(t), "gpu_kv_bytes": r.gpu_kv_bytes, "cpu_kv_bytes": r.cpu_kv_bytes,
                     "full_kv_bytes": r.full_kv_bytes,
                     "transfer_ms_per_token": r.transfer_s_per_token * 1e3, "fits_cpu": r.fits_cpu})
    df = pd.DataFrame(rows)
    fig = _fig(f"Offloaded cache, batch {scenario.users:,}", "context (tokens)", "GiB")
    fig.add_scatter(x=df["tokens"], y=df["full_kv_bytes"] / GIB, name="KV without offloading")
    fig.add_scatter(x=df["tokens"], y=df["gpu_kv_bytes"] / GIB, name="GPU KV (offloaded)")
    fig.add_scatter(x=df["tokens"], y=df["cpu_kv_bytes"] / GIB, name="CPU KV")
    fig.add_scatter(x=df["tokens"], y=df["transfer_ms_per_token"], name="transfer ms / token",
                    yaxis="y2", line={"dash": "dot"})
    fig.update_layout(yaxis2={"title": "ms per decoded token", "overlaying": "y", "side": "right"})
    limit_line(fig, arch.max_position_embeddings, scenario.log_x, int(tokens[-1]))
    if scenario.log_x:
        fig.update_xaxes(type="log")
    return df, r, fig.to_dict()


def _quantized(scenario: Scenario) -> None:
    c1, c2, c3 = st.columns(3)
    state = st.session_state
    nbits = c1.selectbox("nbits", [4, 2], key=ensure("q_bits", scenario, state))
    group = c2.number_input("q_group_size", *bounds("q_group"), key=ensure("q_group", scenario, state))
    resid = c3.number_input("residual_length", *bounds("q_resid"), key=ensure("q_resid", scenario, state))
    result, spec = _quantized_data(cache_key(scenario), int(nbits), int(group), int(resid))
    fig = figure_from_dict(spec)
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_quant_chart")
    _captions([result.formula, *result.assumptions])
    _export("serving_quantized", result.curve, fig, scenario)


@st.cache_data(max_entries=64, show_spinner=False)
def _quantized_data(key: str, nbits: int, group: int, resid: int) -> Any:
    scenario, plan = scenario_from_key(key)
    arch = plan.arch
    tokens = np.unique(np.geomspace(1, max(scenario_request_tokens(scenario), 2), 60).astype(np.int64))
    result = quantized_cache(arch, tokens, nbits, group, resid, scenario.users)
    curve = result.curve
    fig = _fig(f"QuantizedCache int{nbits} vs unquantized, batch {scenario.users:,}",
               "context (tokens)", "KV memory (GiB)")
    for column, label in (("unquantized_bytes", "unquantized"),
                          ("quantized_worst_bytes", "quantized (residual full)"),
                          ("quantized_best_bytes", "quantized (residual empty)"),
                          ("quantized_peak_bytes", "quantized + transient dequantized layer")):
        fig.add_scatter(x=curve["tokens"], y=curve[column] / GIB, name=label)
    if result.worth_it_from_tokens:
        marker_line(fig, "x", result.worth_it_from_tokens, "#555", "dash",
                    f"worth it from {result.worth_it_from_tokens:,} tokens", scenario.log_x)
    limit_line(fig, arch.max_position_embeddings, scenario.log_x, int(tokens[-1]))
    if scenario.log_x:
        fig.update_xaxes(type="log")
    return result, fig.to_dict()


def _static(scenario: Scenario, arch: ModelArch, holder: dict[str, Workload]) -> None:
    max_len = st.number_input("max_cache_len (tokens)", *bounds("static_len"),
                              key=ensure("static_len", scenario, st.session_state))
    workload = holder.get("workload")
    if workload is None:  # the default sample depends on the scenario only: cache it
        r, df, spec = _static_default(cache_key(scenario), int(max_len))
        fig = figure_from_dict(spec)
    else:
        r, df, fig = _static_build(scenario, arch, workload, int(max_len))
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_static_chart")
    st.caption(f"Utilization {r.utilization_pct:.1f}%; {r.overflow_requests:,} request(s) longer "
               f"than max_cache_len cannot run.")
    _captions(r.assumptions)
    _export("serving_static", df, fig, scenario)


@st.cache_data(max_entries=64, show_spinner=False)
def _static_default(key: str, max_len: int) -> tuple[StaticResult, pd.DataFrame, dict[str, Any]]:
    scenario, plan = scenario_from_key(key)
    arch = plan.arch
    workload = with_image_tokens(sample_workload(
        2000, LengthDist(kind="lognormal", mean=max(scenario.prefix_tokens, 1)),
        LengthDist(kind="lognormal", mean=scenario.output_tokens), seed=0),
        scenario_media_tokens(scenario), scenario.images, videos=scenario.videos)
    r, df, fig = _static_build(scenario, arch, workload, max_len)
    return r, df, fig.to_dict()


def _static_build(scenario: Scenario, arch: ModelArch, workload: Workload,
                  max_len: int) -> tuple[StaticResult, pd.DataFrame, go.Figure]:
    r = static_cache(arch, workload.final, max_len, _kv_dtype(scenario))
    df = pd.DataFrame([{"what": "allocated", "bytes": r.allocated_bytes},
                       {"what": "used", "bytes": r.used_bytes},
                       {"what": "wasted", "bytes": r.waste_bytes}])
    fig = _fig(f"StaticCache for {r.requests:,} requests ({workload.source})", "", "GiB")
    fig.update_layout(hovermode="closest")
    fig.add_bar(x=df["what"], y=df["bytes"] / GIB, text=[f"{b / GIB:,.2f}" for b in df["bytes"]])
    return r, df, fig


def _roofline(scenario: Scenario) -> None:
    df, notes, prompt, spec = _roofline_data(cache_key(scenario))
    fig = figure_from_dict(spec)
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_roofline_chart")
    st.caption(f"TTFT lower bound for one {prompt:,}-token prompt: {df['ttft_ms'].iloc[0]:,.1f} ms")
    st.dataframe(df, hide_index=True)
    _captions(notes)
    _export("serving_roofline", df, fig, scenario)


@st.cache_data(max_entries=64, show_spinner=False)
def _roofline_data(key: str) -> tuple[pd.DataFrame, list[str], int, dict[str, Any]]:
    scenario, plan = scenario_from_key(key)
    arch, gpu = plan.arch, plan.device
    batches = np.unique(np.geomspace(1, max(scenario.users, 1024), 30).astype(np.int64))
    context = scenario_request_tokens(scenario)
    prompt = max(context - scenario.output_tokens, 1)
    wd = None if scenario.weight_dtype == "auto" else scenario.weight_dtype
    df, notes = roofline(arch, gpu, context, prompt, batches, _kv_dtype(scenario), wd,
                         scenario.tp)
    fig = _fig(f"Time per output token ≥ bytes / bandwidth ({gpu.name}, tp {scenario.tp})",
               "batch (concurrent sequences)", "ms per output token (lower bound)")
    fig.add_scatter(x=df["batch"], y=df["tpot_ms"], name="TPOT lower bound")
    colors = {"interactive": "#d62728", "standard": "#2ca02c"}
    for name, (ttft, tpot) in MLPERF_BOUNDS.items():
        color = colors["interactive" if "interactive" in name else "standard"]
        # log axis: the annotation goes at log10(y) (marker_line); add_hline put it at 10^y
        marker_line(fig, "y", tpot, color, "dash", f"MLPerf {name}: TPOT {tpot:g} ms (TTFT {ttft:g} ms)",
                    log=True)
    values = [v for v in df["tpot_ms"].tolist() if v > 0] + [t for _, t in MLPERF_BOUNDS.values()]
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log", range=[math.log10(min(values)) - 0.2, math.log10(max(values)) + 0.2])
    return df, notes, prompt, fig.to_dict()


def _windows(scenario: Scenario, arch: ModelArch) -> None:
    length = scenario_request_tokens(scenario)
    rows = pd.DataFrame(window_explanations(arch, max_cache_len=length))
    st.dataframe(rows, hide_index=True)
    st.caption("From the engine rules in kvplan.engines; static caches pre-allocate "
               f"max_cache_len = {length:,} tokens.")
    _export("serving_windows", rows, None, scenario)


def _nocache(scenario: Scenario) -> None:
    new = st.number_input("New tokens N", *bounds("nc_new"), key=ensure("nc_new", scenario, st.session_state))
    metric = st.radio("Show", list(NOCACHE_METRICS), horizontal=True,
                      key=ensure("nc_metric", scenario, st.session_state))
    df, notes, spec = _nocache_data(cache_key(scenario), int(new), metric)
    fig = figure_from_dict(spec)
    st.plotly_chart(fig, theme=None, config=chart_config(), key="sv_nocache_chart")
    _captions(notes)
    _export("serving_nocache", df, fig, scenario)


@st.cache_data(max_entries=64, show_spinner=False)
def _nocache_data(key: str, new: int, metric: str) -> Any:
    scenario, plan = scenario_from_key(key)
    arch, gpu = plan.arch, plan.device
    prompt = max(scenario.prefix_tokens, 1) + scenario_media_tokens(scenario)
    wd = None if scenario.weight_dtype == "auto" else scenario.weight_dtype
    df, notes = compare(arch, gpu, prompt, new, _kv_dtype(scenario), wd)
    labels = {"time_s": "cumulative time (s, lower bound)", "flops": "cumulative FLOPs",
              "peak_memory_bytes": "peak GPU memory (GiB)"}
    fig = _fig(f"Generating N tokens after a {prompt:,}-token prompt", "new tokens N",
               labels[metric])
    scale = GIB if metric == "peak_memory_bytes" else 1
    for option, part in df.groupby("option", sort=False):
        fig.add_scatter(x=part["new_tokens"], y=part[metric] / scale, name=str(option))
    return df, notes, fig.to_dict()
