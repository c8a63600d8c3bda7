"""After the weights, how many requests fit: memory budget per GPU and the engine's pool.

``fit`` asks the query's engine (``kvplan.engines``) for its memory target, KV budget and pool:

* vLLM — ``ceil(total × gpu_memory_utilization) − weights − runtime reserve``;
* SGLang — ``total × mem_fraction_static − weights``;
* TensorRT-LLM — ``free_gpu_memory_fraction × (total − weights − reserve)``;
* HF — all of the device memory minus weights and the runtime reserve;
* ``--kv-cache-memory-bytes`` replaces the computed budget (vLLM's flag of the same name).

``total`` is the device total CUDA reports (``Engine.capacity``: the catalogue's ``cuda_total_mib``
or a labelled estimate; a custom GPU's GiB); the runtime reserve is the engine release's terms
(``Engine.runtime_reserve``), each replaceable (``reserve_terms``), or a given total (``reserve_gib``).

Weights: per part in the checkpoint's stored format (``kvplan.weights``), split over pipeline stages
(embeddings on the first, LM head on the last), tensor- and expert-parallel ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from kvplan.arch import ModelArch
from kvplan.errors import KVPlanError
from kvplan.plan import (
    MAX_SEARCH_TOKENS,
    FitQuery,
    Plan,
    checkpoint_format_name,
    memory_budget,
    weights_per_gpu,
)
from kvplan.presets import GPU

GIB = 1 << 30

__all__ = ["MAX_SEARCH_TOKENS", "FitQuery", "FitResult", "Plan", "capacity_sweep", "checkpoint_format_name",
           "fit", "max_len", "memory_budget", "smallest_layout", "stage_weight_bytes", "weight_bytes",
           "weights_read_bytes", "why_not"]


class FitResult(BaseModel):
    """Per-GPU and per-replica answers; byte counts are exact integers."""

    model: str
    gpu: str
    engine: str
    engine_label: str
    engine_release: str = ""
    #: The engine release's key (``latest`` or ``0.19`` …) as ``--engine-version`` takes it.
    release: str = "latest"
    tokens: int
    users: int
    kv_dtype: str
    weight_dtype: str
    tp: int
    pp: int
    #: Data-parallel attention ranks per replica (each ``tp × pp`` GPUs, its own requests and pool).
    dp: int = 1
    replicas: int
    gpu_capacity_bytes: int
    #: The device total the budget starts from: bytes, source, status, note, marketed, nvidia_smi.
    capacity: dict[str, Any] = {}
    memory_target_bytes: int
    params_total: int
    params_method: str = ""
    weights_total_bytes: int
    weights_bytes: int
    reserve_bytes: int
    #: The runtime reserve: terms [{name, bytes, formula, source, basis, counted}], total.
    reserve: dict[str, Any] = {}
    kv_budget_bytes: int
    kv_bytes_per_request: int
    num_blocks: int | None = None
    block_size: int | None = None
    bytes_per_block: int | None = None
    blocks_per_request: int | None = None
    kv_pool_tokens: int
    max_concurrency: float
    max_requests: int
    #: Requests the KV pool alone holds (``max_requests`` is this capped by ``max_num_seqs``), per
    #: replica (× ``dp`` ranks), and what one data-parallel rank runs (``max_requests`` when dp = 1).
    max_requests_kv: int = 0
    max_requests_per_rank: int = 0
    max_requests_all_replicas: int
    max_tokens_per_request: int
    fits: bool
    weights_fit: bool
    min_gpus_to_fit: int | None = None
    #: The longest request the engine serves for this model (``Engine.context_limit``; None when
    #: the config gives no length), and how the engine derived it.
    context_limit: int | None = None
    context_limit_rule: str = ""
    #: Why it does not fit ("" when it fits), and the smallest change that would make it fit.
    reason: str = ""
    suggestion: str = ""
    #: The engine's request cap (vLLM ``max_num_seqs``, SGLang ``max_running_requests``; None: no
    #: cap modelled) and where it comes from; every answer's ``max_requests`` is at most it.
    max_num_seqs: int | None = None
    max_num_seqs_source: str = ""
    #: vLLM ``--speculative-config`` as resolved (method, tokens, draft TP, the drafter's KV layers and
    #: bytes per token per GPU, its weights, lookahead slots, capture sizes); None without it.
    speculative: dict[str, Any] | None = None
    #: Recurrent-state blocks (vLLM: the pool's blocks, one per decode sequence) or slots (SGLang's
    #: ``max_mamba_cache_size``); None without recurrent layers.
    state_blocks: int | None = None
    #: Whether the engine starts with these settings, what it does about the cap (``ok``,
    #: ``refuses``, ``clamps``) and why (``Engine.startup_check``).
    starts: bool = True
    start_action: str = "ok"
    start_reason: str = ""
    #: CUDA-graph capture sizes the cap implies (vLLM ``_set_cudagraph_sizes``; after any clamp).
    cuda_graph_sizes: list[int] = []
    #: Bytes per part on one GPU of the heaviest pipeline stage (``kvplan.weights.PARTS``).
    weights_breakdown: dict[str, int] = {}
    #: The stored formats per part and where they were read ("… — from config.json …").
    weight_format: str = ""
    formulas: dict[str, str] = {}
    notes: list[str] = []
    #: Every term of one GPU's memory (``Plan.ledger``): [{name, group, bytes, formula, source}].
    ledger: list[dict[str, Any]] = []


def weight_bytes(arch: ModelArch, weight_dtype: str | None) -> int:
    """Resident weight bytes of the whole model (MoE: every expert) in the checkpoint's stored
    format, or ``weight_dtype`` when given (``kvplan.weights.weights_per_gpu``)."""
    return weights_per_gpu(arch, weight_dtype).total_bytes


def weights_read_bytes(arch: ModelArch, weight_dtype: str | None = None) -> int:
    """Weight bytes one decode step must read at least: all weights, or (MoE) every part but the
    routed experts plus ``n_active / n_experts`` of them, in their stored formats."""
    parts = weights_per_gpu(arch, weight_dtype).total_by_part
    total = sum(parts.values())
    if arch.moe is not None and parts.get("experts"):
        experts = parts["experts"]
        return total - experts + experts * arch.moe.n_active // arch.moe.n_experts
    return total


def stage_weight_bytes(arch: ModelArch, weight_dtype: str | None, pp: int, tp: int, ep: int = 1,
                       mtp: bool = False) -> list[int]:
    """Weights per GPU on each pipeline stage (``kvplan.weights.weights_per_gpu``): layers as vLLM
    ``get_pp_indices`` assigns them, embeddings on the first stage, LM head on the last, each
    tensor split as its parallel layer splits it."""
    return weights_per_gpu(arch, weight_dtype, tp, pp, ep, mtp).stage_bytes


def fit(plan: Plan, search_gpus: bool = True) -> FitResult:
    """Answer the capacity question of ``plan``: weights, budget and the engine's pool on one GPU,
    the requests that fit, and (``search_gpus``) the smallest layout when they do not."""
    arch, gpu, query = plan.arch, plan.device, plan.query
    budget = plan.budget
    notes, formulas = [*budget.notes, *plan.pool_notes], dict(budget.formulas)
    answer = _pool_answer(plan, notes, formulas)
    startup = plan.startup
    if not budget.weights_fit:
        startup = replace(startup, starts=False, action="refuses", need=None, reason=(
            f"{plan.engine.release} will refuse to start: the weights leave no memory for the KV cache"))
    kv_requests = answer["max_requests_kv"] = answer["max_requests"]
    capped = int(cap_requests(plan, np.array([kv_requests]))[0]) if startup.starts else 0
    if startup.starts and capped < kv_requests:
        formulas["max_requests"] = (f"{formulas.get('max_requests', kv_requests)}; capped "
                                    f"at max_num_seqs {startup.max_num_seqs:,}")
    answer["max_requests"] = capped
    dp = plan.layout.dp
    answer["max_requests_per_rank"] = answer["max_requests"]
    if dp > 1:  # each data-parallel rank holds its own requests in its own pool
        formulas["max_requests"] = (f"{answer['max_requests']:,} per data-parallel rank × {dp} ranks = "
                                    f"{answer['max_requests'] * dp:,} per replica")
        answer["max_requests"] *= dp
        answer["max_requests_kv"] *= dp
        notes.append(f"data-parallel attention: {dp} ranks of TP={query.tp} per replica, each with its "
                     f"own KV pool and requests (users spread evenly: ⌈{query.users:,} / {dp}⌉ = "
                     f"{-(-query.users // dp):,} per rank); experts split over {dp * query.tp} GPUs")
    tp, pp = query.tp, query.pp
    replicas = plan.layout.replicas
    limit_rule = plan.engine.context_limit(arch)
    limit = limit_rule.tokens if limit_rule else None
    within = limit is None or query.tokens <= limit
    fits = budget.weights_fit and startup.starts and answer["max_requests"] >= query.users and within
    layout = plan.weights
    formulas["weights"] = (" + ".join(f"{part} {size:,}" for part, size in layout.heaviest.items())
                           + f" = {max(layout.stage_bytes):,} B per GPU")
    result = FitResult(
        model=arch.name, gpu=gpu.id, engine=query.engine, engine_label=plan.engine.label,
        engine_release=plan.engine.release, release=plan.release_key,
        capacity=budget.capacity.as_json() if budget.capacity else {},
        reserve=budget.reserve_detail.as_json() if budget.reserve_detail else {},
        tokens=query.tokens, users=query.users, kv_dtype=plan.kv_dtype,
        weight_dtype=query.weight_dtype or plan.weight_format, tp=tp, pp=pp, dp=dp,
        replicas=replicas, weights_breakdown=layout.heaviest,
        weight_format=f"{layout.format_label} — from {layout.format_source}",
        gpu_capacity_bytes=budget.capacity.bytes if budget.capacity else gpu.capacity_bytes,
        memory_target_bytes=budget.target,
        params_total=arch.params_total, params_method=arch.params_method,
        weights_total_bytes=budget.weights_total, weights_bytes=max(budget.stage_weights),
        reserve_bytes=budget.reserve, kv_budget_bytes=budget.kv_budget,
        max_requests_all_replicas=answer["max_requests"] * replicas,
        fits=fits, weights_fit=budget.weights_fit, context_limit=limit, formulas=formulas,
        context_limit_rule=limit_rule.rule if limit_rule else "",
        max_num_seqs=startup.max_num_seqs, max_num_seqs_source=startup.cap_source,
        state_blocks=startup.state_blocks, starts=startup.starts, start_action=startup.action,
        start_reason=startup.reason, cuda_graph_sizes=list(startup.capture_sizes),
        notes=notes, ledger=[term.as_json() for term in plan.ledger],
        speculative=plan.engine.speculative_summary(arch, gpu, plan.settings, query.kv_dtype),
        **answer)
    smallest: tuple[int, int] | None = None
    if not budget.weights_fit and search_gpus:  # one layout search serves both answers
        smallest = smallest_layout(plan)
        result = result.model_copy(update={
            "min_gpus_to_fit": None if smallest is None else smallest[0] * smallest[1]})
        notes.append("the weights alone exceed this GPU's memory target")
    if not fits:
        reason, suggestion = why_not(plan, result, search_gpus, smallest)
        result = result.model_copy(update={"reason": reason, "suggestion": suggestion})
    return result


def _layout(tp: int, pp: int) -> str:
    return f"TP={tp}" + (f", PP={pp}" if pp > 1 else "")


def smallest_layout(plan: Plan, users: int = 1) -> tuple[int, int] | None:
    """The smallest (TP, PP) — fewest GPUs, then TP before PP — whose weights and ``users``
    requests of the plan's length fit on one replica (at most 4,096 GPUs)."""
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        for tp, pp in ((n, 1), (min(n, 8), n // min(n, 8))):
            if tp * pp != n or pp > plan.arch.n_layers:
                continue
            try:
                trial = fit(plan.vary(tp=tp, pp=pp, num_gpus=n, users=users), search_gpus=False)
            except KVPlanError:
                continue
            if trial.weights_fit and trial.max_requests >= users:
                return tp, pp
    return None


def why_not(plan: Plan, result: FitResult, search: bool = True,
            weights_layout: tuple[int, int] | None = None) -> tuple[str, str]:
    """Why ``result`` does not fit and the smallest change that fixes it (``search``: try other
    parallel layouts — ``weights_layout`` is what ``fit``'s own search found for the weights; the
    memory-per-accelerator view and the other KV dtypes of the answer skip the search)."""
    query = plan.query
    gpus = query.num_gpus or query.tp * query.pp
    if result.context_limit is not None and query.tokens > result.context_limit:
        engine = plan.engine
        return (f"{query.tokens:,} tokens exceed the model's context limit of "
                f"{result.context_limit:,} ({result.context_limit_rule}); "
                f"{engine.short} {engine.long_context_rule}",
                f"use at most {result.context_limit:,} tokens per request")
    if not result.weights_fit:
        reason = (f"the weights ({result.weights_bytes:,} B per GPU) do not fit in the "
                  f"{result.memory_target_bytes:,} B memory target with TP={query.tp}, PP={query.pp}")
        layout = weights_layout
        if layout is None:
            return reason, "a larger accelerator or a smaller weight format" if search else ""
        tp, pp = layout
        if tp * pp <= gpus:
            return reason, (f"set {_layout(tp, pp)} (your {gpus:,} GPUs allow it; "
                            f"{gpus // (tp * pp):,} replica(s))")
        return reason, f"use {tp * pp:,} GPUs with {_layout(tp, pp)}"
    if not result.starts:
        return result.start_reason, startup_fix(plan, result)
    cap = None if result.max_num_seqs is None else result.max_num_seqs * result.dp
    if cap is not None and query.users > cap and result.max_requests_kv >= query.users:
        ranks = f" on each of {result.dp} data-parallel ranks" if result.dp > 1 else ""
        need = -(-query.users // result.dp)
        return (f"{query.users:,} requests exceed the engine's request cap max_num_seqs "
                f"{result.max_num_seqs:,}{ranks} ({result.max_num_seqs_source}): it runs at most "
                f"{cap:,} at once and queues the rest",
                f"set --max-num-seqs {need:,} (the KV pool holds {result.max_requests_kv:,})"
                if result.state_blocks is None or need <= result.state_blocks else
                f"at most {cap:,} users")
    reason = (f"{query.users:,} requests of {query.tokens:,} tokens need more KV memory than the "
              f"budget holds: at most {result.max_requests:,} per replica")
    options = []
    if result.max_requests >= 1:
        options.append(f"at most {result.max_requests:,} users")
    if result.max_tokens_per_request >= 1:
        options.append(f"at most {result.max_tokens_per_request:,} tokens per request")
    if search:
        dp = data_parallel_option(plan)
        if dp is not None:
            options.append(dp)
        layout = smallest_layout(plan, query.users)
        if layout is not None:
            tp, pp = layout
            options.append(f"{tp * pp:,} GPUs with {_layout(tp, pp)}")
    return reason, " or ".join(options) or "a larger accelerator"


def data_parallel_option(plan: Plan) -> str | None:
    """Data-parallel attention on the plan's own GPUs for an MoE model (engines with a ``dp``
    setting): the smallest attention TP (1, 2, 4 …) whose ``gpus / tp`` ranks, each with its own
    pool and experts split over all GPUs, hold the users — the MLA latent is then not replicated."""
    query = plan.query
    gpus = plan.layout.tp * plan.layout.pp * plan.layout.dp
    if plan.arch.moe is None or "dp" not in plan.engine.setting_labels or gpus < 2 or query.pp > 1:
        return None
    tp = 1
    while tp < gpus:
        if gpus % tp == 0 and (tp, gpus // tp) != (query.tp, plan.layout.dp):
            settings = query.settings.model_copy(update={"dp": gpus // tp})
            try:
                trial = fit(plan.vary(tp=tp, pp=1, num_gpus=query.num_gpus or gpus, settings=settings),
                            search_gpus=False)
            except KVPlanError:
                trial = None
            if trial is not None and trial.fits:
                return (f"data-parallel attention on your {gpus:,} GPUs: "
                        f"{plan.engine.dp_flags(gpus // tp, tp)} ({trial.max_requests_per_rank:,} "
                        f"per rank, {trial.max_requests:,} per replica)")
        tp *= 2
    return None


def cap_requests(plan: Plan, max_requests: np.ndarray) -> np.ndarray:
    """``max_requests`` of the KV pool capped by the engine's request cap (``Plan.startup``:
    ``max_num_seqs`` / ``max_running_requests``), 0 where the engine does not start."""
    check = plan.startup
    if not check.starts:
        return np.zeros_like(max_requests)
    if check.max_num_seqs is None:
        return max_requests
    return np.minimum(max_requests, check.max_num_seqs)


def _starts(plan: Plan) -> bool:
    try:
        return plan.budget.weights_fit and plan.startup.starts
    except KVPlanError:
        return False


def startup_fix(plan: Plan, result: FitResult) -> str:
    """The smallest changes that make the engine start (``Plan.startup``): the request cap the
    state blocks allow, the smallest memory fraction (in steps of 0.01) whose pool holds the cap, a
    shorter length where the blocks depend on it, and (vLLM) ``--enforce-eager``."""
    check, settings = plan.startup, plan.query.settings
    options = []
    if check.need:
        options.append(f"--max-num-seqs ≤ {check.need:,}")
    engine = plan.engine
    name = engine.setting_labels.get("gpu_util", ("memory fraction",))[0].split(" (")[0]
    label = "--" + name.replace("_", "-")
    current = round(plan.budget.target / plan.budget.capacity.bytes, 2) if plan.budget.capacity else 0.9
    low, high = int(current * 100) + 1, 100
    if low <= high and _starts(plan.vary(settings=settings.model_copy(update={"gpu_util": high / 100}))):
        while low < high:
            mid = (low + high) // 2
            if _starts(plan.vary(settings=settings.model_copy(update={"gpu_util": mid / 100}))):
                high = mid
            else:
                low = mid + 1
        options.append(f"{label} ≥ {low / 100:.2f}")
    tokens = plan.query.tokens
    shorter = tokens // 2
    if shorter >= 1 and _starts(plan.vary(tokens=shorter)):
        while shorter * 2 < tokens and _starts(plan.vary(tokens=min(shorter * 2, tokens - 1))):
            shorter = min(shorter * 2, tokens - 1)
        options.append(f"max_model_len ≤ {shorter:,}")
    if "enforce_eager" in engine.setting_labels and not settings.enforce_eager:
        options.append("--enforce-eager (no CUDA graphs, slower decode)")
    return ("use " + ", or ".join(options)) if options else "a larger accelerator"


def _pool_answer(plan: Plan, notes: list[str], formulas: dict[str, str]) -> dict[str, Any]:
    pool = plan.pool
    query = plan.query
    L = np.asarray([query.tokens], dtype=np.int64)
    formulas.update(pool.formulas(query.tokens))
    answer = {
        "kv_bytes_per_request": int(pool.per_request_bytes(L)[0]),
        "kv_pool_tokens": int(pool.pool_tokens(L)[0]),
        "max_concurrency": float(pool.concurrency(L)[0]),
        "max_requests": int(pool.max_requests(L)[0]),
        "max_tokens_per_request": _longest_as_planned(
            plan, max_len(lambda t: pool.users_cost(t, -(-query.users // plan.layout.dp)),
                          pool.capacity, plan.length_limit, notes), notes),
        "num_blocks": pool.num_blocks, "block_size": pool.block_size,
        "bytes_per_block": pool.bytes_per_block,
    }
    if pool.paged:
        answer["blocks_per_request"] = int(pool.blocks(L)[0])
    return answer


def _longest_as_planned(plan: Plan, longest: int, notes: list[str]) -> int:
    """The longest length whose own plan holds the users. ``max_len`` searches one pool, but an
    engine may size its reserve from the length asked about (vLLM profiles ``max_model_len``: the
    encoder budget and the vision tower's peak, ``engines/vllm/multimodal.py``), so the answer is
    re-planned at that length and bisected over re-planned lengths — down where it no longer fits,
    up to the asked length where a shorter plan's smaller reserve holds more (the reserve and the
    per-request cost both grow with the length, so the test is monotone)."""
    users = -(-plan.query.users // plan.layout.dp)

    def holds(tokens: int) -> bool:
        try:
            pool = plan.vary(tokens=tokens).pool
        except KVPlanError:
            return False
        return bool(pool.capacity > 0 and pool.users_cost(np.asarray(tokens), users) <= pool.capacity)

    # ``holds`` is monotone (a longer length reserves and costs more). ``longest`` is searched in
    # the pool of the plan at the asked length: past it, its own plan reserves more (search down);
    # short of it, a shorter length's own plan reserves less and may hold more (search up to it)
    asked = max(min(plan.query.tokens, plan.length_limit), 1)  # never past the context limit
    if longest >= 1 and holds(longest):
        if longest >= asked:
            return longest
        low, high = longest, asked        # up
    elif longest >= 1:
        low, high = (asked if asked < longest else 0), longest   # down: the asked plan holds asked
    elif holds(1):
        low, high = 1, asked              # none at the query's plan, yet its own plan holds 1 token
    else:
        return 0
    if high == asked and holds(asked):  # asked was capped at the context limit, whose plan holds
        low = high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if holds(mid) else (low, mid)
    if low != longest:
        notes.append(f"longest length re-planned: the engine sizes its reserve from the length, so "
                     f"{low:,} tokens (not {longest:,} from the plan at {asked:,}) is the longest "
                     f"whose own plan holds {plan.query.users:,} user(s)")
    return low


def max_len(cost: Callable[[np.ndarray], Any], budget: int, limit: int = MAX_SEARCH_TOKENS,
            notes: list[str] | None = None) -> int:
    """Largest token count ``t ≤ limit`` with ``cost(t) ≤ budget`` (cost non-decreasing); 0 if none."""
    if budget <= 0 or cost(np.asarray(1)) > budget:
        return 0
    low, high = 1, limit
    if cost(np.asarray(high)) <= budget:
        if limit < MAX_SEARCH_TOKENS and notes is not None:
            notes.append(f"max context capped at the model's context limit ({limit:,})")
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if cost(np.asarray(mid)) <= budget:
            low = mid
        else:
            high = mid
    return low


def capacity_sweep(plan: Plan, gpus_list: list[GPU], kv_dtypes: list[str],
                   tokens: npt.ArrayLike, users: npt.ArrayLike) -> Any:
    """Requests that fit across accelerators × KV dtypes × context lengths × users (DataFrame).

    The pool is sized once per (accelerator, dtype); lengths and user counts are array-likes.
    ``fits`` is False beyond the model's context limit, as in ``fit``.
    """
    import pandas as pd

    t = np.asarray(tokens, dtype=np.int64).ravel()
    u = np.asarray(users, dtype=np.int64).ravel()
    limit = plan.context_limit
    within = t <= limit if limit is not None else np.ones(t.shape, dtype=bool)
    frames = []
    for gpu in gpus_list:
        for dtype in kv_dtypes:
            trial = plan.vary(gpu=gpu, kv_dtype=dtype)
            try:
                budget = trial.budget
                pool = trial.make_pool(budget.stage_budgets, [])
            except KVPlanError:
                continue
            max_requests = pool.max_requests(t) if budget.weights_fit else np.zeros_like(t)
            max_requests = cap_requests(trial, max_requests) * trial.layout.dp
            frames.append(pd.DataFrame({
                "gpu": gpu.id, "kv_dtype": dtype,
                "tokens": np.repeat(t, u.size), "users": np.tile(u, t.size),
                "kv_budget_bytes": budget.kv_budget,
                "kv_bytes_per_request": np.repeat(pool.per_request_bytes(t), u.size),
                "max_requests": np.repeat(max_requests, u.size),
                "fits": np.greater_equal.outer(max_requests, u).ravel() & np.repeat(within, u.size),
            }))
    if not frames:
        return pd.DataFrame(columns=["gpu", "kv_dtype", "tokens", "users", "kv_budget_bytes",
                                     "kv_bytes_per_request", "max_requests", "fits"])
    return pd.concat(frames, ignore_index=True)
