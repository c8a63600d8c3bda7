"""Cache specs: what one group of identical layers stores on one rank, one class per kind × storage.

As vLLM's ``vllm/v1/kv_cache_interface.py`` gives each ``KVCacheSpec`` its ``page_size_bytes`` and
``max_memory_usage_bytes``, each class here owns, for ``layers`` identical layers: its bytes per token
per layer per rank (``for_layer``, from the byte formulas below and the engine's ``TokenLayout``), the
tokens a sequence of ``T`` tokens *holds*, what the engine *reserves* for a request of up to ``L``
tokens, its page bytes, and its ``describe()``. Each engine declares one table ``Kind → spec class``
(``Engine.specs``; vLLM's is ``PAGED_KINDS``) that the generic build loop (``Engine.build_view``)
reads. Everything is vectorised over numpy token arrays.

Cache kinds are ``kvplan.arch.Kind`` members; ``cache_kinds(layer)`` lists the caches one layer
keeps (an MLA layer of a DSA model: its latent and its indexer keys). Adding a cache kind: a ``Kind``
member (``arch.py``), its bytes (``kind_token_bytes``) and spec class with its table entries here,
and ``spec_params`` of an engine that stores it its own way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Self

import numpy as np

from kvplan.arch import MLA, Attention, Kind, LayerSpec, NoCache, Recurrent
from kvplan.dtypes import KVDType, get_dtype
from kvplan.errors import KVPlanError

VLLM_DEFAULT_BLOCK_SIZE = 16  # vllm/config/cache.py DEFAULT_BLOCK_SIZE


def cdiv(a: np.ndarray | int, b: int) -> np.ndarray:
    """``ceil(a / b)`` in int64."""
    return -(-np.asarray(a, dtype=np.int64) // b)


# ------------------------------------------------------------------ bytes per token / state


@dataclass(frozen=True)
class TokenLayout:
    """How an engine lays out one layer's token (and state): the parameters of the byte formulas.

    ``whole_heads``: ``ceil(nkv / tp)`` heads per rank (TensorRT-LLM ``KVCacheManager``) instead of
    ``max(1, nkv // tp)``; ``hf_heads``: the heads transformers caches (``hf_cached_heads``);
    ``mla``: ``latent`` (one ``kv_lora_rank + qk_rope_head_dim`` vector), ``split`` (latent and rope
    key as two vectors, transformers 5.15+) or ``expanded`` (per-head K/V, transformers ≤ 5.14);
    ``indexer``: ``scaled`` (uint8 + one fp32 scale per 128, vLLM/SGLang) or ``cache_dtype``
    (transformers ``DynamicIndexedLayer``); the state: sharded over TP, conv ``kernel − 1`` or the full
    kernel, the SSM dtype when the config names none (None = the model dtype) and whether the
    config's ``mamba_ssm_cache_dtype`` is read.
    """

    whole_heads: bool = False
    hf_heads: bool = False
    mla: Literal["latent", "split", "expanded"] = "latent"
    indexer: Literal["scaled", "cache_dtype"] = "scaled"
    shard_state: bool = True
    conv_full_kernel: bool = False
    ssm_dtype: str | None = None
    reads_config_ssm_dtype: bool = True


def kv_heads_per_rank(n_kv: int, tp: int) -> int:
    """``max(1, n_kv // tp)`` (vLLM ``ModelConfig.get_num_kv_heads``; SGLang ``get_num_kv_heads``)."""
    if tp > n_kv and tp % n_kv:
        raise KVPlanError("parallel.tp_heads", tp=tp, heads=n_kv)
    if tp <= n_kv and n_kv % tp:
        raise KVPlanError("parallel.tp_heads", tp=tp, heads=n_kv)
    return max(1, n_kv // tp)


def attention_heads(layer: Attention, tp: int, layout: TokenLayout) -> int:
    """K/V heads one rank caches: ``max(1, nkv // tp)`` (vLLM, SGLang; transformers' ``tp_plan``
    over ``hf_cached_heads`` — Falcon new-arch broadcasts K/V before caching), or TensorRT-LLM's
    ``ceil(nkv / tp)`` whole heads (``KVCacheManager.__init__`` / ``get_cache_bytes_per_token``)."""
    heads = (layer.hf_cached_heads or layer.n_kv_heads) if layout.hf_heads else layer.n_kv_heads
    if layout.whole_heads:
        return -(-heads // tp)
    return kv_heads_per_rank(heads, tp)


def attention_token_bytes(layer: Attention, dtype: KVDType, tp: int, layout: TokenLayout) -> int:
    """Bytes of one token's K and V in one layer on one rank: ``heads × (vec(hd_k) + vec(hd_v))``."""
    heads = attention_heads(layer, tp, layout)
    return heads * (dtype.vector_bytes(layer.head_dim_k) + dtype.vector_bytes(layer.head_dim_v))


def mla_token_bytes(layer: MLA, dtype: KVDType, layout: TokenLayout) -> int:
    """MLA latent bytes per token per layer (replicated on every rank; the DSA indexer is its own
    spec, ``dsa_indexer_token_bytes``). ``latent``: one ``kv_lora_rank + qk_rope_head_dim`` vector
    (vLLM, SGLang ``MLAAttentionSpec``, no V); ``fp8_ds_mla`` is fp8 latent + one fp32 scale per 128
    + bf16 rope (656 B for 512 + 64). ``split``: transformers 5.15+ ``cache.update(kv_nope, k_rot)``
    stores the latent and the rope key as K and V. ``expanded``: transformers ≤ 5.14 caches
    ``H × (qk_nope + qk_rope)`` keys and ``H × v_head_dim`` values."""
    if layout.mla == "expanded":
        return layer.n_heads * (dtype.vector_bytes(layer.qk_nope_head_dim + layer.qk_rope_head_dim)
                                + dtype.vector_bytes(layer.v_head_dim))
    if layout.mla == "split":
        return dtype.vector_bytes(layer.kv_lora_rank) + dtype.vector_bytes(layer.qk_rope_head_dim)
    if dtype.name == "fp8_ds_mla":
        return dtype.vector_bytes(layer.kv_lora_rank) + layer.qk_rope_head_dim * 2
    return dtype.vector_bytes(layer.kv_lora_rank + layer.qk_rope_head_dim)


def dsa_indexer_token_bytes(layer: MLA, dtype: KVDType, layout: TokenLayout) -> int:
    """DeepSeek sparse attention (V3.2) indexer keys per token per layer: ``d + d // 128 × 4`` B
    (uint8 + one fp32 scale per 128; vLLM ``models/deepseek_v2.py`` ``DeepseekV32IndexerCache``,
    SGLang alike), or ``vec(d)`` in the cache dtype (transformers ``DynamicIndexedLayer``)."""
    d = layer.indexer_head_dim
    if layout.indexer == "cache_dtype":
        return dtype.vector_bytes(d)
    return d + d // 128 * 4


def layer_state_bytes(layer: Recurrent, model_dtype: KVDType, tp: int, layout: TokenLayout) -> int:
    """Per-sequence state of one recurrent layer on one rank: conv ``C × (kernel − 1)`` in the model
    dtype plus the SSM / delta-rule state (vLLM ``MambaSpec`` shapes, ``mamba_utils.py``; sharded
    over TP when ``tp_shard_unit`` divides; SSM dtype from ``mamba_ssm_cache_dtype``, else the
    engine's default; Mamba-2 groups that TP does not divide are replicated up to tp). transformers
    ``LinearAttentionLayer`` keeps the full conv kernel and an fp32 state, unsharded (``layout``)."""
    shards = tp if layout.shard_state and layer.tp_shard_unit % tp == 0 else 1
    kernel = layer.conv_kernel if layout.conv_full_kernel else layer.conv_kernel - 1
    channels = layer.conv_channels
    if shards > 1 and layer.n_groups and layer.state_size and layer.n_groups % shards:
        # Mamba-2 groups not divisible by TP: replicated up to tp (vLLM mamba_utils.py
        # mamba2_state_shape + extra_groups_for_head_shards: tp − n_groups more groups)
        channels += 2 * (shards - layer.n_groups) * layer.state_size
    conv = (channels // shards) * kernel * model_dtype.bits // 8
    name = (layer.ssm_dtype if layout.reads_config_ssm_dtype else None) or layout.ssm_dtype
    ssm_dtype = get_dtype(name) if name else model_dtype
    return conv + (layer.ssm_elements // shards) * ssm_dtype.bits // 8


def cache_kinds(layer: LayerSpec) -> tuple[Kind, ...]:
    """The caches one layer keeps: its attention kind; an MLA layer's latent (``MLA``, or
    ``SLIDING`` when windowed) and, with a DSA indexer, ``DSA_INDEXER``; a recurrent state."""
    if isinstance(layer, Attention):
        return (layer.kind,)
    if isinstance(layer, MLA):
        return (layer.cache_kind, Kind.DSA_INDEXER) if layer.indexer_head_dim else (layer.cache_kind,)
    if isinstance(layer, Recurrent):
        return (Kind.RECURRENT,)
    return ()


def layer_window(layer: LayerSpec) -> int | None:
    """The window (sliding) or chunk (chunked) of an attention-like layer; None otherwise."""
    return layer.window if isinstance(layer, Attention | MLA) else None


def kind_token_bytes(kind: Kind, layer: LayerSpec, dtype: KVDType, tp: int, layout: TokenLayout) -> int:
    """Bytes per token per layer per rank of ``layer``'s cache of ``kind`` (0 for states)."""
    if isinstance(layer, Attention):
        return attention_token_bytes(layer, dtype, tp, layout)
    if isinstance(layer, MLA):
        if kind is Kind.DSA_INDEXER:
            return dsa_indexer_token_bytes(layer, dtype, layout)
        return mla_token_bytes(layer, dtype, layout)
    return 0


def layer_token_bytes(layer: LayerSpec, dtype: KVDType, tp: int, layout: TokenLayout) -> int:
    """Bytes one token adds to one layer across its caches (latent + indexer for DSA MLA)."""
    if isinstance(layer, Recurrent | NoCache):
        return 0
    return sum(kind_token_bytes(kind, layer, dtype, tp, layout) for kind in cache_kinds(layer))


# ------------------------------------------------------------------ specs


@dataclass(frozen=True)
class CacheRule:
    """Storage of ``layers`` identical layers on one rank; token-granular, keeps every token.

    ``block_size`` is the allocation unit in tokens (1 = token-granular); ``page_bytes`` one
    block of one layer (vLLM ``page_size_bytes``).
    """

    kind: Kind
    layers: int
    bytes_per_token: int
    window: int | None = None
    state_bytes: int = 0
    note: str = ""
    spec: LayerSpec | None = field(default=None, compare=False, repr=False)
    block_size: int = 1

    @classmethod
    def for_layer(cls, kind: Kind, layer: LayerSpec, n: int, dtype: KVDType, tp: int,
                  layout: TokenLayout, **params: Any) -> Self:
        """The spec of ``n`` identical ``layer``s' cache of ``kind`` (``dtype``: the KV format; the
        model dtype for states), its bytes per token from ``kind_token_bytes``; ``params`` are the
        engine's (window, block size, cap, …)."""
        return cls(kind, n, kind_token_bytes(kind, layer, dtype, tp, layout), spec=layer, **params)

    @property
    def page_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def token_bytes(self) -> int:
        """Bytes one more token adds while every layer of the group still grows."""
        return self.layers * self.bytes_per_token

    def describe(self) -> str:
        """Where this cache stops growing, in words."""
        return "grows with every token"

    def static_bytes(self, max_cache_len: np.ndarray | int) -> np.ndarray:
        """Bytes of these layers in a ``StaticCache`` of ``max_cache_len``: ``static_slots`` tokens
        per layer plus the state (transformers pre-allocates at ``max_cache_len``)."""
        return self.layers * (static_slots(max_cache_len, self.window) * self.bytes_per_token
                              + self.state_bytes)

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(tokens, dtype=np.int64)

    def reserved_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return self.held_tokens(tokens)

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        """Allocation units one request of up to ``tokens`` tokens reserves per layer."""
        return cdiv(self.reserved_tokens(tokens), self.block_size)

    def held_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Bytes one sequence of ``tokens`` holds in these layers (steady state)."""
        return self.layers * (self.held_tokens(tokens) * self.bytes_per_token + self.state_bytes)

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Bytes the engine sets aside for one request of up to ``tokens`` tokens."""
        return self.layers * (self.reserved_tokens(tokens) * self.bytes_per_token + self.state_bytes)


@dataclass(frozen=True)
class TokenRule(CacheRule):
    """Dynamic storage: keep ``min(T, cap)`` tokens, rounded up to ``page`` tokens (HF dynamic
    caches; SGLang's token pool)."""

    cap: int | None = None
    page: int = 1

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        if self.cap is not None:
            t = np.minimum(t, self.cap)
        return cdiv(t, self.page) * self.page if self.page > 1 else t

    def describe(self) -> str:
        if self.cap is not None:
            return f"stops growing at {self.cap:,} tokens"
        return "grows with every token"


@dataclass(frozen=True)
class StaticRule(CacheRule):
    """Pre-allocated storage of ``slots`` tokens whatever the length (transformers ``StaticCache``)."""

    slots: int = 0

    @classmethod
    def for_layer(cls, kind: Kind, layer: LayerSpec, n: int, dtype: KVDType, tp: int,
                  layout: TokenLayout, **params: Any) -> Self:
        """``slots = static_slots(max_cache_len, window)`` (the ``max_cache_len`` param)."""
        max_cache_len = params.pop("max_cache_len")
        params["slots"] = int(static_slots(max_cache_len, params.get("window")))
        return super().for_layer(kind, layer, n, dtype, tp, layout, **params)

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), self.slots, dtype=np.int64)

    def describe(self) -> str:
        return f"pre-allocated {self.slots:,} slots: constant from the first token"


def static_slots(max_cache_len: np.ndarray | int, window: int | None) -> np.ndarray:
    """``StaticCache`` slots per layer: ``max_cache_len``, windowed layers ``min(W, max_cache_len)``
    (transformers ``cache_utils.py`` ``StaticSlidingWindowLayer``)."""
    length = np.asarray(max_cache_len, dtype=np.int64)
    return np.minimum(length, window) if window else length


@dataclass(frozen=True)
class StateRule(CacheRule):
    """Constant per-sequence state (recurrent layers); ``pages_reserved`` states per request."""

    pages_reserved: int = 1

    @classmethod
    def for_layer(cls, kind: Kind, layer: LayerSpec, n: int, dtype: KVDType, tp: int,
                  layout: TokenLayout, **params: Any) -> Self:
        """``state_bytes`` from ``layer_state_bytes`` (``dtype`` = the model dtype) unless the engine
        passes its own (vLLM pads the state page to the attention page)."""
        if "state_bytes" not in params:
            assert isinstance(layer, Recurrent)
            params["state_bytes"] = layer_state_bytes(layer, dtype, tp, layout)
        return cls(kind, n, 0, spec=layer, **params)

    @property
    def page_bytes(self) -> int:
        return self.state_bytes

    def describe(self) -> str:
        return "constant state per sequence: never grows"

    @property
    def token_bytes(self) -> int:
        return 0

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(tokens), dtype=np.int64)

    def held_bytes(self, tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), self.layers * self.state_bytes, dtype=np.int64)

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), self.pages_reserved, dtype=np.int64)

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        return self.layers * self.state_bytes * self.reserved_blocks(tokens)


