"""vLLM releases older than the newest modelled one, each overriding only what changed
(``docs/vllm_releases.md`` §12)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from kvplan.arch import ModelArch, Recurrent
from kvplan.engines.repack import ExpertRepack
from kvplan.engines.reserve import cuda_capacity
from kvplan.engines.settings import EngineSettings
from kvplan.engines.vllm.engine import Vllm, mxfp4_repack
from kvplan.engines.vllm.memory import CaptureRule, SamplerPath

if TYPE_CHECKING:
    from kvplan.presets import GPU

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
