"""vLLM release by release: each older release's rule, derived by hand from that release's source
(citations in ``docs/vllm_releases.md``, read from the released wheels)."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.engines import EngineSettings, engine_view, get_engine, release_choices
from kvplan.errors import KVPlanError
from kvplan.presets import get_gpu, load_model

GIB = 1 << 30
H100 = get_gpu("h100-sxm")  # CUDA total 81,089 MiB = 85,027,979,264 B (cuda_total_mib)


def test_every_release_is_named_and_reachable():
    assert release_choices("vllm") == ["latest", "0.19", "0.13", "0.11", "0.9", "0.8", "0.6"]
    assert [get_engine(f"vllm@{r}").release for r in release_choices("vllm")[1:]] == [
        "vLLM v0.14–v0.19", "vLLM v0.11.1–v0.13", "vLLM v0.10–v0.11.0", "vLLM v0.9", "vLLM v0.8",
        "vLLM v0.6 (V0)"]
    assert get_engine("vllm").release == "vLLM v0.33"
    with pytest.raises(KVPlanError) as err:
        get_engine("vllm@0.1")
    assert err.value.code == "unknown.release"


@pytest.mark.parametrize(("release", "target"), [
    # the budget starts from CUDA's total (81,089 MiB × 2^20 = 85,027,979,264 B), not nvidia-smi's
    ("latest", 78_225_740_923),   # ceil(85,027,979,264 × 0.92) = ceil(78,225,740,922.88) (0.92 from
                                  # v0.20.0, ceil from v0.14.1)
    ("0.19", 76_525_181_338),     # ceil(85,027,979,264 × 0.9) = ceil(76,525,181,337.6)
    ("0.13", 76_525_181_337),     # int(85,027,979,264 × 0.9): requested = total × util, a float
    ("0.11", 76_525_181_337),
    ("0.6", 76_525_181_337),
])
def test_memory_target_per_release(release, target):
    engine = "vllm" if release == "latest" else f"vllm@{release}"
    result = fit(load_model("llama-3.1-8b"), H100, FitQuery(tokens=4096, engine=engine))
    assert result.memory_target_bytes == target


@pytest.mark.parametrize(("release", "kinds"), [
    ("latest", {"chunked", "full"}),   # v0.14+: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1
    ("0.19", {"chunked", "full"}),
    ("0.13", {"full"}),                # v0.10–0.13: the variable defaults to 0 → manager off → full
    ("0.11", {"full"}),
    ("0.9", {"full"}),                 # v0.9: no ChunkedLocalAttentionSpec → FullAttentionSpec
    ("0.8", {"full"}),
])
def test_llama4_chunked_layers_per_release(release, kinds):
    engine = "vllm" if release == "latest" else f"vllm@{release}"
    view = engine_view(load_model("llama-4-scout"), engine)
    assert {rule.kind for rule in view.rules} == kinds


def test_sliding_reservation_before_026_counts_max_num_batched_tokens_only():
    """Before v0.26 ``SlidingWindowSpec.max_memory_usage_bytes`` adds ``max_num_batched_tokens``
    (not ``max_concurrent_batches ×``): Gemma-3-27B (W = 1,024), mnbt 8,192, L = 32,768 →
    cdiv(1,023 + 8,192, 16) + 1 = 577 blocks on v0.19; v0.33 with async: cdiv(1,023 + 16,384, 16) + 1
    = 1,089."""
    settings = EngineSettings(max_num_batched_tokens=8192)
    arch = load_model("gemma-3-27b")
    old = next(r for r in engine_view(arch, "vllm@0.19", settings=settings).rules if r.kind == "sliding")
    new = next(r for r in engine_view(arch, "vllm", settings=settings).rules if r.kind == "sliding")
    t = np.asarray([32768])
    assert (int(old.reserved_blocks(t)[0]), int(new.reserved_blocks(t)[0])) == (577, 1089)


def test_logged_kv_cache_size_per_release():
    """gpt-oss-20b, TP 1, bf16, 20 GiB given, L = 131,072.

    v0.19 (``_report_kv_cache_config``: ``num_blocks // n_groups × min_bs``): 2 groups of 12 layers,
    a block 12 × 16 × 8 × 2 × 64 × 2 = 393,216 B → 54,613 blocks → 54,613 // 2 × 16 = 436,896.
    v0.8 (no hybrid manager: every layer full, one group): a block 24 × 32,768 = 786,432 B →
    27,306 blocks; "GPU KV cache size" 27,306 × 16 = 436,896; concurrency 436,896 / 131,072.
    v0.33 (``int(concurrency × L)``): a request 1,033 + 8,192 = 9,225 blocks →
    int(54,613 / 9,225 × 131,072) = 775,960."""
    arch = load_model("gpt-oss-20b")
    query = {"tokens": 131072, "kv_cache_memory_bytes": 20 * GIB,
             "settings": EngineSettings(max_num_batched_tokens=8192)}
    v019 = fit(arch, H100, FitQuery(engine="vllm@0.19", **query))
    v08 = fit(arch, H100, FitQuery(engine="vllm@0.8", **query))
    v033 = fit(arch, H100, FitQuery(engine="vllm", **query))
    assert (v019.num_blocks, v019.kv_pool_tokens) == (54_613, 436_896)
    assert (v08.num_blocks, v08.bytes_per_block, v08.kv_pool_tokens) == (27_306, 786_432, 436_896)
    assert v08.max_concurrency == 436_896 / 131_072
    assert (v033.num_blocks, v033.kv_pool_tokens) == (54_613, 775_960)


def test_v0_has_no_null_block_and_ignores_windows():
    """V0 (``CacheEngine.get_cache_block_size``): one block spans every layer; Llama-3.1-8B bf16,
    20 GiB: a block 32 × 16 × 8 × 2 × 128 × 2 = 2,097,152 B → 10,240 blocks; concurrency
    10,240 × 16 / 32,768 = 5.0 and 5 requests (V1 keeps a null block: (10,240 − 1) // 2,048 = 4).
    Mistral-7B v0.1's sliding layers reserve the full length in V0."""
    query = {"tokens": 32768, "kv_cache_memory_bytes": 20 * GIB}
    v0 = fit(load_model("llama-3.1-8b"), H100, FitQuery(engine="vllm@0.6", **query))
    v1 = fit(load_model("llama-3.1-8b"), H100, FitQuery(engine="vllm", **query))
    assert (v0.num_blocks, v0.max_concurrency, v0.max_requests) == (10_240, 5.0, 5)
    assert (v1.num_blocks, v1.max_requests) == (10_240, 4)
    (rule,) = engine_view(load_model("mistral-7b-v0.1"), "vllm@0.6").rules
    assert rule.kind == "full"
    with pytest.raises(KVPlanError) as err:
        engine_view(load_model("jamba-1.5-mini"), "vllm@0.6")
    assert err.value.code == "engine.unserved"


@pytest.mark.parametrize(("release", "mnbt"), [("latest", 16384), ("0.19", 8192), ("0.8", 8192)])
def test_default_max_num_batched_tokens_per_release(release, mnbt):
    """``get_batch_defaults`` for ``serve`` on a B200 (≥ 160 GiB): 16,384 from v0.28; 8,192 on
    v0.9–v0.26 (≥ 70 GiB, not an A100) and on v0.8 (every ≥ 70 GiB device)."""
    from kvplan.capacity import engine_settings

    engine = "vllm" if release == "latest" else f"vllm@{release}"
    settings = engine_settings(FitQuery(engine=engine), get_gpu("b200"))
    assert settings.max_num_batched_tokens == mnbt
