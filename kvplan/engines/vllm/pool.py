"""vLLM's KV-cache groups and paged pool (``vllm/v1/core/kv_cache_utils.py`` ``get_kv_cache_groups``,
``vllm/v1/core/kv_cache_planning.py``; ``BlockPool``'s null block)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from kvplan.arch import LayerSpec, ModelArch
from kvplan.engines.base import Engine, KVPool
from kvplan.engines.kinds import VLLM_DEFAULT_BLOCK_SIZE, CacheRule, PagedRule
from kvplan.engines.settings import EngineSettings


@dataclass(frozen=True)
class GroupBucket:
    """``n_groups`` KV-cache groups that share one spec: the layers of a bucket split round-robin
    (``layer_ids[k::n_groups]`` is group ``k``); identical groups are counted, not repeated."""

    rule: CacheRule
    layer_ids: np.ndarray
    n_groups: int

    @property
    def page_bytes(self) -> int:
        return self.rule.page_bytes


def _spec_key(rule: CacheRule) -> tuple:
    return (rule.kind, rule.window, rule.page_bytes, rule.block_size)


@dataclass(frozen=True)
class VllmPool:
    """The groups of a model on vLLM, and the per-block cost on each pipeline stage."""

    buckets: tuple[GroupBucket, ...]
    uniform_type: bool
    block_size: int
    notes: tuple[str, ...]
    #: ``stages_bytes_per_block`` per pipeline split (a pool is shared by every fit of its layout).
    _stage_cost: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, init=False, compare=False,
                                                           repr=False)

    @property
    def n_groups(self) -> int:
        return sum(b.n_groups for b in self.buckets)

    def stages_bytes_per_block(self, parts: list[int]) -> np.ndarray:
        """Bytes one block id costs on each pipeline stage (``parts`` = layers per stage).

        Uniform-type pools sum their layers' pages per stage; hybrid pools take, per stage, the
        largest group (a group's layers on that stage × its page). Both walk the layers once
        (``bincount`` / ``unique``), so the cost grows with the layers, never with stages × groups.
        """
        key = tuple(parts)
        cached = self._stage_cost.get(key)
        if cached is not None:
            return cached
        bounds = np.cumsum(parts)[:-1]
        stages = len(parts)
        total = np.zeros(stages, dtype=np.int64)
        for bucket in self.buckets:
            stage = np.searchsorted(bounds, bucket.layer_ids, side="right")
            if self.uniform_type:
                total += np.bincount(stage, minlength=stages) * bucket.page_bytes
                continue
            group = np.arange(bucket.layer_ids.size) % bucket.n_groups
            pairs, counts = np.unique(stage * bucket.n_groups + group, return_counts=True)
            np.maximum.at(total, pairs // bucket.n_groups, counts * bucket.page_bytes)
        total.setflags(write=False)
        if len(self._stage_cost) < 64:
            self._stage_cost[key] = total
        return total

    def blocks_per_request(self, max_model_len: np.ndarray | int) -> np.ndarray:
        """Σ over groups (max over specs in a ``UniformTypeKVCacheSpecs`` group) of reserved blocks."""
        tokens = np.asarray(max_model_len, dtype=np.int64)
        per_bucket = [b.rule.reserved_blocks(tokens) for b in self.buckets]
        if self.uniform_type:
            return np.max(per_bucket, axis=0)
        return np.sum([b.n_groups * blocks for b, blocks in zip(self.buckets, per_bucket, strict=True)],
                      axis=0)

    @property
    def padding_layers(self) -> int:
        if self.uniform_type or not self.buckets:
            return 0
        sizes = [np.bincount(np.arange(b.layer_ids.size) % b.n_groups, minlength=b.n_groups)
                 for b in self.buckets]
        size = max(int(s.max()) for s in sizes)
        return int(sum(int((size - s).sum()) for s in sizes))


#: Settings that only reach the runtime reserve (``runtime_reserve``), never the pool.
_RESERVE_ONLY = {"max_num_seqs": None, "enforce_eager": False, "flashinfer_sampler": None}


def _pool_only(settings: EngineSettings) -> EngineSettings:
    """``settings`` with the reserve-only knobs at their defaults (one pool for all of them)."""
    if all(getattr(settings, k) == v for k, v in _RESERVE_ONLY.items()):
        return settings
    return settings.model_copy(update=_RESERVE_ONLY)


@lru_cache(maxsize=128)
def _pool_cached(engine: Engine, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
                 mla_block_size: int | None) -> VllmPool:
    return build_pool(engine, arch, kv_dtype, settings, mla_block_size)


@lru_cache(maxsize=32)
def _layer_positions(arch: ModelArch) -> dict[LayerSpec, np.ndarray]:
    """Global layer ids of each distinct spec, ascending, from the model's runs of identical layers
    (once per model: the pool of every KV dtype and setting indexes them)."""
    runs: dict[LayerSpec, list[tuple[int, int]]] = {}
    position = 0
    for layer, n in arch.layer_runs():
        runs.setdefault(layer, []).append((position, n))
        position += n
    positions = {}
    for layer, spans in runs.items():
        begin = np.array([b for b, _ in spans], dtype=np.int64)
        length = np.array([n for _, n in spans], dtype=np.int64)
        within = np.arange(int(length.sum()), dtype=np.int64) - np.repeat(np.cumsum(length) - length,
                                                                             length)
        ids = np.repeat(begin, length) + within
        ids.setflags(write=False)
        positions[layer] = ids
    return positions


def _layer_ids(arch: ModelArch, by_spec: dict[LayerSpec, CacheRule]) -> dict[LayerSpec, np.ndarray]:
    """Global layer ids of every cached spec (``_layer_positions``)."""
    return {layer: ids for layer, ids in _layer_positions(arch).items() if layer in by_spec}


def _layer_rules(rules: tuple[CacheRule, ...]) -> dict[LayerSpec, CacheRule]:
    """One rule per layer spec: a DSA layer's indexer keys (``PagedIndexerRule``) folded into its
    latent's rule. vLLM gives both ``MLAAttentionSpec``s of one block size and retention, which
    ``get_kv_cache_groups`` puts in one ``UniformTypeKVCacheSpecs`` group: a block costs the sum of
    their pages and a request ``max(cdiv(L, bs))`` = the same blocks — the folded rule's arithmetic."""
    by_spec: dict[LayerSpec, CacheRule] = {}
    for rule in rules:
        if rule.spec is None:
            continue
        first = by_spec.get(rule.spec)
        by_spec[rule.spec] = rule if first is None else replace(
            first, bytes_per_token=first.bytes_per_token + rule.bytes_per_token)
    return by_spec


def vllm_num_blocks(budgets: np.ndarray, per_block: np.ndarray) -> np.ndarray:
    """``kv_cache_planning.py``: ``num_blocks = available_memory // bytes_per_block`` on every
    pipeline stage, the smallest over the stages; ``budgets`` (..., pp) int64 and clamped at 0,
    ``per_block`` (pp,) — stages without a cached layer (0 B per block) do not count."""
    b = np.maximum(np.asarray(budgets, dtype=np.int64), 0)
    per = np.asarray(per_block, dtype=np.int64)
    used = per > 0
    return np.asarray((b[..., used] // per[used]).min(axis=-1), dtype=np.int64)


def build_pool(engine: Engine, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
               mla_block_size: int | None = None) -> VllmPool:
    """Group the whole model's layers as vLLM's ``get_kv_cache_groups`` does (per TP rank)."""
    view = engine.view(arch, kv_dtype, settings, mla_block_size=mla_block_size)
    by_spec = _layer_rules(view.rules)
    ids_of = _layer_ids(arch, by_spec)
    notes = list(view.notes)
    block = view.block_size or VLLM_DEFAULT_BLOCK_SIZE
    specs = list(ids_of)
    keys = {_spec_key(by_spec[s]) for s in specs}

    def merged(spec_list: list[LayerSpec], rule_of: dict[LayerSpec, CacheRule]) -> dict[tuple, tuple[
            CacheRule, np.ndarray]]:
        out: dict[tuple, tuple[CacheRule, list[np.ndarray]]] = {}
        for s in spec_list:
            rule = rule_of[s]
            out.setdefault(_spec_key(rule), (rule, []))[1].append(ids_of[s])
        return {k: (r, np.sort(np.concatenate(parts))) for k, (r, parts) in out.items()}

    if len(keys) == 1:
        ((rule, ids),) = merged(specs, by_spec).values()
        return VllmPool((GroupBucket(rule, ids, 1),), False, block, tuple(notes))
    rules = [by_spec[s] for s in specs]
    if (all(isinstance(r, PagedRule) for r in rules) and len({r.kind for r in rules}) == 1
            and len({r.window for r in rules}) == 1):
        notes.append("one UniformTypeKVCacheSpecs group (same attention type, different page sizes)")
        return VllmPool(tuple(GroupBucket(r, ids, 1) for r, ids in merged(specs, by_spec).values()),
                        True, block, tuple(notes))
    max_page = max(r.page_bytes for r in rules)
    unified: dict[LayerSpec, CacheRule] = {}
    for s in specs:
        rule = by_spec[s]
        if rule.page_bytes < max_page and isinstance(rule, PagedRule):
            if max_page % rule.page_bytes == 0:
                rule = replace(rule, block_size=rule.block_size * (max_page // rule.page_bytes))
            else:
                notes.append("attention page padded to the largest page (unify_kv_cache_spec_page_size)")
        unified[s] = rule
    buckets = merged(specs, unified)
    sizes = [ids.size for _, ids in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = tuple(GroupBucket(rule if rule.page_bytes == max_page else _with_page(rule, max_page),
                               ids, -(-int(ids.size) // group_size))
                   for rule, ids in buckets.values())
    pool = VllmPool(groups, False, block, tuple(notes))
    if pool.padding_layers:
        waste = 100 * pool.padding_layers / sum(sizes)
        pool = replace(pool, notes=(*pool.notes, f"{pool.padding_layers} padding layers: up to "
                                                  f"{waste:.2f}% of each block id unused"))
    return pool


def _with_page(rule: CacheRule, page: int) -> CacheRule:
    """A rule whose page is padded to ``page`` bytes (Mamba pages, non-divisible attention)."""
    if isinstance(rule, PagedRule):
        return replace(rule, padded_page=page)
    return replace(rule, state_bytes=page)


class VllmPagedPool(KVPool):
    """vLLM: ``num_blocks = budget // bytes_per_block`` (minimum over pipeline stages); a request
    reserves ``Σ_groups`` blocks; one block is the null block (``BlockPool``)."""

    paged = True
    num_blocks: int
    block_size: int
    bytes_per_block: int

    def __init__(self, pool: VllmPool, budgets: list[int], parts: list[int],
                 logged_tokens: str = "concurrency", null_block: bool = True) -> None:
        per_block = pool.stages_bytes_per_block(parts)
        self.pool = pool
        self.stage_per_block = per_block
        self.budget = min(budgets)
        # clamped before the int64 conversion: a layout whose weights exceed the device by more than
        # int64 holds (the 10^6-wide test models at TP 1) has no budget, not an OverflowError
        stage_budgets = np.asarray([max(b, 0) for b in budgets], dtype=np.int64)
        self.num_blocks = int(vllm_num_blocks(stage_budgets, per_block))
        self.bytes_per_block = int(per_block.max())
        self.block_size = pool.block_size
        self.capacity = max(self.num_blocks - (1 if null_block else 0), 0)
        self.null_block = null_block
        self.logged_tokens = logged_tokens

    def blocks(self, L: np.ndarray) -> np.ndarray:
        return np.asarray(self.pool.blocks_per_request(np.asarray(L, dtype=np.int64)), dtype=np.int64)

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return self.blocks(L) * self.bytes_per_block  # a block id spans the widest group's layers

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        return self.capacity // np.maximum(self.blocks(L), 1)

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``(min over stages of max(b, 0) // bytes per block − 1 null block) // blocks(L)``."""
        blocks = vllm_num_blocks(budgets, self.stage_per_block)
        return np.maximum(blocks - 1, 0) // max(int(self.blocks(np.asarray([L]))[0]), 1)

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        """``num_blocks / blocks_per_request`` (v0.8: pool tokens / L, ``kv_cache_utils.py``)."""
        if self.logged_tokens == "blocks":
            return self.pool_tokens(L) / np.maximum(np.asarray(L, dtype=np.int64), 1)
        return self.num_blocks / np.maximum(self.blocks(L), 1)

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        """vLLM's logged "GPU KV cache size": ``int(num_blocks / blocks_per_request × L)``
        (v0.20.2+, ``get_kv_cache_capacity``); ``num_blocks // n_groups × min_block_size``
        (v0.9.2–v0.20.0, ``_report_kv_cache_config``); ``num_blocks × block_size`` (v0.8)."""
        L = np.asarray(L, dtype=np.int64)
        if self.logged_tokens == "groups":
            min_bs = min(b.rule.block_size for b in self.pool.buckets)
            return np.full(L.shape, self.num_blocks // self.pool.n_groups * min_bs, dtype=np.int64)
        if self.logged_tokens == "blocks":
            return np.full(L.shape, self.num_blocks * self.block_size, dtype=np.int64)
        return (self.num_blocks / np.maximum(self.blocks(L), 1) * L).astype(np.int64)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self.blocks(L) * users

    def blocks_logging_tokens(self, tokens: int, L: int) -> tuple[int, int, str]:
        """The block counts ``n`` for which this release logs "GPU KV cache size: ``tokens``" (the
        inverse of ``pool_tokens``, same formula and float arithmetic) and how; ``low > high``
        when none does."""
        if self.logged_tokens == "groups":
            min_bs = min(b.rule.block_size for b in self.pool.buckets)
            g = self.pool.n_groups
            if tokens % min_bs:
                return 0, -1, f"n // {g} × {min_bs} is a multiple of {min_bs}, {tokens:,} is not"
            q = tokens // min_bs
            return q * g, q * g + g - 1, f"n // {g} group(s) × {min_bs} = {tokens:,} tokens"
        if self.logged_tokens == "blocks":
            bs = self.block_size
            if tokens % bs:
                return 0, -1, f"n × {bs} is a multiple of {bs}, {tokens:,} is not"
            return tokens // bs, tokens // bs, f"n × {bs} = {tokens:,} tokens"
        bpr = max(int(self.blocks(np.asarray([L]))[0]), 1)
        low, high = tokens * bpr // L, -(-(tokens + 1) * bpr // L)
        hits = [n for n in range(max(low - 2, 0), high + 3) if int(n / bpr * L) == tokens]
        how = f"int(n / {bpr:,} × {L:,}) = {tokens:,} tokens"
        return (min(hits), max(hits), how) if hits else (0, -1, how)

    def blocks_logging_concurrency(self, conc: float, decimals: int, L: int) -> tuple[int, int, str]:
        """The block counts ``n`` whose logged "Maximum concurrency" rounds to ``conc`` at
        ``decimals`` places: ``n / blocks_per_request``, or pool tokens / L in v0.8."""
        half = 0.5 * 10 ** -decimals
        per = (L / self.block_size if self.logged_tokens == "blocks"
               else max(int(self.blocks(np.asarray([L]))[0]), 1))
        low = max(math.ceil((conc - half) * per - 1e-9), 0)
        high = math.floor((conc + half) * per + 1e-9)
        return low, high, f"n / {per:,g} ≈ {conc:.{decimals}f}x"

    def formulas(self, L: int) -> dict[str, str]:
        bpr = int(self.blocks(np.asarray([L]))[0])
        conc = self.num_blocks / bpr if bpr else 0.0
        return {
            "num_blocks": f"{self.budget:,} // {self.bytes_per_block:,} B per block = {self.num_blocks:,}",
            "blocks_per_request": f"Σ over {self.pool.n_groups} group(s) of reserved blocks at "
                                  f"{L:,} tokens = {bpr:,}",
            "max_concurrency": f"{self.num_blocks:,} / {bpr:,} = {conc:.4f}",
            "kv_pool_tokens": f"int({conc:.6f} × {L:,}) = {int(conc * L):,}"
            if self.logged_tokens == "concurrency" else
            f"{int(self.pool_tokens(np.asarray([L]))[0]):,} ({self.logged_tokens} formula of this release)",
            "max_requests": f"{self.capacity:,} usable blocks"
                            + (f" ({self.num_blocks:,} − 1: the null block, which no request gets; "
                               "v1/core/block_pool.py BlockPool.__init__)" if self.null_block else "")
                            + f" // {bpr:,} = {self.capacity // bpr if bpr else 0:,}",
        }