@dataclass(frozen=True)
class PagedRule(CacheRule):
    """Paged full attention (vLLM ``FullAttentionSpec``/``MLAAttentionSpec``; TensorRT-LLM blocks):
    a sequence holds ``cdiv(T, bs)`` blocks and a request reserves ``cdiv(L, bs)``
    (``max_memory_usage_bytes``)."""

    block_size: int = VLLM_DEFAULT_BLOCK_SIZE
    in_flight_tokens: int = 0
    extra_retained: int = 0
    #: Page padded to this many bytes (hybrid pools: ``unify_kv_cache_spec_page_size``); 0 = none.
    padded_page: int = 0

    @property
    def page_bytes(self) -> int:
        return self.padded_page or self.block_size * self.bytes_per_token

    def held_blocks(self, tokens: np.ndarray) -> np.ndarray:
        return cdiv(tokens, self.block_size)

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        return cdiv(tokens, self.block_size)

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return self.held_blocks(tokens) * self.block_size

    def reserved_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return self.reserved_blocks(tokens) * self.block_size

    def describe(self) -> str:
        return f"grows one {self.block_size}-token block at a time, never stops"


@dataclass(frozen=True)
class PagedIndexerRule(PagedRule):
    """vLLM DSA indexer keys (DeepSeek-V3.2, ``models/deepseek_v2.py`` ``DeepseekV32IndexerCache``:
    an ``MLAAttentionSpec`` of ``d + d // 128 × 4`` uint8 per token). Same block size and retention as
    the latent, so vLLM puts both in one ``UniformTypeKVCacheSpecs`` group (``pool.py`` folds the two
    into one bucket: a block costs the sum of their pages, a request the same blocks)."""


