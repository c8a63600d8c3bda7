"""Calibration against a real vLLM run: read its start-up log and compare it with kvplan.

vLLM logs, once the memory profile is done (``vllm/v1/worker/gpu_worker.py``,
``vllm/v1/core/kv_cache_utils.py``)::

    Available KV cache memory: 61.54 GiB
    GPU KV cache size: 469,536 tokens
    Maximum concurrency for 32,768 tokens per request: 14.33x

and, in some versions, ``# GPU blocks: N`` or ``num_gpu_blocks is: N``. The available memory is
printed with two decimals of a GiB (2^30 B), so it fixes the KV budget to ±0.005 GiB; the token
count fixes the block count exactly (dense models), i.e. the budget to one block's bytes.

``calibrate`` infers the runtime reserve the run implies
(``memory target − weights − available KV memory``, the part kvplan cannot know without a GPU:
activation peak, CUDA graphs, non-torch memory), re-runs ``fit`` with the logged memory as
``kv_cache_memory_bytes`` and says whether kvplan then reproduces the logged numbers.
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any

from pydantic import BaseModel

from kvplan.capacity import GIB, FitResult, fit
from kvplan.engines.base import KVPool
from kvplan.errors import KVPlanError, clip
from kvplan.plan import Plan
from kvplan.scenario import MAX_TOKENS

#: Largest log accepted (bytes); the capacity lines come within the first seconds of a start-up.
MAX_LOG_BYTES = 1 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_INT = r"(\d{1,3}(?:,\d{3})+|\d+)"
_FLOAT = r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_SIGNED = r"(-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?))"
_PATTERNS: dict[str, re.Pattern[str]] = {
    # V1 "Available KV cache memory: X GiB" (v0.9.2+; negative when the weights leave nothing);
    # V0 "kv_cache_size=XGiB" (0.6.4), "available_kv_cache_memory  XGiB" (0.6.5), "the rest of the
    # memory reserved for KV Cache is XGiB" (0.7/0.8) — vllm/worker/worker.py of each release
    "available_kv_gib": re.compile(
        r"(?:Available KV cache memory:|\bkv_cache_size=|\bavailable_kv_cache_memory\s|"
        r"the rest of the memory reserved for KV Cache is)\s*" + _SIGNED + r"\s*GiB"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size:\s*" + _INT + r"\s*tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for\s*" + _INT
                                  + r"\s*tokens per request:\s*" + _FLOAT + r"\s*x"),
    # "# GPU blocks: N" (V0 0.6, also pasted without its '#'), "# CUDA blocks: N" (V0 0.7)
    "num_gpu_blocks": re.compile(r"(?:(?:#\s*|^|\s)GPU blocks|num_gpu_blocks is|#\s*cuda blocks):\s*" + _INT,
                                 re.IGNORECASE),
    # "Model loading took X GiB" (V1; "… GiB memory and …" from 0.19), V0 "Loading model weights
    # took X GB" (GiB in fact: model_runner.py divides by 2^30)
    "model_loading_gib": re.compile(r"(?:Model loading took|Loading model weights took)[:*\s]*" + _FLOAT
                                    + r"\s*Gi?B"),
    "max_seq_len": re.compile(r"\bmax_seq_len=" + _INT + r"\b"),
}
#: Reserve terms some logs print (GiB), by kvplan's term name (``Engine.runtime_reserve``): V0
#: ``worker.py`` "non_torch_memory takes X GiB; PyTorch activation peak memory takes Y GiB" (and its
#: 0.6 one-line / table forms), V1 ``gpu_worker.py`` "… X GiB for peak activation, Y GiB for
#: non-torch memory, and Z GiB for CUDAGraph memory" (v0.10–v0.26), ``gpu_model_runner.py`` "Graph
#: capturing finished in N secs, took X GiB", and the same quantities as "Peak activation memory:
#: X GiB" in transcriptions.
_TERM_PATTERNS: dict[str, re.Pattern[str]] = {
    "activation_peak": re.compile(
        r"(?:PyTorch activation peak memory(?:\s+takes)?|Peak activation memory:?)[:*\s]*" + _SIGNED
        + r"\s*GiB|" + _SIGNED + r"\s*GiB for peak activation", re.IGNORECASE),
    "non_torch": re.compile(
        r"(?:non_torch_memory(?:\s+takes|=)?|Non-torch memory:)[:*\s]*" + _SIGNED + r"\s*GiB|"
        + _SIGNED + r"\s*GiB for non-torch memory", re.IGNORECASE),
    "cuda_graphs": re.compile(
        r"(?:Graph capturing finished in \d+ secs?, took|CUDAGraph memory:)[:*\s]*" + _SIGNED
        + r"\s*GiB|" + _SIGNED + r"\s*GiB for CUDAGraph memory", re.IGNORECASE),
    "total_gpu_memory": re.compile(
        r"total_gpu_memory[=\s(]*" + _FLOAT + r"\s*GiB|Free memory on device[:*\s(]*[\d.]+/"
        + _FLOAT + r"\s*GiB", re.IGNORECASE),
}


class VllmLog(BaseModel):
    """The capacity numbers a vLLM start-up log states (``None``: not in the log)."""

    available_kv_gib: float | None = None
    #: Decimals the available memory was printed with (2 for ``%.2f``); sets its resolution.
    available_kv_decimals: int = 2
    kv_cache_tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    max_concurrency_decimals: int = 2
    num_gpu_blocks: int | None = None
    #: "Model loading took X GiB" (the largest rank's weights; V0: "Loading model weights took").
    model_loading_gib: float | None = None
    #: Reserve terms and the device total the log prints (GiB, the largest over ranks), by name:
    #: ``activation_peak``, ``non_torch``, ``cuda_graphs``, ``total_gpu_memory``.
    logged_terms: dict[str, float] = {}
    #: How many ranks logged their available memory (TP/PP workers); the minimum is kept.
    ranks: int = 0
    lines_matched: int = 0

    def available_interval(self) -> tuple[int, int] | None:
        """The bytes the printed GiB can stand for: ``[value − ½ ulp, value + ½ ulp]`` × 2^30."""
        if self.available_kv_gib is None:
            return None
        half = 0.5 * 10 ** -self.available_kv_decimals
        return (max(math.ceil((self.available_kv_gib - half) * GIB), 0),
                math.floor((self.available_kv_gib + half) * GIB))

    @property
    def available_midpoint_bytes(self) -> int | None:
        return None if self.available_kv_gib is None else round(self.available_kv_gib * GIB)


#: What kvplan accepts from a log, per quantity (a log line of thousands of digits is refused
#: with a message naming the quantity, never an OverflowError or a silent infinity).
LOG_LIMITS: dict[str, tuple[int, int]] = {
    "available KV cache memory (GiB)": (-1_000_000, 1_000_000),
    "model loading (GiB)": (0, 1_000_000), "GPU KV cache size (tokens)": (0, 10**15),
    "max_model_len": (1, MAX_TOKENS), "maximum concurrency": (0, 10**12),
    "number of GPU blocks": (0, 10**12),
    **{f"{name} (GiB)": (-1_000_000, 1_000_000) for name in (
        "activation_peak", "non_torch", "cuda_graphs", "total_gpu_memory")},
}


def _num(text: str) -> str:
    return text.replace(",", "")


#: The range of a number no ``LOG_LIMITS`` entry names (the SGLang and TensorRT-LLM lines).
OTHER_LOG_LIMITS = (-10**15, 10**15)


def _number(field: str, text: str, kind: type, engine: str = "vLLM") -> int | float:
    """One number of the log, within ``LOG_LIMITS[field]`` (else ``OTHER_LOG_LIMITS``; digits are
    bounded before converting): out of range → ``calibrate.bad_value`` naming the field."""
    low, high = LOG_LIMITS.get(field, OTHER_LOG_LIMITS)
    digits = _num(text)
    value = kind(digits) if len(digits) <= 30 else math.inf
    if not low <= value <= high:
        raise KVPlanError("calibrate.bad_value", engine=engine, field=field, value=clip(text, 24),
                          low=low, high=high)
    return value


def _field_kind(model: type[BaseModel], field: str) -> type:
    """``int`` or ``float``: the type ``model`` declares for ``field`` (``int | None`` → int)."""
    return int if int in typing.get_args(model.model_fields[field].annotation) else float


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _as_text(log: str | bytes) -> str:
    """The log as text, bounded: too large, binary and empty inputs are refused with a message."""
    if isinstance(log, bytes | bytearray):
        if len(log) > MAX_LOG_BYTES:
            raise KVPlanError("calibrate.too_large", size=len(log), limit=MAX_LOG_BYTES)
        try:
            text = bytes(log).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KVPlanError("calibrate.not_text", detail=f"not UTF-8 at byte {exc.start:,}") from None
    else:
        text = str(log)
        if len(text) > MAX_LOG_BYTES or len(text.encode("utf-8", "replace")) > MAX_LOG_BYTES:
            raise KVPlanError("calibrate.too_large", size=len(text.encode("utf-8", "replace")),
                              limit=MAX_LOG_BYTES)
    if not text.strip():
        raise KVPlanError("calibrate.empty")
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\x1b") + text.count("\ufffd")
    if "\x00" in text or controls > max(8, len(text) // 20):
        raise KVPlanError("calibrate.not_text", detail="control bytes; paste the log as text")
    return text


def parse_vllm_log(log: str | bytes) -> VllmLog:
    """Read the capacity lines of a vLLM start-up log.

    Colour codes and any prefix (``(EngineCore_DP0 pid=123) INFO 11-29 10:00:00 [...]``) are
    ignored, as are lines that match nothing. Several ranks' lines keep the smallest capacity
    (vLLM's scheduler sizes every rank's pool to the minimum block count: ``get_kv_cache_configs``
    takes the minimum over workers) — available memory, blocks, and the "GPU KV cache size" with the
    concurrency on the same rank's line — and the largest "Model loading took". Every release's
    format is read (V1 and the V0 profiling lines). No capacity line at all → ``calibrate.no_lines``.
    """
    text = _ANSI.sub("", _as_text(log))
    found: dict[str, Any] = {}  # VllmLog keyword arguments
    available: list[tuple[float, int]] = []
    blocks: list[int] = []
    capacities: list[tuple[int, float | None, int]] = []  # (tokens, concurrency, its decimals)
    loading: list[float] = []
    terms: dict[str, float] = {}
    matched = 0
    for line in text.splitlines():
        if len(line) > 100_000:  # one line can't be a log line; skip it rather than scan it
            continue
        hit = False
        if m := _PATTERNS["available_kv_gib"].search(line):
            available.append((_number("available KV cache memory (GiB)", m.group(1), float),
                              _decimals(m.group(1))))
            hit = True
        tokens_here = None
        if m := _PATTERNS["kv_cache_tokens"].search(line):
            tokens_here = int(_number("GPU KV cache size (tokens)", m.group(1), int))
            capacities.append((tokens_here, None, 2))
            hit = True
        if m := _PATTERNS["max_concurrency"].search(line):
            found["max_model_len"] = _number("max_model_len", m.group(1), int)
            concurrency = float(_number("maximum concurrency", m.group(2), float))
            if tokens_here is not None or (capacities and capacities[-1][1] is None):
                tokens, _, _ = capacities.pop()  # the same rank's tokens (this line or the last)
                capacities.append((tokens, concurrency, _decimals(m.group(2))))
            else:
                capacities.append((-1, concurrency, _decimals(m.group(2))))
            hit = True
        if m := _PATTERNS["model_loading_gib"].search(line):
            loading.append(float(_number("model loading (GiB)", m.group(1), float)))
            hit = True
        if m := _PATTERNS["num_gpu_blocks"].search(line):
            blocks.append(int(_number("number of GPU blocks", m.group(1), int)))
            hit = True
        if "max_model_len" not in found and (m := _PATTERNS["max_seq_len"].search(line)):
            found["max_seq_len"] = _number("max_model_len", m.group(1), int)
        for name, pattern in _TERM_PATTERNS.items():
            for m in pattern.finditer(line):
                value = float(_number(f"{name} (GiB)", next(g for g in m.groups() if g), float))
                terms[name] = max(terms.get(name, value), value)
        matched += hit
    if not matched:
        raise KVPlanError("calibrate.no_lines")
    seq_len = found.pop("max_seq_len", None)
    if "max_model_len" not in found and seq_len is not None:
        found["max_model_len"] = seq_len
    if available:
        gib, decimals = min(available)
        found.update(available_kv_gib=gib, available_kv_decimals=decimals)
    if blocks:
        found["num_gpu_blocks"] = min(blocks)
    with_tokens = [c for c in capacities if c[0] >= 0]
    rank = min(with_tokens, key=lambda c: c[0]) if with_tokens else (min(capacities, key=lambda c: c[1] or 0)
                                                 if capacities else None)
    if rank is not None:
        if rank[0] >= 0:
            found["kv_cache_tokens"] = rank[0]
        if rank[1] is not None:
            found.update(max_concurrency=rank[1], max_concurrency_decimals=rank[2])
    if loading:
        found["model_loading_gib"] = max(loading)
    return VllmLog(**found, logged_terms=terms, ranks=len(available), lines_matched=matched)


class Calibration(BaseModel):
    """kvplan's prediction next to a real run's log, and the runtime reserve the run implies."""

    model: str
    gpu: str
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


def calibrate(plan: Plan, log: VllmLog) -> Calibration:
    """Compare ``fit`` for this plan (model, GPU and vLLM settings) with a real run's log."""
    arch, gpu, query = plan.arch, plan.device, plan.query
    if not plan.engine.logs_kv_cache:
        raise KVPlanError("calibrate.engine", why=f"engine '{query.engine}' is not vLLM")
    notes: list[str] = []
    formulas: dict[str, str] = {}
    length = query.tokens
    if log.max_model_len is not None and log.max_model_len != query.tokens:
        notes.append(f"the log's max_model_len {log.max_model_len:,} differs from the chosen "
                     f"{query.tokens:,} tokens; compared at {log.max_model_len:,}")
        length = log.max_model_len
        plan = plan.vary(tokens=length)
        query = plan.query
    predicted = fit(plan, search_gpus=False)
    bpb = predicted.bytes_per_block or 0
    bpr = predicted.blocks_per_request or 0
    if not bpb or not bpr:
        raise KVPlanError("calibrate.engine", why=f"{arch.name} has no paged KV pool to compare")
    weights = predicted.weights_bytes
    target = predicted.memory_target_bytes
    out: dict[str, Any] = {}  # Calibration keyword arguments
    formulas["predicted"] = (
        f"with reserve {predicted.reserve_bytes:,} B: budget {predicted.kv_budget_bytes:,} B // "
        f"{bpb:,} B per block = {predicted.num_blocks:,} blocks; {predicted.vllm_log}")

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
                                  f"{rerun.vllm_log}")
        _agreement(rerun, log, block_range, interval, bpb, out, formulas)
    return Calibration(
        model=arch.name, gpu=gpu.id, tokens=length, kv_dtype=query.kv_dtype, tp=query.tp,
        pp=query.pp, log=log, block_size=predicted.block_size, bytes_per_block=bpb,
        blocks_per_request=bpr, memory_target_bytes=target, weights_bytes=weights,
        predicted_reserve_bytes=predicted.reserve_bytes,
        predicted_kv_budget_bytes=predicted.kv_budget_bytes,
        predicted_num_blocks=predicted.num_blocks or 0,
        predicted_kv_cache_tokens=predicted.kv_pool_tokens,
        predicted_max_concurrency=predicted.max_concurrency, formulas=formulas, notes=notes, **out)


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


