"""SGLang's weight-loading rules: what it holds of the stored weights after loading
(``kvplan.weights.LoadingRules``, applied by ``weights_per_gpu``).

Assumed equal to vLLM v0.33's scale rules (``kvplan.engines.vllm.weights``) — the rules kvplan has
applied to every engine so far; not yet checked against SGLang 0.5.23
(``python/sglang/srt/layers/quantization/``), so every number stays as it was. MXFP4 MoE experts: as
the release's ``mxfp4_moe_repack`` says (None, as stored, for every modelled SGLang release).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.weights import DEFAULT_RULES, LoadingRules

if TYPE_CHECKING:
    from kvplan.engines.base import Engine
    from kvplan.presets import GPU

#: SGLang's scale rules: assumed to be vLLM v0.33's (see the module docstring).
SCALE_RULES = DEFAULT_RULES


def sglang_loading_rules(engine: Engine, gpu: GPU | None) -> LoadingRules:
    """What this SGLang release holds after loading on ``gpu``: ``SCALE_RULES`` and the
    release's MXFP4 MoE layout (``engine.mxfp4_moe_repack``)."""
    return replace(SCALE_RULES, mxfp4_experts=engine.mxfp4_moe_repack(gpu))
