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
from functools import cache

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvplan.arch import ModelArch
from kvplan.dtypes import get_weight_dtype
from kvplan.engines import (
    ENGINES,
    EngineSettings,
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
DEFAULT_RESERVE_GIB = {"vllm": 1.0, "sglang": 0.0, "hf": 1.0, "hf-legacy": 1.0, "hf-static": 1.0}
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


def engine_settings(query: FitQuery, gpu: GPU) -> EngineSettings:
    """The engine knobs of a query, with vLLM's per-GPU ``max_num_batched_tokens`` default."""
    mnbt = query.max_num_batched_tokens or default_max_num_batched_tokens(
        gpu.capacity_bytes, gpu.device_name)
    return EngineSettings(tp=query.tp, pp=query.pp, block_size=query.block_size,
                          max_num_batched_tokens=mnbt, async_scheduling=query.async_scheduling,
                          hybrid_manager=query.hybrid_manager,
                          enable_prefix_caching=query.enable_prefix_caching,
                          page_size=query.page_size, max_cache_len=query.tokens)


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


def fit(arch: ModelArch, gpu: GPU, query: FitQuery, search_gpus: bool = True) -> FitResult:
    """Answer the capacity question for one model, accelerator and engine configuration."""
    check_engine(query.engine)
    tp, pp = query.tp, query.pp
    gpus = query.num_gpus or tp * pp
    if gpus % (tp * pp):
        raise KVPlanError("parallel.gpus", gpus=gpus, tpp=tp * pp)
    if arch.kv_heads and not arch.is_mla and query.engine in {"vllm", "sglang"}:
        kv_heads_per_rank(arch.kv_heads, tp)
    settings = engine_settings(query, gpu)
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
    if query.kv_cache_memory_bytes is not None:
        budgets = [query.kv_cache_memory_bytes] * pp
        notes.append("KV memory given directly (--kv-cache-memory-bytes); utilization ignored")
    weights_gpu = max(stages)
    budget = max(min(budgets), 0)
    weights_fit = weights_gpu + reserve <= target or query.kv_cache_memory_bytes is not None
    formulas["kv_budget"] = (f"{target:,} − weights {weights_gpu:,} − reserve {reserve:,} = "
                             f"{min(budgets):,} B" if query.kv_cache_memory_bytes is None
                             else f"{budget:,} B (given)")
    answer = _pool_answer(arch, gpu, query, settings, budgets, notes, formulas)
    replicas = gpus // (tp * pp)
    fits = weights_fit and answer["max_requests"] >= query.users
    result = FitResult(
        model=arch.name, gpu=gpu.id, engine=engine, engine_label=ENGINES[engine],
        tokens=query.tokens, users=query.users, kv_dtype=query.kv_dtype,
        weight_dtype=query.weight_dtype or arch.model_dtype, tp=tp, pp=pp, replicas=replicas,
        gpu_capacity_bytes=capacity, memory_target_bytes=target, params_total=arch.params_total,
        params_method=arch.params_method, weights_total_bytes=weights_total,
        weights_bytes=weights_gpu, reserve_bytes=reserve, kv_budget_bytes=budget,
        max_requests_all_replicas=answer["max_requests"] * replicas,
        fits=fits, weights_fit=weights_fit, formulas=formulas, notes=notes, **answer)
    if not weights_fit and search_gpus:
        result = result.model_copy(update={"min_gpus_to_fit": min_gpus_to_fit(arch, gpu, query)})
        notes.append("the weights alone exceed this GPU's memory target")
    return result


def _pool_answer(arch: ModelArch, gpu: GPU, query: FitQuery, settings: EngineSettings,
                 budgets: list[int], notes: list[str], formulas: dict[str, str]) -> dict:
    L = query.tokens
    if query.engine == "vllm":
        return _vllm_answer(arch, gpu, query, settings, budgets, notes, formulas)
    budget = max(min(budgets), 0)
    view = engine_view(arch, query.engine, query.kv_dtype, settings,
                       stage_layers=_largest_stage(arch, query.pp))
    per_request = int(view.reserved_bytes(np.asarray([L]))[0])
    notes.extend(view.notes)
    if query.engine == "sglang":
        return _sglang_answer(arch, view, query, budget, per_request, formulas)
    max_requests = budget // per_request if per_request else 0
    per_token = sum(r.layers * r.bytes_per_token for r in view.rules)
    pool_tokens = budget // per_token if per_token else 0
    formulas["max_requests"] = f"floor({budget:,} / {per_request:,} B per request) = {max_requests:,}"
    return {
        "kv_bytes_per_request": per_request, "kv_pool_tokens": pool_tokens,
        "max_concurrency": budget / per_request if per_request else 0.0,
        "max_requests": max_requests,
        "max_tokens_per_request": _max_len(lambda t: view.reserved_bytes(t) * query.users, budget,
                                           _length_limit(arch, notes)),
    }


def _largest_stage(arch: ModelArch, pp: int) -> tuple[int, int]:
    parts = pp_partition(arch.n_layers, pp)
    index = int(np.argmax(parts))
    start = sum(parts[:index])
    return start, start + parts[index]


def _sglang_answer(arch, view, query: FitQuery, budget: int, per_request: int,
                   formulas: dict[str, str]) -> dict:
    """SGLang pool: ``max_total_num_tokens = (available // cell) // page × page``.

    Hybrid SWA models size the SWA pool at 0.8 × the full pool's tokens (``swa_full_tokens_ratio``).
    Recurrent states take ``ratio/(1+ratio)`` (ratio 0.9) of the memory for their own pool.
    """
    page = view.block_size or 1
    full = sum(r.layers * r.bytes_per_token for r in view.rules if r.kind != "sliding")
    swa = sum(r.layers * r.bytes_per_token for r in view.rules if r.kind == "sliding")
    states = sum(r.layers * r.state_bytes for r in view.rules if r.kind == "recurrent")
    kv_budget = budget
    slots = None
    if states:
        kv_budget = int(budget / 1.9)
        slots = (budget - kv_budget) // states
    cell = full + 0.8 * swa
    tokens = int(kv_budget // cell) // page * page if cell else 0
    per_request_tokens = -(-query.tokens // page) * page
    max_requests = tokens // per_request_tokens if per_request_tokens else 0
    if slots is not None:
        max_requests = min(max_requests, slots // 3) if cell else slots // 3
    formulas["kv_pool_tokens"] = f"({kv_budget:,} // {cell:,.0f} B per token) // {page} × {page} = {tokens:,}"
    return {
        "kv_bytes_per_request": per_request, "kv_pool_tokens": tokens,
        "num_blocks": tokens // page if page > 1 else None, "block_size": page,
        "max_concurrency": tokens / per_request_tokens if per_request_tokens else 0.0,
        "max_requests": max_requests,
        "max_tokens_per_request": (tokens // query.users) // page * page,
    }


@cache
def _pool_cached(arch: ModelArch, kv_dtype: str, settings: EngineSettings, mla_bs: int) -> VllmPool:
    return build_pool(arch, kv_dtype, settings, mla_block_size=mla_bs)


def _vllm_answer(arch, gpu, query: FitQuery, settings, budgets, notes, formulas) -> dict:
    pool = _pool_cached(arch, query.kv_dtype, settings, vllm_mla_block_size(gpu, query.kv_dtype))
    notes.extend(pool.notes)
    parts = pp_partition(arch.n_layers, query.pp)
    starts = np.cumsum([0, *parts])
    per_block = [pool.stage_bytes_per_block(int(starts[i]), int(starts[i + 1])) for i in range(len(parts))]
    num_blocks = min(max(b, 0) // pbb for b, pbb in zip(budgets, per_block, strict=True) if pbb)
    bytes_per_block = max(per_block)
    L = query.tokens
    bpr = int(pool.blocks_per_request(L))
    concurrency = num_blocks / bpr if bpr else 0.0
    usable = max(num_blocks - 1, 0)  # BlockPool keeps one null block
    max_requests = usable // bpr if bpr else 0
    max_len = _max_len(lambda t: pool.blocks_per_request(t) * query.users, usable,
                       _length_limit(arch, notes))
    formulas.update({
        "num_blocks": f"{min(budgets):,} // {bytes_per_block:,} B per block = {num_blocks:,}",
        "blocks_per_request": f"Σ over {len(pool.groups)} group(s) of reserved blocks at {L:,} "
                              f"tokens = {bpr:,}",
        "max_concurrency": f"{num_blocks:,} / {bpr:,} = {concurrency:.4f}",
        "kv_pool_tokens": f"int({concurrency:.6f} × {L:,}) = {int(concurrency * L):,}",
        "max_requests": f"({num_blocks:,} − 1 null block) // {bpr:,} = {max_requests:,}",
    })
    per_request = bpr * bytes_per_block  # every block id spans all layer slots of the widest group
    return {
        "kv_bytes_per_request": per_request, "num_blocks": num_blocks, "block_size": pool.block_size,
        "bytes_per_block": bytes_per_block, "blocks_per_request": bpr,
        "kv_pool_tokens": int(concurrency * L), "max_concurrency": concurrency,
        "max_requests": max_requests, "max_tokens_per_request": max_len,
    }


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


def fit_sweep(arch: ModelArch, gpus_list: list[GPU], kv_dtypes: list[str], query: FitQuery):
    """Requests that fit across accelerators × KV dtypes (DataFrame)."""
    import pandas as pd

    rows = []
    for gpu in gpus_list:
        for dtype in kv_dtypes:
            result = fit(arch, gpu, query.model_copy(update={"kv_dtype": dtype}))
            rows.append({"gpu": gpu.id, "gpu_name": gpu.name, "kv_dtype": dtype,
                         "weights_bytes": result.weights_bytes,
                         "kv_budget_bytes": result.kv_budget_bytes,
                         "max_requests": result.max_requests,
                         "max_tokens_per_request": result.max_tokens_per_request,
                         "fits": result.fits})
    return pd.DataFrame(rows)
