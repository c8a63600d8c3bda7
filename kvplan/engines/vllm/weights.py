"""vLLM's weight-loading rules: what a release holds of the stored weights after loading
(``kvplan.weights.LoadingRules``, applied by ``weights_per_gpu``).

* Scales (``LoadingRules``' fields; the same in every modelled release, v0.8–v0.33, as kvplan has
  always applied them — read in v0.33): FP8 per-tensor ``weight_scale`` requantized to one per
  fused module (``model_executor/layers/quantization/utils/fp8_utils.py``
  ``process_fp8_weight_tensor_strategy`` → ``utils/w8a8_utils.py`` ``requantize_with_max_scale``;
  experts: ``process_fp8_weight_tensor_strategy_moe``), static ``input_scale`` collapsed to its max
  (``fp8.py`` ``Fp8LinearMethod.process_weights_after_loading``, ``modelopt.py``,
  ``compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py``), INT8 W8A8 per-tensor scales of a
  fused module expanded per row and an ``azp_adj`` per row for asymmetric activations
  (``kernels/linear/scaled_mm/cutlass.py`` ``CutlassInt8ScaledMMLinearKernel.process_weights_after_loading``),
  WNA16's ``weight_shape`` kept (``compressed_tensors_wNa16.py`` ``CompressedTensorsWNA16.create_weights``).
* MXFP4 MoE experts: the backend a release picks on a GPU and how it pads them (``mxfp4_repack``;
  the per-release values are the engine's ``Vllm.mxfp4_moe_repack``).
* NVFP4 MoE experts of a non-gated activation: their per-rank intermediate padded on Blackwell
  (``nvfp4_ungated_inter``; per release ``VllmRelease.nvfp4_ungated_inter``).
* RoPE's cos/sin caches: "Model loading took" (``v1/worker/gpu_model_runner.py`` ``load_model``:
  ``DeviceMemoryProfiler``'s allocated bytes around model construction and loading) holds each
  rotary embedding's non-persistent ``cos_sin_cache`` buffer, built in the model dtype
  (``rotary_embedding/base.py`` ``RotaryEmbeddingBase.__init__``: ``cache.to(dtype)``; v0.6.6
  ``rotary_embedding.py`` ``RotaryEmbedding.__init__`` the same), one per distinct ``get_rope``
  set (``_ROPE_DICT``): ``LoadingRules.rope_cache`` ``model`` in every release, the LongRoPE and
  MRoPE layouts per release (``VllmRelease.rope_longrope_concat_only``, ``rope_mrope_positions``;
  ``kvplan.weights.rope_cache_bytes``); a ``proportional`` set (Gemma 4) rotates the whole head
  (0.19.0 ``gemma4_rope.py`` ``Gemma4RotaryEmbedding``; the only releases that load Gemma 4).
  Held in every vLLM plan (tests/test_vllm_rope_cache.py; it moves each plan's weights by
  1–384 MiB per GPU toward its log's "Model loading took").
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.weights import DEFAULT_RULES, ExpertRepack, LoadingRules

if TYPE_CHECKING:
    from kvplan.engines.base import Engine
    from kvplan.presets import GPU

#: vLLM v0.33's scale rules (``kvplan.weights.LoadingRules``' defaults, cited in its docstring).
VLLM_SCALE_RULES = DEFAULT_RULES


def mxfp4_repack(gpu: GPU | None, fi_inter: int, triton: bool, keeps_scales: bool,
                 source: str) -> ExpertRepack | None:
    """The MXFP4 MoE backend vLLM picks by compute capability and how it holds the experts
    (``mxfp4_round_up_hidden_size_and_intermediate_size``, ``convert_to_mxfp4_moe_kernel_format``;
    ``_swizzle_mxfp4`` with triton_kernels' Hopper layouts: values padded to 16 rows × 64 columns,
    scales to 256 rows with 8 warps). SM 10.x → FlashInfer TRT-LLM (hidden 256, intermediate
    ``fi_inter``, fp32 biases); SM 9.0 with ``triton`` → OAI Triton (intermediate 64, swizzled
    scale copy, fp32 biases); any other CUDA GPU → Marlin (hidden 256, intermediate 128). No
    capability (AMD, TPU, custom): None."""
    major = gpu.sm_major if gpu is not None else 0
    if not major:
        return None
    if major == 10:
        return ExpertRepack("FlashInfer TRT-LLM", hidden=256, inter=fi_inter, fp32_bias=True,
                            source=source)
    if major == 9 and triton:
        return ExpertRepack("Triton", inter=64, value_rows=16, value_cols=64, scale_rows=256,
                            keeps_scales=keeps_scales, fp32_bias=True, source=source)
    return ExpertRepack("Marlin", hidden=256, inter=128, source=source)


def nvfp4_ungated_inter(gpu: GPU | None, multiple: int) -> int:
    """The release's padding of non-gated NVFP4 experts (``VllmRelease.nvfp4_ungated_inter``) where
    it applies: on a CUDA GPU of SM ≥ 10.0, where vLLM runs NVFP4 MoE on CUTLASS / FlashInfer
    (``utils/nvfp4_moe_support.py`` ``detect_nvfp4_moe_support``: ``cutlass_fp4_supported``, SM
    10.0+); older GPUs take Marlin (``prepare_moe_fp4_layer_for_marlin``, not modelled: as stored),
    no capability (AMD, custom) → 1."""
    major = gpu.sm_major if gpu is not None else 0
    return multiple if major >= 10 else 1


def vllm_loading_rules(engine: Engine, gpu: GPU | None, ungated_inter: int = 1,
                       longrope_concat_only: bool = True, mrope_positions: int = 4) -> LoadingRules:
    """What this vLLM release holds after loading on ``gpu``: the scale rules above, the
    release's MXFP4 MoE layout (``engine.mxfp4_moe_repack``), its padding of non-gated NVFP4
    experts (``ungated_inter``: the record's ``nvfp4_ungated_inter``, applied by
    ``nvfp4_ungated_inter``) and the RoPE caches in the model dtype with the record's LongRoPE and
    MRoPE layouts (defaults: v0.11+)."""
    rules = replace(VLLM_SCALE_RULES, mxfp4_experts=engine.mxfp4_moe_repack(gpu),
                    nvfp4_ungated_inter=nvfp4_ungated_inter(gpu, ungated_inter))
    return replace(rules, rope_cache="model", rope_longrope_concat_only=longrope_concat_only,
                   rope_mrope_positions=mrope_positions, rope_proportional_full_head=True)
