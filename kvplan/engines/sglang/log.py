"""SGLang's start-up log: the memory and pool lines it prints, read into an ``SglangLog``
(``parse_sglang_log``, reached as ``SGLang.parse_log``; no calibration of them yet)."""

from __future__ import annotations

import math
import re
from typing import Any

from kvplan.engines.logs import (
    FLOAT,
    GIB,
    GIB_UNIT,
    INT,
    VERSION,
    StartupLog,
    as_text,
    field_kind,
    find_version,
    number,
)
from kvplan.errors import KVPlanError

#: SGLang's memory lines print ``{x:.2f} GB`` of 2^30 bytes (``utils`` ``get_available_gpu_memory``
#: and ``mem_cache/memory_pool.py`` ``GB = 1024 * 1024 * 1024``); TP ranks print one line each.
_SGLANG: dict[str, re.Pattern[str]] = {
    "load_begin_avail_gib": re.compile(r"Load weight begin\. avail mem=" + FLOAT + GIB_UNIT),
    "load_end_avail_gib": re.compile(r"Load weight end\.[^\n]*?avail mem=" + FLOAT + GIB_UNIT),
    "weight_mem_usage_gib": re.compile(r"Load weight end\.[^\n]*?mem usage=" + FLOAT + GIB_UNIT),
    "kv_tokens": re.compile(r"KV Cache is allocated\.[^\n]*?#tokens: " + INT),
    "k_size_gib": re.compile(r"KV Cache is allocated\.[^\n]*?\bK size: " + FLOAT + GIB_UNIT),
    "v_size_gib": re.compile(r"KV Cache is allocated\.[^\n]*?\bV size: " + FLOAT + GIB_UNIT),
    "kv_size_gib": re.compile(r"KV Cache is allocated\.[^\n]*?\bKV size: " + FLOAT + GIB_UNIT),
    "pool_end_avail_gib": re.compile(r"Memory pool end\. avail mem=" + FLOAT + GIB_UNIT),
    "max_total_num_tokens": re.compile(r"\bmax_total_num_tokens=" + INT),
    "context_len": re.compile(r"\bcontext_len=" + INT),
    "available_gpu_mem_gib": re.compile(r"\bavailable_gpu_mem=" + FLOAT + GIB_UNIT),
    "mem_fraction_static": re.compile(r"\bmem_fraction_static=" + FLOAT),
}
#: SGLang's start-up log prints no version of its own; bug reports paste ``python3 -m
#: sglang.check_env`` beside it ("sglang: 0.4.3.post2"), and some launchers print "SGLang version".
VERSION_LINES = (re.compile(r"^\s*sglang:\s*" + VERSION, re.MULTILINE),
                 re.compile(r"\bSGLang version:?\s*" + VERSION, re.IGNORECASE))
#: Per-rank lines keep the value the engine acts on: the smallest free memory and pool (SGLang
#: all-reduces MIN over ranks), the largest weight usage.
_SGLANG_MAX = {"weight_mem_usage_gib"}


class SglangLog(StartupLog):
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

    @classmethod
    def parse(cls, log: str | bytes) -> SglangLog:
        return parse_sglang_log(log)

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
    text = as_text(log)
    found: dict[str, Any] = {}
    for field, pattern in _SGLANG.items():
        raw = [m.group(1) for m in pattern.finditer(text)]
        if not raw:
            continue
        kind = field_kind(SglangLog, field)
        numbers = [number(field, r, kind, "SGLang") for r in raw]
        found[field] = max(numbers) if field in _SGLANG_MAX else min(numbers)
        if field == "kv_tokens":
            found["ranks"] = len(numbers)
    if not set(found) - {"mem_fraction_static", "context_len"}:
        raise KVPlanError("calibrate.no_engine_lines", engine="SGLang",
                          looked="'Load weight end', 'KV Cache is allocated', 'max_total_num_tokens='")
    if (version := find_version(text, VERSION_LINES)) is not None:
        found.update(version=version[0], version_line=version[1])
    return SglangLog(**found)
