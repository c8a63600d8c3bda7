"""vLLM's KV-cache pool: layer groups, bytes per block, blocks per request, and its logged capacity.

Sources (vLLM v0.33): ``vllm/v1/core/kv_cache_utils.py`` (``get_kv_cache_groups``,
``_get_kv_cache_groups_uniform_page_size``, ``get_max_concurrency_for_kv_cache_config``,
``get_kv_cache_capacity``) and ``vllm/v1/core/kv_cache_planning.py``
(``num_blocks = available_memory // bytes_per_block`` with
``bytes_per_block = max over groups of Σ page_size_bytes``).

* One spec for every layer → one group; a block costs ``layers × page``.
* Same attention type, different pages → one ``UniformTypeKVCacheSpecs`` group; a block costs
  ``Σ pages`` and a request ``max_l cdiv(mem_l, page_l)`` blocks.
* Hybrid → pages unified (smaller attention pages get a larger block size), layers bucketed by
  spec, ``group_size = min count`` (or ``max count`` if ``max < 1.5 × min``), each bucket split
  round-robin into ``cdiv(n, group_size)`` groups; a block costs ``group_size × page``.
* ``max_concurrency = num_blocks / Σ_groups cdiv(max_memory_usage_bytes, page)`` and the log's
  ``GPU KV cache size = int(max_concurrency × max_model_len)`` tokens (null block included).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvplan.arch import ModelArch
from kvplan.engines import CacheRule, EngineSettings, PagedRule, engine_view


@dataclass(frozen=True)
class PoolGroup:
    """One KV-cache group: a rule (its page and reservation) and the global layer ids in it."""

    rule: CacheRule
    layer_ids: tuple[int, ...]

    @property
    def page_bytes(self) -> int:
        return _page(self.rule)

    def blocks_per_request(self, max_model_len: np.ndarray | int) -> np.ndarray:
        return _blocks(self.rule, max_model_len)


def _page(rule: CacheRule) -> int:
    return rule.page_bytes  # type: ignore[attr-defined]


def _blocks(rule: CacheRule, max_model_len: np.ndarray | int) -> np.ndarray:
    if isinstance(rule, PagedRule):
        return rule.reserved_blocks(max_model_len)
    return rule.reserved_blocks(max_model_len)  # type: ignore[attr-defined]


def _spec_key(rule: CacheRule) -> tuple:
    return (rule.kind, rule.window, _page(rule), getattr(rule, "block_size", None))


@dataclass(frozen=True)
class VllmPool:
    """The groups of a model on vLLM, and the per-block cost on each pipeline stage."""

    groups: tuple[PoolGroup, ...]
    uniform_type: bool
    block_size: int
    notes: tuple[str, ...]

    def stage_bytes_per_block(self, start: int, stop: int) -> int:
        """Bytes one block id costs on the rank holding layers [start, stop)."""
        if self.uniform_type:
            return sum(g.page_bytes * sum(start <= i < stop for i in g.layer_ids) for g in self.groups)
        return max((g.page_bytes * sum(start <= i < stop for i in g.layer_ids) for g in self.groups),
                   default=0)

    def blocks_per_request(self, max_model_len: np.ndarray | int) -> np.ndarray:
        if self.uniform_type:
            return np.max([g.blocks_per_request(max_model_len) for g in self.groups], axis=0)
        return np.sum([g.blocks_per_request(max_model_len) for g in self.groups], axis=0)

    @property
    def padding_layers(self) -> int:
        if self.uniform_type or not self.groups:
            return 0
        size = max(len(g.layer_ids) for g in self.groups)
        return sum(size - len(g.layer_ids) for g in self.groups)


def build_pool(arch: ModelArch, kv_dtype: str, settings: EngineSettings,
               mla_block_size: int | None = None) -> VllmPool:
    """Group the whole model's layers as vLLM's ``get_kv_cache_groups`` does (per TP rank)."""
    view = engine_view(arch, "vllm", kv_dtype, settings, mla_block_size=mla_block_size)
    by_spec = {rule.spec: rule for rule in view.rules}
    layer_rules = [(i, by_spec[layer]) for i, layer in enumerate(arch.layers) if layer in by_spec]
    notes = list(view.notes)
    keys = {_spec_key(rule) for _, rule in layer_rules}
    block = view.block_size or 16
    if len(keys) == 1:
        rule = layer_rules[0][1]
        return VllmPool((PoolGroup(rule, tuple(i for i, _ in layer_rules)),), False, block, tuple(notes))
    kinds = {rule.kind for _, rule in layer_rules}
    attention_like = all(isinstance(rule, PagedRule) for _, rule in layer_rules)
    if attention_like and len(kinds) == 1 and len({r.window for _, r in layer_rules}) == 1:
        groups = {}
        for i, rule in layer_rules:
            groups.setdefault(_spec_key(rule), (rule, []))[1].append(i)
        notes.append("one UniformTypeKVCacheSpecs group (same attention type, different page sizes)")
        return VllmPool(tuple(PoolGroup(r, tuple(ids)) for r, ids in groups.values()), True, block,
                        tuple(notes))
    max_page = max(_page(rule) for _, rule in layer_rules)
    unified: list[tuple[int, CacheRule]] = []
    for i, rule in layer_rules:
        page = _page(rule)
        if page < max_page and isinstance(rule, PagedRule):
            if max_page % page == 0:
                rule = replace(rule, block_size=rule.block_size * (max_page // page))
            else:
                notes.append("attention page padded to the largest page (unify_kv_cache_spec_page_size)")
        unified.append((i, rule))
    buckets: dict[tuple, tuple[CacheRule, list[int]]] = {}
    for i, rule in unified:
        buckets.setdefault(_spec_key(rule), (rule, []))[1].append(i)
    sizes = [len(ids) for _, ids in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups: list[PoolGroup] = []
    for rule, ids in buckets.values():
        n_groups = -(-len(ids) // group_size)
        padded = rule if _page(rule) == max_page else _with_page(rule, max_page)
        groups.extend(PoolGroup(padded, tuple(ids[k::n_groups])) for k in range(n_groups))
    pool = VllmPool(tuple(groups), False, block, tuple(notes))
    if pool.padding_layers:
        waste = 100 * pool.padding_layers / sum(sizes)
        pool = replace(pool, notes=(*pool.notes, f"{pool.padding_layers} padding layers: up to "
                                                  f"{waste:.2f}% of each block id unused"))
    return pool


def _with_page(rule: CacheRule, page: int) -> CacheRule:
    """A rule whose page is padded to ``page`` bytes (Mamba pages, non-divisible attention)."""
    if isinstance(rule, PagedRule):
        return _PaddedPagedRule(**{**rule.__dict__, "padded_page": page})
    return replace(rule, state_bytes=page)


@dataclass(frozen=True)
class _PaddedPagedRule(PagedRule):
    padded_page: int = 0

    @property
    def page_bytes(self) -> int:
        return self.padded_page
