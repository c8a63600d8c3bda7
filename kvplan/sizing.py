"""KV-cache bytes for a model, engine, dtype, length and batch — one number and vectorised sweeps.

``kv_bytes = batch × Σ_rules layers × (tokens_held(T) × bytes_per_token + state_bytes)``, where
each engine's rule (``kvplan.engines``) says how many tokens a layer holds; the per-token bytes
are ``n_kv_heads × (vec(head_dim_k) + vec(head_dim_v))`` (``kvplan.dtypes`` for ``vec``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from kvplan.engines import Engine, EngineSettings, EngineView

if TYPE_CHECKING:
    import pandas as pd

    from kvplan.arch import ModelArch
    from kvplan.plan import Plan

MAX_TOKENS = 100_000_000
MAX_BATCH = 10_000_000


class KindBreakdown(BaseModel):
    """One layer kind's share of the cache (whole batch)."""

    kind: str
    layers: int
    bytes_per_token_per_layer: int
    tokens_held_per_layer: int
    bytes: int
    reserved_bytes: int
    note: str = ""


class KVResult(BaseModel):
    """The cache of ``batch`` sequences of ``tokens`` tokens, for one engine and dtype (one rank)."""

    model: str
    engine: str
    engine_label: str
    kv_dtype: str
    tokens: int
    batch: int
    kv_bytes: int
    reserved_bytes: int
    kv_bytes_per_token: int | float
    layers: dict[str, KindBreakdown]
    engine_release: str = ""
    block_size: int | None = None
    notes: list[str] = []


def kv_cache(plan: Plan) -> KVResult:
    """Exact KV bytes held by ``plan.query.users`` sequences of ``plan.query.tokens`` tokens under the
    plan's engine, KV dtype and settings, with a per-kind breakdown (one rank).

    ``reserved_bytes`` is what the engine sets aside (vLLM: whole block ids across its groups).
    """
    tokens, batch = plan.query.tokens, plan.query.users
    view = plan.specs
    result = result_from_view(plan.engine, view, plan.arch.name, tokens, batch)
    pooled = plan.engine.per_request_reserved_bytes(plan.arch, view, plan.query.kv_dtype, plan.settings,
                                                    tokens, None)
    if pooled is not None:
        reserved, notes = pooled
        result = result.model_copy(update={"reserved_bytes": reserved * batch,
                                           "notes": [*result.notes, *notes]})
    return result


def result_from_view(engine: Engine, view: EngineView, model: str, tokens: int, batch: int) -> KVResult:
    """The ``KVResult`` of ``batch`` sequences of ``tokens`` tokens from ``engine``'s cache specs."""
    t = np.asarray([tokens], dtype=np.int64)
    kinds: dict[str, KindBreakdown] = {}
    for rule in view.rules:
        held = int(rule.held_bytes(t)[0]) * batch
        reserved = int(rule.reserved_bytes(t)[0]) * batch
        tokens_held = int(rule.held_tokens(t)[0])
        key: str = rule.kind
        if key in kinds and kinds[key].bytes_per_token_per_layer != rule.bytes_per_token:
            key = f"{rule.kind} ({rule.bytes_per_token:,} B per token)"  # e.g. a drafter's layers
        previous = kinds.get(key)
        if previous is None:
            kinds[key] = KindBreakdown(
                kind=rule.kind, layers=rule.layers, bytes_per_token_per_layer=rule.bytes_per_token,
                tokens_held_per_layer=tokens_held, bytes=held, reserved_bytes=reserved,
                note=rule.note)
        else:
            kinds[key] = previous.model_copy(update={
                "layers": previous.layers + rule.layers, "bytes": previous.bytes + held,
                "reserved_bytes": previous.reserved_bytes + reserved})
    total = sum(k.bytes for k in kinds.values())
    per_seq = total // batch if batch else 0
    per_token = per_seq / tokens if tokens else 0.0
    return KVResult(
        model=model, engine=view.engine, engine_label=engine.label, engine_release=engine.release,
        kv_dtype=view.dtype.name, tokens=tokens, batch=batch, kv_bytes=total,
        reserved_bytes=sum(k.reserved_bytes for k in kinds.values()),
        kv_bytes_per_token=int(per_token) if per_token == int(per_token) else per_token,
        layers=kinds, block_size=view.block_size, notes=list(view.notes))


