"""SGLang: the engine, its token pool and ``mem_fraction_static`` (``engine.py``)."""

from kvplan.engines.sglang.engine import (
    MIB,
    SGLANG_HYBRID_SWA_ARCHS,
    SGLANG_MAMBA_FULL_RATIO,
    SGLANG_MAMBA_SLOTS_PER_REQUEST,
    SGLANG_SWA_FULL_RATIO,
    SGLANG_UNSERVED_ARCHS,
    SGLang,
    SGLangPool,
    sglang_default_page_size,
    sglang_mem_fraction_static,
    sglang_reserved_mem,
)

__all__ = [
    "MIB", "SGLANG_HYBRID_SWA_ARCHS", "SGLANG_MAMBA_FULL_RATIO", "SGLANG_MAMBA_SLOTS_PER_REQUEST",
    "SGLANG_SWA_FULL_RATIO", "SGLANG_UNSERVED_ARCHS", "SGLang", "SGLangPool",
    "sglang_default_page_size", "sglang_mem_fraction_static", "sglang_reserved_mem",
]
