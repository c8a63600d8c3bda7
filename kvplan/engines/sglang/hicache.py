"""SGLang's HiCache host pool (``--enable-hierarchical-cache``), sized as SGLang 0.5.23 does.

``HostKVCache.__init__`` (python/sglang/srt/mem_cache/pool_host/base.py): with ``--hicache-size`` GB
(> 0) the host pool holds ``int(size × 1e9 // size_per_token)`` tokens (decimal GB), else
``int(device_capacity_tokens × hicache_ratio)``; then ``page_num = size // page_size + 1`` (rounded
up by one page; every slot is free, ``clear``) and ``size = page_num × page_size``. ``size_per_token``
of the MHA host pool is
``(head_dim + v_head_dim) × head_num × layer_num × itemsize`` (``pool_host/mha.py``; MLA:
``(kv_lora_rank + qk_rope_head_dim) × layer_num × itemsize``, ``pool_host/mla.py``) — the device pool's
per-rank cell, the layers of this rank's stage. ``device_capacity_tokens`` is the device pool's
``size`` (``max_total_num_tokens``). ``_allocate_host_buffer`` refuses a pool above
``(available host RAM − 10 GiB) // ranks per host`` (``host_memory_budget_bytes``,
``HICACHE_HOST_MEMORY_RESERVE_BYTES``). ``--hicache-ratio`` defaults to 2.0 in ``cache`` mode
(``arg_groups/hicache_hook.py``); left at its default, ``auto_size_hicache``
(``mem_cache/hicache_auto_size.py``) lowers it to ``budget × 0.95 / device bytes`` with
``budget = int(allowance × hicache_host_memory_fraction 0.8)`` and device bytes the device K/V buffers
(``(size + page) × size_per_token``).
"""

from __future__ import annotations

from kvplan.engines.tiers import TierSize
from kvplan.errors import KVPlanError

#: ``HICACHE_HOST_MEMORY_RESERVE_BYTES`` (pool_host/base.py).
HOST_RESERVE_BYTES = 10 * 1024**3
#: ``--hicache-ratio`` default in ``cache`` mode; ``--hicache-host-memory-fraction`` default;
#: ``_ALLOCATION_SLACK_FRACTION`` (hicache_auto_size.py).
DEFAULT_RATIO = 2.0
HOST_FRACTION = 0.8
SLACK = 0.05
SOURCE = ("SGLang 0.5.23 python/sglang/srt/mem_cache/pool_host/base.py HostKVCache.__init__, "
          "_allocate_host_buffer; pool_host/mha.py get_size_per_token; mem_cache/hicache_auto_size.py")


def host_allowance(host_ram_bytes: int, ranks_per_host: int) -> int:
    """``(available − 10 GiB) // ranks per host`` (``host_memory_budget_bytes``)."""
    return (host_ram_bytes - HOST_RESERVE_BYTES) // max(ranks_per_host, 1)


def hicache_tier(*, device_tokens: int, token_bytes: int, page_size: int, world_size: int,
                 ratio: float | None = None, size_gb: int = 0, host_ram_bytes: int | None = None,
                 ranks_per_host: int = 1, stateful: bool = False) -> TierSize:
    """The host pool of one rank (every rank of the instance allocates its own)."""
    if stateful:
        raise KVPlanError("offload.hybrid", tier="SGLang HiCache", groups="windowed or recurrent")
    formulas = [f"size_per_token = {token_bytes:,} B per rank (the device pool's cell)"]
    if size_gb > 0:
        tokens = int(size_gb * 1e9 // token_bytes)
        formulas.append(f"--hicache-size {size_gb} GB: int({size_gb} × 1e9 // {token_bytes:,}) = "
                        f"{tokens:,} tokens")
    else:
        used = DEFAULT_RATIO if ratio is None else ratio
        if ratio is None and host_ram_bytes is not None:
            budget = int(host_allowance(host_ram_bytes, ranks_per_host) * HOST_FRACTION)
            device_bytes = (device_tokens + page_size) * token_bytes
            used = min(DEFAULT_RATIO, budget * (1 - SLACK) / device_bytes)
            formulas.append(f"auto-sized ratio = min(2.0, {budget:,} × 0.95 / {device_bytes:,}) = {used:.4f} "
                            f"(budget = int(allowance × {HOST_FRACTION}))")
            if used <= 0:
                raise KVPlanError("offload.host_ram", tier="SGLang HiCache", need=HOST_RESERVE_BYTES,
                                  ram=host_ram_bytes, what="the 10 GiB reserve")
        tokens = int(device_tokens * used)
        formulas.append(f"int({device_tokens:,} device tokens × ratio {used:g}) = {tokens:,} tokens")
    pages = tokens // page_size + 1
    size = pages * page_size
    formulas.append(f"page_num = {tokens:,} // {page_size} + 1 = {pages:,}; size = {size:,} tokens × "
                    f"{token_bytes:,} B = {size * token_bytes:,} B per rank")
    return TierSize(
        tier="SGLang HiCache host", engine="sglang", medium="host", tokens_per_unit=page_size,
        unit_bytes=page_size * token_bytes, units=pages, rank_token_bytes=token_bytes,
        allocations=world_size, allocation_bytes=size * token_bytes, ranks_per_unit=1, rounding="ceil",
        formulas=tuple(formulas), source=SOURCE, checks_host_allowance=True,
        notes=("every host slot is free at start (HostKVCache.clear: free_slots = arange(size))",))
