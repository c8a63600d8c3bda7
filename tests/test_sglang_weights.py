"""SGLang's weight-loading rules (``kvplan.engines.sglang.weights``) and the multimodal factor of its
default ``mem_fraction_static`` (``engine.sglang_vlm_factor``), hand derived from SGLang's source
(``pip download sglang==0.5.9 --no-deps``: ``compressed_tensors_wNa16_moe.py``,
``deepseek_common/deepseek_weight_loader.py``, ``models/kimi_k25.py``; ``server_args.py``
``adjust_mem_fraction_for_vlm``) on moonshotai/Kimi-K2.5 (61 layers, 60 MoE layers of 384 experts,
hidden 7,168, moe_intermediate 2,048, WNA16 group 32; MLA 64 heads, nope 128 + v 128, latent 512;
MoonViT 27 blocks of width 1,152, MLP 4,304, 2×2 patch merger into 7,168) at TP 8."""

from __future__ import annotations

from dataclasses import replace

from kvplan.engines import get_engine
from kvplan.engines.settings import EngineSettings
from kvplan.engines.sglang.engine import SGLANG_RELEASES, sglang_vlm_factor
from kvplan.presets import get_gpu, load_model
from kvplan.weights import HELD_PARTS, allocator_excess, rope_cache_bytes, weights_per_gpu

RECORDS = {r.key: r for r in SGLANG_RELEASES}
KIMI = load_model("moonshotai/Kimi-K2.5")
MOE_LAYERS, EXPERTS, HIDDEN, INTER_PER_RANK = 60, 384, 7168, 2048 // 8


def parts(engine: str, gpu: str) -> dict[str, int]:
    rules = get_engine(engine).loading_rules(get_gpu(gpu))
    return weights_per_gpu(KIMI, None, tp=8, rules=rules).stages[0]


def test_kimi_k25_on_rocm_holds_g_idx_mla_copies_and_a_replicated_vit_mlp():
    """Against kvplan's default (vLLM v0.33) rules, per GPU:
    * experts: the fp32 ``(E, 2)`` weight_shape, 8 B per expert matrix instead of 16 (−60 × 384 ×
      2 × 8 = −368,640 B), plus the Triton method's int32 g_idx + sort indices, 2 × 4 B per input
      column: w13 384 × 7,168 × 8 + w2 384 × 256 × 8 = 22,806,528 B a layer, × 60 = 1,368,391,680;
    * attention: ``w_kc``/``w_vc``, a bf16 copy of the kv_b_proj shard, 64/8 heads × 256 × 512 × 2
      = 2,097,152 B a layer, × 61 = 127,926,272;
    * vision: fc0/fc1 per block (4,304 × 1,153 + 1,152 × 4,304 + 1,152 bias) and the projector
      (4,608 × 4,609 + 7,168 × 4,608) whole, not an eighth."""
    base = weights_per_gpu(KIMI, None, tp=8).stages[0]
    rocm = parts("sglang@0.5.5", "mi355x")
    g_idx = MOE_LAYERS * (EXPERTS * HIDDEN * 8 + EXPERTS * INTER_PER_RANK * 8)
    assert g_idx == 1_368_391_680
    assert rocm["experts"] - base["experts"] == g_idx - MOE_LAYERS * EXPERTS * 2 * 8
    assert rocm["experts"] == 72_713_871_360
    assert rocm["attention"] - base["attention"] == 61 * 8 * 256 * 512 * 2 == 127_926_272
    without_copy = weights_per_gpu(KIMI, None, tp=8, rules=replace(
        get_engine("sglang@0.5.5").loading_rules(get_gpu("mi355x")), mla_absorbed_copy=None)).stages[0]
    assert without_copy["attention"] == base["attention"]
    mlp = 27 * 2 * (4304 * 1153 + 1152 * 4304 + 1152)
    projector = 2 * (4608 * 4609 + 7168 * 4608)
    # each was an eighth of itself before (column/row split of a 2-byte matrix, bias rows kept whole)
    assert rocm["vision"] == 691_301_888
    assert rocm["vision"] - base["vision"] < mlp + projector
    assert rocm["vision"] - base["vision"] > (mlp + projector) * 7 // 8 - 27 * 2 * 1152
    # 72.99 GiB of tensors; the log's "mem usage" 73.58 GB (78,242,563,584 B = 72.87 GiB before the
    # MLA copy was switched on: + 127,926,272 B). Besides the tensors (HELD_PARTS, added with the
    # free-memory rules of test_what_sglang_holds_at_load_end): the yarn cos/sin cache, 4,096 × 64
    # positions × 64 rotary dims × 4 B, and the allocator's segments → 73.36 GiB (logged 73.58)
    assert sum(b for p, b in rocm.items() if p not in HELD_PARTS) == 78_242_563_584 + 127_926_272 \
        == 78_370_489_856
    assert rocm["rope_cache"] == 4096 * 64 * 64 * 4 == 67_108_864
    assert rocm["allocator"] == 331_430_400