# --------------------------------------------------------------------------------------------
# SGLang and TensorRT-LLM start-up logs: the capacity lines, read (no calibration of them yet)

_GIB_UNIT = r"\s*Gi?B"
#: SGLang's memory lines print ``{x:.2f} GB`` of 2^30 bytes (``utils`` ``get_available_gpu_memory``
#: and ``mem_cache/memory_pool.py`` ``GB = 1024 * 1024 * 1024``); TP ranks print one line each.
_SGLANG: dict[str, re.Pattern[str]] = {
    "load_begin_avail_gib": re.compile(r"Load weight begin\. avail mem=" + _FLOAT + _GIB_UNIT),
    "load_end_avail_gib": re.compile(r"Load weight end\.[^\n]*?avail mem=" + _FLOAT + _GIB_UNIT),
    "weight_mem_usage_gib": re.compile(r"Load weight end\.[^\n]*?mem usage=" + _FLOAT + _GIB_UNIT),
    "kv_tokens": re.compile(r"KV Cache is allocated\.[^\n]*?#tokens: " + _INT),
    "k_size_gib": re.compile(r"KV Cache is allocated\.[^\n]*?\bK size: " + _FLOAT + _GIB_UNIT),
    "v_size_gib": re.compile(r"KV Cache is allocated\.[^\n]*?\bV size: " + _FLOAT + _GIB_UNIT),
    "kv_size_gib": re.compile(r"KV Cache is allocated\.[^\n]*?\bKV size: " + _FLOAT + _GIB_UNIT),
    "pool_end_avail_gib": re.compile(r"Memory pool end\. avail mem=" + _FLOAT + _GIB_UNIT),
    "max_total_num_tokens": re.compile(r"\bmax_total_num_tokens=" + _INT),
    "context_len": re.compile(r"\bcontext_len=" + _INT),
    "available_gpu_mem_gib": re.compile(r"\bavailable_gpu_mem=" + _FLOAT + _GIB_UNIT),
    "mem_fraction_static": re.compile(r"\bmem_fraction_static=" + _FLOAT),
}
#: Per-rank lines keep the value the engine acts on: the smallest free memory and pool (SGLang
#: all-reduces MIN over ranks), the largest weight usage.
_SGLANG_MAX = {"weight_mem_usage_gib"}


