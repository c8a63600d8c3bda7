"""The dashboard views: the answer, the key numbers and the tabs. Each ``render_*`` takes only what
it uses and draws one section; the tab views return the DataFrame behind their chart. Computations
and figures are cached by the scenario's content (``kvplan.ui.cached.cache_key``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import quote

import pandas as pd
import streamlit as st

from kvplan import designs
from kvplan.arch import Kind, ModelArch
from kvplan.capacity import FitResult
from kvplan.config_import import support_status
from kvplan.errors import MESSAGES, KVPlanError, clip, md, md_code, md_name
from kvplan.plan import Plan
from kvplan.presets import GPU
from kvplan.report import named_scenario, named_scenarios
from kvplan.scenario import Scenario, scenario_request_shape, scenario_request_tokens
from kvplan.sizing import full_length_bytes_per_token
from kvplan.ui import charts, data, lazy, weights_view
from kvplan.ui.cached import answers, cache_key, primary_fit, scenario_from_key
from kvplan.ui.chart_slot import show_chart
from kvplan.ui.sidebar import apply_scenario
from kvplan.ui.svg import figure_svg
from kvplan.ui.theme import GB, GIB, chart_config, exact_bytes, figure_from_dict, fmt_bytes


def _export(name: str, df: pd.DataFrame, fig: Any, scenario: Scenario) -> None:
    from kvplan.ui import exports_ui

    exports_ui.download_buttons(name, df, fig, scenario)


def guarded(title: str, body: Callable[[], object]) -> object:
    """Run one view; a KVPlanError becomes st.error, anything else a short message (no traceback)."""
    try:
        return body()
    except KVPlanError as err:
        st.error(md(f"{title}: {err}"))
    except Exception as err:  # noqa: BLE001 - never show a traceback to the user
        st.error(md(MESSAGES["internal.view"].format(title=title, kind=type(err).__name__,
                                                      detail=clip(err, 300))))
    return None


# ---------------------------------------------------------------- cached computations (by content)
@st.cache_data(max_entries=128, show_spinner=False)
def _context_data(key: str) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    scenario, plan = scenario_from_key(key)
    df, errors = data.kv_vs_context(plan, scenario.kv_dtypes, scenario.log_x)
    by_kind = data.kv_by_kind(plan, scenario.log_x) if scenario.stack_kinds else None
    return df, by_kind, errors


@st.cache_data(max_entries=128, show_spinner=False)
def _users_data(key: str) -> tuple[pd.DataFrame, int | None, list[str]]:
    scenario, plan = scenario_from_key(key)
    results, errors = data.fits_per_dtype(plan, scenario.kv_dtypes)
    budget = next(iter(results.values())).kv_budget_bytes if results else None
    return data.kv_vs_users(results, scenario.users), budget, errors


@st.cache_data(max_entries=128, show_spinner=False)
def _memory_data(key: str) -> pd.DataFrame:
    return data.memory_per_gpu(scenario_from_key(key)[1])


@st.cache_data(max_entries=128, show_spinner=False)
def _requests_data(key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    scenario, plan = scenario_from_key(key)
    return data.requests_grid(plan, scenario.kv_dtypes), data.context_users_grid(plan)


@st.cache_data(max_entries=128, show_spinner=False)
def _design_data(key: str) -> tuple[pd.DataFrame, list[str]]:
    plan = scenario_from_key(key)[1]
    return designs.design_table(plan), designs.assumptions(plan.arch, tp=plan.query.tp)


# ---------------------------------------------------------------- cached figures (by content)
# Only the open tab runs (lazy tabs); each figure is built once per scenario and kept as its
# plotly dict, so a rerun of a known scenario rebuilds the go.Figure without re-validation (theme).
@st.cache_data(max_entries=128, show_spinner=False)
def _kv_context_fig(key: str) -> dict[str, Any]:
    scenario, plan = scenario_from_key(key)
    gpu = plan.device
    df, by_kind, _ = _context_data(key)
    result = primary_fit(key)
    return charts.kv_context_figure(df, by_kind, result.kv_budget_bytes, scenario.tokens,
                                    scenario.users, scenario.log_x, f" — {gpu.name}",
                                    limit=result.context_limit).to_dict()


@st.cache_data(max_entries=128, show_spinner=False)
def _kv_context_svg(key: str) -> str | None:
    """The context chart as a static SVG (``kvplan.ui.svg``), or None (stacked: Plotly only)."""
    return figure_svg(_kv_context_fig(key))


@st.cache_data(max_entries=128, show_spinner=False)
def _kv_users_svg(key: str) -> str | None:
    return figure_svg(_kv_users_fig(key))


@st.cache_data(max_entries=128, show_spinner=False)
def _kv_users_fig(key: str) -> dict[str, Any]:
    scenario = Scenario.model_validate_json(key)
    df, budget, _ = _users_data(key)
    return charts.kv_users_figure(df, budget, scenario.tokens, scenario.users).to_dict()


@st.cache_data(max_entries=128, show_spinner=False)
def _memory_fig(key: str) -> dict[str, Any]:
    return charts.memory_figure(_memory_data(key), scenario_from_key(key)[1].device.id).to_dict()


@st.cache_data(max_entries=128, show_spinner=False)
def _requests_figs(key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    scenario, plan = scenario_from_key(key)
    gpu = plan.device
    grid, cu = _requests_data(key)
    return (charts.requests_heatmap(grid).to_dict(),
            charts.context_users_heatmap(cu, gpu.name, scenario.kv_dtypes[0],
                                         primary_fit(key).context_limit).to_dict())


@st.cache_data(max_entries=128, show_spinner=False)
def _designs_fig(key: str) -> dict[str, Any]:
    df, _ = _design_data(key)
    return charts.designs_figure(df).to_dict()


# ---------------------------------------------------------------- (1) KPI cards
def _breakdown(plan: Plan) -> tuple[str, int]:
    """``32 full layers × 4,096 B × 32,768 tokens + …`` for one request on one GPU rank."""
    from kvplan.sizing import kv_cache

    result = kv_cache(plan.vary(users=1))
    parts = []
    for kind, row in result.layers.items():
        if Kind(kind).holds_state:
            parts.append(f"{row.layers} recurrent layers (constant state {row.reserved_bytes:,} B)")
        else:
            parts.append(f"{row.layers} {kind} layers × {row.bytes_per_token_per_layer:,} B × "
                         f"{row.tokens_held_per_layer:,} tokens")
    return " + ".join(parts), result.reserved_bytes


def _per_token_how(plan: Plan) -> str:
    """``32 full layers × 4,096 B + …``: the plan's engine's bytes per token, layer kind by kind."""
    kinds: dict[str, list[int]] = {}
    for rule in plan.engine.view(plan.arch, plan.query.kv_dtype).rules:
        if rule.bytes_per_token:
            kinds.setdefault(f"{rule.kind}|{rule.bytes_per_token}", []).append(rule.layers)
    return " + ".join(f"{sum(n)} {key.split('|')[0]} layers × {int(key.split('|')[1]):,} B"
                      for key, n in kinds.items()) or "no per-token cache"


#: Width of a key-number card (px): three to a row at 1440 px (main area ≈ 945 px), one on a phone.
KPI_WIDTH = 280


class Kpi(NamedTuple):
    """One KPI card: its key, label, exact integer value and how it was computed."""

    kpi: str
    label: str
    value: int
    how: str


def kpi_cards(scenario: Scenario, plan: Plan, result: FitResult) -> list[Kpi]:
    """The key-number cards of the plan's first KV dtype, each with its formula and values."""
    dtype = scenario.kv_dtypes[0]
    per_token = full_length_bytes_per_token(plan)
    per_token_how = _per_token_how(plan)
    f = result.formulas
    if plan.engine.per_request_in_blocks:
        per_request_how = (f"{f.get('blocks_per_request', '')} × {result.bytes_per_block:,} B per "
                           f"block = {result.kv_bytes_per_request:,} B")
    else:
        how, total = _breakdown(plan)
        per_request_how = f"{how} = {total:,} B"
    per_gpu_note = (f" on each GPU (one TP rank of {result.tp}; the whole replica holds about "
                    f"{result.tp}× this)" if result.tp > 1 else "")
    rows = [
        ("kv_per_token", "KV bytes per token (whole model)", per_token,
         f"{per_token_how} = {per_token:,} B ({dtype}, whole model, "
         "before any window caps a layer)"),
        ("kv_per_request", f"KV per request at {result.tokens:,} tokens (per GPU)",
         result.kv_bytes_per_request, per_request_how + per_gpu_note),
        ("weights_per_gpu", "Weights per GPU", result.weights_bytes,
         f"{result.weight_format}; {result.weights_total_bytes:,} B in all, per GPU over TP "
         f"{result.tp} × PP {result.pp} (largest stage): "
         f"{weights_view.breakdown_short(result.weights_breakdown)} = {result.weights_bytes:,} B"),
        ("kv_budget", "KV budget per GPU", result.kv_budget_bytes,
         f.get("memory_target", "") + "; " + f.get("kv_budget", "") + "; reserve = "
         + f.get("reserve", "")),
        ("max_requests", "Max concurrent requests per replica", result.max_requests,
         f.get("max_requests", "") or f.get("kv_pool_tokens", "")),
        ("max_context", f"Max context at {plural(scenario.users, 'user')} (per replica)",
         result.max_tokens_per_request,
         f"largest length L with {scenario.users:,} × KV(L) ≤ the {result.kv_budget_bytes:,} B budget "
         f"= {result.max_tokens_per_request:,} tokens"),
    ]
    return [Kpi(k, label, int(v), how) for k, label, v, how in rows]