def test_on_cuda_the_marlin_method_empties_g_idx():
    """On an H100 the WNA16 MoE method is Marlin's, whose ``process_weights_after_loading``
    replaces g_idx and the sort indices with ``(E, 0)`` tensors: only the weight_shape change. The
    MLA copy is the same bf16 ``w_kc``/``w_vc`` (Kimi's ``kv_b_proj`` is unquantized: copied in the
    model's dtype, ``weights.mla_absorbed_bytes``)."""
    base = weights_per_gpu(KIMI, None, tp=8).stages[0]
    cuda = parts("sglang@0.5.5", "h100-sxm")
    assert cuda["experts"] - base["experts"] == -MOE_LAYERS * EXPERTS * 2 * 8
    assert cuda["attention"] - base["attention"] == 61 * 8 * 256 * 512 * 2


def test_the_vlm_factor_of_the_default_fraction():
    """``adjust_mem_fraction_for_vlm``: 27 × 1,152² / (24 × 1,024²) = 1.423828125, factor
    0.95 × (1 − 0.0423828125) = 0.909736328125; 0.5.5's reserved_mem default on an MI355X at TP 8
    is 0.908, so 0.908 × 0.909736328125 = 0.8260405859375, the fraction the logs print
    (sglang_logs 04/05). 0.4.8.post1 has no such rule, 0.4.9 has."""
    assert sglang_vlm_factor(KIMI, RECORDS["0.5.5"]) == 0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    assert abs(sglang_vlm_factor(KIMI, RECORDS["0.5.5"]) - 0.909736328125) < 1e-15
    assert sglang_vlm_factor(KIMI, RECORDS["0.4.8"]) == 1.0
    assert sglang_vlm_factor(KIMI, RECORDS["0.4.9"]) == sglang_vlm_factor(KIMI, RECORDS["0.5.5"])
    assert sglang_vlm_factor(load_model("llama-3.1-8b"), RECORDS["0.5.5"]) == 1.0
    fraction = get_engine("sglang@0.5.5").default_fraction(get_gpu("mi355x"), EngineSettings(tp=8), KIMI)
    assert fraction == 0.908 * sglang_vlm_factor(KIMI, RECORDS["0.5.5"])
    assert abs(fraction - 0.8260405859375) < 1e-15


