"""SGLang's weight-loading rules: what it holds of the stored weights after loading
(``kvplan.weights.LoadingRules``, applied by ``weights_per_gpu``).

The per-module scale rules are assumed equal to vLLM v0.33's (``kvplan.engines.vllm.weights``),
not yet checked against SGLang's dense-linear methods. What SGLang holds beyond them, read in
SGLang 0.5.5, 0.5.9 and 0.5.23 (``pip download sglang==X --no-deps``):

* MLA (DeepSeek V2/V3, Kimi K2/K2.5 text models): ``post_load_weights`` keeps ``kv_b_proj`` and
  adds ``w_kc``/``w_vc``, a copy of its shard (``models/deepseek_v2.py``; 0.5.9
  ``deepseek_common/deepseek_weight_loader.py``) — ``weights.mla_absorbed_bytes`` per element.
* compressed-tensors WNA16 MoE (``compressed_tensors_wNa16_moe.py``, 0.5.9;
  ``compressed_tensors_moe.py`` before): ``w13/w2_weight_shape`` are fp32 ``(E, 2)`` (8 B per expert
  matrix, not the int64 pair of a linear module); on ROCm ``CompressedTensorsWNA16TritonMoE``
  (the one WNA16 MoE method that runs on HIP; Marlin is CUDA-only) keeps the int32 ``g_idx`` and
  ``g_idx_sort_indices`` of every expert matrix (``(E, hidden)`` for ``w13``, ``(E, intermediate
  per rank)`` for ``w2``), which Marlin's ``process_weights_after_loading`` empties.
* Kimi-K2.5's MoonViT (``models/kimi_k25.py``): the blocks' ``MLP2`` is ``nn.Linear`` and the
  projector ``ReplicatedLinear``, so both are whole on every rank; attention is TP-split.

* What "Load weight end … mem usage" holds beyond the tensors (``model_runner.py`` ``load_model``:
  free memory before − after, ``mem_get_info`` after ``empty_cache``; 0.4.3 and 0.5.23 alike): each
  parameter in PyTorch's caching-allocator segments (``LoadingRules.allocator_segments``) and the
  fp32 RoPE cos/sin caches (``rope_cache`` ``fp32``; Gemma 3 builds one unscaled cache per attention
  type, ``models/gemma3_causal.py`` ``Gemma3Attention``).

MXFP4 MoE experts: as the release's ``mxfp4_moe_repack`` says (None, as stored, for every
modelled SGLang release).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.weights import DEFAULT_RULES, LoadingRules

if TYPE_CHECKING:
    from kvplan.engines.base import Engine
    from kvplan.presets import GPU

#: SGLang's rules with no accelerator named (CUDA): vLLM v0.33's scale rules plus the module
#: docstring's WNA16 MoE ``weight_shape`` and MoonViT layout; ``sglang_loading_rules`` adds the MLA
#: copy (``LoadingRules.mla_absorbed_copy``, CUDA or HIP). Switched on 2026-12-02 with
#: ``tests/fixtures/sglang`` regenerated (``tools/sglang_truth/generate.py``, SGLang 0.5.23): its two
#: DeepSeek-V2-Lite default-fraction cases took +113,246,208 B of weights per H100.
SCALE_RULES = replace(DEFAULT_RULES, wna16_expert_shape_bytes=8,
                      replicated_tower_mlp=frozenset({"moonvit"}),
                      allocator_segments=True, rope_cache="fp32",
                      rope_unscaled_per_layer_type=frozenset({"gemma3_text"}))


def sglang_loading_rules(engine: Engine, gpu: GPU | None) -> LoadingRules:
    """What this SGLang release holds after loading on ``gpu``: ``SCALE_RULES``, on an AMD part
    the Triton WNA16 MoE's ``g_idx``, the MLA ``w_kc``/``w_vc`` copy of ``kv_b_proj`` as the device
    makes it (``weights.mla_absorbed_bytes``: FP8 128×128 blocks dequantized to bf16 on CUDA from
    0.4.6, ``SglangRelease.mla_copy_bf16_on_cuda``; requantized to FP8 on HIP and before), and the
    release's MXFP4 MoE layout (``engine.mxfp4_moe_repack``)."""
    hip = gpu is not None and not gpu.custom and gpu.vendor == "AMD"
    rules = replace(SCALE_RULES, wna16_expert_g_idx=True) if hip else SCALE_RULES
    # before 0.4.6 CUDA requantized the copy per tensor to FP8 as HIP does (SglangRelease)
    bf16_copy = not hip and getattr(engine.record, "mla_copy_bf16_on_cuda", True)
    return replace(rules, mxfp4_experts=engine.mxfp4_moe_repack(gpu),
                   mla_absorbed_copy="cuda" if bf16_copy else "hip")
