"""Kept for existing imports: ``ExpertRepack`` and ``round_up`` live in ``kvplan.weights`` (the value
type ``weights_per_gpu`` applies, ``LoadingRules.mxfp4_experts``); vLLM's values come from
``kvplan.engines.vllm.weights.mxfp4_repack``."""

from __future__ import annotations

from kvplan.weights import ExpertRepack, round_up

__all__ = ["ExpertRepack", "round_up"]
