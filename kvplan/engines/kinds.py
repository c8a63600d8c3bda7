"""Cache kinds: what one group of identical layers stores on one rank, one class per kind × storage.

Each class knows its bytes per token per layer (or constant state bytes), the tokens a sequence of
``T`` tokens *holds* and what the engine *reserves* for a request of up to ``L`` tokens — as vLLM's
``vllm/v1/kv_cache_interface.py`` gives each ``KVCacheSpec`` its ``page_size_bytes`` and
``max_memory_usage_bytes``. Engines (``kvplan.engines.*``) pick the class for each layer kind
through their ``storage`` dispatch table. Everything is vectorised over numpy token arrays.

Layer-kind names (``kind``): ``full``, ``sliding``, ``chunked``, ``mla``, ``recurrent``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvplan.arch import LayerSpec

VLLM_DEFAULT_BLOCK_SIZE = 16  # vllm/config/cache.py DEFAULT_BLOCK_SIZE


def cdiv(a: np.ndarray | int, b: int) -> np.ndarray:
    """``ceil(a / b)`` in int64."""
    return -(-np.asarray(a, dtype=np.int64) // b)


@dataclass(frozen=True)
class CacheRule:
    """Storage of ``layers`` identical layers on one rank; token-granular, keeps every token.

    ``block_size`` is the allocation unit in tokens (1 = token-granular); ``page_bytes`` one
    block of one layer (vLLM ``page_size_bytes``).
    """

    kind: str
    layers: int
    bytes_per_token: int
    window: int | None = None
    state_bytes: int = 0
    note: str = ""
    spec: LayerSpec | None = field(default=None, compare=False, repr=False)
    block_size: int = 1

    @property
    def page_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def token_bytes(self) -> int:
        """Bytes one more token adds while every layer of the group still grows."""
        return self.layers * self.bytes_per_token

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


@dataclass(frozen=True)
class StaticRule(CacheRule):
    """Pre-allocated storage of ``slots`` tokens whatever the length (transformers ``StaticCache``)."""

    slots: int = 0

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), self.slots, dtype=np.int64)


def static_slots(max_cache_len: np.ndarray | int, window: int | None) -> np.ndarray:
    """``StaticCache`` slots per layer: ``max_cache_len``, windowed layers ``min(W, max_cache_len)``
    (transformers ``cache_utils.py`` ``StaticSlidingWindowLayer``)."""
    length = np.asarray(max_cache_len, dtype=np.int64)
    return np.minimum(length, window) if window else length


@dataclass(frozen=True)
class StateRule(CacheRule):
    """Constant per-sequence state (recurrent layers); ``pages_reserved`` states per request."""

    pages_reserved: int = 1

    @property
    def page_bytes(self) -> int:
        return self.state_bytes

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


#: vLLM's paged spec class per retention kind (``kv_cache_interface.py``).
PAGED_KINDS: dict[str, type[PagedRule]] = {
    "full": PagedRule, "mla": PagedRule, "sliding": PagedSlidingRule, "chunked": PagedChunkedRule,
}


@dataclass(frozen=True)
class PagedStateRule(StateRule):
    """vLLM Mamba pages (``MambaSpec``): 1 (prefix caching off), 2 ("align"), or one per block of
    ``block_size`` tokens ("all", ``pages_reserved = 0``)."""

    block_size: int = VLLM_DEFAULT_BLOCK_SIZE

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        if self.pages_reserved == 0:
            return cdiv(tokens, self.block_size)
        return np.full(np.shape(tokens), self.pages_reserved, dtype=np.int64)


def sum_token_bytes(rules: tuple[CacheRule, ...] | list[CacheRule]) -> int:
    """Bytes one token adds across ``rules`` while no window caps them: ``Σ layers × bytes/token``."""
    return sum(rule.token_bytes for rule in rules)
