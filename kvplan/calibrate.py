"""Calibration against a real vLLM run: compare its start-up log with kvplan's plan.

The log is read by the engine's own parser (``Engine.parse_log``: ``kvplan/engines/vllm/log.py``
for vLLM's "Available KV cache memory", "GPU KV cache size" and "Maximum concurrency" lines).
``calibrate`` infers the runtime reserve the run implies
(``memory target − weights − available KV memory``, the part kvplan cannot know without a GPU:
activation peak, CUDA graphs, non-torch memory), re-runs ``fit`` with the logged memory as
``kv_cache_memory_bytes`` and says whether kvplan then reproduces the logged numbers. SGLang's and
TensorRT-LLM's logs are read by their engines (``SglangLog``, ``TrtllmLog``) but not compared yet:
``calibrate`` compares only records that say so (``StartupLog.compared``).

The release is the one the log's own version line names (``Engine.release_for_log``) unless the
plan pins one; a log of another model — another architecture, a ``max_model_len`` past the model's
limit, or loaded weights more than ``WEIGHTS_TOLERANCE`` from kvplan's — is refused
(``calibrate.other_model``) with what the log says it is.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from kvplan.capacity import GIB, FitResult, fit
from kvplan.engines import engine_with_release
from kvplan.engines.base import Engine, KVPool
from kvplan.engines.logs import MAX_LOG_BYTES as MAX_LOG_BYTES
from kvplan.engines.vllm.log import VllmLog
from kvplan.errors import KVPlanError
from kvplan.plan import Plan

#: How far the log's "Model loading took" may be from kvplan's weights per GPU before the log is
#: refused as another model: every public log kvplan compares is within 2 %
#: (``tests/test_weights_vs_logs.py``); 10 % leaves room for repacking and padding kvplan does not
#: model and is far below another size of a family (8B vs 70B: ×4.4) or a TP, PP or weight-format
#: mistake (×2).
WEIGHTS_TOLERANCE = 0.10


def compares(engine: Engine) -> bool:
    """Whether ``calibrate`` compares this engine's start-up log with a plan (its record is
    ``compared``: vLLM's)."""
    return engine.log_format is not None and engine.log_format.compared


class Calibration(BaseModel):
    """kvplan's prediction next to a real run's log, and the runtime reserve the run implies."""

    model: str
    gpu: str
    #: The release compared with (its name) and why it was chosen (the log's version line, the
    #: plan's pinned release, or the newest when the log prints none).
    release: str = ""
    release_source: str = ""
    #: The engine id compared with (``vllm@0.11``; ``vllm``: the newest release).
    engine_id: str = ""
    tokens: int
    kv_dtype: str
    tp: int
    pp: int
    log: VllmLog
    block_size: int | None
    bytes_per_block: int
    blocks_per_request: int
    memory_target_bytes: int
    weights_bytes: int
    #: kvplan's own prediction with the configured (or default) reserve.
    predicted_reserve_bytes: int
    predicted_kv_budget_bytes: int
    predicted_num_blocks: int
    predicted_kv_cache_tokens: int
    predicted_max_concurrency: float
    #: The logged memory: midpoint and the interval its printed decimals allow.
    logged_available_bytes: int | None = None
    logged_available_low_bytes: int | None = None
    logged_available_high_bytes: int | None = None
    #: Block counts the log allows (from num_gpu_blocks, the token count and the concurrency).
    logged_blocks_low: int | None = None
    logged_blocks_high: int | None = None
    #: target − weights − available; the interval is tightened by the block count when it can be.
    implied_reserve_bytes: int | None = None
    implied_reserve_low_bytes: int | None = None
    implied_reserve_high_bytes: int | None = None
    implied_reserve_gib: float | None = None
    #: A short decimal GiB value whose bytes lie in the implied interval (for the sidebar / link).
    suggested_reserve_gib: float | None = None
    #: The implied reserve split into the release's terms: per term kvplan's model, the log's own
    #: value where it prints one, and the share of the implied reserve (logged, else the model's);
    #: a last ``unexplained`` entry holds what is left.
    implied_terms: list[dict[str, Any]] = []
    #: "Model loading took X GiB" in bytes (the largest rank), to set beside kvplan's weights.
    logged_weights_bytes: int | None = None
    #: ``fit`` re-run with ``kv_cache_memory_bytes`` = the logged memory (midpoint).
    reproduced_num_blocks: int | None = None
    reproduced_kv_cache_tokens: int | None = None
    reproduced_max_concurrency: float | None = None
    block_difference: int | None = None
    tokens_match: bool | None = None
    concurrency_match: bool | None = None
    #: exact | within_one_block | within_rounding | mismatch | unknown
    agreement: str = "unknown"
    formulas: dict[str, str] = {}
    notes: list[str] = []

    @property
    def implied_reserve(self) -> tuple[int, int, int] | None:
        """``(reserve, low, high)`` bytes, set together by ``calibrate``; None without a logged memory."""
        reserve, low, high = (self.implied_reserve_bytes, self.implied_reserve_low_bytes,
                              self.implied_reserve_high_bytes)
        return None if reserve is None or low is None or high is None else (reserve, low, high)


