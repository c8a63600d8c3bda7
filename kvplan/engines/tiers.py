"""One offload tier's size, as the engine or connector allocates it: the record each tier rule returns.

A tier is a host (or disk) store of KV chunks beside the GPU pool: vLLM's native CPU offloading
(``engines/vllm/offload.py``), LMCache's local CPU and disk backends (the same module: LMCache takes
its stored shape from vLLM's model config), SGLang's HiCache host pool (``engines/sglang/hicache.py``).
Each rule returns a ``TierSize``; the question layer (``kvplan.offload``) reads sessions, host bytes
and transfer bounds from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KVPlanError

#: The engine each offload backend runs under (vLLM's ``--kv-offloading-backend`` native / lmcache;
#: SGLang's ``--enable-hierarchical-cache``).
BACKEND_ENGINE: dict[str, str] = {"native": "vllm", "lmcache": "vllm", "hicache": "sglang"}


def backends_for(engine_id: str) -> tuple[str, ...]:
    """The offload backends of an engine (``vllm@0.19`` counts as ``vllm``), LMCache first: it stores
    any model with attention layers, vLLM's native tier only one-group pools."""
    base = engine_id.partition("@")[0]
    return tuple(sorted((b for b, e in BACKEND_ENGINE.items() if e == base), key=lambda b: b != "lmcache"))


def check_backend(backend: str, engine_id: str) -> None:
    """A named error for an offload backend asked of another engine."""
    need = BACKEND_ENGINE[backend]
    if engine_id != need:
        raise KVPlanError("offload.engine", backend=backend, need=need, engine=engine_id)


@dataclass(frozen=True)
class TierSize:
    """A tier's capacity in the units it stores (chunks, pages), with the formulas that gave them.

    ``allocations`` separate buffers of ``allocation_bytes`` each back one engine instance (vLLM's
    native tier: one shared region; LMCache, HiCache: one per rank); every allocation holds its ranks'
    slices of the same sessions, so the sessions that fit one allocation are the instance's.
    ``rank_token_bytes`` is one token's bytes for one rank in the tier's format; ``unit_bytes`` one
    unit of one allocation as allocated (padding included).
    """

    tier: str
    engine: str
    medium: str
    tokens_per_unit: int
    unit_bytes: int
    units: int
    rank_token_bytes: int
    allocations: int
    allocation_bytes: int
    #: ranks whose data one unit holds (vLLM native: the world size, or 1 when replicated MLA)
    ranks_per_unit: int
    #: ``whole``: a session stores ``L // tokens_per_unit`` units (partial units are not stored);
    #: ``ceil``: ``ceil(L / tokens_per_unit)`` (a page-granular pool)
    rounding: str
    formulas: tuple[str, ...]
    source: str
    notes: tuple[str, ...] = ()
    #: the engine refuses an allocation above its own host allowance (SGLang ``_allocate_host_buffer``)
    checks_host_allowance: bool = False

    def units_for(self, tokens: int) -> int:
        """Units one session of ``tokens`` tokens stores in this tier."""
        if self.rounding == "ceil":
            return -(-tokens // self.tokens_per_unit)
        return tokens // self.tokens_per_unit

    def stored_tokens(self, tokens: int) -> int:
        """Tokens of a ``tokens``-long session the tier holds (whole units only, or all of them)."""
        return tokens if self.rounding == "ceil" else self.units_for(tokens) * self.tokens_per_unit

    def sessions(self, tokens: int) -> int:
        """Sessions of ``tokens`` tokens resident at once: ``units // units_for(tokens)`` (0 when a
        session is shorter than one unit and so stores nothing)."""
        need = self.units_for(tokens)
        return self.units // need if need else 0

    @property
    def host_bytes(self) -> int:
        """Bytes this tier pins (or fills on disk) for one engine instance, all allocations."""
        return self.allocations * self.allocation_bytes

    def session_rank_bytes(self, tokens: int) -> int:
        """Bytes of one rank's slice of one session in the tier (what one GPU's link moves back)."""
        return self.stored_tokens(tokens) * self.rank_token_bytes
