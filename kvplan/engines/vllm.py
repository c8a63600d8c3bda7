"""vLLM (v1 engine, release v0.33): paged blocks, KV-cache groups, memory target and logged capacity.

Sources (vLLM v0.33): ``vllm/v1/kv_cache_interface.py`` (spec pages and ``max_memory_usage_bytes``),
``vllm/v1/core/single_type_kv_cache_manager.py`` (held blocks), ``vllm/v1/core/kv_cache_utils.py``
(``get_kv_cache_groups``, ``_get_kv_cache_groups_uniform_page_size``,
``get_max_concurrency_for_kv_cache_config``, ``get_kv_cache_capacity``),
``vllm/v1/core/kv_cache_planning.py`` (``num_blocks = available_memory // bytes_per_block``),
``vllm/v1/worker/gpu_worker.py`` (memory target ``ceil(total × gpu_memory_utilization)``),
``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` and ``vllm/platforms/cuda.py``
(MLA backend block sizes).

Groups:

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

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from kvplan.arch import LayerSpec, ModelArch, NoCache, Recurrent
from kvplan.dtypes import KVDType
from kvplan.engines.base import (
    ContextLimit,
    Engine,
    EngineView,
    KVPool,
    layer_kind,
    pp_partition,
    raised_block,
)
from kvplan.engines.kinds import (
    PAGED_KINDS,
    VLLM_DEFAULT_BLOCK_SIZE,
    CacheRule,
    PagedRule,
    PagedStateRule,
)
from kvplan.engines.repack import ExpertRepack
from kvplan.engines.reserve import Reserve, cuda_capacity
from kvplan.engines.settings import EngineSettings
from kvplan.engines.vllm_memory import CaptureRule, SamplerPath, vllm_reserve_terms

if TYPE_CHECKING:
    from kvplan.presets import GPU

#: vLLM ``SupportsMambaPrefixCaching`` families: mamba cache mode "all" instead of "align".
VLLM_MAMBA_ALL_MODE_VARIANTS = frozenset({"mamba2"})
VLLM_DEFAULT_GPU_UTIL = 0.92  # vllm/config/cache.py (0.9 before v0.20.0)


def _batch_tier(device_bytes: int | None, device_name: str, *, huge_tier: bool,
                gb10: bool) -> str:
    """The device class of vLLM's ``EngineArgs.get_batch_defaults`` (by CUDA's total and the name):
    ``huge`` ≥ 160 GiB (v0.28+: ``huge_tier``), ``large`` ≥ 70 GiB and not an A100 (nor, from
    v0.33, a GB10: ``gb10``), else ``small`` (an unknown device too)."""
    gib = 1 << 30
    if huge_tier and device_bytes and device_bytes >= 160 * gib:
        return "huge"
    if (device_bytes and device_bytes >= 70 * gib and "a100" not in device_name.lower()
            and not gb10):
        return "large"
    return "small"


def default_max_num_batched_tokens(device_bytes: int | None, device_name: str = "",
                                   usage: str = "serve", *, gb10: bool = False,
                                   huge_tier: bool = True) -> int:
    """vLLM ``EngineArgs.get_batch_defaults`` ``max_num_batched_tokens`` per ``_batch_tier``: huge
    16384; large 16384 (``LLM``) / 8192 (``serve``); small 8192 / 2048. Without the huge tier
    (v0.9.2–v0.27) a ≥ 160 GiB device is large."""
    llm = usage == "llm"
    tier = _batch_tier(device_bytes, device_name, huge_tier=huge_tier, gb10=gb10)
    return {"huge": 16384, "large": 16384 if llm else 8192, "small": 8192 if llm else 2048}[tier]


def default_max_num_seqs(device_bytes: int | None, device_name: str = "", *,
                         gb10: bool = False) -> int:
    """vLLM ``EngineArgs.get_batch_defaults`` ``max_num_seqs`` (v0.28+, ``serve``): 1024 on the huge
    and large tiers of ``_batch_tier``, 256 on the small one."""
    return 256 if _batch_tier(device_bytes, device_name, huge_tier=True, gb10=gb10) == "small" \
        else 1024


def vllm_mla_block_size(gpu: GPU, kv_dtype: str) -> int:
    """Default MLA block size from the backend vLLM picks (``vllm/platforms/cuda.py``).

    SM 10.x (Blackwell) → FlashInfer-MLA (32); SM 9.x with an fp8 cache → FlashMLA (64);
    otherwise FlashAttention-MLA / Triton-MLA (16).
    """
    major = int(float(gpu.compute_capability)) if gpu.compute_capability else 0
    if major == 10:
        return 32
    if major == 9 and kv_dtype.startswith("fp8"):
        return 64
    return 16


def mxfp4_repack(gpu: GPU | None, fi_inter: int, triton: bool, keeps_scales: bool,
                 source: str) -> ExpertRepack | None:
    """The MXFP4 MoE backend vLLM picks by compute capability and how it holds the experts
    (``mxfp4_round_up_hidden_size_and_intermediate_size``, ``convert_to_mxfp4_moe_kernel_format``;
    ``_swizzle_mxfp4`` with triton_kernels' Hopper layouts: values padded to 16 rows × 64 columns,
    scales to 256 rows with 8 warps). SM 10.x → FlashInfer TRT-LLM (hidden 256, intermediate
    ``fi_inter``, fp32 biases); SM 9.0 with ``triton`` → OAI Triton (intermediate 64, swizzled
    scale copy, fp32 biases); any other CUDA GPU → Marlin (hidden 256, intermediate 128). No
    capability (AMD, TPU, custom): None."""
    major = int(float(gpu.compute_capability)) if gpu is not None and gpu.compute_capability else 0
    if not major:
        return None
    if major == 10:
        return ExpertRepack("FlashInfer TRT-LLM", hidden=256, inter=fi_inter, fp32_bias=True,
                            source=source)
    if major == 9 and triton:
        return ExpertRepack("Triton", inter=64, value_rows=16, value_cols=64, scale_rows=256,
                            keeps_scales=keeps_scales, fp32_bias=True, source=source)
    return ExpertRepack("Marlin", hidden=256, inter=128, source=source)


class Vllm(Engine):
    """vLLM v1 paged KV cache, release v0.33 (the newest modelled; rules of older releases are
    subclasses below, each overriding only what changed — ``docs/vllm_releases.md``)."""

    id = "vllm"
    label = "vLLM (v1 paged blocks)"
    short = "vLLM"
    release = "vLLM v0.33"
    #: ``config/cache.py`` ``gpu_memory_utilization`` default (0.92 from v0.20.0).
    default_gpu_util: ClassVar[float] = VLLM_DEFAULT_GPU_UTIL
    #: ``v1/worker/utils.py`` ``request_memory``: ``ceil(total × util)`` from v0.14.1 (float before).
    ceil_requested: ClassVar[bool] = True
    #: How the start-up log's "GPU KV cache size" is computed: ``concurrency`` =
    #: ``int(max_concurrency × L)`` (v0.20.2+), ``groups`` = ``num_blocks // n_groups × min_bs``
    #: (v0.9.2–v0.20.0), ``blocks`` = ``num_blocks × bs`` (v0.8).
    logged_tokens: ClassVar[str] = "concurrency"
    #: V1's ``BlockPool`` keeps one null block out of every request's reach.
    null_block: ClassVar[bool] = True
    #: Top-k/top-p path of the sampler warm-up: FlashInfer by default from v0.21
    #: (``envs.py`` ``VLLM_USE_FLASHINFER_SAMPLER`` = True, ``flashinfer_sampler_supported``).
    sampler_path: ClassVar[SamplerPath] = "flashinfer"
    #: CUDA-graph capture sizes (``config/vllm.py`` ``_set_cudagraph_sizes``).
    capture_rule: ClassVar[CaptureRule] = "stride16"
    #: Whether the CUDA-graph estimate is subtracted from the KV budget
    #: (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` default 1 from v0.20, ``gpu_worker.py``
    #: ``determine_available_memory``).
    graphs_counted: ClassVar[bool] = True
    #: v0.33 ``_set_cudagraph_sizes``: capture sizes up to 1,024 on data-centre Blackwell (SM 10.x;
    #: from v0.28.0, 512 on every GPU up to v0.27).
    blackwell_capture_cap: ClassVar[bool] = True
    #: V0's profile run (``vllm/worker/model_runner.py``) rather than V1's ``gpu_model_runner.py``.
    v0_profile: ClassVar[bool] = False
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        "gpu_util": ("gpu_memory_utilization (fraction)", f"{VLLM_DEFAULT_GPU_UTIL}"),
        "block_size": ("Block size (tokens)", "engine/backend choice"),
        "max_num_batched_tokens": ("max_num_batched_tokens (tokens)", "vLLM's per-GPU default"),
        "max_num_seqs": ("max_num_seqs (requests)", "vLLM's per-GPU default"),
        "enforce_eager": ("enforce_eager (no CUDA graphs)", "off"),
        "flashinfer_sampler": ("FlashInfer sampler (VLLM_USE_FLASHINFER_SAMPLER)", "auto"),
        "async_scheduling": ("Async scheduling (≥ 0.26)", "on"),
        "hybrid_manager": ("Hybrid KV-cache manager", "auto"),
        "enable_prefix_caching": ("Prefix caching", "on"),
        "ep": ("Expert parallel size (--enable-expert-parallel: tp)", "1"),
        "mtp": ("Load MTP layers (speculative decoding)", "off"),
    }
    logs_kv_cache = True
    per_request_in_blocks = True
    prefix_unit = VLLM_DEFAULT_BLOCK_SIZE
    checks_tp_heads = True
    #: ``vllm/config/model.py`` ``_get_and_verify_max_len``: a ``--max-model-len`` above the derived
    #: maximum raises unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``.
    long_context_rule = ("refuses to start with --max-model-len above the model's derived maximum "
                         "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set")
    #: ``--data-parallel-size N --enable-expert-parallel`` (docs "Data Parallel Deployment").
    expert_parallel = True
    #: RoPE types whose ``factor`` does not scale the derived maximum (``_get_and_verify_max_len``):
    #: from v0.30 the YaRN family too (its ``max_position_embeddings`` is already scaled).
    unscaled_rope_types: ClassVar[tuple[str, ...]] = (
        "su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")

    def context_limit(self, arch: ModelArch) -> ContextLimit | None:
        """``vllm/config/model.py`` ``_get_and_verify_max_len``: the smallest length key of the text
        config (``model_arch_config_convertor.py`` ``derive_max_model_len_and_key``;
        ``model_max_length`` wins when set), times the RoPE ``factor`` of the last parameter set whose
        type scales (none for Gemma 3 — its length is already scaled); before v0.30 a YaRN set
        restarts from ``original_max_position_embeddings``. A config without a length key takes
        any ``--max-model-len`` (no limit)."""
        keys = dict(arch.context_keys)
        if not keys:
            return None
        key = min(keys, key=lambda k: keys[k])
        if "model_max_length" in keys:
            key = "model_max_length"
        derived, rule = float(keys[key]), f"{key} {keys[key]:,}"
        if arch.rope_scalings and "gemma3" not in arch.model_type:
            factor = 1.0
            for rope in arch.rope_scalings:
                if rope.rope_type in self.unscaled_rope_types:
                    continue
                factor = rope.factor if rope.factor is not None else factor
                if rope.rope_type == "yarn" and rope.original_max_position_embeddings:
                    derived = float(rope.original_max_position_embeddings)
                    rule = f"original_max_position_embeddings {rope.original_max_position_embeddings:,}"
            if factor != 1.0:
                derived *= factor
                rule += f" × RoPE factor {factor:g}"
        return ContextLimit(int(derived), f"{rule}; {self.release} _get_and_verify_max_len")

    #: v0.33 ``engine/arg_utils.py`` ``get_batch_defaults``: a GB10 (DGX Spark,
    #: ``is_device_capability((12, 1))``) stays on the small tier whatever its memory (not before v0.33).
    gb10_small_tier: ClassVar[bool] = True

    def is_gb10(self, gpu: GPU) -> bool:
        """Whether ``get_batch_defaults`` of this release keeps ``gpu`` on the small tier as a GB10."""
        return self.gb10_small_tier and gpu.compute_capability == "12.1"

    #: ``get_batch_defaults`` has a ≥ 160 GiB tier (16,384 batched tokens) from v0.28.
    huge_batch_tier: ClassVar[bool] = True

    def default_mnbt(self, gpu: GPU) -> int:
        """``max_num_batched_tokens`` default for ``vllm serve`` on this device."""
        return default_max_num_batched_tokens(cuda_capacity(gpu).bytes, gpu.device_name,
                                              gb10=self.is_gb10(gpu), huge_tier=self.huge_batch_tier)

    def default_max_num_seqs(self, gpu: GPU) -> int:
        """``max_num_seqs`` default for ``vllm serve`` on this device (``get_batch_defaults``)."""
        return default_max_num_seqs(cuda_capacity(gpu).bytes, gpu.device_name, gb10=self.is_gb10(gpu))

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """``max_num_batched_tokens`` and ``max_num_seqs`` default by device (``get_batch_defaults``)."""
        update: dict[str, int] = {}
        if settings.max_num_batched_tokens is None and gpu is not None:
            update["max_num_batched_tokens"] = self.default_mnbt(gpu)
        if settings.max_num_seqs is None and gpu is not None:
            update["max_num_seqs"] = self.default_max_num_seqs(gpu)
        return settings.model_copy(update=update) if update else settings

    reserve_term_names: ClassVar[tuple[str, ...]] = ("activation_peak", "non_torch", "cuda_graphs")

    def runtime_reserve(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                        tokens: int) -> Reserve:
        """Activation peak of the profile run, non-torch memory and CUDA graphs
        (``kvplan.engines.vllm_memory``), as this release counts them."""
        major = int(float(gpu.compute_capability)) if gpu.compute_capability else 0
        return Reserve(vllm_reserve_terms(
            arch, settings, self.model_dtype(arch), sampler=self.sampler_path, capture=self.capture_rule,
            graphs_counted=self.graphs_counted, release=self.release,
            mnbt=settings.max_num_batched_tokens or self.default_mnbt(gpu),
            max_num_seqs=settings.max_num_seqs or self.default_max_num_seqs(gpu),
            blackwell=major == 10 and self.blackwell_capture_cap, v0=self.v0_profile))

    def in_flight_tokens(self, settings: EngineSettings, mnbt: int) -> int:
        """``vllm/config/vllm.py`` ``max_in_flight_tokens = max_concurrent_batches × MNBT``;
        ``max_concurrent_batches`` is pp + 1 with async scheduling, else pp (v0.26+)."""
        return (settings.pp + 1 if settings.async_scheduling else settings.pp) * mnbt

    #: MXFP4 MoE (gpt-oss), ``fused_moe/oracle/mxfp4.py``: FlashInfer TRT-LLM pads the intermediate to
    #: 128 from v0.27 (``mxfp4_round_up_hidden_size_and_intermediate_size``; 256 up to v0.26) ...
    mxfp4_trtllm_inter: ClassVar[int] = 128
    #: ... and Triton frees the checkpoint's scales after swizzling from v0.25
    #: (``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``: ``del layer.w13_weight_scale``).
    mxfp4_keeps_scales: ClassVar[bool] = False
    mxfp4_source: ClassVar[str] = "vLLM v0.33 fused_moe/oracle/mxfp4.py"

    def mxfp4_moe_repack(self, gpu: GPU | None) -> ExpertRepack | None:
        """``fused_moe/oracle/mxfp4.py`` ``_get_priority_backends_for_gpt_oss``: TRT-LLM on SM 10.x,
        Triton on SM 9.0 (``_triton_kernel_moe_supports_current_device``), Marlin elsewhere; the
        padding and scales of this release (``mxfp4_trtllm_inter``, ``mxfp4_keeps_scales``)."""
        return mxfp4_repack(gpu, self.mxfp4_trtllm_inter, True, self.mxfp4_keeps_scales,
                            self.mxfp4_source)

    def layer_spec_kind(self, kind: str) -> str:
        """The spec kind this release builds for a layer of ``kind`` (all kinds exist in v0.33)."""
        return kind

    def model_dtype(self, arch: ModelArch) -> str:
        """``vllm/config/model.py`` ``_resolve_auto_dtype``: a float32 config runs in the platform's
        preferred dtype, bf16 on CUDA GPUs from SM 8.0 (fp16 before); others as configured."""
        return "bf16" if arch.model_dtype == "fp32" else arch.model_dtype

    def hybrid_default(self, arch: ModelArch) -> bool:
        """``vllm/config/vllm.py``: the hybrid manager is on by default; for models with
        ``attention_chunk_size`` (Llama 4) it is turned off only when
        ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is 0, which v0.33 does not default to
        (``vllm/envs.py``: 1)."""
        return True

    @staticmethod
    def promotes_windows(counts: dict[LayerSpec, int]) -> bool:
        """With the hybrid manager off, ``kv_cache_planning.py`` ``_promote_local_kv_cache_specs``
        turns sliding/chunked specs into full attention only when windowed and full layers coexist;
        on uniform specs it returns early (an all-sliding model keeps its sliding spec)."""
        kinds = {layer_kind(layer) for layer in counts if not isinstance(layer, Recurrent | NoCache)}
        kinds = {"full" if k == "mla" else k for k in kinds}
        return bool(kinds & {"sliding", "chunked"}) and bool(kinds - {"sliding", "chunked"})

    def build_view(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> EngineView:
        tp = settings.tp
        hybrid = settings.hybrid_manager
        if hybrid is None:
            hybrid = self.hybrid_default(arch)
        mnbt = settings.max_num_batched_tokens or default_max_num_batched_tokens(None)
        ift = self.in_flight_tokens(settings, mnbt)
        block = settings.block_size
        if block is None:
            block = (mla_block_size or VLLM_DEFAULT_BLOCK_SIZE) if arch.is_mla else VLLM_DEFAULT_BLOCK_SIZE
        notes: list[str] = []
        attn_1tok = [self.token_bytes(layer, dtype, tp) for layer in counts
                     if not isinstance(layer, Recurrent | NoCache)]
        recurrent = [layer for layer in counts if isinstance(layer, Recurrent)]
        state_pages = 1
        if recurrent and attn_1tok:
            state = max(self.state_bytes(r, model_dtype, tp) for r in recurrent)
            all_mode = (settings.enable_prefix_caching
                        and recurrent[0].variant in VLLM_MAMBA_ALL_MODE_VARIANTS)
            align = max(block, 16)
            chunk = (recurrent[0].chunk_size or align) if all_mode else None
            raised = raised_block(state, max(attn_1tok), align, chunk)
            if raised > block:
                notes.append(f"attention block raised from {block} to {raised} tokens so one page "
                             f"holds a {state:,} B recurrent state (Platform._align_hybrid_block_size)")
                block = raised
            if not settings.enable_prefix_caching:
                state_pages = 1  # mamba_cache_mode "none"
            elif all_mode:
                state_pages = 0  # "all": one state page per block of tokens
            else:
                state_pages = 2  # "align"
        promote = not hybrid and self.promotes_windows(counts)
        rules: list[CacheRule] = []
        for layer, n in counts.items():
            if isinstance(layer, NoCache):
                continue
            if isinstance(layer, Recurrent):
                padded = block * max(attn_1tok) if attn_1tok else self.state_bytes(layer, model_dtype, tp)
                rules.append(PagedStateRule("recurrent", n, 0, state_bytes=padded, spec=layer,
                                            pages_reserved=state_pages, block_size=block,
                                            note="state page padded to the attention page"))
                continue
            kind, window = self.layer_spec_kind(layer_kind(layer)), layer.window
            if kind == "full":
                window = None
            if promote and kind in {"sliding", "chunked"}:
                notes.append(f"hybrid KV-cache manager off: {kind} layers reserve full max_model_len")
                kind, window = "full", None
            rules.append(PAGED_KINDS[kind](kind, n, self.token_bytes(layer, dtype, tp), window=window,
                                           block_size=block, in_flight_tokens=ift, spec=layer))
        return EngineView(self.id, dtype, tuple(rules), block_size=block, in_flight_tokens=ift,
                          hybrid_manager=hybrid, notes=tuple(dict.fromkeys(notes)))

    def pool_layout(self, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
                    mla_block_size: int | None = None) -> VllmPool:
        """The model's KV-cache groups on one TP rank (cached per model and the settings that shape
        the pool: the reserve-only ones are left out of the key)."""
        return _pool_cached(self, arch, kv_dtype, _pool_only(settings), mla_block_size)

    def per_request_reserved_bytes(self, arch: ModelArch, view: EngineView, kv_dtype: str,
                                   settings: EngineSettings, tokens: int,
                                   mla_block_size: int | None) -> tuple[int, list[str]] | None:
        """A request reserves whole block ids across every group: ``blocks × bytes per block``."""
        pool = self.pool_layout(arch, kv_dtype, settings, mla_block_size)
        per_block = int(pool.stages_bytes_per_block([arch.n_layers])[0])
        blocks = int(pool.blocks_per_request(tokens))
        notes = []
        if pool.padding_layers:
            notes.append(f"reserved bytes count whole block ids across {pool.n_groups} groups "
                         f"({pool.padding_layers} padding layers)")
        return blocks * per_block, notes

    def memory_target(self, capacity: int, settings: EngineSettings, arch: ModelArch,
                      notes: list[str]) -> tuple[int, str]:
        util = settings.gpu_util or self.default_gpu_util
        if self.ceil_requested:
            target = math.ceil(capacity * util)
            return target, f"ceil({capacity:,} × {util}) = {target:,} B ({self.release})"
        target = int(capacity * util)
        return target, f"{capacity:,} × {util} = {target:,} B ({self.release}: total × util)"

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str]) -> KVPool:
        pool = self.pool_layout(arch, kv_dtype, settings, vllm_mla_block_size(gpu, kv_dtype))
        notes.extend(pool.notes)
        return VllmPagedPool(pool, budgets, pp_partition(arch.n_layers, settings.pp), self.logged_tokens,
                             null_block=self.null_block)

    def pool_gpu_key(self, gpu: GPU, arch: ModelArch, kv_dtype: str) -> object:
        """The MLA backend's block size (``vllm_mla_block_size``) is the only GPU input of the pool."""
        return vllm_mla_block_size(gpu, kv_dtype) if arch.is_mla else None

    def pool_settings_key(self, settings: EngineSettings, arch: ModelArch) -> object:
        """``max_num_batched_tokens`` only reaches windowed layers (``PagedSlidingRule``,
        ``PagedChunkedRule``): without them, settings that differ only there give one pool."""
        settings = _pool_only(settings)
        if any(getattr(layer, "window", None) for layer in arch.distinct_layers()):
            return settings
        return settings.model_copy(update={"max_num_batched_tokens": None})

    def describe(self, rule: CacheRule) -> str:
        if isinstance(rule, PagedRule):
            if rule.kind == "sliding" and rule.window:
                return (f"frees blocks that fall out of the {rule.window:,}-token window: stops "
                        f"growing at ≈ ceil({rule.window - 1:,}/{rule.block_size})+1 blocks")
            if rule.kind == "chunked" and rule.window:
                return (f"frees whole chunks of {rule.window:,}: at most ≈ {rule.window:,} tokens of "
                        f"blocks")
            return f"grows one {rule.block_size}-token block at a time, never stops"
        return super().describe(rule)


