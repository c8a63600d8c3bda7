"""vLLM release by release: each older release's rule, derived by hand from that release's source
(citations in ``docs/vllm_releases.md``, read from the released wheels)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.config_import import parse_config
from kvplan.engines import EngineSettings, engine_view, get_engine, release_choices
from kvplan.engines.vllm import VLLM_RELEASES
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.sizing import kv_cache
from tests.plans import kv_plan

GIB = 1 << 30
H100 = get_gpu("h100-sxm")  # CUDA total 81,089 MiB = 85,027,979,264 B (cuda_total_mib)


def test_every_release_is_named_and_reachable():
    """``latest`` is an alias of the newest record (bare id ``vllm``); every release, the newest
    included, is reachable by its key, newest first (a newer release adds its key before 0.33)."""
    choices = release_choices("vllm")
    # 0.28 / 0.30 split off 0.29 / 0.32 (issue #26): their capture sizes with draft tokens differ
    # (VllmRelease.spec_capture); nothing else kvplan sizes does
    # 0.14 split off 0.17: its Mamba prefix-caching rule is v0.13's (test_v0_14_mamba_prefix_rule)
    # 0.11 (v0.11.0) split off 0.10 and 0.11.2 (v0.11.1–v0.11.2) off 0.13: their profile pads the
    # dummy encoder outputs to the encoder budget (VllmRelease.mm_profile_pads), the others do not
    modelled = ["0.33", "0.32", "0.30", "0.29", "0.28", "0.27", "0.26", "0.25", "0.24", "0.20",
                "0.20.0", "0.19", "0.17", "0.14", "0.13", "0.11.2", "0.11", "0.10", "0.9", "0.8", "0.6"]
    assert choices[0] == "latest" and choices[-len(modelled):] == modelled
    assert [get_engine(f"vllm@{r}").release for r in modelled] == [
        "vLLM v0.33", "vLLM v0.31–v0.32", "vLLM v0.30", "vLLM v0.29", "vLLM v0.28", "vLLM v0.27",
        "vLLM v0.26", "vLLM v0.25",
        "vLLM v0.21–v0.24", "vLLM v0.20.1–v0.20.2", "vLLM v0.20.0",
        "vLLM v0.18–v0.19", "vLLM v0.15–v0.17", "vLLM v0.14", "vLLM v0.12–v0.13",
        "vLLM v0.11.1–v0.11.2", "vLLM v0.11.0", "vLLM v0.10",
        "vLLM v0.9", "vLLM v0.8", "vLLM v0.6 (V0)"]
    newest = get_engine("vllm")
    assert newest is get_engine(f"vllm@{choices[1]}") and newest.id == "vllm"
    assert newest.record is VLLM_RELEASES[-1]
    with pytest.raises(KVPlanError) as err:
        get_engine("vllm@0.1")
    assert err.value.code == "unknown.release"


@pytest.mark.parametrize(("release", "target"), [
    # the budget starts from CUDA's total (81,089 MiB × 2^20 = 85,027,979,264 B), not nvidia-smi's
    ("0.33", 78_225_740_923),   # ceil(85,027,979,264 × 0.92) = ceil(78,225,740,922.88) (0.92 from
                                  # v0.20.0, ceil from v0.14.1)
    ("0.32", 78_225_740_923),     # 0.32.0 config/cache.py:102 gpu_memory_utilization 0.92,
                                  # v1/worker/utils.py:724 request_memory math.ceil
    ("0.29", 78_225_740_923),     # 0.29.0 config/cache.py:111, v1/worker/utils.py:521
    ("0.27", 78_225_740_923),     # 0.27.1 config/cache.py:68, v1/worker/utils.py:414
    ("0.26", 78_225_740_923),     # 0.26.0 config/cache.py:68, v1/worker/utils.py:430
    ("0.25", 78_225_740_923),     # v0.25.1 config/cache.py gpu_memory_utilization 0.92,
    ("0.24", 78_225_740_923),     # v1/worker/utils.py request_memory math.ceil (v0.20.0–v0.25.1 alike)
    ("0.20", 78_225_740_923),
    ("0.20.0", 78_225_740_923),
    ("0.19", 76_525_181_338),     # ceil(85,027,979,264 × 0.9) = ceil(76,525,181,337.6)
    ("0.13", 76_525_181_337),     # int(85,027,979,264 × 0.9): requested = total × util, a float
    ("0.11", 76_525_181_337),
    ("0.6", 76_525_181_337),
])
def test_memory_target_per_release(release, target):
    engine = f"vllm@{release}"
    result = fit(make_plan(load_model("llama-3.1-8b"), H100, FitQuery(tokens=4096, engine=engine)))
    assert result.memory_target_bytes == target


@pytest.mark.parametrize(("release", "kinds"), [
    ("0.33", {"chunked", "full"}),   # v0.14+: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1
    ("0.25", {"chunked", "full"}),     # v0.20.0–v0.25.1 envs.py: still "1"
    ("0.20.0", {"chunked", "full"}),
    ("0.19", {"chunked", "full"}),
    ("0.13", {"full"}),                # v0.10–0.13: the variable defaults to 0 → manager off → full
    ("0.11", {"full"}),
    ("0.9", {"full"}),                 # v0.9: no ChunkedLocalAttentionSpec → FullAttentionSpec
    ("0.8", {"full"}),
])
def test_llama4_chunked_layers_per_release(release, kinds):
    engine = f"vllm@{release}"
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
    new = next(r for r in engine_view(arch, "vllm@0.33", settings=settings).rules if r.kind == "sliding")
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
    v019 = fit(make_plan(arch, H100, FitQuery(engine="vllm@0.19", **query)))
    v08 = fit(make_plan(arch, H100, FitQuery(engine="vllm@0.8", **query)))
    v033 = fit(make_plan(arch, H100, FitQuery(engine="vllm@0.33", **query)))
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
    v0 = fit(make_plan(load_model("llama-3.1-8b"), H100, FitQuery(engine="vllm@0.6", **query)))
    v1 = fit(make_plan(load_model("llama-3.1-8b"), H100, FitQuery(engine="vllm@0.33", **query)))
    assert (v0.num_blocks, v0.max_concurrency, v0.max_requests) == (10_240, 5.0, 5)
    assert (v1.num_blocks, v1.max_requests) == (10_240, 4)
    (rule,) = engine_view(load_model("mistral-7b-v0.1"), "vllm@0.6").rules
    assert rule.kind == "full"
    with pytest.raises(KVPlanError) as err:
        engine_view(load_model("jamba-1.5-mini"), "vllm@0.6")
    assert err.value.code == "engine.unserved"


@pytest.mark.parametrize(("release", "mnbt"), [("0.33", 16384), ("0.32", 16384), ("0.29", 16384),
                                               ("0.27", 8192), ("0.26", 8192), ("0.25", 8192),
                                               ("0.20.0", 8192), ("0.19", 8192), ("0.8", 8192)])
def test_default_max_num_batched_tokens_per_release(release, mnbt):
    """``get_batch_defaults`` for ``serve`` on a B200 (≥ 160 GiB): 16,384 from v0.28 (0.28.0
    ``engine/arg_utils.py:2553``, the tier at ``:2582``; 0.29.0 ``:2669``, 0.32.0 ``:2894``); 8,192 on
    v0.9–v0.27 (≥ 70 GiB, not an A100; 0.25.1, 0.26.0 ``:2431`` and 0.27.1 ``:2515`` have no 160 GiB
    tier) and on v0.8 (every ≥ 70 GiB device)."""
    engine = f"vllm@{release}"
    settings = make_plan(load_model("llama-3.1-8b"), get_gpu("b200"), FitQuery(engine=engine)).settings
    assert settings.max_num_batched_tokens == mnbt


# ---------------------------------------------------------------------------- v0.20–v0.25


def _reserve(engine: str, gpu=H100, model: str = "llama-3.1-8b") -> dict[str, tuple[int, bool]]:
    eng = get_engine(engine)
    arch = load_model(model)
    settings = eng.resolve_settings(eng.own_settings(EngineSettings()), 4096, gpu, arch)
    return {t.name: (t.bytes, t.counted) for t in eng.runtime_reserve(arch, gpu, settings, 4096).terms}


def test_sliding_in_flight_tokens_v020_to_v025_are_max_num_batched_tokens_at_async_scheduling():
    """gpt-oss-20b (W = 128) on an H100, serve defaults (``get_batch_defaults``: MNBT 8,192), async
    scheduling on (its default from v0.14.1). v0.20.0–v0.25.1 ``v1/kv_cache_interface.py``
    ``SlidingWindowSpec.max_admission_blocks_per_request``: ``cdiv(min(W − 1 + MNBT, L), bs) + 1`` =
    cdiv(127 + 8,192, 16) + 1 = 520 + 1 = 521 blocks; v0.26+ ``max_in_flight_tokens`` = 2 × 8,192 →
    cdiv(127 + 16,384, 16) + 1 = 1,033."""
    arch = load_model("gpt-oss-20b")
    t = np.asarray([131072])
    blocks = {}
    for engine in ("vllm@0.33", "vllm@0.25", "vllm@0.24", "vllm@0.20", "vllm@0.20.0"):
        settings = get_engine(engine).resolve_settings(EngineSettings(), 131072, H100, arch)
        assert (settings.max_num_batched_tokens, settings.async_scheduling) == (8192, True)
        rule = next(r for r in engine_view(arch, engine, settings=settings).rules if r.kind == "sliding")
        blocks[engine] = int(rule.reserved_blocks(t)[0])
    assert blocks == {"vllm@0.33": 1033, "vllm@0.25": 521, "vllm@0.24": 521, "vllm@0.20": 521,
                      "vllm@0.20.0": 521}


def test_logged_kv_cache_size_v020_to_v025():
    """gpt-oss-20b, 20 GiB given, L = 131,072, MNBT 8,192: a block 12 × 16 × 8 × 2 × 64 × 2 =
    393,216 B → 54,613 blocks; a request cdiv(131,072, 16) + 521 = 8,713 blocks.
    v0.20.1–v0.25 (v0.20.2 ``kv_cache_utils.py:1706`` ``_report_kv_cache_config``, v0.24
    ``get_kv_cache_capacity``): int(54,613 / 8,713 × 131,072) = 821,558 tokens.
    v0.20.0 (``_report_kv_cache_config`` ``:1694``): 54,613 // 2 groups × 16 = 436,896."""
    arch = load_model("gpt-oss-20b")
    query = {"tokens": 131072, "kv_cache_memory_bytes": 20 * GIB,
             "settings": EngineSettings(max_num_batched_tokens=8192)}
    got = {e: fit(make_plan(arch, H100, FitQuery(engine=e, **query))) for e in
           ("vllm@0.25", "vllm@0.24", "vllm@0.20", "vllm@0.20.0")}
    assert {e: (r.num_blocks, r.kv_pool_tokens) for e, r in got.items()} == {
        "vllm@0.25": (54_613, 821_558), "vllm@0.24": (54_613, 821_558),
        "vllm@0.20": (54_613, 821_558), "vllm@0.20.0": (54_613, 436_896)}
    assert got["vllm@0.20.0"].max_concurrency == 54_613 / 8_713


