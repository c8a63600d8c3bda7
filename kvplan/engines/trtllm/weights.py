"""TensorRT-LLM's weight-loading rules: what it holds of the stored weights after loading
(``kvplan.weights.LoadingRules``, applied by ``weights_per_gpu``).

Assumed equal to vLLM v0.33's scale rules (``kvplan.engines.vllm.weights``) — the rules kvplan has
applied to every engine so far; not yet checked against TensorRT-LLM's PyTorch backend
(``tensorrt_llm/_torch/modules/linear.py``, ``fused_moe/``), so every number stays as it was. MXFP4
MoE experts: as the release's ``mxfp4_moe_repack`` says (``TrtLlm.mxfp4_moe_repack``: the CUTLASS
backend's 128-element padding up to 1.2.0, checked on log 04's 63.32 GiB; as stored on main).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.weights import DEFAULT_RULES, LoadingRules

if TYPE_CHECKING:
    from kvplan.engines.base import Engine
    from kvplan.presets import GPU

#: TensorRT-LLM's scale rules: assumed to be vLLM v0.33's (see the module docstring).
SCALE_RULES = DEFAULT_RULES


def trtllm_loading_rules(engine: Engine, gpu: GPU | None) -> LoadingRules:
    """What this TensorRT-LLM release holds after loading on ``gpu``: ``SCALE_RULES`` and the
    release's MXFP4 MoE layout (``engine.mxfp4_moe_repack``)."""
    return replace(SCALE_RULES, mxfp4_experts=engine.mxfp4_moe_repack(gpu))
