"""The dashboard's caching helpers, in one place: the content key of a scenario, what it rebuilds,
and the cached answers every view shares (one ``fit`` per KV dtype per scenario and process)."""

from __future__ import annotations

import streamlit as st

from kvplan.capacity import FitResult
from kvplan.errors import KVPlanError
from kvplan.plan import Plan
from kvplan.scenario import Scenario, scenario_plan


def cache_key(scenario: Scenario) -> str:
    """Cache key of the computations: the scenario without the serving section's own inputs
    (those are passed to the serving computations separately)."""
    return scenario.model_dump_json(exclude={"serving"})


def scenario_from_key(key: str) -> tuple[Scenario, Plan]:
    """The scenario and its plan behind a ``cache_key`` (the cached functions take the key, not the
    objects, so Streamlit hashes one string)."""
    scenario = Scenario.model_validate_json(key)
    return scenario, scenario_plan(scenario)


@st.cache_data(max_entries=128, show_spinner=False)
def answers(key: str) -> dict[str, FitResult | str]:
    """KV dtype → its FitResult, or the message of why it is refused (in the scenario's order).
    The first dtype's result names the smallest change (a layout search); the others say whether
    they fit and how many requests."""
    from kvplan.capacity import fit

    scenario, plan = scenario_from_key(key)
    out: dict[str, FitResult | str] = {}
    for index, dtype in enumerate(scenario.kv_dtypes):
        try:  # only the first dtype's answer searches other layouts for its "smallest change"
            out[dtype] = fit(plan.vary(kv_dtype=dtype), search_gpus=index == 0)
        except KVPlanError as err:
            out[dtype] = str(err)
    return out


def primary_fit(key: str) -> FitResult:
    """The first KV dtype's answer (``answers``); a refused dtype raises its KVPlanError."""
    first = next(iter(answers(key).values()))
    if isinstance(first, FitResult):
        return first
    from kvplan.capacity import fit

    return fit(scenario_from_key(key)[1])