@dataclass(frozen=True)
class PagedSlidingRule(PagedRule):
    """vLLM ``SlidingWindowSpec``: held blocks drop ``max(0, T − W + 1 − extra) // bs``
    (``SlidingWindowManager.get_num_skipped_tokens``); a request reserves
    ``cdiv(min(W − 1 + extra + IFT, L), bs) + 1`` blocks (``max_memory_usage_bytes``)."""

    def held_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        window = self.window or 1
        skipped = np.maximum(0, t - window + 1 - self.extra_retained)
        return cdiv(t, self.block_size) - skipped // self.block_size

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        window = self.window or 1
        span = np.minimum(window - 1 + self.extra_retained + self.in_flight_tokens, t)
        return cdiv(span, self.block_size) + 1

    def describe(self) -> str:
        if not self.window:
            return super().describe()
        return (f"frees blocks that fall out of the {self.window:,}-token window: stops "
                f"growing at ≈ ceil({self.window - 1:,}/{self.block_size})+1 blocks")


@dataclass(frozen=True)
class PagedChunkedRule(PagedRule):
    """vLLM ``ChunkedLocalAttentionSpec``: held blocks drop ``(T // C) · C // bs``; a request
    reserves ``cdiv(min(C + IFT, L), bs)`` blocks (no +1)."""

    def held_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        chunk = self.window or 1
        return cdiv(t, self.block_size) - ((t // chunk) * chunk) // self.block_size

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        chunk = self.window or 1
        return cdiv(np.minimum(chunk + self.in_flight_tokens, t), self.block_size)

    def describe(self) -> str:
        if not self.window:
            return super().describe()
        return f"frees whole chunks of {self.window:,}: at most ≈ {self.window:,} tokens of blocks"


@dataclass(frozen=True)
class PagedStateRule(StateRule):
    """vLLM Mamba pages (``MambaSpec``): 1 (prefix caching off), 2 ("align"), or one per block of
    ``block_size`` tokens ("all", ``pages_reserved = 0``)."""

    block_size: int = VLLM_DEFAULT_BLOCK_SIZE

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        if self.pages_reserved == 0:
            return cdiv(tokens, self.block_size)
        return np.full(np.shape(tokens), self.pages_reserved, dtype=np.int64)


#: vLLM's spec class per cache kind (``kv_cache_interface.py``: ``FullAttentionSpec``,
#: ``MLAAttentionSpec``, the indexer's ``MLAAttentionSpec``, ``SlidingWindowSpec``,
#: ``ChunkedLocalAttentionSpec``, ``MambaSpec``).
PAGED_KINDS: dict[Kind, type[CacheRule]] = {
    Kind.FULL: PagedRule, Kind.MLA: PagedRule, Kind.DSA_INDEXER: PagedIndexerRule,
    Kind.SLIDING: PagedSlidingRule, Kind.CHUNKED: PagedChunkedRule, Kind.RECURRENT: PagedStateRule,
}
#: Token-granular dynamic storage for every kind (transformers ``DynamicCache``; SGLang's pool).
TOKEN_KINDS: dict[Kind, type[CacheRule]] = {
    Kind.FULL: TokenRule, Kind.MLA: TokenRule, Kind.DSA_INDEXER: TokenRule, Kind.SLIDING: TokenRule,
    Kind.CHUNKED: TokenRule, Kind.RECURRENT: StateRule,
}
#: Pre-allocated storage (transformers ``StaticCache``).
STATIC_KINDS: dict[Kind, type[CacheRule]] = {
    Kind.FULL: StaticRule, Kind.MLA: StaticRule, Kind.DSA_INDEXER: StaticRule, Kind.SLIDING: StaticRule,
    Kind.CHUNKED: StaticRule, Kind.RECURRENT: StateRule,
}


def sum_token_bytes(rules: tuple[CacheRule, ...] | list[CacheRule]) -> int:
    """Bytes one token adds across ``rules`` while no window caps them: ``Σ layers × bytes/token``."""
    return sum(rule.token_bytes for rule in rules)
