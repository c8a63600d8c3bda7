"""What the KV cache buys: FLOPs, time and memory of a generation with and without it.

A generation of ``P`` prompt tokens then ``N`` new tokens runs ``N`` forward steps: step 0
(the prefill) processes positions ``1…P`` and yields new token 1; step ``k ≥ 1`` yields new token
``k + 1``. With the cache step ``k`` processes only position ``P + k`` against the cached ones;
without it (``use_cache=False``) step ``k`` reprocesses all ``P + k`` positions.

FLOPs per token per layer (multiply-add = 2 FLOPs), with hidden ``h``, ``H`` query heads of
``d``, ``KV`` KV heads, intermediate ``I``, vocabulary ``V``, and ``ctx`` tokens attended:

* projections ``2·h·d·(H + 2·KV) + 2·H·d·h`` (Q, K, V, O);
* attention ``2·2·H·d·ctx`` (scores ``QKᵀ`` and the weighted sum of V);
* MLP ``2·3·h·I`` gated (``2·2·h·I`` plain); MoE ``2·(h·E + n_active·3·h·I_e + n_shared·3·h·I_s)``;
* LM head ``2·h·V`` once per step (``generate`` keeps only the last position's logits).

``ctx`` of position ``p``: full ``p``, sliding ``min(p, W)``, chunked ``((p − 1) mod C) + 1``.
MLA and recurrent mixers count ``2 ×`` their projection parameters (``config_import``) plus,
for MLA, attention over ``qk_nope + qk_rope`` and ``v_head_dim`` per head.

Worked example (the test model: 2 layers, h 64, 4 heads of 16, MHA, I 128 gated, V 100,
P = 3, N = 2): per token per layer projections ``2·64·16·12 + 2·4·16·64 = 24576 + 8192 =
32768``, MLP ``2·3·64·128 = 49152`` → dense 81920; attention ``4·4·16·ctx = 256·ctx``; head
``2·64·100 = 12800`` per step.
Cached: positions processed 1,2,3 (prefill) and 4 → dense ``4·81920·2 = 655360``, attention
``256·(1+2+3+4)·2 = 5120``, head ``2·12800 = 25600``: **686080**.
No cache: step 0 positions 1…3 (ctx sum 6), step 1 positions 1…4 (ctx sum 10) → dense
``7·81920·2 = 1146880``, attention ``256·16·2 = 8192``, head 25600: **1180672**.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvplan.arch import MLA, Attention, ModelArch, NoCache, Recurrent
from kvplan.capacity import weight_bytes
from kvplan.config_import import mixer_params
from kvplan.dtypes import get_dtype
from kvplan.engines import EngineSettings, StateRule, engine_view, layer_token_bytes
from kvplan.errors import KVPlanError
from kvplan.presets import GPU
from kvplan.serving import has_windows, quantized_allowed, quantized_dtype, weights_read_bytes

MAX_NEW_TOKENS = 1_000_000

FORMULA = (
    "per token per layer: projections 2·h·d·(H+2·KV) + 2·H·d·h; attention 2·2·H·d·ctx; "
    "MLP 2·3·h·I (gated) / 2·2·h·I / MoE 2·(h·E + k·3·h·I_e + s·3·h·I_s); LM head 2·h·V per step. "
    "Cached: step 0 processes P positions, step k one position (ctx = P+k). "
    "No cache: step k reprocesses P+k positions (ctx = 1…P+k)."
)


@dataclass(frozen=True)
class LayerFlops:
    """One layer's per-token cost: ``dense`` FLOPs plus ``attn_coeff · ctx``."""

    dense: int
    attn_coeff: int
    kind: str = "full"  # full | sliding | chunked | none
    window: int | None = None


