"""Lazy expanders: their content runs only while they are open (issue #16, speed).

Every element a rerun draws is re-sent to the browser and re-rendered there, closed expander or
not; an expander with a key and ``on_change="rerun"`` reports whether it is open (``.open``), so a
closed one costs one element. Widgets inside that carry state (engine knobs, serving workload, the
pasted vLLM log) use ``persist_state="session"``: their values stay in the session, and so in the
link, while the expander is closed; one-shot inputs (config and checkpoint uploads, the config
paste box) are dropped when it closes, as what they loaded is kept elsewhere (``custom_config``,
``_checkpoint``). The label is part of an expander's identity, so it is fixed.
"""

from __future__ import annotations

from typing import Any

#: Expander key (its open state in ``st.session_state``) → its fixed label.
BOXES: dict[str, str] = {
    "w_config_box": "Use your own config.json",
    "w_weights_box": "Weights from a checkpoint (exact bytes)",
    "w_engine_box": "Engine settings",
    "w_serving_box": "Serving workload (prefix / output tokens, images)",
    "w_charts_box": "Chart options (log axes, stack by layer kind)",
    "box_seeds": "Named scenarios: the seed figures and planning classics",
    "box_share": "Share: link and scenario JSON",
    "box_calibrate": "Calibrate against a vLLM log",
    "box_instances": "Several engines on one GPU",
    # st.table's first use loads its renderer in the browser (≈ 0.3–0.8 s of the first render)
    "box_budget": "KV budget, term by term",
}
#: What a stateful widget inside a lazy expander passes, so its value outlives the closed box.
KEEP: dict[str, Any] = {"persist_state": "session"}


def box(container: Any, key: str) -> Any:
    """The lazy expander ``key`` in ``container`` (``st`` or ``st.sidebar``); use ``.open``."""
    return container.expander(BOXES[key], key=key, on_change="rerun")
