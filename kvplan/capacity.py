"""After the weights, how many requests fit: memory budget per GPU and pool arithmetic per engine.

Memory targets (per GPU):

* vLLM — ``ceil(total × gpu_memory_utilization) − weights − runtime reserve``
  (``vllm/v1/worker/gpu_worker.py``; the reserve stands for the profiled activation peak,
  CUDA-graph estimate and non-torch memory, which only a GPU run can measure).
* SGLang — ``total × mem_fraction_static − weights`` with the default
  ``mem_fraction_static = round((mem − reserved) / mem, 3)`` (``arg_groups/memory_hook.py``).
* HF — all of the device memory minus weights and the runtime reserve.
* ``--kv-cache-memory-bytes`` replaces the computed budget (vLLM's flag of the same name).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvplan.arch import ModelArch
from kvplan.dtypes import get_weight_dtype
from kvplan.engines import (
    ENGINES,
    EngineSettings,
    EngineView,
    check_engine,
    default_max_num_batched_tokens,
    engine_view,
    kv_heads_per_rank,
    pp_partition,
)
from kvplan.errors import KVPlanError
from kvplan.presets import GPU
from kvplan.vllm_pool import VllmPool, build_pool

GIB = 1 << 30
MIB = 1 << 20
#: Default runtime reserve per GPU (activation peak + CUDA graphs + non-torch), user-overridable.
DEFAULT_RESERVE_GIB = {"vllm": 1.0, "sglang": 0.0, "hf": 1.0, "hf-legacy": 1.0, "hf-static": 1.0,
                       "trtllm": 1.0}
TRTLLM_DEFAULT_FREE_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction
VLLM_DEFAULT_GPU_UTIL = 0.92  # vllm/config/cache.py (0.90 before v0.25)
MAX_SEARCH_TOKENS = 100_000_000


class FitQuery(BaseModel):
    """Everything the planner needs besides the model and the accelerator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: int = Field(default=4096, ge=1, le=MAX_SEARCH_TOKENS)
    users: int = Field(default=1, ge=1, le=10_000_000)
    kv_dtype: str = "bf16"
    weight_dtype: str | None = None
    engine: str = "vllm"
    num_gpus: int | None = Field(default=None, ge=1, le=4096)
    tp: int = Field(default=1, ge=1, le=4096)
    pp: int = Field(default=1, ge=1, le=4096)
    gpu_util: float | None = Field(default=None, gt=0, le=1)
    reserve_gib: float | None = Field(default=None, ge=0, le=100_000)
    kv_cache_memory_bytes: int | None = Field(default=None, ge=0)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=100_000_000)
    block_size: int | None = Field(default=None, ge=1, le=1_000_000)
    hybrid_manager: bool | None = None
    async_scheduling: bool = True
    enable_prefix_caching: bool = True
    page_size: int | None = Field(default=None, ge=1, le=1_000_000)


class FitResult(BaseModel):
    """Per-GPU and per-replica answers; byte counts are exact integers."""

    model: str
    gpu: str
    engine: str
    engine_label: str
    tokens: int
    users: int
    kv_dtype: str
    weight_dtype: str
    tp: int
    pp: int
    replicas: int
    gpu_capacity_bytes: int
    memory_target_bytes: int
    params_total: int
    params_method: str = ""
    weights_total_bytes: int
    weights_bytes: int
    reserve_bytes: int
    kv_budget_bytes: int
    kv_bytes_per_request: int
    num_blocks: int | None = None
    block_size: int | None = None
    bytes_per_block: int | None = None
    blocks_per_request: int | None = None
    kv_pool_tokens: int
    max_concurrency: float
    max_requests: int
    max_requests_all_replicas: int
    max_tokens_per_request: int
    fits: bool
    weights_fit: bool
    min_gpus_to_fit: int | None = None
    formulas: dict[str, str] = {}
    notes: list[str] = []

    @property
    def vllm_log(self) -> str:
        return (f"GPU KV cache size: {self.kv_pool_tokens:,} tokens, Maximum concurrency for "
                f"{self.tokens:,} tokens per request: {self.max_concurrency:.2f}x")


def weight_bytes(arch: ModelArch, weight_dtype: str | None) -> int:
    """Resident weight bytes (MoE: every expert) = params × bits of the format (+ group scales)."""
    name = weight_dtype or arch.model_dtype
    try:
        fmt = get_weight_dtype(name)
    except KeyError:
        from kvplan.dtypes import WEIGHT_DTYPES

        raise KVPlanError("unknown.dtype", value=name, choices=", ".join(WEIGHT_DTYPES)) from None
    return fmt.bytes_for(arch.params_total)


