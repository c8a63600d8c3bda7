"""Recommend a deployment (``vw=recommend``): traffic and targets in, the Pareto chart of cost per
million output tokens against TPOT, the ranked table with a link per candidate, and why the others
fail. Every number comes from ``kvplan.recommend`` (memory exact, time bounds)."""

from __future__ import annotations

import hashlib

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from kvplan.arch import ModelArch
from kvplan.dtypes import KV_DTYPE_CHOICES, WEIGHT_DTYPES
from kvplan.errors import KVPlanError, md, md_code, md_link_target, md_name
from kvplan.presets import GPU, efficiency_for, gpus, pick_price, price_quotes
from kvplan.recommend import (
    DEFAULT_WEIGHT_SEARCH,
    TARGET_PRESETS,
    Recommendation,
    RecommendQuery,
    calibrate_efficiency,
    failure_counts,
    ranked_rows,
    recommend,
    unit_headers,
)
from kvplan.report import absolute_link
from kvplan.scenario import (
    Scenario,
    scenario_fit_query,
    scenario_image_tokens,
    scenario_media_tokens,
    scenario_plan,
    scenario_request_shape,
    scenario_video_tokens,
)
from kvplan.serving import LengthDist, parse_lengths_csv
from kvplan.ui.cached import cache_key, scenario_from_key
from kvplan.ui.exports_ui import download_buttons, page_url
from kvplan.ui.serving_state import ensure
from kvplan.ui.theme import SIDE_LEGEND, chart_config, gpu_color, new_figure

TOP = 50
PRESET_LABELS = {"mlperf-llama2-70b-interactive": "MLPerf Llama-2-70B interactive (450 / 40 ms, p99)",
                 "mlperf-llama2-70b": "MLPerf Llama-2-70B standard (2000 / 200 ms, p99)",
                 "custom": "custom"}


@st.cache_data(max_entries=32, show_spinner=False)
def _search(key: str, query_json: str, csv: bytes | None) -> Recommendation:
    plan = scenario_from_key(key)[1]
    workload = parse_lengths_csv(csv) if csv is not None else None
    return recommend(plan, RecommendQuery.model_validate_json(query_json), workload)


def _dist(part: str, scenario: Scenario) -> tuple[LengthDist, bool]:
    state = st.session_state
    labels = {"fixed": "fixed", "lognormal": "log-normal", "csv": "from the uploaded CSV"}
    kind = st.selectbox(f"{part.title()} lengths", list(labels),
                        key=ensure(f"rc_{part}_kind", scenario, state),
                        format_func=lambda k: labels[str(k)])
    if kind == "lognormal":
        mean = st.number_input(f"{part.title()} mean (tokens)", 1.0, 1e7,
                               key=ensure(f"rc_{part}_mean", scenario, state))
        sigma = st.number_input(f"{part.title()} sigma", 0.0, 5.0,
                                key=ensure(f"rc_{part}_sigma", scenario, state))
        return LengthDist(kind="lognormal", mean=mean, sigma=sigma), False
    value = st.number_input(f"{part.title()} tokens", 1, 10_000_000,
                            key=ensure(f"rc_{part}_tokens", scenario, state))
    return LengthDist(kind="fixed", value=int(value)), kind == "csv"