def plural(count: int, noun: str) -> str:
    """``1 user``, ``8 users``."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _answer_metric(dtype: str, answer: FitResult | str, scenario: Scenario) -> None:
    """One KV dtype's answer: the requests of the chosen length that fit on one replica."""
    label = f"{dtype} KV"
    if isinstance(answer, str):
        st.metric(label, "refused", help=answer, width="content")
        return
    spare = answer.max_requests - scenario.users
    st.metric(label, f"{answer.max_requests:,}",
              delta=f"fits {plural(scenario.users, 'user')} ({spare:+,})" if answer.fits
              else f"short for {plural(scenario.users, 'user')}",
              delta_color="normal" if answer.fits else "inverse", delta_arrow="off", width="content",
              help=f"{answer.kv_dtype}: exactly {answer.max_requests:,} requests of "
                   f"{answer.tokens:,} tokens per replica, {answer.max_requests_all_replicas:,} over "
                   f"{plural(answer.replicas, 'replica')}; KV per request "
                   f"{exact_bytes(answer.kv_bytes_per_request)} per GPU"
                   + ("" if answer.fits else f". Does not fit: {md(answer.reason)}"))


def render_answer(scenario: Scenario, gpu: GPU) -> None:
    """The answer first: per chosen KV dtype, side by side, the requests of the chosen length that
    fit on one replica, then whether the scenario fits — or why not and the smallest change."""
    key = cache_key(scenario)
    try:
        results = answers(key)
    except KVPlanError as err:  # the layout itself is impossible (e.g. TP × PP > GPUs)
        with st.container(key="answer", border=True):
            st.warning(f"Does not fit: {md(err)}.")
        return
    tokens = scenario_request_tokens(scenario)
    with st.container(key="answer", border=True):
        st.markdown(f"**Requests of {tokens:,} tokens that fit, per replica** "
                    f"(you asked for {plural(scenario.users, 'user')})")
        if shape := scenario_request_shape(scenario):
            st.caption(md(shape))
        with st.container(horizontal=True, key="answer_dtypes", gap="medium"):
            for dtype, answer in results.items():
                _answer_metric(dtype, answer, scenario)
        first = next((r for r in results.values() if not isinstance(r, str)), None)
        if first is None:  # every dtype refused, or the layout itself is impossible
            st.warning(f"Does not fit: {md(next(iter(results.values())))}.")
            return
        if first.fits:
            st.success(f"Fits: {plural(scenario.users, 'user')} × {tokens:,} tokens in "
                       f"{md_name(first.kv_dtype)}.")
        else:
            other = [f"KV {md_name(r.kv_dtype)} (fits {r.max_requests:,})" for r in results.values()
                     if not isinstance(r, str) and r.fits]
            change = " or ".join(([md(first.suggestion)] if first.suggestion else []) + other)
            st.warning(f"Does not fit ({md_name(first.kv_dtype)}): {md(first.reason)}. "
                       f"**Smallest change:** {change or 'none found'}.")
        # One caption, its lines apart (not two captions a flex gap apart): one element fewer per
        # rerun, and the card 16 px shorter, so it ends on a 390×844 phone's first screen
        # (tests/browser/test_answer_first.py).
        lines = []
        if first.max_num_seqs is not None:
            state = (f" · {first.state_blocks:,} recurrent-state blocks" if first.state_blocks is not None
                     else "")
            graphs = (f" · CUDA graphs up to {first.cuda_graph_sizes[-1]:,}" if first.cuda_graph_sizes
                      else "")
            start = "starts" if first.starts and not first.start_reason else md(first.start_reason)
            lines.append(f"Request cap: max_num_seqs {first.max_num_seqs:,} "
                         f"({md(first.max_num_seqs_source)}){state}{graphs} · {start}")
        gpus = first.replicas * first.tp * first.pp
        limit = (f" · model limit {first.context_limit:,} tokens ({md(first.context_limit_rule)})"
                 if first.context_limit is not None else "")
        lines.append(f"{plural(gpus, 'GPU')} × {md(gpu.name)}, {plural(first.replicas, 'replica')} of "
                     f"TP={first.tp:d}, PP={first.pp:d} · {first.engine_label} · "
                     f"{md(first.engine_release)}{limit}")
        st.caption("  \n".join(lines))


