"""The capacity numbers stay honest: floors are floors, monotone where they must be, never negative.

``KVPLAN_PROFILE=long`` runs ≥ 10,000 cases per property (profiles registered here).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvplan.capacity import MAX_SEARCH_TOKENS, FitQuery, FitResult, fit
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, gpus, load_model, model_presets

settings.register_profile("kvplan-props-default", max_examples=120, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("kvplan-props-long", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LONG = os.environ.get("KVPLAN_PROFILE", "").lower() == "long"
PROPS = settings.get_profile("kvplan-props-long" if LONG else "kvplan-props-default")

MODELS = sorted(model_presets())
GPUS = sorted(gpus())
ENGINES = ["vllm", "sglang", "hf", "hf-static", "hf-legacy"]
KV_DTYPES = ["bf16", "fp8_e4m3", "fp32", "int8", "int4", "nvfp4"]

log_tokens = st.integers(min_value=0, max_value=26).flatmap(
    lambda e: st.integers(min_value=max(1, 2**e // 2), max_value=min(2**e, MAX_SEARCH_TOKENS)))
log_users = st.integers(min_value=0, max_value=23).flatmap(
    lambda e: st.integers(min_value=max(1, 2**e // 2), max_value=min(2**e, 10_000_000)))


@st.composite
def cases(draw, engines=ENGINES):
    model = draw(st.sampled_from(MODELS))
    gpu = draw(st.sampled_from(GPUS))
    tp = draw(st.sampled_from([1, 1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 1, 1, 2, 4]))
    query = FitQuery(
        tokens=draw(log_tokens), users=draw(log_users), engine=draw(st.sampled_from(engines)),
        kv_dtype=draw(st.sampled_from(KV_DTYPES)), tp=tp, pp=pp,
        num_gpus=tp * pp * draw(st.sampled_from([1, 1, 2, 16])),
        gpu_util=draw(st.one_of(st.none(), st.floats(min_value=0.05, max_value=1.0))),
        kv_cache_memory_bytes=draw(st.one_of(st.none(), st.none(),
                                             st.integers(min_value=0, max_value=2**40))),
        block_size=draw(st.sampled_from([None, None, 16, 32, 128])),
    )
    return model, gpu, query


def run(model: str, gpu: str, query: FitQuery) -> FitResult | None:
    try:
        return fit(make_plan(load_model(model), get_gpu(gpu), query))
    except KVPlanError:
        return None     # an invalid combination (tp vs heads, dtype vs engine): a clear error


def _nonnegative(result: FitResult) -> None:
    for name, value in result.model_dump().items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert value >= 0, (name, value)


@PROPS
@given(cases())
def test_never_negative_and_fits_is_consistent(case):
    result = run(*case)
    assume(result is not None)
    _nonnegative(result)
    within = result.context_limit is None or result.tokens <= result.context_limit
    assert result.fits == (result.weights_fit and result.max_requests >= result.users and within)
    assert (result.reason == "") == result.fits
    assert result.max_requests_all_replicas == result.max_requests * result.replicas
    if not result.weights_fit and result.min_gpus_to_fit is not None:
        assert 1 <= result.min_gpus_to_fit <= 4096


@PROPS
@given(cases(engines=["vllm"]))
def test_vllm_max_requests_is_the_floor(case):
    result = run(*case)
    assume(result is not None)
    bpr, blocks, n = result.blocks_per_request, result.num_blocks, result.max_requests_kv
    assert bpr is not None and bpr >= 1 and blocks is not None
    usable = max(blocks - 1, 0)    # one null block
    assert n * bpr <= usable < (n + 1) * bpr, (n, bpr, blocks)
    # the answer is the pool's count capped by max_num_seqs (0 when vLLM would not start)
    assert result.max_num_seqs is not None
    assert result.max_requests == (min(n, result.max_num_seqs) if result.starts else 0)


@PROPS
@given(cases(engines=["hf", "hf-static", "hf-legacy"]))
def test_hf_max_requests_is_the_floor(case):
    result = run(*case)
    assume(result is not None)
    per, budget, n = result.kv_bytes_per_request, result.kv_budget_bytes, result.max_requests
    assert per >= 1
    assert n * per <= budget < (n + 1) * per, (n, per, budget)


@PROPS
@given(cases())
def test_shorter_requests_fit_when_longer_do(case):
    model, gpu, query = case
    assume(query.tokens >= 2)
    longer = run(model, gpu, query)
    assume(longer is not None)
    shorter = run(model, gpu, query.model_copy(update={"tokens": query.tokens - 1}))
    assert shorter is not None
    assert shorter.max_requests >= longer.max_requests
    if longer.fits:
        assert shorter.fits


@PROPS
@given(cases(), log_users)
def test_max_tokens_per_request_non_increasing_in_users(case, more_users):
    model, gpu, query = case
    few = run(model, gpu, query)
    assume(few is not None)
    many = run(model, gpu, query.model_copy(update={"users": min(query.users + more_users,
                                                                 10_000_000)}))
    assert many is not None
    assert many.max_tokens_per_request <= few.max_tokens_per_request


@PROPS
@given(cases(engines=["vllm", "hf", "hf-legacy"]))
def test_max_tokens_per_request_is_tight(case):
    """At the reported longest length all users fit; one token more and they do not."""
    model, gpu, query = case
    result = run(model, gpu, query)
    assume(result is not None and result.weights_fit)
    longest = result.max_tokens_per_request
    if longest == 0:
        one = run(model, gpu, query.model_copy(update={"tokens": 1}))
        assert one.max_requests_kv < query.users
        return
    at = run(model, gpu, query.model_copy(update={"tokens": longest}))
    assert at.max_requests_kv >= query.users, (longest, at.max_requests_kv)
    cap = load_model(model).max_position_embeddings
    limit = cap if isinstance(cap, int) and 0 < cap < MAX_SEARCH_TOKENS else MAX_SEARCH_TOKENS
    assert longest <= limit     # capped at the model's max_position_embeddings
    if longest < limit:
        past = run(model, gpu, query.model_copy(update={"tokens": longest + 1}))
        assert past.max_requests_kv < query.users, (longest, past.max_requests_kv)


def test_does_not_fit_reports_zeros_not_negatives():
    """405B in bf16 on one 24 GB card: weights alone do not fit; every number stays ≥ 0."""
    result = fit(make_plan(load_model("llama-3.1-405b"), get_gpu("rtx-4090"), FitQuery(tokens=4096)))
    assert not result.weights_fit and not result.fits
    assert result.kv_budget_bytes == 0 and result.max_requests == 0
    assert result.max_tokens_per_request == 0
    _nonnegative(result)
    assert result.min_gpus_to_fit is None or result.min_gpus_to_fit > 1