def _inputs(scenario: Scenario, arch: ModelArch) -> tuple[RecommendQuery, bytes | None]:
    """The tab's inputs; traffic, lengths and targets travel in the link (``sv=rc_…``, see
    ``serving_state.INPUTS``), the candidate lists start from the sidebar's choices."""
    state = st.session_state
    cols = st.columns(3)
    with cols[0]:
        st.markdown("**Traffic**")
        traffic = st.radio("Traffic as", ["users", "rps"], key=ensure("rc_traffic", scenario, state),
                           horizontal=True,
                           format_func={"users": "concurrent users", "rps": "requests / s"}.get)
        if traffic == "users":
            users = int(st.number_input("Concurrent users", 0, 10_000_000,
                                        key=ensure("rc_users", scenario, state)))
            rps = 1.0
        else:
            users = 1
            rps = float(st.number_input("Requests per second", 0.0, 1e7,
                                        key=ensure("rc_rps", scenario, state)))
        prompt, csv_p = _dist("prompt", scenario)
        if scenario.images:
            st.caption(md(f"Each prompt also brings {scenario.images} image(s) at "
                          f"{scenario.image_width}×{scenario.image_height} = "
                          f"{scenario_image_tokens(scenario):,} tokens (sidebar: Serving workload); "
                          "the prompt lengths here count its text."))
        if scenario.videos:
            st.caption(md(f"Each prompt also brings {scenario.videos} video(s) of "
                          f"{scenario.video_seconds:g} s at {scenario.video_fps:g} fps, "
                          f"{scenario.video_width}×{scenario.video_height} = "
                          f"{scenario_video_tokens(scenario):,} tokens (sidebar: Serving workload); "
                          "the prompt lengths here count its text."))
        output, csv_o = _dist("output", scenario)
        csv = None
        if csv_p or csv_o:
            upload = st.file_uploader("Request lengths CSV (prompt,output per row)", type=["csv"],
                                      key="rc_csv")
            csv = upload.getvalue() if upload is not None else None
    with cols[1]:
        st.markdown("**Targets**")
        preset = str(st.selectbox("Preset", list(PRESET_LABELS),
                                  format_func=lambda k: PRESET_LABELS[str(k)],
                                  key=ensure("rc_preset", scenario, state)))
        if preset == "custom":
            ttft = st.number_input("TTFT target (ms)", 0.0, 1e7, key=ensure("rc_ttft", scenario, state))
            tpot = st.number_input("TPOT target (ms)", 0.0, 1e6, key=ensure("rc_tpot", scenario, state))
        else:
            ttft, tpot, _ = TARGET_PRESETS[preset]
            st.caption(f"TTFT ≤ {ttft:g} ms, TPOT ≤ {tpot:g} ms (MLPerf Inference loadgen/mlperf.conf, "
                       "Server scenario)")
        percentile = st.radio("Percentile", ["p99", "p50"], key=ensure("rc_pct", scenario, state),
                              horizontal=True)
        max_context = int(st.number_input("Max context (0 = none)", 0, 100_000_000,
                                          key=ensure("rc_maxctx", scenario, state)))
        efficiency = st.slider("Efficiency factor (1 = peak bandwidth and FLOPS)", 0.05, 1.0, step=0.05,
                               key=ensure("rc_eff", scenario, state))
    with cols[2]:
        st.markdown("**Candidates**")
        catalogue = list(gpus())
        chosen = st.multiselect("Accelerators (empty = none)", catalogue, default=catalogue,
                                key="rc_gpus")
        max_gpus = int(st.selectbox("GPUs per replica at most", [1, 2, 4, 8, 16, 32, 64],
                                    key=ensure("rc_maxgpus", scenario, state)))
        kv = st.multiselect("KV formats", list(KV_DTYPE_CHOICES), default=scenario.kv_dtypes,
                            key="rc_kv")
        searched = [*DEFAULT_WEIGHT_SEARCH] if scenario.weight_dtype == "auto" \
            and arch.weights.quantization is None else [scenario.weight_dtype]
        wd = st.multiselect("Weight formats", ["auto", *WEIGHT_DTYPES], default=searched, key="rc_wd",
                            help="By default the checkpoint's own plus fp8, nvfp4 and mxfp4, each only on "
                                 "accelerators with its tensor cores (others fail 'format'); a changed "
                                 "list is searched on every accelerator")
        ep = st.checkbox("Expert parallel (MoE)", value=arch.moe is not None, key="rc_ep",
                         disabled=arch.moe is None)
        disagg = st.checkbox("Disaggregated prefill/decode (xPyD)", value=False, key="rc_disagg",
                             help="Also split the cheapest feasible layouts into x prefill + y decode "
                                  "instances (vLLM NIXL: the decode pool holds the pulled prompt; "
                                  "kvplan.disagg); the 'mode' column says aggregated or xPyD")
    prices, factors = _prices_and_efficiency(chosen, efficiency)
    calibrated = _calibration(scenario, arch)
    if calibrated is not None:
        factors[scenario.gpu] = calibrated
    query = RecommendQuery(
        traffic="rps" if traffic == "rps" else "users", users=users, rps=rps, prompt=prompt, output=output,
        percentile="p50" if percentile == "p50" else "p99", ttft_ms=ttft, tpot_ms=tpot,
        max_context=max_context or None, gpus=tuple(chosen), max_gpus=max_gpus, kv_dtypes=tuple(kv),
        weight_dtypes=None if list(wd) == [*DEFAULT_WEIGHT_SEARCH] else tuple(wd), expert_parallel=ep,
        disagg=bool(disagg),
        default_efficiency=efficiency, prices=prices,
        efficiency=factors, image_tokens=scenario_media_tokens(scenario), images=scenario.images,
        videos=scenario.videos)
    return query, csv