def render_kpis(scenario: Scenario, arch: ModelArch, gpu: GPU, budget_box: Any = None,
                after_budget: Any = None) -> list[Kpi]:
    """The supporting figures of the first KV dtype, each saying whether it is per GPU, per replica
    or for the whole model. Few elements (each costs the browser ≈ 4–11 ms on a first render,
    bench/README.md): the header with the architecture support, one row of cards, and one caption
    holding the exact integers, each card's formula, the engine's log line and the notes.
    ``budget_box`` / ``after_budget``: the "KV budget" box and the container under it when app.py
    drew them outside its fragment (else both are drawn here). Returns the cards."""
    key = cache_key(scenario)
    result = primary_fit(key)
    plan = scenario_from_key(key)[1]
    cards = kpi_cards(scenario, plan, result)
    cap = result.gpu_capacity_bytes
    status, why = support_status(arch)
    st.markdown(f"**{md(arch.name)}** on **{plural(result.replicas * result.tp * result.pp, 'GPU')} × "
                f"{md(gpu.name)}** "
                + md(f"({cap / GIB:,.2f} GiB = {cap / GB:,.2f} GB per GPU as CUDA reports it, "
                     f"{result.capacity.get('status', '')}) · {result.engine_label} "
                     f"[{result.engine_release}] · KV {result.kv_dtype}")
                + "  \n:small[:gray["
                + md(f"Architecture support: {'exact' if status == 'exact' else 'generic rules'} — {why}")
                + "]]")
    with st.container(horizontal=True, key="kpis", gap="medium"):
        for row in cards:
            if row.kpi in {"max_requests", "max_context"}:
                value = f"{row.value:,}" + (" tokens" if row.kpi == "max_context" else "")
                help_text = f"exactly {row.value:,}"
            else:
                value = fmt_bytes(row.value)
                help_text = f"exactly {exact_bytes(row.value)}"
                if row.kpi == "weights_per_gpu":
                    help_text += " — " + weights_view.breakdown_help(result.weights_breakdown)
            st.metric(row.label, value, help=help_text, width=KPI_WIDTH)
    lines = ["Exact: " + " · ".join(f"{md_name(r.kpi)}={r.value:,}" for r in cards)]
    lines += [f"How, {md(row.label)}: {md(row.how)}" for row in cards]
    if log_lines := plan.engine.log_lines(result):
        # an inline code span, not st.code (its syntax highlighter costs ≈ 0.3 s of browser JS on
        # the first render, bench/README.md); the line is kvplan's own numbers, no user text
        lines.append(f"{md(plan.engine.short)}'s start-up log would read: "
                     f"{md_code(', '.join(log_lines))}")
    lines += [f"Note: {md(note)}" for note in result.notes]
    st.caption("  \n".join(lines), help="Exact integers (bytes, requests, tokens) of the cards "
                                         "above, then how each card is computed with your values.")
    render_budget(result, budget_box)
    with after_budget if after_budget is not None else contextlib.nullcontext():
        weights_view.render_comparison(arch, None if scenario.weight_dtype == "auto"
                                       else scenario.weight_dtype)
    return cards