class SglangLog(BaseModel):
    """The capacity numbers an SGLang start-up log prints (``None``: not in the log)."""

    load_begin_avail_gib: float | None = None
    load_end_avail_gib: float | None = None
    weight_mem_usage_gib: float | None = None
    kv_tokens: int | None = None
    k_size_gib: float | None = None
    v_size_gib: float | None = None
    kv_size_gib: float | None = None
    pool_end_avail_gib: float | None = None
    max_total_num_tokens: int | None = None
    context_len: int | None = None
    available_gpu_mem_gib: float | None = None
    mem_fraction_static: float | None = None
    #: Ranks that printed "KV Cache is allocated".
    ranks: int = 0

    def rest_memory_interval(self, mem_fraction_static: float) -> tuple[int, int] | None:
        """The KV bytes SGLang's ``profile_max_num_token`` computed, as the printed lines allow:
        ``rest = free after loading − free before loading × (1 − mem_fraction_static)`` (GiB), each
        printed value ± 0.005; free before loading is "Load weight begin", or "Load weight end"
        plus its "mem usage" when the begin line is missing (± 0.01 then)."""
        after = self.load_end_avail_gib
        if after is None:
            return None
        if self.load_begin_avail_gib is not None:
            before, spread = self.load_begin_avail_gib, 0.005
        elif self.weight_mem_usage_gib is not None:
            before, spread = after + self.weight_mem_usage_gib, 0.01
        else:
            return None
        keep = 1 - mem_fraction_static
        low = (after - 0.005) - (before + spread) * keep
        high = (after + 0.005) - (before - spread) * keep
        return max(math.floor(low * GIB), 0), max(math.floor(high * GIB), 0)