def test_the_mla_copy_of_an_fp8_kv_b_proj_by_release_and_device():
    """``models/deepseek_v2.py`` ``post_load_weights`` keeps ``kv_b_proj`` and adds ``w_kc``/``w_vc``,
    its shard again: DeepSeek-V3 (FP8, 128×128 blocks) at TP 8 holds 128 / 8 = 16 heads × (128 nope +
    128 v) × 512 latent elements a layer, 61 layers. From 0.4.6 CUDA dequantizes them to bf16
    (``block_quant_dequant``): 16 × 256 × 512 × 2 B × 61 = 255,852,544 B; 0.4.3.post4–0.4.5.post3 on
    CUDA, and every release on ROCm, requantize per tensor to FP8 (``block_quant_to_tensor_quant``):
    half that, 127,926,272 B (``SglangRelease.mla_copy_bf16_on_cuda``)."""
    v3 = load_model("deepseek-v3")
    base = weights_per_gpu(v3, None, tp=8).stages[0]["attention"]

    def extra(engine: str, gpu: str) -> int:
        rules = get_engine(engine).loading_rules(get_gpu(gpu))
        return weights_per_gpu(v3, None, tp=8, rules=rules).stages[0]["attention"] - base

    assert extra("sglang@0.5.23", "h100-sxm") == extra("sglang@0.4.6", "h100-sxm") == 61 * 16 * 256 * 512 * 2
    assert extra("sglang@0.4.6", "h100-sxm") == 255_852_544
    assert extra("sglang@0.4.5", "h100-sxm") == extra("sglang@0.4", "h100-sxm") == 127_926_272
    assert extra("sglang@0.5.23", "mi300x") == extra("sglang@0.4", "mi300x") == 127_926_272
    assert [r.key for r in SGLANG_RELEASES if not r.mla_copy_bf16_on_cuda] == ["0.4", "0.4.5"]


def test_what_sglang_holds_at_load_end():
    """SGLang's weight figure ("Load weight end … mem usage", ``model_runner.py`` ``load_model``:
    ``get_available_gpu_memory`` before − after, ``torch.cuda.mem_get_info`` after ``empty_cache``)
    is the device memory loading took, not the parameter bytes. Hand derived for QwQ-32B (the
    qwen2.5-32b layout: 64 layers, hidden 5,120, 40 + 2 × 8 heads of 128, MLP 27,648, vocab
    152,064, 131,072 positions) at TP 4 on CUDA, SGLang 0.4.3 (sglang_logs 01):

    * the RoPE cos/sin cache, fp32 (``rotary_embedding.py`` ``RotaryEmbedding.__init__`` keeps it
      fp32 on CUDA), one shared by the 64 layers (``get_rope``'s ``_ROPE_DICT``): 131,072 × 128 × 4
      = 67,108,864 B (64 MiB: its own segment, no rounding);
    * PyTorch's caching allocator (``CUDACachingAllocator.cpp``): each parameter ≥ 10 MiB gets its
      own segment rounded up to 2 MiB — per layer qkv_proj (1,280 + 2 × 256) × 5,120 × 2 =
      17.5 MiB → 18 (+524,288), o_proj 5,120 × 1,280 × 2 = 12.5 MiB → 14 (+1,572,864), gate_up
      13,824 × 5,120 × 2 = 135 MiB → 136 (+1,048,576), down 67.5 → 68 MiB (+524,288): 3,670,016 ×
      64 = 234,881,024; embed_tokens and lm_head 38,016 × 5,120 × 2 = 371.25 MiB → 372
      (+786,432 each); the small ones (qkv bias 3,584 B and two norms of 10,240 B a layer, the final
      norm) 1,550,336 B in one 2 MiB segment (+546,816): 237,000,704 B.

    15.26 GiB of parameters + 304,109,568 B = 15.54 GiB, the log's "mem usage=15.54 GB" (it was
    15.26, −0.28). Llama-3.1-8B at TP 1 (sglang_logs 02): every large tensor is a whole number of
    2 MiB; 65 norms of 8,192 B in one small segment (+1,564,672) and the llama3 cache 131,072 × 128
    × 4: 14.96 → 15.02 GiB against the logged 15.11 (−0.15 → −0.09)."""
    sglang = get_engine("sglang@0.4").loading_rules(get_gpu("l4"))
    assert sglang.allocator_segments and sglang.rope_cache == "fp32"
    qwq = weights_per_gpu(load_model("qwen2.5-32b"), None, tp=4, rules=sglang).stages[0]
    assert qwq["rope_cache"] == 131_072 * 128 * 4 == 67_108_864
    assert qwq["allocator"] == 3_670_016 * 64 + 2 * 786_432 + 546_816 == 237_000_704
    plain = weights_per_gpu(load_model("qwen2.5-32b"), None, tp=4).stages[0]
    assert plain["allocator"] == plain["rope_cache"] == 0  # vLLM's figure is torch's allocated bytes
    assert sum(qwq.values()) - sum(plain.values()) == 304_109_568
    assert round(sum(qwq.values()) / (1 << 30), 2) == 15.54
    llama = weights_per_gpu(load_model("llama-3.1-8b"), None, tp=1, rules=sglang).stages[0]
    assert (llama["allocator"], llama["rope_cache"]) == (2 * MIB - 65 * 8192, 67_108_864)