def _short_gib(low: int, high: int) -> float:
    """The decimal GiB value with the fewest digits whose ``int(value × 2^30)`` is in [low, high]."""
    mid = (low + high) / 2 / GIB
    for digits in range(0, 10):
        value = round(mid, digits)
        if low <= int(value * GIB) <= high:
            return value
    return mid


def calibrate(plan: Plan, text: str | bytes) -> Calibration:
    """Compare ``fit`` for this plan (model, GPU and vLLM settings) with a real run's start-up log
    (``text``, read by the plan's engine: ``Engine.parse_log``)."""
    arch, gpu, query, engine = plan.arch, plan.device, plan.query, plan.engine
    if not compares(engine):
        raise KVPlanError("calibrate.engine", why=f"engine '{query.engine}' is not vLLM")
    log = engine.parse_log(text)
    if not isinstance(log, VllmLog):  # a compared record is vLLM's
        raise KVPlanError("calibrate.engine", why=f"engine '{query.engine}' is not vLLM")
    notes: list[str] = []
    formulas: dict[str, str] = {}
    plan, release_source = _log_release(plan, log, notes)
    query, engine = plan.query, plan.engine
    length = query.tokens
    if log.max_model_len is not None and log.max_model_len != query.tokens:
        notes.append(f"the log's max_model_len {log.max_model_len:,} differs from the chosen "
                     f"{query.tokens:,} tokens; compared at {log.max_model_len:,}")
        length = log.max_model_len
        plan = plan.vary(tokens=length)
        query = plan.query
    predicted = fit(plan, search_gpus=False)
    _same_model(plan, log, predicted.weights_bytes)
    bpb = predicted.bytes_per_block or 0
    bpr = predicted.blocks_per_request or 0
    if not bpb or not bpr:
        raise KVPlanError("calibrate.engine", why=f"{arch.name} has no paged KV pool to compare")
    weights = predicted.weights_bytes
    target = predicted.memory_target_bytes
    out: dict[str, Any] = {}  # Calibration keyword arguments
    formulas["predicted"] = (
        f"with reserve {predicted.reserve_bytes:,} B: budget {predicted.kv_budget_bytes:,} B // "
        f"{bpb:,} B per block = {predicted.num_blocks:,} blocks; {', '.join(engine.log_lines(predicted))}")

    # what the log says about the budget: the printed GiB, then the block count
    interval = log.available_interval()
    if interval is not None:
        out.update(logged_available_bytes=log.available_midpoint_bytes,
                   logged_available_low_bytes=interval[0], logged_available_high_bytes=interval[1])
        half = 0.5 * 10 ** -log.available_kv_decimals
        formulas["logged_available"] = (
            f"'Available KV cache memory: {log.available_kv_gib:.{log.available_kv_decimals}f} GiB' "
            f"(± {half:g} GiB) → [{interval[0]:,}, {interval[1]:,}] B, midpoint "
            f"{log.available_midpoint_bytes:,} B"
            + (f"; minimum over {log.ranks} ranks" if log.ranks > 1 else ""))
    pool = plan.make_pool([predicted.kv_budget_bytes], [])
    block_range = _logged_blocks(log, pool, bpr, length, formulas, notes)
    if block_range is not None:
        out.update(logged_blocks_low=block_range[0], logged_blocks_high=block_range[1])

    # the reserve the run implies
    avail = interval
    if block_range is not None:
        by_blocks = (block_range[0] * bpb, (block_range[1] + 1) * bpb - 1)
        if avail is None:
            avail = by_blocks
        elif max(avail[0], by_blocks[0]) <= min(avail[1], by_blocks[1]):
            avail = (max(avail[0], by_blocks[0]), min(avail[1], by_blocks[1]))
        else:
            notes.append("the logged block count and the logged GiB disagree (another layout or "
                         "version?); the reserve is taken from the GiB alone")
    if avail is not None:
        logged_mid = log.available_midpoint_bytes
        mid = logged_mid if avail == interval and logged_mid is not None else (avail[0] + avail[1]) // 2
        reserve = target - weights - mid
        low, high = target - weights - avail[1], target - weights - avail[0]
        out.update(implied_reserve_bytes=reserve, implied_reserve_low_bytes=low,
                   implied_reserve_high_bytes=high, implied_reserve_gib=reserve / GIB)
        formulas["implied_reserve"] = (
            f"memory target {target:,} − weights {weights:,} − available {mid:,}"
            + ("" if avail == interval else " (the printed GiB narrowed by the logged block count)")
            + f" = {reserve:,} B "
            f"= {reserve / GIB:.4f} GiB (interval [{low:,}, {high:,}] B, "
            f"± {(high - low) / 2 / GIB:.4f} GiB)")
        if high >= 0:
            suggested = _short_gib(max(low, 0), high)
            out["suggested_reserve_gib"] = suggested
            formulas["suggested_reserve"] = (
                f"{suggested:g} GiB = {int(suggested * GIB):,} B, inside the implied interval: "
                "with it kvplan's own budget gives the logged block count")
        out["implied_terms"] = _split_reserve(predicted, log, reserve, formulas)
        if reserve < 0:
            notes.append("the implied reserve is negative: the run's weights or "
                         "gpu_memory_utilization differ from the ones chosen here")
        if query.pp > 1:
            notes.append("with PP > 1 the reserve is inferred for the stage with the most weights")
        if query.kv_cache_memory_bytes is not None:
            notes.append("--kv-cache-memory-bytes was given: the run's budget was not derived from "
                         "a reserve, so the implied reserve describes nothing real")
    formulas["weights"] = (f"{predicted.weights_total_bytes:,} B of {predicted.weight_dtype} over "
                           f"TP {query.tp} × PP {query.pp} (largest stage) = {weights:,} B; the implied "
                           "reserve inherits any error of this estimate")
    if log.model_loading_gib is not None:
        logged = round(log.model_loading_gib * GIB)
        out["logged_weights_bytes"] = logged
        formulas["weights_vs_log"] = (
            f"'Model loading took {log.model_loading_gib:g} GiB' ≈ {logged:,} B vs kvplan's {weights:,} B "
            f"per GPU ({(weights - logged) / logged:+.2%}; kernel repacking and padding are not "
            "modelled)")

    # re-run with the logged memory as the budget
    if interval is not None:
        rerun = fit(plan.vary(kv_cache_memory_bytes=log.available_midpoint_bytes), search_gpus=False)
        out.update(reproduced_num_blocks=rerun.num_blocks,
                   reproduced_kv_cache_tokens=rerun.kv_pool_tokens,
                   reproduced_max_concurrency=rerun.max_concurrency)
        formulas["reproduced"] = (f"kv_cache_memory_bytes {log.available_midpoint_bytes:,} // "
                                  f"{bpb:,} B per block = {rerun.num_blocks:,} blocks; "
                                  f"{', '.join(engine.log_lines(rerun))}")
        _agreement(rerun, log, block_range, interval, bpb, out, formulas)
    return Calibration(
        model=arch.name, gpu=gpu.id, release=engine.release, release_source=release_source,
        engine_id=engine.id,
        tokens=length, kv_dtype=query.kv_dtype, tp=query.tp,
        pp=query.pp, log=log, block_size=predicted.block_size, bytes_per_block=bpb,
        blocks_per_request=bpr, memory_target_bytes=target, weights_bytes=weights,
        predicted_reserve_bytes=predicted.reserve_bytes,
        predicted_kv_budget_bytes=predicted.kv_budget_bytes,
        predicted_num_blocks=predicted.num_blocks or 0,
        predicted_kv_cache_tokens=predicted.kv_pool_tokens,
        predicted_max_concurrency=predicted.max_concurrency, formulas=formulas, notes=notes, **out)


