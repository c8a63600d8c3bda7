"""KV offload tiers beside the GPU pool: sessions of length L resident per tier, host memory pinned,
the time to bring a session back, and the share of a multi-turn workload's prefixes kept.

Reads a ``Plan`` (its engine, pool and layout) and one ``OffloadQuery``; each tier is sized by its
engine's or connector's own rule (``engines/vllm/offload.py``: vLLM native CPU offloading and
LMCache; ``engines/sglang/hicache.py``: SGLang HiCache) into a ``TierSize``. Flags are named as the
engines name them. Times are lower bounds: bytes of one rank's slice over that rank's host link at
the stated rate, no protocol or kernel overhead.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvplan.engines.sglang.hicache import hicache_tier, host_allowance
from kvplan.engines.tiers import TierSize, check_backend
from kvplan.engines.vllm.offload import (
    LMCACHE_CHUNK_SIZE,
    LMCACHE_CPU_GIB,
    lmcache_tier,
    lmcache_token_bytes,
    native_cpu_tier,
    pure_mla,
    replicated_mla,
)
from kvplan.errors import KVPlanError
from kvplan.plan import Plan

Backend = Literal["native", "lmcache", "hicache"]


class OffloadQuery(BaseModel):
    """The tier asked about, with the engines' own flag names.

    ``size_gib``: vLLM ``--kv-offloading-size`` (GiB, total over the ranks), LMCache
    ``max_local_cpu_size`` (GiB per rank, default 5.0) or SGLang ``--hicache-size`` (GB per rank,
    a whole number; 0 = use ``hicache_ratio``). ``chunk_tokens``: the native connector's
    ``block_size`` (tokens per offloaded chunk) or LMCache's ``chunk_size`` (default 256).
    ``host_ram_gib``: the node's RAM as entered; ``gpus_per_node``: GPUs sharing it;
    ``link_gbps``: the GPU↔host link per direction (default: the accelerator's ``host_link_gbps``);
    ``sessions``: distinct conversations of a multi-turn workload whose prefixes compete for the tier.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = "native"
    size_gib: float | None = Field(default=None, ge=0, le=1_000_000)
    chunk_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    hicache_ratio: float | None = Field(default=None, gt=0, le=1000)
    disk_gib: float = Field(default=0.0, ge=0, le=100_000_000)
    host_ram_gib: float | None = Field(default=None, gt=0, le=1_000_000)
    gpus_per_node: int = Field(default=8, ge=1, le=4096)
    link_gbps: float | None = Field(default=None, gt=0, le=100_000)
    sessions: int | None = Field(default=None, ge=1, le=1_000_000_000)


class TierAnswer(BaseModel):
    """One tier for sessions of ``tokens`` tokens: per rank, per instance and per node."""

    model_config = ConfigDict(frozen=True)

    tier: str
    medium: str
    tokens: int
    tokens_per_unit: int
    units: int
    units_per_session: int
    sessions_per_instance: int
    sessions_per_node: int
    rank_token_bytes: int
    gpu_rank_token_bytes: int
    allocation_bytes: int
    allocations: int
    host_bytes_per_instance: int
    host_bytes_per_node: int
    host_bytes_per_rank: int
    session_rank_bytes: int
    restore_seconds: float | None
    link_gbps: float | None
    share_resident: float | None
    formulas: list[str]
    source: str
    notes: list[str]


class OffloadAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    engine: str
    engine_release: str
    gpu: str
    tp: int
    pp: int
    tokens: int
    gpu_sessions: int
    instances_per_node: int
    host_ram_bytes: int | None
    tiers: list[TierAnswer]

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def tiers_of(plan: Plan, query: OffloadQuery) -> list[TierSize]:
    """The tiers ``query`` asks for on ``plan``'s engine and pool (a named error for a backend of
    another engine, or a pool the tier's rule does not cover)."""
    check_backend(query.backend, plan.engine.engine_id)
    world = plan.query.tp * plan.query.pp
    pool = plan.pool
    if query.backend == "native":
        if query.size_gib is None or query.size_gib <= 0:
            raise KVPlanError("offload.size", flag="--kv-offloading-size", backend="native")
        inner = getattr(pool, "pool", None)
        per_block = getattr(pool, "bytes_per_block", None)
        if inner is None or per_block is None:
            raise KVPlanError("offload.hybrid", tier="vLLM native CPU offloading", groups="no paged")
        return [native_cpu_tier(size_gib=query.size_gib, worker_bytes_per_block=int(per_block),
                                gpu_block_size=int(pool.block_size or 1), world_size=world,
                                replicated=replicated_mla(plan.arch, plan.query.tp, plan.query.pp,
                                                          plan.device.vendor),
                                n_groups=int(inner.n_groups), chunk_tokens=query.chunk_tokens)]
    if query.backend == "lmcache":
        start, stop = plan.engine.largest_stage(plan.arch, plan.query.pp)
        dtype = plan.engine.kv_dtype(plan.arch, plan.query.kv_dtype)
        token, formula = lmcache_token_bytes(plan.arch, dtype, plan.query.tp, stop - start)
        chunk = query.chunk_tokens or LMCACHE_CHUNK_SIZE
        size = LMCACHE_CPU_GIB if query.size_gib is None else query.size_gib
        mla = pure_mla(plan.arch)
        tiers = [lmcache_tier(size_gib=size, token_bytes=token, token_formula=formula, chunk_size=chunk,
                              world_size=world, mla=mla)] if size > 0 else []
        if query.disk_gib > 0:
            tiers.append(lmcache_tier(size_gib=query.disk_gib, token_bytes=token, token_formula=formula,
                                      chunk_size=chunk, world_size=world, medium="disk", mla=mla))
        if not tiers:
            raise KVPlanError("offload.size", flag="max_local_cpu_size", backend="lmcache")
        return tiers
    specs = plan.specs
    stateful = specs.state_bytes > 0 or any(rule.kind.windowed for rule in specs.rules)
    size_gb = int(query.size_gib or 0)
    if query.size_gib is not None and query.size_gib != size_gb:
        raise KVPlanError("offload.whole_gb", value=query.size_gib)
    ram = _ram(query)
    return [hicache_tier(device_tokens=int(getattr(pool, "capacity", 0)), token_bytes=specs.token_bytes,
                         page_size=int(pool.block_size or 1), world_size=world, ratio=query.hicache_ratio,
                         size_gb=size_gb, host_ram_bytes=ram, ranks_per_host=min(world, query.gpus_per_node),
                         stateful=stateful)]


def _ram(query: OffloadQuery) -> int | None:
    return None if query.host_ram_gib is None else int(query.host_ram_gib * 1024**3)


def offload(plan: Plan, query: OffloadQuery) -> OffloadAnswer:
    """Every tier of ``query`` for sessions of ``plan.query.tokens`` tokens; a tier set that pins more
    than the node's RAM (as entered) is refused by name, as is a HiCache pool above SGLang's own
    host allowance (``_allocate_host_buffer``)."""
    tokens = plan.query.tokens
    world = plan.query.tp * plan.query.pp
    instances = max(query.gpus_per_node // world, 1)
    ram = _ram(query)
    link = query.link_gbps if query.link_gbps is not None else plan.device.host_link_gbps
    gpu_token = plan.specs.token_bytes
    answers: list[TierAnswer] = []
    host_total = 0
    for tier in tiers_of(plan, query):
        need = tier.units_for(tokens)
        sessions = tier.sessions(tokens)
        rank_bytes = tier.session_rank_bytes(tokens)
        per_instance = tier.host_bytes
        node = per_instance * instances
        per_rank = per_instance // world
        if tier.medium == "host":
            host_total += node
        if ram is not None and tier.checks_host_allowance:
            allowance = host_allowance(ram, min(world, query.gpus_per_node))
            if tier.allocation_bytes > allowance:
                raise KVPlanError("offload.host_ram", tier=tier.tier, need=tier.allocation_bytes, ram=ram,
                                  what=f"SGLang's allowance per rank {allowance:,} B "
                                       "((RAM − 10 GiB) // ranks per host)")
        restore = rank_bytes / (link * 1e9) if link else None
        share = None if query.sessions is None else min(1.0, sessions / query.sessions)
        notes = list(tier.notes)
        if tier.medium == "disk":
            notes.append("restore bound counts the host link only; the disk's own read rate is lower")
        if plan.engine.record != plan.engine.releases[-1]:
            notes.append(f"sized by the newest release's rule ({plan.engine.releases[-1].name})")
        if plan.query.pp > 1 and tier.allocations == 1:  # the native tier: one region per instance
            notes.append("PP > 1: one chunk size for every stage, from the heaviest stage's block")
        if world > query.gpus_per_node:
            notes.append(f"the instance spans {-(-world // query.gpus_per_node)} nodes; "
                         "per node is its share")
            node = per_instance * query.gpus_per_node // world
        answers.append(TierAnswer(
            tier=tier.tier, medium=tier.medium, tokens=tokens, tokens_per_unit=tier.tokens_per_unit,
            units=tier.units, units_per_session=need, sessions_per_instance=sessions,
            sessions_per_node=sessions * instances if world <= query.gpus_per_node else sessions,
            rank_token_bytes=tier.rank_token_bytes, gpu_rank_token_bytes=gpu_token,
            allocation_bytes=tier.allocation_bytes, allocations=tier.allocations,
            host_bytes_per_instance=per_instance, host_bytes_per_node=node, host_bytes_per_rank=per_rank,
            session_rank_bytes=rank_bytes, restore_seconds=restore, link_gbps=link, share_resident=share,
            formulas=list(tier.formulas)
            + [f"sessions = {tier.units:,} // {need:,} units per {tokens:,}-token session = {sessions:,}"]
            + ([f"restore ≥ {rank_bytes:,} B per rank / {link:g} GB/s = {restore:.4f} s"] if restore else [])
            + ([f"share resident = min(1, {sessions:,} / {query.sessions:,}) = {share:.4f} (uniform "
                "reuse of the sessions, LRU, this tier alone)"] if share is not None else []),
            source=tier.source, notes=notes))
    if ram is not None and host_total > ram:
        raise KVPlanError("offload.host_ram", tier=" + ".join(a.tier for a in answers if a.medium == "host"),
                          need=host_total, ram=ram,
                          what=f"the node's RAM ({instances} instance(s) of {world} GPU(s) on "
                               f"{query.gpus_per_node} GPUs per node)")
    return OffloadAnswer(
        model=plan.arch.name, engine=plan.engine.id, engine_release=plan.engine.release, gpu=plan.device.id,
        tp=plan.query.tp, pp=plan.query.pp, tokens=tokens, gpu_sessions=int(plan.pool.max_requests(
            np.asarray([tokens]))[0]), instances_per_node=instances, host_ram_bytes=ram,
        tiers=answers)
