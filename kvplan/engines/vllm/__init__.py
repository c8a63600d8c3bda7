"""vLLM: the engine (``engine.py``), its KV-cache groups and pool (``pool.py``), its runtime reserve
(``memory.py``), its releases as a table of trait records (``releases.py``), its start-up log
(``log.py``) and its weight-loading rules (``weights.py``)."""

from kvplan.engines.vllm.engine import (
    VLLM_DEFAULT_GPU_UTIL,
    Vllm,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    vllm_mla_block_size,
)
from kvplan.engines.vllm.pool import VllmPagedPool, VllmPool, build_pool
from kvplan.engines.vllm.releases import VLLM_RELEASES, VllmRelease
from kvplan.engines.vllm.weights import mxfp4_repack

__all__ = ["VLLM_DEFAULT_GPU_UTIL", "VLLM_RELEASES", "Vllm", "VllmPagedPool", "VllmPool", "VllmRelease",
           "build_pool", "default_max_num_batched_tokens", "default_max_num_seqs", "mxfp4_repack",
           "vllm_mla_block_size"]