def layer_flops(arch: ModelArch) -> list[LayerFlops]:
    """Per-layer token costs from the architecture (module docstring formulas)."""
    h, heads, d = arch.hidden_size, arch.n_heads, arch.head_dim
    out: list[LayerFlops] = []
    for index, layer in enumerate(arch.layers):
        moe = arch.moe
        if moe is not None and index >= moe.n_dense_layers:
            mlp = 2 * (h * moe.n_experts + moe.n_active * 3 * h * moe.expert_intermediate
                       + moe.n_shared * 3 * h * moe.shared_intermediate)
        else:
            mlp = 2 * (3 if arch.gated_mlp else 2) * h * arch.intermediate_size
        if isinstance(layer, Attention):
            proj = 2 * h * layer.head_dim_k * (heads + layer.n_kv_heads) \
                + 2 * h * layer.head_dim_v * layer.n_kv_heads + 2 * heads * layer.head_dim_v * h
            coeff = 2 * heads * (layer.head_dim_k + layer.head_dim_v)
            out.append(LayerFlops(proj + mlp, coeff, layer.kind, layer.window))
        elif isinstance(layer, MLA):
            proj = 2 * mixer_params(layer, arch)
            coeff = 2 * layer.n_heads * (layer.qk_nope_head_dim + layer.qk_rope_head_dim
                                         + layer.v_head_dim)
            kind = "sliding" if layer.window else "full"
            out.append(LayerFlops(proj + mlp, coeff, kind, layer.window))
        elif isinstance(layer, Recurrent):
            proj = 2 * mixer_params(layer, arch) + 4 * layer.ssm_elements
            out.append(LayerFlops(proj + mlp, 0, "none"))
        elif isinstance(layer, NoCache):
            proj = 2 * h * d * heads * 2  # Q and O; K/V reused from another layer
            out.append(LayerFlops(proj + mlp, 4 * heads * d, "full"))
    return out


def _ctx_at(lf: LayerFlops, pos: np.ndarray) -> np.ndarray:
    if lf.kind == "sliding" and lf.window:
        return np.minimum(pos, lf.window)
    if lf.kind == "chunked" and lf.window:
        return (pos - 1) % lf.window + 1
    return pos