def _prices_and_efficiency(chosen: list[str], efficiency: float) -> tuple[dict[str, float],
                                                                          dict[str, float]]:
    """An editable table: price per GPU-hour (default: the lowest on-demand quote of
    ``presets/prices.json``, with its provider, date and source; else empty) and efficiency factor per
    accelerator (default: the slider). Only prices edited here override the table; accelerators
    without one are costed in GPU-hours and listed apart."""
    quotes = [pick_price(price_quotes(), g) for g in chosen]
    with st.expander("Prices per GPU-hour and efficiency per accelerator", expanded=False):
        frame = pd.DataFrame({
            "gpu": chosen,
            "price_per_hour": [q.usd_per_gpu_hour if q else None for q in quotes],
            "efficiency": [efficiency] * len(chosen),
            "price_source": [q.label if q else "unpriced: no public price in the catalogue" for q in quotes],
        }).astype({"price_per_hour": "float64"})
        edited = st.data_editor(frame, hide_index=True, key="rc_prices", disabled=["gpu", "price_source"],
                                column_config={
            "price_source": st.column_config.TextColumn("price source and date"),
            "price_per_hour": st.column_config.NumberColumn("price per GPU-hour", min_value=0.0001,
                                                            format="%.4f"),
            "efficiency": st.column_config.NumberColumn("efficiency (0–1]", min_value=0.01,
                                                        max_value=1.0, format="%.2f")})
        st.caption("Prices are the lowest on-demand quote of the catalogue's price table "
                   "(presets/prices.json: several providers, each with its date and source; edit them "
                   "for yours). Accelerators marked unpriced have none: their candidates are listed "
                   "apart, costed in GPU-hours.")
    prices: dict[str, float] = {}
    factors: dict[str, float] = {}
    for record, quote in zip(edited.to_dict("records"), quotes, strict=True):
        price, factor = _number(record.get("price_per_hour")), _number(record.get("efficiency"))
        if price is not None and price > 0 and (quote is None or price != quote.usd_per_gpu_hour):
            prices[str(record["gpu"])] = price
        if factor is not None and 0 < factor <= 1:
            factors[str(record["gpu"])] = factor
    return prices, factors