def test_sampler_warm_up_sorts_until_v021():
    """Llama-3.1-8B on an H100: ``_dummy_sampler_run`` on min(8,192, 1,024) = 1,024 rows × vocab
    128,256. v0.21.0+ (``envs.py`` ``VLLM_USE_FLASHINFER_SAMPLER`` defaults to True;
    ``TopKTopPSampler.__init__``): FlashInfer, 10 B per element = 1,313,341,440 B. v0.20.0–v0.20.2
    (default None → ``forward_native``): the sort, 39 B = 5,122,031,616 B. Both beat the forward
    (8,192 × (12,288 + 43,008) × 2 = 905,969,664 B). The CUDA-graph estimate is subtracted from
    v0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` default "1"), not in v0.19."""
    rows_vocab = 1024 * 128_256
    for engine in ("vllm@0.25", "vllm@0.24"):
        assert _reserve(engine)["activation_peak"] == (rows_vocab * 10, True) == (1_313_341_440, True)
    for engine in ("vllm@0.20", "vllm@0.20.0", "vllm@0.19"):
        assert _reserve(engine)["activation_peak"] == (rows_vocab * 39, True) == (5_122_031_616, True)
    assert _reserve("vllm@0.20.0")["cuda_graphs"][1] is True
    assert _reserve("vllm@0.19")["cuda_graphs"][1] is False


