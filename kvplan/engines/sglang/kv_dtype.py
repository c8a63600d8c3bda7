"""What SGLang 0.5.23's ``--kv-cache-dtype auto`` becomes for a checkpoint whose quantization config
declares FP8 KV: ``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype`` takes
``float8_e4m3fn`` ("fp8_e4m3") when the loaded model's ``quant_config.kv_cache_quant_algo`` is a
string equal to "FP8" (any case), else the model dtype — NVFP4 KV is never taken from the
checkpoint (``--kv-cache-dtype nvfp4`` must be given).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any


def _scheme_fp8(scheme: object) -> bool:
    return isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8


def _method(quant: dict[str, Any]) -> str:
    """The quantization class SGLang picks (``configs/model_config.py`` ``_parse_quant_hf_config`` →
    ``_parse_modelopt_quant_config`` for a config without ``quant_method`` or with "modelopt"):
    ``modelopt_fp4`` for a ``quant_algo`` containing FP4/NVFP4, ``modelopt_fp8`` for FP8,
    ``modelopt_mixed`` / ``w4afp8`` for MIXED_PRECISION, ``mxfp8``; else the declared method."""
    declared = quant.get("quant_method")
    if declared is not None and declared != "modelopt":
        return str(declared).lower()
    outer = quant.get("quantization", quant)
    inner = outer.get("quantization") if isinstance(outer, dict) else None
    section = inner if isinstance(inner, dict) else outer if isinstance(outer, dict) else {}
    algo = section.get("quant_algo")
    if not isinstance(algo, str) or not algo:
        return str(declared or "")
    if algo == "MIXED_PRECISION":
        return "modelopt_mixed"
    if "FP4" in algo or "NVFP4" in algo:
        return "modelopt_fp4"
    return {"FP8": "modelopt_fp8", "MXFP8": "mxfp8"}.get(algo, str(declared or ""))


def kv_cache_quant_algo(quant: dict[str, Any]) -> object:
    """``kv_cache_quant_algo`` as the quantization class's ``from_config`` sets it
    (``layers/quantization/modelopt_quant.py`` ``ModelOptFp8Config`` / ``ModelOptFp4Config`` /
    ``ModelOptMixedPrecisionConfig``, ``fp8.py`` ``Fp8Config``; ``configs/model_config.py``
    ``_parse_modelopt_quant_config`` for MXFP8). Flat configs (``quant_algo`` at the top) read a
    ``kv_cache_scheme`` dict (8-bit float → "FP8", whatever ``dynamic`` says) or the
    ``kv_cache_quant_algo`` key; nested ``hf_quant_config.json`` reads ``quantization.kv_cache_quant_algo``.
    None for other methods (their KV stays the model dtype)."""
    method = _method(quant)
    flat = quant.get("quant_algo") is not None
    section = quant.get("quantization")
    nested: dict[str, Any] = section if isinstance(section, dict) else {}
    scheme = quant.get("kv_cache_scheme")
    if method == "fp8":
        return quant.get("kv_cache_quant_algo")
    if method == "modelopt_fp8":
        if flat:
            return ("FP8" if _scheme_fp8(scheme) else None) if isinstance(scheme, dict) \
                else quant.get("kv_cache_quant_algo")
        return nested.get("kv_cache_quant_algo")
    if method in ("modelopt_fp4", "modelopt_mixed"):
        if flat:
            if isinstance(scheme, dict):
                return "FP8" if _scheme_fp8(scheme) else "auto"
            if method == "modelopt_fp4" and isinstance(scheme, str):
                return "FP8" if scheme.strip().upper() in ("FP8", "FLOAT8") else "other"
            return quant.get("kv_cache_quant_algo") or ("auto" if method == "modelopt_fp4" else None)
        return nested.get("kv_cache_quant_algo") or ("auto" if method == "modelopt_fp4" else None)
    if method == "mxfp8":
        section = nested or quant
        algo = section.get("kv_cache_quant_algo")
        return algo if algo is not None else ("FP8" if _scheme_fp8(section.get("kv_cache_scheme")) else None)
    return None


@lru_cache(maxsize=256)
def resolve_auto_kv_dtype(quantization: str | None) -> str | None:
    """``configure_kv_cache_dtype`` with ``--kv-cache-dtype auto``: "fp8_e4m3" when the model's
    ``kv_cache_quant_algo`` is "FP8", else None (the model dtype)."""
    if quantization is None:
        return None
    quant = json.loads(quantization)
    if not isinstance(quant, dict):
        return None
    algo = kv_cache_quant_algo(quant)
    return "fp8_e4m3" if isinstance(algo, str) and algo.upper() == "FP8" else None
