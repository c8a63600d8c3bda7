"""The "Several engines on one GPU" expander: instances started in order on the chosen accelerator.

One instance per line, ``KEY=VALUE,…`` as ``kvplan share --instance`` takes it (parsed once, by
``kvplan.instances.parse_instance``); the lines live in the widget ``w_in`` and in the link (``in=``,
``Scenario.instances``). The answer is ``kvplan.instances.share``: per instance what it holds, its
KV pool, the requests that fit, the engine's message when it does not start and the smallest fix.
User text (names, messages quoting it) is shown through ``md`` or as table cells, never as Markdown.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from kvplan.errors import KVPlanError, md
from kvplan.instances import MAX_INSTANCES, ShareAnswer, parse_instance, share
from kvplan.presets import GPU
from kvplan.scenario import Scenario
from kvplan.ui import charts, exports_ui, lazy
from kvplan.ui.theme import chart_config

TEXT_KEY = "w_in"  # kvplan.ui.sidebar.WIDGETS["instances"]
EXAMPLE = ("name=chat,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8\n"
           "name=batch,model=llama-3.1-8b,engine=sglang,gu=0.8,tokens=8192,users=8")


def lines_of(text: str) -> list[str]:
    """The instance lines of the box (newlines or ``;`` between instances; blank lines skipped)."""
    return [line.strip() for line in text.replace(";", "\n").splitlines() if line.strip()]


def frame(answer: ShareAnswer) -> pd.DataFrame:
    """One row per instance, in start order, with exact bytes."""
    rows = []
    for item in answer.instances:
        weights = sum(t.bytes for t in item.holds if t.group == "weights")
        kv = sum(t.bytes for t in item.holds if t.group == "kv")
        rows.append({
            "instance": item.name, "engine": item.engine_label, "release": item.release,
            "setting": item.setting, "setting_value": item.setting_value,
            "held_by_others_bytes": item.others, "starts": item.starts,
            "weights_bytes": weights, "reserve_bytes": item.held_bytes - weights - kv,
            "kv_pool_bytes": kv, "holds_bytes": item.held_bytes, "kv_pool_tokens": item.kv_pool_tokens,
            "max_requests": item.max_requests, "users": item.users, "tokens": item.tokens,
            "fits": item.fits, "message": item.message, "smallest_fix": item.fix})
    return pd.DataFrame(rows)


def render(scenario: Scenario, gpu: GPU, box: Any = None) -> pd.DataFrame | None:
    """The "Several engines" lazy box (``box`` when app.py drew it already)."""
    with lazy.box(st, "box_instances") if box is None else box as box:
        if not box.open:
            return None
        st.caption(md(f"Instances sharing one {gpu.name} (TP {scenario.tp}, PP {scenario.pp}), one per "
                      f"line in start order (at most {MAX_INSTANCES}): name, model, engine, tokens, "
                      "users, kd and any engine setting by its link key (gu = the memory fraction: "
                      "vLLM gpu_memory_utilization of the whole device, SGLang mem_fraction_static "
                      "of the free memory, TensorRT-LLM free_gpu_memory_fraction)."))
        text = st.text_area("Instances, in start order", key=TEXT_KEY, height=110, max_chars=4000,
                            placeholder=EXAMPLE, **lazy.KEEP)
        lines = lines_of(text or "")
        if not lines:
            return None
        try:
            named = [parse_instance(line, gpu, index=i, tp=scenario.tp, pp=scenario.pp,
                                    num_gpus=scenario.num_gpus) for i, line in enumerate(lines, 1)]
            answer = share(named)
        except KVPlanError as err:
            st.error(md(err))
            return None
        df = frame(answer)
        fig = charts.instances_figure(df, answer.capacity)
        st.plotly_chart(fig, theme=None, config=chart_config(), key="chart_instances")
        for n, item in enumerate(answer.instances, 1):
            head = f"{n}. {item.name} ({item.engine_label}, {item.release})"
            if not item.starts:
                st.error(md(f"{head} does not start: {item.message}"))
            elif not item.fits:
                st.warning(md(f"{head}: {item.max_requests:,} requests of {item.tokens:,} tokens fit, "
                              f"not {item.users:,}"))
            else:
                st.success(md(f"{head}: starts; {item.max_requests:,} requests of {item.tokens:,} "
                              f"tokens fit (KV pool {item.kv_pool_tokens:,} tokens)"))
            if item.fix:
                st.caption(md(f"Smallest change for {item.name}: {item.fix}"))
        st.dataframe(df, hide_index=True, key="table_instances")
        st.caption(md(f"Free after the last instance: {answer.free_after:,} B. An instance holds its "
                      "ledger's weights, runtime reserve and KV pool; the CUDA context of each process "
                      "is not modelled."))
        exports_ui.download_buttons("instances", df, fig, scenario)
        return df