def _ctx_sum(lf: LayerFlops, t: np.ndarray) -> np.ndarray:
    """``Σ_{p=1..T} ctx(p)`` in closed form."""
    tri = t * (t + 1) // 2
    if lf.kind == "sliding" and lf.window:
        w = lf.window
        return np.where(t <= w, tri, w * (w + 1) // 2 + (t - w) * w)
    if lf.kind == "chunked" and lf.window:
        c = lf.window
        q, r = t // c, t % c
        return q * (c * (c + 1) // 2) + r * (r + 1) // 2
    return tri


def step_flops(arch: ModelArch, prompt_tokens: int, new_tokens: int,
               exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs of each of the ``N`` steps, (cached, no cache); object dtype (Python ints) if exact."""
    if prompt_tokens < 1 or not 1 <= new_tokens <= MAX_NEW_TOKENS:
        raise KVPlanError("value.range", field="new tokens", low=1, high=MAX_NEW_TOKENS,
                          value=new_tokens)
    dtype = object if exact else np.float64
    k = np.arange(new_tokens).astype(dtype)
    p = prompt_tokens
    pos = k + p  # position processed by cached step k ≥ 1; total length at no-cache step k
    head = 2 * arch.hidden_size * arch.vocab_size
    cached = np.zeros(new_tokens, dtype=dtype) + head
    nocache = np.zeros(new_tokens, dtype=dtype) + head
    p_arr = np.asarray([p]).astype(dtype)
    for lf in layer_flops(arch):
        decode = lf.dense + lf.attn_coeff * _ctx_at(lf, pos)
        prefill = lf.dense * p + lf.attn_coeff * _ctx_sum(lf, p_arr)[0]
        cached = cached + np.where(k == 0, prefill, decode)
        nocache = nocache + lf.dense * pos + lf.attn_coeff * _ctx_sum(lf, pos)
    return cached, nocache


def generation_flops(arch: ModelArch, prompt_tokens: int, new_tokens: int) -> dict[str, object]:
    """Exact total FLOPs with and without the cache, and the formula (module docstring)."""
    cached, nocache = step_flops(arch, prompt_tokens, new_tokens, exact=True)
    return {"cached": int(sum(cached)), "no_cache": int(sum(nocache)), "formula": FORMULA}


def prefill_flops(arch: ModelArch, prompt_tokens: int) -> float:
    """FLOPs of one prefill of ``P`` tokens (≈ 2 × active params × P + causal attention)."""
    cached, _ = step_flops(arch, prompt_tokens, 1)
    return float(cached[0])


def transient_bytes(arch: ModelArch, tokens: np.ndarray) -> np.ndarray:
    """Largest activations of one forward over ``T`` tokens (flash attention: no score matrix).

    ``T · act · (2·h + max(H·d + KV·(d_k + d_v), m·I_eff))`` with ``m`` = 2 (gated: gate and up
    live together) or 1, ``I_eff`` = ``n_active · I_e`` for MoE; plus fp32 logits of one position.
    Eager attention would add ``H · T²`` scores.
    """
    act = get_dtype(arch.model_dtype).bits // 8
    h = arch.hidden_size
    qkv = arch.n_heads * arch.head_dim + 2 * arch.kv_heads * arch.head_dim
    inter = arch.intermediate_size
    if arch.moe is not None:
        inter = max(inter if arch.moe.n_dense_layers else 0,
                    arch.moe.n_active * arch.moe.expert_intermediate
                    + arch.moe.n_shared * arch.moe.shared_intermediate)
    mlp = (2 if arch.gated_mlp else 1) * inter
    t = np.asarray(tokens, dtype=np.float64)
    return t * act * (2 * h + max(qkv, mlp)) + 4 * arch.vocab_size


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
    view = engine_view(arch, "hf", kv_dtype)
    states = sum(int(r.held_bytes(np.asarray([0]))[0]) for r in view.rules if isinstance(r, StateRule))
    per_tok_full = sum(r.layers * r.bytes_per_token for r in view.rules)
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
    if has_windows(arch):
        held_after = view.held_bytes(after).astype(np.float64)
        held_before = view.held_bytes(before).astype(np.float64)
        add("windowed (DynamicCache)", cached_f, w_read + held_before,
            w_res + held_after + act_cached, kv=held_after)
        notes.append("full cache = every layer keeps every token; windowed = the model's "
                     "sliding/chunked layers capped as DynamicCache does")
    if not quantized_allowed(arch):
        notes.append("quantized int4 skipped: transformers' QuantizedCache refuses models with "
                     "sliding, chunked or linear-attention layers")
    else:
        qd = quantized_dtype(4)
        q_tok = sum(r.layers * layer_token_bytes(r.spec, "hf", qd, 1) for r in view.rules
                    if not isinstance(r, StateRule))
        f_layer = max((r.bytes_per_token for r in view.rules if not isinstance(r, StateRule)),
                      default=0)
        gen = np.maximum(after - prompt_tokens, 0)
        resid = np.minimum(gen % 128, after)
        q_after = ((after - resid) * q_tok + resid * per_tok_full + states).astype(np.float64)
        q_before = np.where(k == 0, 0.0, q_after - per_tok_full)
        add("quantized int4", cached_f, w_read + np.maximum(q_before, 0),
            w_res + q_after + after * f_layer + act_cached, kv=q_after)
        notes.append("quantized int4: residual_length 128 in full precision; each update "
                     "materialises one layer's history in full precision (counted in memory)")
    link = link_gbps if link_gbps is not None else (gpu.host_link_gbps or 0.0)
    if link > 0:
        layers = [r for r in view.rules if not isinstance(r, StateRule)]
        biggest = max((r.bytes_per_token for r in layers), default=0)
        off_tok = sum(r.layers * r.bytes_per_token for r in layers)
        transfer = before * off_tok / (link * 1e9)
        gpu_kv = (2 * after * biggest + states).astype(np.float64)
        add("offloaded", cached_f, w_read + full_before, w_res + gpu_kv + act_cached, transfer,
            kv=gpu_kv)
        notes.append(f"offloaded: all attention layers cross the {link:g} GB/s host link once "
                     "per step; GPU keeps 2 layers (current + prefetched)")
    max_len = prompt_tokens + new_tokens
    static_bytes = float(engine_view(arch, "hf-static", kv_dtype,
                                     EngineSettings(max_cache_len=max_len)).held_bytes(np.asarray([1]))[0])
    add("static", cached_f, np.full(new_tokens, w_read + static_bytes),
        w_res + static_bytes + act_cached, kv=np.full(new_tokens, static_bytes))
    notes.append(f"static: max_cache_len = P + N = {max_len:,} pre-allocated; attention reads "
                 "every slot (masked)")
    return pd.concat(frames, ignore_index=True), notes