def budget_rows(result: FitResult) -> pd.DataFrame:
    """The KV budget of one GPU step by step, from the plan's ledger (``kvplan.plan.memory_ledger``):
    the device total beside the marketed and nvidia-smi figures, the memory target, each weight part
    and reserve term, the KV budget, then what the pool allocates of it and what is left."""
    cap = result.capacity
    f = result.formulas
    ledger = {term["group"]: term for term in result.ledger}  # one term each: capacity, kv, free
    total = ledger["capacity"]
    rows = [("capacity (CUDA total)", total["bytes"], "yes",
             f"{cap.get('source', '')}, {cap.get('status', '')}: {cap.get('note', '')}", "catalogue")]
    rows.append(("marketed", int(cap.get("marketed") or 0), "no", "the product's rated memory", "catalogue"))
    if cap.get("nvidia_smi"):
        rows.append(("nvidia-smi total", int(cap["nvidia_smi"]), "no",
                     "what nvidia-smi prints (CUDA reports less)", "catalogue"))
    rows.append(("memory target", result.memory_target_bytes, "yes", f.get("memory_target", ""),
                 result.engine_release))
    rows.extend((term["name"], -int(term["bytes"]), "no" if term["group"] == "outside" else "yes",
                 term["formula"], term["source"])
                for term in result.ledger if term["group"] in {"weights", "reserve", "outside"})
    rows.append(("KV budget", result.kv_budget_bytes, "=", f.get("kv_budget", ""), result.engine_release))
    rows.extend((term["name"], int(term["bytes"]), "ledger", term["formula"], term["source"])
                for term in (ledger["kv"], ledger["free"]))
    return pd.DataFrame([(step, f"{value:,}", value / GIB, used, formula, source)
                         for step, value, used, formula, source in rows],
                        columns=["step", "bytes", "GiB", "in the budget", "formula", "source"])