def full_length_bytes_per_token(plan: Plan) -> int:
    """Bytes one token adds while every layer still grows (before any window caps it): the model on
    one unsplit rank with the engine's default settings, whatever the plan's layout."""
    return token_bytes_of(plan.engine, plan.arch, plan.query.kv_dtype)


def token_bytes_of(engine: Engine, arch: ModelArch, kv_dtype: str) -> int:
    """``full_length_bytes_per_token`` for an engine object, model and KV dtype."""
    return engine.view(arch, kv_dtype, engine.resolve_settings(EngineSettings(), 1)).token_bytes


INT64_MAX = np.iinfo(np.int64).max


def token_grid(tokens: int, low: int, high: int, points: int, log: bool = True) -> np.ndarray:
    """Context lengths to plot or tabulate: ``points`` lengths from ``low`` to ``high`` (log- or
    linearly spaced, rounded to whole tokens), plus the chosen length ``tokens``, sorted, unique."""
    grid = np.geomspace(low, high, points) if log else np.linspace(low, high, points)
    return np.unique(np.append(np.round(grid).astype(np.int64), int(tokens)))


def exact_outer(per_sequence: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """``per_sequence ⊗ batch`` flattened, in int64 — or in exact Python ints when int64 would wrap."""
    top_seq = int(np.max(per_sequence, initial=0))
    top_batch = int(np.max(batch, initial=0))
    if top_seq * top_batch <= INT64_MAX:
        return np.multiply.outer(per_sequence, batch).ravel()
    return np.multiply.outer(per_sequence.astype(object), batch.astype(object)).ravel()


def sweep(plan: Plan, tokens: Sequence[int] | np.ndarray, batch: Sequence[int] | np.ndarray = (1,),
          kv_dtypes: Iterable[str] = ("bf16",)) -> pd.DataFrame:
    """Vectorised grid over tokens × batch × dtype under the plan's engine and settings (resolved at
    the plan's length): held and reserved bytes.

    One numpy evaluation per dtype over the whole tokens array; batch is an outer product.
    """
    import pandas as pd  # lazy: keeps ``import kvplan.sizing`` light
    t = np.asarray(tokens, dtype=np.int64).ravel()
    b = np.asarray(batch, dtype=np.int64).ravel()
    frames = []
    for dtype in kv_dtypes:
        view = plan.engine.view(plan.arch, dtype, plan.settings)
        held = exact_outer(view.held_bytes(t), b)
        reserved = exact_outer(view.reserved_bytes(t), b)
        frames.append(pd.DataFrame({
            "engine": plan.query.engine, "kv_dtype": view.dtype.name,
            "tokens": np.repeat(t, b.size), "batch": np.tile(b, t.size),
            "kv_bytes": held, "reserved_bytes": reserved,
        }))
    return pd.concat(frames, ignore_index=True)


def pool_reserved(plan: Plan, tokens: Sequence[int] | np.ndarray, users: int) -> np.ndarray:
    """Bytes the engine's pool sets aside on one GPU for ``users`` requests of each length — the
    figure ``capacity.fit`` compares with the KV budget (``KVPool.per_request_bytes``: vLLM whole
    block ids of the widest group, ``v1/core/kv_cache_utils.py``; SGLang/TensorRT-LLM/HF their
    pools), exact Python ints past int64. Needs the plan's accelerator."""
    t = np.asarray(tokens, dtype=np.int64).ravel()
    return exact_outer(np.asarray(plan.pool.per_request_bytes(t)), np.asarray([users], dtype=np.int64))


def sweep_by_kind(plan: Plan, tokens: Sequence[int] | np.ndarray) -> pd.DataFrame:
    """Held bytes per layer kind of ``plan.query.users`` sequences over a tokens array (for stacked
    charts): tokens × kind."""
    import pandas as pd
    t = np.asarray(tokens, dtype=np.int64).ravel()
    columns: dict[str, np.ndarray] = {}
    for rule in plan.specs.rules:
        columns[rule.kind] = columns.get(rule.kind, 0) + exact_outer(rule.held_bytes(t),
                                                                     np.asarray([plan.query.users]))
    frame = pd.DataFrame(columns)
    frame.insert(0, "tokens", t)
    return frame