def _log_release(plan: Plan, log: VllmLog, notes: list[str]) -> tuple[Plan, str]:
    """The plan under the release the log's version line names (``Engine.release_for_log``),
    unless the plan pins a release (``vllm@0.19``: kept, with a note when the log says otherwise);
    and the sentence saying which release is used and why."""
    engine = plan.engine
    pinned = "@" in plan.query.engine
    found = engine.release_for_log(log)
    if found is None:
        return plan, (f"{engine.release}, as chosen; the log prints no version line" if pinned else
                      f"{engine.release}: the log prints no version line, so the newest modelled release")
    record, how = found
    said = f"version line '{log.version_line}'" if log.version_line else "V0-only lines"
    if pinned:
        if record.key == engine.record.key:
            return plan, f"{engine.release}, as chosen and as the log's {said} says"
        notes.append(f"the log's {said} places it in {record.name}, but {engine.release} "
                     "was chosen; compared with the chosen release")
        return plan, f"{engine.release}, as chosen (the log's {said} says {record.name})"
    plan = plan.vary(engine=engine_with_release(plan.query.engine, record.key))
    return plan, f"{record.name}, from the log's {said} ({how})"


def _what_the_log_says(log: VllmLog) -> str:
    """The run as the log describes itself: model, architecture, release, length, weights."""
    said = []
    if log.model_name:
        said.append(f"model '{log.model_name}'")
    if log.architecture:
        said.append(f"architecture {log.architecture}")
    if log.version:
        said.append(f"vLLM {log.version}")
    if log.max_model_len is not None:
        said.append(f"max_model_len {log.max_model_len:,}")
    if log.model_loading_gib is not None:
        said.append(f"{log.model_loading_gib:g} GiB of weights per GPU ('Model loading took')")
    return ", ".join(said) or "nothing about its model"


