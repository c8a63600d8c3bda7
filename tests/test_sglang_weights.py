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
from kvplan.weights import weights_per_gpu

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
    # 72.99 GiB; the log's "mem usage" 73.58 GB (78,242,563,584 B = 72.87 GiB before the MLA copy
    # was switched on: + 127,926,272 B)
    assert sum(rocm.values()) == 78_242_563_584 + 127_926_272 == 78_370_489_856


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
