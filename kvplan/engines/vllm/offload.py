"""vLLM's KV offload tiers: native CPU offloading and LMCache, sized as vLLM 0.33 and LMCache 0.5.6 do.

**Native** (``--kv-offloading-size GiB --kv-offloading-backend native``): ``VllmConfig.
_post_init_kv_transfer_config`` (vllm/config/vllm.py) sets the ``OffloadingConnector`` with
``cpu_bytes_to_use = size × 2^30`` — the total over the world's ranks (``CacheConfig.kv_offloading_size``:
"summed across all TP ranks"). ``build_offloading_config`` (distributed/kv_transfer/kv_connector/v1/
offloading/config.py) takes ``worker_kv_bytes_per_block`` = the GPU KV tensor's bytes / num_blocks
and ``blocks_per_chunk`` (``kv_connector_extra_config`` ``block_size`` in tokens, a multiple of the GPU
block, or ``blocks_per_chunk``; default 1). ``CPUOffloadingSpec.__init__`` (v1/kv_offload/cpu/
spec.py): a chunk holds every worker's slice (one copy when the replicated MLA layout applies),
rounded up to ``SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT`` = ``mmap.PAGESIZE`` (4096 on x86-64 and
arm64 with 4 KiB pages); ``num_chunks = int(cpu_bytes_to_use) // aligned chunk``. The scheduler stores
only whole chunks of the prompt (``storable_chunks``: ``tokens // tokens_per_chunk``;
``offload_prompt_only`` defaults to True, ``OffloadingSpec.__init__``).

**LMCache** (``kv_connector=LMCacheConnectorV1``; LMCache's own config): ``max_local_cpu_size`` GiB
(``int(size × 1024**3)``, default 5.0) per worker process — one ``LocalCPUBackend`` per rank
(``local_cpu_backend.initialize_allocator``); chunks of ``chunk_size`` tokens (default 256) in shape
``[2 or 1, num_layer, chunk_size, num_kv_head × head_size]`` of the KV dtype
(``integration/vllm/utils.py`` ``create_lmcache_metadata``: ``model_config.get_num_layers`` — every
layer of the stage, attention or not — ``get_num_kv_heads`` and ``get_head_size``; ``metadata.
get_shapes``), each allocation rounded up to ``AddressManager.ALIGN_BYTES`` = 4096
(``memory_management.py``). ``save_unfull_chunk`` defaults to False: whole chunks only. The disk
tier (``local_disk``, ``max_local_disk_size`` GiB) counts each chunk's physical (aligned) size
(``local_disk_backend.py``).
"""

from __future__ import annotations

from kvplan.arch import MLA, Attention, ModelArch
from kvplan.dtypes import KVDType
from kvplan.engines.kinds import kv_heads_per_rank
from kvplan.engines.tiers import TierSize
from kvplan.errors import KVPlanError

#: ``SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE`` (vLLM 0.33, 4 KiB pages).
NATIVE_ALIGNMENT = 4096
#: ``AddressManager.ALIGN_BYTES`` (LMCache 0.5.6 ``v1/memory_management.py``).
LMCACHE_ALIGNMENT = 4096
#: LMCache 0.5.6 defaults (``v1/config.py`` ``_CONFIG_DEFINITIONS``).
LMCACHE_CHUNK_SIZE = 256
LMCACHE_CPU_GIB = 5.0


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align


def pure_mla(arch: ModelArch) -> bool:
    """Every KV layer is MLA (vLLM ``model_config.use_mla``; LMCache ``mla_enabled``)."""
    kv_layers = [layer for layer in arch.layers if isinstance(layer, (Attention, MLA))]
    return bool(kv_layers) and all(isinstance(layer, MLA) for layer in kv_layers)


def replicated_mla(arch: ModelArch, tp: int, pp: int, vendor: str) -> bool:
    """One copy per chunk instead of one per rank: a pure-MLA model at TP > 1, PP 1, on the shared
    mmap region (CUDA, not ROCm), one node (``build_offloading_config`` ``replicated_layout`` and
    ``CPUOffloadingSpec._uses_shared_region``)."""
    return pure_mla(arch) and tp > 1 and pp == 1 and vendor.upper() != "AMD"


