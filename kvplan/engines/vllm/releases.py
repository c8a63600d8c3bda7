"""vLLM releases as a table of frozen trait records, oldest first, each ``replace(previous, …)`` with
only what changed (``docs/vllm_releases.md`` §12). ``Vllm`` (``engine.py``) takes one record and
branches on its traits; the last record is "latest". Adding a release is one ``replace`` line here
plus its test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from kvplan.engines.base import Release
from kvplan.engines.vllm.memory import CaptureRule, SamplerPath
from kvplan.engines.vllm.spec_decode import SpecCapture

#: How the start-up log's "GPU KV cache size" is computed (``VllmPagedPool``).
LoggedTokens = Literal["concurrency", "groups", "blocks"]
#: What the in-flight tokens of a windowed spec are (``Vllm.in_flight_tokens``).
InFlight = Literal["async", "mnbt", "none"]
#: The hybrid KV-cache manager's default (``Vllm.hybrid_default``).
HybridDefault = Literal["on", "off_with_chunked", "off"]
#: Which spec a layer kind gets (``Vllm.layer_spec_kind``).
LayerSpecs = Literal["all", "chunked_as_full", "full_or_mla"]
#: The ``max_num_batched_tokens`` / ``max_num_seqs`` defaults (``Vllm.default_mnbt``).
BatchDefaults = Literal["tiers", "v0.8", "v0"]
#: What the release does when ``max_num_seqs`` exceeds the Mamba state blocks
#: (``kvplan.engines.vllm.startup``).
MambaPrefix = Literal["off", "per_block", "all_or_align", "align"]
StateBlockCheck = Literal["raise", "cap", "assert", "none"]
#: What the release does with memory other processes already hold when it starts
#: (``kvplan.instances``; ``Vllm.beside_others``).
OthersRule = Literal["own", "subtract", "free_check"]


@dataclass(frozen=True, kw_only=True)
class VllmRelease(Release):
    """The traits that differ between vLLM releases (each field says where it is read)."""

    #: ``config/cache.py`` ``gpu_memory_utilization`` default (0.92 from v0.20.0, 0.9 before).
    default_gpu_util: float
    #: ``v1/worker/utils.py`` ``request_memory``: ``ceil(total × util)`` from v0.14.1 (float before).
    ceil_requested: bool
    #: How the start-up log's "GPU KV cache size" is computed: ``concurrency`` =
    #: ``int(max_concurrency × L)`` (v0.20.1+), ``groups`` = ``num_blocks // n_groups × min_bs``
    #: (v0.9.2–v0.20.0), ``blocks`` = ``num_blocks × bs`` (v0.8, V0).
    logged_tokens: LoggedTokens
    #: V1's ``BlockPool`` keeps one null block out of every request's reach.
    null_block: bool
    #: ``vllm/config/lora.py`` ``MaxLoRARanks``: the ranks ``--max-lora-rank`` takes; empty where
    #: kvplan has not read the release's ``vllm/lora`` slot shapes (``--enable-lora`` refused).
    lora_ranks: tuple[int, ...] = ()
    #: ``--speculative-config`` methods kvplan sizes for the release (``vllm/config/speculative.py``
    #: ``SpeculativeMethod``, ``engines/vllm/spec_decode.py``); empty where it has not read the
    #: release's ``v1/spec_decode`` (refused by name).
    spec_methods: tuple[str, ...] = ()
    #: ``VllmConfig._set_cudagraph_sizes`` with draft tokens (``spec_decode.SpecCapture``).
    spec_capture: SpecCapture = "ceiling"
    #: Top-k/top-p path of the sampler warm-up: FlashInfer by default from v0.21
    #: (``envs.py`` ``VLLM_USE_FLASHINFER_SAMPLER`` = True, ``flashinfer_sampler_supported``).
    sampler_path: SamplerPath
    #: CUDA-graph capture sizes (``config/vllm.py`` ``_set_cudagraph_sizes``).
    capture_rule: CaptureRule
    #: Whether the CUDA-graph estimate is subtracted from the KV budget
    #: (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` default 1 from v0.20, ``gpu_worker.py``
    #: ``determine_available_memory``); its term is then one the user may replace.
    graphs_counted: bool
    #: ``_set_cudagraph_sizes``: capture sizes up to 1,024 on data-centre Blackwell (SM 10.x; from
    #: v0.28.0, 512 on every GPU up to v0.27).
    blackwell_capture_cap: bool
    #: V0's profile run (``vllm/worker/model_runner.py``) rather than V1's ``gpu_model_runner.py``.
    v0_profile: bool
    #: V0's ``EngineArgs`` defaults and knobs in the settings labels (``Vllm.setting_labels``).
    v0_settings: bool
    #: ``async``: ``vllm/config/vllm.py`` ``max_in_flight_tokens = max_concurrent_batches × MNBT``,
    #: ``max_concurrent_batches`` pp + 1 with async scheduling, else pp (v0.26+); ``mnbt``:
    #: ``max_num_batched_tokens`` alone (``SlidingWindowSpec.max_admission_blocks_per_request``,
    #: before v0.26); ``none``: V0 reserves no in-flight tokens.
    in_flight: InFlight
    #: ``on``: the hybrid manager is on by default (``vllm/config/vllm.py``); ``off_with_chunked``:
    #: off for models with chunked local attention (``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
    #: defaults to 0 until v0.14.1); ``off``: no hybrid manager (v0.8).
    hybrid_default: HybridDefault
    #: ``all``: every spec kind exists; ``chunked_as_full``: no ``ChunkedLocalAttentionSpec`` yet
    #: (v0.9 and older V1); ``full_or_mla``: V0's ``CacheEngine`` gives every layer the full length.
    layer_specs: LayerSpecs
    #: ``tiers``: ``engine/arg_utils.py`` ``get_batch_defaults`` (``_batch_tier``); ``v0.8``:
    #: ``_set_default_args_v1`` by memory alone; ``v0``: ``SchedulerConfig`` (2048 / 256).
    batch_defaults: BatchDefaults
    #: ``get_batch_defaults`` has a ≥ 160 GiB tier (16,384 batched tokens) from v0.28.
    huge_batch_tier: bool
    #: v0.33 ``get_batch_defaults``: a GB10 (DGX Spark, ``is_device_capability((12, 1))``) stays on
    #: the small tier whatever its memory (not before v0.33).
    gb10_small_tier: bool
    #: RoPE types whose ``factor`` does not scale the derived maximum (``config/model.py``
    #: ``_get_and_verify_max_len``): from v0.30 the YaRN family too (its ``max_position_embeddings``
    #: is already scaled).
    unscaled_rope_types: tuple[str, ...]
    #: Whether the release has an MXFP4 MoE method (gpt-oss support from v0.10.1).
    mxfp4_moe: bool
    #: Whether the OAI Triton MXFP4 backend is taken on SM 9.0
    #: (``_triton_kernel_moe_supports_current_device``; Marlin below SM 10.0 in v0.10–v0.11.0).
    mxfp4_triton: bool
    #: MXFP4 MoE, ``fused_moe/oracle/mxfp4.py``: FlashInfer TRT-LLM pads the intermediate to 128 from
    #: v0.27 (``mxfp4_round_up_hidden_size_and_intermediate_size``; 256 up to v0.26) ...
    mxfp4_trtllm_inter: int
    #: ... and Triton frees the checkpoint's scales after swizzling from v0.25
    #: (``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``: ``del layer.w13_weight_scale``).
    mxfp4_keeps_scales: bool
    #: The source file of the MXFP4 expert layout, as shown with the weights.
    mxfp4_source: str
    #: NVFP4 MoE experts of a non-gated activation (Nemotron-H's relu2), on Blackwell (the CUTLASS /
    #: FlashInfer NVFP4 MoE backends, SM ≥ 10.0): the per-rank intermediate size padded to this
    #: multiple after loading (v0.13 ``modelopt.py`` ``ModelOptNvFp4FusedMoE.process_weights_after_loading``,
    #: v0.14–v0.33 ``utils/flashinfer_fp4_moe.py``: ``swizzle_blockscale`` pads the block-scale rows
    #: to 128 and ``w13``/``w2`` are padded to match; FlashInfer TRT-LLM aligns non-gated experts to
    #: 128 too, ``align_fp4_moe_weights_for_fi``); 1: as stored (v0.11.0 and older: no non-gated
    #: NVFP4 MoE on this path).
    nvfp4_ungated_inter: int = 1
    #: Whether the release serves recurrent (Mamba) hybrids in the pool kvplan models.
    serves_recurrent: bool
    #: With FULL decode CUDA graphs and Mamba layers, ``max_num_seqs`` against the pool's blocks
    #: (one state block per decode sequence): ``raise`` — ``config/compilation.py``
    #: ``resolve_cudagraph_mode_and_sizes`` raises ``ValueError`` when ``max_num_seqs >
    #: num_blocks`` (v0.20.0+, PR #38270); ``cap`` — ``adjust_cudagraph_sizes_for_mamba_cache``
    #: drops the capture sizes above ``num_blocks`` with a warning (v0.18–v0.19, PR #34571);
    #: ``assert`` — no check: a FULL decode capture larger than ``num_blocks`` fails
    #: ``causal_conv1d_update``'s ``assert num_cache_lines >= batch`` (v0.11.0–v0.17, FULL_AND_PIECEWISE
    #: the default, issue #34094); ``none`` — piecewise graphs only by default (v0.8–v0.10, V0).
    state_block_check: StateBlockCheck = "none"
    #: The Mamba cache mode of a hybrid served with prefix caching on (``models/config.py``
    #: ``MambaModelConfig.verify_and_update_config``, run by ``HybridAttentionMambaModelConfig``):
    #: ``off`` — prefix caching turned off for every hybrid (v0.11.0: one state page, mode "none");
    #: ``per_block`` — kept only for ``SupportsMambaPrefixCaching`` models, a state page per block
    #: of a chunk-aligned block (``MambaSpec.max_memory_usage_bytes`` = ``cdiv(max_model_len,
    #: block_size)`` pages), turned off for the others (v0.13.0, v0.14.0); ``all_or_align`` — "all"
    #: for those models, "align" (two pages) for the others (v0.15.0–v0.27.0; from v0.20.0 "align"
    #: with speculative decoding); ``align`` — "align" for every hybrid (v0.28.0+; "all" only when
    #: asked for, removed from ``MambaCacheMode`` in v0.32.0).
    mamba_prefix: MambaPrefix = "off"
    #: ... and "align" instead of "all" when speculative decoding is on (v0.20.0+, the same hook).
    mamba_spec_align: bool = False
    #: Prefix caching on by default for hybrid (attention + Mamba) models: ``config/model.py``
    #: ``ModelConfig.is_prefix_caching_supported`` answers False for ``attn_type == "hybrid"`` up to
    #: v0.25.0 and True from v0.26.0, which ``engine/arg_utils.py``
    #: ``_set_default_chunked_prefill_and_prefix_caching_args`` takes when the flag is not given.
    hybrid_prefix_caching: bool = False
    #: Memory held by other processes at start-up: ``own`` — V0 (v0.6.0 ``worker/worker.py``
    #: ``determine_num_available_blocks``: ``peak = init_gpu_memory − free``, this process's use only;
    #: KV ``total × util − peak``; no check of free memory); ``subtract`` — v0.8.0 and v0.9.0
    #: (``v1/worker/gpu_worker.py`` ``determine_available_memory``: ``non_torch_allocations =
    #: (total − free) − torch allocated`` counts every process's bytes, so KV = ``total × util −
    #: torch peak − all else in use``); ``free_check`` — v0.9.1+ (``init_device``: ``requested =
    #: total × util``, ``ceil`` from v0.14.1 ``v1/worker/utils.py`` ``request_memory``, raises
    #: ``ValueError`` when ``free < requested``; KV = ``requested − this process's use``,
    #: ``memory_profiling`` against the start-up snapshot).
    others_rule: OthersRule = "free_check"
    #: The ModelOpt KV formats ``--kv-cache-dtype auto`` takes from the checkpoint's quantization
    #: config (``engine/arg_utils.py`` ``create_engine_config`` → ``utils/torch_utils.py``
    #: ``resolve_kv_cache_dtype_string``; ``kvplan.engines.vllm.kv_dtype``): none up to v0.13,
    #: ``fp8`` from v0.14.0, ``nvfp4`` too from v0.20.0 (``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``).
    kv_quant_auto: tuple[str, ...] = ()
    #: ``model_executor/models/config.py`` ``NemotronHForCausalLMConfig`` (``MODELS_CONFIG_MAP``):
    #: with ``mamba_ssm_cache_dtype`` "auto", NemotronH's SSM state takes config.json's
    #: ``mamba_ssm_cache_dtype``, else this default — ``fp16`` in v0.13–v0.19.1, ``fp32`` from
    #: v0.20.0 (``DEFAULT_MAMBA_SSM_CACHE_DTYPE``); None: no hook (v0.11.0 and older), the model
    #: dtype whatever the config says.
    nemotron_h_ssm_default: str | None = None
    #: What the multimodal encoder budget counts per item (``MultiModalBudget``): ``embeds`` — the
    #: item's embeddings (``PlaceholderRange.get_num_embeds``; v0.13.0+, PR #30475, and v0.10.0);
    #: ``placeholder`` — the whole placeholder's tokens (``PlaceholderRange.length``, with the
    #: text tokens inside it: Gemma-3's 260 per image; v0.10.1–v0.12, PR #21798).
    mm_item_tokens: Literal["embeds", "placeholder"] = "embeds"
    #: With ``--limit-mm-per-prompt`` 0 for all its modalities a tower is not built and its weights
    #: are not loaded, for every model that marks its towers (``model_executor/models/interfaces.py``
    #: ``_mark_tower_model`` → ``StageMissingLayer``): from v0.15.0 (read in 0.15.0, 0.17.1, 0.18.0,
    #: 0.19.1, 0.20.0–0.20.2, 0.21.0, 0.24.0–0.33.0; absent in 0.14.1).
    mm_skip_towers_at_zero: bool = False
    #: Before that general rule, the architectures whose own ``__init__`` builds no tower (and no
    #: projector) when every limit is 0 (``if multimodal_config.get_limit_per_prompt(...)``, else
    #: ``self.visual = None``; ``load_weights`` skips ``visual.``): v0.10.1–v0.14.1 (read in
    #: 0.10.1.1, 0.10.2, 0.11.0–0.11.2, 0.12.0, 0.13.0, 0.14.0, 0.14.1; none in 0.9.0–0.10.0 —
    #: 0.10.0 is in the v0.10 record, which follows v0.10.1 as ``mm_item_tokens`` does). Gemma-3 is
    #: never among them (``gemma3_mm.py`` builds its tower whatever the limit).
    mm_skip_tower_archs: tuple[str, ...] = ()
    #: ``get_batch_defaults`` reads the device total from NVML (``platforms/cuda.py``
    #: ``NvmlCudaPlatform.get_device_total_memory``: ``nvmlDeviceGetMemoryInfo(handle).total``) inside
    #: a ``try``: where NVML reports no memory (``GPU.nvml_memory`` False: the GB10) it raises,
    #: ``device_memory = 0`` and the device takes the small tier (read in 0.11.0, 0.12.0, 0.13.0,
    #: 0.19.0 and 0.32.0; the records between inherit it).
    nvml_batch_total: bool = False
    #: Whose Qwen3-VL tower code the profile peak is derived from (``multimodal.tower_peak``):
    #: ``"0.33"`` (``_qwen3_vl_peak``, read in 0.33.0's ``qwen3_vl.py``), ``"0.11.0"``
    #: (``_qwen3_vl_peak_v0_11``, read in 0.11.0: its attention copies q, k, v, concatenates q and
    #: k and rotates them in float32; 0.11.1 already differs), ``""`` — not read: no term.
    qwen3_vl_tower: Literal["", "0.11.0", "0.33"] = ""
    #: ``profile_run`` pads each dummy encoder output with fewer rows than the encoder budget to
    #: ``encoder_budget`` rows (``output.new_zeros((encoder_budget, width))`` + a copy: "the
    #: embeddings that encoder outputs are scattered onto") and caches the padded copies while the
    #: language model's dummy forward and the sampler run (``v1/worker/gpu_model_runner.py``
    #: ``profile_run``): read in 0.11.0, 0.11.1 and 0.11.2; absent in 0.10.1.1, 0.10.2 and 0.12.0.
    mm_profile_pads: bool = False
    #: LongRoPE registers only the concatenated short+long cos/sin cache (0.11.0–0.19.0
    #: ``rotary_embedding/phi3_long_rope_scaled_rope.py``: ``long_short_cos_sin_cache``); v0.6.6
    #: ``rotary_embedding.py`` registers the short and the long caches besides
    #: (``LoadingRules.rope_longrope_concat_only``; v0.8–v0.9 not read, they inherit v0.6's).
    rope_longrope_concat_only: bool = True
    #: MRoPE's cos/sin cache spans this many times the positions (0.11.0–0.19.0 ``mrope.py``
    #: ``MRotaryEmbedding.__init__``: ``cache_max_position_num = max_position_embeddings * 4``;
    #: 1 in v0.6.6 ``rotary_embedding.py``; ``LoadingRules.rope_mrope_positions``; v0.8–v0.9 not
    #: read, they inherit v0.6's).
    rope_mrope_positions: int = 4


V0_6 = VllmRelease(
    key="0.6", since="0.6.0", name="vLLM v0.6 (V0)",
    changes="V0 engine: one block spans every attention layer (``worker/cache_engine.py`` "
            "``CacheEngine.get_cache_block_size``) and sliding windows do not change the pool: "
            "``num_gpu_blocks = int(available // block bytes)`` (``worker/worker.py`` "
            "``determine_num_available_blocks``); the log prints \"# GPU blocks\" and "
            "``max_concurrency = num_gpu_blocks × block_size / max_model_len`` (``gpu_executor.py``); "
            "no null block (the 1 % admission watermark is not modelled). Recurrent hybrids keep a "
            "separate Mamba cache kvplan does not model for V0. V0's sampler sorts for top-p/top-k "
            "(``model_executor/layers/sampler.py`` ``_apply_top_k_top_p``); ``SchedulerConfig``: "
            "``max_num_seqs`` 256 (``engine/arg_utils.py``) and ``SchedulerConfig.__post_init__`` "
            "``max_num_batched_tokens = max(max_model_len, 2048)`` without chunked prefill, which is "
            "on by default only beyond 32K tokens (then 2048).",
    default_gpu_util=0.9, ceil_requested=False, logged_tokens="blocks", null_block=False,
    sampler_path="sort", capture_rule="stride8", graphs_counted=False, blackwell_capture_cap=False,
    v0_profile=True, v0_settings=True, in_flight="none", hybrid_default="off",
    layer_specs="full_or_mla", batch_defaults="v0", huge_batch_tier=False, gb10_small_tier=False,
    unscaled_rope_types=("su", "longrope", "llama3"), mxfp4_moe=False, mxfp4_triton=False,
    mxfp4_trtllm_inter=256, mxfp4_keeps_scales=True, mxfp4_source="", serves_recurrent=False,
    others_rule="own", rope_longrope_concat_only=False, rope_mrope_positions=1)
V0_8 = replace(
    V0_6, key="0.8", since="0.8.0", name="vLLM v0.8",
    changes="first V1 default: the V1 pool (``v1/core/kv_cache_utils.py``, a null block in "
            "``BlockPool``), but no hybrid manager — a model mixing full and windowed layers is "
            "promoted to full attention on every layer; no ``ChunkedLocalAttentionSpec`` (chunked "
            "layers are ``FullAttentionSpec``); \"GPU KV cache size\" = ``num_blocks × block_size`` "
            "and the concurrency ``tokens / L``; ``_set_default_args_v1``: ``max_num_batched_tokens`` "
            "8192 and ``max_num_seqs`` 1024 on every ≥ 70 GiB device (else 2048 / 256).",
    null_block=True, v0_profile=False, v0_settings=False, sampler_path="flashinfer", in_flight="mnbt",
    layer_specs="chunked_as_full", batch_defaults="v0.8", serves_recurrent=True, others_rule="subtract")
V0_9 = replace(
    V0_8, key="0.9", since="0.9.0", name="vLLM v0.9",
    changes="the hybrid manager, on by default: sliding layers keep their spec; still no "
            "``ChunkedLocalAttentionSpec`` — chunked layers are ``FullAttentionSpec`` (local "
            "attention only in the kernel metadata); from v0.9.2 \"GPU KV cache size\" = "
            "``num_blocks // n_groups × min_block_size`` and ``get_batch_defaults``' tiers. Beside "
            "other processes: v0.9.0 subtracts what they hold (``gpu_worker.py`` "
            "``determine_available_memory``, as v0.8); v0.9.1–v0.9.2 check free memory at start "
            "(``init_device``, as v0.10) — this record follows v0.9.0.",
    logged_tokens="groups", hybrid_default="on", batch_defaults="tiers")
V0_10 = replace(
    V0_9, key="0.10", since="0.10.0", name="vLLM v0.10",
    changes="``ChunkedLocalAttentionSpec``; chunked-local models run with the hybrid manager off "
            "(``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` defaults to 0), so Llama 4's "
            "chunked and full layers all reserve ``max_model_len``. As in v0.9: FlashInfer top-k/top-p when "
            "installed (``VLLM_USE_FLASHINFER_SAMPLER is not False``) — the docker image has it; the "
            "wheel has it only as its ``flashinfer`` extra (wheel METADATA ``Requires-Dist: "
            "flashinfer-python…; extra == \"flashinfer\"``; a plain requirement from v0.11.1), so "
            "``pip install vllm`` takes the PyTorch sort: ``--flashinfer-sampler 0``; capture sizes "
            "every 8 up to ``min(2 × max_num_seqs, 512)``. New: MXFP4 MoE (gpt-oss, "
            "``quantization/mxfp4.py`` ``Mxfp4MoEMethod._should_use_marlin``): Marlin below SM 10.0 — "
            "v0.10.1 pins torch 2.7 (Triton needs ≥ 2.8) and neither bundles ``triton_kernels``; "
            "FlashInfer (256/256) on Blackwell. ``get_batch_defaults`` takes NVML's total, so a "
            "device whose NVML reports no memory (a GB10) is on the small tier (``nvml_batch_total``; "
            "read in 0.11.0, 0.12.0, 0.13.0: public log 44 on a GB10 defaults to 2,048 batched tokens). "
            "RoPE caches (in every release's weights, in the model dtype): LongRoPE keeps only the "
            "concatenated short+long cache and MRoPE's spans 4 × the positions (read in 0.11.0; "
            "v0.6.6 keeps three LongRoPE caches and MRoPE's at the positions; v0.10 not read).",
    hybrid_default="off_with_chunked", layer_specs="all", mxfp4_moe=True, others_rule="free_check",
    mxfp4_source="vLLM v0.10.1.1 quantization/mxfp4.py", state_block_check="assert",
    mm_item_tokens="placeholder", nvml_batch_total=True, rope_longrope_concat_only=True,
    rope_mrope_positions=4,
    mm_skip_tower_archs=("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                         "Mistral3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                         "LlavaForConditionalGeneration"))
V0_11 = replace(
    V0_10, key="0.11", since="0.11.0", name="vLLM v0.11.0",
    changes="``profile_run`` pads each dummy encoder output shorter than the encoder budget to "
            "``encoder_budget`` rows (``new_zeros`` + copy) and keeps the padded copies in "
            "``encoder_cache`` through the dummy forward and the sampler warm-up "
            "(``mm_profile_pads``: read in 0.11.0; absent in 0.10.2). Qwen3-VL arrives (its "
            "``get_max_video_tokens`` counts 12.5 placeholder tokens per video embedding; its tower's "
            "profile peak is 0.11.0's own, ``qwen3_vl_tower``; like "
            "Qwen2.5-VL it builds no tower at ``--limit-mm-per-prompt`` 0: ``mm_skip_tower_archs``). "
            "The rest as v0.10.",
    mm_profile_pads=True, qwen3_vl_tower="0.11.0",
    mm_skip_tower_archs=(*V0_10.mm_skip_tower_archs, "Qwen3VLForConditionalGeneration",
                         "Qwen3VLMoeForConditionalGeneration"))
V0_11_2 = replace(
    V0_11, key="0.11.2", since="0.11.1", name="vLLM v0.11.1–v0.11.2",
    changes="the sampler warm-up sorts (FlashInfer top-k/top-p is opt-in from v0.11.1, "
            "``v1/sample/ops/topk_topp_sampler.py``) and CUDA graphs are captured at ``[1, 2, 4] + "
            "8…248 step 8 + 256… step 16`` (``config/vllm.py`` ``_set_cudagraph_sizes``), as in "
            "v0.14–v0.19; requested memory still ``total × util`` (no ceil, ``gpu_worker.py`` "
            "``init_device``). MXFP4 experts: v0.11.1–v0.11.2 bundle no ``triton_kernels`` "
            "(``utils/import_utils.py`` ``has_triton_kernels``) and take Marlin, as ``vllm@0.11``, "
            "unless ``triton_kernels`` is installed. The dummy encoder outputs are still padded to "
            "the encoder budget (``mm_profile_pads``, read in 0.11.1 and 0.11.2). NemotronH's SSM "
            "state: ``models/config.py`` ``NemotronHForCausalLMConfig`` takes config.json's "
            "``mamba_ssm_cache_dtype``, else float16 (read in 0.13.0; absent in 0.11.0). The multimodal "
            "encoder budget counts each item's placeholder tokens as in v0.10.1–v0.11.0; v0.13.0 "
            "already counts embeddings (PR #30475, as ``vllm@0.17``). Prefix caching on a Mamba "
            "hybrid is kept only for ``SupportsMambaPrefixCaching`` models (a state page per "
            "chunk-aligned block), else turned off (``models/config.py`` ``MambaModelConfig``, read "
            "in 0.13.0 and 0.14.0; v0.11.0 turns it off for every hybrid).",
    sampler_path="sort", capture_rule="stride16", nemotron_h_ssm_default="fp16", mamba_prefix="per_block",
    qwen3_vl_tower="")
V0_13 = replace(
    V0_11_2, key="0.13", since="0.12.0", name="vLLM v0.12–v0.13",
    changes="``profile_run`` caches the dummy encoder outputs as they are, no longer padded to the "
            "encoder budget (read in 0.12.0 and 0.13.0). MXFP4 experts: v0.12–v0.13 bundle "
            "``vllm.third_party.triton_kernels`` and take Triton on SM 9.0 as v0.14 "
            "(``quantization/mxfp4.py`` ``get_mxfp4_backend``). NVFP4 MoE experts of a non-gated "
            "activation on Blackwell: the per-rank intermediate padded to 128 (v0.12.0/v0.13.0 "
            "``modelopt.py`` ``ModelOptNvFp4FusedMoE.process_weights_after_loading``: "
            "``swizzle_blockscale`` rounds the scale rows up to 128, ``w13``/``w2`` padded to "
            "match; v0.11.x asserts a gated activation there), as in every later release. The rest "
            "as v0.11.1–v0.11.2.",
    mm_profile_pads=False, mxfp4_triton=True, mxfp4_source="vLLM v0.14.1/v0.19.0 quantization/mxfp4.py",
    nvfp4_ungated_inter=128)
V0_14 = replace(
    V0_13, key="0.14", since="0.14.0", name="vLLM v0.14",
    changes="requested memory ``ceil(total × util)`` (``v1/worker/utils.py`` ``request_memory``, "
            "from v0.14.1) and the hybrid manager on for chunked-local models too "
            "(``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` defaults to 1 from v0.14.1); "
            "``gpu_memory_utilization`` still 0.9 (``config/cache.py``) and the CUDA-graph estimate "
            "profiled but not subtracted (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 0, "
            "v0.19.1 ``envs.py``). v0.14–v0.19 (``quantization/mxfp4.py`` ``get_mxfp4_backend``, "
            "v0.19 ``oracle/mxfp4.py``): Triton on SM 9.0 (bundled ``vllm.third_party.triton_kernels``) "
            "keeps the checkpoint's scales as layer parameters beside the swizzled copy in its "
            "``PrecisionConfig``; TRT-LLM pads the intermediate to 256 — as v0.20–v0.24. From v0.14.0 "
            "``--kv-cache-dtype auto`` is ``fp8_e4m3`` for a ModelOpt checkpoint declaring FP8 KV "
            "(``engine/arg_utils.py`` ``create_engine_config`` → ``utils/torch_utils.py`` "
            "``resolve_kv_cache_dtype_string``; absent in v0.13.0). The multimodal encoder budget "
            "counts embeddings per item (``v1/core/encoder_cache_manager.py``, PR #30475). Prefix "
            "caching on a Mamba hybrid still as v0.13: kept only for ``SupportsMambaPrefixCaching`` "
            "models, with ``mamba_block_size`` = ``block_size`` (a state page per block: "
            "``MambaSpec.max_memory_usage_bytes`` = ``cdiv(max_model_len, block_size)`` pages), "
            "turned off for the others (\"Hybrid or mamba-based model detected without support for "
            "prefix caching: disabling.\"; 0.14.1 ``model_executor/models/config.py`` "
            "``MambaModelConfig.verify_and_update_config``, ``v1/kv_cache_interface.py`` "
            "``MambaSpec``; the same in 0.14.0).",
    ceil_requested=True, hybrid_default="on", kv_quant_auto=("fp8",), mm_item_tokens="embeds")
V0_17 = replace(
    V0_14, key="0.17", since="0.15.0", name="vLLM v0.15–v0.17",
    changes="Prefix caching on a Mamba hybrid: Mamba cache mode \"all\" for "
            "``SupportsMambaPrefixCaching`` models, \"align\" (two state pages) for the others "
            "(``models/config.py`` ``MambaModelConfig``, read in v0.15.0 and v0.17.1). "
            "``--limit-mm-per-prompt`` 0 leaves every marked tower unloaded (``interfaces.py`` "
            "``_mark_tower_model`` → ``StageMissingLayer``, from 0.15.0: ``mm_skip_towers_at_zero``; "
            "the per-model rules of v0.10.1–v0.14 are gone) — this record follows 0.17.1, where "
            "Kimi-K2.5 marks its tower too (0.15.0's ``kimi_k25.py`` does not: it loads it). The rest "
            "as v0.14.",
    mamba_prefix="all_or_align", mm_skip_towers_at_zero=True, mm_skip_tower_archs=())
V0_19 = replace(
    V0_17, key="0.19", since="0.18.0", name="vLLM v0.18–v0.19",
    changes="hybrid Mamba models with FULL decode CUDA graphs: ``config/compilation.py`` "
            "``adjust_cudagraph_sizes_for_mamba_cache`` (from 0.18.0, PR #34571; called from "
            "``gpu_model_runner.py`` ``_check_and_update_cudagraph_mode``) drops the capture sizes "
            "above the pool's ``num_blocks`` with a warning (none left: no CUDA graphs) — before, a "
            "FULL decode capture larger than ``num_blocks`` failed ``causal_conv1d_update``'s assert. "
            "``--speculative-config`` ``ngram`` and ``suffix`` (read in 0.18.0 and 0.19.1: "
            "``config/speculative.py`` ``SpeculativeMethod``, ``suffix_decoding_max_tree_depth`` 24; "
            "``v1/core/sched/scheduler.py`` no lookahead slots for them; no drafter on the GPU): "
            "``config/vllm.py`` ``_set_cudagraph_sizes`` raises the capture ceiling to "
            "``min(max_num_seqs × (1 + num_speculative_tokens) × 2, 512)`` (``spec_capture`` "
            "``ceiling``); the other methods not read for this release."
            " Not modelled: from v0.17 (read in 0.17.1, 0.18.0, 0.19.0; absent in 0.16.0) "
            "``v1/sample/ops/topk_topp_sampler.py`` ``apply_top_k_top_p`` takes the Triton kernel "
            "``apply_top_k_top_p_triton`` for ≥ 8 rows (in place on the fp32 logits, one cached "
            "``min(num_SMs, rows) × vocab`` fp32 buffer) instead of sorting; the record keeps the "
            "sort, whose bytes the fitted logs 27–30 (run here as this record) print.",
    state_block_check="cap", spec_methods=("ngram", "suffix"), spec_capture="ceiling")
V0_20_0 = replace(
    V0_19, key="0.20.0", since="0.20.0", name="vLLM v0.20.0",
    changes="``gpu_memory_utilization`` 0.92 (``config/cache.py``) and the CUDA-graph estimate "
            "subtracted (``envs.py`` ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 from "
            "v0.20.0); the start-up log's \"GPU KV cache size\" is still ``num_blocks // n_groups × "
            "min_block_size`` (v0.20.0 ``v1/core/kv_cache_utils.py`` ``_report_kv_cache_config``). "
            "Hybrid Mamba models: ``config/compilation.py:1436`` ``resolve_cudagraph_mode_and_sizes`` "
            "raises \"max_num_seqs (N) exceeds available Mamba cache blocks (M)\" instead of capping "
            "the capture sizes (PR #38270; the same check through v0.33 ``:1526``). "
            "``--kv-cache-dtype auto`` takes a 4-bit float ModelOpt ``kv_cache_scheme`` / "
            "``kv_cache_quant_algo`` NVFP4 as ``nvfp4`` (``utils/torch_utils.py`` "
            "``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``; \"auto\", the model dtype, in v0.14–v0.19.1). "
            "NemotronH's SSM state defaults to float32 (``NemotronHForCausalLMConfig."
            "DEFAULT_MAMBA_SSM_CACHE_DTYPE``; float16 up to v0.19.1).",
    kv_quant_auto=("fp8", "nvfp4"), nemotron_h_ssm_default="fp32", default_gpu_util=0.92,
    graphs_counted=True, state_block_check="raise", mamba_spec_align=True,
    mxfp4_source="vLLM v0.20.0/v0.20.2 fused_moe/oracle/mxfp4.py")
V0_20 = replace(
    V0_20_0, key="0.20", since="0.20.1", name="vLLM v0.20.1–v0.20.2",
    changes="\"GPU KV cache size\" = ``int(max_concurrency × max_model_len)`` (from v0.20.1, "
            "``_report_kv_cache_config``). FlashInfer top-k/top-p is still opt-in "
            "(``VLLM_USE_FLASHINFER_SAMPLER`` unset → None → ``TopKTopPSampler.__init__`` takes "
            "``forward_native``), so the sampler warm-up sorts (``apply_top_k_top_p``: a Triton kernel "
            "from 8 rows, as v0.19.1 — not modelled, the fitted sort stands for it). "
            "``_set_cudagraph_sizes`` also captures ``max_num_batched_tokens`` when it fits under the "
            "ceiling (from v0.20.1; read through 0.28.0: ``spec_capture`` ``ceiling_mnbt``).",
    logged_tokens="concurrency", spec_capture="ceiling_mnbt")
V0_24 = replace(
    V0_20, key="0.24", since="0.21.0", name="vLLM v0.21–v0.24",
    changes="the FlashInfer top-k/top-p sampler is on by default from v0.21.0 (``envs.py`` "
            "``VLLM_USE_FLASHINFER_SAMPLER`` defaults to True; v0.24 ``TopKTopPSampler.__init__`` → "
            "``flashinfer_sampler_supported``). The OAI Triton MXFP4 backend (SM 9.0) keeps the "
            "checkpoint's scales beside its swizzled copy (v0.24.0 ``fused_moe/oracle/mxfp4.py`` "
            "``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`` deletes only "
            "``w13_weight``/``w2_weight``). Not modelled: an attention page that does not divide the "
            "largest is padded by v0.24 (``kv_cache_utils.py`` ``unify_kv_cache_spec_page_size``, "
            "backends that ``indexes_kv_by_block_stride``) but refused by v0.21.0 "
            "(``NotImplementedError``).",
    sampler_path="flashinfer", mxfp4_source="vLLM v0.24.0 fused_moe/oracle/mxfp4.py")
V0_25 = replace(
    V0_24, key="0.25", since="0.25.0", name="vLLM v0.25",
    changes="Triton frees the checkpoint's MXFP4 scales after swizzling (v0.25.1 "
            "``fused_moe/oracle/mxfp4.py`` ``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``: "
            "``del layer.w13_weight_scale``). In-flight tokens are still ``max_num_batched_tokens`` "
            "alone whatever the scheduling (v0.25.1 ``v1/kv_cache_interface.py`` "
            "``SlidingWindowSpec.max_admission_blocks_per_request``): async scheduling does not "
            "reach the pool.",
    mxfp4_keeps_scales=False, mxfp4_source="vLLM v0.25.1 fused_moe/oracle/mxfp4.py")
V0_26 = replace(
    V0_25, key="0.26", since="0.26.0", name="vLLM v0.26",
    changes="in-flight tokens ``max_in_flight_tokens = max_concurrent_batches × MNBT`` "
            "(``vllm/config/vllm.py``; pp + 1 with async scheduling, else pp). FlashInfer TRT-LLM "
            "still pads the MXFP4 intermediate to 256 (0.26.0 ``fused_moe/oracle/mxfp4.py:635`` "
            "``mxfp4_round_up_hidden_size_and_intermediate_size``). Prefix caching on by default for "
            "Mamba hybrids (``config/model.py`` ``is_prefix_caching_supported``: \"Generative hybrid "
            "models support prefix caching\"; off up to v0.25.0).",
    in_flight="async", mxfp4_source="vLLM v0.26.0 fused_moe/oracle/mxfp4.py", hybrid_prefix_caching=True)

V0_27 = replace(
    V0_26, key="0.27", since="0.27.0", name="vLLM v0.27",
    changes="FlashInfer TRT-LLM pads the MXFP4 intermediate to 128 (``fused_moe/oracle/mxfp4.py`` "
            "``mxfp4_round_up_hidden_size_and_intermediate_size``, 0.27.0/0.27.1 ``:636``). Still no "
            "≥ 160 GiB tier in ``engine/arg_utils.py`` ``get_batch_defaults`` (0.27.1 ``:2515``; its "
            "``max_num_seqs`` — 1,024 on ≥ 70 GiB non-A100 devices, else 256 — equals the v0.28–v0.32 "
            "rule on every catalogue GPU) and ``config/vllm.py`` ``_set_cudagraph_sizes`` captures up "
            "to ``min(2 × max_num_seqs, 512)`` on every GPU (0.27.1 ``:1778``).",
    mxfp4_trtllm_inter=128, mxfp4_source="vLLM v0.33 fused_moe/oracle/mxfp4.py")
V0_28 = replace(
    V0_27, key="0.28", since="0.28.0", name="vLLM v0.28",
    changes="``get_batch_defaults`` has a ≥ 160 GiB tier (16,384 batched tokens) and "
            "``_set_cudagraph_sizes`` captures up to 1,024 on data-centre Blackwell (from 0.28.0 "
            "``config/vllm.py:1878``). ``config/model.py`` ``_get_and_verify_max_len`` still scales a "
            "YaRN set: ``rope_type not in (\"su\", \"longrope\", \"llama3\")`` → "
            "``original_max_position_embeddings × factor`` (0.29.0 ``:2384``). Prefix caching on a "
            "Mamba hybrid: Mamba cache mode \"align\" for every model (``models/config.py`` "
            "``MambaModelConfig``, 0.28.0 ``:604``; \"all\" only when asked for, gone from "
            "``config/cache.py`` ``MambaCacheMode`` in 0.32.0).",
    huge_batch_tier=True, blackwell_capture_cap=True, mamba_prefix="align")
V0_29 = replace(
    V0_28, key="0.29", since="0.29.0", name="vLLM v0.29",
    changes="``config/vllm.py`` ``_set_cudagraph_sizes`` adds the uniform decode sizes ``n × (1 + "
            "num_speculative_tokens)`` under the ceiling (``uniform_decode_query_len``, from 0.29.0; "
            "``spec_capture`` ``uniform_decode``); ``ngram`` and ``suffix`` disable async scheduling "
            "(``VllmConfig.__post_init__``, 0.29.0 ``:1281``). Nothing else kvplan sizes differs "
            "from v0.28 (the record v0.28–v0.29 until speculative decoding was read).",
    spec_capture="uniform_decode")
V0_30 = replace(
    V0_29, key="0.30", since="0.30.0", name="vLLM v0.30",
    changes="the YaRN family joins the unscaled RoPE types of ``_get_and_verify_max_len`` (0.30.0 "
            "``config/model.py:2393``: its ``max_position_embeddings`` is already scaled); "
            "``_set_cudagraph_sizes`` as 0.29.0.",
    unscaled_rope_types=("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"))
V0_32 = replace(
    V0_30, key="0.32", since="0.31.0", name="vLLM v0.31–v0.32",
    changes="``_set_cudagraph_sizes`` also captures ``max_num_seqs`` without draft tokens when it "
            "fits (from 0.31.0, read in 0.32.0: ``spec_capture`` ``uniform_decode_seqs``). "
            "``get_batch_defaults`` has no GB10 exclusion yet (0.32.0 ``engine/arg_utils.py:2894``: a "
            "≥ 70 GiB device that is not an A100 takes the large tier); a DGX Spark's GB10 still lands "
            "on the small tier, as its NVML total raises (``nvml_batch_total``, 0.32.0 "
            "``platforms/cuda.py``). "
            "Before speculative decoding was read this record was v0.30–v0.32.",
    spec_capture="uniform_decode_seqs")
V0_33 = replace(
    V0_32, key="0.33", since="0.33.0", name="vLLM v0.33",
    changes="``engine/arg_utils.py`` ``get_batch_defaults``: a GB10 (DGX Spark, "
            "``is_device_capability((12, 1))``) stays on the small tier whatever its memory. LoRA "
            "slots read from 0.33.0 ``vllm/lora`` (``lora_ranks``: ``config/lora.py`` MaxLoRARanks). "
            "``--speculative-config`` read from 0.33.0 ``config/speculative.py`` and "
            "``v1/spec_decode`` (``spec_methods``). The Qwen3-VL tower's profile peak "
            "(``qwen3_vl_tower``, read in 0.33.0).",
    gb10_small_tier=True, lora_ranks=(1, 8, 16, 32, 64, 128, 256, 320, 512),
    spec_methods=("draft_model", "eagle", "eagle3", "mtp", "ngram", "suffix"),
    qwen3_vl_tower="0.33")

#: Every modelled vLLM release, oldest first; the last is "latest" (``vllm`` without ``@``).
VLLM_RELEASES: tuple[VllmRelease, ...] = (V0_6, V0_8, V0_9, V0_10, V0_11, V0_11_2, V0_13, V0_14, V0_17,
                                          V0_19, V0_20_0, V0_20, V0_24, V0_25, V0_26, V0_27, V0_28, V0_29,
                                          V0_30, V0_32, V0_33)
