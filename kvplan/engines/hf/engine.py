"""HF transformers caches: ``DynamicCache`` (5.15+ and ≤ 5.14) and ``StaticCache``.

Source: transformers 5.x ``src/transformers/cache_utils.py``. Full layers keep every token;
``DynamicSlidingWindowLayer`` keeps ``W − 1`` tokens (chunked layers reuse it with
``W = attention_chunk_size``); MLA caches the latent (5.15+) or expanded per-head K/V (≤ 5.14);
linear-attention layers keep the full conv kernel and an fp32 recurrent state (Gated DeltaNet);
Falcon new-arch caches K/V broadcast to all heads. ``QuantizedCache`` (sub-16-bit formats) accepts
only models whose layers are all full attention. No pool: a request costs its cache bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kvplan.arch import MLA, Attention, Kind, LayerSpec, ModelArch
from kvplan.dtypes import KVDType
from kvplan.engines.base import Engine, EngineView, KVPool, Release, ViewShape
from kvplan.engines.hf.weights import hf_loading_rules
from kvplan.engines.kinds import (
    STATIC_KINDS,
    TOKEN_KINDS,
    CacheRule,
    TokenLayout,
    kind_token_bytes,
    layer_window,
)
from kvplan.engines.settings import EngineSettings
from kvplan.errors import KVPlanError

if TYPE_CHECKING:
    from kvplan.engines.reserve import Reserve
    from kvplan.presets import GPU
    from kvplan.weights import LoadingRules

#: transformers ``QuantizedCache`` default ``residual_length`` (``cache_utils.py``).
QUANTIZED_RESIDUAL_LENGTH = 128


def quantized_cache_allowed(arch: ModelArch) -> bool:
    """``QuantizedCache`` "is only supported for models with only full attention layers"
    (``cache_utils.py``): no sliding, chunked or linear-attention (recurrent) layer."""
    return not any(layer.kind.windowed or layer.kind.holds_state for layer in arch.distinct_layers())


#: The one modelled release of each HF engine (``cache_utils.py`` of that transformers release).
HF_5_15 = Release(key="5.15", name="transformers 5.15+",
                  changes="5.15: ``DynamicLayer`` stores an MLA layer's latent and rope key as K and V "
                          "(``cache.update(kv_nope, k_rot)``) instead of expanded per-head K and V")
HF_5_14 = Release(key="5.14", name="transformers ≤ 5.14",
                  changes="≤ 5.14 (and 4.x): MLA caches expanded per-head K and V")


class HFDynamic(Engine):
    """transformers 5.15+ ``DynamicCache``."""

    engine_id = "hf"
    label = "HF transformers DynamicCache (5.15+)"
    short = "HF dynamic"
    releases: ClassVar[tuple[Release, ...]] = (HF_5_15,)

    def check_dtype(self, arch: ModelArch, dtype: KVDType) -> None:
        if dtype.bits < 16 and not quantized_cache_allowed(arch):
            raise KVPlanError("engine.dtype", engine=self.id, dtype=dtype.name,
                              why="transformers' QuantizedCache only supports models with only full "
                                  "attention layers")

    #: ``DynamicLayer`` / ``DynamicSlidingWindowLayer`` for every attention kind, ``LinearAttentionLayer``
    #: states.
    specs: ClassVar[dict[Kind, type[CacheRule]]] = TOKEN_KINDS
    #: transformers' ``tp_plan`` shards k/v projections colwise like vLLM over the heads it caches
    #: (``hf_cached_heads``: Falcon new-arch broadcasts K/V to every query head); 5.15+
    #: ``cache.update(kv_nope, k_rot)`` stores the MLA latent and rope key as K and V;
    #: ``DynamicIndexedLayer`` adds the indexer keys in the cache dtype; ``LinearAttentionLayer``
    #: keeps conv ``[C, kernel]`` (full kernel) in the model dtype and the recurrent state in fp32,
    #: unsharded (``lazy_initialization`` stores the state the mixer hands it: Gated DeltaNet's fla
    #: kernels and the Mamba/Mamba-2 scans return fp32 — measured for every family in
    #: ``tests/fixtures/conformance``).
    layout: ClassVar[TokenLayout] = TokenLayout(
        hf_heads=True, mla="split", indexer="cache_dtype", shard_state=False, conv_full_kernel=True,
        ssm_dtype="fp32", reads_config_ssm_dtype=False)

    def spec_params(self, kind: Kind, layer: LayerSpec,
                    shape: ViewShape) -> tuple[Kind, dict[str, Any]]:
        """``DynamicSlidingWindowLayer`` keeps the last ``W − 1`` tokens of windowed layers."""
        if kind.holds_state:
            return kind, {}
        window = layer_window(layer)
        return kind, {"window": window, "cap": window - 1 if window else None,
                      "note": f"keeps the last W-1 = {window - 1} tokens" if window
                      else "keeps every token"}

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str], reserve: Reserve | None = None) -> KVPool:
        view = self.stage_view(arch, kv_dtype, settings, notes)
        return BytePool(view, max(min(budgets), 0), static=False)

    def loading_rules(self, gpu: GPU | None) -> LoadingRules:
        """``kvplan.engines.hf.weights.hf_loading_rules`` (assumed equal to vLLM v0.33's scale rules)."""
        return hf_loading_rules(self, gpu)


class HFLegacy(HFDynamic):
    """transformers ≤ 5.14 (and 4.x): MLA caches expanded per-head K and V."""

    engine_id = "hf-legacy"
    label = "HF transformers DynamicCache (≤5.14: MLA expanded)"
    short = "HF dynamic (≤5.14)"
    releases: ClassVar[tuple[Release, ...]] = (HF_5_14,)

    #: ≤ 5.14: expanded ``H × (qk_nope + qk_rope)`` keys and ``H × v_head_dim`` values.
    layout: ClassVar[TokenLayout] = replace(HFDynamic.layout, mla="expanded")


class HFStatic(HFDynamic):
    """transformers ``StaticCache``: pre-allocates ``max_cache_len`` (windows ``min(W, max_cache_len)``)."""

    engine_id = "hf-static"
    label = "HF transformers StaticCache"
    short = "HF static"
    releases: ClassVar[tuple[Release, ...]] = (HF_5_15,)
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        "max_cache_len": ("max_cache_len (tokens)", "the context length")}

    def check_dtype(self, arch: ModelArch, dtype: KVDType) -> None:
        """StaticCache has no quantized variant check in kvplan's model (as before)."""

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """``generate()`` sizes ``max_cache_len`` to the request: default = the context length."""
        if settings.max_cache_len is None:
            return settings.model_copy(update={"max_cache_len": max(tokens, 1)})
        return settings

    specs: ClassVar[dict[Kind, type[CacheRule]]] = STATIC_KINDS

    def spec_params(self, kind: Kind, layer: LayerSpec,
                    shape: ViewShape) -> tuple[Kind, dict[str, Any]]:
        """Pre-allocated at ``max_cache_len`` (``StaticRule.for_layer``: ``static_slots``)."""
        if kind.holds_state:
            return kind, {}
        window = layer_window(layer)
        return kind, {"window": window, "max_cache_len": shape.settings.max_cache_len or 0,
                      "note": "pre-allocated max_cache_len"
                              + (" (window: min(W, max_cache_len))" if window else "")}

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str], reserve: Reserve | None = None) -> KVPool:
        view = self.stage_view(arch, kv_dtype, settings, notes)
        return BytePool(view, max(min(budgets), 0), static=True)


