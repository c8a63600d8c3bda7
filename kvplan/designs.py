"""The same model rebuilt with other attention designs, to compare what each costs in KV cache.

Every variant keeps the real model's layer count, hidden size, query heads, K and V head sizes
and weights (``params_total``), so only the attention cache changes. Assumptions (stated in the UI):

* ``mha`` — dense multi-head attention: every attention layer caches all its query heads' K and V
  at the layer's own head sizes (``layer_head_dims``: an MLA layer's K head is
  ``qk_nope_head_dim + qk_rope_head_dim``, its V head ``v_head_dim``, as transformers'
  ``DeepseekV3Attention.forward`` builds them before ``cache.update``), full length.
* ``gqa`` — grouped-query attention with the model's real KV-head count (``ASSUMED_GQA_HEADS`` when
  the model has none, e.g. an MLA model), full length.
* ``swa`` — the GQA variant with every attention layer a sliding window of ``swa_window`` tokens
  (Mistral-7B-v0.1 style; default 4,096).
* ``mla`` — multi-head latent attention caching ``kv_lora_rank + qk_rope_head_dim`` elements per
  token and layer (DeepSeek-V2: 512 + 64).
* ``real`` — the model as configured.

Recurrent and cache-free layers are kept as they are in every variant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from kvplan.arch import MLA, Attention, Kind, LayerSpec, ModelArch
from kvplan.errors import KVPlanError

if TYPE_CHECKING:
    from kvplan.plan import Plan

DEFAULT_SWA_WINDOW = 4096
DEFAULT_MLA_RANK = 512
DEFAULT_MLA_ROPE = 64
ASSUMED_GQA_HEADS = 8
DESIGNS: dict[str, str] = {
    "real": "Real model",
    "mha": "Dense MHA",
    "gqa": "GQA",
    "swa": "Sliding window",
    "mla": "MLA",
    "mla_dp": "MLA, data-parallel attention",
}


def _is_attention(layer: LayerSpec) -> bool:
    return isinstance(layer, Attention | MLA)


def _rebuild(arch: ModelArch, make: Callable[[LayerSpec], LayerSpec], label: str) -> ModelArch:
    distinct = arch.distinct_layers()
    if not any(_is_attention(layer) for layer in distinct):
        raise KVPlanError("config.unsupported", what=f"the {label} variant",
                          detail=f"{arch.name} has no attention layers to rebuild")
    rebuilt = {layer: make(layer) if _is_attention(layer) else layer for layer in distinct}
    canonical: dict[LayerSpec, LayerSpec] = {}  # equal rebuilt specs are one object
    rebuilt = {old: canonical.setdefault(new, new) for old, new in rebuilt.items()}
    layers = tuple(rebuilt[layer] for layer in arch.layers)  # each distinct layer rebuilt once
    return arch.model_copy(update={"layers": layers, "name": f"{arch.name} as {label}"})


def real_gqa_heads(arch: ModelArch) -> int:
    """The model's KV heads over its attention layers, or ``ASSUMED_GQA_HEADS`` when it has none."""
    heads = [layer.n_kv_heads for layer in arch.layers if isinstance(layer, Attention)]
    return max(heads) if heads else min(ASSUMED_GQA_HEADS, arch.n_heads)


def layer_head_dims(layer: LayerSpec) -> tuple[int, int]:
    """(K, V) head sizes of an attention-like layer: an MLA layer's per-head K is
    ``qk_nope_head_dim + qk_rope_head_dim`` and V is ``v_head_dim`` (transformers
    ``modeling_deepseek_v3.py`` ``DeepseekV3Attention.forward``: ``key_states`` concatenates
    ``k_pass`` and ``k_rot``)."""
    if isinstance(layer, MLA):
        return layer.qk_nope_head_dim + layer.qk_rope_head_dim, layer.v_head_dim
    if isinstance(layer, Attention):
        return layer.head_dim_k, layer.head_dim_v
    raise TypeError(f"{type(layer).__name__} has no attention heads")


def _heads_of(arch: ModelArch, layer: LayerSpec) -> int:
    return layer.n_heads if isinstance(layer, MLA) else arch.n_heads


def _attention(layer: LayerSpec, heads: int, kind: Literal[Kind.FULL, Kind.SLIDING] = Kind.FULL,
               window: int | None = None) -> Attention:
    k, v = layer_head_dims(layer)
    return Attention(kind=kind, n_kv_heads=heads, head_dim_k=k, head_dim_v=v, window=window)


