"""The "Calibrate against a vLLM log" expander: a real run's start-up log next to kvplan's numbers.

The pasted log lives only in this session (``w_vllm_log``, kept while the lazy expander is
closed); it never goes into the link. The button copies the runtime reserve the run implies
into the sidebar (``w_reserve``), and from there into the link (``r=``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kvplan.arch import ModelArch
from kvplan.calibrate import MAX_LOG_BYTES, Calibration, calibrate, compares
from kvplan.engines import log_engine
from kvplan.errors import KVPlanError, md
from kvplan.presets import GPU
from kvplan.scenario import Scenario, scenario_plan
from kvplan.ui import lazy
from kvplan.ui.theme import GIB

LOG_KEY = "w_vllm_log"
RESERVE_KEY = "w_reserve"  # the sidebar's runtime-reserve widget (kvplan.ui.sidebar.WIDGETS)
RELEASE_KEY = "w_ev"  # the sidebar's engine release (kvplan.ui.sidebar.push_to_session)
LABELS = {"exact": "reproduced exactly", "within_one_block": "reproduced within one block",
          "within_rounding": "within the rounding of the printed GiB", "mismatch": "NOT reproduced",
          "unknown": "no block-level line to compare"}


def _use_reserve(value: float, release: str | None = None) -> None:
    """Button callback: set the sidebar's reserve, and its release when the log's differs (runs
    before the rerun, so the link follows)."""
    st.session_state[RESERVE_KEY] = value
    if release is not None:
        st.session_state[RELEASE_KEY] = release


def _release_key(engine_id: str) -> str:
    """The sidebar's release choice for an engine id (``vllm@0.11`` → ``0.11``; ``vllm`` → latest)."""
    return engine_id.partition("@")[2] or "latest"


def _fmt(value: object, spec: str = ",") -> str:
    return "—" if value is None else format(value, spec)


def table(result: Calibration) -> pd.DataFrame:
    """Logged vs predicted (with the sidebar's reserve) vs re-run with the logged memory."""
    log = result.log
    logged_blocks = log.num_gpu_blocks if log.num_gpu_blocks is not None else (
        result.logged_blocks_low if result.logged_blocks_low == result.logged_blocks_high else None)
    rows = [
        ("Available KV cache memory (GiB)", _fmt(log.available_kv_gib, f".{log.available_kv_decimals}f"),
         f"{result.predicted_kv_budget_bytes / GIB:.2f}", _fmt(log.available_kv_gib, ".2f")),
        ("Blocks (num_gpu_blocks)", _fmt(logged_blocks), _fmt(result.predicted_num_blocks),
         _fmt(result.reproduced_num_blocks)),
        ("GPU KV cache size (tokens)", _fmt(log.kv_cache_tokens), _fmt(result.predicted_kv_cache_tokens),
         _fmt(result.reproduced_kv_cache_tokens)),
        (f"Maximum concurrency at {result.tokens:,} tokens", _fmt(log.max_concurrency, ".2f"),
         f"{result.predicted_max_concurrency:.2f}", _fmt(result.reproduced_max_concurrency, ".2f")),
    ]
    return pd.DataFrame(rows, columns=["quantity", "vLLM log", "kvplan (sidebar reserve)",
                                       "kvplan with the logged memory"])


def render(scenario: Scenario, arch: ModelArch, gpu: GPU, box: Any = None) -> pd.DataFrame | None:
    """The "Calibrate" lazy box (``box`` when app.py drew it already)."""
    with lazy.box(st, "box_calibrate") if box is None else box as box:
        if not box.open:
            return None
        st.caption("Paste the start-up log of a vLLM run of this model on this GPU with these "
                   "settings (the lines 'Available KV cache memory', 'GPU KV cache size', "
                   "'Maximum concurrency'). The log stays in this browser session: it is NOT put "
                   "in the link; only a reserve you apply below is.")
        text = st.text_area("vLLM log", key=LOG_KEY, height=140, max_chars=MAX_LOG_BYTES, **lazy.KEEP,
                            placeholder="INFO ... Available KV cache memory: 61.54 GiB\n"
                                        "INFO ... GPU KV cache size: 469,536 tokens")
        if not text or not text.strip():
            return None
        chosen = scenario_plan(scenario)
        plan = chosen if compares(chosen.engine) else scenario_plan(
            scenario.model_copy(update={"engine": log_engine()}))
        if plan is not chosen:
            st.info(md(f"The log is compared with {plan.engine.short}'s pool; the sidebar's "
                       f"engine is {chosen.engine.short}."))
        try:
            result = calibrate(plan, text)
        except KVPlanError as err:
            st.error(md(f"Calibration: {err}"))
            return None
        st.caption(md(f"Release: {result.release_source}"))
        frame = table(result)
        st.dataframe(frame, hide_index=True, key="table_calibration")
        message = (f"With the logged memory kvplan's block arithmetic is "
                   f"{LABELS[result.agreement]} (one block = {result.bytes_per_block:,} B).")
        {"exact": st.success, "mismatch": st.warning}.get(result.agreement, st.info)(message)
        if (implied := result.implied_reserve) is not None:
            reserve, low, high = implied
            st.markdown(
                f"**Implied runtime reserve: {reserve / GIB:.3f} GiB** ({reserve:,} B; between "
                f"{low / GIB:.4f} and {high / GIB:.4f} GiB) — the sidebar uses "
                f"{result.predicted_reserve_bytes / GIB:.3f} GiB.")
            if result.implied_terms:
                st.table(pd.DataFrame([{
                    "term": row["name"], "kvplan (B)": f"{row['model_bytes']:,}",
                    "logged (B)": "" if row["logged_bytes"] is None else f"{row['logged_bytes']:,}",
                    "implied share (B)": f"{row['implied_bytes']:,}"} for row in result.implied_terms
                ]).set_index("term"))
        suggested = result.suggested_reserve_gib
        current = st.session_state.get(RESERVE_KEY)
        release = (None if plan is not chosen or result.engine_id == plan.engine.id
                   else _release_key(result.engine_id))
        label = (f"Use {suggested:g} GiB as the runtime reserve" if suggested is not None
                 else "Use the implied reserve")
        if release is not None:
            label += f" with {result.release}"
        st.button(label, key="calibrate_use_reserve", on_click=_use_reserve, args=(suggested, release),
                  disabled=suggested is None or (current == suggested and release is None)
                  or suggested > 100_000,
                  help="Sets the sidebar's 'Runtime reserve per GPU' (and its engine release when "
                       "the log's differs), so the link carries them (r=, ev=).")
        for key, how in result.formulas.items():
            st.caption(md(f"{key}: {how}"))
        for note in result.notes:
            st.caption(md(f"Note: {note}"))
        return frame