class BytePool(KVPool):
    """HF transformers: no pool; each request costs its cache bytes (``StaticCache``: pre-allocated
    with ``max_cache_len = L``)."""

    def __init__(self, view: EngineView, budget: int, static: bool) -> None:
        self.view, self.capacity, self.static = view, budget, static
        self.per_token = view.token_bytes

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        L = np.asarray(L, dtype=np.int64)
        if not self.static:
            return self.view.reserved_bytes(L)
        total = np.zeros(L.shape, dtype=np.int64)
        for rule in self.view.rules:
            total = total + rule.static_bytes(L)
        return total

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        per = self.per_request_bytes(L)
        return np.where(per > 0, self.capacity // np.maximum(per, 1), 0)

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        per = self.per_request_bytes(L)
        return np.where(per > 0, self.capacity / np.maximum(per, 1), 0.0)

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``max(min budget, 0) // bytes per request`` (0 when a request costs nothing)."""
        budget = np.maximum(np.asarray(budgets, dtype=np.int64).min(axis=1), 0)
        per = int(self.per_request_bytes(np.asarray([L]))[0])
        return budget // per if per > 0 else np.zeros(budget.shape, dtype=np.int64)

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.capacity // self.per_token if self.per_token else 0)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self.per_request_bytes(L).astype(object) * users  # exact: may pass int64

    def formulas(self, L: int) -> dict[str, str]:
        per = int(self.per_request_bytes(np.asarray([L]))[0])
        n = self.capacity // per if per else 0
        return {"max_requests": f"floor({self.capacity:,} / {per:,} B per request) = {n:,}"}


@dataclass(frozen=True)
class QuantizedCacheModel:
    """transformers ``QuantizedCache`` against the unquantized ``DynamicCache`` of the same model.

    The prefill is quantized; later tokens sit in a full-precision residual that is re-quantized when
    it reaches ``residual_length`` (``cache_utils.py`` ``QuantizedLayer.update``). ``q``/``f``:
    bytes per token of the quantized / full-precision cache, ``f_layer`` one layer's full-precision
    bytes per token (each update materialises one layer's history in full precision).
    """

    quant_token_bytes: int
    full_token_bytes: int
    layer_token_bytes: int
    state_bytes: int
    residual_length: int = QUANTIZED_RESIDUAL_LENGTH

    @classmethod
    def of(cls, arch: ModelArch, quant: KVDType,
           residual_length: int = QUANTIZED_RESIDUAL_LENGTH) -> QuantizedCacheModel:
        """Refuses models ``QuantizedCache`` refuses (``quantized_cache_allowed``)."""
        if not quantized_cache_allowed(arch):
            raise KVPlanError("engine.dtype", engine="hf", dtype=quant.name,
                              why="transformers' QuantizedCache only supports models with only full "
                                  "attention layers")
        engine = HFDynamic()
        full = engine.view(arch, arch.model_dtype)
        attention = [r for r in full.rules if r.token_bytes and isinstance(r.spec, Attention | MLA)]
        q_tok = sum(r.layers * kind_token_bytes(r.kind, r.spec, quant, 1, engine.layout)
                    for r in attention if r.spec is not None)
        per_layer: dict[LayerSpec, int] = {}  # one layer's caches (a DSA layer: latent + indexer)
        for r in attention:
            if r.spec is not None:
                per_layer[r.spec] = per_layer.get(r.spec, 0) + r.bytes_per_token
        return cls(q_tok, full.token_bytes, max(per_layer.values(), default=0), full.state_bytes,
                   residual_length)

    def held_bytes(self, tokens: np.ndarray, residual: np.ndarray) -> np.ndarray:
        """``q·(T − r) + f·r + states`` with ``r`` tokens in the full-precision residual."""
        t = np.asarray(tokens, dtype=np.int64)
        return (t - residual) * self.quant_token_bytes + residual * self.full_token_bytes \
            + self.state_bytes

    def worst_residual(self, tokens: np.ndarray) -> np.ndarray:
        """Largest residual over a context of ``T``: ``min(T, R − 1)``."""
        return np.minimum(np.asarray(tokens, dtype=np.int64), self.residual_length - 1)

    def transient_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """One layer's history in full precision, returned by every update: ``f_layer · T``."""
        return np.asarray(tokens, dtype=np.int64) * self.layer_token_bytes
