"""The worst link the dashboard accepts still computes: finite, non-negative numbers, no error.

Limits (``kvplan.scenario``): 100M tokens, 10M users, 4096 GPUs, up to 12 KV dtypes. Timing of the
same computations lives in ``bench/`` (no timed unit tests here).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.dtypes import KV_DTYPE_CHOICES
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.scenario import MAX_GPUS, MAX_TOKENS, MAX_USERS, Scenario
from kvplan.sizing import MAX_BATCH, kv_cache, sweep
from tests.plans import kv_plan

HEAVY_MODELS = ["llama-3.1-405b", "kimi-k2", "deepseek-v3", "qwen3-next-80b-a3b", "jamba-1.5-mini",
                "llama-4-scout", "gemma-3-27b", "gpt-oss-120b"]
ENGINES = ["vllm", "sglang", "hf", "hf-static", "hf-legacy"]
ALL_DTYPES = list(KV_DTYPE_CHOICES)


def heaviest_query(model: str) -> dict[str, str]:
    """The heaviest link: every limit at its maximum and every KV dtype."""
    return {"m": model, "t": str(MAX_TOKENS), "u": str(MAX_USERS), "n": str(MAX_GPUS), "tp": "8",
            "pp": "8", "kd": ",".join(ALL_DTYPES), "g": "b300", "e": "vllm", "lx": "1"}


def _finite_frame(frame: pd.DataFrame) -> None:
    numeric = frame.select_dtypes(include="number")
    values = numeric.to_numpy(dtype=float)
    assert np.isfinite(values[~np.isnan(values)]).all()
    for column in numeric.columns:
        if column.endswith(("bytes", "tokens", "requests", "gib")) and "free" not in column:
            assert (numeric[column].dropna() >= 0).all(), column


def test_limits_agree():
    assert MAX_TOKENS == 100_000_000 and MAX_USERS == 10_000_000 and MAX_GPUS == 4096
    assert MAX_BATCH >= MAX_USERS
    scenario, warnings = Scenario.from_query(heaviest_query("llama-3.1-405b"))
    assert warnings == []
    assert scenario.tokens == MAX_TOKENS and scenario.users == MAX_USERS


@pytest.mark.parametrize("model", HEAVY_MODELS)
@pytest.mark.parametrize("engine", ENGINES)
def test_kv_cache_at_the_limits(model, engine):
    arch = load_model(model)
    for dtype in ALL_DTYPES:
        try:
            result = kv_cache(kv_plan(arch, MAX_TOKENS, MAX_USERS, dtype, engine))
        except KVPlanError as err:
            assert err.code in {"engine.dtype", "engine.unserved"}
            continue
        assert result.kv_bytes >= 0 and result.reserved_bytes >= result.kv_bytes
        assert math.isfinite(float(result.kv_bytes_per_token))


@pytest.mark.parametrize("model", HEAVY_MODELS)
def test_sweep_at_the_limits(model):
    arch = load_model(model)
    tokens = np.unique(np.round(np.logspace(0, np.log10(MAX_TOKENS), 161)).astype(np.int64))
    # SGLang 0.5.23 cannot serve Jamba (resolve_transformers_arch): only the others sweep it
    engines = ["vllm", "hf-static"] + (["sglang"] if model != "jamba-1.5-mini" else [])
    frame = pd.concat([sweep(kv_plan(arch, int(tokens.max()), engine=engine), tokens, [1, MAX_USERS],
                             ["bf16", "fp8_e4m3", "int4", "fp32"]) for engine in engines], ignore_index=True)
    assert len(frame) == tokens.size * 2 * 4 * len(engines)
    assert (frame["kv_bytes"] >= 0).all()
    # int64 must not wrap at 100M tokens × 10M users
    assert (frame["reserved_bytes"] >= frame["kv_bytes"]).all()
    big = frame[(frame["tokens"] == MAX_TOKENS) & (frame["batch"] == MAX_USERS)]
    assert (big["kv_bytes"] > 0).all()


@pytest.mark.parametrize("model", HEAVY_MODELS)
@pytest.mark.parametrize("engine", ["vllm", "sglang", "hf"])
def test_fit_at_the_limits(model, engine):
    arch = load_model(model)
    for gpu in ("b300", "rtx-4090"):
        for tp, pp in ((8, 8), (1, 1), (4096, 1)):
            query = FitQuery(tokens=MAX_TOKENS, users=MAX_USERS, num_gpus=MAX_GPUS, tp=tp, pp=pp,
                             engine=engine, kv_dtype="fp8_e4m3")
            try:
                result = fit(make_plan(arch, get_gpu(gpu), query))
            except KVPlanError as err:
                assert err.code.startswith("parallel.") or err.code in {"engine.dtype",
                                                                        "engine.unserved"}
                continue
            for name, value in result.model_dump().items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    assert math.isfinite(value) and value >= 0, (name, value)
            assert not result.fits or result.max_requests >= MAX_USERS


@pytest.mark.parametrize("model", ["llama-3.1-405b", "kimi-k2", "qwen3-next-80b-a3b"])
def test_dashboard_tables_at_the_limits(model):
    """The same data builders the dashboard and the report call, for the heaviest link."""
    from kvplan.report import check_names, scenario_tables
    from kvplan.ui import data

    scenario, warnings = Scenario.from_query(heaviest_query(model))
    scenario, more = check_names(scenario)
    assert warnings == [] and more == []
    for frame in scenario_tables(scenario).values():
        _finite_frame(frame)
    arch, gpu = load_model(model), get_gpu(scenario.gpu)
    query = FitQuery(tokens=scenario.tokens, users=scenario.users, num_gpus=scenario.num_gpus,
                     tp=scenario.tp, pp=scenario.pp, engine=scenario.engine,
                     kv_dtype=scenario.kv_dtypes[0])
    plan = make_plan(arch, gpu, query)
    frame, _errors = data.kv_vs_context(plan, scenario.kv_dtypes, log_x=True)
    _finite_frame(frame)
    _finite_frame(data.kv_by_kind(plan, log_x=True))
    results, _ = data.fits_per_dtype(plan, scenario.kv_dtypes)
    _finite_frame(data.kv_vs_users(results, scenario.users))
    _finite_frame(data.requests_grid(plan, scenario.kv_dtypes))
    _finite_frame(data.context_users_grid(plan))
    memory = data.memory_per_gpu(plan)
    assert len(memory) > 0
