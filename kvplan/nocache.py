"""What the KV cache buys: FLOPs, time and memory of a generation with and without it.

The FLOPs of each step come from ``kvplan.flops`` (formula and worked example there); memory from
the HF engine's rules (``kvplan.engines.hf``): dynamic, windowed, quantized (``QuantizedCacheModel``),
offloaded and static caches.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvplan.arch import ModelArch
from kvplan.capacity import weight_bytes, weights_read_bytes
from kvplan.engines import HF_DYNAMIC, HF_STATIC, EngineSettings, QuantizedCacheModel
from kvplan.errors import KVPlanError
from kvplan.flops import FORMULA, step_flops, transient_bytes
from kvplan.presets import GPU
from kvplan.serving import quantized_dtype


def compare(arch: ModelArch, gpu: GPU, prompt_tokens: int, new_tokens: int,
            kv_dtype: str = "bf16", weight_dtype: str | None = None,
            link_gbps: float | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Cumulative FLOPs, lower-bound time and peak GPU memory vs ``N`` for each cache option.

    Step time ≥ max(FLOPs / peak bf16, bytes read / HBM bandwidth[, offloaded bytes / host link]).
    Bytes read per step: weights (MoE: active) plus the KV held before the step (no cache: none).
    Peak memory = weights + KV held + transient activations of the step, maximised over steps.
    Options: no cache, full cache (every layer keeps every token), windowed (DynamicCache with
    the model's windows, if any), quantized int4 (full-attention models only), offloaded, static
    (``max_cache_len = P + N``).
    """
    cached_f, nocache_f = step_flops(arch, prompt_tokens, new_tokens)
    k = np.arange(new_tokens, dtype=np.int64)
    n = k + 1
    peak = gpu.bf16_tflops * 1e12
    bw = gpu.bandwidth_tbps * 1e12
    w_res = weight_bytes(arch, weight_dtype)
    w_read = weights_read_bytes(arch, weight_dtype)
    after = prompt_tokens + k  # tokens held after step k (last new token is never fed)
    before = np.where(k == 0, 0, after - 1)
    processed = np.where(k == 0, prompt_tokens, 1)
    act_cached = transient_bytes(arch, processed)
    view = HF_DYNAMIC.view(arch, kv_dtype)
    states = view.state_bytes
    per_tok_full = view.token_bytes
    notes: list[str] = [FORMULA, "time and memory are lower bounds (peak FLOPS and bandwidth, "
                                 "perfect overlap, flash attention)"]
    frames = []

    def add(option: str, flops: np.ndarray, read: np.ndarray, mem: np.ndarray,
            transfer: np.ndarray | None = None, kv: np.ndarray | None = None) -> None:
        compute_s = flops / peak
        memory_s = read / bw
        step = np.maximum(compute_s, memory_s)
        if transfer is not None:
            step = np.maximum(step, transfer)
        frames.append(pd.DataFrame({
            "option": option, "new_tokens": n, "flops": np.cumsum(flops),
            "time_s": np.cumsum(step), "compute_bound_s": np.cumsum(compute_s),
            "memory_bound_s": np.cumsum(memory_s),
            "transfer_s": np.cumsum(transfer) if transfer is not None else 0.0,
            "peak_memory_bytes": np.maximum.accumulate(mem),
            "kv_bytes": kv if kv is not None else np.zeros(new_tokens)}))

    act_nocache = transient_bytes(arch, after)
    add("no cache", nocache_f, np.full(new_tokens, float(w_read)), w_res + act_nocache)

    full_after = (after * per_tok_full + states).astype(np.float64)
    full_before = (before * per_tok_full + states).astype(np.float64)
    add("full cache", cached_f, w_read + full_before, w_res + full_after + act_cached,
        kv=full_after)
    if arch.has_windows:
        held_after = view.held_bytes(after).astype(np.float64)
        held_before = view.held_bytes(before).astype(np.float64)
        add("windowed (DynamicCache)", cached_f, w_read + held_before,
            w_res + held_after + act_cached, kv=held_after)
        notes.append("full cache = every layer keeps every token; windowed = the model's "
                     "sliding/chunked layers capped as DynamicCache does")
    try:
        quant = QuantizedCacheModel.of(arch, quantized_dtype(4))
    except KVPlanError:
        quant = None
        notes.append("quantized int4 skipped: transformers' QuantizedCache refuses models with "
                     "sliding, chunked or linear-attention layers")
    if quant is not None:
        gen = np.maximum(after - prompt_tokens, 0)
        resid = np.minimum(gen % quant.residual_length, after)
        q_after = quant.held_bytes(after, resid).astype(np.float64)
        q_before = np.where(k == 0, 0.0, q_after - per_tok_full)
        add("quantized int4", cached_f, w_read + np.maximum(q_before, 0),
            w_res + q_after + quant.transient_bytes(after) + act_cached, kv=q_after)
        notes.append(f"quantized int4: residual_length {quant.residual_length} in full precision; "
                     "each update materialises one layer's history in full precision (counted in "
                     "memory)")
    link = link_gbps if link_gbps is not None else (gpu.host_link_gbps or 0.0)
    if link > 0:
        biggest = max((r.bytes_per_token for r in view.rules), default=0)
        off_tok = view.token_bytes
        transfer = before * off_tok / (link * 1e9)
        gpu_kv = (2 * after * biggest + states).astype(np.float64)
        add("offloaded", cached_f, w_read + full_before, w_res + gpu_kv + act_cached, transfer,
            kv=gpu_kv)
        notes.append(f"offloaded: all attention layers cross the {link:g} GB/s host link once "
                     "per step; GPU keeps 2 layers (current + prefetched)")
    max_len = prompt_tokens + new_tokens
    static_bytes = float(HF_STATIC.view(arch, kv_dtype,
                                        EngineSettings(max_cache_len=max_len)).held_bytes(np.asarray([1]))[0])
    add("static", cached_f, np.full(new_tokens, w_read + static_bytes),
        w_res + static_bytes + act_cached, kv=np.full(new_tokens, static_bytes))
    notes.append(f"static: max_cache_len = P + N = {max_len:,} pre-allocated; attention reads "
                 "every slot (masked)")
    return pd.concat(frames, ignore_index=True), notes