def as_mha(arch: ModelArch) -> ModelArch:
    return _rebuild(arch, lambda layer: _attention(layer, _heads_of(arch, layer)), "dense MHA")


def as_gqa(arch: ModelArch, kv_heads: int | None = None) -> ModelArch:
    heads = kv_heads or real_gqa_heads(arch)
    return _rebuild(arch, lambda layer: _attention(layer, min(heads, _heads_of(arch, layer))),
                    f"GQA ({heads} KV heads)")


def as_swa(arch: ModelArch, window: int = DEFAULT_SWA_WINDOW, kv_heads: int | None = None) -> ModelArch:
    heads = kv_heads or real_gqa_heads(arch)
    return _rebuild(arch, lambda layer: _attention(layer, min(heads, _heads_of(arch, layer)),
                                                   Kind.SLIDING, window), f"sliding window {window:,}")


def as_mla(arch: ModelArch, kv_lora_rank: int = DEFAULT_MLA_RANK,
           qk_rope_head_dim: int = DEFAULT_MLA_ROPE) -> ModelArch:
    def make(layer: LayerSpec) -> LayerSpec:
        if isinstance(layer, MLA):
            return layer.model_copy(update={"kv_lora_rank": kv_lora_rank,
                                            "qk_rope_head_dim": qk_rope_head_dim, "window": None})
        k, v = layer_head_dims(layer)
        return MLA(kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim, n_heads=arch.n_heads,
                   qk_nope_head_dim=max(k - qk_rope_head_dim, 0), v_head_dim=v)
    return _rebuild(arch, make, f"MLA ({kv_lora_rank} + {qk_rope_head_dim})")


def variants(arch: ModelArch, swa_window: int = DEFAULT_SWA_WINDOW,
             kv_lora_rank: int = DEFAULT_MLA_RANK,
             qk_rope_head_dim: int = DEFAULT_MLA_ROPE) -> dict[str, ModelArch]:
    """Design id → ModelArch, the real model first."""
    out: dict[str, ModelArch] = {"real": arch}
    builders: dict[str, Callable[[], ModelArch]] = {
        "mha": lambda: as_mha(arch),
        "gqa": lambda: as_gqa(arch),
        "swa": lambda: as_swa(arch, swa_window),
        "mla": lambda: as_mla(arch, kv_lora_rank, qk_rope_head_dim),
    }
    for key, build in builders.items():
        try:
            out[key] = build()
        except KVPlanError:
            continue
    return out


def assumptions(arch: ModelArch, swa_window: int = DEFAULT_SWA_WINDOW,
                kv_lora_rank: int = DEFAULT_MLA_RANK, qk_rope_head_dim: int = DEFAULT_MLA_ROPE,
                tp: int = 1) -> list[str]:
    """One sentence per variant with the values plugged in, and how TP treats each cache."""
    heads = real_gqa_heads(arch)
    has_gqa = any(isinstance(layer, Attention) for layer in arch.layers)
    gqa_basis = "the model's real KV heads" if has_gqa else f"assumed ({ASSUMED_GQA_HEADS} max)"
    first = next((layer for layer in arch.layers if _is_attention(layer)), None)
    k, v = layer_head_dims(first) if first is not None else (arch.head_dim, arch.head_dim)
    mha_heads = _heads_of(arch, first) if first is not None else arch.n_heads
    return [
        f"Dense MHA: {mha_heads} KV heads × (K {k} + V {v}) elements per token on every attention "
        "layer — the model's own K and V head sizes"
        + (" (MLA: qk_nope + qk_rope for K, v_head_dim for V)" if isinstance(first, MLA) else "") + ".",
        f"GQA: {heads} KV heads ({gqa_basis}) × (K {k} + V {v}), full length.",
        f"Sliding window: GQA with every attention layer limited to the last {swa_window:,} tokens.",
        f"MLA: latent of kv_lora_rank {kv_lora_rank} + rope {qk_rope_head_dim} = "
        f"{kv_lora_rank + qk_rope_head_dim} elements per token and layer (DeepSeek-V2 values).",
        f"Tensor parallelism (TP={tp}): MHA/GQA/sliding caches split their KV heads over the TP ranks, "
        "but the MLA latent is one vector per token that every TP rank keeps whole (vLLM "
        "MLAAttentionSpec with one KV head, SGLang MLATokenToKVPool), so per GPU MLA is "
        f"replicated {tp}× and its advantage shrinks as TP grows. DP-attention (SGLang "
        "--enable-dp-attention, vLLM --data-parallel-size with expert parallelism) gives each rank "
        "its own requests instead, so the latent is no longer duplicated: per-GPU capacity for MLA "
        "is then the single-rank figure times the ranks.",
        f"All variants keep the real model's {arch.n_layers} layers and weights "
        f"({arch.params_total:,} parameters); recurrent / cache-free layers are unchanged.",
    ]


