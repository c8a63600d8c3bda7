"""TensorRT-LLM: the engine, its block pool and ``free_gpu_memory_fraction`` (``engine.py``)."""

from kvplan.engines.trtllm.engine import (
    TRTLLM_DEFAULT_FREE_FRACTION,
    TRTLLM_MAX_NUM_TOKENS,
    TRTLLM_PYTORCH_ARCHITECTURES,
    TRTLLM_RELEASES,
    TRTLLM_TOKENS_PER_BLOCK,
    TrtLlm,
    TrtLlmRelease,
    TrtPool,
    WindowPool,
)

__all__ = [
    "TRTLLM_DEFAULT_FREE_FRACTION", "TRTLLM_MAX_NUM_TOKENS", "TRTLLM_PYTORCH_ARCHITECTURES",
    "TRTLLM_RELEASES", "TRTLLM_TOKENS_PER_BLOCK", "TrtLlm", "TrtLlmRelease", "TrtPool", "WindowPool",
]