def stage_weight_bytes(arch: ModelArch, total: int, pp: int, tp: int) -> list[int]:
    """Weights per GPU on each pipeline stage: embeddings on the first, LM head on the last.

    Layer weights are split in proportion to each stage's layers (vLLM ``get_pp_indices``) and
    every stage's share divided evenly over its ``tp`` ranks.
    """
    parts = pp_partition(arch.n_layers, pp)
    embed_params = arch.vocab_size * arch.hidden_size
    embed = total * embed_params // max(arch.params_total, 1)
    head = 0 if arch.tie_word_embeddings and pp == 1 else embed
    layer_total = max(total - embed - (0 if arch.tie_word_embeddings else embed), 0)
    stages = []
    for index, count in enumerate(parts):
        share = layer_total * count // arch.n_layers
        share += embed if index == 0 else 0
        share += head if index == pp - 1 else 0
        stages.append(-(-share // tp))
    return stages


def sglang_mem_fraction_static(capacity_bytes: int, tp: int, pp: int, is_mla: bool) -> float:
    """SGLang's default ``mem_fraction_static`` (``python/sglang/srt/arg_groups/memory_hook.py``).

    ``reserved_mem`` (MiB) = 512 + max(chunked_prefill_size, 2048)·1.5 + tp·pp/8·1024 +
    decode_max_bs·2, floored at 10 GiB above 60 GiB; ``round((mem − reserved) / mem, 3)``.
    """
    mem = capacity_bytes / MIB
    gib = mem / 1024
    table = [(20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (160, 8192, 256, 512)]
    chunked, bs_small, bs_large = 16384, 512, 512
    for limit, size, small, large in table:
        if gib < limit:
            chunked, bs_small, bs_large = size, small, large
            break
    decode_bs = bs_large if tp >= 4 else bs_small
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + decode_bs * 2
    if gib > 60:
        reserved = max(reserved, 10 * 1024)
    return max(round((mem - reserved) / mem, 3), 0.0)


def engine_settings(query: FitQuery, gpu: GPU, arch: ModelArch | None = None) -> EngineSettings:
    """The engine knobs of a query, with the per-GPU defaults: vLLM's ``max_num_batched_tokens``,
    SGLang's page size."""
    mnbt = query.max_num_batched_tokens or default_max_num_batched_tokens(
        gpu.capacity_bytes, gpu.device_name)
    page = query.page_size
    if page is None and query.engine == "sglang" and arch is not None:
        page = sglang_default_page_size(gpu, arch)
    return EngineSettings(tp=query.tp, pp=query.pp, block_size=query.block_size,
                          max_num_batched_tokens=mnbt, async_scheduling=query.async_scheduling,
                          hybrid_manager=query.hybrid_manager,
                          enable_prefix_caching=query.enable_prefix_caching,
                          page_size=page, max_cache_len=query.tokens)


def sglang_default_page_size(gpu: GPU, arch: ModelArch) -> int | None:
    """SGLang's page size from its default attention backend (``server_args.py``): Hopper and
    older run fa3/flashinfer with ``page_size=1``; SM 10.x runs trtllm_mha for MHA/GQA models,
    which forces 64 tokens. None means the engine default (1)."""
    major = int(float(gpu.compute_capability)) if gpu.compute_capability else 0
    return 64 if major == 10 and not arch.is_mla else None


def vllm_mla_block_size(gpu: GPU, kv_dtype: str) -> int:
    """Default MLA block size from the backend vLLM picks (``vllm/platforms/cuda.py``).

    SM 10.x (Blackwell) → FlashInfer-MLA (32); SM 9.x with an fp8 cache → FlashMLA (64);
    otherwise FlashAttention-MLA / Triton-MLA (16).
    """
    major = int(float(gpu.compute_capability)) if gpu.compute_capability else 0
    if major == 10:
        return 32
    if major == 9 and kv_dtype.startswith("fp8"):
        return 64
    return 16


@dataclass
class Budget:
    """Memory per GPU for one engine: target, weights per pipeline stage, reserve, KV left."""

    target: int
    weights_total: int
    stage_weights: list[int]
    reserve: int
    stage_budgets: list[int]
    weights_fit: bool
    formulas: dict[str, str]
    notes: list[str]

    @property
    def kv_budget(self) -> int:
        return max(min(self.stage_budgets), 0)


def memory_budget(arch: ModelArch, gpu: GPU, query: FitQuery) -> Budget:
    """Validate the parallel layout and size the KV budget of every pipeline stage."""
    check_engine(query.engine)
    tp, pp = query.tp, query.pp
    gpus = query.num_gpus or tp * pp
    if gpus % (tp * pp):
        raise KVPlanError("parallel.gpus", gpus=gpus, tpp=tp * pp)
    if arch.kv_heads and not arch.is_mla and query.engine in {"vllm", "sglang"}:
        kv_heads_per_rank(arch.kv_heads, tp)
    weights_total = weight_bytes(arch, query.weight_dtype)
    stages = stage_weight_bytes(arch, weights_total, pp, tp)
    capacity = gpu.capacity_bytes
    engine = query.engine
    notes: list[str] = []
    formulas: dict[str, str] = {}
    reserve = int((query.reserve_gib if query.reserve_gib is not None
                   else DEFAULT_RESERVE_GIB[engine]) * GIB)
    if engine == "vllm":
        util = query.gpu_util or VLLM_DEFAULT_GPU_UTIL
        target = math.ceil(capacity * util)
        formulas["memory_target"] = f"ceil({capacity:,} × {util}) = {target:,} B"
    elif engine == "sglang":
        util = query.gpu_util or sglang_mem_fraction_static(capacity, tp, pp, arch.is_mla)
        if util <= 0:
            notes.append("SGLang's default reserve exceeds this GPU's memory at this tp × pp")
        target = int(capacity * util)
        formulas["memory_target"] = f"{capacity:,} × mem_fraction_static {util} = {target:,} B"
    else:
        target = capacity
        formulas["memory_target"] = f"all device memory = {target:,} B"
    budgets = [target - w - reserve for w in stages]
    if engine == "trtllm":  # _util.py _cal_max_memory: fraction × (total − peak after profiling)
        fraction = query.gpu_util or TRTLLM_DEFAULT_FREE_FRACTION
        budgets = [int(max(b, 0) * fraction) for b in budgets]
        formulas["memory_target"] += f"; KV gets free_gpu_memory_fraction {fraction} of what is left"
    given = query.kv_cache_memory_bytes is not None
    if given:
        budgets = [query.kv_cache_memory_bytes] * pp
        notes.append("KV memory given directly (--kv-cache-memory-bytes); utilization ignored")
    weights_fit = max(stages) + reserve <= target or given
    formulas["kv_budget"] = (f"{target:,} − weights {max(stages):,} − reserve {reserve:,} = "
                             f"{min(budgets):,} B" if not given else f"{max(min(budgets), 0):,} B (given)")
    return Budget(target, weights_total, stages, reserve, budgets, weights_fit, formulas, notes)


def fit(arch: ModelArch, gpu: GPU, query: FitQuery, search_gpus: bool = True) -> FitResult:
    """Answer the capacity question for one model, accelerator and engine configuration."""
    budget = memory_budget(arch, gpu, query)
    notes, formulas = budget.notes, budget.formulas
    answer = _pool_answer(arch, gpu, query, engine_settings(query, gpu, arch), budget.stage_budgets,
                          notes, formulas)
    tp, pp = query.tp, query.pp
    replicas = (query.num_gpus or tp * pp) // (tp * pp)
    fits = budget.weights_fit and answer["max_requests"] >= query.users
    result = FitResult(
        model=arch.name, gpu=gpu.id, engine=query.engine, engine_label=ENGINES[query.engine],
        tokens=query.tokens, users=query.users,
        kv_dtype=arch.model_dtype if query.kv_dtype == "auto" else query.kv_dtype,
        weight_dtype=query.weight_dtype or arch.model_dtype, tp=tp, pp=pp, replicas=replicas,
        gpu_capacity_bytes=gpu.capacity_bytes, memory_target_bytes=budget.target,
        params_total=arch.params_total, params_method=arch.params_method,
        weights_total_bytes=budget.weights_total, weights_bytes=max(budget.stage_weights),
        reserve_bytes=budget.reserve, kv_budget_bytes=budget.kv_budget,
        max_requests_all_replicas=answer["max_requests"] * replicas,
        fits=fits, weights_fit=budget.weights_fit, formulas=formulas, notes=notes, **answer)
    if not budget.weights_fit and search_gpus:
        result = result.model_copy(update={"min_gpus_to_fit": min_gpus_to_fit(arch, gpu, query)})
        notes.append("the weights alone exceed this GPU's memory target")
    return result


class KVPool:
    """A KV pool sized for one GPU's budget, vectorised over the request length ``L``."""

    num_blocks: int | None = None
    block_size: int | None = None
    bytes_per_block: int | None = None

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        """What ``users`` requests of length ``L`` need, in the unit of ``capacity``."""
        raise NotImplementedError

    capacity: int = 0

    def formulas(self, L: int) -> dict[str, str]:
        return {}


class BytePool(KVPool):
    """HF transformers: no pool; each request costs its cache bytes (``StaticCache``: pre-allocated)."""

    def __init__(self, view: EngineView, budget: int) -> None:
        self.view, self.capacity = view, budget
        self.per_token = sum(r.layers * r.bytes_per_token for r in view.rules)

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        L = np.asarray(L, dtype=np.int64)
        if self.view.engine != "hf-static":
            return self.view.reserved_bytes(L)
        total = np.zeros(L.shape, dtype=np.int64)
        for rule in self.view.rules:  # StaticCache: max_cache_len = L, windows min(W, L)
            slots = np.minimum(L, rule.window) if rule.window else L
            total = total + rule.layers * (slots * rule.bytes_per_token + rule.state_bytes)
        return total

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        per = self.per_request_bytes(L)
        return np.where(per > 0, self.capacity // np.maximum(per, 1), 0)

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        per = self.per_request_bytes(L)
        return np.where(per > 0, self.capacity / np.maximum(per, 1), 0.0)

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.capacity // self.per_token if self.per_token else 0)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self.per_request_bytes(L).astype(object) * users  # exact: may pass int64

    def formulas(self, L: int) -> dict[str, str]:
        per = int(self.per_request_bytes(np.asarray([L]))[0])
        n = self.capacity // per if per else 0
        return {"max_requests": f"floor({self.capacity:,} / {per:,} B per request) = {n:,}"}


class SGLangPool(KVPool):
    """SGLang: ``max_total_num_tokens = (available // cell) // page × page``.

    Hybrid-SWA models size the SWA pool at 0.8 × the full pool's tokens (``swa_full_tokens_ratio``);
    recurrent states take ``ratio / (1 + ratio)`` (ratio 0.9) of the memory for their own pool and
    about 3 slots per running request (``kv_cache_configurator.py``, ``mamba`` pool).
    """

    def __init__(self, view: EngineView, budget: int) -> None:
        self.view = view
        self.page = view.block_size or 1
        full = sum(r.layers * r.bytes_per_token for r in view.rules if r.kind != "sliding")
        swa = sum(r.layers * r.bytes_per_token for r in view.rules if r.kind == "sliding")
        states = sum(r.layers * r.state_bytes for r in view.rules if r.kind == "recurrent")
        self.kv_budget, self.slots = budget, None
        if states:
            self.kv_budget = int(budget / 1.9)
            self.slots = (budget - self.kv_budget) // states
        self.cell = full + 0.8 * swa
        self.capacity = int(self.kv_budget // self.cell) // self.page * self.page if self.cell else 0
        self.block_size = self.page
        self.num_blocks = self.capacity // self.page if self.page > 1 else None

    def _tokens(self, L: np.ndarray) -> np.ndarray:
        return -(-np.asarray(L, dtype=np.int64) // self.page) * self.page

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return self.view.reserved_bytes(np.asarray(L, dtype=np.int64))

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        fit_tokens = self.capacity // self._tokens(L)
        if self.slots is not None:
            fit_tokens = np.minimum(fit_tokens, self.slots // 3)
        return fit_tokens

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        return self.capacity / self._tokens(L)

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.capacity)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self._tokens(L) * users

    def formulas(self, L: int) -> dict[str, str]:
        return {"kv_pool_tokens": f"({self.kv_budget:,} // {self.cell:,.0f} B per token) // "
                                  f"{self.page} × {self.page} = {self.capacity:,}"}


class VllmPagedPool(KVPool):
    """vLLM: ``num_blocks = budget // bytes_per_block`` (minimum over pipeline stages); a request
    reserves ``Σ_groups`` blocks; one block is the null block (``BlockPool``)."""

    def __init__(self, pool: VllmPool, budgets: list[int], parts: list[int]) -> None:
        starts = np.cumsum([0, *parts])
        per_block = [pool.stage_bytes_per_block(int(starts[i]), int(starts[i + 1]))
                     for i in range(len(parts))]
        self.pool = pool
        self.budget = min(budgets)
        self.num_blocks = min(max(b, 0) // pbb for b, pbb in zip(budgets, per_block, strict=True) if pbb)
        self.bytes_per_block = max(per_block)
        self.block_size = pool.block_size
        self.capacity = max(self.num_blocks - 1, 0)

    def blocks(self, L: np.ndarray) -> np.ndarray:
        return np.asarray(self.pool.blocks_per_request(np.asarray(L, dtype=np.int64)), dtype=np.int64)

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return self.blocks(L) * self.bytes_per_block  # a block id spans the widest group's layers

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        return self.capacity // np.maximum(self.blocks(L), 1)

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        return self.num_blocks / np.maximum(self.blocks(L), 1)

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        """vLLM's logged "GPU KV cache size": ``int(num_blocks / blocks_per_request × L)``."""
        L = np.asarray(L, dtype=np.int64)
        return (self.concurrency(L) * L).astype(np.int64)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self.blocks(L) * users

    def formulas(self, L: int) -> dict[str, str]:
        bpr = int(self.blocks(np.asarray([L]))[0])
        conc = self.num_blocks / bpr if bpr else 0.0
        return {
            "num_blocks": f"{self.budget:,} // {self.bytes_per_block:,} B per block = {self.num_blocks:,}",
            "blocks_per_request": f"Σ over {len(self.pool.groups)} group(s) of reserved blocks at "
                                  f"{L:,} tokens = {bpr:,}",
            "max_concurrency": f"{self.num_blocks:,} / {bpr:,} = {conc:.4f}",
            "kv_pool_tokens": f"int({conc:.6f} × {L:,}) = {int(conc * L):,}",
            "max_requests": f"({self.num_blocks:,} − 1 null block) // {bpr:,} = "
                            f"{self.capacity // bpr if bpr else 0:,}",
        }


class TrtPool(KVPool):
    """TensorRT-LLM: ``max_tokens = budget // bytes per token``; ``blocks_in_primary_pool =
    max_tokens // tokens_per_block``; a request takes ``cdiv(L, tokens_per_block)`` blocks."""

    def __init__(self, view: EngineView, budget: int) -> None:
        self.view = view
        self.per_token = sum(r.layers * r.bytes_per_token for r in view.rules)
        self.block_size = view.block_size or 32
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

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.num_blocks * self.block_size)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self.blocks(L) * users

    def formulas(self, L: int) -> dict[str, str]:
        return {"num_blocks": f"({self.max_tokens:,} tokens = budget // {self.per_token:,} B) // "
                              f"{self.block_size} = {self.num_blocks:,} blocks"}


@cache
def _pool_cached(arch: ModelArch, kv_dtype: str, settings: EngineSettings, mla_bs: int) -> VllmPool:
    return build_pool(arch, kv_dtype, settings, mla_block_size=mla_bs)


def make_pool(arch: ModelArch, gpu: GPU, query: FitQuery, settings: EngineSettings,
              budgets: list[int], notes: list[str]) -> KVPool:
    """The engine's pool for these per-stage budgets (notes collect the engine's remarks)."""
    if query.engine == "vllm":
        pool = _pool_cached(arch, query.kv_dtype, settings, vllm_mla_block_size(gpu, query.kv_dtype))
        notes.extend(pool.notes)
        return VllmPagedPool(pool, budgets, pp_partition(arch.n_layers, query.pp))
    view = engine_view(arch, query.engine, query.kv_dtype, settings,
                       stage_layers=_largest_stage(arch, query.pp))
    notes.extend(view.notes)
    budget = max(min(budgets), 0)
    if query.engine == "trtllm":
        return TrtPool(view, budget)
    return SGLangPool(view, budget) if query.engine == "sglang" else BytePool(view, budget)


def _pool_answer(arch: ModelArch, gpu: GPU, query: FitQuery, settings: EngineSettings,
                 budgets: list[int], notes: list[str], formulas: dict[str, str]) -> dict:
    pool = make_pool(arch, gpu, query, settings, budgets, notes)
    L = np.asarray([query.tokens], dtype=np.int64)
    formulas.update(pool.formulas(query.tokens))
    answer = {
        "kv_bytes_per_request": int(pool.per_request_bytes(L)[0]),
        "kv_pool_tokens": int(pool.pool_tokens(L)[0]),
        "max_concurrency": float(pool.concurrency(L)[0]),
        "max_requests": int(pool.max_requests(L)[0]),
        "max_tokens_per_request": _max_len(lambda t: pool.users_cost(t, query.users), pool.capacity,
                                           _length_limit(arch, notes)),
        "num_blocks": pool.num_blocks, "block_size": pool.block_size,
        "bytes_per_block": pool.bytes_per_block,
    }
    if isinstance(pool, VllmPagedPool | TrtPool):
        answer["blocks_per_request"] = int(pool.blocks(L)[0])
    return answer


def _largest_stage(arch: ModelArch, pp: int) -> tuple[int, int]:
    parts = pp_partition(arch.n_layers, pp)
    index = int(np.argmax(parts))
    start = sum(parts[:index])
    return start, start + parts[index]


def _length_limit(arch: ModelArch, notes: list[str]) -> tuple[int, list[str]]:
    """Longest context the model accepts (``max_position_embeddings``), else the search bound."""
    limit = arch.max_position_embeddings
    if isinstance(limit, int) and 0 < limit < MAX_SEARCH_TOKENS:
        return limit, notes
    return MAX_SEARCH_TOKENS, notes


def _max_len(cost, budget: int, limit: tuple[int, list[str]] | int = MAX_SEARCH_TOKENS) -> int:
    """Largest token count ``t ≤ limit`` with ``cost(t) ≤ budget`` (cost non-decreasing); 0 if none."""
    notes: list[str] = []
    if isinstance(limit, tuple):
        limit, notes = limit
    if budget <= 0 or cost(np.asarray(1)) > budget:
        return 0
    low, high = 1, limit
    if cost(np.asarray(high)) <= budget:
        if limit < MAX_SEARCH_TOKENS:
            notes.append(f"max context capped at the model's max_position_embeddings ({limit:,})")
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if cost(np.asarray(mid)) <= budget:
            low = mid
        else:
            high = mid
    return low


def min_gpus_to_fit(arch: ModelArch, gpu: GPU, query: FitQuery, limit: int = 4096) -> int | None:
    """Smallest tensor-parallel GPU count (then pipeline stages) whose weights and one request fit."""
    candidates = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if n <= limit]
    for n in candidates:
        for tp, pp in ((n, 1), (min(n, 8), n // min(n, 8))):
            if tp * pp != n or pp > arch.n_layers:
                continue
            try:
                trial = fit(arch, gpu, query.model_copy(update={
                    "tp": tp, "pp": pp, "num_gpus": n, "users": 1}), search_gpus=False)
            except KVPlanError:
                continue
            if trial.weights_fit and trial.max_requests >= 1:
                return n
    return None


def capacity_sweep(arch: ModelArch, gpus_list: list[GPU], kv_dtypes: list[str],
                   tokens: np.ndarray, users: np.ndarray, query: FitQuery):
    """Requests that fit across accelerators × KV dtypes × context lengths × users (DataFrame).

    The pool is sized once per (accelerator, dtype); lengths and user counts are numpy arrays.
    """
    import pandas as pd

    t = np.asarray(tokens, dtype=np.int64).ravel()
    u = np.asarray(users, dtype=np.int64).ravel()
    frames = []
    for gpu in gpus_list:
        for dtype in kv_dtypes:
            q = query.model_copy(update={"kv_dtype": dtype})
            try:
                budget = memory_budget(arch, gpu, q)
                pool = make_pool(arch, gpu, q, engine_settings(q, gpu, arch), budget.stage_budgets, [])
            except KVPlanError:
                continue
            max_requests = pool.max_requests(t) if budget.weights_fit else np.zeros_like(t)
            frames.append(pd.DataFrame({
                "gpu": gpu.id, "kv_dtype": dtype,
                "tokens": np.repeat(t, u.size), "users": np.tile(u, t.size),
                "kv_budget_bytes": budget.kv_budget,
                "kv_bytes_per_request": np.repeat(pool.per_request_bytes(t), u.size),
                "max_requests": np.repeat(max_requests, u.size),
                "fits": np.greater_equal.outer(max_requests, u).ravel(),
            }))
    if not frames:
        return pd.DataFrame(columns=["gpu", "kv_dtype", "tokens", "users", "kv_budget_bytes",
                                     "kv_bytes_per_request", "max_requests", "fits"])
    return pd.concat(frames, ignore_index=True)