def render_budget(result: FitResult, box: Any = None) -> None:
    """The budget section: release, capacity and its source beside the marketed and nvidia-smi
    figures, the runtime reserve term by term (plain cells, no Markdown from user input); in
    ``box`` when app.py drew the lazy box already."""
    with lazy.box(st, "box_budget") if box is None else box as box:  # its table: only while open
        if box.open:
            st.caption(md(f"Rules of {result.engine_release}."))
            frame = budget_rows(result)
            st.table(frame.assign(GiB=frame["GiB"].map("{:,.3f}".format)).set_index("step"))
            st.caption(md(f"Reserve {result.reserve_bytes:,} B = {result.formulas.get('reserve', '')}. "
                          "Override one term with 'Reserve terms' in the sidebar (Engine settings), "
                          "the total with 'Runtime reserve per GPU'."))


# ---------------------------------------------------------------- (2) KV vs context
def _figure(spec: dict[str, Any]) -> Callable[[], Any]:
    """The go.Figure of a cached figure dict, built when asked: while the view shows its static
    image, only a PNG download needs it (≈ 1 ms per rerun spared, bench/README.md)."""
    return lambda: figure_from_dict(spec)


def render_kv_context(scenario: Scenario, arch: ModelArch) -> pd.DataFrame:
    key = cache_key(scenario)
    df, by_kind, errors = _context_data(key)
    for message in errors:
        st.warning(md(message))
    fig = _figure(_kv_context_fig(key))
    show_chart(fig, _kv_context_svg(key), "chart_kv_context", "KV cache vs context length (static image)")
    at_length = [f"{md_name(dtype)} {fmt_bytes(r.kv_bytes_per_request * scenario.users)}"
                 for dtype, r in answers(key).items() if not isinstance(r, str)]
    notes = [f"At the chosen {scenario.tokens:,} tokens, {plural(scenario.users, 'request')} reserve "
             + ", ".join(at_length) + " per GPU.",
             "Per GPU rank (tensor-parallel share). Each dtype's solid line is what the engine "
             "reserves (its pool: whole blocks, window + scheduled tokens) — the figure compared with "
             "the dashed red KV budget of one GPU; the dotted line of the same colour is what the "
             "requests hold."]
    if scenario.pp > 1:
        notes.append("With PP > 1 the curve counts every layer; each stage holds only its own layers.")
    if not scenario.stack_kinds and any(k.windowed for k in arch.kind_counts()):
        notes.append("Turn on 'Stack by layer kind' (sidebar, Chart options) to see the windowed "
                     "layers plateau.")
    st.caption(" ".join(notes))
    out = pd.concat([df.assign(series="total"), by_kind.assign(series="kind")]) if by_kind is not None \
        else df
    _export("kv_vs_context", out, fig, scenario)
    return out


