"""What vLLM's ``--kv-cache-dtype auto`` becomes for a checkpoint whose quantization config declares
a KV-cache format (ModelOpt ``kv_cache_quant_algo`` / ``kv_cache_scheme``).

From v0.14.0 ``engine/arg_utils.py`` ``EngineArgs.create_engine_config`` passes
``resolve_kv_cache_dtype_string(self.kv_cache_dtype, model_config)`` (``utils/torch_utils.py``) to
``CacheConfig(cache_dtype=…)``: "auto" with a ModelOpt config naming FP8 KV is ``fp8_e4m3``, so the
pool is sized at one byte per element, not the model dtype (v0.13 keeps "auto").
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

#: ``get_kv_cache_quant_algo_string``'s result when the config's KV format is one the release does
#: not map: "auto" (the model dtype), as vLLM's warning "Falling back to 'auto'" says.
AUTO = "auto"
#: ``utils/torch_utils.py`` ``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP`` (lower-cased ModelOpt name →
#: vLLM cache dtype); a release maps only the names in its ``VllmRelease.kv_quant_auto``.
MODELOPT_KV = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}


def normalized_quant_method(quant: dict[str, Any]) -> str:
    """``transformers_utils/model_arch_config_convertor.py`` ``_normalize_quantization_config``
    (v0.14+; ``config/model.py`` before): a ModelOpt ``hf_quant_config.json`` (``producer.name``
    "modelopt", ``quantization.quant_algo``) gets ``quant_method`` "modelopt" (FP8 variants) or
    "modelopt_fp4" (NVFP4) written into the config before the engine arguments resolve the cache
    dtype; the method is then lower-cased."""
    producer = quant.get("producer")
    inner = quant.get("quantization")
    method = quant.get("quant_method", "")
    if isinstance(producer, dict) and producer.get("name") == "modelopt" and isinstance(inner, dict):
        algo = str(inner.get("quant_algo", "")).upper() if inner.get("quant_algo") is not None else ""
        if algo in {"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO"}:
            method = "modelopt"
        elif algo == "NVFP4":
            method = "modelopt_fp4"
    return str(method).lower() if isinstance(method, str) else ""


def kv_quant_algo_string(quant: dict[str, Any], mapped: tuple[str, ...]) -> str | None:
    """``utils/torch_utils.py`` ``get_kv_cache_quant_algo_string``: for a ``modelopt*`` method, the
    first of ``quantization.kv_cache_scheme``, ``kv_cache_scheme``, ``quantization.kv_cache_quant_algo``,
    ``kv_cache_quant_algo``; a scheme dict is "fp8" when ``dynamic`` is False, 8 bits, float (and
    "nvfp4" for 4-bit float where the release maps nvfp4, v0.20+), a name is looked up lower-cased in
    ``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``; anything else is "auto". None: no KV format declared
    (or not a ModelOpt config)."""
    if not normalized_quant_method(quant).startswith("modelopt"):
        return None
    inner = quant.get("quantization", quant)
    if not isinstance(inner, dict):
        inner = quant
    algo = inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme") \
        or inner.get("kv_cache_quant_algo") or quant.get("kv_cache_quant_algo")
    if isinstance(algo, dict):
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            algo = "fp8"
        elif "nvfp4" in mapped and algo.get("num_bits") == 4 and algo.get("type") == "float":
            algo = "nvfp4"
        else:
            return AUTO
    if isinstance(algo, str):
        name = algo.lower()
        return MODELOPT_KV[name] if name in mapped else AUTO
    return None


@lru_cache(maxsize=256)
def resolve_auto_kv_dtype(quantization: str | None, mapped: tuple[str, ...]) -> str | None:
    """``utils/torch_utils.py`` ``resolve_kv_cache_dtype_string("auto", model_config)`` on the
    model's ``quantization_config`` (``WeightSpec.quantization``, canonical JSON): the cache dtype
    "auto" stands for, or None where it stays the model dtype (no ModelOpt KV format, a format
    the release does not map, or a release without the rule: ``mapped`` empty)."""
    if not mapped or quantization is None:
        return None
    quant = json.loads(quantization)
    if not isinstance(quant, dict):
        return None
    resolved = kv_quant_algo_string(quant, mapped)
    return None if resolved in (None, AUTO) else resolved
