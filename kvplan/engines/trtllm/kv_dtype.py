"""What TensorRT-LLM's KV dtype ``auto`` (``KvCacheConfig.dtype``) becomes for a checkpoint that
declares KV quantization. ``llmapi/llm_args.py``
``TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype`` leaves the checkpoint's
``quant_config.kv_cache_quant_algo`` alone for "auto", and
``_torch/pyexecutor/resource_manager.py`` ``get_cache_size_per_token`` sizes the cache from it:
FP8 → 1 byte per element, NVFP4 → ``ceil(x / 2) + ceil(x / 16)``, anything else quantized fails
its assert "Quantized kv cache is not expected" (INT8).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from kvplan.errors import KVPlanError

#: ``tensorrt_llm/quantization/modelopt_config.py`` (main, 2edf354d) ``_KV_SCHEME_DICT_MAP`` /
#: ``_KV_SCHEME_STRING_ALGOS``: a flat ModelOpt ``kv_cache_scheme`` → the legacy algo name.
_SCHEME_DICT: dict[tuple[object, object], str] = {("float", 8): "FP8", ("float", 4): "NVFP4",
                                                  ("int", 8): "INT8"}
_SCHEME_NAMES = {"FP8", "NVFP4", "INT8"}
#: The cache dtype each algo gives (``get_cache_size_per_token``).
_KV_DTYPE = {"FP8": "fp8_e4m3", "NVFP4": "nvfp4"}


def short_scheme(scheme: object) -> str:
    """A scheme as the error names it (clipped)."""
    return json.dumps(scheme, sort_keys=True)[:60] if isinstance(scheme, dict) else str(scheme)[:60]


def _is_modelopt(quant: dict[str, Any]) -> bool:
    """``modelopt_config.py`` ``is_modelopt_quant_config``."""
    producer = quant.get("producer")
    return str(quant.get("quant_method", "")).lower().startswith("modelopt") or (
        isinstance(producer, dict) and producer.get("name") == "modelopt")


def kv_cache_quant_algo(quant: dict[str, Any], flat: bool) -> object:
    """``quant_config.kv_cache_quant_algo`` as ``_torch/model_config.py`` ``ModelConfig.from_pretrained``
    loads it: ``hf_quant_config.json`` (the nested ``quantization`` block) gives its
    ``kv_cache_quant_algo`` (``load_modelopt_quant_config``; every release); a flat ModelOpt
    ``quantization_config`` in config.json is read only where ``flat`` (main:
    ``load_hf_quant_config`` → ``read_modelopt_quant_config``, ``kv_cache_scheme`` translated, else its
    ``kv_cache_quant_algo`` key; a compressed-tensors config's 8-bit float ``kv_cache_scheme`` is FP8,
    ``update_quant_config_from_compressed_tensors``) — up to 1.1 ``load_hf_quant_config`` knew only
    fp8 blocks and MXFP4."""
    nested = quant.get("quantization")
    if isinstance(nested, dict):
        return nested.get("kv_cache_quant_algo")
    if not flat:
        return None
    if quant.get("quant_method") == "compressed-tensors":
        # main load_hf_quant_config → update_quant_config_from_compressed_tensors: an 8-bit float
        # kv_cache_scheme is FP8, any other scheme a ValueError ("Unsupported kv_cache_scheme").
        ct = quant.get("kv_cache_scheme")
        if ct is None:
            return None
        return "FP8" if isinstance(ct, dict) and ct.get("num_bits") == 8 and ct.get("type") == "float" \
            else f"kv_cache_scheme {short_scheme(ct)}"
    if not _is_modelopt(quant):
        return None
    scheme = quant.get("kv_cache_scheme")
    if scheme is not None:
        if isinstance(scheme, str) and scheme.upper() in _SCHEME_NAMES:
            return scheme.upper()
        if isinstance(scheme, dict):
            mapped = _SCHEME_DICT.get((scheme.get("type"), scheme.get("num_bits")))
            if mapped is not None:
                return mapped
    return quant.get("kv_cache_quant_algo")


@lru_cache(maxsize=256)
def resolve_auto_kv_dtype(quantization: str | None, flat: bool) -> str | None:
    """The cache dtype "auto" stands for, or None (the model dtype). A declared algo the PyTorch
    backend cannot size (INT8 and others) is a named error."""
    if quantization is None:
        return None
    quant = json.loads(quantization)
    if not isinstance(quant, dict):
        return None
    algo = kv_cache_quant_algo(quant, flat)
    if algo is None or (isinstance(algo, str) and algo.strip().lower() in ("none", "null", "")):
        return None
    name = str(algo)
    if name.upper() not in _KV_DTYPE:
        raise KVPlanError("engine.dtype", engine="trtllm",
                          dtype=f"auto (checkpoint kv_cache_quant_algo {name[:80]})",
                          why="get_cache_size_per_token sizes only FP8 and NVFP4 KV caches "
                              "(\"Quantized kv cache is not expected\")")
    return _KV_DTYPE[name.upper()]
