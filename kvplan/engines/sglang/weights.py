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
#: docstring's MLA copy, WNA16 MoE ``weight_shape`` and MoonViT layout.
#: The MLA copy (``LoadingRules.mla_absorbed_copy``) is read but not yet switched on: it moves the
#: weights ``tests/fixtures/sglang`` stubbed into SGLang's configurator (DeepSeek-V2-Lite, +113,246,208
#: B on an H100), which must be regenerated with it first.
SCALE_RULES = replace(DEFAULT_RULES, wna16_expert_shape_bytes=8,
                      replicated_tower_mlp=frozenset({"moonvit"}))


def sglang_loading_rules(engine: Engine, gpu: GPU | None) -> LoadingRules:
    """What this SGLang release holds after loading on ``gpu``: ``SCALE_RULES``, on an AMD part
    the Triton WNA16 MoE's ``g_idx``, and the release's MXFP4
    MoE layout (``engine.mxfp4_moe_repack``)."""
    hip = gpu is not None and not gpu.custom and gpu.vendor == "AMD"
    rules = replace(SCALE_RULES, wna16_expert_g_idx=True) if hip else SCALE_RULES
    return replace(rules, mxfp4_experts=engine.mxfp4_moe_repack(gpu))