def parse_sglang_log(log: str | bytes) -> SglangLog:
    """Read the memory and pool lines of an SGLang start-up log (``model_runner.py`` "Load weight
    begin/end", ``memory_pool.py`` "KV Cache is allocated", ``scheduler.py`` "max_total_num_tokens=",
    the ``server_args`` line). Prefixes and colour codes are ignored; several ranks keep the
    smallest value (the largest for "mem usage"). No such line → ``calibrate.no_engine_lines``."""
    text = _ANSI.sub("", _as_text(log))
    found: dict[str, Any] = {}
    for field, pattern in _SGLANG.items():
        raw = [m.group(1) for m in pattern.finditer(text)]
        if not raw:
            continue
        kind = _field_kind(SglangLog, field)
        numbers = [_number(field, r, kind, "SGLang") for r in raw]
        found[field] = max(numbers) if field in _SGLANG_MAX else min(numbers)
        if field == "kv_tokens":
            found["ranks"] = len(numbers)
    if not set(found) - {"mem_fraction_static", "context_len"}:
        raise KVPlanError("calibrate.no_engine_lines", engine="SGLang",
                          looked="'Load weight end', 'KV Cache is allocated', 'max_total_num_tokens='")
    return SglangLog(**found)


#: TensorRT-LLM: the PyTorch backend's ``_torch/pyexecutor/_util.py`` (``KvCacheCreator``) lines and
#: the C++ ``KVCacheManager`` lines (``allocatePools``, ``calculateMaxNumBlocks``); GiB = 2^30 B.
#: A start-up sizes the pool twice (estimation, then final): the last value is kept.
_TRTLLM: dict[str, re.Pattern[str]] = {
    "total_gpu_memory_gib": re.compile(
        r"(?:device total memory|calculating max tokens in paged kv cache: total:) " + _FLOAT + _GIB_UNIT),
    "free_gpu_memory_gib": re.compile(r"paged kv cache: total: [\d.]+ GiB, available: " + _FLOAT + _GIB_UNIT),
    "peak_memory_gib": re.compile(r"Peak memory during memory usage profiling \(torch \+ non-torch\): "
                                  + _FLOAT + _GIB_UNIT),
    "available_kv_memory_gib": re.compile(r"available KV cache memory when calculating max tokens: "
                                          + _FLOAT + _GIB_UNIT),
    "fraction": re.compile(r"\bfraction is set " + _FLOAT),
    "kv_size_per_token": re.compile(r"\bkv size (?:per token )?is " + _INT),
    "estimated_kv_memory_gib": re.compile(r"Estimated max memory in KV cache : " + _FLOAT + _GIB_UNIT),
    "max_tokens": re.compile(r"Both free_gpu_memory_fraction and max_tokens are set \(to [\d.]+ and "
                             + _INT),
    "tokens_per_block": re.compile(r"(?:Number of tokens per block: |tokens per block=)" + _INT),
    "primary_blocks": re.compile(r"(?:Number of blocks in KV cache primary pool: |primary blocks=)" + _INT),
    "allocated_kv_gib": re.compile(r"Allocated " + _FLOAT + r" GiB for max tokens in paged\s+KV cache"),
    "allocated_kv_tokens": re.compile(r"for max tokens in paged\s+KV cache \(" + _INT + r"\)"),
    "max_seq_len": re.compile(r"\bmax_seq_len=" + _INT + r", max_num_requests"),
}


