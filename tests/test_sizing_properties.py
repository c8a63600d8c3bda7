"""Property tests over presets × engines × dtypes × lengths (hypothesis).

Bounds, derived from the engine rules in kvplan/engines.py and engines.md:

* HF DynamicSlidingWindowLayer keeps exactly ``min(T, W − 1)`` tokens (chunked: ``W = chunk``);
  StaticSlidingWindowLayer allocates ``min(W, max_cache_len)`` ≤ W.
* vLLM sliding: the kept tokens are the last ``n = min(T, W − 1)``; whole blocks below are freed, so the
  held blocks are those covering ``[T − n, T)``. An n-token run starting at offset o in a block spans
  ``ceil((o + n) / bs)`` blocks, at most ``ceil((n − 1) / bs) + 1`` (o = bs − 1) →
  ``held_blocks ≤ ceil((W − 2) / bs) + 1`` and ``held_blocks · bs ≥ min(T, W − 1)``.
* vLLM chunked: kept tokens ``[(T // C)·C, T)``, at most C − 1 → same bound with W = C.
* SGLang hybrid SWA: ``≤ cdiv(W + 128, page) · page``.
* kv_bytes = batch × per-sequence bytes, so it is exactly linear in batch.
* Reserved bytes never decrease with the request length; held bytes never decrease except on vLLM
  sliding/chunked layers, where the engine frees whole blocks as the window moves (tested exactly in
  test_engines.py::test_vllm_sliding_held_blocks_gemma2_9b).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvplan.dtypes import KV_DTYPE_CHOICES, get_dtype
from kvplan.engines import (
    ENGINES,
    MLA_ONLY_DTYPES,
    EngineSettings,
    PagedRule,
    StaticRule,
    TokenRule,
    engine_view,
)
from kvplan.errors import KVPlanError
from kvplan.presets import load_model, model_presets
from kvplan.sizing import kv_cache
from tests.plans import kv_plan

PRESETS = sorted(model_presets())
PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

tokens_st = st.integers(min_value=1, max_value=300_000)
engine_st = st.sampled_from(sorted(ENGINES))
dtype_st = st.sampled_from(KV_DTYPE_CHOICES)
preset_st = st.sampled_from(PRESETS)
settings_st = st.builds(
    EngineSettings,
    block_size=st.sampled_from([None, 16, 32, 64, 128]),
    max_num_batched_tokens=st.sampled_from([None, 2048, 8192, 16384]),
    async_scheduling=st.booleans(),
    hybrid_manager=st.sampled_from([None, True, False]),
    page_size=st.sampled_from([None, 1, 16, 64]),
)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


#: Presets TensorRT-LLM's PyTorch backend has no model class for (tests/fixtures/trtllm/cases.json;
#: the four Hub-id presets of issue #25 — Granite, OLMo 2 / 3, Ministral3ForCausalLM — as
#: ``kvplan/engines/trtllm/engine.py`` refuses them by name from TensorRT-LLM's
#: ``tensorrt_llm/_torch/models/_arch_index.py``; microsoft/phi-1's PhiForCausalLM likewise, the
#: one text-only preset of the fourth issue-#25 pass the PyTorch backend has no class for).
TRTLLM_UNSERVED = frozenset({"command-r", "deepseek-v2-lite", "deepseek-v2", "falcon-40b", "falcon-7b",
                             "gemma-2-27b", "gemma-2-9b", "jamba-1.5-mini",
                             "ibm-granite/granite-3.0-2b-instruct", "allenai/OLMo-2-1124-13B",
                             "allenai/Olmo-3.1-32B-Instruct",
                             "mistralai/Devstral-2-123B-Instruct-2512", "microsoft/phi-1"})


#: Presets SGLang 0.5.23 refuses (tests/fixtures/sglang/cases.json "unsupported").
SGLANG_UNSERVED = frozenset({"falcon-7b", "falcon-40b", "jamba-1.5-mini"})


def _unserved(preset: str, engine: str) -> bool:
    return (engine == "trtllm" and preset in TRTLLM_UNSERVED) or (
        engine == "sglang" and preset in SGLANG_UNSERVED)


def _refused(preset: str, engine: str, dtype: str) -> bool:
    """transformers QuantizedCache (quanto, hqq, fp8) "is only supported for models with only full
    attention layers": it refuses any sliding, chunked or linear-attention (recurrent) layer; the
    fp8_ds_mla layout exists only for MLA layers (every engine refuses it elsewhere)."""
    arch = load_model(preset)
    windowed = any(getattr(layer, "kind", "") in {"sliding", "chunked", "recurrent"}
                   for layer in arch.layers)
    if dtype in MLA_ONLY_DTYPES and any(layer.kind in {"full", "sliding", "chunked"}
                                        for layer in arch.layers):
        return True
    return engine in {"hf", "hf-legacy"} and windowed and get_dtype(dtype).bits < 16


def _view(preset, engine, dtype, opts, max_cache_len=None):
    if engine == "hf-static" and max_cache_len:
        opts = opts.model_copy(update={"max_cache_len": max_cache_len})
    return engine_view(load_model(preset), engine, dtype, opts)


@PROPS
@given(preset=preset_st, engine=engine_st, dtype=dtype_st)
def test_quantized_refusal_is_exactly_the_documented_case(preset, engine, dtype):
    try:
        engine_view(load_model(preset), engine, dtype)
    except KVPlanError as err:
        if _unserved(preset, engine):
            assert err.code == "engine.unserved"
            return
        assert err.code == "engine.dtype"
        assert _refused(preset, engine, dtype)
    else:
        assert not _unserved(preset, engine)
        assert not _refused(preset, engine, dtype)


@PROPS
@given(preset=preset_st, engine=engine_st, dtype=dtype_st, tokens=tokens_st,
       batch=st.integers(min_value=1, max_value=4096), opts=settings_st)
def test_exactly_linear_in_batch(preset, engine, dtype, tokens, batch, opts):
    assume(not _refused(preset, engine, dtype) and not _unserved(preset, engine))
    arch = load_model(preset)
    one = kv_cache(kv_plan(arch, tokens, 1, dtype, engine, opts))
    many = kv_cache(kv_plan(arch, tokens, batch, dtype, engine, opts))
    assert many.kv_bytes == batch * one.kv_bytes
    assert many.reserved_bytes == batch * one.reserved_bytes
    assert one.kv_bytes > 0
    assert sum(k.bytes for k in many.layers.values()) == many.kv_bytes


@PROPS
@given(preset=preset_st, engine=engine_st, dtype=dtype_st, opts=settings_st,
       lengths=st.lists(tokens_st, min_size=2, max_size=40))
def test_bytes_never_decrease_with_tokens(preset, engine, dtype, opts, lengths):
    assume(not _refused(preset, engine, dtype) and not _unserved(preset, engine))
    t = np.asarray(sorted(lengths), dtype=np.int64)
    view = _view(preset, engine, dtype, opts, max_cache_len=int(t.max()))
    assert np.all(np.diff(view.reserved_bytes(t)) >= 0)
    for rule in view.rules:
        held = rule.held_bytes(t)
        assert np.all(held >= 0)
        if isinstance(rule, PagedRule) and rule.kind in {"sliding", "chunked"}:
            continue  # vLLM frees whole blocks as the window moves (not monotonic by design)
        assert np.all(np.diff(held) >= 0), (rule.kind, t, held)
    # per-request kv_cache (hf-static sized to the request) is monotonic too
    if engine != "vllm":
        arch = load_model(preset)
        sizes = [kv_cache(kv_plan(arch, int(n), 1, dtype, engine, opts)).kv_bytes for n in t[:5]]
        assert sizes == sorted(sizes)


@PROPS
@given(preset=st.sampled_from([p for p in PRESETS
                               if any(getattr(x, "window", None) for x in load_model(p).layers)]),
       engine=engine_st, dtype=st.sampled_from(["bf16", "fp8_e4m3", "fp16"]), opts=settings_st,
       lengths=st.lists(tokens_st, min_size=1, max_size=40))
def test_windowed_layers_never_exceed_their_cap(preset, engine, dtype, opts, lengths):
    assume(not _refused(preset, engine, dtype) and not _unserved(preset, engine))
    t = np.asarray(lengths, dtype=np.int64)
    view = _view(preset, engine, dtype, opts, max_cache_len=int(t.max()))
    for rule in view.rules:
        if rule.window is None:
            continue
        w = rule.window
        held = rule.held_tokens(t)
        if isinstance(rule, TokenRule) and engine.startswith("hf"):
            assert np.array_equal(held, np.minimum(t, w - 1))
        elif isinstance(rule, StaticRule):
            assert np.all(held == min(w, int(t.max())))
        elif isinstance(rule, PagedRule):
            bs = rule.block_size
            blocks = rule.held_blocks(t)
            assert np.all(blocks <= _cdiv(w - 2, bs) + 1)
            kept = np.minimum(t, w - 1) if rule.kind == "sliding" else t % w
            assert np.all(blocks * bs >= kept)
            assert np.all(rule.reserved_blocks(t) >= blocks)
        elif isinstance(rule, TokenRule):  # SGLang hybrid SWA pool
            page = rule.page
            assert np.all(held <= _cdiv(w + opts.swa_eviction_interval, page) * page)
            assert np.all(held >= np.minimum(t, w))


def test_vllm_sliding_bound_is_attained():
    """The bound is tight: Gemma-2-9B (W=4,096, bs=16) at T=4,110 holds ceil(4094/16) + 1 = 257 blocks."""
    view = engine_view(load_model("gemma-2-9b"), "vllm")
    (sliding,) = [r for r in view.rules if r.kind == "sliding"]
    t = np.arange(1, 20_000, dtype=np.int64)
    assert int(sliding.held_blocks(t).max()) == _cdiv(4094, 16) + 1 == 257
