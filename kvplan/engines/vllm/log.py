"""vLLM's start-up log: the capacity lines it prints, read into a ``VllmLog`` (``parse_vllm_log``,
reached as ``Vllm.parse_log``), and the lines it would print for a planned pool (``log_lines``).

vLLM logs, once the memory profile is done (``vllm/v1/worker/gpu_worker.py``,
``vllm/v1/core/kv_cache_utils.py``)::

    Available KV cache memory: 61.54 GiB
    GPU KV cache size: 469,536 tokens
    Maximum concurrency for 32,768 tokens per request: 14.33x

and, in some versions, ``# GPU blocks: N`` or ``num_gpu_blocks is: N``. The available memory is
printed with two decimals of a GiB (2^30 B), so it fixes the KV budget to ±0.005 GiB; the token
count fixes the block count exactly (dense models), i.e. the budget to one block's bytes.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from kvplan.engines.logs import (
    FLOAT,
    GIB,
    INT,
    SIGNED,
    VERSION,
    PoolAnswer,
    StartupLog,
    as_text,
    decimals,
    find_version,
    number,
)
from kvplan.engines.settings import MAX_TOKENS
from kvplan.errors import KVPlanError

_PATTERNS: dict[str, re.Pattern[str]] = {
    # V1 "Available KV cache memory: X GiB" (v0.9.2+; negative when the weights leave nothing);
    # V0 "kv_cache_size=XGiB" (0.6.4), "available_kv_cache_memory  XGiB" (0.6.5), "the rest of the
    # memory reserved for KV Cache is XGiB" (0.7/0.8) — vllm/worker/worker.py of each release
    "available_kv_gib": re.compile(
        r"(?:Available KV cache memory:|\bkv_cache_size=|\bavailable_kv_cache_memory\s|"
        r"the rest of the memory reserved for KV Cache is)\s*" + SIGNED + r"\s*GiB"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size:\s*" + INT + r"\s*tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for\s*" + INT
                                  + r"\s*tokens per request:\s*" + FLOAT + r"\s*x"),
    # "# GPU blocks: N" (V0 0.6, also pasted without its '#'), "# CUDA blocks: N" (V0 0.7)
    "num_gpu_blocks": re.compile(r"(?:(?:#\s*|^|\s)GPU blocks|num_gpu_blocks is|#\s*cuda blocks):\s*" + INT,
                                 re.IGNORECASE),
    # "Model loading took X GiB" (V1; "… GiB memory and …" from 0.19), V0 "Loading model weights
    # took X GB" (GiB in fact: model_runner.py divides by 2^30)
    "model_loading_gib": re.compile(r"(?:Model loading took|Loading model weights took)[:*\s]*" + FLOAT
                                    + r"\s*Gi?B"),
    "max_seq_len": re.compile(r"\bmax_seq_len=" + INT + r"\b"),
}
#: Reserve terms some logs print (GiB), by kvplan's term name (``Engine.runtime_reserve``): V0
#: ``worker.py`` "non_torch_memory takes X GiB; PyTorch activation peak memory takes Y GiB" (and its
#: 0.6 one-line / table forms), V1 ``gpu_worker.py`` "… X GiB for peak activation, Y GiB for
#: non-torch memory, and Z GiB for CUDAGraph memory" (v0.10–v0.26), ``gpu_model_runner.py`` "Graph
#: capturing finished in N secs, took X GiB", and the same quantities as "Peak activation memory:
#: X GiB" in transcriptions.
_TERM_PATTERNS: dict[str, re.Pattern[str]] = {
    "activation_peak": re.compile(
        r"(?:PyTorch activation peak memory(?:\s+takes)?|Peak activation memory:?)[:*\s]*" + SIGNED
        + r"\s*GiB|" + SIGNED + r"\s*GiB for peak activation", re.IGNORECASE),
    "non_torch": re.compile(
        r"(?:non_torch_memory(?:\s+takes|=)?|Non-torch memory:)[:*\s]*" + SIGNED + r"\s*GiB|"
        + SIGNED + r"\s*GiB for non-torch memory", re.IGNORECASE),
    "cuda_graphs": re.compile(
        r"(?:Graph capturing finished in \d+ secs?, took|CUDAGraph memory:)[:*\s]*" + SIGNED
        + r"\s*GiB|" + SIGNED + r"\s*GiB for CUDAGraph memory", re.IGNORECASE),
    "total_gpu_memory": re.compile(
        r"total_gpu_memory[=\s(]*" + FLOAT + r"\s*GiB|Free memory on device[:*\s(]*[\d.]+/"
        + FLOAT + r"\s*GiB", re.IGNORECASE),
}


#: The version lines, most specific first: ``entrypoints/openai/api_server.py`` "vLLM API server
#: version X", the engine's "Initializing a V1 LLM engine (vX) with config" (``v1/engine/core.py``)
#: or V0's "Initializing an LLM engine (vX) with config" (``engine/llm_engine.py``), the banner's
#: "version X" (``entrypoints/utils.py``, from v0.11) and ``collect_env``'s "vLLM Version: X".
VERSION_LINES: tuple[re.Pattern[str], ...] = (
    re.compile(r"vLLM API server version\s+" + VERSION),
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(" + VERSION + r"\)"),
    re.compile(r"[█▀▄]\s+version\s+" + VERSION),
    re.compile(r"\bvLLM [Vv]ersion:?\s+" + VERSION),
)
#: What the log says the run is: ``model='…'`` of the config line (or ``'model': '…'`` of the
#: non-default args, the banner's "model X"), "Resolved architecture: X" (``config/model.py``).
_MODEL_NAME = (re.compile(r"with config: model='([^'\n]{1,300})'"), re.compile(r"'model': '([^'\n]{1,300})'"),
               re.compile(r"[█▀▄]\s+model\s+(\S{1,300})"))
_ARCHITECTURE = re.compile(r"Resolved architecture: ([A-Za-z0-9_]{1,100})")
#: V0's engine announces itself without "V1" (``engine/llm_engine.py``); V1's with it.
_GENERATION = re.compile(r"Initializing an? (V1 )?LLM engine \(")
#: Lines only V0's worker prints (``worker/worker.py`` memory profile, ``worker/model_runner.py``
#: "Loading model weights took"): V1's ``gpu_worker.py`` prints "Available KV cache memory" instead.
_V0_LINES = re.compile(r"\bkv_cache_size=|\bavailable_kv_cache_memory\s|the rest of the memory reserved "
                       r"for KV Cache is|Loading model weights took|non_torch_memory takes")


class VllmLog(StartupLog):
    """The capacity numbers a vLLM start-up log states (``None``: not in the log)."""

    compared: ClassVar[bool] = True

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
    #: The model the log names (config line, non-default args or banner) and the architecture
    #: vLLM resolved (None: not printed).
    model_name: str | None = None
    architecture: str | None = None
    #: ``V0`` / ``V1`` as the engine's "Initializing … LLM engine" line says, else ``V0`` when the
    #: log has lines only V0's worker prints (``_V0_LINES``); None: neither.
    generation: str | None = None

    @classmethod
    def parse(cls, log: str | bytes) -> VllmLog:
        return parse_vllm_log(log)

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


def _number(field: str, text: str, kind: type) -> int | float:
    """One number of a vLLM log within ``LOG_LIMITS[field]`` (``kvplan.engines.logs.number``)."""
    return number(field, text, kind, "vLLM", LOG_LIMITS[field])


def parse_vllm_log(log: str | bytes) -> VllmLog:
    """Read the capacity lines of a vLLM start-up log.

    Colour codes and any prefix (``(EngineCore_DP0 pid=123) INFO 11-29 10:00:00 [...]``) are
    ignored, as are lines that match nothing. Several ranks' lines keep the smallest capacity
    (vLLM's scheduler sizes every rank's pool to the minimum block count: ``get_kv_cache_configs``
    takes the minimum over workers) — available memory, blocks, and the "GPU KV cache size" with the
    concurrency on the same rank's line — and the largest "Model loading took". Every release's
    format is read (V1 and the V0 profiling lines). No capacity line at all → ``calibrate.no_lines``.
    """
    text = as_text(log)
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
                              decimals(m.group(1))))
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
                capacities.append((tokens, concurrency, decimals(m.group(2))))
            else:
                capacities.append((-1, concurrency, decimals(m.group(2))))
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
        gib, places = min(available)
        found.update(available_kv_gib=gib, available_kv_decimals=places)
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
    if (version := find_version(text, VERSION_LINES)) is not None:
        found.update(version=version[0], version_line=version[1])
    for pattern in _MODEL_NAME:
        if m := pattern.search(text):
            found["model_name"] = m.group(1)
            break
    if m := _ARCHITECTURE.search(text):
        found["architecture"] = m.group(1)
    if m := _GENERATION.search(text):
        found["generation"] = "V1" if m.group(1) else "V0"
    elif _V0_LINES.search(text):
        found["generation"] = "V0"
    return VllmLog(**found, logged_terms=terms, ranks=len(available), lines_matched=matched)


def log_lines(result: PoolAnswer) -> tuple[str, ...]:
    """The capacity lines vLLM prints for this pool (``v1/core/kv_cache_utils.py``
    ``_report_kv_cache_config``): "GPU KV cache size: N tokens" and "Maximum concurrency for L
    tokens per request: X.XXx"."""
    return (f"GPU KV cache size: {result.kv_pool_tokens:,} tokens",
            f"Maximum concurrency for {result.tokens:,} tokens per request: {result.max_concurrency:.2f}x")