def _number(value: object) -> float | None:
    """A finite number from an edited table cell, or None (empty, NaN or not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _calibration(scenario: Scenario, arch: ModelArch) -> float | None:
    """Solve the sidebar accelerator's efficiency factor from one measured run (its TP/PP, formats
    and engine): decode tokens/s at a batch, or a TTFT (``recommend.calibrate_efficiency``)."""
    with st.expander("Calibrate the efficiency factor from one measured run", expanded=False):
        kinds = {"decode": "decode tokens/s", "prefill": "TTFT (ms)"}
        kind = st.radio("Measured", list(kinds), key="rc_cal_kind", horizontal=True,
                        format_func=lambda k: kinds[str(k)])
        cols = st.columns(4)
        measured = cols[0].number_input("Measured value", 0.0, 1e9, 0.0, key="rc_cal_value")
        batch = int(cols[1].number_input("Batch", 1, 1_000_000, 1, key="rc_cal_batch"))
        prompt = int(cols[2].number_input("Prompt tokens", 1, 10_000_000, 1024, key="rc_cal_prompt"))
        context = int(cols[3].number_input("Context tokens", 2, 10_000_000, 2048, key="rc_cal_ctx"))
        if measured <= 0:
            st.caption(f"On {md_name(scenario.gpu)} with the sidebar's TP {scenario.tp:d} × PP "
                       f"{scenario.pp:d}; enter a measured value to solve for the factor.")
            return None
        try:
            factor = calibrate_efficiency(scenario_plan(scenario), measured,
                                          "prefill" if kind == "prefill" else "decode",
                                          batch, prompt, context)
        except KVPlanError as err:
            st.warning(md(err))
            return None
        use = st.checkbox(f"Use e = {factor:.4f} for {scenario.gpu}", value=0 < factor <= 1,
                          key="rc_cal_use", disabled=not 0 < factor <= 1)
        st.caption(f"Efficiency factor implied by the run: {factor:.4f} (bound time / measured time"
                   f"{'; above 1: the run beat the bound, check the inputs' if factor > 1 else ''}).")
        return factor if use and 0 < factor <= 1 else None


def pareto_figure(ranked: pd.DataFrame, unit: str) -> go.Figure:
    """Feasible candidates: cost per million output tokens against TPOT, one colour per accelerator
    (``theme.gpu_color``, the same on every chart); the line joins the candidates no other beats on
    both. A log cost axis when the costs span more than 30× (one outlier would squash the rest)."""
    fig = new_figure()
    for gpu_id, part in ranked.groupby("gpu", observed=True, sort=True):
        fig.add_trace(go.Scatter(
            x=part["tpot_ms"], y=part["cost_per_m_tokens"], mode="markers", name=str(gpu_id),
            marker={"color": gpu_color(str(gpu_id))},
            customdata=part[["tp", "pp", "ep", "kv_dtype", "weight_dtype", "total_gpus"]].to_numpy(),
            hovertemplate="TPOT %{x:.2f} ms · %{y:.4f} per M tokens<br>TP %{customdata[0]} PP "
                          "%{customdata[1]} EP %{customdata[2]} · KV %{customdata[3]} · W %{customdata[4]}"
                          " · %{customdata[5]} GPUs<extra>%{fullData.name}</extra>"))
    front = ranked.sort_values(["tpot_ms", "cost_per_m_tokens"])
    best_so_far = front["cost_per_m_tokens"].cummin().shift(fill_value=float("inf"))
    front = front[front["cost_per_m_tokens"] < best_so_far]
    fig.add_trace(go.Scatter(x=front["tpot_ms"], y=front["cost_per_m_tokens"], mode="lines",
                             name="Pareto front", line={"color": "black", "dash": "dot"}))
    costs = ranked["cost_per_m_tokens"][ranked["cost_per_m_tokens"] > 0]
    spread = float(costs.max() / costs.min()) if len(costs) else 1.0
    fig.update_layout(title="Cost vs TPOT<br><sup>bounds; feasible candidates</sup>",
                      xaxis_title="TPOT bound (ms)", yaxis_title=f"{unit} / M output tokens",
                      yaxis_type="log" if spread > 30 else "linear",
                      height=460, legend=SIDE_LEGEND, margin={"t": 70, "l": 70, "r": 20, "b": 60})
    return fig


#: The words before the efficiencies in the two tokens/s columns' caption.
EFFICIENCY_WORDS = ("Tokens/s **upper bound**: no run can beat it (compute at the format's tensor-core peak, "
                    "memory traffic at the average context over each request's life). **Estimate**: each "
                    "phase's time at peak (prefill FLOPs; decode weight and KV reads, FLOPs and "
                    "all-reduce at the engine's batch) over its efficiency, never above the bound — ")


def render(scenario: Scenario, arch: ModelArch, gpu: GPU) -> pd.DataFrame | None:
    """Draw the recommendation for the scenario's model, engine and settings."""
    st.subheader("Recommend a deployment")
    st.caption("Cheapest accelerator × split × formats for your traffic and latency targets. Memory is "
               "the engine's exact pool; every time is a bound (formulas and assumptions below), never "
               "a measurement.")
    query, csv = _inputs(scenario, arch)
    if csv is None and (st.session_state.get("sv_rc_prompt_kind") == "csv"
                        or st.session_state.get("sv_rc_output_kind") == "csv"):
        st.info("Upload a CSV of prompt,output token counts to use it; the fixed lengths are used meanwhile.")
    key = cache_key(scenario)
    try:
        rec = _search(key, query.model_dump_json(), csv)
    except KVPlanError as err:
        st.error(md(err))
        return None
    lengths = rec.lengths
    st.caption(f"Lengths at {md_name(query.percentile)}: prompt {lengths.prompt:,} tokens, context "
               f"{lengths.context:,} tokens; mean output {lengths.output_mean:,.1f} tokens "
               f"({lengths.requests:,} requests, {md(lengths.source)}). Engine: {md_name(scenario.engine)}; "
               f"fit query as the sidebar's ({md_name(scenario_fit_query(scenario).engine)}).")
    if lengths.image_tokens and (shape := scenario_request_shape(scenario)):
        media = "Images and videos" if scenario.videos else "Images"
        st.caption(md(f"{media}: {lengths.image_tokens:,} tokens of each prompt and context above are "
                      f"theirs ({shape.partition(' tokens per request; ')[2]})."))
    counts = failure_counts(rec)
    st.markdown(f"**{len(rec.table):,} candidates, {int(rec.table['feasible'].sum()):,} feasible.** "
                "Failing: " + " · ".join(f"{md_name(name)} {n:,}" for name, n in counts.items()))
    if rec.message:
        st.warning(md(rec.message))
    ranked = rec.ranked
    if not ranked.empty:
        fig = pareto_figure(ranked, rec.cost_unit)
        st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_recommend")
        rows = pd.DataFrame(ranked_rows(rec, scenario, TOP))
        base = page_url()
        export = rows.assign(link=rows["link"].map(lambda q: absolute_link(q, base)))
        download_buttons("recommend", export.rename(columns=unit_headers(rec.cost_unit)), fig, scenario)
        st.dataframe(rows, hide_index=True, key="table_recommend", column_config={
            "link": st.column_config.LinkColumn("open", display_text="open scenario"),
            "mode": st.column_config.TextColumn(
                "mode", help="aggregated (prefill and decode on every replica) or xPyD: x prefill + y "
                             "decode instances of the layout; replicas = x + y"),
            "transfer_ms": st.column_config.NumberColumn(
                "KV transfer ms (bound)", format="%.3f",
                help="xPyD: the prompt's KV per decode rank over the link (disagg.transfer_seconds)"),
            "in_flight_bound": st.column_config.NumberColumn(
                "prompts in flight per decode instance", format="%d",
                help="xPyD: prompts the decode pool can hold while pulled, next to the running batch"),
            "cost_per_m_tokens": st.column_config.NumberColumn(f"{rec.cost_unit} / M tokens",
                                                               format="%.4f"),
            "tpot_ms": st.column_config.NumberColumn("TPOT ms (bound)", format="%.2f"),
            "total_gpus": st.column_config.NumberColumn("GPUs (lower bound)", format="%d"),
            "estimate_total_gpus": st.column_config.NumberColumn(
                "GPUs (estimate)", format="%d",
                help="The same replica rule with decode and prefill times over the accelerator's "
                     "phase efficiencies (0: the estimate meets no target)"),
            "estimate_tpot_ms": st.column_config.NumberColumn("TPOT ms (estimate)", format="%.2f"),
            "estimate_ttft_ms": st.column_config.NumberColumn("TTFT ms (estimate)", format="%.1f"),
            "ttft_ms": st.column_config.NumberColumn("TTFT ms (bound)", format="%.1f"),
            "bound_tokens_per_s_per_replica": st.column_config.NumberColumn(
                "tokens/s per replica (upper bound)", format="%.0f",
                help="The run upper bound: no run of this workload can beat it (kvplan throughput)"),
            "estimate_tokens_per_s_per_replica": st.column_config.NumberColumn(
                "tokens/s per replica (estimate)", format="%.0f",
                help="An estimate: each phase's time at peak over the accelerator's default phase "
                     "efficiencies (presets/efficiency.json, fitted on published results)"),
        })
        efficiencies = []  # which figure is a bound, which an estimate, and each estimate's source
        for gpu_id in rows["gpu"].astype(str).unique().tolist():
            eff = efficiency_for(gpu_id)
            efficiencies.append(f"{md_name(gpu_id)}: prefill {eff.prefill:.3g}, decode {eff.decode:.3g} "
                                f"({md(eff.source)})")
        st.caption(EFFICIENCY_WORDS + "; ".join(efficiencies) + ".")
        if query.disagg:
            split = pd.DataFrame(ranked_rows(rec, scenario, TOP, xpyd=True))
            st.caption("xPyD candidates (x prefill + y decode instances of the layout; the decode pool "
                       "keeps room for one pulled prompt, TTFT adds the KV transfer): "
                       + (f"{len(split):,} shown." if not split.empty else "none feasible (see the notes "
                                                                              "under Formulas)."))
            if not split.empty:
                st.dataframe(split, hide_index=True, key="table_recommend_xpyd", column_config={
                    "link": st.column_config.LinkColumn("open", display_text="open decode instance")})
        apart = rec.unpriced_ranked
        if not apart.empty:
            st.caption("Unpriced accelerators, listed apart (no price in the table; cost in GPU-hours "
                       "per million output tokens, not money): "
                       + ", ".join(md_name(g) for g in apart["gpu"].astype(str).unique().tolist()) + ".")
            st.dataframe(pd.DataFrame(ranked_rows(rec, scenario, TOP, unpriced=True)), hide_index=True,
                         key="table_recommend_unpriced", column_config={
                "link": st.column_config.LinkColumn("open", display_text="open scenario"),
                "cost_per_m_tokens": None,
                "cost_per_hour": None,
                "gpu_hours_per_m_tokens": st.column_config.NumberColumn("GPU-hours / M tokens",
                                                                        format="%.4f")})
        best = rows.iloc[0]
        mode = "" if best["mode"] == "aggregated" else f" as {md_name(best['mode'])}"
        st.markdown(f"Cheapest{mode}: **{md_name(best['gpu'])}**, TP {best['tp']:d} × PP {best['pp']:d}"
                    + (f", EP {best['ep']:d} (DP {best['dp']:d})" if best["ep"] > 1 else "")
                    + f", KV {md_name(best['kv_dtype'])}, weights {md_name(best['weight_dtype'])}: "
                      f"{best['replicas']:,} replica(s), {best['total_gpus']:,} GPUs — "
                      f"[open its scenario]({md_link_target(best['link'])})")
    failed = rec.table[~rec.table["feasible"]]
    with st.expander(f"Why the other {len(failed):,} candidates fail", expanded=False):
        st.dataframe(failed[["mode", "gpu", "tp", "pp", "ep", "kv_dtype", "weight_dtype", "fails",
                             "max_requests", "tpot_ms", "ttft_ms"]].head(500), hide_index=True,
                     key="table_recommend_fails")
    with st.expander("Formulas and assumptions (bounds)", expanded=False):
        st.markdown("\n".join(f"- {md_code(line)}" for line in rec.formulas))
        st.markdown("\n".join(f"- {md(line)}" for line in [*rec.assumptions, *rec.notes]))
    digest = hashlib.sha256(query.model_dump_json().encode()).hexdigest()[:8]
    st.caption(f"Search {md_name(digest)}: {len(rec.table):,} candidates, vectorised (kvplan.recommend).")
    return rec.table
