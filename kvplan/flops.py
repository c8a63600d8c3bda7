"""FLOPs and transient activations of one forward: the arithmetic the serving analyses share.

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

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from kvplan.arch import MLA, Attention, Kind, ModelArch, NoCache, Recurrent
from kvplan.config_import import mixer_params
from kvplan.dtypes import get_dtype
from kvplan.errors import KVPlanError

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
    kind: Kind = Kind.FULL
    window: int | None = None

    def ctx_at(self, pos: np.ndarray) -> np.ndarray:
        """Context one query at ``pos`` reads (``Kind.context_at``: the layer's window rule)."""
        return self.kind.context_at(self.window, pos)

    def ctx_sum(self, t: np.ndarray) -> np.ndarray:
        """``Σ_{p=1..T} ctx(p)`` in closed form (``Kind.context_sum``)."""
        return self.kind.context_sum(self.window, t)


@lru_cache(maxsize=64)
def layer_flops(arch: ModelArch) -> tuple[LayerFlops, ...]:
    """Per-layer token costs from the architecture (module docstring formulas), once per model."""
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
            out.append(LayerFlops(proj + mlp, coeff, layer.cache_kind, layer.window))
        elif isinstance(layer, Recurrent):
            proj = 2 * mixer_params(layer, arch) + 4 * layer.ssm_elements
            # a parallel mixer (Falcon-H1) shares its decoder layer's MLP with the attention entry
            out.append(LayerFlops(proj + (0 if arch.parallel_mixers else mlp), 0, Kind.RECURRENT))
        elif isinstance(layer, NoCache):
            proj = 2 * h * d * heads * 2  # Q and O; K/V reused from another layer
            out.append(LayerFlops(proj + mlp, 4 * heads * d, Kind.FULL))
    return tuple(out)


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
    for lf, n in Counter(layer_flops(arch)).items():  # identical layers once, times their count
        decode = lf.dense + lf.attn_coeff * lf.ctx_at(pos)
        prefill = lf.dense * p + lf.attn_coeff * lf.ctx_sum(p_arr)[0]
        cached = cached + n * np.where(k == 0, prefill, decode)
        nocache = nocache + n * (lf.dense * pos + lf.attn_coeff * lf.ctx_sum(pos))
    return cached, nocache


def prefill_decode_flops(arch: ModelArch, prompt_tokens: int, position: int) -> tuple[float, float]:
    """(FLOPs of one prefill of ``P`` tokens, FLOPs of one decode token at ``position``): the same
    sums as ``step_flops`` steps 0 and 1, with identical layers counted once."""
    if prompt_tokens < 1 or position < 1:
        raise KVPlanError("value.range", field="tokens", low=1, high=MAX_NEW_TOKENS, value=min(
            prompt_tokens, position))
    head = 2 * arch.hidden_size * arch.vocab_size
    prefill, decode = float(head), float(head)
    p, pos = np.asarray([prompt_tokens]), np.asarray([position])
    for lf, count in Counter(layer_flops(arch)).items():
        prefill += count * float(lf.dense * prompt_tokens + lf.attn_coeff * lf.ctx_sum(p)[0])
        decode += count * float(lf.dense + lf.attn_coeff * lf.ctx_at(pos)[0])
    return prefill, decode


def request_flops(arch: ModelArch, prompt_tokens: int, new_tokens: int) -> float:
    """FLOPs of one whole request (prefill of ``P`` plus ``N − 1`` decode steps), closed form.

    The prefill's positions ``1…P`` and the decode positions ``P+1…P+N−1`` together process every
    position ``1…P+N−1`` once, so per layer ``dense · (P+N−1) + attn_coeff · Σ_{p≤P+N−1} ctx(p)``,
    plus the LM head ``2·h·V`` per step (``N`` steps): the sum of ``step_flops``' cached steps.
    """
    if prompt_tokens < 1 or not 1 <= new_tokens <= MAX_NEW_TOKENS:
        raise KVPlanError("value.range", field="new tokens", low=1, high=MAX_NEW_TOKENS,
                          value=new_tokens)
    last = prompt_tokens + new_tokens - 1
    total = 2 * arch.hidden_size * arch.vocab_size * new_tokens
    t = np.asarray([last])
    for lf, count in Counter(layer_flops(arch)).items():
        total += count * (lf.dense * last + lf.attn_coeff * int(lf.ctx_sum(t)[0]))
    return float(total)


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


