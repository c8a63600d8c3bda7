"""TensorRT-LLM (PyTorch backend): 32-token blocks, full length on every attention layer.

Sources: ``tensorrt_llm/_torch/pyexecutor/resource_manager.py`` (``KVCacheManager``,
``get_cache_size_per_token``: ``head_dim · nkv // tp`` per rank), ``tensorrt_llm/_torch/pyexecutor/_util.py``
(``_cal_max_memory``: ``free_gpu_memory_fraction`` of what is left after profiling),
``tensorrt_llm/llmapi/llm_args.py`` (``KvCacheConfig.tokens_per_block`` 32,
``free_gpu_memory_fraction`` 0.9). ``max_attention_window`` defaults to ``[max_seq_len]``, so
sliding windows apply only when configured per layer; the MLA latent is replicated on every TP rank
(``kv_factor = 1``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from kvplan.arch import MLA, Attention, LayerSpec, ModelArch
from kvplan.dtypes import KVDType
from kvplan.engines.base import MLA_ONLY_DTYPES, Engine, EngineView, KVPool
from kvplan.engines.kinds import PagedRule
from kvplan.engines.settings import EngineSettings
from kvplan.errors import KVPlanError

if TYPE_CHECKING:
    from kvplan.presets import GPU

TRTLLM_TOKENS_PER_BLOCK = 32  # tensorrt_llm/llmapi/llm_args.py KvCacheConfig.tokens_per_block
TRTLLM_DEFAULT_FREE_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction


class TrtLlm(Engine):
    """TensorRT-LLM PyTorch backend ``KVCacheManager``."""

    id = "trtllm"
    label = "TensorRT-LLM (PyTorch backend, 32-token blocks)"
    short = "TensorRT-LLM"
    release = "TensorRT-LLM 1.x (PyTorch backend)"
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        "gpu_util": ("free_gpu_memory_fraction (fraction)", f"{TRTLLM_DEFAULT_FREE_FRACTION}"),
        "block_size": ("tokens_per_block", f"{TRTLLM_TOKENS_PER_BLOCK}"),
    }
    #: ``enable_attention_dp`` with expert parallelism (``moe_expert_parallel_size``).
    expert_parallel = True

    def attention_token_bytes(self, layer: Attention, dtype: KVDType, tp: int) -> int:
        """``get_cache_size_per_token``: ``head_dim · nkv // tp`` elements of K and of V per rank."""
        if dtype.name in MLA_ONLY_DTYPES:
            raise KVPlanError("engine.dtype", engine=self.id, dtype=dtype.name,
                              why="this layout exists only for MLA layers")
        return (dtype.vector_bytes(layer.head_dim_k * layer.n_kv_heads // tp)
                + dtype.vector_bytes(layer.head_dim_v * layer.n_kv_heads // tp))

    def build_view(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> EngineView:
        block = settings.block_size or TRTLLM_TOKENS_PER_BLOCK
        notes = ["TensorRT-LLM keeps full-length KV on windowed layers unless max_attention_window is "
                 "set per layer"] if any(getattr(x, "window", None) for x in counts) else []
        rules, attention = self.split_layers(counts, model_dtype, settings.tp)
        for layer, n in attention:
            rules.append(PagedRule("mla" if isinstance(layer, MLA) else "full", n,
                                   self.token_bytes(layer, dtype, settings.tp), block_size=block,
                                   spec=layer))
        return EngineView(self.id, dtype, tuple(rules), block_size=block, notes=tuple(notes))

    def kv_budgets(self, target: int, stage_weights: list[int], reserve: int,
                   settings: EngineSettings, formulas: dict[str, str]) -> list[int]:
        """``_util.py`` ``_cal_max_memory``: fraction × (total − peak after profiling)."""
        fraction = settings.gpu_util or TRTLLM_DEFAULT_FREE_FRACTION
        formulas["memory_target"] += f"; KV gets free_gpu_memory_fraction {fraction} of what is left"
        return [int(max(target - w - reserve, 0) * fraction) for w in stage_weights]

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str]) -> KVPool:
        view = self.view(arch, kv_dtype, settings, stage_layers=self.largest_stage(arch, settings.pp))
        notes.extend(view.notes)
        return TrtPool(view, max(min(budgets), 0))


class TrtPool(KVPool):
    """TensorRT-LLM: ``max_tokens = budget // bytes per token``; ``blocks_in_primary_pool =
    max_tokens // tokens_per_block``; a request takes ``cdiv(L, tokens_per_block)`` blocks."""

    paged = True

    def __init__(self, view: EngineView, budget: int) -> None:
        self.view = view
        self.per_token = view.token_bytes
        self.block_size = view.block_size or TRTLLM_TOKENS_PER_BLOCK
        self.max_tokens = budget // self.per_token if self.per_token else 0
        self.num_blocks = self.max_tokens // self.block_size
        self.bytes_per_block = self.per_token * self.block_size
        self.capacity = self.num_blocks

    def blocks(self, L: np.ndarray) -> np.ndarray:
        return -(-np.asarray(L, dtype=np.int64) // self.block_size)

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return self.blocks(L) * self.bytes_per_block

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        return self.num_blocks // self.blocks(L)

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        return self.num_blocks / self.blocks(L)

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``((max(min budget, 0) // bytes per token) // tokens_per_block) // blocks(L)``."""
        budget = np.maximum(np.asarray(budgets, dtype=np.int64).min(axis=1), 0)
        if not self.per_token:
            return np.zeros(budget.shape, dtype=np.int64)
        num_blocks = budget // self.per_token // self.block_size
        return num_blocks // int(self.blocks(np.asarray([L]))[0])

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.num_blocks * self.block_size)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self.blocks(L) * users

    def formulas(self, L: int) -> dict[str, str]:
        return {"num_blocks": f"({self.max_tokens:,} tokens = budget // {self.per_token:,} B) // "
                              f"{self.block_size} = {self.num_blocks:,} blocks"}
