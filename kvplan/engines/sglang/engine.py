"""SGLang (0.5): a token pool with ``page_size`` tokens per page and hybrid-SWA/Mamba pools.

Sources (SGLang v0.5.23): ``python/sglang/srt/model_executor/pool_configurator.py`` (cell sizes,
``max_total_num_tokens``), ``python/sglang/srt/arg_groups/memory_hook.py`` (default
``mem_fraction_static``), ``python/sglang/srt/server_args.py`` (default attention backend and page
size), ``python/sglang/srt/configs/model_config.py`` (``is_hybrid_swa_model``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from kvplan.arch import Kind, LayerSpec, ModelArch
from kvplan.dtypes import KVDType
from kvplan.engines.base import (
    GIB,
    ContextLimit,
    Engine,
    EngineView,
    KVPool,
    Release,
    StartupCheck,
    ViewShape,
    resolve_dtype,
    weights_oom,
)
from kvplan.engines.kinds import TOKEN_KINDS, CacheRule, TokenLayout, layer_window
from kvplan.engines.reserve import Reserve, ReserveTerm, cuda_capacity
from kvplan.engines.settings import EngineSettings
from kvplan.engines.sglang.kv_dtype import resolve_auto_kv_dtype
from kvplan.engines.sglang.log import SglangLog
from kvplan.engines.sglang.lora import LORA_POOL_TERM, sglang_lora_term
from kvplan.engines.sglang.spec_decode import (
    MODELLED as SPEC_MODELLED,
)
from kvplan.engines.sglang.spec_decode import (
    SGL_SPEC_WEIGHTS_TERM,
    SPEC_MAX_RUNNING_REQUESTS,
    SglangSpec,
    resolve_sglang_speculative,
    sglang_spec_summary,
    sglang_spec_weights_term,
)
from kvplan.engines.sglang.weights import sglang_loading_rules
from kvplan.errors import KVPlanError, short

if TYPE_CHECKING:
    from kvplan.presets import GPU
    from kvplan.weights import LoadingRules

MIB = 1 << 20
#: SGLang ``is_hybrid_swa_model`` architectures (``configs/model_config.py``); others (Gemma 2/3,
#: Mistral v0.1) get full-length KV on every layer.
SGLANG_HYBRID_SWA_ARCHS = frozenset({
    "Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2MTP",
    "MiMoV2ForCausalLM", "Step3p5ForCausalLM", "Step3p5MTP", "Step3p7ForConditionalGeneration",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
    "BeamForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM", "IQuestQ1ForCausalLM",
    "IQuestQ1MTP", "LagunaForCausalLM", "MellumForCausalLM", "UnlimitedOCRForCausalLM",
})
#: ``model_loader/utils.py`` ``resolve_transformers_arch`` refuses these (no SGLang model class and
#: a Transformers class that is not backend-compatible).
SGLANG_UNSERVED_ARCHS = frozenset({"FalconForCausalLM", "JambaForCausalLM"})
#: ``swa_full_tokens_ratio`` default (``arg_groups/kv_cache_hook.py``).
SGLANG_SWA_FULL_RATIO = 0.8
#: ``mamba_full_memory_ratio`` fallback (``kv_cache_configurator.py`` ``_handle_max_mamba_cache``).
SGLANG_MAMBA_FULL_RATIO = 0.9
#: Mamba slots per running request: 3 + 2 tracking slots with the default extra buffer and overlap
#: schedule (``_calculate_mamba_ratio``, ``get_mamba_tracking_slots``).
SGLANG_MAMBA_SLOTS_PER_REQUEST = 5
#: Architectures whose multimodal path is off by default (``configs/model_config.py``
#: ``ModelConfig.__init__``, ``mm_disabled_models``; ``--enable-multimodal`` turns it on).
SGLANG_MM_DISABLED_ARCHS = frozenset({
    "Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
    "Step3VLForConditionalGeneration", "InklingForConditionalGeneration"})
#: ``SGLANG_VLM_CACHE_SIZE_MB`` default (``environ.py``): the multimodal embedding cache reserved
#: out of the KV budget (``kv_cache_configurator.py`` ``mm_runtime_reservation_gb``).
SGLANG_VLM_CACHE_BYTES = 100 * MIB
#: ``SGLANG_MM_FEATURE_CACHE_MB`` default (0.5.23 ``environ.py``): the feature-transport pool a GPU
#: ``--mm-feature-transport`` (``cuda_ipc``, ``cuda_vmm``) adds to that reservation.
SGLANG_MM_FEATURE_CACHE_BYTES = 1024 * MIB
#: ``--mm-feature-transport`` choices (0.5.23 ``arg_groups/fields/mm.py``).
SGLANG_MM_TRANSPORTS = ("cpu", "cuda_ipc", "cuda_vmm")


def sglang_vlm_factor(arch: ModelArch | None, record: SglangRelease) -> float:
    """``adjust_mem_fraction_for_vlm`` (0.4.9+ ``server_args.py``; 0.5.23
    ``arg_groups/memory_hook.py``, without ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``): the factor a
    multimodal model's default ``mem_fraction_static`` is multiplied by, ``0.95 × clamp(1 − 0.1 ×
    (L·H² / (24 · 1024²) − 1), 0.8, 1.05)`` with the vision tower's depth ``L`` and width ``H``;
    1 for a text model (``ModelConfig.is_multimodal`` as ``sglang_mm_reservation`` reads it, and a
    vision tower) or a release without the rule."""
    if arch is None or not record.vlm_fraction_factor or not sglang_mm_reservation(arch):
        return 1.0
    vision = next((t for t in arch.weights.towers if t.name == "vision"), None)
    if vision is None:
        return 1.0
    ratio = vision.n_layers * vision.hidden_size ** 2 / (24 * 1024 ** 2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def sglang_mm_reservation(arch: ModelArch, transport: str | None = None) -> int:
    """Bytes ``_resolve_memory_pool_config`` takes out of the KV budget before the Mamba split
    (``kv_cache_configurator.py`` ``mm_runtime_reservation_gb``, 0.5.23): the embedding cache
    (``SGLANG_VLM_CACHE_SIZE_MB``, 100 MiB) when ``ModelConfig.is_multimodal`` — read here as a
    checkpoint with a vision or audio tower whose architecture is not in ``mm_disabled_models`` —
    plus, with a GPU ``--mm-feature-transport`` (``cuda_ipc`` / ``cuda_vmm``), the transport pool
    (``SGLANG_MM_FEATURE_CACHE_MB``, 1,024 MiB). ``transport`` None: unset, CPU on one node (the
    multi-node GB200/GB300 MNNVL default is not modelled); another value is refused by name."""
    if transport is not None and transport not in SGLANG_MM_TRANSPORTS:
        raise KVPlanError("mm.transport", flag="--mm-feature-transport", value=short(transport, 40),
                          choices=", ".join(SGLANG_MM_TRANSPORTS))
    if not arch.weights.towers or arch.architecture in SGLANG_MM_DISABLED_ARCHS:
        return 0
    pool = SGLANG_MM_FEATURE_CACHE_BYTES if transport in ("cuda_ipc", "cuda_vmm") else 0
    return SGLANG_VLM_CACHE_BYTES + pool


def _memory_row(record: SglangRelease, gib: float, tp: int) -> tuple[int, int]:
    """``_handle_gpu_memory_settings``'s (chunked_prefill_size, cuda_graph_max_bs) for ``gib`` of
    device memory at ``tp`` (the record's ``memory_table``: cuda_graph_max_bs for tp < 4 / tp ≥ 4)."""
    chunked, bs_small = record.memory_top
    bs_large = bs_small
    for limit, size, small, large in record.memory_table:
        if gib < limit:
            chunked, bs_small, bs_large = size, small, large
            break
    return chunked, (bs_large if tp >= 4 else bs_small)


def sglang_reserved_mem(capacity_bytes: int, tp: int, pp: int,
                        record: SglangRelease | None = None) -> list[tuple[str, float, str]]:
    """The terms of SGLang's default ``reserved_mem`` (MiB; 0.5.3+ ``server_args.py``
    ``_handle_gpu_memory_settings``, 0.5.23 ``arg_groups/memory_hook.py``):
    512 + max(chunked_prefill_size, 2048)·1.5 + tp·pp/8·1024 + cuda_graph_max_bs·2, then a floor
    term raising the sum to 10 GiB above 60 GiB; older rules (``SglangRelease.fraction_rule``) give
    one term, ``(1 − fraction) × memory``. Each: (name, MiB, formula)."""
    record = record or SGLANG_RELEASES[-1]
    mib = capacity_bytes / MIB
    if record.fraction_rule != "reserved_mem":
        fraction = sglang_mem_fraction_static(capacity_bytes, tp, pp, False, record)
        return [("rule", (1 - fraction) * mib,
                 f"(1 − {fraction:g}) × {mib:,.0f} MiB ({record.name}: {_RULE_TEXT[record.fraction_rule]})")]
    chunked, decode_bs = _memory_row(record, mib / 1024, tp)
    terms = [("base", 512.0, "512 MiB"),
             ("chunked_prefill", max(chunked, 2048) * 1.5,
              f"max(chunked_prefill_size {chunked}, 2048) × 1.5 MiB"),
             ("parallel", tp * pp / 8 * 1024, f"tp {tp} × pp {pp} / 8 × 1024 MiB"),
             ("cuda_graphs", decode_bs * 2.0, f"decode max bs {decode_bs} × 2 MiB")]
    total = sum(t[1] for t in terms)
    if mib / 1024 > 60 and total < 10 * 1024:
        terms.append(("floor", 10 * 1024 - total, f"raised to 10 GiB above 60 GiB: 10240 − {total:g} MiB"))
    return terms


#: ``--mem-fraction-static`` defaults by ``tp_size`` (0.4.x ``server_args.py`` ``__post_init__``):
#: (at least this many GPUs, fraction), first match.
_TP_TABLE = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
_RULE_TEXT = {
    "tp_table": "server_args.py __post_init__: by tp_size, 0.79 ≥ 16, 0.81 ≥ 8, 0.85 ≥ 4, "
                "0.87 ≥ 2, else 0.88",
    "tp_table_13g": "server_args.py __post_init__: the tp_size table up to 81,920 MiB, else "
                    "(memory − 13 GiB) / memory",
    "tp_table_48g": "server_args.py __post_init__: the table by tp × pp up to 81,920 MiB (else 0.88), "
                    "above 96 GiB min(f + 48 GiB × (1 − f) / memory, (memory − 18 GiB) / memory)",
    "parallel_by_memory": "server_args.py __post_init__: reserved (2.8 + tp·pp/10) GiB below 35 GiB, "
                          "(9.5 + tp·pp/2) GiB below 90, (12 + tp·pp/2) GiB below 160, else 32 GiB; "
                          "round((memory − reserved) / memory, 3)",
}


def _table_fraction(parallel: int) -> float:
    return next(f for at_least, f in _TP_TABLE if parallel >= at_least)


#: What an SGLang process holds before its weights load (CUDA context, torch.distributed / NCCL
#: init), per vendor: CUDA's total minus the smallest rank's "Load weight begin. avail mem"
#: (``tests/fixtures/sglang_logs``). NVIDIA: the mean of log 01 (L4, TP 4, 0.4.3: 22.05 − 21.63 =
#: 0.42 GiB) and log 02 (H100, TP 1: 79.19 − (63.48 + 15.11) = 0.60 GiB), 0.51 GiB; AMD: logs 04/05
#: (MI355X, TP 8, ROCm 0.5.8: 287.98 − 283.53 = 4.45 GiB). Fitted on those logs only; no other
#: public log with a named GPU prints the line, so it is not yet checked on others.
SGLANG_HELD_BEFORE_LOAD: dict[str, int] = {"NVIDIA": round(0.509 * (1 << 30)),
                                           "AMD": round(4.45 * (1 << 30))}
#: What SGLang's distributed init (``Init torch distributed ends. mem usage``: NCCL communicators,
#: custom all-reduce buffers, ``model_parallel`` groups; ``model_executor/model_runner.py``
#: ``init_torch_distributed``) holds at TP > 1 on NVIDIA parts joined by NVLink 3/4/5
#: (``sglang_nvlink_dist_init``). Fitted: 2.01 GiB, what 7 of the 8 ranks of sgl-project/sglang
#: PR#11716 (2025-10-16, TP 8 on 140 GiB-class NVIDIA GPUs, 137.29 GB free before loading) print,
#: the rank whose free memory is the minimum SGLang budgets from. Not in ``SGLANG_HELD_BEFORE_LOAD``'s
#: NVIDIA fit: log 01 (PCIe L4s, TP 4) prints 0.13 GB for the same step and log 02 is TP 1. The
#: same log checks the split: 139.80 GiB (the H200's CUDA total) − 137.29 − 2.01 = 0.50 GiB, the
#: NVIDIA context term (0.509). Checked on sglang_logs 03 (H100, TP 4), which it was not fitted on.
#: Not derivable from SGLang's code: what SGLang itself allocates at this step is small — the custom
#: all-reduce (0.5.23 ``device_communicators/custom_all_reduce.py`` ``CustomAllreduce.__init__``: a
#: ``meta_size() + 8 MiB`` meta buffer, an 8 MiB IPC buffer and 8 MiB of ``rank_data``, ≈ 24 MiB) —
#: and the rest (≈ 1.98 GiB) is NCCL's own device memory (channel and NVLS multicast buffers, sized
#: by NCCL's version, topology and tuning, not by SGLang), so it stays fitted.
SGLANG_NVLINK_DIST_INIT = round(2.01 * (1 << 30))


def sglang_nvlink_dist_init(gpu: GPU, tp: int) -> int:
    """``SGLANG_NVLINK_DIST_INIT`` for an NVIDIA part whose interconnect is NVLink 3/4/5 (SXM
    boards and their NVSwitch domain) at SGLang ``tp_size`` > 1 (with DP attention ``--tp`` counts
    every GPU of the replica, so kvplan's tp × dp); else 0 (TP 1, PCIe cards and bridges: their
    distributed init is inside the vendor term)."""
    if gpu.custom or gpu.vendor != "NVIDIA" or tp <= 1:
        return 0
    return SGLANG_NVLINK_DIST_INIT if re.match(r"NVLink\d", gpu.interconnect) else 0


def sglang_held_before_load(gpu: GPU, tp: int = 1) -> tuple[int, str]:
    """The memory held before loading for this GPU's vendor (``SGLANG_HELD_BEFORE_LOAD``, fitted)
    plus the NVLink distributed init at TP > 1 (``sglang_nvlink_dist_init``, fitted); 0 for a
    custom accelerator or another vendor (no log to fit on)."""
    held = 0 if gpu.custom else SGLANG_HELD_BEFORE_LOAD.get(gpu.vendor, 0)
    if not held:
        return 0, ("0 B (CUDA context and buffers allocated before the weights: no public SGLang "
                   "log of this accelerator's vendor to fit on — override it)")
    how = (f"{held:,} B ({gpu.vendor}: CUDA total − the 'Load weight begin' free memory of "
           "the public logs; fitted on sglang_logs 01, 02 (NVIDIA) / 04, 05 (AMD))")
    dist = sglang_nvlink_dist_init(gpu, tp)
    if dist:
        how = (f"{held + dist:,} B = {how} + {dist:,} B distributed init at TP {tp} over NVLink "
               "('Init torch distributed ends. mem usage=2.01 GB', fitted on sgl-project/sglang "
               "PR#11716, TP 8)")
    return held + dist, how


def sglang_mem_fraction_static(capacity_bytes: int, tp: int, pp: int, is_mla: bool,
                               record: SglangRelease | None = None) -> float:
    """SGLang's default ``mem_fraction_static`` as ``record``'s release computes it
    (``SglangRelease.fraction_rule``): 0.5.3+ ``round((mem − reserved_mem) / mem, 3)`` with
    ``reserved_mem`` of ``sglang_reserved_mem``; 0.4.x–0.5.2 the rules of ``_RULE_TEXT``. ``mem``
    is the device memory in MiB."""
    record = record or SGLANG_RELEASES[-1]
    mem = capacity_bytes / MIB
    rule = record.fraction_rule
    if rule == "tp_table":
        return _table_fraction(tp)
    if rule == "tp_table_13g":
        return _table_fraction(tp) if mem <= 81920 else (mem - 1024 * 13) / mem
    if rule == "tp_table_48g":
        fraction = _table_fraction(tp * pp) if mem <= 81920 else 0.88
        if mem > 96 * 1024:
            fraction = min(fraction + 48 * 1024 * (1 - fraction) / mem, (mem - 1024 * 18) / mem)
        return fraction
    if rule == "parallel_by_memory":
        parallel = tp * pp
        if mem < 35 * 1024:
            reserved_mib = (2.8 + parallel / 10) * 1024
        elif mem < 90 * 1024:
            reserved_mib = (9.5 + parallel / 2) * 1024
        elif mem < 160 * 1024:
            reserved_mib = (12 + parallel / 2) * 1024
        else:
            reserved_mib = 32 * 1024
        return max(round((mem - reserved_mib) / mem, 3), 0.0)
    reserved = sum(t[1] for t in sglang_reserved_mem(capacity_bytes, tp, pp, record))
    return max(round((mem - reserved) / mem, 3), 0.0)


def sglang_device_memory(gpu: GPU) -> tuple[int, str]:
    """The device memory SGLang's default ``mem_fraction_static`` divides (bytes, and where it comes
    from): ``utils/common.py`` ``get_device_memory_capacity`` — on CUDA ``get_nvgpu_memory_capacity``,
    ``nvidia-smi --query-gpu=memory.total`` in MiB (the catalogue's ``reported_mib``), not the CUDA
    total its budget starts from; on ROCm ``get_amdgpu_memory_capacity``, rocminfo's pool size (the
    catalogue's rocm-smi figure where known, else its HIP total). A custom accelerator: the GiB
    typed; a part with no such figure: its CUDA total."""
    if gpu.custom or not gpu.reported_mib:
        return cuda_capacity(gpu).bytes, "the device total (no nvidia-smi / rocm-smi figure known)"
    tool = "rocm-smi" if gpu.vendor == "AMD" else "nvidia-smi"
    return gpu.reported_mib * MIB, (f"{tool} memory.total {gpu.reported_mib:,} MiB "
                                    "(utils/common.py get_device_memory_capacity)")


def sglang_default_page_size(gpu: GPU, arch: ModelArch) -> int | None:
    """SGLang's page size from its default attention backend (``server_args.py``): Hopper and
    older run fa3/flashinfer with ``page_size=1``; SM 10.x runs trtllm_mha for MHA/GQA models,
    which forces 64 tokens. None means the engine default (1)."""
    major = gpu.sm_major
    return 64 if major == 10 and not arch.is_mla else None


@dataclass
class SGLangShape(ViewShape):
    """An SGLang view: whether windowed layers get the hybrid SWA pool (``is_hybrid_swa_model`` and
    not ``--disable-hybrid-swa-memory``)."""

    hybrid_swa: bool = False
#: How a release computes the default ``--mem-fraction-static`` (``sglang_mem_fraction_static``).
FractionRule = Literal["tp_table", "tp_table_13g", "tp_table_48g", "parallel_by_memory", "reserved_mem"]


@dataclass(frozen=True, kw_only=True)
class SglangRelease(Release):
    """The traits that differ between SGLang releases (each field says where it is read)."""

    #: The default ``mem_fraction_static`` rule (``server_args.py``; 0.5.23 ``memory_hook.py``).
    fraction_rule: FractionRule = "reserved_mem"
    #: ``_handle_gpu_memory_settings``: (below this many GiB, chunked_prefill_size,
    #: cuda_graph_max_bs at tp < 4, at tp ≥ 4), first match; ``memory_top`` above the last.
    memory_table: tuple[tuple[int, int, int, int], ...] = (
        (20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (160, 8192, 256, 512))
    memory_top: tuple[int, int] = (16384, 512)
    #: ``--speculative-algorithm`` values kvplan sizes for the release (``speculative/spec_info.py``
    #: ``SpeculativeAlgorithm``, ``engines/sglang/spec_decode.py``); empty where kvplan has not read
    #: the release's draft budgeting (refused by name: older releases budgeted drafts by other
    #: rules, sgl-project/sglang PR#23862).
    spec_algorithms: tuple[str, ...] = ()
    #: The default fraction is scaled for a multimodal model by its vision tower
    #: (``adjust_mem_fraction_for_vlm``, ``sglang_vlm_factor``; from 0.4.9).
    vlm_fraction_factor: bool = True
    #: ``post_load_weights`` (``models/deepseek_v2.py``) dequantizes an FP8 128×128-block
    #: ``kv_b_proj`` to bf16 for its ``w_kc``/``w_vc`` copy on CUDA (read at 0.4.6.post5, 0.4.8.post1,
    #: 0.4.9.post2, 0.5.5); 0.4.3.post4, 0.4.4.post4 and 0.4.5.post3 requantize it per tensor to
    #: FP8 on CUDA too, as HIP does (``block_quant_to_tensor_quant``; ``sglang_loading_rules``).
    mla_copy_bf16_on_cuda: bool = True
    #: The multimodal embedding cache is taken out of the KV budget (``sglang_mm_reservation``;
    #: ``kv_cache_configurator.py`` ``mm_runtime_reservation_gb``, read at 0.5.23, absent at 0.5.9).
    mm_kv_reservation: bool = False
    #: ``--limit-mm-data-per-request`` exists (``server_args.py`` ``limit_mm_data_per_request``,
    #: checked per request by ``TokenizerManager._validate_mm_limits``: read at 0.5.7, 0.5.8, 0.5.9,
    #: 0.5.15 and 0.5.23; absent at 0.5.6).
    mm_data_limit: bool = False


#: SGLang releases, oldest first, each ``replace(previous, …)`` with what changed (sources read:
#: ``pip download sglang==X --no-deps``, ``sglang/srt/server_args.py``).
SGLANG_0_4 = SglangRelease(
    key="0.4", since="0.4.0", name="SGLang 0.4", fraction_rule="tp_table", vlm_fraction_factor=False,
    mla_copy_bf16_on_cuda=False,
    changes="default mem_fraction_static by tp_size alone (server_args.py __post_init__, read at "
            "0.4.3.post4 and 0.4.4.post4; 0.4.0–0.4.2 not read)")
SGLANG_0_4_5 = replace(
    SGLANG_0_4, key="0.4.5", since="0.4.5", name="SGLang 0.4.5", fraction_rule="tp_table_13g",
    changes="the tp_size table only up to 81,920 MiB of device memory, else (memory − 13 GiB) / "
            "memory, unrounded (server_args.py __post_init__, read at 0.4.5.post3)")
SGLANG_0_4_6 = replace(
    SGLANG_0_4_5, key="0.4.6", since="0.4.6", name="SGLang 0.4.6", fraction_rule="tp_table_48g",
    mla_copy_bf16_on_cuda=True,
    changes="the table by tp × pp up to 81,920 MiB (else 0.88), then above 96 GiB min(f + 48 GiB × "
            "(1 − f) / memory, (memory − 18 GiB) / memory) (server_args.py __post_init__, read at "
            "0.4.6.post5 and 0.4.7); the MLA w_kc/w_vc copy of an FP8 128×128-block kv_b_proj in "
            "bf16 on CUDA (models/deepseek_v2.py post_load_weights, block_quant_dequant; 0.4.5.post3 "
            "requantized it to per-tensor FP8)")
SGLANG_0_4_8 = replace(
    SGLANG_0_4_6, key="0.4.8", since="0.4.8", name="SGLang 0.4.8", fraction_rule="parallel_by_memory",
    changes="reserved memory by device memory and tp × pp, round((memory − reserved) / memory, 3) "
            "(server_args.py __post_init__, read at 0.4.8.post1, 0.4.9.post6, 0.5.1 and 0.5.2)")
SGLANG_0_4_9 = replace(
    SGLANG_0_4_8, key="0.4.9", since="0.4.9", name="SGLang 0.4.9", vlm_fraction_factor=True,
    changes="a multimodal model's default fraction × adjust_mem_fraction_for_vlm's factor "
            "(server_args.py, read at 0.4.9.post6, 0.4.10.post2, 0.5.1 and 0.5.2; absent at "
            "0.4.8.post1)")
SGLANG_0_5_3 = replace(
    SGLANG_0_4_9, key="0.5.3", since="0.5.3", name="SGLang 0.5.3", fraction_rule="reserved_mem",
    memory_table=((20, 2048, 8, 8), (35, 2048, 16, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
                  (160, 8192, 256, 512)),
    changes="reserved_mem = 512 + max(chunked_prefill_size, 2048) × 1.5 + cuda_graph_max_bs × 2 + "
            "tp·pp/8 × 1024 MiB, at least 10 GiB above 60 GiB, from the memory table "
            "(server_args.py _handle_gpu_memory_settings, read at 0.5.3)")
SGLANG_0_5_5 = replace(
    SGLANG_0_5_3, key="0.5.5", since="0.5.5", name="SGLang 0.5.5",
    memory_table=((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
                  (160, 8192, 256, 512)),
    changes="cuda_graph_max_bs 24 (tp < 4) below 35 GiB (_handle_gpu_memory_settings, read at 0.5.5, "
            "0.5.7 and 0.5.8; 0.5.10 adds len(piecewise_cuda_graph_tokens) × 8 MiB, piecewise graphs "
            "on by default — not modelled: 0.5.10–0.5.22 are read with this record)")
SGLANG_0_5_7 = replace(
    SGLANG_0_5_5, key="0.5.7", since="0.5.7", name="SGLang 0.5.7", mm_data_limit=True,
    changes="--limit-mm-data-per-request '{\"image\": N, …}' caps a request's items per modality "
            "(server_args.py, managers/tokenizer_manager.py _validate_mm_limits; read at 0.5.7, "
            "0.5.8, 0.5.9 and 0.5.15, absent at 0.5.6); the memory rules of 0.5.5")
SGLANG_0_5_23 = replace(
    SGLANG_0_5_7, key="0.5.23", since="0.5.23", name="SGLang 0.5.23",
    memory_table=((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (160, 8192, 256, 512)),
    mm_kv_reservation=True,
    changes="the release kvplan follows (source read at 0.5.23): the multimodal embedding cache "
            "out of the KV budget (mm_runtime_reservation_gb); arg_groups/memory_hook.py "
            "handle_gpu_memory_settings, chunked_prefill_size 4096 and cuda_graph_max_bs 48/160 "
            "below 35 GiB; --speculative-algorithm read from 0.5.23's speculative/ "
            "(spec_algorithms)",
    spec_algorithms=SPEC_MODELLED)
SGLANG_RELEASES: tuple[SglangRelease, ...] = (SGLANG_0_4, SGLANG_0_4_5, SGLANG_0_4_6, SGLANG_0_4_8,
                                              SGLANG_0_4_9, SGLANG_0_5_3, SGLANG_0_5_5, SGLANG_0_5_7,
                                              SGLANG_0_5_23)


class SGLang(Engine):
    """SGLang token pool, release 0.5."""

    engine_id = "sglang"
    label = "SGLang (token pool)"
    short = "SGLang"
    log_format = SglangLog
    releases: ClassVar[tuple[Release, ...]] = SGLANG_RELEASES
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        "gpu_util": ("mem_fraction_static (fraction)", "SGLang's memory-based default"),
        "block_size": ("Page size (tokens)", "the attention backend's"),
        "swa_eviction_interval": ("SWA eviction interval (tokens)", "128"),
        "swa_full_tokens_ratio": ("--swa-full-tokens-ratio", f"{SGLANG_SWA_FULL_RATIO}"),
        "disable_hybrid_swa_memory": ("--disable-hybrid-swa-memory", "off"),
        "max_total_tokens": ("--max-total-tokens", "no cap"),
        "max_num_seqs": ("--max-running-requests", "SGLang's, from the token pool"),
        "max_mamba_cache_size": ("--max-mamba-cache-size", "mamba_full_memory_ratio 0.9"),
        "ep": ("--ep-size", "1"),
        "dp": ("--enable-dp-attention --dp (ranks of tp GPUs)", "1"),
        "enable_lora": ("--enable-lora (LoRA memory pool; --lora-target-modules all)", "off"),
        "max_loras": ("--max-loras-per-batch (LoRA buffer slots)", "1 here; SGLang's own default is 8"),
        "lora_target_modules": ("--lora-target-modules (comma-separated)", "all"),
        "limit_mm_data_per_request": ("--limit-mm-data-per-request (JSON per modality, 0.5.7+)",
                                      "no limit"),
        "mm_feature_transport": ("--mm-feature-transport (cpu, cuda_ipc, cuda_vmm; 0.5.23)", "cpu"),
        "max_lora_rank": ("--max-lora-rank", "16"),
        "mtp": ("Load MTP layers (speculative decoding)", "off"),
        "speculative_algorithm": ("--speculative-algorithm", "none"),
        "speculative_draft_model_path": ("--speculative-draft-model-path",
                                         "the target's next-n layers where SGLang defaults to them"),
        "speculative_num_steps": ("--speculative-num-steps", "SGLang's choice by architecture"),
        "speculative_eagle_topk": ("--speculative-eagle-topk", "SGLang's choice"),
        "speculative_num_draft_tokens": ("--speculative-num-draft-tokens", "SGLang's choice"),
    }
    #: ``sglang/srt/configs/model_config.py`` ``ModelConfig.__init__``: a ``--context-length`` above
    #: the derived one raises unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``.
    long_context_rule = ("refuses --context-length above the model's derived context length "
                         "unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set")
    prefix_unit = 1
    checks_tp_heads = True
    #: ``--enable-dp-attention`` with expert parallelism for MoE layers.
    expert_parallel = True
    #: ``sglang/srt/utils/hf_transformers/common.py`` ``CONTEXT_LENGTH_KEYS``, in order of preference.
    context_keys_order: ClassVar[tuple[str, ...]] = (
        "max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")

    image_limit_flag = "--limit-mm-data-per-request"
    image_limit_refusal = ("per request (SGLang refuses the request: managers/tokenizer_manager.py "
                           "_validate_mm_limits)")

    def image_limit(self, settings: EngineSettings, modality: str = "image") -> int | None:
        """SGLang's ``--limit-mm-data-per-request`` (0.5.7+; ``SglangRelease.mm_data_limit``): the
        most items of ``modality`` one request may bring, a count above it refused per request
        (``TokenizerManager._validate_mm_limits``: for each modality the JSON names, ``count >
        limit`` raises, so 0 refuses every item); a modality the JSON leaves out, or the flag unset:
        None, no limit. The flag changes no memory: SGLang builds the towers and their reserve
        whatever it says (0.5.23 reads it for memory only in ``models/embedding_gemma2.py``). vLLM's
        ``--limit-mm-per-prompt`` is refused by name, and SGLang's flag before 0.5.7."""
        if settings.limit_mm_per_prompt is not None:
            raise KVPlanError("mm.limit_flag", flag="--limit-mm-per-prompt", engine=self.label,
                              detail="it is vLLM's flag; SGLang's is --limit-mm-data-per-request "
                                     "(0.5.7+)")
        limits = settings.limit_mm_data_per_request
        assert isinstance(self.record, SglangRelease)
        if limits is not None and not self.record.mm_data_limit:
            raise KVPlanError("mm.limit_flag", flag="--limit-mm-data-per-request",
                              engine=self.record.name,
                              detail="SGLang added it in 0.5.7 (absent from 0.5.6's server_args.py)")
        if limits is None:
            return None
        limit = json.loads(limits).get(modality)
        return None if limit is None else int(limit)

    def context_limit(self, arch: ModelArch) -> ContextLimit | None:
        """``common.py`` ``get_context_length``: the first key of ``CONTEXT_LENGTH_KEYS`` the text
        config sets (2048 when none), times ``rope_scaling["factor"]`` unless the set has
        ``original_max_position_embeddings`` or is ``llama3``. Under transformers 5 ``rope_scaling``
        is ``rope_parameters``: a per-layer-type set has no top-level ``factor``, so no scaling."""
        keys = dict(arch.context_keys)
        key = next((k for k in self.context_keys_order if k in keys), None)
        if key is None:
            return ContextLimit(2048, "no context-length key: SGLang assumes 2,048")
        limit, rule = keys[key], f"{key} {keys[key]:,}"
        flat = [r for r in arch.rope_scalings if not r.layer_type]
        if flat:
            rope = flat[0]
            if rope.factor is not None and rope.factor != 1 and rope.rope_type != "llama3" \
                    and rope.original_max_position_embeddings is None:
                limit, rule = int(rope.factor * limit), f"{rule} × rope factor {rope.factor:g}"
        return ContextLimit(limit, f"{rule}; SGLang get_context_length")

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """The default ``mem_fraction_static`` of this release on this GPU (``default_fraction``), the
        page size the default attention backend forces on this GPU; with
        ``--speculative-algorithm``: ``--max-running-requests`` 48 unless set
        (``speculative_hook.py``) and the target's next-n layers loaded when they are the draft."""
        update: dict[str, Any] = {}
        if settings.gpu_util is None and gpu is not None:
            update["gpu_util"] = self.default_fraction(gpu, settings, arch)
        if settings.block_size is None and gpu is not None and arch is not None:
            page = sglang_default_page_size(gpu, arch)
            if page is not None:
                update["block_size"] = page
        if arch is not None and settings.speculative_algorithm is not None:
            spec = self.speculative(arch, settings, gpu)
            if spec is not None and settings.max_num_seqs is None:
                update["max_num_seqs"] = SPEC_MAX_RUNNING_REQUESTS
            if spec is not None and spec.nextn_in_target and not settings.mtp:
                update["mtp"] = True
            if spec is not None and spec.eagle_topk > 1 and spec.algorithm != "NGRAM" \
                    and gpu is not None and sglang_default_page_size(gpu, arch) == 64:
                # speculative_hook.py _handle_eagle_family: the SM 10.x default backend
                raise KVPlanError("sgl_spec.trtllm_topk", topk=spec.eagle_topk, gpu=gpu.name)
        return settings.model_copy(update=update) if update else settings

    def default_fraction(self, gpu: GPU, settings: EngineSettings,
                         arch: ModelArch | None = None) -> float:
        """This release's default ``mem_fraction_static`` on ``gpu`` (``sglang_mem_fraction_static``
        of ``sglang_device_memory``: nvidia-smi's total, as SGLang reads it), times
        ``sglang_vlm_factor`` for a multimodal ``arch``."""
        assert isinstance(self.record, SglangRelease)
        memory, _ = sglang_device_memory(gpu)
        fraction = sglang_mem_fraction_static(memory, settings.tp, settings.pp, False, self.record)
        return fraction * sglang_vlm_factor(arch, self.record)

    def speculative(self, arch: ModelArch, settings: EngineSettings,
                    gpu: GPU | None = None) -> SglangSpec | None:
        """``--speculative-*`` as this release resolves them for ``arch``
        (``engines/sglang/spec_decode.py``); None without ``--speculative-algorithm``."""
        if settings.speculative_algorithm is None:
            return None
        assert isinstance(self.record, SglangRelease)
        hybrid_swa = (arch.architecture or "") in SGLANG_HYBRID_SWA_ARCHS \
            and not settings.disable_hybrid_swa_memory and any(layer_window(x) for x in arch.layers)
        return _speculative_cached(arch, settings.speculative_algorithm,
                                   settings.speculative_draft_model_path,
                                   settings.speculative_num_steps, settings.speculative_eagle_topk,
                                   settings.speculative_num_draft_tokens, settings.tp, settings.pp,
                                   settings.dp, hybrid_swa, self.release, self.loading_rules(gpu),
                                   SGLANG_HYBRID_SWA_ARCHS, self.record.spec_algorithms)

    def summarize_speculative(self, spec: SglangSpec, view: EngineView,
                              settings: EngineSettings) -> dict[str, object]:
        """``fit --json``'s ``speculative`` (``spec_decode.sglang_spec_summary``): the draft's share
        of the view's token cell (``sglang_draft_cell``)."""
        ratio = settings.swa_full_tokens_ratio or SGLANG_SWA_FULL_RATIO
        return sglang_spec_summary(spec, sglang_draft_cell(view, spec, ratio))

    def unserved_reason(self, arch: ModelArch) -> str | None:
        if arch.architecture in SGLANG_UNSERVED_ARCHS:
            return ("no SGLang model class, and the Transformers fallback is refused "
                    "(model_loader/utils.py resolve_transformers_arch)")
        return None

    def model_dtype(self, arch: ModelArch) -> str:
        """``configs/model_config.py`` ``_get_and_verify_dtype``: a float32 config runs in bf16 for
        Gemma models and in fp16 for the others."""
        if arch.model_dtype != "fp32":
            return arch.model_dtype
        return "bf16" if arch.model_type.startswith("gemma") else "fp16"

    def kv_dtype(self, arch: ModelArch, name: str) -> KVDType:
        """``auto``: ``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype`` — fp8_e4m3 when the
        checkpoint's quantization class declares FP8 KV (``kv_cache_quant_algo``;
        ``kvplan.engines.sglang.kv_dtype``), else the dtype the model runs in."""
        if name == "auto":
            resolved = resolve_auto_kv_dtype(arch.weights.quantization)
            if resolved is not None:
                return resolve_dtype(resolved)
        return super().kv_dtype(arch, name)

    #: A token pool of ``page_size`` pages for every attention kind; Mamba states in their own pool.
    specs: ClassVar[dict[Kind, type[CacheRule]]] = TOKEN_KINDS
    #: SGLang keeps the SSM state in fp32 unless the config says otherwise.
    layout: ClassVar[TokenLayout] = TokenLayout(ssm_dtype="fp32")

    def view_shape(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> ViewShape:
        """Page size (default 1) and whether this architecture gets the hybrid SWA pool."""
        page = settings.block_size or 1
        hybrid_swa = (arch.architecture or "") in SGLANG_HYBRID_SWA_ARCHS \
            and not settings.disable_hybrid_swa_memory
        windowed = any(layer_window(layer) for layer in counts)
        notes = ["SGLang gives every layer full-length KV for this architecture (not in its hybrid "
                 "SWA list, or --disable-hybrid-swa-memory)"] if windowed and not hybrid_swa else []
        return SGLangShape(settings, block_size=page, notes=notes, hybrid_swa=hybrid_swa)

    def spec_params(self, kind: Kind, layer: LayerSpec,
                    shape: ViewShape) -> tuple[Kind, dict[str, Any]]:
        """Windowed layers of a hybrid-SWA architecture keep ``W + swa_eviction_interval`` tokens
        (the SWA pool); every other attention cache is full length, in pages of ``page_size``."""
        assert isinstance(shape, SGLangShape)
        if kind.holds_state:
            return kind, {}
        window, page = layer_window(layer), shape.block_size or 1
        if window and shape.hybrid_swa:
            interval = shape.settings.swa_eviction_interval
            return kind, {"window": window, "cap": window + interval, "page": page,
                          "note": f"SWA pool: ≤ W + {interval} (eviction interval) tokens"}
        return (Kind.FULL if kind.windowed else kind), {"page": page}

    reserve_term_names = ("held_before_load",)

    def runtime_reserve(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                        tokens: int) -> Reserve:
        """SGLang's reserve is inside ``mem_fraction_static``: the terms of its default
        ``reserved_mem`` are shown while the fraction is the default (not subtracted again), and the
        memory held before the weights load (``kv_cache_configurator.py``
        ``_profile_available_bytes``; ``sglang_held_before_load``'s per-vendor default unless
        overridden) is what the budget subtracts, and with ``--enable-lora`` the LoRA memory pool."""
        terms: list[ReserveTerm] = []
        if settings.gpu_util is None or settings.gpu_util == self.default_fraction(gpu, settings, arch):
            memory, basis = sglang_device_memory(gpu)
            assert isinstance(self.record, SglangRelease)
            for name, mib, how in sglang_reserved_mem(memory, settings.tp, settings.pp, self.record):
                terms.append(ReserveTerm(
                    f"reserved_mem.{name}", int(mib * MIB), f"{how} = {int(mib * MIB):,} B (of {basis})",
                    f"{self.release}: {_fraction_source(self.record)} (mem_fraction_static default)",
                    counted=False))
        # --tp is every GPU of the replica under DP attention (dp_flags): its TP group
        held, how = sglang_held_before_load(gpu, settings.tp * settings.dp)
        terms.append(ReserveTerm(
            "held_before_load", held, how,
            f"{self.release}: mem_cache/kv_cache_configurator.py _profile_available_bytes "
            "(pre_model_load_memory: free memory after the CUDA context and torch.distributed / NCCL "
            "init, before 'Load weight begin')", basis="fit"))
        if settings.enable_lora:
            terms.append(sglang_lora_term(arch, tp=settings.tp, max_loras_per_batch=settings.max_loras,
                                          max_lora_rank=settings.max_lora_rank,
                                          dtype=self.model_dtype(arch), release=self.release,
                                          target_modules=settings.lora_target_modules))
        spec = self.speculative(arch, settings, gpu)
        if spec is not None and (term := sglang_spec_weights_term(spec, self.release)) is not None:
            terms.append(term)
        return Reserve(tuple(terms))

    def mem_fraction_static(self, capacity: int, settings: EngineSettings) -> float:
        """The ``mem_fraction_static`` in force: the setting, or SGLang's memory-based default."""
        assert isinstance(self.record, SglangRelease)
        return settings.gpu_util or sglang_mem_fraction_static(capacity, settings.tp, settings.pp, False,
                                                               self.record)

    def memory_target(self, capacity: int, settings: EngineSettings, arch: ModelArch,
                      notes: list[str]) -> tuple[int, str]:
        util = self.mem_fraction_static(capacity, settings)
        if util <= 0:
            notes.append("SGLang's default reserve exceeds this GPU's memory at this tp × pp")
        target = int(capacity * util)
        return target, f"{capacity:,} × mem_fraction_static {util} = {target:,} B"

    def kv_budgets(self, target: int, stage_weights: list[int], reserve: int,
                   settings: EngineSettings, formulas: dict[str, str], capacity: int = 0,
                   detail: Reserve | None = None) -> list[int]:
        """``kv_cache_configurator.py`` ``_profile_available_bytes``: free after the weights minus
        free before them × (1 − mfs), i.e. ``(capacity − held) × mfs − weights − after`` where
        ``held`` is what the process held before loading (CUDA context) and ``after`` what it
        allocates between loading and the KV pool (the LoRA pool, ``_split_reserve``)."""
        held, after = _split_reserve(reserve, detail)
        if not held or not capacity:
            return [target - w - after for w in stage_weights]
        util = self.mem_fraction_static(capacity, settings)
        return [int((capacity - held) * util) - w - after for w in stage_weights]

    def target_after_reserve(self, target: int, capacity: int, settings: EngineSettings,
                             detail: Reserve, formulas: dict[str, str]) -> int:
        """What the process may hold: the memory held before loading plus ``mem_fraction_static``
        of what was free then (``_profile_available_bytes``: ``pre × mfs`` after ``pre`` was
        measured), so the ledger's terms add up to the device total."""
        held, _ = _split_reserve(detail.total, detail)
        if not held or not capacity:
            return target
        util = self.mem_fraction_static(capacity, settings)
        adjusted = held + int((capacity - held) * util)
        formulas["memory_target"] += (f"; the fraction applies to the memory free before loading: "
                                      f"{held:,} held + ({capacity:,} − {held:,}) × {util} "
                                      f"= {adjusted:,} B")
        return adjusted

    #: ``memory_hook.py`` rounds the default to 3 decimals: kvplan searches in steps of 0.001.
    fraction_steps: ClassVar[int] = 1000

    def memory_fraction(self, capacity: int, settings: EngineSettings) -> float | None:
        """``--mem-fraction-static`` in force (``mem_fraction_static``)."""
        return self.mem_fraction_static(capacity, settings)

    def beside_others(self, others: int, capacity: int, target: int, stage_weights: list[int],
                      reserve: int, settings: EngineSettings, budgets: list[int],
                      formulas: dict[str, str], detail: Reserve | None = None,
                      ) -> tuple[list[int], str | None]:
        """``distributed/bootstrap.py`` ``measure_pre_model_load_memory``: ``pre_model_load_memory``
        is the *free* memory before the weights load, so what other processes hold scales with
        ``mem_fraction_static`` like the CUDA context (``kv_cache_configurator.py``
        ``_profile_available_bytes``: ``rest = free after loading − pre × (1 − mfs)``): KV =
        ``(capacity − held before load − others) × mfs − weights``; ``rest ≤ 0`` raises the
        ``ValueError`` below (v0.5.23; the default ``mfs`` is still from the device total,
        ``arg_groups/memory_hook.py``)."""
        util = self.mem_fraction_static(capacity, settings)
        held, after = _split_reserve(reserve, detail)
        pre = capacity - held - others
        out = [int(pre * util) - w - after for w in stage_weights]
        formulas["others"] = (f"free before loading {pre:,} B ({capacity:,} − held before load "
                              f"{held:,} − others {others:,}) × mem_fraction_static {util} − weights"
                              + (f" − LoRA pool {after:,}" if after else ""))
        oom = weights_oom(others + held, capacity, stage_weights)
        if oom is None and min(out) <= 0:
            # GiB floats as get_available_gpu_memory returns them
            pre_gb, avail_gb = pre / GIB, (pre - max(stage_weights) - after) / GIB
            minimum = 1 - avail_gb / pre_gb
            suggested = math.ceil(minimum * 1000) / 1000
            oom = (f"Loaded weights leave no GPU memory for the KV cache under "
                   f"--mem-fraction-static={util}. Raise --mem-fraction-static above "
                   f"{suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). If using "
                   "speculative decoding, draft weights are now counted.")
        return out, oom

    auto_kv_source: ClassVar[str] = ("SGLang mem_cache/kv_cache_dtype.py configure_kv_cache_dtype: "
                                     "quant_config.kv_cache_quant_algo FP8")

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str], reserve: Reserve | None = None) -> KVPool:
        notes.extend(self.auto_kv_note(arch, kv_dtype))
        view = self.stage_view(arch, kv_dtype, settings, notes)
        spec = self.speculative(arch, settings, gpu)
        if spec is not None and spec.notes:
            notes.extend(spec.notes)
        assert isinstance(self.record, SglangRelease)
        transport = settings.mm_feature_transport
        if transport is not None and not self.record.mm_kv_reservation:
            raise KVPlanError("mm.limit_flag", flag="--mm-feature-transport", engine=self.record.name,
                              detail="kvplan reads its reservation at 0.5.23 (mm_runtime_reservation_gb)")
        mm = sglang_mm_reservation(arch, transport) if self.record.mm_kv_reservation else 0
        return SGLangPool(view, max(min(budgets), 0), settings, mm, spec)

    def startup_check(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, pool: KVPool,
                      tokens: int) -> StartupCheck:
        """``sglang_startup`` for this pool's token count and Mamba slots; under DP attention
        ``--max-running-requests`` is the whole server's, ``max(1, N // dp)`` per worker
        (``resolve_max_num_reqs``: ``requested_per_worker``)."""
        assert isinstance(pool, SGLangPool)
        return sglang_startup(self.release, pool.capacity, pool.slots, tokens,
                              _per_worker(settings))

    def dp_flags(self, dp: int, tp: int) -> str:
        """``--tp`` is every GPU of the replica and ``--dp`` its attention ranks
        (``server_args.py``: attention TP = tp / dp); experts over all of them with ``--ep``."""
        return f"--enable-dp-attention --dp {dp} --tp {dp * tp} --ep {dp * tp}"

    def request_caps(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, pool: KVPool,
                     tokens: int, budgets: np.ndarray) -> np.ndarray | None:
        """``sglang_startup``'s ``max_running_requests`` for each row's smallest stage budget."""
        assert isinstance(pool, SGLangPool)
        budget = np.maximum(np.asarray(budgets, dtype=np.int64).min(axis=1), 0)
        kv, slots = pool._split(budget)
        total = pool._tokens_for(kv)
        caps = []
        for i, t in enumerate(np.ravel(total)):
            check = sglang_startup(self.release, int(t), None if slots is None else int(slots[i]),
                                   tokens, _per_worker(settings))
            caps.append(check.max_num_seqs if check.starts and check.max_num_seqs else 0)
        return np.asarray(caps, dtype=np.int64)

    def loading_rules(self, gpu: GPU | None) -> LoadingRules:
        """``kvplan.engines.sglang.weights.sglang_loading_rules`` (assumed equal to vLLM
        v0.33's scale rules)."""
        return sglang_loading_rules(self, gpu)


def _fraction_source(record: Release) -> str:
    """Where ``record``'s default ``mem_fraction_static`` is computed."""
    if record.key == SGLANG_0_5_23.key:
        return "arg_groups/memory_hook.py handle_gpu_memory_settings"
    if isinstance(record, SglangRelease) and record.fraction_rule == "reserved_mem":
        return "server_args.py _handle_gpu_memory_settings"
    return "server_args.py ServerArgs.__post_init__"


@lru_cache(maxsize=64)
def _speculative_cached(arch: ModelArch, algorithm: str, draft_path: str | None,
                        num_steps: int | None, eagle_topk: int | None,
                        num_draft_tokens: int | None, tp: int, pp: int, dp: int, hybrid_swa: bool,
                        release: str, rules: LoadingRules,
                        hybrid_archs: frozenset[str], algorithms: tuple[str, ...]) -> SglangSpec:
    return resolve_sglang_speculative(arch, algorithm=algorithm, draft_path=draft_path,
                                      num_steps=num_steps, eagle_topk=eagle_topk,
                                      num_draft_tokens=num_draft_tokens, tp=tp, pp=pp, dp=dp,
                                      hybrid_swa=hybrid_swa, release=release, rules=rules,
                                      hybrid_archs=hybrid_archs, algorithms=algorithms)


def _per_worker(settings: EngineSettings) -> int | None:
    """``--max-running-requests`` per DP-attention worker: ``max(1, N // dp)``."""
    given = settings.max_num_seqs
    return None if given is None else max(1, given // settings.dp)


def sglang_startup(release: str, total: int, slots: int | None, tokens: int,
                   given: int | None) -> StartupCheck:
    """``mem_cache/kv_cache_configurator.py`` (0.5.23): ``_handle_max_mamba_cache`` refuses
    ``max_mamba_cache_size ≤ 0`` ("Not enough GPU memory for hybrid … state cache");
    ``resolve_max_num_reqs``: ``max_running_requests`` = the set value, else
    ``max(min(int(max_total_num_tokens / context_len × 512), 4096), 2048)``, at most
    ``max_total_num_tokens // 2``, then at most ``max_mamba_cache_size // ratio`` (a warning:
    "max_running_requests is capped to N by the mamba state cache"); 0 refuses ("Hybrid …
    state cache is too small to serve any requests"). ``total`` = ``max_total_num_tokens``,
    ``slots`` = ``max_mamba_cache_size`` (None without recurrent layers), ``tokens`` = context_len."""
    if given is not None:
        reqs, source = min(given, total // 2), "set (at most max_total_num_tokens // 2)"
    else:
        estimated = max(min(int(total / max(tokens, 1) * 512), 4096), 2048)
        reqs = min(estimated, total // 2)
        source = (f"SGLang's default: min(clamp(int({total:,} / {tokens:,} × 512), 2048, 4096), "
                  f"{total:,} // 2) (kv_cache_configurator.py resolve_max_num_reqs)")
    if slots is None:
        return StartupCheck(max_num_seqs=reqs, cap_source=source)
    ratio = SGLANG_MAMBA_SLOTS_PER_REQUEST
    if slots <= 0:
        return StartupCheck(starts=False, max_num_seqs=0, state_blocks=slots, action="refuses",
                            cap_source=source, need=0, reason=(
            f"{release} will refuse to start: max_mamba_cache_size {slots:,} ≤ 0 (\"Not enough GPU "
            "memory for hybrid (mamba/linear-attention) state cache\": kv_cache_configurator.py "
            "_handle_max_mamba_cache)"))
    cap = slots // ratio
    if min(reqs, cap) <= 0:
        return StartupCheck(starts=False, max_num_seqs=0, state_blocks=slots, action="refuses",
                            cap_source=source, need=0, reason=(
            f"{release} will refuse to start: {slots:,} Mamba state slots // {ratio} slots per "
            "request = 0 running requests (\"state cache is too small to serve any requests\": "
            "kv_cache_configurator.py resolve_max_num_reqs)"))
    if cap < reqs:
        return StartupCheck(max_num_seqs=cap, state_blocks=slots, action="clamps", cap_source=source,
                            reason=(
            f"{release} starts but clamps max_running_requests from {reqs:,} to {cap:,}: {slots:,} "
            f"Mamba state slots // {ratio} slots per request (kv_cache_configurator.py "
            "resolve_max_num_reqs, a warning)"))
    return StartupCheck(max_num_seqs=reqs, state_blocks=slots, cap_source=source)


class SGLangPool(KVPool):
    """SGLang's pools (``model_executor/pool_configurator.py``, ``kv_cache_configurator.py``).

    Cell per token ``full + ratio × swa`` (``HybridSWAPoolConfigurator._recompute_cell_size``; SWA =
    the sliding and chunked layers of a hybrid-SWA architecture, ratio ``swa_full_tokens_ratio``);
    ``max_total_num_tokens = int(kv // cell) // page × page`` (``calculate_pool_sizes``), capped by
    ``--max-total-tokens`` and re-aligned (``_apply_token_constraints``). Recurrent states get their
    own pool (``_handle_max_mamba_cache``): ``K = int((budget × r / (1 + r) − state) // state)``
    slots (``--max-mamba-cache-size``: ``K`` as set), KV gets ``budget − (K + 1) × state``, and a
    request needs 5 slots. ``mm_reserve`` (``sglang_mm_reservation``) leaves the budget first.
    With EAGLE-family / STANDALONE speculation the cell grows by the draft's share,
    ``int(cell × draft_layers / num_layers)`` (``DefaultPoolConfigurator.__init__``).
    """

    def __init__(self, view: EngineView, budget: int, settings: EngineSettings | None = None,
                 mm_reserve: int = 0, spec: SglangSpec | None = None) -> None:
        settings = settings or EngineSettings()
        self.view = view
        self.mm_reserve = mm_reserve
        self.page = view.block_size or 1
        self.ratio = settings.swa_full_tokens_ratio or SGLANG_SWA_FULL_RATIO
        self.max_total = settings.max_total_tokens
        full = sum(r.token_bytes for r in view.rules if not r.kind.windowed)
        swa = sum(r.token_bytes for r in view.rules if r.kind.windowed)
        self.cell = full + self.ratio * swa
        self.spec = spec
        self.draft_cell = sglang_draft_cell(view, spec, self.ratio) if spec is not None else 0.0
        self.cell += self.draft_cell
        self.per_request_state = view.state_bytes
        self.mamba_slots = settings.max_mamba_cache_size
        self.spec_draft_tokens = spec.num_draft_tokens if spec is not None else 0
        self.spec_running = _per_worker(settings) or SPEC_MAX_RUNNING_REQUESTS
        kv, slots = self._split(np.asarray([budget], dtype=np.int64))
        self.kv_budget = int(kv[0])
        self.slots = None if slots is None else int(slots[0])
        self.capacity = int(self._tokens_for(kv)[0])
        self.block_size = self.page
        self.num_blocks = self.capacity // self.page if self.page > 1 else None

    def _split(self, budget: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """KV bytes and Mamba slots for each budget less ``mm_reserve`` (no recurrent layers: all
        of it is KV)."""
        budget = budget - self.mm_reserve
        state = self.per_request_state
        if not state:
            return budget, None
        d, ratio = self.spec_draft_tokens, SGLANG_MAMBA_SLOTS_PER_REQUEST
        if self.mamba_slots is not None:  # --max-mamba-cache-size: the slots as set
            slots = np.full(np.shape(budget), self.mamba_slots, dtype=np.int64)
        elif d:  # _handle_max_mamba_cache: main states and draft intermediates solved jointly
            r = SGLANG_MAMBA_FULL_RATIO
            slots = np.maximum((budget * r / (1 + r) - state * (1 + d)) // (state * (1 + d / ratio)),
                               0).astype(np.int64)
        else:
            r = SGLANG_MAMBA_FULL_RATIO
            slots = np.maximum((budget * r / (1 + r) - state) // state, 0).astype(np.int64)
        kv = budget - (slots + 1) * state
        if d:  # intermediate states of the capped running requests (+1 padding slot), D each
            capped = np.minimum(max(1, self.spec_running), slots // ratio)
            kv = kv - state * (capped + 1) * d
        return kv, slots

    def _tokens_for(self, kv: np.ndarray) -> np.ndarray:
        if not self.cell:
            return np.zeros(kv.shape, dtype=np.int64)
        tokens = (np.maximum(kv, 0) // self.cell).astype(np.int64) // self.page * self.page
        if self.max_total is not None:
            tokens = np.minimum(tokens, self.max_total) // self.page * self.page
        return tokens
    def _tokens(self, L: np.ndarray) -> np.ndarray:
        return -(-np.asarray(L, dtype=np.int64) // self.page) * self.page

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return self.view.reserved_bytes(np.asarray(L, dtype=np.int64))

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        fit_tokens = self.capacity // self._tokens(L)
        if self.slots is not None:
            fit_tokens = np.minimum(fit_tokens, self.slots // SGLANG_MAMBA_SLOTS_PER_REQUEST)
        return fit_tokens

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        return self.capacity / self._tokens(L)

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``max_requests`` for each row's smallest stage budget (the same split and pool)."""
        budget = np.maximum(np.asarray(budgets, dtype=np.int64).min(axis=1), 0)
        kv, slots = self._split(budget)
        fit = self._tokens_for(kv) // int(self._tokens(np.asarray([L]))[0])
        if slots is not None:
            fit = np.minimum(fit, slots // SGLANG_MAMBA_SLOTS_PER_REQUEST)
        return fit

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.capacity)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        return self._tokens(L) * users

    def formulas(self, L: int) -> dict[str, str]:
        out = {"kv_pool_tokens": f"({self.kv_budget:,} // {self.cell:,.0f} B per token) // "
                                 f"{self.page} × {self.page} = {self.capacity:,}"}
        if self.draft_cell and self.spec is not None and self.spec.draft_swa_layers:
            out["spec_draft_kv"] = (
                f"{self.spec.given} draft {self.spec.draft_name} on the hybrid SWA pool: "
                f"{self.spec.draft_layers - self.spec.draft_swa_layers} full + {self.ratio} × "
                f"{self.spec.draft_swa_layers} SWA draft layer(s) = {self.draft_cell:,.1f} B more per "
                "token (pool_configurator.py HybridSWAPoolConfigurator._recompute_cell_size)")
        elif self.draft_cell and self.spec is not None:
            target = int(self.cell) - self.draft_cell
            out["spec_draft_kv"] = (
                f"{self.spec.given} draft {self.spec.draft_name}: int({target:,} B × "
                f"{self.spec.draft_layers} draft layers / {self.spec.target_layers} target layers) "
                f"= {self.draft_cell:,} B more per token in the cell ({self.cell:,.0f} B) "
                "(pool_configurator.py DefaultPoolConfigurator.__init__, SGLang 0.5.23)")
        if self.mm_reserve:
            pool = " + the GPU feature-transport pool (SGLANG_MM_FEATURE_CACHE_MB)" \
                if self.mm_reserve > SGLANG_VLM_CACHE_BYTES else ""
            out["kv_pool_tokens"] += (f"; {self.mm_reserve:,} B multimodal embedding cache{pool} taken "
                                      "first (SGLANG_VLM_CACHE_SIZE_MB, mm_runtime_reservation_gb)")
        return out


def sglang_draft_cell(view: EngineView, spec: SglangSpec, ratio: float) -> float:
    """Bytes per token the draft adds to the cell: a hybrid-SWA pool (full and SWA layers)
    ``SglangSpec.hybrid_draft_cell`` with the target's per-layer sizes
    (``HybridSWAPoolConfigurator``), else ``int(cell × draft / target layers)``
    (``DefaultPoolConfigurator``)."""
    full = [r.bytes_per_token for r in view.rules if not r.kind.windowed and r.bytes_per_token]
    swa = [r.bytes_per_token for r in view.rules if r.kind.windowed and r.bytes_per_token]
    if full and swa:
        return spec.hybrid_draft_cell(full[0], swa[0], ratio)
    cell = sum(r.token_bytes for r in view.rules if not r.kind.windowed) \
        + ratio * sum(r.token_bytes for r in view.rules if r.kind.windowed)
    return spec.draft_cell(int(cell))


def _split_reserve(reserve: int, detail: Reserve | None) -> tuple[int, int]:
    """(held before loading, allocated after loading): the LoRA pool (``lora_pool``) is built after
    ``load_model`` and before the KV pool (``model_runner.py`` ``initialize``), and the draft's
    weights (``spec_draft_weights``) are loaded after ``pre_model_load_memory`` is measured, so
    neither is scaled by ``mem_fraction_static``; every other counted term (or a given total) is
    held before."""
    if detail is None or detail.total_override is not None:
        return reserve, 0
    after = sum(t.bytes for t in detail.terms
                if t.counted and t.name in (LORA_POOL_TERM, SGL_SPEC_WEIGHTS_TERM))
    return reserve - after, after
