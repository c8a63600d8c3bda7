"""Hugging Face transformers' caches (``engine.py``): DynamicCache, StaticCache, quantized caches."""

from kvplan.engines.hf.engine import (
    QUANTIZED_RESIDUAL_LENGTH,
    BytePool,
    HFDynamic,
    HFLegacy,
    HFStatic,
    QuantizedCacheModel,
    quantized_cache_allowed,
)

__all__ = [
    "BytePool", "HFDynamic", "HFLegacy", "HFStatic", "QUANTIZED_RESIDUAL_LENGTH", "QuantizedCacheModel",
    "quantized_cache_allowed",
]