class TrtllmLog(BaseModel):
    """The KV-cache numbers a TensorRT-LLM start-up log prints (``None``: not in the log)."""

    total_gpu_memory_gib: float | None = None
    free_gpu_memory_gib: float | None = None
    peak_memory_gib: float | None = None
    available_kv_memory_gib: float | None = None
    fraction: float | None = None
    kv_size_per_token: int | None = None
    estimated_kv_memory_gib: float | None = None
    max_tokens: int | None = None
    tokens_per_block: int | None = None
    primary_blocks: int | None = None
    allocated_kv_gib: float | None = None
    allocated_kv_tokens: int | None = None
    max_seq_len: int | None = None


def parse_trtllm_log(log: str | bytes) -> TrtllmLog:
    """Read the KV-cache lines of a TensorRT-LLM start-up log (hard-wrapped lines are joined by
    whitespace; colour codes ignored). The last value of each line is kept: the final pool, not the
    estimation pass. No such line → ``calibrate.no_engine_lines``."""
    text = _ANSI.sub("", _as_text(log))
    found: dict[str, Any] = {}
    for field, pattern in _TRTLLM.items():
        raw = [m.group(1) for m in pattern.finditer(text)]
        if raw:
            found[field] = _number(field, raw[-1], _field_kind(TrtllmLog, field), "TensorRT-LLM")
    if not found:
        raise KVPlanError("calibrate.no_engine_lines", engine="TensorRT-LLM",
                          looked="'Allocated … GiB for max tokens in paged KV cache', "
                                 "'Peak memory during memory usage profiling', 'primary pool'")
    return TrtllmLog(**found)