def _same_model(plan: Plan, log: VllmLog, weights: int) -> None:
    """Refuse a log of another model (``calibrate.other_model``): the architecture vLLM resolved
    differs from the model's, its ``max_model_len`` is past the model's limit (vLLM refuses that
    length for this model: ``config/model.py`` ``_get_and_verify_max_len``), or its loaded weights
    differ from kvplan's (``weights``, bytes on the largest stage's GPU) by more than
    ``WEIGHTS_TOLERANCE``."""
    arch, query = plan.arch, plan.query
    why: list[str] = []
    if log.architecture and arch.architecture and log.architecture != arch.architecture:
        why.append(f"vLLM resolved the architecture {log.architecture}, {arch.name}'s is {arch.architecture}")
    limit = plan.engine.context_limit(arch)
    if log.max_model_len is not None and limit is not None and log.max_model_len > limit.tokens:
        why.append(f"its max_model_len {log.max_model_len:,} is beyond {arch.name}'s limit of "
                   f"{limit.tokens:,} tokens ({limit.rule})")
    if log.model_loading_gib is not None and log.model_loading_gib > 0:
        logged = log.model_loading_gib * GIB
        off = weights / logged - 1
        if abs(off) > WEIGHTS_TOLERANCE:
            why.append(f"it loaded {log.model_loading_gib:g} GiB of weights per GPU, kvplan's {arch.name} "
                       f"at TP {query.tp} × PP {query.pp} has {weights / GIB:.2f} GiB ({off:+.0%}, beyond "
                       f"±{WEIGHTS_TOLERANCE:.0%}: another model, TP/PP or weight format)")
    if why:
        raise KVPlanError("calibrate.other_model", model=arch.name, why="; ".join(why),
                          said=_what_the_log_says(log))