# ---------------------------------------------------------------------------- pool layout


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
def _pool_cached(engine: Vllm, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
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


def build_pool(engine: Vllm, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
               mla_block_size: int | None = None) -> VllmPool:
    """Group the whole model's layers as vLLM's ``get_kv_cache_groups`` does (per TP rank)."""
    view = engine.view(arch, kv_dtype, settings, mla_block_size=mla_block_size)
    by_spec: dict[LayerSpec, CacheRule] = {rule.spec: rule for rule in view.rules
                                           if rule.spec is not None}
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
        used = per_block > 0
        self.num_blocks = int((stage_budgets[used] // per_block[used]).min())
        self.bytes_per_block = int(per_block.max())
        self.block_size = pool.block_size
        self.capacity = max(self.num_blocks - (1 if null_block else 0), 0)
        self.logged_tokens = logged_tokens

    def blocks(self, L: np.ndarray) -> np.ndarray:
        return np.asarray(self.pool.blocks_per_request(np.asarray(L, dtype=np.int64)), dtype=np.int64)

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return self.blocks(L) * self.bytes_per_block  # a block id spans the widest group's layers

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        return self.capacity // np.maximum(self.blocks(L), 1)

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``(min over stages of max(b, 0) // bytes per block − 1 null block) // blocks(L)``."""
        b = np.maximum(np.asarray(budgets, dtype=np.int64), 0)
        per = np.asarray(self.stage_per_block, dtype=np.int64)
        used = per > 0
        num_blocks = (b[:, used] // per[used]).min(axis=1)
        return np.maximum(num_blocks - 1, 0) // max(int(self.blocks(np.asarray([L]))[0]), 1)

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
            "max_requests": f"{self.capacity:,} usable blocks // {bpr:,} = "
                            f"{self.capacity // bpr if bpr else 0:,}",
        }



# ---------------------------------------------------------------------------- older releases


class VllmV032(Vllm):
    """vLLM v0.30–v0.32 (read: 0.30.0, 0.31.0, 0.32.0): as v0.33, except that
    ``engine/arg_utils.py`` ``get_batch_defaults`` has no GB10 exclusion (0.32.0 ``:2894``: a
    ≥ 70 GiB device that is not an A100 takes the large tier, a DGX Spark's GB10 included)."""

    id = "vllm@0.32"
    release = "vLLM v0.30–v0.32"
    gb10_small_tier = False


class VllmV029(VllmV032):
    """vLLM v0.28–v0.29 (read: 0.28.0, 0.29.0): as v0.30–v0.32, except that
    ``config/model.py`` ``_get_and_verify_max_len`` scales a YaRN set: ``rope_type not in ("su",
    "longrope", "llama3")`` → ``original_max_position_embeddings × factor`` (0.29.0 ``:2384``; the
    YaRN family joins the unscaled types in 0.30.0 ``:2393``)."""

    id = "vllm@0.29"
    release = "vLLM v0.28–v0.29"
    #: Before v0.30 a YaRN set's ``factor`` scales ``original_max_position_embeddings``.
    unscaled_rope_types = ("su", "longrope", "llama3")


class VllmV027(VllmV029):
    """vLLM v0.27 (read: 0.27.0, 0.27.1): as v0.28–v0.29, except that ``engine/arg_utils.py``
    ``get_batch_defaults`` has no ≥ 160 GiB tier (0.27.1 ``:2515``) and ``config/vllm.py``
    ``_set_cudagraph_sizes`` captures up to ``min(2 × max_num_seqs, 512)`` on every GPU (0.27.1
    ``:1778``; 1,024 on data-centre Blackwell from 0.28.0 ``:1878``). TRT-LLM already pads the MXFP4
    intermediate to 128 (``fused_moe/oracle/mxfp4.py``
    ``mxfp4_round_up_hidden_size_and_intermediate_size``, 0.27.0/0.27.1 ``:636``)."""

    id = "vllm@0.27"
    release = "vLLM v0.27"
    #: 0.27.1 ``config/vllm.py`` ``_set_cudagraph_sizes``: ``min(2 × max_num_seqs, 512)`` on every GPU.
    blackwell_capture_cap: ClassVar[bool] = False
    #: 0.27.1 ``engine/arg_utils.py`` ``get_batch_defaults``: no ≥ 160 GiB tier before v0.28; its
    #: ``max_num_seqs`` (1,024 on ≥ 70 GiB non-A100 devices, else 256) equals the v0.28–v0.32 rule
    #: on every catalogue GPU, so ``default_max_num_seqs`` is inherited.
    huge_batch_tier: ClassVar[bool] = False


class VllmV026(VllmV027):
    """vLLM v0.26 (read: 0.26.0): as v0.27, except that FlashInfer TRT-LLM pads the MXFP4
    intermediate to 256 (0.26.0 ``fused_moe/oracle/mxfp4.py:635``
    ``mxfp4_round_up_hidden_size_and_intermediate_size``; 128 from 0.27.0)."""

    id = "vllm@0.26"
    release = "vLLM v0.26"
    mxfp4_trtllm_inter = 256
    mxfp4_source = "vLLM v0.26.0 fused_moe/oracle/mxfp4.py"


class VllmV025(VllmV026):
    """vLLM v0.25 (read: 0.25.0, 0.25.1): as v0.26 (0.92, ``ceil``, the CUDA-graph estimate
    subtracted, FlashInfer sampler, ``int(max_concurrency × L)`` logged, MXFP4 scales freed, YaRN
    scaled, no ≥ 160 GiB tier, no Blackwell capture cap, TRT-LLM MXFP4 intermediate 256), except that
    in-flight tokens are ``max_num_batched_tokens`` alone (``v1/kv_cache_interface.py``
    ``SlidingWindowSpec.max_admission_blocks_per_request``; ``max_in_flight_tokens`` from v0.26)."""

    id = "vllm@0.25"
    release = "vLLM v0.25"
    mxfp4_source = "vLLM v0.25.1 fused_moe/oracle/mxfp4.py"
    #: Async scheduling does not reach the pool before v0.26 (in-flight tokens = MNBT).
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        k: v for k, v in Vllm.setting_labels.items() if k != "async_scheduling"}

    def in_flight_tokens(self, settings: EngineSettings, mnbt: int) -> int:
        """Before v0.26 ``SlidingWindowSpec``/``ChunkedLocalAttentionSpec``
        ``max_admission_blocks_per_request`` add ``max_num_batched_tokens`` in-flight tokens whatever
        the scheduling (v0.25.1 ``v1/kv_cache_interface.py``)."""
        return mnbt


class VllmV024(VllmV025):
    """vLLM v0.21–v0.24 (read: 0.21.0, 0.24.0): as v0.25, except that the OAI Triton MXFP4 backend
    (SM 9.0) keeps the checkpoint's scales beside its swizzled copy (v0.24.0
    ``fused_moe/oracle/mxfp4.py`` ``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`` deletes only
    ``w13_weight``/``w2_weight``). The FlashInfer top-k/top-p sampler is on by default from v0.21.0
    (``envs.py`` ``VLLM_USE_FLASHINFER_SAMPLER`` defaults to True; v0.24 ``TopKTopPSampler.__init__``
    → ``flashinfer_sampler_supported``). Not modelled: an attention page that does not divide the
    largest is padded by v0.24 (``kv_cache_utils.py`` ``unify_kv_cache_spec_page_size``, backends
    that ``indexes_kv_by_block_stride``) but refused by v0.21.0 (``NotImplementedError``)."""

    id = "vllm@0.24"
    release = "vLLM v0.21–v0.24"
    mxfp4_keeps_scales = True
    mxfp4_source = "vLLM v0.24.0 fused_moe/oracle/mxfp4.py"


class VllmV020(VllmV024):
    """vLLM v0.20.1–v0.20.2: as v0.21–v0.24 (0.92, ``ceil``, the CUDA-graph estimate subtracted —
    ``envs.py`` ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 from v0.20.0 —, "GPU KV
    cache size" = ``int(max_concurrency × L)``), but FlashInfer top-k/top-p is opt-in
    (``VLLM_USE_FLASHINFER_SAMPLER`` unset → None → ``TopKTopPSampler.__init__`` takes
    ``forward_native``), so the sampler warm-up sorts (``apply_top_k_top_p``: a Triton kernel from
    8 rows, as v0.19.1 — not modelled, the fitted sort stands for it)."""

    id = "vllm@0.20"
    release = "vLLM v0.20.1–v0.20.2"
    sampler_path: ClassVar[SamplerPath] = "sort"
    mxfp4_source = "vLLM v0.20.0/v0.20.2 fused_moe/oracle/mxfp4.py"


class VllmV0200(VllmV020):
    """vLLM v0.20.0: as v0.20.1–v0.20.2, but the start-up log's "GPU KV cache size" is still
    ``num_blocks // n_groups × min_block_size`` (v0.20.0 ``v1/core/kv_cache_utils.py``
    ``_report_kv_cache_config``; ``int(max_concurrency × max_model_len)`` from v0.20.1)."""

    id = "vllm@0.20.0"
    release = "vLLM v0.20.0"
    logged_tokens = "groups"


class VllmV019(VllmV0200):
    """vLLM v0.14–v0.19: as v0.20.0 (in-flight tokens = ``max_num_batched_tokens``, "GPU KV cache
    size" = ``num_blocks // n_groups × min_bs``, sorting sampler), with ``gpu_memory_utilization`` 0.9
    (``config/cache.py``) and the CUDA-graph estimate not subtracted
    (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 0, v0.19.1 ``envs.py``)."""

    id = "vllm@0.19"
    release = "vLLM v0.14–v0.19"
    default_gpu_util = 0.9
    #: The estimate is profiled but subtracted only with ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``
    #: (default 0 before v0.20).
    graphs_counted: ClassVar[bool] = False
    reserve_term_names: ClassVar[tuple[str, ...]] = ("activation_peak", "non_torch")
    #: v0.14–v0.19 (``quantization/mxfp4.py`` ``get_mxfp4_backend``, v0.19 ``oracle/mxfp4.py``):
    #: Triton on SM 9.0 (bundled ``vllm.third_party.triton_kernels``) keeps the checkpoint's scales
    #: as layer parameters beside the swizzled copy in its ``PrecisionConfig``; TRT-LLM pads the
    #: intermediate to 256 — as v0.20–v0.24.
    mxfp4_source = "vLLM v0.14.1/v0.19.0 quantization/mxfp4.py"
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        **VllmV025.setting_labels, "gpu_util": ("gpu_memory_utilization (fraction)", "0.9")}


class VllmV013(VllmV019):
    """vLLM v0.11.1–v0.13: requested memory ``total × util`` (no ceil, ``gpu_worker.py``
    ``init_device``); chunked-local models run with the hybrid manager off
    (``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` defaults to 0 until v0.14.1), so Llama 4's
    chunked and full layers all reserve ``max_model_len``. The sampler warm-up sorts (FlashInfer
    top-k/top-p is opt-in from v0.11.1, ``v1/sample/ops/topk_topp_sampler.py``) and CUDA graphs are
    captured at ``[1, 2, 4] + 8…248 step 8 + 256… step 16`` (``config/vllm.py``
    ``_set_cudagraph_sizes``), as in v0.14–v0.19. MXFP4 experts: v0.12–v0.13 bundle
    ``vllm.third_party.triton_kernels`` and take Triton on SM 9.0 as v0.14 (``quantization/mxfp4.py``
    ``get_mxfp4_backend``); v0.11.1–v0.11.2 bundle none (``utils/import_utils.py``
    ``has_triton_kernels``) and take Marlin, as ``vllm@0.11``, unless ``triton_kernels`` is installed."""

    id = "vllm@0.13"
    release = "vLLM v0.11.1–v0.13"
    ceil_requested = False

    def hybrid_default(self, arch: ModelArch) -> bool:
        return not any(layer.kind == "chunked" for layer in arch.distinct_layers())


class VllmV011(VllmV013):
    """vLLM v0.10–v0.11.0: as v0.11.1–v0.13 (no ceil, chunked-local models with the hybrid manager
    off), with the FlashInfer sampler when installed and capture sizes every 8 up to
    ``min(2 × max_num_seqs, 512)``."""

    id = "vllm@0.11"
    release = "vLLM v0.10–v0.11.0"
    #: v0.10–v0.11.0: FlashInfer top-k/top-p when installed (``VLLM_USE_FLASHINFER_SAMPLER is not
    #: False``) — the docker image has it; the wheel has it only as its ``flashinfer`` extra (wheel
    #: METADATA ``Requires-Dist: flashinfer-python…; extra == "flashinfer"``; a plain requirement
    #: from v0.11.1), so ``pip install vllm`` takes the PyTorch sort: ``--flashinfer-sampler 0``.
    sampler_path: ClassVar[SamplerPath] = "flashinfer"
    capture_rule: ClassVar[CaptureRule] = "stride8"

    def mxfp4_moe_repack(self, gpu: GPU | None) -> ExpertRepack | None:
        """v0.10–v0.11 (``quantization/mxfp4.py`` ``Mxfp4MoEMethod._should_use_marlin``): Marlin
        below SM 10.0 — v0.10.1 pins torch 2.7 (Triton needs ≥ 2.8) and neither bundles
        ``triton_kernels``; FlashInfer (256/256) on Blackwell."""
        return mxfp4_repack(gpu, 256, False, True, "vLLM v0.10.1.1 quantization/mxfp4.py")


class VllmV09(VllmV011):
    """vLLM v0.9: no ``ChunkedLocalAttentionSpec`` yet — chunked layers are ``FullAttentionSpec``
    (local attention only in the kernel metadata); sliding layers keep their spec (hybrid manager
    on)."""

    id = "vllm@0.9"
    release = "vLLM v0.9"

    def hybrid_default(self, arch: ModelArch) -> bool:
        return True

    def layer_spec_kind(self, kind: str) -> str:
        return "full" if kind == "chunked" else kind

    def mxfp4_moe_repack(self, gpu: GPU | None) -> ExpertRepack | None:
        """No MXFP4 MoE method before v0.10.1 (gpt-oss support): experts as stored."""
        return None


class VllmV08(VllmV09):
    """vLLM v0.8 (first V1 default): no hybrid manager — a model mixing full and windowed layers is
    promoted to full attention on every layer; "GPU KV cache size" = ``num_blocks × block_size`` and
    the concurrency ``tokens / L``; ``max_num_batched_tokens`` 8192 on every ≥ 70 GiB device."""

    id = "vllm@0.8"
    release = "vLLM v0.8"
    logged_tokens = "blocks"

    def hybrid_default(self, arch: ModelArch) -> bool:
        return False

    def default_mnbt(self, gpu: GPU) -> int:
        return 8192 if cuda_capacity(gpu).bytes >= 70 * (1 << 30) else 2048

    def default_max_num_seqs(self, gpu: GPU) -> int:
        """v0.8 ``_set_default_args_v1``: 1024 on every ≥ 70 GiB device, else 256."""
        return 1024 if cuda_capacity(gpu).bytes >= 70 * (1 << 30) else 256


class VllmV06(VllmV08):
    """vLLM v0.6 (V0 engine): one block spans every attention layer
    (``worker/cache_engine.py`` ``CacheEngine.get_cache_block_size``) and sliding windows do not
    change the pool: ``num_gpu_blocks = int(available // block bytes)`` (``worker/worker.py``
    ``determine_num_available_blocks``); the log prints "# GPU blocks" and
    ``max_concurrency = num_gpu_blocks × block_size / max_model_len`` (``gpu_executor.py``); no null
    block (the 1 % admission watermark is not modelled). Recurrent hybrids keep a separate Mamba cache
    kvplan does not model for V0."""

    id = "vllm@0.6"
    release = "vLLM v0.6 (V0)"
    null_block = False
    v0_profile = True
    #: V0's sampler sorts for top-p/top-k (``model_executor/layers/sampler.py`` ``_apply_top_k_top_p``).
    sampler_path: ClassVar[SamplerPath] = "sort"
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        "gpu_util": ("gpu_memory_utilization (fraction)", "0.9"),
        "block_size": ("Block size (tokens)", "16"),
        "max_num_batched_tokens": ("max_num_batched_tokens (tokens)", "max(max_model_len, 2048)"),
        "max_num_seqs": ("max_num_seqs (requests)", "256"),
        "enforce_eager": ("enforce_eager (no CUDA graphs)", "off"),
        "flashinfer_sampler": ("FlashInfer sampler (VLLM_USE_FLASHINFER_SAMPLER)", "off"),
    }

    def default_mnbt(self, gpu: GPU) -> int:
        return 2048

    def default_max_num_seqs(self, gpu: GPU) -> int:
        """V0 ``SchedulerConfig``: ``max_num_seqs`` 256 (``engine/arg_utils.py``)."""
        return 256

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """V0 ``SchedulerConfig.__post_init__``: ``max_num_batched_tokens = max(max_model_len, 2048)``
        without chunked prefill, which is on by default only beyond 32K tokens (then 2048)."""
        if settings.max_num_batched_tokens is None:
            mnbt = max(tokens, 2048) if tokens <= 32768 else 2048
            settings = settings.model_copy(update={"max_num_batched_tokens": mnbt})
        return super().resolve_settings(settings, tokens, gpu, arch)

    def unserved_reason(self, arch: ModelArch) -> str | None:
        if any(isinstance(layer, Recurrent) for layer in arch.distinct_layers()):
            return "V0 keeps recurrent states in a separate Mamba cache that kvplan does not model"
        return None

    def layer_spec_kind(self, kind: str) -> str:
        return "mla" if kind == "mla" else "full"

    def in_flight_tokens(self, settings: EngineSettings, mnbt: int) -> int:
        return 0


VLLM_RELEASES: tuple[type[Vllm], ...] = (Vllm, VllmV032, VllmV029, VllmV027, VllmV026, VllmV025,
                                          VllmV024, VllmV020, VllmV0200, VllmV019, VllmV013, VllmV011,
                                          VllmV09, VllmV08, VllmV06)