def design_table(plan: Plan, swa_window: int = DEFAULT_SWA_WINDOW,
                 kv_lora_rank: int = DEFAULT_MLA_RANK,
                 qk_rope_head_dim: int = DEFAULT_MLA_ROPE) -> pd.DataFrame:
    """Per design: KV bytes per token (full length), KV per request and requests that fit.

    The plan's engine, ``kv_dtype`` and layout apply to every design (``Plan.vary(arch=…)``).
    """
    from kvplan.capacity import fit
    from kvplan.sizing import full_length_bytes_per_token, kv_cache

    query = plan.query
    rows = []
    for key, variant in variants(plan.arch, swa_window, kv_lora_rank, qk_rope_head_dim).items():
        row: dict[str, Any] = {"design": key, "label": DESIGNS[key], "model": variant.name,
                               "kv_dtype": query.kv_dtype, "engine": query.engine, "tokens": query.tokens}
        try:
            row["kv_bytes_per_token"] = full_length_bytes_per_token(plan.model_only(variant))
            row["kv_bytes_at_tokens"] = kv_cache(plan.model_only(variant)).kv_bytes
            result = fit(plan.vary(arch=variant), search_gpus=False)
            row.update(kv_bytes_per_request=result.kv_bytes_per_request,
                       kv_budget_bytes=result.kv_budget_bytes, max_requests=result.max_requests,
                       fits=result.fits, error="")
        except KVPlanError as err:
            row.update(error=str(err))
        rows.append(row)
    rows.extend(_dp_row(plan, swa_window, kv_lora_rank, qk_rope_head_dim))
    frame = pd.DataFrame(rows)
    for column in ("kv_bytes_per_token", "kv_bytes_at_tokens", "kv_bytes_per_request",
                   "kv_budget_bytes", "max_requests"):
        if column not in frame:
            frame[column] = pd.NA
    return frame


def _dp_row(plan: Plan, swa_window: int, kv_lora_rank: int, qk_rope_head_dim: int) -> list[dict[str, Any]]:
    """The MLA design (the real model when it is MLA) on the same GPUs with data-parallel attention:
    ``dp`` = the plan's TP ranks of TP 1, each with its own requests and pool (``FitResult.dp``),
    beside the TP-replicated latent of the ``mla`` row; only for engines with a ``dp`` setting and
    a plan with TP > 1."""
    from kvplan.capacity import fit

    query = plan.query
    if query.tp < 2 or "dp" not in plan.engine.setting_labels or query.pp > 1:
        return []
    arch = plan.arch if plan.arch.is_mla else variants(plan.arch, swa_window, kv_lora_rank,
                                                       qk_rope_head_dim).get("mla")
    if arch is None:
        return []
    dp = query.tp * query.settings.dp
    row: dict[str, Any] = {"design": "mla_dp", "label": DESIGNS["mla_dp"], "model": arch.name,
                           "kv_dtype": query.kv_dtype, "engine": query.engine, "tokens": query.tokens}
    try:
        settings = query.settings.model_copy(update={"dp": dp})
        result = fit(plan.vary(arch=arch, tp=1, settings=settings), search_gpus=False)
        from kvplan.sizing import full_length_bytes_per_token, kv_cache

        row.update(kv_bytes_per_token=full_length_bytes_per_token(plan.model_only(arch)),
                   kv_bytes_at_tokens=kv_cache(plan.model_only(arch)).kv_bytes,
                   kv_bytes_per_request=result.kv_bytes_per_request, kv_budget_bytes=result.kv_budget_bytes,
                   max_requests=result.max_requests, fits=result.fits, error="")
    except KVPlanError as err:
        row.update(error=str(err))
    return [row]
