"""vLLM (v1 engine, release v0.33; older releases by the traits of ``releases.py``): paged blocks,
KV-cache groups, memory target and logged capacity.

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
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kvplan.arch import Kind, LayerSpec, ModelArch, NoCache, Recurrent
from kvplan.dtypes import KVDType
from kvplan.engines.base import (
    ContextLimit,
    Engine,
    EngineView,
    KVPool,
    Release,
    StartupCheck,
    ViewShape,
    layer_kind,
    layer_partition,
    raised_block,
    resolve_dtype,
    weights_oom,
)
from kvplan.engines.kinds import PAGED_KINDS, VLLM_DEFAULT_BLOCK_SIZE, CacheRule, layer_window
from kvplan.engines.reserve import Reserve, ReserveTerm, cuda_capacity
from kvplan.engines.settings import EngineSettings
from kvplan.engines.vllm.kv_dtype import resolve_auto_kv_dtype
from kvplan.engines.vllm.log import VllmLog, log_lines
from kvplan.engines.vllm.lora import lora_graphs_term, lora_reserve_term
from kvplan.engines.vllm.memory import capture_sizes, vllm_reserve_terms
from kvplan.engines.vllm.multimodal import (
    EncoderBudget,
    deepstack_buffer_term,
    encoder_budget,
    encoder_cache_term,
    encoder_peak_term,
    pad_copy_bytes,
)
from kvplan.engines.vllm.pool import VllmPagedPool, VllmPool, _pool_cached, _pool_only, vllm_num_blocks
from kvplan.engines.vllm.releases import VLLM_RELEASES, VllmRelease
from kvplan.engines.vllm.spec_decode import (
    EAGLE_FAMILY,
    SpecDecode,
    resolve_speculative,
    spec_graphs_term,
    spec_summary,
    spec_weights_term,
)
from kvplan.engines.vllm.startup import vllm_startup_check
from kvplan.engines.vllm.weights import mxfp4_repack, vllm_loading_rules
from kvplan.errors import KVPlanError
from kvplan.multimodal import with_processor_kwargs

if TYPE_CHECKING:
    from kvplan.engines.logs import PoolAnswer, StartupLog
    from kvplan.presets import GPU
    from kvplan.weights import ExpertRepack, LoadingRules

#: ``model_executor/models/config.py`` ``MODELS_CONFIG_MAP`` entries of ``NemotronHForCausalLMConfig``
#: / ``NemotronHNanoVLV2Config`` (the SSM cache dtype hook).
NEMOTRON_H_ARCHITECTURES = frozenset({"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
                                      "NemotronH_Nano_VL_V2"})
#: Architectures whose vLLM model class implements ``SupportsMambaPrefixCaching`` (v0.13–v0.32
#: ``models/falcon_h1.py``, ``granitemoehybrid.py``, ``jamba.py``, ``mamba.py``, ``mamba2.py``,
#: ``nemotron_h.py``, ``zamba2.py``): Mamba cache mode "all" where the release has it.
VLLM_MAMBA_PREFIX_ARCHITECTURES = frozenset({
    "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "JambaForCausalLM", "MambaForCausalLM",
    "Mamba2ForCausalLM", "NemotronHForCausalLM", "Zamba2ForCausalLM"})
#: ``ModelConfig.get_mamba_chunk_size`` without ``mamba_chunk_size`` / ``chunk_size`` (Mamba-1).
VLLM_DEFAULT_MAMBA_CHUNK = 2048
VLLM_DEFAULT_GPU_UTIL = 0.92  # vllm/config/cache.py (0.9 before v0.20.0)


@dataclass
class VllmShape(ViewShape):
    """A vLLM view's block size (raised for Mamba pages), the recurrent state pages a request
    reserves (``state_pages``: 1, 2, or 0 = one per block) and their padded size (None: the state's
    own), and whether windowed specs are promoted to full attention (hybrid manager off)."""

    state_pages: int = 1
    state_page_bytes: int | None = None
    promote: bool = False


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
    major = gpu.sm_major
    if major == 10:
        return 32
    if major == 9 and kv_dtype.startswith("fp8"):
        return 64
    return 16


#: ``Vllm.setting_labels`` of a V1 release: knob → (label, default shown); the ``gpu_util`` default
#: is the release's, ``async_scheduling`` is offered where it reaches the pool (v0.26+).
VLLM_V1_SETTING_LABELS: dict[str, tuple[str, str]] = {
    "gpu_util": ("gpu_memory_utilization (fraction)", f"{VLLM_DEFAULT_GPU_UTIL}"),
    "block_size": ("Block size (tokens)", "engine/backend choice"),
    "max_num_batched_tokens": ("max_num_batched_tokens (tokens)", "vLLM's per-GPU default"),
    "max_num_seqs": ("max_num_seqs (requests)", "vLLM's per-GPU default"),
    "enforce_eager": ("enforce_eager (no CUDA graphs)", "off"),
    "flashinfer_sampler": ("FlashInfer sampler (VLLM_USE_FLASHINFER_SAMPLER)", "auto"),
    "async_scheduling": ("Async scheduling (≥ 0.26)", "on"),
    "hybrid_manager": ("Hybrid KV-cache manager", "auto"),
    "enable_prefix_caching": ("Prefix caching", "auto"),
    "ep": ("Expert parallel size (--enable-expert-parallel: tp)", "1"),
    "dp": ("--data-parallel-size (with --enable-expert-parallel)", "1"),
    "mtp": ("Load MTP layers (speculative decoding)", "off"),
    "enable_lora": ("enable_lora (LoRA adapter slots, v0.33)", "off"),
    "max_loras": ("max_loras (GPU adapter slots)", "1"),
    "lora_target_modules": ("lora_target_modules (comma-separated)", "every supported module"),
    "max_lora_rank": ("max_lora_rank", "16"),
    "max_cpu_loras": ("max_cpu_loras (host cache)", "max_loras"),
    "fully_sharded_loras": ("fully_sharded_loras", "off"),
    "speculative_config": ("--speculative-config (JSON, v0.33)", "none"),
    "limit_mm_per_prompt": ("limit_mm_per_prompt (images/videos per prompt; 0 = text only)", "999"),
    "mm_processor_kwargs": ("--mm-processor-kwargs (JSON: max_pixels, min_pixels, …)", "the checkpoint's"),
}
#: V0 ``EngineArgs`` / ``SchedulerConfig`` defaults (``vllm@0.6``).
VLLM_V0_SETTING_LABELS: dict[str, tuple[str, str]] = {
    "gpu_util": ("gpu_memory_utilization (fraction)", "0.9"),
    "block_size": ("Block size (tokens)", "16"),
    "max_num_batched_tokens": ("max_num_batched_tokens (tokens)", "max(max_model_len, 2048)"),
    "max_num_seqs": ("max_num_seqs (requests)", "256"),
    "enforce_eager": ("enforce_eager (no CUDA graphs)", "off"),
    "flashinfer_sampler": ("FlashInfer sampler (VLLM_USE_FLASHINFER_SAMPLER)", "off"),
}
GIB = 1 << 30


@lru_cache(maxsize=64)
def _speculative_cached(arch: ModelArch, text: str, tp: int, pp: int, methods: tuple[str, ...],
                        release: str, model_dtype: str, rules: LoadingRules) -> SpecDecode:
    return resolve_speculative(arch, text, tp=tp, pp=pp, methods=methods, release=release,
                               model_dtype=model_dtype, rules=rules)


#: The note that marks a model whose drafter layers are appended (``Vllm.pool_arch`` is idempotent).
DRAFTER_NOTE = "speculative decoding: the drafter's attention layers follow the model's"


@lru_cache(maxsize=32)
def _with_draft_layers(arch: ModelArch, draft: tuple[LayerSpec, ...], name: str) -> ModelArch:
    """``arch`` with the drafter's attention layers after its own (one object per pair, so the
    pool cache keys on it)."""
    return arch.model_copy(update={"layers": (*arch.layers, *draft),
                                   "drafter_layers": arch.drafter_layers + len(draft),
                                   "notes": (*arch.notes, f"{DRAFTER_NOTE}: {name}")})


#: ``Vllm.request_caps``' start-up caps by (engine, model, GPU, settings) — the objects kept with
#: them, so an id is never reused while its entry lives — and block count; cleared when full.
_CAPS: dict[tuple[int, int, int, EngineSettings], tuple[Any, ModelArch, GPU, bool, dict[int, int]]] = {}
_CAPS_MAX = 4096


class Vllm(Engine):
    """vLLM v1 paged KV cache under one release record (``VLLM_RELEASES``, oldest first; the newest
    is v0.33): where releases differ, the methods branch on the record's traits
    (``VllmRelease``, ``docs/vllm_releases.md``)."""

    engine_id = "vllm"
    label = "vLLM (v1 paged blocks)"
    short = "vLLM"
    releases: ClassVar[tuple[VllmRelease, ...]] = VLLM_RELEASES
    record: VllmRelease
    log_format = VllmLog
    per_request_in_blocks = True
    prefix_unit = VLLM_DEFAULT_BLOCK_SIZE
    checks_tp_heads = True
    #: ``vllm/config/model.py`` ``_get_and_verify_max_len``: a ``--max-model-len`` above the derived
    #: maximum raises unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``.
    long_context_rule = ("refuses to start with --max-model-len above the model's derived maximum "
                         "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set")
    #: ``--data-parallel-size N --enable-expert-parallel`` (docs "Data Parallel Deployment").
    expert_parallel = True

    @property
    def setting_labels(self) -> dict[str, tuple[str, str]]:
        """``VLLM_V0_SETTING_LABELS`` for V0; else ``VLLM_V1_SETTING_LABELS`` with this release's
        ``gpu_memory_utilization`` default, without ``async_scheduling`` before v0.26 (it does not
        reach the pool: in-flight tokens = MNBT)."""
        if self.record.v0_settings:
            return VLLM_V0_SETTING_LABELS
        labels = {k: v for k, v in VLLM_V1_SETTING_LABELS.items()
                  if k != "async_scheduling" or self.record.in_flight == "async"}
        labels["gpu_util"] = (labels["gpu_util"][0], f"{self.record.default_gpu_util}")
        return labels

    @property
    def reserve_term_names(self) -> tuple[str, ...]:
        """The activation peak and non-torch memory; the CUDA-graph estimate where it is subtracted
        (``graphs_counted``: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` = 1 from v0.20)."""
        graphs = ("cuda_graphs",) if self.record.graphs_counted else ()
        return ("activation_peak", "non_torch", *graphs)

    def release_for_log(self, log: StartupLog) -> tuple[Release, str] | None:
        """The log's version, except that a V0 engine — "Initializing an LLM engine" without "V1",
        or lines only V0's worker prints — is read with the V0 record (its profile run and pool):
        on a release that defaults to V1 (``VLLM_USE_V1=0``, v0.8–v0.10), or with no version."""
        found = super().release_for_log(log)
        generation = getattr(log, "generation", None)
        v0 = next(r for r in VLLM_RELEASES if r.v0_profile)
        if found is None and generation == "V0":
            return v0, (f"the log prints no version, but its lines are V0's (worker.py memory profile, "
                        f"model_runner.py 'Loading model weights took') → {v0.name}")
        if found is None or generation != "V0" or getattr(found[0], "v0_profile", True):
            return found
        return v0, (f"{found[1]}; but the log's engine is V0 ('Initializing an LLM engine' or V0 "
                    f"worker lines: VLLM_USE_V1=0) → {v0.name}")

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
                if rope.rope_type in self.record.unscaled_rope_types:
                    continue
                factor = rope.factor if rope.factor is not None else factor
                if rope.rope_type == "yarn" and rope.original_max_position_embeddings:
                    derived = float(rope.original_max_position_embeddings)
                    rule = f"original_max_position_embeddings {rope.original_max_position_embeddings:,}"
            if factor != 1.0:
                derived *= factor
                rule += f" × RoPE factor {factor:g}"
        return ContextLimit(int(derived), f"{rule}; {self.release} _get_and_verify_max_len")

    def is_gb10(self, gpu: GPU) -> bool:
        """Whether ``get_batch_defaults`` of this release keeps ``gpu`` on the small tier as a GB10
        (``gb10_small_tier``)."""
        return self.record.gb10_small_tier and gpu.compute_capability == "12.1"

    def batch_device_bytes(self, gpu: GPU) -> int:
        """The device total ``get_batch_defaults`` sees: 0 where the release reads NVML's total and
        the device's NVML reports none (``VllmRelease.nvml_batch_total``, ``GPU.nvml_memory``: the
        query raises and vLLM takes ``device_memory = 0``), else CUDA's total (NVML's is
        nvidia-smi's, a few hundred MiB above it: the same tier on every catalogue device)."""
        if self.record.nvml_batch_total and not gpu.nvml_memory:
            return 0
        return cuda_capacity(gpu).bytes

    def default_mnbt(self, gpu: GPU) -> int:
        """``max_num_batched_tokens`` default for ``vllm serve`` on this device, by the record's
        ``batch_defaults``: ``tiers`` — ``get_batch_defaults`` (``default_max_num_batched_tokens``,
        the huge tier from v0.28); ``v0.8`` — 8192 on every ≥ 70 GiB device, else 2048; ``v0`` —
        2048 (``SchedulerConfig``; ``resolve_settings`` sets it from the request first)."""
        rule = self.record.batch_defaults
        if rule == "v0":
            return 2048
        if rule == "v0.8":
            return 8192 if cuda_capacity(gpu).bytes >= 70 * GIB else 2048
        return default_max_num_batched_tokens(self.batch_device_bytes(gpu), gpu.device_name,
                                              gb10=self.is_gb10(gpu),
                                              huge_tier=self.record.huge_batch_tier)

    def default_max_num_seqs(self, gpu: GPU) -> int:
        """``max_num_seqs`` default for ``vllm serve`` on this device: ``get_batch_defaults``
        (``tiers``; v0.9.2–v0.27's rule — 1,024 on ≥ 70 GiB non-A100 devices, else 256 — equals it
        on every catalogue GPU); v0.8 ``_set_default_args_v1``: 1024 on every ≥ 70 GiB device, else
        256; V0 ``SchedulerConfig``: 256 (``engine/arg_utils.py``)."""
        rule = self.record.batch_defaults
        if rule == "v0":
            return 256
        if rule == "v0.8":
            return 1024 if cuda_capacity(gpu).bytes >= 70 * GIB else 256
        return default_max_num_seqs(self.batch_device_bytes(gpu), gpu.device_name, gb10=self.is_gb10(gpu))

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """``max_num_batched_tokens`` and ``max_num_seqs`` default by device (``get_batch_defaults``).
        V0 (``batch_defaults`` ``v0``, ``SchedulerConfig.__post_init__``): ``max_num_batched_tokens
        = max(max_model_len, 2048)`` without chunked prefill, which is on by default only beyond 32K
        tokens (then 2048)."""
        if self.record.batch_defaults == "v0" and settings.max_num_batched_tokens is None:
            mnbt = max(tokens, 2048) if tokens <= 32768 else 2048
            settings = settings.model_copy(update={"max_num_batched_tokens": mnbt})
        update: dict[str, int] = {}
        if settings.max_num_batched_tokens is None and gpu is not None:
            update["max_num_batched_tokens"] = self.default_mnbt(gpu)
        if settings.max_num_seqs is None and gpu is not None:
            update["max_num_seqs"] = self.default_max_num_seqs(gpu)
        spec = self.speculative(arch, settings) if arch is not None else None
        if spec is not None and spec.method == "mtp" and not settings.mtp:
            update["mtp"] = True  # the next-n layers are loaded (SpeculativeConfig: model = target)
        if spec is not None and spec.method in ("ngram", "suffix") and settings.async_scheduling \
                and self.record.in_flight == "async":
            # VllmConfig.__post_init__ (0.29.0 :1281; 0.33.0 :1654 on the V1 runner): "Async scheduling not
            # supported with ngram-based speculative decoding and will be disabled" (suffix too)
            update["async_scheduling"] = False
        return settings.model_copy(update=update) if update else settings

    def speculative(self, arch: ModelArch, settings: EngineSettings,
                    gpu: GPU | None = None) -> SpecDecode | None:
        """``--speculative-config`` as this release resolves it for ``arch``
        (``engines/vllm/spec_decode.py``; ``gpu`` only changes the draft's loading rules); None
        without it."""
        if settings.speculative_config is None:
            return None
        return _speculative_cached(arch, settings.speculative_config, settings.tp, settings.pp,
                                   self.record.spec_methods, self.release, self.model_dtype(arch),
                                   self.loading_rules(gpu))

    def pool_arch(self, arch: ModelArch, settings: EngineSettings) -> ModelArch:
        """The layers whose specs ``get_kv_cache_spec`` reports: the model's, then the drafter's
        (``gpu_model_runner.py``: every attention layer of the forward context)."""
        if arch.drafter_layers:  # already extended (a typed count, not a note's text)
            return arch
        spec = self.speculative(arch, settings)
        if spec is None or not spec.draft_layers:
            return arch
        return _with_draft_layers(arch, spec.draft_layers, spec.draft_name)

    def view(self, arch: ModelArch, kv_dtype: str = "bf16", settings: EngineSettings | None = None,
             stage_layers: tuple[int, int] | None = None,
             mla_block_size: int | None = None) -> EngineView:
        """``Engine.view`` of the layers vLLM gives a spec (``pool_arch``: with the drafter's), so
        the bytes per token and per request of every view count the drafter's KV too."""
        if settings is not None and stage_layers is None:
            arch = self.pool_arch(arch, settings)
        return super().view(arch, kv_dtype, settings, stage_layers, mla_block_size)

    def blackwell_capture_cap(self, gpu: GPU) -> bool:
        """Whether this release's Blackwell (SM 10.x) cap on CUDA-graph capture sizes applies to
        ``gpu`` (``VllmRelease.blackwell_capture_cap``; ``memory.capture_sizes``)."""
        major = gpu.sm_major
        return major == 10 and self.record.blackwell_capture_cap

    def runtime_reserve(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                        tokens: int) -> Reserve:
        """Activation peak of the profile run, non-torch memory and CUDA graphs
        (``kvplan.engines.vllm.memory``), as this release counts them."""
        record = self.record
        terms = vllm_reserve_terms(
            arch, settings, self.model_dtype(arch), sampler=record.sampler_path,
            capture=record.capture_rule, graphs_counted=record.graphs_counted, release=self.release,
            mnbt=settings.max_num_batched_tokens or self.default_mnbt(gpu),
            max_num_seqs=settings.max_num_seqs or self.default_max_num_seqs(gpu),
            blackwell=self.blackwell_capture_cap(gpu), v0=record.v0_profile)
        return Reserve(terms + self.lora_terms(arch, gpu, settings, terms)
                       + self.spec_terms(arch, gpu, settings, terms)
                       + self.mm_terms(arch, gpu, settings, tokens, terms))

    def spec_terms(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                   terms: tuple[ReserveTerm, ...] = ()) -> tuple[ReserveTerm, ...]:
        """With ``--speculative-config``: the draft's weights and the capture sizes it adds
        (``engines/vllm/spec_decode.py``); else none."""
        spec = self.speculative(arch, settings, gpu)
        if spec is None:
            return ()
        record = self.record
        seqs = settings.max_num_seqs or self.default_max_num_seqs(gpu)
        mnbt = settings.max_num_batched_tokens or self.default_mnbt(gpu)
        blackwell = self.blackwell_capture_cap(gpu)
        graphs = next((t for t in terms if t.name == "cuda_graphs"), None)
        base = 0 if settings.enforce_eager else len(capture_sizes(record.capture_rule, seqs, mnbt,
                                                                  blackwell))
        out = (spec_weights_term(spec, self.release),
               spec_graphs_term(graphs, base, spec, seqs, mnbt, blackwell, self.release,
                                record.spec_capture))
        return tuple(t for t in out if t is not None)

    def speculative_summary(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                            kv_dtype: str) -> dict[str, object] | None:
        """``fit --json``'s ``speculative`` (``spec_decode.spec_summary``): the drafter's KV bytes
        per token on one GPU are its layers' as this view sizes them."""
        spec = self.speculative(arch, settings, gpu)
        if spec is None:
            return None
        dtype = self.kv_dtype(arch, kv_dtype)
        per_token = sum(self.token_bytes(layer, dtype, settings.tp) for layer in spec.draft_layers)
        return spec_summary(spec, per_token, settings.max_num_seqs or self.default_max_num_seqs(gpu),
                            settings.max_num_batched_tokens or self.default_mnbt(gpu),
                            self.blackwell_capture_cap(gpu), self.record.spec_capture)

    image_limit_flag = "--limit-mm-per-prompt"
    image_limit_refusal = "per prompt (vLLM refuses the request)"

    def image_limit(self, settings: EngineSettings, modality: str = "image") -> int | None:
        """``--limit-mm-per-prompt``: the most items of ``modality`` one prompt may bring, one
        count for every modality, 999 when unset (``config/multimodal.py``
        ``MultiModalConfig.get_limit_per_prompt``). SGLang's ``--limit-mm-data-per-request`` is
        refused by name: not this engine's flag."""
        from kvplan.multimodal import DEFAULT_MM_LIMIT

        if settings.limit_mm_data_per_request is not None:
            raise KVPlanError("mm.limit_flag", flag="--limit-mm-data-per-request", engine=self.label,
                              detail=f"it is SGLang's flag; {self.short}'s is {self.image_limit_flag}")
        limit = settings.limit_mm_per_prompt
        return DEFAULT_MM_LIMIT if limit is None else limit

    def drops_towers(self, settings: EngineSettings, arch: ModelArch | None = None) -> bool:
        """``--limit-mm-per-prompt`` 0 where the release then skips the towers' weights: every
        marked tower from v0.15 (``VllmRelease.mm_skip_towers_at_zero``), before that the
        architectures whose own ``__init__`` skips it (``VllmRelease.mm_skip_tower_archs``;
        ``arch`` None: none of them)."""
        if settings.limit_mm_per_prompt != 0:
            return False
        record = self.record
        return record.mm_skip_towers_at_zero or (
            arch is not None and arch.architecture in record.mm_skip_tower_archs)

    def mm_budget(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                  tokens: int) -> EncoderBudget | None:
        """The multimodal encoder budget at start-up (``engines/vllm/multimodal.py``), with
        ``max_model_len`` = ``tokens``; None for V0, a model without a known processor, or
        ``--limit-mm-per-prompt`` 0."""
        if self.record.v0_profile:
            return None
        return encoder_budget(arch, mnbt=settings.max_num_batched_tokens or self.default_mnbt(gpu),
                              max_num_seqs=settings.max_num_seqs or self.default_max_num_seqs(gpu),
                              max_model_len=tokens, image_limit=settings.limit_mm_per_prompt,
                              processor=with_processor_kwargs(arch.name, arch.processor,
                                                              settings.mm_processor_kwargs),
                              placeholder=self.record.mm_item_tokens == "placeholder")

    def mm_terms(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, tokens: int,
                 terms: tuple[ReserveTerm, ...] = ()) -> tuple[ReserveTerm, ...]:
        """The profile run's encoder outputs (``mm_encoder_cache``) where there is a budget, and
        the tower's peak beyond them and ``terms``' activation peak (``mm_encoder_peak``)."""
        dtype = self.model_dtype(arch)
        # the buffers are built with the tower: none at --limit-mm-per-prompt 0 (v0.33: the tower is
        # a StageMissingLayer; v0.11: Qwen3-VL's own __init__ sets visual None at limits 0)
        buffers = None if settings.limit_mm_per_prompt == 0 else deepstack_buffer_term(
            arch, settings.max_num_batched_tokens or self.default_mnbt(gpu), dtype, self.release)
        first = () if buffers is None else (buffers,)
        budget = self.mm_budget(arch, gpu, settings, tokens)
        if budget is None or not budget.profiled_tokens:
            return first
        pads = self.record.mm_profile_pads
        cache = encoder_cache_term(arch, budget, dtype, self.release, pads)
        text = next((t.bytes for t in terms if t.name == "activation_peak"), 0)
        processor = with_processor_kwargs(arch.name, arch.processor, settings.mm_processor_kwargs)
        copy = pad_copy_bytes(arch, budget, dtype, pads)
        peak = encoder_peak_term(arch, budget, processor, dtype, settings.tp, text + cache.bytes,
                                 self.release, qwen3_vl=self.record.qwen3_vl_tower,
                                 copy=cache.bytes + copy if copy else 0)
        return (*first, cache) if peak is None else (*first, cache, peak)

    def lora_terms(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                   terms: tuple[ReserveTerm, ...] = ()) -> tuple[ReserveTerm, ...]:
        """With ``--enable-lora``, the GPU adapter slots and the second set of CUDA graphs
        (``engines/vllm/lora.py``); else none."""
        if not settings.enable_lora:
            return ()
        slots = lora_reserve_term(
            arch, settings, ranks=self.record.lora_ranks, release=self.release,
            dtype=self.model_dtype(arch), mnbt=settings.max_num_batched_tokens or self.default_mnbt(gpu),
            max_num_seqs=settings.max_num_seqs or self.default_max_num_seqs(gpu))
        graphs = next((t for t in terms if t.name == "cuda_graphs"), None)
        extra = lora_graphs_term(graphs, settings.max_loras, self.release) if graphs else None
        return (slots,) if extra is None else (slots, extra)

    def startup_check(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, pool: KVPool,
                      tokens: int) -> StartupCheck:
        """``max_num_seqs`` (set, or ``default_max_num_seqs``) against the pool's Mamba state blocks
        as this release checks it (``kvplan.engines.vllm.startup``), with the CUDA-graph capture
        sizes it implies."""
        return self._startup(arch, gpu, settings, pool.num_blocks or 0)

    def _startup(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, num_blocks: int) -> StartupCheck:
        default = self.default_max_num_seqs(gpu)
        seqs = settings.max_num_seqs or default  # resolve_settings fills the default in
        source = "set" if seqs != default else (f"the {self.release} default for {gpu.name} "
                                                "(engine/arg_utils.py get_batch_defaults)")
        return vllm_startup_check(
            self.record, self.release, arch, settings, num_blocks, seqs,
            settings.max_num_batched_tokens or self.default_mnbt(gpu),
            blackwell=self.blackwell_capture_cap(gpu), cap_source=source)

    def dp_flags(self, dp: int, tp: int) -> str:
        """``vllm serve --data-parallel-size dp --tensor-parallel-size tp --enable-expert-parallel``
        (EP size dp × tp, ``FusedMoEParallelConfig.make``)."""
        return f"--data-parallel-size {dp} --tensor-parallel-size {tp} --enable-expert-parallel"

    def request_caps(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, pool: KVPool,
                     tokens: int, budgets: np.ndarray) -> np.ndarray | None:
        """``startup_check`` for each row of per-stage ``budgets`` (``vllm_num_blocks``): the check
        runs once per distinct block count (once in all for a model without recurrent state, whose
        check reads no block count), remembered per (release, model, GPU, settings) object."""
        assert isinstance(pool, VllmPagedPool)
        key = (id(self), id(arch), id(gpu), settings)
        entry = _CAPS.get(key)
        if entry is None or entry[0] is not self or entry[1] is not arch or entry[2] is not gpu:
            if len(_CAPS) >= _CAPS_MAX:
                _CAPS.clear()
            entry = (self, arch, gpu, arch.has_recurrent, {})
            _CAPS[key] = entry
        recurrent, cap_of = entry[3], entry[4]

        def cap(n: int) -> int:
            if n not in cap_of:
                check = self._startup(arch, gpu, settings, n)
                cap_of[n] = check.max_num_seqs if check.starts and check.max_num_seqs else 0
            return cap_of[n]

        if not recurrent:
            return np.full(np.shape(budgets)[:-1], cap(0), dtype=np.int64)
        blocks = np.asarray(vllm_num_blocks(budgets, pool.stage_per_block), dtype=np.int64)
        counts = np.unique(blocks)
        values = np.asarray([cap(int(n)) for n in counts], dtype=np.int64)
        return values[np.searchsorted(counts, blocks)]

    def in_flight_tokens(self, settings: EngineSettings, mnbt: int) -> int:
        """By the record's ``in_flight``: ``async`` — ``vllm/config/vllm.py`` ``max_in_flight_tokens
        = max_concurrent_batches × MNBT``, ``max_concurrent_batches`` pp + 1 with async scheduling,
        else pp (v0.26+); ``mnbt`` — before v0.26 ``SlidingWindowSpec``/``ChunkedLocalAttentionSpec``
        ``max_admission_blocks_per_request`` add ``max_num_batched_tokens`` in-flight tokens whatever
        the scheduling (v0.25.1 ``v1/kv_cache_interface.py``); ``none`` — V0."""
        rule = self.record.in_flight
        if rule == "none":
            return 0
        if rule == "mnbt":
            return mnbt
        return (settings.pp + 1 if settings.async_scheduling else settings.pp) * mnbt

    def mxfp4_moe_repack(self, gpu: GPU | None) -> ExpertRepack | None:
        """``fused_moe/oracle/mxfp4.py`` ``_get_priority_backends_for_gpt_oss``: TRT-LLM on SM 10.x,
        Triton on SM 9.0 (``_triton_kernel_moe_supports_current_device``; v0.10–v0.11.0
        ``Mxfp4MoEMethod._should_use_marlin``: Marlin below SM 10.0, ``mxfp4_triton``), Marlin
        elsewhere; the padding and scales of this release (``mxfp4_trtllm_inter``,
        ``mxfp4_keeps_scales``). No MXFP4 MoE method before v0.10.1 (gpt-oss support): experts as
        stored (None)."""
        record = self.record
        if not record.mxfp4_moe:
            return None
        return mxfp4_repack(gpu, record.mxfp4_trtllm_inter, record.mxfp4_triton,
                            record.mxfp4_keeps_scales, record.mxfp4_source)

    def log_lines(self, result: PoolAnswer) -> tuple[str, ...]:
        """``kvplan.engines.vllm.log.log_lines``: "GPU KV cache size" and "Maximum concurrency"."""
        return log_lines(result)

    def loading_rules(self, gpu: GPU | None) -> LoadingRules:
        """``kvplan.engines.vllm.weights.vllm_loading_rules``: v0.33's scale rules and this
        release's MXFP4 MoE layout, non-gated NVFP4 expert padding on ``gpu`` and RoPE cache
        layout (``rope_longrope_concat_only``, ``rope_mrope_positions``)."""
        record = self.record
        return vllm_loading_rules(self, gpu, record.nvfp4_ungated_inter,
                                  record.rope_longrope_concat_only, record.rope_mrope_positions)

    def layer_spec_kind(self, kind: str) -> str:
        """The spec kind this release builds for a layer of ``kind`` (``layer_specs``): every kind
        (v0.10+); chunked as full attention (v0.8–v0.9: no ``ChunkedLocalAttentionSpec``, local
        attention only in the kernel metadata); V0: full attention for all but MLA."""
        rule = self.record.layer_specs
        if rule == "full_or_mla":
            return "mla" if kind == "mla" else "full"
        if rule == "chunked_as_full":
            return "full" if kind == "chunked" else kind
        return kind

    def unserved_reason(self, arch: ModelArch) -> str | None:
        """V0 (``serves_recurrent`` False) keeps recurrent states in a separate Mamba cache."""
        if not self.record.serves_recurrent and arch.has_recurrent:
            return "V0 keeps recurrent states in a separate Mamba cache that kvplan does not model"
        return None

    def model_dtype(self, arch: ModelArch) -> str:
        """``vllm/config/model.py`` ``_resolve_auto_dtype``: a float32 config runs in the platform's
        preferred dtype, bf16 on CUDA GPUs from SM 8.0 (fp16 before); others as configured."""
        return "bf16" if arch.model_dtype == "fp32" else arch.model_dtype

    def kv_dtype(self, arch: ModelArch, name: str) -> KVDType:
        """``auto`` is what ``engine/arg_utils.py`` ``create_engine_config`` passes to
        ``CacheConfig``: ``utils/torch_utils.py`` ``resolve_kv_cache_dtype_string`` takes a ModelOpt
        checkpoint's KV format (``kv_cache_quant_algo`` / ``kv_cache_scheme``) from v0.14.0
        (``kvplan.engines.vllm.kv_dtype``), else the dtype the model runs in."""
        if name == "auto":
            resolved = resolve_auto_kv_dtype(arch.weights.quantization, self.record.kv_quant_auto)
            if resolved is not None:
                return resolve_dtype(resolved)
        return super().kv_dtype(arch, name)

    def build_view(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> EngineView:
        """The generic loop, on the SSM state dtype vLLM's config hook gives NemotronH
        (``nemotron_ssm_dtype``). Each rule keeps the model's own layer as its ``spec``: the pool
        finds a rule's layers by that spec (``pool._layer_ids``), so a state in another dtype
        still names the model's Mamba layers."""
        if arch.architecture not in NEMOTRON_H_ARCHITECTURES:
            return super().build_view(arch, dtype, model_dtype, settings, counts, mla_block_size)
        own = {self.nemotron_ssm_dtype(layer): layer for layer in counts}
        view = super().build_view(arch, dtype, model_dtype, settings,
                                  {resolved: counts[layer] for resolved, layer in own.items()},
                                  mla_block_size)
        rules = tuple(rule if rule.spec is None or own.get(rule.spec) in (None, rule.spec)
                      else replace(rule, spec=own[rule.spec]) for rule in view.rules)
        return replace(view, rules=rules)

    def nemotron_ssm_dtype(self, layer: LayerSpec) -> LayerSpec:
        """``model_executor/models/config.py`` ``NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype``:
        with ``--mamba-ssm-cache-dtype auto``, config.json's ``mamba_ssm_cache_dtype``, else the
        release's default (``VllmRelease.nemotron_h_ssm_default``: fp16 in v0.13–v0.19.1, fp32 from
        v0.20.0); a release without the hook keeps the model dtype."""
        if not isinstance(layer, Recurrent):
            return layer
        default = self.record.nemotron_h_ssm_default
        ssm = None if default is None else (layer.ssm_dtype or default)
        return layer if ssm == layer.ssm_dtype else layer.model_copy(update={"ssm_dtype": ssm})

    def hybrid_default(self, arch: ModelArch) -> bool:
        """``vllm/config/vllm.py``: the hybrid manager is on by default (``hybrid_default`` ``on``);
        for models with ``attention_chunk_size`` (Llama 4) it is turned off only when
        ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is 0, which v0.33 does not default to
        (``vllm/envs.py``: 1) but v0.10–v0.13 do (``off_with_chunked``); v0.8 has no hybrid manager
        (``off``)."""
        rule = self.record.hybrid_default
        if rule == "off":
            return False
        if rule == "off_with_chunked":
            return not any(layer.kind == "chunked" for layer in arch.distinct_layers())
        return True

    #: ``kv_cache_interface.py`` spec classes per cache kind (``PAGED_KINDS``).
    specs: ClassVar[dict[Kind, type[CacheRule]]] = PAGED_KINDS
    states_first: ClassVar[bool] = False

    @staticmethod
    def promotes_windows(counts: dict[LayerSpec, int]) -> bool:
        """With the hybrid manager off, ``kv_cache_planning.py`` ``_promote_local_kv_cache_specs``
        turns sliding/chunked specs into full attention only when windowed and full layers coexist;
        on uniform specs it returns early (an all-sliding model keeps its sliding spec)."""
        kinds = {layer_kind(layer) for layer in counts if not isinstance(layer, Recurrent | NoCache)}
        return any(k.windowed for k in kinds) and any(not k.windowed for k in kinds)

    def view_shape(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> ViewShape:
        """Block size (the setting, the MLA backend's, 16; raised so one page holds a Mamba state:
        ``Platform._align_hybrid_block_size``), in-flight tokens, the hybrid manager and the
        Mamba cache mode's state pages."""
        tp = settings.tp
        hybrid = settings.hybrid_manager
        if hybrid is None:
            hybrid = self.hybrid_default(arch)
            spec = self.speculative(arch, settings)
            if spec is not None and spec.method in EAGLE_FAMILY and any(
                    layer.kind is Kind.CHUNKED for layer in arch.distinct_layers()):
                hybrid = False  # VllmConfig.__post_init__: chunked local attention + EAGLE
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
            mode = self.mamba_cache_mode(arch, settings)
            all_mode = mode == "all"
            align = max(block, 16)
            chunk = (recurrent[0].chunk_size or VLLM_DEFAULT_MAMBA_CHUNK) if all_mode else None
            raised = raised_block(state, max(attn_1tok), align, chunk)
            if raised > block:
                notes.append(f"attention block raised from {block} to {raised} tokens so one page "
                             f"holds a {state:,} B recurrent state (Platform._align_hybrid_block_size)")
                block = raised
            if mode == "none":
                state_pages = 1  # mamba_cache_mode "none"
            elif all_mode:
                state_pages = 0  # "all": one state page per block of tokens
            else:
                state_pages = 2  # "align"
            spec = self.speculative(arch, settings)
            if spec is not None:
                # layers/mamba/abstract.py: MambaSpec(num_speculative_blocks=num_speculative_tokens);
                # kv_cache_interface.py MambaSpec.max_memory_usage_bytes: (2 | 1) + that many pages
                if state_pages == 0:
                    raise KVPlanError("spec.mamba_all", model=arch.name)
                state_pages += spec.num_speculative_tokens
                notes.append(f"each request holds {spec.num_speculative_tokens} more state pages "
                             "for the draft tokens (MambaSpec.num_speculative_blocks)")
        return VllmShape(settings, block_size=block, in_flight_tokens=ift, hybrid_manager=hybrid,
                         notes=notes, state_pages=state_pages,
                         state_page_bytes=block * max(attn_1tok) if attn_1tok else None,
                         promote=not hybrid and self.promotes_windows(counts))

    def prefix_caching(self, arch: ModelArch, settings: EngineSettings) -> bool:
        """``--enable-prefix-caching`` as given, else the release's default (``engine/arg_utils.py``
        ``_set_default_chunked_prefill_and_prefix_caching_args`` ←
        ``ModelConfig.is_prefix_caching_supported``): on, except for models with recurrent layers
        before v0.26.0 (``hybrid_prefix_caching``)."""
        if settings.enable_prefix_caching is not None:
            return settings.enable_prefix_caching
        return self.record.hybrid_prefix_caching or not arch.has_recurrent

    def mamba_cache_mode(self, arch: ModelArch, settings: EngineSettings) -> str:
        """The Mamba cache mode this release gives a hybrid (``VllmRelease.mamba_prefix``;
        ``models/config.py`` ``MambaModelConfig.verify_and_update_config``): "none" without prefix
        caching (or where the release turns it off), else "all" (a state page per block) for
        ``SupportsMambaPrefixCaching`` models where the release defaults to it, "align" (two pages)
        otherwise."""
        rule = self.record.mamba_prefix
        supported = arch.architecture in VLLM_MAMBA_PREFIX_ARCHITECTURES
        if (not self.prefix_caching(arch, settings) or rule == "off"
                or (rule == "per_block" and not supported)):
            return "none"
        if rule == "align" or not supported:
            return "align"
        if self.record.mamba_spec_align and self.speculative(arch, settings) is not None:
            return "align"  # v0.20.0+: prefix caching with speculative decoding → "align"
        return "all"

    def spec_params(self, kind: Kind, layer: LayerSpec,
                    shape: ViewShape) -> tuple[Kind, dict[str, Any]]:
        """States: pages padded to the attention page. Attention-like caches: the spec kind this
        release builds (``layer_spec_kind``; the DSA indexer as it is), full attention without a
        window, windowed specs promoted to full when the hybrid manager is off."""
        assert isinstance(shape, VllmShape)
        if kind.holds_state:
            params: dict[str, Any] = {"pages_reserved": shape.state_pages, "block_size": shape.block_size,
                                      "note": "state page padded to the attention page"}
            if shape.state_page_bytes is not None:
                params["state_bytes"] = shape.state_page_bytes
            return kind, params
        if kind is not Kind.DSA_INDEXER:
            kind = Kind(self.layer_spec_kind(kind))
        window = None if kind is Kind.FULL else layer_window(layer)
        if shape.promote and kind.windowed:
            shape.notes.append(f"hybrid KV-cache manager off: {kind} layers reserve full max_model_len")
            kind, window = Kind.FULL, None
        return kind, {"window": window, "block_size": shape.block_size,
                      "in_flight_tokens": shape.in_flight_tokens}

    def pool_layout(self, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
                    mla_block_size: int | None = None) -> VllmPool:
        """The model's KV-cache groups on one TP rank (cached per model and the settings that shape
        the pool: the reserve-only ones are left out of the key)."""
        return _pool_cached(self, self.pool_arch(arch, settings), kv_dtype, _pool_only(settings),
                            mla_block_size)

    def per_request_reserved_bytes(self, arch: ModelArch, view: EngineView, kv_dtype: str,
                                   settings: EngineSettings, tokens: int,
                                   mla_block_size: int | None) -> tuple[int, list[str]] | None:
        """A request reserves whole block ids across every group: ``blocks × bytes per block``."""
        pool = self.pool_layout(arch, kv_dtype, settings, mla_block_size)
        per_block = int(pool.stages_bytes_per_block([self.pool_arch(arch, settings).n_layers])[0])
        blocks = int(pool.blocks_per_request(tokens))
        notes = []
        if pool.padding_layers:
            notes.append(f"reserved bytes count whole block ids across {pool.n_groups} groups "
                         f"({pool.padding_layers} padding layers)")
        return blocks * per_block, notes

    def memory_target(self, capacity: int, settings: EngineSettings, arch: ModelArch,
                      notes: list[str]) -> tuple[int, str]:
        util = settings.gpu_util or self.record.default_gpu_util
        if self.record.ceil_requested:
            target = math.ceil(capacity * util)
            return target, f"ceil({capacity:,} × {util}) = {target:,} B ({self.release})"
        target = int(capacity * util)
        return target, f"{capacity:,} × {util} = {target:,} B ({self.release}: total × util)"

    def memory_fraction(self, capacity: int, settings: EngineSettings) -> float | None:
        """``--gpu-memory-utilization``, or the release's default (``config/cache.py``)."""
        return settings.gpu_util or self.record.default_gpu_util

    def device_share(self, capacity: int, settings: EngineSettings) -> float | None:
        """Releases that size only their own memory (``others_rule`` ``own``, ``free_check``) claim
        ``gpu_memory_utilization`` of the whole device; v0.8–v0.9.0 count the others inside it."""
        return None if self.record.others_rule == "subtract" else self.memory_fraction(capacity, settings)

    def beside_others(self, others: int, capacity: int, target: int, stage_weights: list[int],
                      reserve: int, settings: EngineSettings, budgets: list[int],
                      formulas: dict[str, str], detail: Reserve | None = None,
                      ) -> tuple[list[int], str | None]:
        """What the release's ``others_rule`` does with ``others`` bytes already in use (free memory
        at start = ``capacity − others``; the CUDA context this process creates before its snapshot
        is not modelled):

        * ``free_check`` (v0.9.1+ ``v1/worker/gpu_worker.py`` ``init_device``; v0.14.1+
          ``v1/worker/utils.py`` ``request_memory``): the budget is unchanged, and the engine raises
          ``ValueError`` when ``free < total × util`` (``ceil`` from v0.14.1);
        * ``subtract`` (v0.8.0 / v0.9.0 ``gpu_worker.py`` ``determine_available_memory``: every
          non-torch byte on the device counts, the others' included): the budget loses ``others``,
          and ``v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory`` raises when none is left;
        * ``own`` (v0.6.0 ``worker/worker.py`` ``determine_num_available_blocks``): the budget is
          unchanged and nothing checks free memory, so allocating ``total × util`` beyond what is
          free runs out of CUDA memory."""
        util = self.memory_fraction(capacity, settings) or 0.0
        free = capacity - others
        oom = weights_oom(others, capacity, stage_weights)
        rule = self.record.others_rule
        if rule == "subtract":
            formulas["others"] = (f"{self.release} counts every process's memory: budget − {others:,} "
                                  f"held by others = {min(budgets) - others:,} B")
            out = [b - others for b in budgets]
            if oom is None and min(out) <= 0:
                oom = ("No available memory for the cache blocks. Try increasing "
                       "`gpu_memory_utilization` when initializing the engine.")
            return out, oom
        if rule == "own":
            formulas["others"] = (f"{self.release} sizes its own use only ({others:,} B held by others "
                                  f"do not change the budget); {target:,} B to allocate, {free:,} B free")
            if oom is None and target > free:
                oom = (f"CUDA out of memory allocating the KV cache: total × gpu_memory_utilization = "
                       f"{target:,} B, {free:,} B free ({self.release} does not check free memory at "
                       "start)")
            return budgets, oom
        requested: float = math.ceil(capacity * util) if self.record.ceil_requested else capacity * util
        formulas["others"] = (f"{self.release} checks free memory at start: {free:,} B free "
                              f"({capacity:,} − {others:,}) ≥ requested {requested:,.0f} B; the budget "
                              "counts its own use only")
        if free < requested:
            device = " cuda:0" if self.record.ceil_requested else ""
            return budgets, (
                f"Free memory on device{device} ({_gib(free)}/{_gib(capacity)} GiB) on startup is less "
                f"than desired GPU memory utilization ({util}, {_gib(requested)} GiB). Decrease GPU "
                "memory utilization or reduce GPU memory used by other processes.")
        return budgets, oom
    auto_kv_source: ClassVar[str] = ("vLLM ≥ 0.14 engine/arg_utils.py create_engine_config → "
                                     "utils/torch_utils.py resolve_kv_cache_dtype_string")

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str], reserve: Reserve | None = None) -> KVPool:
        notes.extend(self.auto_kv_note(arch, kv_dtype))
        pool = self.pool_layout(arch, kv_dtype, settings, vllm_mla_block_size(gpu, kv_dtype))
        notes.extend(pool.notes)
        return VllmPagedPool(pool, budgets, layer_partition(self.pool_arch(arch, settings), settings.pp),
                             self.record.logged_tokens, null_block=self.record.null_block)

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


def _gib(b: float) -> str:
    """``vllm/utils/mem_utils.py`` ``format_gib`` (and the ``GiB`` lambda before it):
    ``round(b / GiB, 2)``."""
    return f"{round(b / GIB, 2)}"
