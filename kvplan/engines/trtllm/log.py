"""TensorRT-LLM's start-up log: the KV-cache lines it prints, read into a ``TrtllmLog``
(``parse_trtllm_log``, reached as ``TrtLlm.parse_log``; no calibration of them yet)."""

from __future__ import annotations

import re
from typing import Any

from kvplan.engines.logs import (
    FLOAT,
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

#: TensorRT-LLM: the PyTorch backend's ``_torch/pyexecutor/_util.py`` (``KvCacheCreator``) lines and
#: the C++ ``KVCacheManager`` lines (``allocatePools``, ``calculateMaxNumBlocks``); GiB = 2^30 B.
#: A start-up sizes the pool twice (estimation, then final): the last value is kept.
_TRTLLM: dict[str, re.Pattern[str]] = {
    "total_gpu_memory_gib": re.compile(
        r"(?:device total memory|calculating max tokens in paged kv cache: total:) " + FLOAT + GIB_UNIT),
    "free_gpu_memory_gib": re.compile(r"paged kv cache: total: [\d.]+ GiB, available: " + FLOAT + GIB_UNIT),
    "peak_memory_gib": re.compile(r"Peak memory during memory usage profiling \(torch \+ non-torch\): "
                                  + FLOAT + GIB_UNIT),
    "available_kv_memory_gib": re.compile(r"available KV cache memory when calculating max tokens: "
                                          + FLOAT + GIB_UNIT),
    "fraction": re.compile(r"\bfraction is set " + FLOAT),
    "kv_size_per_token": re.compile(r"\bkv size (?:per token )?is " + INT),
    "estimated_kv_memory_gib": re.compile(r"Estimated max memory in KV cache : " + FLOAT + GIB_UNIT),
    "max_tokens": re.compile(r"Both free_gpu_memory_fraction and max_tokens are set \(to [\d.]+ and "
                             + INT),
    "tokens_per_block": re.compile(r"(?:Number of tokens per block: |tokens per block=)" + INT),
    "primary_blocks": re.compile(r"(?:Number of blocks in KV cache primary pool: |primary blocks=)" + INT),
    "allocated_kv_gib": re.compile(r"Allocated " + FLOAT + r" GiB for max tokens in paged\s+KV cache"),
    "allocated_kv_tokens": re.compile(r"for max tokens in paged\s+KV cache \(" + INT + r"\)"),
    "max_seq_len": re.compile(r"\bmax_seq_len=" + INT + r", max_num_requests"),
    # configure_kv_cache_capacity's split of the profile (PyTorch backend, 1.0 on) and the model
    # engine's weights line (model_engine.py: ``Use {bytes / 1024**3:.2f} GB for model weights``)
    "weights_gib": re.compile(r"\bUse " + FLOAT + r" GB for model weights"),
    "torch_after_load_gib": re.compile(r"Memory used after loading model weights \(inside torch\) in memory "
                                       r"usage profiling: " + FLOAT + GIB_UNIT),
    "outside_after_load_gib": re.compile(r"Memory used after loading model weights \(outside torch\) in "
                                         r"memory usage profiling: " + FLOAT + GIB_UNIT),
    "activation_gib": re.compile(r"Memory dynamically allocated during inference \(inside torch\) in memory "
                                 r"usage profiling: " + FLOAT + GIB_UNIT),
    "non_torch_gib": re.compile(r"Memory used outside torch \(e\.g\., NCCL and CUDA graphs\) in memory "
                                r"usage profiling: " + FLOAT + GIB_UNIT),
    "tmp_kv_gib": re.compile(r"(?:tmp kv_mem|temporary kv cache memory during profiling) "
                             + FLOAT + GIB_UNIT),
}

#: ``tensorrt_llm/__init__.py`` logs "[TensorRT-LLM] TensorRT-LLM version: X" on import.
VERSION_LINES = (re.compile(r"TensorRT-LLM version:?\s*" + VERSION),)


class TrtllmLog(StartupLog):
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
    #: The weights the model engine loaded (printed in GiB, labelled GB).
    weights_gib: float | None = None
    #: torch's allocated bytes before the profiling forward (weights, CUDA-graph pools, buffers).
    torch_after_load_gib: float | None = None
    #: Used outside torch before the profiling forward (the estimation pool included).
    outside_after_load_gib: float | None = None
    #: ``torch_peak_memory − model_bytes``: the profiling forward's activation.
    activation_gib: float | None = None
    #: ``extra_cost``: used outside torch after the profile (the estimation pool included).
    non_torch_gib: float | None = None
    #: The estimation pool (``allocated_bytes``) added back to the free memory.
    tmp_kv_gib: float | None = None

    @classmethod
    def parse(cls, log: str | bytes) -> TrtllmLog:
        return parse_trtllm_log(log)


def parse_trtllm_log(log: str | bytes) -> TrtllmLog:
    """Read the KV-cache lines of a TensorRT-LLM start-up log (hard-wrapped lines are joined by
    whitespace; colour codes ignored). The last value of each line is kept: the final pool, not the
    estimation pass. No such line → ``calibrate.no_engine_lines``."""
    text = as_text(log)
    found: dict[str, Any] = {}
    for field, pattern in _TRTLLM.items():
        raw = [m.group(1) for m in pattern.finditer(text)]
        if raw:
            found[field] = number(field, raw[-1], field_kind(TrtllmLog, field), "TensorRT-LLM")
    if not found:
        raise KVPlanError("calibrate.no_engine_lines", engine="TensorRT-LLM",
                          looked="'Allocated … GiB for max tokens in paged KV cache', "
                                 "'Peak memory during memory usage profiling', 'primary pool'")
    if (version := find_version(text, VERSION_LINES)) is not None:
        found.update(version=version[0], version_line=version[1])
    return TrtllmLog(**found)