# ---------------------------------------------------------------- (3) KV vs users
def render_kv_users(scenario: Scenario) -> pd.DataFrame:
    key = cache_key(scenario)
    df, budget, errors = _users_data(key)
    for message in errors:
        st.warning(md(message))
    fig = _figure(_kv_users_fig(key))
    show_chart(fig, _kv_users_svg(key), "chart_kv_users", "KV cache vs concurrent requests (static image)")
    st.caption("KV per request is what the engine reserves for one request of the chosen length "
               "(vLLM: whole blocks), times the number of requests.")
    _export("kv_vs_users", df, fig, scenario)
    return df


# ---------------------------------------------------------------- (4) memory per accelerator
def render_memory(scenario: Scenario) -> pd.DataFrame:
    df = _memory_data(cache_key(scenario))
    bad = df[df["error"] != ""] if "error" in df else df.iloc[0:0]
    if len(bad) == len(df):  # every accelerator refuses the scenario: nothing to draw
        reasons = list(dict.fromkeys(bad["error"]))
        st.warning(md(MESSAGES["view.no_gpu"].format(why="; ".join(reasons[:3]))))
        _export("memory_per_gpu", df, None, scenario)
        return df
    fig = figure_from_dict(_memory_fig(cache_key(scenario)))
    st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_memory")
    for row in bad.itertuples():
        st.caption(md(f"{row.gpu_name}: {row.error}"))
    st.caption(f"Every accelerator with {plural(scenario.num_gpus, 'GPU')}, TP {scenario.tp:d}, "
               f"PP {scenario.pp:d}, {plural(scenario.users, 'user')} × {scenario.tokens:,} tokens, "
               f"KV {md_name(scenario.kv_dtypes[0])}. "
               "A black tick marks each device's capacity.")
    _export("memory_per_gpu", df, fig, scenario)
    return df


