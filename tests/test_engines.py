"""Each cache rule under each engine, against values derived by hand from the engine's source.

Sources are the files quoted in ``/work/shared/reference/engines.md`` (vLLM v0.33, transformers
5.24, SGLang 0.5.23) and checked in ``/tmp/research/engine_rules.md``. bf16 = 2 B unless stated.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.config_import import parse_config
from kvplan.dtypes import get_dtype
from kvplan.engines import (
    EngineSettings,
    default_max_num_batched_tokens,
    engine_view,
    get_engine,
    kv_heads_per_rank,
    pp_partition,
    recurrent_state_bytes,
)
from kvplan.engines.hf import BytePool
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import load_model
from kvplan.sizing import kv_cache
from tests.plans import kv_plan

GIB = 1 << 30


def _rule(view, kind):
    (rule,) = [r for r in view.rules if r.kind == kind]
    return rule


def _t(n: int) -> np.ndarray:
    return np.asarray([n], dtype=np.int64)


# --- transformers (hf / hf-legacy / hf-static) -------------------------------------------------


def test_hf_full_dynamic_layer():
    """cache_utils.py DynamicLayer keeps every token (torch.cat growth).

    Llama-3.1-8B: 2 × 8 kv heads × 128 × 2 B = 4,096 B/token/layer; 32 × 1,000 × 4,096 = 131,072,000.
    """
    result = kv_cache(kv_plan(load_model("llama-3.1-8b"), 1000, engine="hf"))
    assert result.layers["full"].bytes_per_token_per_layer == 4096
    assert result.kv_bytes == 131_072_000


def test_hf_sliding_keeps_w_minus_1_gemma2_9b():
    """cache_utils.py DynamicSlidingWindowLayer: ``self.keys = full[:, :, -self.sliding_window + 1:]``.

    Gemma-2-9B: 21 sliding (W=4096) + 21 full layers, 2 × 8 × 256 × 2 B = 8,192 B/token/layer.
    T=8,192: 21 × 4,095 × 8,192 + 21 × 8,192 × 8,192 = 2,113,757,184 B.
    T=3,000 (< W−1): every layer keeps 3,000 → 42 × 3,000 × 8,192 = 1,032,192,000 B.
    """
    arch = load_model("gemma-2-9b")
    long = kv_cache(kv_plan(arch, 8192, engine="hf"))
    assert long.layers["sliding"].tokens_held_per_layer == 4095
    assert long.layers["sliding"].bytes == 21 * 4095 * 8192
    assert long.kv_bytes == 2_113_757_184
    assert kv_cache(kv_plan(arch, 3000, engine="hf")).kv_bytes == 1_032_192_000


def test_hf_chunked_keeps_chunk_minus_1_llama4_scout():
    """cache_utils.py get_layer_types_and_kwargs maps chunked_attention to DynamicSlidingWindowLayer
    with ``sliding_window = attention_chunk_size`` → chunk−1 = 8,191 tokens kept.

    Scout: 36 chunked + 12 NoPE full layers, 2 × 8 × 128 × 2 = 4,096 B/token/layer.
    T=32,768: 36 × 8,191 × 4,096 + 12 × 32,768 × 4,096 = 2,818,424,832 B.
    """
    result = kv_cache(kv_plan(load_model("llama-4-scout"), 32768, engine="hf"))
    assert result.layers["chunked"].tokens_held_per_layer == 8191
    assert result.kv_bytes == 2_818_424_832


def test_hf_mla_latent_vs_legacy_expanded_deepseek_v3():
    """transformers ≥5.15 modeling_deepseek_v3.py ``cache.update(kv_nope, k_rot)``: 512 + 64 elements
    → 1,152 B/token/layer bf16. ≤5.14 caches expanded K [H, 128+64] and V [H, 128]:
    128 × (192 + 128) × 2 = 81,920 B/token/layer. 61 layers × 1,000 tokens.
    """
    arch = load_model("deepseek-v3")
    new = kv_cache(kv_plan(arch, 1000, engine="hf"))
    old = kv_cache(kv_plan(arch, 1000, engine="hf-legacy"))
    assert new.layers["mla"].bytes_per_token_per_layer == 1152
    assert old.layers["mla"].bytes_per_token_per_layer == 81_920
    assert new.kv_bytes == 61 * 1000 * 1152 == 70_272_000
    assert old.kv_bytes == 61 * 1000 * 81_920 == 4_997_120_000


def test_falcon40b_hf_broadcast_heads_vs_vllm():
    """modeling_falcon.py: ``num_kv_heads = self.num_heads if self.new_decoder_architecture``
    → HF caches 128 heads: 2 × 128 × 64 × 2 = 32,768 B/token/layer. vLLM falcon.py keeps the 8
    KV heads: 2 × 8 × 64 × 2 = 2,048. Falcon-7B (multi_query) caches 1 head in both: 256 B.
    """
    f40 = load_model("falcon-40b")
    hf = kv_cache(kv_plan(f40, 1024, engine="hf"))
    vllm = kv_cache(kv_plan(f40, 1024, engine="vllm"))
    assert hf.layers["full"].bytes_per_token_per_layer == 32_768
    assert vllm.layers["full"].bytes_per_token_per_layer == 2048
    assert hf.kv_bytes == 60 * 1024 * 32_768
    assert vllm.kv_bytes == 60 * 1024 * 2048
    f7 = load_model("falcon-7b")
    assert kv_cache(kv_plan(f7, 1024, engine="hf")).kv_bytes_per_token == 32 * 256
    assert kv_cache(kv_plan(f7, 1024, engine="vllm")).kv_bytes_per_token == 32 * 256


def test_qwen3_next_recurrent_hf():
    """cache_utils.py LinearAttentionLayer: conv [conv_dim, kernel] (full kernel) in bf16, recurrent
    state in fp32 (fla kernels). conv_dim = 2·16·128 + 32·128 = 8,192.
    Per layer: 8,192 × 4 × 2 + 32 × 128 × 128 × 4 = 65,536 + 2,097,152 = 2,162,688 B.
    T=1,000: 36 × 2,162,688 + 12 full × 1,000 × (2 × 2 × 256 × 2 = 2,048) = 102,432,768 B.
    """
    arch = load_model("qwen3-next-80b-a3b")
    rec = next(layer for layer in arch.layers if layer.kind == "recurrent")
    assert recurrent_state_bytes(rec, "hf", get_dtype("bf16"), 1) == 2_162_688
    result = kv_cache(kv_plan(arch, 1000, engine="hf"))
    assert result.layers["recurrent"].bytes == 36 * 2_162_688
    assert result.kv_bytes == 36 * 2_162_688 + 12 * 1000 * 2048 == 102_432_768


def test_qwen3_next_recurrent_vllm_block_raise():
    """vLLM mamba_utils.py gated_delta_net_state_shape: conv (8192, kernel−1=3), ssm (32, 128, 128),
    both bf16 ("auto"): 8,192 × 3 × 2 + 32 × 128 × 128 × 2 = 49,152 + 1,048,576 = 1,097,728 B.
    Platform._align_hybrid_block_size: attn page/token = 2 × 2 × 256 × 2 = 2,048;
    16 × cdiv(1,097,728, 16 × 2,048) = 16 × 34 = 544 tokens; Mamba page padded to 544 × 2,048 =
    1,114,112 B; "align" mode (prefix caching on, GDN lacks SupportsMambaPrefixCaching) → 2 pages.
    """
    arch = load_model("qwen3-next-80b-a3b")
    rec = next(layer for layer in arch.layers if layer.kind == "recurrent")
    assert recurrent_state_bytes(rec, "vllm", get_dtype("bf16"), 1) == 1_097_728
    view = engine_view(arch, "vllm")
    assert view.block_size == 544
    state = _rule(view, "recurrent")
    assert state.state_bytes == 1_114_112
    assert int(state.reserved_bytes(_t(32768))[0]) == 36 * 2 * 1_114_112
    off = engine_view(arch, "vllm", settings=EngineSettings(enable_prefix_caching=False))
    assert int(_rule(off, "recurrent").reserved_bytes(_t(32768))[0]) == 36 * 1 * 1_114_112
    # attention held in 544-token blocks: cdiv(1000, 544) = 2 blocks = 1,088 tokens
    assert int(_rule(view, "full").held_bytes(_t(1000))[0]) == 12 * 1088 * 2048


def test_qwen3_next_recurrent_sglang_fp32_ssm():
    """SGLang (engines.md C.6): conv (kernel−1) in the model dtype, SSM state fp32 by default:
    8,192 × 3 × 2 + 32 × 128 × 128 × 4 = 49,152 + 2,097,152 = 2,146,304 B per layer.
    """
    arch = load_model("qwen3-next-80b-a3b")
    rec = next(layer for layer in arch.layers if layer.kind == "recurrent")
    assert recurrent_state_bytes(rec, "sglang", get_dtype("bf16"), 1) == 2_146_304


def test_jamba_vllm_mamba1_state_and_block():
    """vLLM mamba_utils.py mamba1_state_shape: conv (d_conv−1=3, d_inner=8,192), ssm (8,192, 16),
    bf16: 3 × 8,192 × 2 + 8,192 × 16 × 2 = 49,152 + 262,144 = 311,296 B per Mamba layer.
    Attention page/token: 2 × 8 × 128 × 2 = 4,096 → block 16 × cdiv(311,296, 65,536) = 16 × 5 = 80.
    """
    arch = load_model("jamba-1.5-mini")
    rec = next(layer for layer in arch.layers if layer.kind == "recurrent")
    assert recurrent_state_bytes(rec, "vllm", get_dtype("bf16"), 1) == 311_296
    assert engine_view(arch, "vllm").block_size == 80
    # SGLang: SSM state fp32 → 49,152 + 131,072 × 4 = 573,440
    assert recurrent_state_bytes(rec, "sglang", get_dtype("bf16"), 1) == 573_440


def test_hf_static_sliding_min_w_max_cache_len():
    """cache_utils.py StaticSlidingWindowLayer: ``effective_max_cache_len = min(sliding_window,
    max_cache_len)``; StaticLayer allocates max_cache_len whatever the length.

    Gemma-2-9B (W=4,096; 8,192 B/token/layer), 21 + 21 layers:
    max_cache_len 2,048: 42 × 2,048 × 8,192 = 704,643,072 B (same at T=10 and T=2,000).
    max_cache_len 8,192: 21 × 4,096 × 8,192 + 21 × 8,192 × 8,192 = 2,113,929,216 B.
    """
    arch = load_model("gemma-2-9b")
    small = EngineSettings(max_cache_len=2048)
    for tokens in (10, 2000):
        result = kv_cache(kv_plan(arch, tokens, engine="hf-static", settings=small))
        assert result.layers["sliding"].tokens_held_per_layer == 2048
        assert result.kv_bytes == 704_643_072
    big = kv_cache(kv_plan(arch, 100, engine="hf-static", settings=EngineSettings(max_cache_len=8192)))
    assert big.layers["sliding"].tokens_held_per_layer == 4096
    assert big.layers["full"].tokens_held_per_layer == 8192
    assert big.kv_bytes == 2_113_929_216
    # no max_cache_len: kvplan sizes the static cache to the request length
    assert kv_cache(kv_plan(arch, 5000, engine="hf-static")).kv_bytes == 21 * (4096 + 5000) * 8192


def test_hf_quantized_cache_refuses_sliding_models():
    """cache_utils.py QuantizedCache: only supported for models with only full attention layers.
    Llama-3.1-8B int4 (g64, fp16 scale + zero): per 128-dim vector 64 + 2 × 4 = 72 B;
    32 layers × 8 heads × 2 × 72 = 36,864 B/token.
    """
    with pytest.raises(KVPlanError) as err:
        engine_view(load_model("gemma-2-9b"), "hf", "int4")
    assert err.value.code == "engine.dtype"
    result = kv_cache(kv_plan(load_model("llama-3.1-8b"), 100, kv_dtype="int4", engine="hf"))
    assert result.kv_bytes_per_token == 36_864


# --- vLLM ---------------------------------------------------------------------------------------


def test_vllm_sliding_held_blocks_gemma2_9b():
    """single_type_kv_cache_manager.py SlidingWindowManager: skipped = max(0, T − W + 1); whole
    skipped blocks are freed. W=4,096, bs=16:
    T=10,000: cdiv(10000,16)=625 − (5,905 // 16 = 369) = 256 blocks = 4,096 tokens.
    T=4,110: 257 − (15 // 16 = 0) = 257 blocks; T=4,111: 257 − (16 // 16 = 1) = 256 blocks.
    """
    view = engine_view(load_model("gemma-2-9b"), "vllm")
    sliding = _rule(view, "sliding")
    assert sliding.held_blocks(np.asarray([10000, 4110, 4111])).tolist() == [256, 257, 256]
    result = kv_cache(kv_plan(load_model("gemma-2-9b"), 10000, engine="vllm"))
    assert result.layers["sliding"].bytes == 21 * 4096 * 8192
    assert result.layers["full"].bytes == 21 * 10000 * 8192  # 625 blocks × 16 = 10,000


def test_vllm_sliding_reservation_gemma3_27b():
    """kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes:
    cdiv(min(W − 1 + IFT, L), bs) + 1 with IFT = max_concurrent_batches × max_num_batched_tokens.
    Gemma-3-27B, L=32,768, mnbt 8,192: async (2 batches) → cdiv(min(1023 + 16,384, 32,768), 16) + 1
    = 1,088 + 1 = 1,089 blocks; sync → cdiv(9,215, 16) + 1 = 577. Full: cdiv(32,768, 16) = 2,048.
    Page = 16 × 16 heads × 256 × 2 = 131,072 B. The request's reservation counts whole block ids
    (kv_cache_utils.py groups: 6 sliding groups + 1 full, 10 layer slots each):
    (6 × 1,089 + 2,048) × 10 × 131,072 B — 8 padding layers more than 52 × 1,089 + 10 × 2,048.
    """
    arch = load_model("gemma-3-27b")
    view = engine_view(arch, "vllm", settings=EngineSettings(max_num_batched_tokens=8192))
    assert view.in_flight_tokens == 16_384
    sliding, full = _rule(view, "sliding"), _rule(view, "full")
    assert (sliding.layers, full.layers) == (52, 10)
    assert sliding.page_bytes == full.page_bytes == 131_072
    assert int(sliding.reserved_blocks(_t(32768))[0]) == 1089
    assert int(full.reserved_blocks(_t(32768))[0]) == 2048
    sync = engine_view(arch, "vllm", settings=EngineSettings(max_num_batched_tokens=8192,
                                                            async_scheduling=False))
    assert int(_rule(sync, "sliding").reserved_blocks(_t(32768))[0]) == 577
    result = kv_cache(kv_plan(arch, 32768, engine="vllm",
                              settings=EngineSettings(max_num_batched_tokens=8192)))
    assert result.reserved_bytes == (6 * 1089 + 2048) * 10 * 131_072
    assert result.reserved_bytes - (52 * 1089 + 10 * 2048) * 131_072 == 8 * 1089 * 131_072


def test_vllm_mistral_v01_all_sliding_reservation():
    """vLLM: Mistral v0.1 has no layer_types → every layer SlidingWindowSpec(4096).
    Default mnbt (unknown device, serve) = 2,048 → IFT 4,096: cdiv(min(4095 + 4096, 32768), 16) + 1
    = 512 + 1 = 513 blocks per layer; page 16 × 8 × 256 × 2 = 65,536 B.
    """
    view = engine_view(load_model("mistral-7b-v0.1"), "vllm")
    sliding = _rule(view, "sliding")
    assert sliding.layers == 32
    assert int(sliding.reserved_bytes(_t(32768))[0]) == 32 * 513 * 65_536


@pytest.mark.parametrize(("hybrid", "chunked_held", "chunked_reserved"),
                         [(True, 226, 1536), (False, 1250, 2048), (None, 226, 1536)])
def test_vllm_chunked_hybrid_manager(hybrid, chunked_held, chunked_reserved):
    """vllm/config/vllm.py keeps the hybrid KV manager on for models with attention_chunk_size
    unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0, and v0.33's vllm/envs.py
    defaults it to 1 (default None → on; kvplan said off before). With it off (and full NoPE layers
    beside the chunked ones) ChunkedLocalAttentionSpec becomes FullAttentionSpec.
    On: held = cdiv(T,16) − ((T // 8192)·8192) // 16 = 1,250 − 1,024 = 226 blocks at T=20,000;
    reserved = cdiv(min(8192 + 2 × 8192, 32768), 16) = 1,536 (no +1). Off: 1,250 held, 2,048 reserved.
    """
    arch = load_model("llama-4-scout")
    view = engine_view(arch, "vllm", settings=EngineSettings(max_num_batched_tokens=8192,
                                                            hybrid_manager=hybrid))
    assert view.hybrid_manager is (hybrid is not False)
    local = [r for r in view.rules if r.layers == 36]
    assert len(local) == 1
    assert local[0].kind == ("full" if hybrid is False else "chunked")
    assert int(local[0].held_blocks(_t(20000))[0]) == chunked_held
    assert int(local[0].reserved_blocks(_t(32768))[0]) == chunked_reserved


def test_vllm_chunk_boundary_frees_chunk():
    """ChunkedLocalAttentionManager docstring: skipped(T) = (T // C)·C, so at T = 2·8,192 every
    block of the previous chunks is freed: cdiv(16384,16) − 16384//16 = 0 blocks."""
    view = engine_view(load_model("llama-4-scout"), "vllm", settings=EngineSettings(hybrid_manager=True))
    chunked = _rule(view, "chunked")
    assert chunked.held_blocks(np.asarray([16383, 16384, 16385])).tolist() == [512, 0, 1]


@pytest.mark.parametrize(("tp", "per_token"), [(1, 327_680), (8, 40_960), (16, 40_960)])
def test_vllm_tp_gqa_heads(tp, per_token):
    """llama.py: ``num_kv_heads = max(1, total_num_kv_heads // tp_size)``. Llama-3.1-70B, 80 layers,
    8 KV heads: tp=1 80 × 2 × 8 × 128 × 2 = 327,680; tp=8 and tp=16 (replicated) 1 head → 40,960."""
    result = kv_cache(kv_plan(load_model("llama-3.1-70b"), 1024, engine="vllm",
                              settings=EngineSettings(tp=tp)))
    assert result.kv_bytes_per_token == per_token


def test_tp_not_dividing_heads_is_an_error():
    with pytest.raises(KVPlanError) as err:
        kv_cache(kv_plan(load_model("llama-3.1-70b"), 1024, engine="vllm", settings=EngineSettings(tp=3)))
    assert err.value.code == "parallel.tp_heads"
    assert kv_heads_per_rank(8, 16) == 1
    assert kv_heads_per_rank(1, 4) == 1


def test_vllm_mla_replicated_across_tp():
    """vLLM get_num_kv_heads: ``if self.use_mla: return 1`` — each rank stores the whole latent:
    DeepSeek-V3 61 × 576 × 2 = 70,272 B/token at tp=1 and tp=8."""
    arch = load_model("deepseek-v3")
    for tp in (1, 8):
        result = kv_cache(kv_plan(arch, 1024, engine="vllm", settings=EngineSettings(tp=tp)))
        assert result.kv_bytes_per_token == 70_272


def test_pp_partition_matches_get_pp_indices():
    """vllm/distributed/utils.py get_pp_indices: remainder to the stages before the last."""
    assert pp_partition(61, 4) == [15, 15, 16, 15]
    assert pp_partition(22, 4) == [5, 6, 6, 5]
    assert pp_partition(3, 2) == [2, 1]
    with pytest.raises(KVPlanError):
        pp_partition(3, 4)


def test_default_max_num_batched_tokens():
    """arg_utils.py get_batch_defaults: ≥160 GiB 16,384; ≥70 GiB non-A100 16,384 (LLM) / 8,192 (serve);
    else 8,192 / 2,048."""
    assert default_max_num_batched_tokens(192 * GIB, "B200") == 16384
    assert default_max_num_batched_tokens(80 * GIB, "NVIDIA H100 80GB HBM3") == 8192
    assert default_max_num_batched_tokens(80 * GIB, "NVIDIA H100 80GB HBM3", "llm") == 16384
    assert default_max_num_batched_tokens(80 * GIB, "NVIDIA A100-SXM4-80GB") == 2048
    assert default_max_num_batched_tokens(None) == 2048


# --- SGLang -------------------------------------------------------------------------------------


def test_sglang_page_rounding():
    """SGLang per-request rounding cdiv(T, page_size)·page_size. Llama-3.1-8B (4,096 B/token/layer),
    T=1,000: page 64 → 1,024 tokens → 32 × 1,024 × 4,096 = 134,217,728; page 1 → 131,072,000."""
    arch = load_model("llama-3.1-8b")
    paged = kv_cache(kv_plan(arch, 1000, engine="sglang", settings=EngineSettings(page_size=64)))
    assert paged.kv_bytes == 134_217_728
    assert kv_cache(kv_plan(arch, 1000, engine="sglang")).kv_bytes == 131_072_000


def test_sglang_gemma2_full_length_every_layer():
    """SGLang forces disable_hybrid_swa_memory for Gemma2/3 → every layer holds all tokens:
    Gemma-2-9B T=8,192: 42 × 8,192 × 8,192 = 2,818,572,288 B (HF: 2,113,757,184)."""
    result = kv_cache(kv_plan(load_model("gemma-2-9b"), 8192, engine="sglang"))
    assert result.kv_bytes == 2_818_572_288
    assert "sliding" not in result.layers


def test_sglang_gpt_oss_swa_cap():
    """SGLang hybrid SWA pool (GptOssForCausalLM): evicts once seqlen−1−W ≥ evicted + 128, so a
    request holds at most W + 128 = 256 tokens on SWA layers. gpt-oss-120b: 2 × 8 × 64 × 2 = 2,048
    B/token/layer. T=10,000: 18 × 256 × 2,048 + 18 × 10,000 × 2,048 = 378,077,184 B.
    page 64, T=100: SWA cdiv(100,64)·64 = 128 tokens."""
    arch = load_model("gpt-oss-120b")
    result = kv_cache(kv_plan(arch, 10000, engine="sglang"))
    assert result.layers["sliding"].tokens_held_per_layer == 256
    assert result.kv_bytes == 378_077_184
    paged = kv_cache(kv_plan(arch, 100, engine="sglang", settings=EngineSettings(page_size=64)))
    assert paged.layers["sliding"].tokens_held_per_layer == 128


def test_sglang_mla_latent():
    """pool_configurator.py: ``kv_cache_dim = kv_lora_rank + qk_rope_head_dim`` → 576 × 2 = 1,152 B,
    not divided by TP."""
    result = kv_cache(kv_plan(load_model("deepseek-v3"), 1000, engine="sglang",
                              settings=EngineSettings(tp=8)))
    assert result.kv_bytes == 61 * 1000 * 1152


def test_unknown_engine_and_dtype():
    arch = load_model("llama-3.1-8b")
    with pytest.raises(KVPlanError) as err:
        kv_cache(kv_plan(arch, 10, engine="tgi"))
    assert err.value.code == "unknown.engine"
    with pytest.raises(KVPlanError) as err:
        kv_cache(kv_plan(arch, 10, kv_dtype="fp7"))
    assert err.value.code == "unknown.dtype"


NEMOTRON_H_TINY = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 8,
    "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
    "hybrid_override_pattern": "M-M*M-M*", "mamba_num_heads": 16, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 256,
    "vocab_size": 1000, "intermediate_size": 2048,
}


def test_vllm_mamba2_cache_modes_block_and_state_pages():
    """NemotronH-style hybrid (``hybrid_override_pattern`` M = Mamba-2, * = attention, - = MLP).

    MambaStateShapeCalculator: conv (d_inner + 2·groups·state) × (kernel − 1) = 3,072 × 3 × 2 B =
    18,432; SSM 16 heads × 64 × 128 × 4 B = 524,288 (float32: ``models/config.py``
    ``NemotronHForCausalLMConfig`` default for a config without ``mamba_ssm_cache_dtype``, v0.20+;
    tests/test_vllm_state_pages.py) → 542,720 B per layer, 1,024 B per attention token.

    * v0.33 (``VllmRelease.mamba_prefix`` "align", ``MambaModelConfig``; no "all" mode): block
      16 · cdiv(542,720, 16 · 1,024) = 544 tokens, page 557,056 B, 2 state pages per request.
    * v0.27 ("all" for ``SupportsMambaPrefixCaching`` models with prefix caching on): a multiple of
      lcm(chunk 256, 16) covering cdiv(542,720, 1,024) = 530 tokens → 768; page 786,432 B;
      cdiv(L, 768) state pages: at L = 1,000, 2 per Mamba layer (v0.27 ``models/config.py``).
    * v0.11 (prefix caching turned off for hybrids → "none"; no SSM dtype hook: bf16, 280,576 B):
      16 · cdiv(280,576, 16,384) = 288 tokens, page 294,912 B, one state page.
    """
    arch = parse_config(NEMOTRON_H_TINY)
    assert arch.kind_counts() == {"recurrent": 4, "none": 2, "full": 2}
    result = kv_cache(kv_plan(arch, 1000, engine="vllm@0.33"))
    assert result.block_size == 544
    assert result.layers["recurrent"].bytes == 4 * 557_056
    assert result.layers["recurrent"].reserved_bytes == 4 * 2 * 557_056
    assert result.layers["full"].bytes == 2 * 2 * 544 * 1024
    all_mode = kv_cache(kv_plan(arch, 1000, engine="vllm@0.27"))
    assert all_mode.block_size == 768
    assert all_mode.layers["recurrent"].bytes == 4 * 786_432
    assert all_mode.layers["recurrent"].reserved_bytes == 4 * 2 * 786_432
    assert all_mode.layers["full"].bytes == 2 * 2 * 768 * 1024
    old = kv_cache(kv_plan(arch, 1000, engine="vllm@0.11"))
    assert (old.block_size, old.layers["recurrent"].bytes) == (288, 4 * 294_912)
    assert old.layers["recurrent"].reserved_bytes == 4 * 294_912
    fp32 = parse_config({**NEMOTRON_H_TINY, "mamba_ssm_cache_dtype": "float32"})
    view = engine_view(fp32, "sglang")
    state = next(r for r in view.rules if r.kind == "recurrent")
    assert state.state_bytes == 18_432 + 16 * 64 * 128 * 4


def test_kv_shared_layers_hold_nothing():
    """``num_kv_shared_layers``: the last N layers reuse earlier KV (HF DummyLayer, vLLM KV sharing)."""
    config = {"model_type": "llama", "num_hidden_layers": 10, "hidden_size": 512,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 100,
              "num_kv_shared_layers": 4}
    arch = parse_config(config)
    assert arch.kind_counts() == {"full": 6, "none": 4}
    assert kv_cache(kv_plan(arch, 100)).kv_bytes == 6 * 100 * 2 * 2 * 64 * 2


def test_dsa_indexer_and_fp8_ds_mla():
    """DeepSeek-V3.2 (DSA) on vLLM: fp8_ds_mla latent = 512 fp8 + 4 fp32 scales + 64 bf16 rope =
    656 B, plus the indexer keys 128 + 128 // 128 × 4 = 132 B → 788 B per token and layer
    (kv_cache_interface.py state_content_bytes; models/deepseek_v2.py indexer head_dim). The
    config is DeepSeek-V3's with the V3.2 indexer keys (index_head_dim 128, index_topk 2048)."""
    config = {**load_model_config("deepseek-v3"), "model_type": "deepseek_v32",
              "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048}
    arch = parse_config(config)
    assert kv_cache(kv_plan(arch, 64, kv_dtype="fp8_ds_mla", engine="vllm")).kv_bytes == 61 * 64 * 788
    assert kv_cache(kv_plan(arch, 64, kv_dtype="bf16", engine="vllm")).kv_bytes == 61 * 64 * (1152 + 132)
    with pytest.raises(KVPlanError) as err:
        kv_cache(kv_plan(load_model("llama-3.1-8b"), 64, kv_dtype="fp8_ds_mla", engine="vllm"))
    assert err.value.code == "engine.dtype"


def test_dsa_indexer_is_its_own_spec_grouped_with_the_latent_on_vllm():
    """The V3.2 indexer keys are a spec of their own in every engine's view (vLLM and SGLang: 128 +
    128 // 128 × 4 = 132 B; transformers ``DynamicIndexedLayer``: 128 bf16 = 256 B), and vLLM still
    puts them with the latent in one ``UniformTypeKVCacheSpecs`` group: one group, a 64-token block
    costs 61 × 64 × (656 + 132) B, a request cdiv(L, 64) blocks."""
    from kvplan.arch import Kind
    from kvplan.engines.kinds import PagedIndexerRule

    config = {**load_model_config("deepseek-v3"), "model_type": "deepseek_v32",
              "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048}
    arch = parse_config(config)
    view = engine_view(arch, "vllm", "fp8_ds_mla")
    assert [(r.kind, r.layers, r.bytes_per_token) for r in view.rules] == [
        (Kind.MLA, 61, 656), (Kind.DSA_INDEXER, 61, 132)]
    assert isinstance(view.rules[1], PagedIndexerRule)
    pool = get_engine("vllm").pool_layout(arch, "fp8_ds_mla", EngineSettings(), 64)
    assert pool.n_groups == 1 and pool.padding_layers == 0
    assert int(pool.stages_bytes_per_block([61])[0]) == 61 * 64 * 788
    assert int(pool.blocks_per_request(1000)) == 16
    sglang = engine_view(arch, "sglang")
    assert [(r.kind, r.bytes_per_token) for r in sglang.rules] == [(Kind.MLA, 1152), (Kind.DSA_INDEXER, 132)]
    hf = engine_view(arch, "hf")
    assert [(r.kind, r.bytes_per_token) for r in hf.rules] == [(Kind.MLA, 1152), (Kind.DSA_INDEXER, 256)]


def test_static_cache_bytes_have_one_slot_rule():
    """``StaticCache`` bytes of a request of ``L`` (``BytePool``) are the view pre-allocated at
    ``max_cache_len = L`` (``StaticRule.for_layer``): both read ``static_slots`` — Gemma-2-9B's
    sliding layers hold min(4,096, L) slots."""
    arch = load_model("gemma-2-9b")
    engine = get_engine("hf-static")
    gpu_free = EngineSettings()
    for length in (100, 4096, 10_000):
        settings = engine.resolve_settings(gpu_free, length)
        view = engine.view(arch, "bf16", settings)
        pool = BytePool(view, 1 << 40, static=True)
        assert int(pool.per_request_bytes(np.asarray([length]))[0]) \
            == int(view.held_bytes(np.asarray([length]))[0])
    (sliding,) = [r for r in view.rules if r.kind.windowed]
    assert sliding.slots == 4096


def test_vllm_num_blocks_is_one_formula():
    """``VllmPagedPool`` and ``max_requests_for`` count blocks with ``vllm_num_blocks``: the smallest
    stage's ``max(budget, 0) // bytes per block``, stages without cached layers skipped."""
    from kvplan.engines.vllm.pool import vllm_num_blocks

    per_block = np.asarray([100, 0, 30])
    assert vllm_num_blocks(np.asarray([1000, 5, 600]), per_block) == 10
    assert vllm_num_blocks(np.asarray([[1000, 5, 600], [-7, 0, 0]]), per_block).tolist() == [10, 0]


def load_model_config(preset: str) -> dict:
    from kvplan.presets import model_presets

    return dict(model_presets()[preset].config)


def test_kv_cli_tp_is_per_rank(capsys):
    """``kv --tp 8`` on Llama-3.1-70B (8 KV heads): one head per rank → 80 × 2 × 128 × 2 B per token."""
    from kvplan.cli import main

    assert main(["kv", "--model", "llama-3.1-70b", "--tokens", "1024", "--engine", "vllm",
                 "--tp", "8", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["kv_bytes"] == 80 * 1024 * 2 * 128 * 2


def test_hf_tensor_parallel_shards_the_heads_it_caches():
    """transformers' tp_plan shards k/v projections colwise, so each rank caches its share of the
    heads: Falcon-40B broadcasts K/V to 128 heads before caching → 128 / 4 = 32 heads per rank at
    tp 4 (60 × 32 × 64 × 2 × 2 B per token); MLA stays replicated."""
    falcon = kv_cache(kv_plan(load_model("falcon-40b"), 100, engine="hf", settings=EngineSettings(tp=4)))
    assert falcon.kv_bytes == 100 * 60 * 32 * 64 * 2 * 2
    v3 = kv_cache(kv_plan(load_model("deepseek-v3"), 100, engine="hf", settings=EngineSettings(tp=8)))
    assert v3.kv_bytes == 100 * 61 * 1152


def test_hf_quantized_cache_refuses_linear_attention_models_everywhere():
    """transformers ``QuantizedCache`` "is only supported for models with only full attention
    layers" (cache_utils.py): Qwen3-Next's 36 linear-attention layers make it refuse int4, and the
    engine and the serving view now agree (before, the engine sized it and the view refused it)."""
    from kvplan.serving import quantized_cache

    arch = load_model("qwen3-next-80b-a3b")
    with pytest.raises(KVPlanError) as engine_err:
        kv_cache(kv_plan(arch, 100, kv_dtype="int4", engine="hf"))
    with pytest.raises(KVPlanError) as view_err:
        quantized_cache(arch, np.array([100]))
    assert engine_err.value.code == view_err.value.code == "engine.dtype"


def test_vllm_all_sliding_model_keeps_its_window_with_the_hybrid_manager_off():
    """v0.33 ``kv_cache_planning.py`` ``_promote_local_kv_cache_specs`` returns early when every
    layer has the same spec: Mistral-7B v0.1 (32 × SlidingWindowSpec(4096)) keeps its window with
    the hybrid manager off, so a request reserves cdiv(min(4095 + 2 × 2048, 32768), 16) + 1 = 513
    blocks, not cdiv(32768, 16) = 2,048 (kvplan promoted it to full attention before)."""
    view = engine_view(load_model("mistral-7b-v0.1"), "vllm",
                       settings=EngineSettings(hybrid_manager=False))
    (rule,) = view.rules
    assert rule.kind == "sliding" and rule.window == 4096
    assert int(rule.reserved_blocks(_t(32768))[0]) == 513
    assert view.notes == ()


def test_vllm_and_sglang_downcast_float32_configs_with_kv_auto():
    """vLLM ``config/model.py`` ``_resolve_auto_dtype``: a float32 config runs in bf16 (SM ≥ 8.0), so
    the KV cache is bf16: Llama-3.1-8B as float32 keeps 32 × 2 × 8 × 128 × 2 = 131,072 B per token
    (kvplan used 4 B elements before: 262,144). SGLang ``_get_and_verify_dtype``: fp16 for non-Gemma
    models (same 2 B). Weights follow: 8,030,261,248 × 2 B on vLLM."""
    import json as _json
    from pathlib import Path

    from kvplan.capacity import FitQuery, fit
    from kvplan.presets import get_gpu

    cfg = _json.loads((Path(__file__).parent / "fixtures" / "configs" / "llama.json").read_text())
    cfg["torch_dtype"] = "float32"
    arch = parse_config(cfg)
    assert arch.model_dtype == "fp32"
    vllm = kv_cache(kv_plan(arch, 1024, kv_dtype="auto", engine="vllm"))
    sglang = kv_cache(kv_plan(arch, 1024, kv_dtype="auto", engine="sglang"))
    assert (vllm.kv_dtype, sglang.kv_dtype) == ("bf16", "fp16")
    assert vllm.kv_bytes_per_token == sglang.kv_bytes_per_token == 131_072
    result = fit(make_plan(arch, get_gpu("h100-sxm"), FitQuery(tokens=4096, kv_dtype="auto")))
    assert (result.kv_dtype, result.weight_dtype) == ("bf16", "bf16")
    assert result.weights_total_bytes == arch.params_total * 2
    assert kv_cache(kv_plan(arch, 1024, kv_dtype="auto", engine="hf")).kv_bytes_per_token == 262_144


@pytest.mark.parametrize(("async_scheduling", "reserved"), [(True, 1 + -(-(1023 + 3 * 8192) // 16)),
                                                            (False, 1 + -(-(1023 + 2 * 8192) // 16))])
def test_vllm_in_flight_tokens_scale_with_pipeline_stages(async_scheduling, reserved):
    """``max_in_flight_tokens = max_concurrent_batches × max_num_batched_tokens`` where
    ``max_concurrent_batches`` is pp + 1 with async scheduling and pp without (kvplan used 1
    without async before). Gemma-3-27B sliding layers (W = 1,024) at pp = 2, mnbt 8,192, L = 32,768:
    async cdiv(1,023 + 24,576, 16) + 1 = 1,601; sync cdiv(1,023 + 16,384, 16) + 1 = 1,089."""
    view = engine_view(load_model("gemma-3-27b"), "vllm", settings=EngineSettings(
        pp=2, max_num_batched_tokens=8192, async_scheduling=async_scheduling))
    sliding = _rule(view, "sliding")
    assert int(sliding.reserved_blocks(_t(32768))[0]) == reserved == (1601 if async_scheduling else 1089)


def _falcon_h1():
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent / "fixtures/vllm_truth/configs/falcon-h1-0.5b.json"
    return parse_config({k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items()
                         if not k.startswith("_")})


@pytest.mark.parametrize(("tp", "state"), [(1, 797_184), (2, 399_360)])
def test_falcon_h1_sglang_attention_and_mamba_on_every_layer(tp: int, state: int) -> None:
    """SGLang 0.5.23 ``configs/falcon_h1.py``: ``full_attention_layer_ids`` and ``linear_layer_ids``
    are both ``range(num_hidden_layers)`` — 36 attention layers in the token pool, 36 Mamba-2 states
    per slot. ``mamba2_cache_params`` → ``configs/mamba_utils.py`` ``Mamba2StateShape.create``: the
    one group replicated to the TP size (``extra_groups_for_head_shards``), conv (inner + 2 × groups
    × state) / tp × (kernel − 1) in bf16, the SSM state float32 (``mamba2_state_dtype``' default):
    TP 1: 1,792 × 3 × 2 + 24 × 64 × 128 × 4 = 10,752 + 786,432 = 797,184 B; TP 2: (1,536 + 2 × 2 ×
    128) / 2 = 1,024 × 3 × 2 + 12 × 64 × 128 × 4 = 6,144 + 393,216 = 399,360 B. Attention: 2 KV
    heads / tp × 64 × 2 × 2 B per token and layer."""
    view = engine_view(_falcon_h1(), "sglang", settings=EngineSettings(tp=tp))
    assert _rule(view, "recurrent").state_bytes == state
    assert _rule(view, "full").token_bytes == 36 * (2 // tp) * 64 * 2 * 2


def test_falcon_h1_pipeline_stages_split_decoder_layers() -> None:
    """vLLM ``get_pp_indices`` splits the 36 decoder layers, PP 5 → 7, 7, 7, 8, 7 (the remainder to the
    stage before the last); each keeps its attention and its Mamba-2 mixer, so the stages hold 14,
    14, 14, 16, 14 of the 72 cache entries (not ``pp_partition(72, 5)`` = 14, 14, 15, 15, 14)."""
    from kvplan.parallel import layer_partition

    arch = _falcon_h1()
    assert (arch.n_layers, arch.decoder_layers, arch.parallel_mixers) == (72, 36, True)
    assert pp_partition(36, 5) == [7, 7, 7, 8, 7]
    assert layer_partition(arch, 5) == [14, 14, 14, 16, 14] != pp_partition(72, 5)
    assert get_engine("vllm").largest_stage(arch, 5) == (42, 58)
    counts = arch.layer_counts(42, 58)
    assert sorted(counts.values()) == [8, 8]