def test_no_blackwell_capture_cap_before_v028():
    """B200, serve defaults (max_num_seqs 1,024): v0.25.1 ``_set_cudagraph_sizes`` caps at
    min(2 × 1,024, 512) = 512 → 3 + 31 + 17 = 51 sizes; v0.28+ (data-centre Blackwell) at 1,024 →
    83 sizes; × ``GRAPH_BYTES_PER_SIZE`` (8,012,999 B)."""
    b200 = get_gpu("b200")
    assert _reserve("vllm@0.25", b200)["cuda_graphs"] == (51 * 8_012_999, True) == (408_662_949, True)
    assert _reserve("vllm@0.33", b200)["cuda_graphs"] == (83 * 8_012_999, True)


def test_yarn_context_limit_is_scaled_before_v030():
    """Qwen2.5-7B with Qwen's YaRN ×4 recipe: v0.20.0–v0.28 ``config/model.py``
    ``_get_and_verify_max_len`` (``rope_type not in ("su", "longrope", "llama3")`` → YaRN restarts
    from ``original_max_position_embeddings``): 32,768 × 4 = 131,072; v0.30+: 32,768."""
    from kvplan.config_import import parse_config
    from kvplan.presets import model_presets

    config = model_presets()["qwen2.5-7b"].config | {
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    arch = parse_config(config)
    for release in ("0.25", "0.24", "0.20", "0.20.0"):
        limit = get_engine(f"vllm@{release}").context_limit(arch)
        assert (limit.tokens, limit.rule) == (
            131072, "original_max_position_embeddings 32,768 × RoPE factor 4; "
                    f"{get_engine(f'vllm@{release}').release} _get_and_verify_max_len")
    assert get_engine("vllm@0.33").context_limit(arch).tokens == 32768


def test_mxfp4_scales_of_gpt_oss_on_h100_are_freed_from_v025():
    """gpt-oss-120b, TP 1, H100 (SM 9.0 → OAI Triton): v0.25.0/v0.25.1 ``fused_moe/oracle/mxfp4.py``
    ``del layer.w13_weight_scale`` / ``w2_weight_scale`` after swizzling; v0.20–v0.24 keep them. The
    difference is the checkpoint's e8m0 scales: 36 layers × 128 experts × (5,760 + 2,880) rows ×
    2,880 / 32 = 3,583,180,800 B. On a B200 TRT-LLM pads the intermediate to 256 up to v0.26
    (``mxfp4_round_up_hidden_size_and_intermediate_size``), 128 from v0.28. Each total holds the
    YaRN RoPE cos/sin cache (vLLM ``rotary_embedding/base.py``, bf16): 4,096 × 32 positions × 64 × 2
    = 16,777,216 B (69,044,333,184 / 65,461,152,384 before it)."""
    from kvplan.weights import weights_per_gpu

    arch = load_model("gpt-oss-120b")

    def weights(engine: str) -> int:
        return max(weights_per_gpu(arch, None, 1, rules=get_engine(engine).loading_rules(H100)).stage_bytes)

    assert weights("vllm@0.24") - weights("vllm@0.25") == 36 * 128 * (5760 + 2880) * 2880 // 32
    assert weights("vllm@0.24") == weights("vllm@0.20") == weights("vllm@0.19") == 69_061_110_400
    assert weights("vllm@0.25") == weights("vllm@0.33") == 65_477_929_600
    b200 = get_gpu("b200")
    assert [get_engine(e).mxfp4_moe_repack(b200).inter for e in ("vllm@0.33", "vllm@0.25", "vllm@0.20.0")] \
        == [128, 256, 256]


# ---------------------------------------------------------------------------- v0.26–v0.32

NEW = ("vllm@0.33", "vllm@0.32", "vllm@0.29", "vllm@0.27", "vllm@0.26", "vllm@0.25")


def test_sliding_in_flight_tokens_from_v026_are_two_batches_at_async_scheduling():
    """gpt-oss-20b (W = 128) on an H100, serve defaults (MNBT 8,192), async scheduling on.
    v0.26.0–v0.33 ``config/vllm.py`` ``max_in_flight_tokens = max_concurrent_batches × MNBT``
    (0.26.0 ``:525``, 0.28.0 ``:563``, 0.30.0 ``:602``, 0.33.0 ``:601``), ``max_concurrent_batches``
    = 2 at pp 1 with async (V1 runner: ``2 if pp <= 1``; V2: pp + 1), read by
    ``v1/kv_cache_interface.py`` (0.26.0 ``:503``, 0.29.0 ``:659``, 0.32.0 ``:493``):
    cdiv(127 + 16,384, 16) + 1 = 1,033 blocks; v0.25.1: cdiv(127 + 8,192, 16) + 1 = 521. Without
    async scheduling ``max_concurrent_batches`` = pp = 1 → 521 on every release."""
    arch = load_model("gpt-oss-20b")
    t = np.asarray([131072])
    blocks = {}
    for engine in NEW:
        for async_on in (True, False):
            settings = get_engine(engine).resolve_settings(
                EngineSettings(async_scheduling=async_on), 131072, H100, arch)
            assert settings.max_num_batched_tokens == 8192
            rule = next(r for r in engine_view(arch, engine, settings=settings).rules
                        if r.kind == "sliding")
            blocks[engine, async_on] = int(rule.reserved_blocks(t)[0])
    assert blocks == {**{(e, True): 1033 for e in NEW[:-1]}, ("vllm@0.25", True): 521,
                      **{(e, False): 521 for e in NEW}}


def test_yarn_context_limit_from_v026_to_v032():
    """Qwen2.5-7B with Qwen's YaRN ×4: ``config/model.py`` ``_get_and_verify_max_len`` scales YaRN
    from ``original_max_position_embeddings`` in 0.26.0 (``:2152``, the ``rope_type not in ("su",
    "longrope", "llama3")`` test at ``:2220``), 0.27.1 (``:2246``), 0.28.0 (``:2328``) and 0.29.0
    (``:2384``): 32,768 × 4 = 131,072; 0.30.0 (``:2393``), 0.31.0 (``:2471``) and 0.32.0 (``:2527``)
    list ``"yarn"`` among the unscaled types: 32,768."""
    from kvplan.config_import import parse_config
    from kvplan.presets import model_presets

    config = model_presets()["qwen2.5-7b"].config | {
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    arch = parse_config(config)
    got = {e: get_engine(e).context_limit(arch) for e in NEW}
    assert {e: limit.tokens for e, limit in got.items()} == {
        "vllm@0.33": 32768, "vllm@0.32": 32768, "vllm@0.29": 131072, "vllm@0.27": 131072,
        "vllm@0.26": 131072, "vllm@0.25": 131072}
    # the record names follow the 0.28 / 0.30 splits (issue #26: capture sizes with draft tokens)
    assert got["vllm@0.29"].rule == ("original_max_position_embeddings 32,768 × RoPE factor 4; "
                                     "vLLM v0.29 _get_and_verify_max_len")
    assert got["vllm@0.32"].rule == "max_position_embeddings 32,768; vLLM v0.31–v0.32 _get_and_verify_max_len"


def test_blackwell_capture_cap_from_v028():
    """B200, serve defaults (max_num_seqs 1,024): 0.26.0 (``config/vllm.py:1739``) and 0.27.1
    (``:1778``) ``_set_cudagraph_sizes`` cap at min(2 × 1,024, 512) = 512 → [1, 2, 4] + 8…248 step 8
    + 256…512 step 16 = 3 + 31 + 17 = 51 sizes; 0.28.0 (``:1878``), 0.29.0 (``:1940``), 0.32.0
    (``:2292``): ``1024 if is_data_center_blackwell`` → 3 + 31 + 49 = 83 sizes; × 8,012,999 B each
    (``GRAPH_BYTES_PER_SIZE``)."""
    b200 = get_gpu("b200")
    got = {e: _reserve(e, b200)["cuda_graphs"] for e in NEW}
    assert got == {"vllm@0.33": (665_078_917, True), "vllm@0.32": (665_078_917, True),
                   "vllm@0.29": (665_078_917, True), "vllm@0.27": (408_662_949, True),
                   "vllm@0.26": (408_662_949, True), "vllm@0.25": (408_662_949, True)}
    assert 83 * 8_012_999 == 665_078_917 and 51 * 8_012_999 == 408_662_949
    assert _reserve("vllm@0.27")["cuda_graphs"] == _reserve("vllm@0.33")["cuda_graphs"]  # H100: 512 on both


def test_mxfp4_trtllm_intermediate_is_128_from_v027():
    """gpt-oss-120b (36 layers, 128 experts, hidden 2,880, intermediate 2,880), TP 1, B200 (SM 10.0 →
    FlashInfer TRT-LLM): ``fused_moe/oracle/mxfp4.py``
    ``mxfp4_round_up_hidden_size_and_intermediate_size`` pads the intermediate to 256 in 0.26.0
    (``:635``, → 3,072) and to 128 from 0.27.0 (``:636``; 0.28.0 ``:632``, 0.32.0 ``:816``, → 2,944);
    hidden to 256 (3,072) on both. Per expert, 128 fewer intermediate rows: w13 2 × 128 × (3,072 / 2
    B values + 3,072 / 32 B scales + 4 B fp32 bias) = 418,816 B, w2 3,072 × 128 × (1 / 2 + 1 / 32) =
    208,896 B → 36 × 128 × 627,712 = 2,892,496,896 B fewer. Each total holds the 16,777,216 B YaRN
    RoPE cache (131,072 × 64 × 2 B, vLLM ``rotary_embedding/base.py``): 70,839,167,616 → 70,855,944,832
    and 73,731,664,512 → 73,748,441,728."""
    from kvplan.weights import weights_per_gpu

    arch = load_model("gpt-oss-120b")
    b200 = get_gpu("b200")

    def weights(engine: str) -> tuple[int, int]:
        rules = get_engine(engine).loading_rules(b200)
        return rules.mxfp4_experts.inter, max(weights_per_gpu(arch, None, 1, rules=rules).stage_bytes)

    assert {e: weights(e) for e in NEW} == {
        "vllm@0.33": (128, 70_855_944_832), "vllm@0.32": (128, 70_855_944_832),
        "vllm@0.29": (128, 70_855_944_832), "vllm@0.27": (128, 70_855_944_832),
        "vllm@0.26": (256, 73_748_441_728), "vllm@0.25": (256, 73_748_441_728)}
    assert 73_748_441_728 - 70_855_944_832 == 36 * 128 * (2 * 128 * (1536 + 96 + 4) + 3072 * 128 * 17 // 32)


def test_gb10_stays_on_the_small_batch_tier_from_v033_only():
    """A DGX Spark (GB10, SM 12.1, CUDA total 119.70 GiB): 0.33.0 ``engine/arg_utils.py:2940``
    ``get_batch_defaults`` (``is_gb10 = is_device_capability((12, 1))``, ``and not is_gb10``) keeps it
    on the small tier: MNBT 2,048, max_num_seqs 256; 0.32.0 (``:2894``), 0.29.0 (``:2669``), 0.27.1
    (``:2515``) have no such test: ≥ 70 GiB and not an A100 → 8,192 and 1,024 — for a GB10 whose
    NVML reports its memory (this custom card; the catalogue's ``gb10``, whose NVML does not, is on
    the small tier in those releases too: the next test). An RTX PRO 6000 (SM 12.0, 95 GiB) is not
    a GB10: 8,192 on v0.33 too."""
    from kvplan.presets import custom_gpu

    gb10 = custom_gpu(119.70).model_copy(update={"compute_capability": "12.1", "device_name": "NVIDIA GB10"})
    sm120 = custom_gpu(95.0).model_copy(update={"compute_capability": "12.0"})
    got = {e: (get_engine(e).default_mnbt(gb10), get_engine(e).default_max_num_seqs(gb10))
           for e in ("vllm@0.33", "vllm@0.32", "vllm@0.29", "vllm@0.27")}
    assert got == {"vllm@0.33": (2048, 256), "vllm@0.32": (8192, 1024), "vllm@0.29": (8192, 1024),
                   "vllm@0.27": (8192, 1024)}
    assert get_engine("vllm@0.33").default_mnbt(sm120) == 8192


def test_a_device_whose_nvml_reports_no_memory_takes_the_small_batch_tier():
    """``get_batch_defaults`` reads ``current_platform.get_device_total_memory()`` inside a ``try``;
    on CUDA with NVML that is ``nvmlDeviceGetMemoryInfo(handle).total`` (``platforms/cuda.py``
    ``NvmlCudaPlatform``, read in 0.11.0, 0.12.0, 0.13.0, 0.19.0, 0.32.0), which raises where NVML
    reports no memory — the GB10, whose nvidia-smi shows "Not Supported" — so ``device_memory = 0``
    and the small tier: 2,048 batched tokens, 256 sequences, as public log 44 (v0.13.0 on a GB10,
    no ``--max-num-batched-tokens`` typed) prints "Chunked prefill is enabled with
    max_num_batched_tokens=2048". v0.9 (before the trait, and the GB10) sizes it by memory; an H100
    is large in every release."""
    gb10, h100 = get_gpu("gb10"), get_gpu("h100-sxm")
    assert gb10.nvml_memory is False and gb10.cuda_total_mib == 124_611
    got = {e: (get_engine(e).default_mnbt(gb10), get_engine(e).default_max_num_seqs(gb10))
           for e in ("vllm@0.9", "vllm@0.11", "vllm@0.13", "vllm@0.19", "vllm@0.32", "vllm@0.33")}
    assert got == {"vllm@0.9": (8192, 1024), "vllm@0.11": (2048, 256), "vllm@0.13": (2048, 256),
                   "vllm@0.19": (2048, 256), "vllm@0.32": (2048, 256), "vllm@0.33": (2048, 256)}
    assert {(get_engine(e).default_mnbt(h100), get_engine(e).default_max_num_seqs(h100))
            for e in ("vllm@0.13", "vllm@0.32")} == {(8192, 1024)}
    log = json.loads(next((Path(__file__).parent / "fixtures" / "vllm_logs").glob("44-*.json")).read_text())
    assert "max_num_batched_tokens=2048" in log["log_excerpt"]
    assert "max_num_batched_tokens" not in log["log_excerpt"].split("non-default args:")[1].split("\n")[0]


@pytest.mark.parametrize(("engine", "pages"), [("vllm@0.13", 1), ("vllm@0.14", 1), ("vllm@0.17", 2),
                                               ("vllm@0.33", 2)])
def test_v0_14_mamba_prefix_rule_turns_it_off_for_gated_deltanet(engine: str, pages: int) -> None:
    """vLLM 0.14.1 ``model_executor/models/config.py`` ``MambaModelConfig.verify_and_update_config``:
    with ``enable_prefix_caching`` on, a model without ``supports_mamba_prefix_caching`` is told
    "Hybrid or mamba-based model detected without support for prefix caching: disabling." and
    ``cache_config.enable_prefix_caching = False`` — Qwen3-Next (GatedDeltaNet) keeps one state page
    per layer, as in 0.13. From 0.15.0 the same hook gives it Mamba cache mode "align": 2 pages.

    The page (tests/test_engines.py test_qwen3_next_recurrent_vllm_block_raise): conv 8,192 × 3 × 2
    + ssm 32 × 128 × 128 × 2 = 1,097,728 B, padded to the attention page 16 · cdiv(1,097,728,
    16 · 2,048) = 544 tokens × 2,048 B = 1,114,112 B (``HybridAttentionMambaModelConfig``'s
    no-prefix-caching branch in 0.14, "align" keeps the same block). 36 state layers × pages ×
    1,114,112 B: 40,108,032 B (1 page) or 80,216,064 B (2)."""
    arch = load_model("qwen3-next-80b-a3b")
    result = kv_cache(kv_plan(arch, 1000, engine=engine,
                              settings=EngineSettings(enable_prefix_caching=True)))
    assert result.block_size == 544
    assert result.layers["recurrent"].reserved_bytes == 36 * pages * 1_114_112
    assert get_engine(engine).mamba_cache_mode(arch, EngineSettings(enable_prefix_caching=True)) == (
        "none" if pages == 1 else "align")


@pytest.mark.parametrize("engine", ["vllm@0.14", "vllm@0.17"])
def test_v0_14_mamba_prefix_rule_keeps_it_for_mamba2_per_block(engine: str) -> None:
    """A ``SupportsMambaPrefixCaching`` model (NemotronH) keeps prefix caching in 0.14.1:
    ``mamba_block_size`` = the attention block (``HybridAttentionMambaModelConfig``: chunk =
    lcm(chunk_size 256, 16) = 256; cdiv(280,576, 1,024) = 274 tokens → 256 · cdiv(274, 256) = 512),
    a state page per block (``MambaSpec.max_memory_usage_bytes`` = cdiv(max_model_len, block_size)
    pages): 280,576 B = conv 3,072 × 3 × 2 + SSM 16 × 64 × 128 × 2 (float16, 0.14.1
    ``NemotronHForCausalLMConfig`` default), padded to 512 × 1,024 = 524,288 B; at 1,000 tokens
    cdiv(1,000, 512) = 2 pages per Mamba layer: 4 × 2 × 524,288 = 4,194,304 B. v0.15–v0.17's "all"
    mode gives the same pages."""
    from tests.test_engines import NEMOTRON_H_TINY

    arch = parse_config(NEMOTRON_H_TINY)
    result = kv_cache(kv_plan(arch, 1000, engine=engine,
                              settings=EngineSettings(enable_prefix_caching=True)))
    assert result.block_size == 512
    assert result.layers["recurrent"].bytes == 4 * 524_288
    assert result.layers["recurrent"].reserved_bytes == 4 * 2 * 524_288
