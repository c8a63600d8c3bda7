"""HF transformers' weight-loading rules: what it holds of the stored weights after loading
(``kvplan.weights.LoadingRules``, applied by ``weights_per_gpu``).

Assumed equal to vLLM v0.33's scale rules (``kvplan.engines.vllm.weights``) — the rules kvplan has
applied to every engine so far; not yet checked against transformers' quantizers
(``transformers/quantizers/``), so every number stays as it was. MXFP4 MoE experts: as the release's
``mxfp4_moe_repack`` says (None, as stored, for every modelled HF transformers release).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvplan.weights import DEFAULT_RULES, LoadingRules

if TYPE_CHECKING:
    from kvplan.engines.base import Engine
    from kvplan.presets import GPU

#: HF transformers' scale rules: assumed to be vLLM v0.33's (see the module docstring).
SCALE_RULES = DEFAULT_RULES


def hf_loading_rules(engine: Engine, gpu: GPU | None) -> LoadingRules:
    """What this HF transformers release holds after loading on ``gpu``: ``SCALE_RULES`` and the
    release's MXFP4 MoE layout (``engine.mxfp4_moe_repack``)."""
    return replace(SCALE_RULES, mxfp4_experts=engine.mxfp4_moe_repack(gpu))