def native_cpu_tier(*, size_gib: float, worker_bytes_per_block: int, gpu_block_size: int, world_size: int,
                    replicated: bool, n_groups: int, chunk_tokens: int | None = None) -> TierSize:
    """vLLM 0.33 ``CPUOffloadingSpec``: chunks of ``blocks_per_chunk`` GPU blocks of every rank.

    ``chunk_tokens`` is ``kv_connector_extra_config["block_size"]`` (None: one GPU block per chunk).
    """
    if n_groups != 1:
        raise KVPlanError("offload.hybrid", tier="vLLM native CPU offloading", groups=n_groups)
    blocks_per_chunk = 1
    if chunk_tokens is not None:
        if chunk_tokens % gpu_block_size:
            raise KVPlanError("offload.chunk", value=chunk_tokens, block=gpu_block_size,
                              use=_round_up(chunk_tokens, gpu_block_size))
        blocks_per_chunk = chunk_tokens // gpu_block_size
    copies = 1 if replicated else world_size
    cpu_bytes = int(size_gib * (1 << 30))
    chunk = worker_bytes_per_block * copies * blocks_per_chunk
    aligned = _round_up(chunk, NATIVE_ALIGNMENT)
    chunks = cpu_bytes // aligned
    tokens = gpu_block_size * blocks_per_chunk
    formulas = (
        f"cpu_bytes_to_use = int({size_gib:g} × 2^30) = {cpu_bytes:,} B (total over {world_size} rank(s))",
        f"chunk = {worker_bytes_per_block:,} B per block per rank × {copies} "
        f"cop{'y' if copies == 1 else 'ies'} "
        f"× {blocks_per_chunk} block(s) = {chunk:,} B → round_up(, {NATIVE_ALIGNMENT}) = {aligned:,} B "
        f"per {tokens:,} tokens",
        f"num_chunks = {cpu_bytes:,} // {aligned:,} = {chunks:,}",
    )
    notes: tuple[str, ...] = ("only whole chunks of the prompt are stored (offload_prompt_only "
                              "defaults to True)",
                              "the OffloadingConnector; VLLM_USE_SIMPLE_KV_OFFLOAD=1 selects "
                              "SimpleCPUOffloadConnector instead, not modelled")
    if replicated:
        notes += ("replicated MLA layout: one copy of the latent for all TP ranks",)
    return TierSize(
        tier="vLLM native CPU", engine="vllm", medium="host", tokens_per_unit=tokens, unit_bytes=aligned,
        units=chunks, rank_token_bytes=worker_bytes_per_block // gpu_block_size, allocations=1,
        allocation_bytes=chunks * aligned, ranks_per_unit=copies, rounding="whole", formulas=formulas,
        source="vLLM 0.33 vllm/v1/kv_offload/cpu/spec.py CPUOffloadingSpec.__init__; "
               "kv_connector/v1/offloading/config.py build_offloading_config; config/vllm.py "
               "_post_init_kv_transfer_config", notes=notes)


def lmcache_token_bytes(arch: ModelArch, dtype: KVDType, tp: int, stage_layers: int) -> tuple[int, str]:
    """Bytes of one token of one rank in LMCache's stored chunk: ``kv × layers × heads × head × item``.

    ``create_lmcache_metadata``: ``kv_shape = (num_layer, 1 if use_mla else 2, chunk, num_kv_head,
    head_size)`` with vLLM's ``get_num_layers`` (every layer of the stage), ``get_num_kv_heads``
    (``max(1, nkv // tp)``) and ``get_head_size`` (MLA: ``kv_lora_rank + qk_rope_head_dim``); element
    bytes of the KV dtype (``get_kv_cache_torch_dtype``: fp8 is one byte, no scales stored).
    """
    layer = next((spec for spec in arch.layers if isinstance(spec, (Attention, MLA))), None)
    if layer is None:
        raise KVPlanError("offload.no_kv", tier="LMCache")
    item = dtype.bits // 8 if dtype.bits % 8 == 0 and dtype.bits else 0
    if item == 0:
        raise KVPlanError("offload.dtype", tier="LMCache", dtype=dtype.name)
    if isinstance(layer, MLA):
        head, heads, kv = layer.kv_lora_rank + layer.qk_rope_head_dim, 1, 1
    else:
        head, heads, kv = layer.head_dim_k, kv_heads_per_rank(layer.n_kv_heads, tp), 2
    per_token = kv * stage_layers * heads * head * item
    return per_token, (f"{kv} × {stage_layers} layers × {heads} KV head(s) × {head} × {item} B = "
                       f"{per_token:,} B per token per rank")


def lmcache_tier(*, size_gib: float, token_bytes: int, token_formula: str, chunk_size: int, world_size: int,
                 medium: str = "host", mla: bool = False) -> TierSize:
    """LMCache 0.5.6 ``LocalCPUBackend`` (``max_local_cpu_size``) or ``LocalDiskBackend``
    (``max_local_disk_size``) of one rank: ``int(size × 1024**3) // round_up(chunk bytes, 4096)``."""
    total = int(size_gib * 1024**3)
    chunk = token_bytes * chunk_size
    aligned = _round_up(chunk, LMCACHE_ALIGNMENT)
    chunks = total // aligned
    name = "max_local_cpu_size" if medium == "host" else "max_local_disk_size"
    formulas = (
        token_formula,
        f"chunk = {chunk_size:,} tokens × {token_bytes:,} B = {chunk:,} B → round_up(, {LMCACHE_ALIGNMENT}) "
        f"= {aligned:,} B",
        f"{name} int({size_gib:g} × 1024^3) = {total:,} B per rank // {aligned:,} = {chunks:,} chunks",
    )
    backend = "local_cpu_backend.py initialize_allocator" if medium == "host" else \
        "local_disk_backend.py (max_cache_size, get_physical_size)"
    return TierSize(
        tier="LMCache CPU" if medium == "host" else "LMCache disk", engine="vllm", medium=medium,
        tokens_per_unit=chunk_size, unit_bytes=aligned, units=chunks, rank_token_bytes=token_bytes,
        allocations=world_size, allocation_bytes=total, ranks_per_unit=1, rounding="whole",
        formulas=formulas,
        source=f"LMCache 0.5.6 lmcache/integration/vllm/utils.py create_lmcache_metadata; "
               f"v1/storage_backend/{backend}; v1/memory_management.py AddressManager",
        notes=("whole chunks only (save_unfull_chunk defaults to False)",
               "the in-process connector (--kv-transfer-config kv_connector=LMCacheConnectorV1); vLLM "
               "0.33's --kv-offloading-backend lmcache starts LMCacheMPConnector instead, whose server "
               "sizes itself (its size is not --kv-offloading-size) and is not modelled here") + ((
            "MLA: only the first rank stores (save_only_first_rank defaults to use_mla, cache_engine.py); "
            "every rank still allocates its buffer, and a restore is broadcast from rank 0",)
            if mla and world_size > 1 else ()))