def _split_reserve(predicted: FitResult, log: VllmLog, implied: int,
                   formulas: dict[str, str]) -> list[dict[str, Any]]:
    """The implied reserve as the release's counted terms: the log's value where it prints the term,
    else kvplan's; the rest is ``unexplained`` (model error, the capacity estimate, weights)."""
    rows: list[dict[str, Any]] = []
    for term in predicted.reserve.get("terms", []):
        if not term["counted"]:
            continue
        logged = log.logged_terms.get(term["name"])
        logged_bytes = None if logged is None else round(logged * GIB)
        rows.append({"name": term["name"], "model_bytes": term["bytes"], "logged_bytes": logged_bytes,
                     "implied_bytes": term["bytes"] if logged_bytes is None else logged_bytes})
    rest = implied - sum(row["implied_bytes"] for row in rows)
    rows.append({"name": "unexplained", "model_bytes": 0, "logged_bytes": None, "implied_bytes": rest})
    formulas["implied_terms"] = " + ".join(
        f"{row['name']} {row['implied_bytes']:,}" + (" (logged)" if row["logged_bytes"] is not None else "")
        for row in rows) + f" = {implied:,} B"
    return rows


def _logged_blocks(log: VllmLog, pool: KVPool, bpr: int, length: int, formulas: dict[str, str],
                   notes: list[str]) -> tuple[int, int] | None:
    """The block counts consistent with every block-level number in the log, each inverted with
    the release's own formula (``KVPool.blocks_logging_tokens`` / ``…_concurrency``; None: no
    such line)."""
    ranges: list[tuple[int, int]] = []
    how: list[str] = []
    if log.num_gpu_blocks is not None:
        ranges.append((log.num_gpu_blocks, log.num_gpu_blocks))
        how.append(f"num_gpu_blocks {log.num_gpu_blocks:,}")
    if log.kv_cache_tokens is not None:
        low, high, rule = pool.blocks_logging_tokens(log.kv_cache_tokens, length)
        ranges.append((low, high))
        how.append(f"{rule} → n ∈ [{low:,}, {high:,}]" if low <= high else
                   f"no block count gives {log.kv_cache_tokens:,} tokens ({rule}) at {bpr:,} "
                   "blocks/request")
    if log.max_concurrency is not None:
        low, high, rule = pool.blocks_logging_concurrency(log.max_concurrency,
                                                          log.max_concurrency_decimals, length)
        ranges.append((low, high))
        how.append(f"{rule} → n ∈ [{low:,}, {high:,}]")
    if not ranges:
        return None
    low, high = max(r[0] for r in ranges), min(r[1] for r in ranges)
    if low > high:
        notes.append("the log's block count, token count and concurrency are not consistent with "
                     f"{bpr:,} blocks per request: another block size, layout or max_model_len?")
        formulas["logged_blocks"] = "; ".join(how) + " → inconsistent"
        return None
    formulas["logged_blocks"] = "; ".join(how) + (
        f" → num_blocks = {low:,}" if low == high else f" → num_blocks ∈ [{low:,}, {high:,}]")
    return low, high


def _agreement(rerun: FitResult, log: VllmLog, block_range: tuple[int, int] | None,
               interval: tuple[int, int], bpb: int, out: dict[str, object],
               formulas: dict[str, str]) -> None:
    n = rerun.num_blocks or 0
    if log.kv_cache_tokens is not None:
        out["tokens_match"] = rerun.kv_pool_tokens == log.kv_cache_tokens
    if log.max_concurrency is not None:
        digits = log.max_concurrency_decimals
        out["concurrency_match"] = (f"{rerun.max_concurrency:.{digits}f}"
                                    == f"{log.max_concurrency:.{digits}f}")
    if block_range is None:
        return
    low, high = block_range
    diff = 0 if low <= n <= high else (n - high if n > high else n - low)
    out["block_difference"] = diff
    gib_blocks = (interval[0] // bpb, interval[1] // bpb)
    if diff == 0 and out.get("tokens_match") is not False and out.get("concurrency_match") is not False:
        agreement = "exact"
    elif abs(diff) <= 1:
        agreement = "within_one_block"
    elif max(low, gib_blocks[0]) <= min(high, gib_blocks[1]):
        agreement = "within_rounding"
    else:
        agreement = "mismatch"
    out["agreement"] = agreement
    formulas["agreement"] = (
        f"reproduced {n:,} blocks vs logged {low:,}" + (f"–{high:,}" if high != low else "")
        + f": difference {diff:+,} blocks × {bpb:,} B per block = {diff * bpb:+,} B; the printed "
        f"GiB allows {gib_blocks[0]:,}–{gib_blocks[1]:,} blocks → {agreement}")