MIB = 1 << 20


def test_the_caching_allocator_rounding():
    """``allocator_excess``: ≥ 10 MiB its own 2 MiB-rounded segment; ≤ 1 MiB carved from 2 MiB
    segments; between, from 20 MiB ones; every block rounded to 512 B; a request served best-fit from
    a split remainder first, layer by layer."""
    assert allocator_excess([(10 * MIB, 3)]) == 0
    assert allocator_excess([(10 * MIB + 1, 1)]) == 2 * MIB - 1
    assert allocator_excess([(100, 1)]) == 2 * MIB - 100          # one small segment
    assert allocator_excess([(1 * MIB, 3)]) == 4 * MIB - 3 * MIB  # two small segments
    assert allocator_excess([(3 * MIB, 7)]) == 40 * MIB - 21 * MIB  # 21 MiB: two 20 MiB segments
    assert allocator_excess([(513, 1), (0, 5)]) == 2 * MIB - 513
    # layer 0: qkv 12 MiB (own segment), o 8 MiB (a 20 MiB segment, 12 MiB left); layer 1: qkv in
    # that 12 MiB remainder, o in a new 20 MiB segment: 52 MiB held for 40
    assert allocator_excess([(12 * MIB, 2), (8 * MIB, 2)]) == 12 * MIB


def test_the_rope_cache_per_rotary_set():
    """``rope_cache_bytes``: positions by rope type × ``rotary_dim`` × 4 B; the partial rotary
    factor applies; learned positions and ALiBi hold none."""
    from kvplan.config_import import parse_config
    base = {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
            "num_hidden_layers": 2, "intermediate_size": 2048, "vocab_size": 1000,
            "max_position_embeddings": 4096}
    assert rope_cache_bytes(parse_config(base)) == [4096 * 128 * 4]
    assert rope_cache_bytes(parse_config({**base, "partial_rotary_factor": 0.25})) == [4096 * 32 * 4]
    linear = {**base, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert rope_cache_bytes(parse_config(linear)) == [8192 * 128 * 4]
    yarn = {**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 1024}}
    assert rope_cache_bytes(parse_config(yarn)) == [4096 * 128 * 4]
    longrope = {**base, "rope_scaling": {"rope_type": "longrope", "factor": 4.0,
                                         "original_max_position_embeddings": 1024}}
    # short (1,024) and long (4,096) caches in the model's dtype plus their concatenation
    assert rope_cache_bytes(parse_config(longrope)) == [1024 * 256, 4096 * 256, 5120 * 256]
    # Gemma 3 in SGLang: one unscaled fp32 cache per attention type (sliding, global), whatever the
    # config's linear factor 8 (gemma3_causal.py Gemma3Attention): 2 × 131,072 × 256 × 4
    gemma = load_model("gemma-3-12b")
    assert rope_cache_bytes(gemma) == [131_072 * 8 * 256 * 4]
    assert rope_cache_bytes(gemma, unscaled_per_layer_type=True) == [131_072 * 256 * 4] * 2
    sglang = get_engine("sglang").loading_rules(None)
    assert weights_per_gpu(gemma, None, rules=sglang).stages[0]["rope_cache"] == 268_435_456
    opt = {"model_type": "opt", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 2,
           "ffn_dim": 3072, "vocab_size": 1000, "max_position_embeddings": 2048}
    assert rope_cache_bytes(parse_config(opt)) == []