# ---------------------------------------------------------------- (5) requests that fit
def arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as Arrow can show it: exact integers past int64 (object columns, e.g. bytes of
    10M requests of a huge model) become floats on screen; the CSV download keeps them exact."""
    big = [col for col in frame.columns if frame[col].dtype == object and frame[col].map(
        lambda v: isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1 << 63).any()]
    return frame.astype(dict.fromkeys(big, float)) if big else frame


def render_requests(scenario: Scenario) -> tuple[pd.DataFrame, pd.DataFrame]:
    grid, cu = _requests_data(cache_key(scenario))
    spec, spec2 = _requests_figs(cache_key(scenario))
    fig = figure_from_dict(spec)
    st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_requests")
    _export("requests_fit", grid, fig, scenario)
    shown = grid.assign(
        weights=grid.get("weights_bytes", pd.Series(dtype=float)).map(fmt_bytes, na_action="ignore"),
        kv_budget=grid.get("kv_budget_bytes", pd.Series(dtype=float)).map(fmt_bytes, na_action="ignore"))
    st.dataframe(arrow_safe(shown), hide_index=True, key="table_requests", column_config={
        "max_requests": st.column_config.NumberColumn("max requests", format="%d"),
        "max_tokens_per_request": st.column_config.NumberColumn("max tokens at chosen users", format="%d"),
    })
    fig2 = figure_from_dict(spec2)
    st.plotly_chart(fig2, theme=None, config=chart_config(), key="chart_context_users")
    _export("context_users", cu, fig2, scenario)
    return grid, cu


# ---------------------------------------------------------------- (6) designs
def render_designs(scenario: Scenario) -> pd.DataFrame:
    df, notes = _design_data(cache_key(scenario))
    fig = figure_from_dict(_designs_fig(cache_key(scenario)))
    st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_designs")
    ok = df[df["error"] == ""]
    per_token = dict(zip(ok["design"], ok["kv_bytes_per_token"].tolist(), strict=True))
    why_swa = (" A sliding window stores a token in as many bytes as GQA (the same KV heads and "
               "head size); it saves by keeping only the window's last tokens per layer, so its KV per "
               "request and requests that fit differ, not its bytes per token."
               if "swa" in per_token and per_token.get("swa") == per_token.get("gqa") else "")
    st.caption("KV bytes per token (whole model, full length, KV " + md_name(scenario.kv_dtypes[0]) + "): "
               + " · ".join(f"{md(label)} {int(value):,} B" for label, value in
                            zip(ok["label"], ok["kv_bytes_per_token"].tolist(), strict=True)) + "." + why_swa)
    st.markdown("**Assumptions**\n" + "\n".join(f"- {md(n)}" for n in notes))
    # every design failing (e.g. PP above the layer count) leaves only label/model/error columns
    table = df.reindex(columns=["label", "model", "kv_bytes_per_token", "kv_bytes_per_request",
                                "max_requests", "fits", "error"])
    st.dataframe(table, hide_index=True, key="table_designs")
    _export("designs", df, fig, scenario)
    return df


# ---------------------------------------------------------------- (7) seed scenarios
def render_seeds(box: Any = None) -> None:
    """The named scenarios of ``presets/scenarios`` one click away (buttons ``seed_<id>``)."""
    files = named_scenarios()
    with lazy.box(st, "box_seeds") if box is None else box as box:
        if not box.open:
            return
        cols = st.columns(min(len(files), 4) or 1)
        for index, (scenario_id, file) in enumerate(files.items()):
            cols[index % len(cols)].button(
                file.name, key=f"seed_{scenario_id}", help=f"{file.description} Source: {file.source}",
                on_click=apply_scenario, args=(named_scenario(scenario_id),), width="stretch")


def render_share(scenario: Scenario, box: Any = None) -> None:
    """Copy link, and the scenario as JSON (download / upload)."""
    from kvplan.ui.exports_ui import report_button, scenario_json_controls

    query = "&".join(f"{k}={quote(v, safe=',')}" for k, v in scenario.to_query().items())
    base = getattr(st.context, "url", "") or ""
    with lazy.box(st, "box_share") if box is None else box as box:
        if not box.open:
            return
        st.caption("Copy link (the copy icon at the right of the box); the whole view lives in it.")
        st.code(f"{base.split('?', 1)[0]}?{query}", language=None)
        report_button(scenario)
        uploaded = scenario_json_controls(scenario)
        if uploaded is not None and uploaded != scenario:
            st.button("Open the uploaded scenario", key="open_uploaded_json",
                      on_click=apply_scenario, args=(uploaded,))
