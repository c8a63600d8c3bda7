"""TensorRT-LLM (PyTorch backend, V1 ``KVCacheManager``): 32-token blocks, full length unless
``max_attention_window`` is set per layer.

Sources (code read at ``resource_manager.py`` 001541ba…, ``_util.py`` 00043967…; the arithmetic is
transcribed in ``tools/trtllm_truth/``): ``tensorrt_llm/_torch/pyexecutor/_util.py``
(``KvCacheCreator._cal_max_memory``: ``free_gpu_memory_fraction`` of what is left after profiling;
``configure_kv_cache_capacity``: ``max_tokens``), ``tensorrt_llm/_torch/pyexecutor/resource_manager.py``
(``KVCacheManager.get_cache_size_per_token``: the creator's ``head_dim · nkv // tp``;
``__init__`` / ``get_cache_bytes_per_token``: the manager's ``ceil(nkv / tp)`` whole heads;
``calculate_max_num_blocks``: ``min(creator tokens, manager tokens) // tokens_per_block``;
``calculate_max_num_blocks_for_vswa``: equal memory per window size), ``tensorrt_llm/llmapi/llm_args.py``
(``KvCacheConfig``: ``tokens_per_block`` 32, ``free_gpu_memory_fraction`` 0.9),
``tensorrt_llm/_torch/models/_arch_index.py`` (the architectures the backend can build). The MLA
latent is replicated on every TP rank (``kv_factor = 1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kvplan.arch import MLA, Attention, Kind, LayerSpec, ModelArch, NoCache, Recurrent
from kvplan.dtypes import KVDType
from kvplan.engines.base import (
    ContextLimit,
    Engine,
    EngineView,
    KVPool,
    Release,
    ViewShape,
    resolve_dtype,
    weights_oom,
)
from kvplan.engines.kinds import CacheRule, PagedRule, StateRule, TokenLayout, cdiv, layer_window
from kvplan.engines.reserve import Reserve, ReserveTerm
from kvplan.engines.settings import EngineSettings
from kvplan.engines.trtllm.kv_dtype import resolve_auto_kv_dtype
from kvplan.engines.trtllm.log import TrtllmLog
from kvplan.engines.trtllm.multimodal import TRTLLM_MM_SOURCE, trtllm_media_refusal, trtllm_tower_note
from kvplan.engines.trtllm.spec_decode import (
    TrtSpec,
    resolve_trtllm_speculative,
    trtllm_spec_summary,
    trtllm_spec_weights_term,
)
from kvplan.engines.trtllm.weights import trtllm_loading_rules

if TYPE_CHECKING:
    from kvplan.presets import GPU
    from kvplan.weights import ExpertRepack, LoadingRules

TRTLLM_TOKENS_PER_BLOCK = 32  # tensorrt_llm/llmapi/llm_args.py KvCacheConfig.tokens_per_block
TRTLLM_DEFAULT_FREE_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction
TRTLLM_MAX_NUM_TOKENS = 8192  # tensorrt_llm/llmapi/llm_args.py BaseLlmArgs.max_num_tokens
GIB = 1 << 30
#: What the process holds at the profile besides the weights, the profiling forward's activation and
#: the estimation pool (``_util.py`` ``configure_kv_cache_capacity``: ``peak_memory = torch_peak +
#: extra_cost``, ``extra_cost = total_used − torch_used``, the estimation pool added back): torch's
#: own buffers at load (CUDA-graph pools, sampler and decoder state) and everything outside torch
#: (CUDA context, cuBLAS workspaces, the kernels TensorRT-LLM loads, its C++ runtime buffers).
#: **Fitted** on one log, tests/fixtures/trtllm_logs/05 (H200, TP 1, 1.2.0rc4, max_batch_size 32):
#: "after loading (inside torch) 15.06 GiB" less its 14.96 GiB of weights, plus "outside torch (e.g.,
#: NCCL and CUDA graphs) 2.55 GiB" less the estimation pool's "tmp kv_mem 0.13 GiB" = 2.52 GiB. No
#: other public log splits it on a discrete GPU (04 is a DGX Spark, whose unified memory puts the
#: whole system outside torch); TP > 1 adds NCCL and all-reduce workspaces no public log here
#: measures (not modelled). Used for every release.
TRTLLM_NON_TORCH_BYTES = int(2.52 * GIB)
#: ``_arch_index.py`` ``MODEL_ARCH_TO_MODULE`` keys: what ``AutoModelForCausalLM.from_config`` builds
#: (``modeling_auto.py`` raises "Unknown architecture" for anything else).
TRTLLM_PYTORCH_ARCHITECTURES = frozenset({
    "AfmoeForCausalLM", "BartForConditionalGeneration", "BertForSequenceClassification",
    "CLIPVisionModel", "Cohere2ForCausalLM", "Cosmos3ForConditionalGeneration",
    "DeciLMForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM", "EAGLE3LlamaForCausalLM", "Eagle3DeepSeekV3ForCausalLM",
    "Exaone4ForCausalLM", "Exaone4_5_ForConditionalGeneration", "ExaoneMoEForCausalLM",
    "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma4AssistantForCausalLM",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration", "Glm4MoeForCausalLM", "GlmMoeDsaForCausalLM",
    "GptOssForCausalLM", "HCXVisionForCausalLM", "HCXVisionModel", "HunYuanDenseV1ForCausalLM",
    "HunYuanMoEV1ForCausalLM", "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "LagunaForCausalLM",
    "Llama4ForConditionalGeneration", "LlamaForCausalLM", "LlavaLlamaModel",
    "LlavaNextForConditionalGeneration", "MBartForConditionalGeneration",
    "MTPDraftModelForCausalLM", "MiniCPMV4_6ForConditionalGeneration", "MiniMaxM2ForCausalLM",
    "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
    "Mistral3ForConditionalGeneration", "MistralForCausalLM", "MistralLarge3EagleForCausalLM",
    "MistralLarge3ForCausalLM", "MixtralForCausalLM", "MllamaForConditionalGeneration",
    "NemotronForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2", "Phi3ForCausalLM",
    "Phi4MMForCausalLM", "PixtralForConditionalGeneration", "PixtralVisionModel",
    "Qwen2ForCausalLM", "Qwen2ForProcessRewardModel", "Qwen2ForRewardModel",
    "Qwen2MoeForCausalLM", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3ForTextEmbedding",
    "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "QwenImageBenchForConditionalGeneration",
    "SeedOssForCausalLM", "SiglipVisionModel", "Starcoder2ForCausalLM", "Step3p5ForCausalLM",
    "Step3p7ForConditionalGeneration", "T5ForConditionalGeneration",
    "WhisperForConditionalGeneration",
})


@dataclass(frozen=True)
class TrtBlockRule(PagedRule):
    """TensorRT-LLM ``KVCacheManager`` blocks of ``tokens_per_block``: full length on every layer in
    the view (``max_attention_window`` is applied by the pool, ``TrtPool``)."""

    def describe(self) -> str:
        return "grows with every token"


@dataclass(frozen=True, kw_only=True)
class TrtLlmRelease(Release):
    """The traits that differ between TensorRT-LLM releases."""

    #: ``resource_manager.py`` ``KVCacheManager.calculate_max_num_blocks``: the primary pool's block
    #: count ``math.ceil(max_tokens / tokens_per_block)`` (True) or ``int(max_tokens //
    #: tokens_per_block)`` (False).
    blocks_round_up: bool
    #: ``_torch/model_config.py`` ``load_hf_quant_config`` reads a flat ModelOpt
    #: ``quantization_config`` (config.json, ModelOpt ≥ 0.31) with its ``kv_cache_scheme`` (main,
    #: ``quantization/modelopt_config.py`` ``read_modelopt_quant_config``); up to 1.1 only
    #: ``hf_quant_config.json`` declares the KV format (``kvplan.engines.trtllm.kv_dtype``).
    kv_quant_flat: bool = False
    #: ``speculative_config`` sized from the code read (``kvplan.engines.trtllm.spec_decode``: the
    #: main-branch ``llm_args.py``, ``resource_manager.py``, ``speculative/utils.py``); False: refused.
    spec_decode: bool = False
    #: MXFP4 MoE experts in the default MoE backend, CUTLASS (``llm_args.py`` ``MoeConfig.backend``
    #: default ``'CUTLASS'``): ``fused_moe/quantization.py`` ``MXFP4WeightCutlassFusedMoEMethod``
    #: (``weight_alignment = 128``) has ``MXFP4WeightFusedMoEMethod.create_weights`` allocate ``w3_w1``
    #: / ``w2``, their block scales and biases with the hidden size and the per-rank intermediate
    #: size rounded up to 128 (``_get_weight_alignment`` pads before sharding so each shard is a
    #: multiple of 128). False: experts as stored (main's ``MoeConfig.backend`` became ``AUTO``,
    #: which picks a backend per architecture and GPU: not read).
    mxfp4_cutlass_pad: bool = False
    #: Where this release's multimodal encoder profile was read (``kvplan.engines.trtllm.multimodal``:
    #: a request with images or videos is refused by name either way; "" — not read, main's code
    #: is named in the refusal and the text-only note instead).
    mm_profile_read: str = ""


#: TensorRT-LLM releases, oldest first, each the previous one with what changed.
TRTLLM_1_1 = TrtLlmRelease(
    key="1.1", since="0", name="TensorRT-LLM ≤ 1.1 (primary-pool blocks rounded up)", blocks_round_up=True,
    mxfp4_cutlass_pad=True,
    changes="up to 1.1 the primary pool rounds its block count up: ``blocks_in_primary_pool = "
            "math.ceil(max_tokens / tokens_per_block)`` (1.1.0rc3 ``_torch/pyexecutor/resource_manager.py`` "
            "``KVCacheManager.calculate_max_num_blocks``; the C++ runtime of 0.19 likewise, "
            "``tc::ceilDiv`` in ``calculateMaxNumBlocks``); KV dtype \"auto\" follows "
            "``hf_quant_config.json``'s ``kv_cache_quant_algo`` only (``_torch/model_config.py`` "
            "``load_modelopt_quant_config``; ``load_hf_quant_config`` reads no ModelOpt config.json); "
            "MXFP4 MoE experts padded to 128 in hidden and per-rank intermediate size by the default "
            "CUTLASS backend (``fused_moe/quantization.py`` ``MXFP4WeightCutlassFusedMoEMethod``; "
            "1.1.0rc3's gpt-oss-120b: 'Use 63.32 GB for model weights', tests/fixtures/trtllm_logs/04)")
TRTLLM_1_2_0 = replace(
    TRTLLM_1_1, key="1.2.0", since="1.2.0",
    name="TensorRT-LLM 1.2.0 (PyTorch backend; primary-pool blocks still rounded up)",
    kv_quant_flat=True, spec_decode=True,
    changes="1.2.0 still rounds the primary pool's block count up: a 1.2.0rc4 start-up prints "
            "max_tokens 900,796 and 'primary blocks=28150' = ceil(900,796 / 32) "
            "(tests/fixtures/trtllm_logs/05, faradawn/bench3 logs/trtllm-serve-egine.log); the flat "
            "ModelOpt config.json ``kv_cache_scheme`` and ``speculative_config`` rules are main's, "
            "read on main and assumed for 1.2.0 (no 1.2.0 log checks them)")
TRTLLM_MAIN = replace(
    TRTLLM_1_2_0, key="main", since="1.2.1",
    name="TensorRT-LLM main 2026 (PyTorch backend; blocks floored)", blocks_round_up=False,
    mxfp4_cutlass_pad=False, mm_profile_read=TRTLLM_MM_SOURCE,
    changes="main (``resource_manager.py`` 001541ba…, ``_util.py`` 00043967…): "
            "``calculate_max_num_blocks`` floors, ``int(max_tokens // tokens_per_block)``; MXFP4 MoE "
            "experts as stored (``MoeConfig.backend`` ``AUTO`` picks the backend per model and GPU: "
            "not read, so no padding is assumed) (the "
            "estimation dry run in ``KVCacheManager.__init__`` likewise). Where the floor starts is "
            "bounded by logs, not read in a release's code: 1.2.0rc4 rounds up (``TRTLLM_1_2_0``), and "
            "a 1.2.1 run floors — tests/fixtures/trtllm_logs/03's 117,216 tokens (3,663 blocks) at "
            "fraction 0.25, predicted from run 02, are 3,663 floored, 3,664 rounded up; a "
            "flat ModelOpt config.json ``kv_cache_scheme`` sets the KV dtype \"auto\" takes "
            "(``quantization/modelopt_config.py`` 2edf354d ``read_modelopt_quant_config``); "
            "``speculative_config`` sized (spec layers in the target's manager, the two-model draft's "
            "KV in the creator's cost, draft and extra KV tokens per request: ``trtllm/spec_decode.py``); "
            "the multimodal encoder profile read (``_create_dummy_encoder_inputs``, "
            "``_get_multimodal_encoder_memory_reserve``) and not sized: requests with images or videos "
            "refused by name (``trtllm/multimodal.py``)")
TRTLLM_RELEASES: tuple[TrtLlmRelease, ...] = (TRTLLM_1_1, TRTLLM_1_2_0, TRTLLM_MAIN)


class TrtLlm(Engine):
    """TensorRT-LLM PyTorch backend ``KVCacheManager`` (V1), one of ``TRTLLM_RELEASES``."""

    engine_id = "trtllm"
    label = "TensorRT-LLM (PyTorch backend, 32-token blocks)"
    short = "TensorRT-LLM"
    log_format = TrtllmLog
    releases: ClassVar[tuple[TrtLlmRelease, ...]] = TRTLLM_RELEASES
    record: TrtLlmRelease
    setting_labels: ClassVar[dict[str, tuple[str, str]]] = {
        "gpu_util": ("free_gpu_memory_fraction (fraction)", f"{TRTLLM_DEFAULT_FREE_FRACTION}"),
        "block_size": ("tokens_per_block", f"{TRTLLM_TOKENS_PER_BLOCK}"),
        "max_tokens": ("max_tokens (tokens)", "no cap"),
        "max_num_batched_tokens": ("max_num_tokens (tokens: the profiling forward)",
                                   f"{TRTLLM_MAX_NUM_TOKENS}"),
        "max_attention_window": ("max_attention_window (tokens, per layer)", "max_seq_len"),
        "mtp": ("Load MTP layers (speculative decoding)", "off"),
        "speculative_config": ("speculative_config (JSON: decoding_type, max_draft_len, "
                               "speculative_model, …)", "none"),
    }
    #: ``enable_attention_dp`` with expert parallelism (``moe_expert_parallel_size``).
    expert_parallel = True
    #: ``_torch/pyexecutor/model_engine.py`` ``PyTorchModelEngine._init_max_seq_len``: a larger
    #: ``max_seq_len`` is lowered to the inferred one (a warning), so longer requests are rejected.
    long_context_rule = ("lowers max_seq_len to the model's inferred maximum (a warning at start-up), "
                         "so longer requests are rejected")

    def context_limit(self, arch: ModelArch) -> ContextLimit | None:
        """``model_engine.py`` ``_infer_max_seq_len_from_config``: ``max_position_embeddings`` (2048
        when absent) times ``rope_scaling["factor"]`` unless its type is su/longrope/llama3/yarn,
        rounded up. A per-layer-type RoPE set has no top-level factor (no scaling)."""
        limit = arch.max_position_embeddings
        rule = f"max_position_embeddings {limit:,}" if limit else "no max_position_embeddings: 2,048"
        limit = limit or 2048
        flat = [r for r in arch.rope_scalings if not r.layer_type]
        if flat and flat[0].factor is not None and flat[0].factor != 1 \
                and flat[0].rope_type not in ("su", "longrope", "llama3", "yarn"):
            limit = math.ceil(limit * flat[0].factor)
            rule += f" × rope factor {flat[0].factor:g}"
        return ContextLimit(limit, f"{rule}; TensorRT-LLM _infer_max_seq_len_from_config")

    def unserved_reason(self, arch: ModelArch) -> str | None:
        """``AutoModelForCausalLM.from_config`` raises "Unknown architecture" for architectures
        outside ``MODEL_ARCH_TO_MODULE``; a config without ``architectures`` is not checked."""
        if arch.architecture and arch.architecture not in TRTLLM_PYTORCH_ARCHITECTURES:
            return "the PyTorch backend has no model class for it (_arch_index.py)"
        return None

    def media_refusal(self, arch: ModelArch) -> str | None:
        """Every request with images or videos: the encoder profile is not sized
        (``kvplan.engines.trtllm.multimodal.trtllm_media_refusal``)."""
        return trtllm_media_refusal(self.release, self.record.mm_profile_read)

    #: Blocks for every attention-like cache (full length), states as they are.
    specs: ClassVar[dict[Kind, type[CacheRule]]] = {
        Kind.FULL: TrtBlockRule, Kind.MLA: TrtBlockRule, Kind.DSA_INDEXER: TrtBlockRule,
        Kind.RECURRENT: StateRule}
    #: ``KVCacheManager.__init__`` / ``get_cache_bytes_per_token``: the cache holds ``ceil(nkv / tp)``
    #: whole heads per layer on each rank (K and V).
    layout: ClassVar[TokenLayout] = TokenLayout(whole_heads=True)

    def creator_token_bytes(self, layer: LayerSpec, dtype: KVDType, tp: int) -> int:
        """``get_cache_size_per_token`` (``KvCacheCreator``'s estimate): ``head_dim · nkv // tp``
        elements of K and of V, which is less than the manager's whole heads when TP does not divide
        the KV heads."""
        if isinstance(layer, Attention):
            return (dtype.vector_bytes(layer.head_dim_k * layer.n_kv_heads // tp)
                    + dtype.vector_bytes(layer.head_dim_v * layer.n_kv_heads // tp))
        return self.token_bytes(layer, dtype, tp)

    def kv_dtype(self, arch: ModelArch, name: str) -> KVDType:
        """``auto`` keeps the checkpoint's ``kv_cache_quant_algo`` (``llm_args.py``
        ``sync_quant_config_with_kv_cache_config_dtype``), which ``resource_manager.py``
        ``get_cache_size_per_token`` sizes: FP8 / NVFP4 (``kvplan.engines.trtllm.kv_dtype``), else the
        model dtype."""
        if name == "auto":
            resolved = resolve_auto_kv_dtype(arch.weights.quantization, self.record.kv_quant_flat)
            if resolved is not None:
                return resolve_dtype(resolved)
        return super().kv_dtype(arch, name)

    def view_shape(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> ViewShape:
        """``tokens_per_block`` (default 32)."""
        notes = ["TensorRT-LLM keeps full-length KV on windowed layers unless max_attention_window is "
                 "set per layer"] if any(layer_window(x) for x in counts) \
            and settings.max_attention_window is None else []
        return ViewShape(settings, block_size=settings.block_size or TRTLLM_TOKENS_PER_BLOCK, notes=notes)

    def spec_params(self, kind: Kind, layer: LayerSpec,
                    shape: ViewShape) -> tuple[Kind, dict[str, Any]]:
        """Every attention layer full length (MLA latent and DSA indexer as they are)."""
        if kind.holds_state:
            return kind, {}
        if kind is not Kind.DSA_INDEXER:
            kind = Kind.MLA if isinstance(layer, MLA) else Kind.FULL
        return kind, {"block_size": shape.block_size}

    reserve_term_names = ("activation_peak", "non_torch")

    def runtime_reserve(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                        tokens: int) -> Reserve:
        """``_util.py`` ``KvCacheCreator.configure_kv_cache_capacity`` / ``_cal_max_memory``: KV memory
        = ``(total − peak + estimation pool) × fraction`` with ``peak = torch peak + outside torch``
        after the profiling forward of ``max_num_tokens`` tokens (``_create_dummy_context_requests``:
        requests of ``min(max_num_tokens, max_seq_len − 1)`` tokens until ``max_num_tokens``; default
        8192) — the weights, that forward's activation (``activation_peak``: the layer
        intermediates of ``kvplan.engines.vllm.memory.forward_peak``; freed before the final manager
        is built, which ``TrtPool`` reads) and what the process holds besides (``non_torch``,
        ``TRTLLM_NON_TORCH_BYTES``, fitted)."""
        from kvplan.engines.vllm.memory import forward_peak

        profiled = settings.max_num_batched_tokens or TRTLLM_MAX_NUM_TOKENS
        value, how = forward_peak(arch, profiled, settings.tp, self.model_dtype(arch))
        terms = [ReserveTerm(
            "activation_peak", value, f"profiling forward of max_num_tokens {profiled:,}: {how}",
            f"{self.release}: _torch/pyexecutor/_util.py KvCacheCreator.configure_kv_cache_capacity "
            "(torch_peak_memory − model_bytes, printed as 'Memory dynamically allocated during inference "
            "(inside torch)')", basis="derived"),
            ReserveTerm(
            "non_torch", TRTLLM_NON_TORCH_BYTES,
            f"{TRTLLM_NON_TORCH_BYTES:,} B: torch's buffers at load beyond the weights + outside torch "
            "after the profile less the estimation pool, fitted on one H200 TP 1 log",
            f"{self.release}: _torch/pyexecutor/_util.py configure_kv_cache_capacity (extra_cost; "
            "'Memory used after loading model weights (inside torch)' − weights + 'Memory used outside "
            "torch' − 'tmp kv_mem'); TRTLLM_NON_TORCH_BYTES, fitted on tests/fixtures/trtllm_logs/05",
            basis="fit")]
        spec = self.speculative(arch, settings, gpu)
        if spec is not None and (term := trtllm_spec_weights_term(spec, self.release)) is not None:
            terms.append(term)
        return Reserve(tuple(terms))

    def speculative(self, arch: ModelArch, settings: EngineSettings,
                    gpu: GPU | None = None) -> TrtSpec | None:
        """``speculative_config`` as this release resolves it for ``arch``
        (``engines/trtllm/spec_decode.py``); None without it."""
        if settings.speculative_config is None:
            return None
        windows = len(set(settings.max_attention_window or (0,)))
        return _speculative_cached(arch, settings.speculative_config, settings.tp, settings.pp,
                                   windows, self.release, self.record.spec_decode,
                                   self.loading_rules(gpu))

    def spec_costs(self, spec: TrtSpec, dtype: KVDType, tp: int) -> tuple[int, int, int]:
        """Bytes per token per rank the drafter adds: (spec layers in the target's manager, the
        two-model draft's creator estimate, its manager's) — ``get_cache_bytes_per_token`` /
        ``get_cache_size_per_token`` over those layers."""
        spec_bytes = spec.spec_layers * self.token_bytes(spec.spec_layer, dtype, tp) \
            if spec.spec_layer is not None else 0
        creator = sum(self.creator_token_bytes(x, dtype, tp) for x in spec.draft_layers)
        manager = sum(self.token_bytes(x, dtype, tp) for x in spec.draft_layers)
        return spec_bytes, creator, manager

    def summarize_speculative(self, spec: TrtSpec, view: EngineView,
                              settings: EngineSettings) -> dict[str, object]:
        """``fit --json``'s ``speculative`` (``spec_decode.trtllm_spec_summary``): the spec
        layers' and the draft's bytes per token at the view's KV dtype (``spec_costs``)."""
        return trtllm_spec_summary(spec, *self.spec_costs(spec, view.dtype, settings.tp))

    def kv_budgets(self, target: int, stage_weights: list[int], reserve: int,
                   settings: EngineSettings, formulas: dict[str, str], capacity: int = 0,
                   detail: Reserve | None = None) -> list[int]:
        """``_util.py`` ``_cal_max_memory``: fraction × (total − peak after profiling)."""
        fraction = settings.gpu_util or TRTLLM_DEFAULT_FREE_FRACTION
        formulas["memory_target"] += f"; KV gets free_gpu_memory_fraction {fraction} of what is left"
        return [int(max(target - w - reserve, 0) * fraction) for w in stage_weights]

    def memory_fraction(self, capacity: int, settings: EngineSettings) -> float | None:
        """``KvCacheConfig.free_gpu_memory_fraction`` (default 0.9)."""
        return settings.gpu_util or TRTLLM_DEFAULT_FREE_FRACTION

    def beside_others(self, others: int, capacity: int, target: int, stage_weights: list[int],
                      reserve: int, settings: EngineSettings, budgets: list[int],
                      formulas: dict[str, str], detail: Reserve | None = None,
                      ) -> tuple[list[int], str | None]:
        """``_util.py`` ``KvCacheCreator``: ``total_used_bytes = total − free`` (``mem_get_info``, the
        whole device) minus torch's own bytes is ``extra_cost``, added to the peak — so what other
        processes hold comes off before the fraction: ``(total − others − weights − activation) ×
        free_gpu_memory_fraction``. No pool when nothing is left (kvplan's statement: the message
        TensorRT-LLM prints then was not read)."""
        fraction = self.memory_fraction(target, settings) or TRTLLM_DEFAULT_FREE_FRACTION
        out = [int(max(target - others - w - reserve, 0) * fraction) for w in stage_weights]
        formulas["others"] = (f"(total {target:,} − others {others:,} − weights − reserve {reserve:,}) × "
                              f"free_gpu_memory_fraction {fraction}")
        oom = weights_oom(others, capacity, stage_weights)
        if oom is None and min(out) <= 0:
            oom = ("no memory left for the KV cache after profiling: total − peak (torch + non-torch, "
                   "the other processes' memory included) ≤ 0 (_util.py _cal_max_memory)")
        return out, oom

    def window_costs(self, arch: ModelArch, dtype: KVDType, settings: EngineSettings,
                     stage: tuple[int, int], max_seq_len: int) -> dict[int, tuple[int, int]]:
        """Per attention window of the stage's layers: (creator, manager) bytes per token.

        ``max_attention_window`` entries are clamped to ``max_seq_len`` and repeated over the local
        layers (``_get_window_size_to_layers``: ``vec[local_layer_idx % len(vec)]``); without it
        every layer has the window ``max_seq_len``."""
        start, stop = stage
        windows = [min(w, max_seq_len) for w in settings.max_attention_window or (max_seq_len,)]
        local = np.arange(stop - start)
        window_of = np.asarray(windows, dtype=np.int64)[local % len(windows)]
        out: dict[int, tuple[int, int]] = {}
        position = 0
        for layer, n in arch.layer_runs():
            low, high = max(position, start), min(position + n, stop)
            if high > low and not isinstance(layer, Recurrent | NoCache):
                creator = self.creator_token_bytes(layer, dtype, settings.tp)
                manager = self.token_bytes(layer, dtype, settings.tp)
                for window, k in zip(*np.unique(window_of[low - start:high - start], return_counts=True),
                                     strict=True):
                    c, m = out.get(int(window), (0, 0))
                    out[int(window)] = (c + int(k) * creator, m + int(k) * manager)
            position += n
        return dict(sorted(out.items()))

    auto_kv_source: ClassVar[str] = ("TensorRT-LLM _torch/model_config.py quant_config.kv_cache_quant_algo, "
                                     "sized by resource_manager.py get_cache_size_per_token")

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str], reserve: Reserve | None = None) -> KVPool:
        """``TrtPool`` of the budget. The final manager (``resource_manager.py``
        ``calculate_max_num_blocks``: ``free_mem_fraction × free_mem / cache bytes per token``) reads
        the free memory when it is built, after the profile's activation was freed
        (``configure_kv_cache_capacity``: ``torch.cuda.empty_cache()`` after the profiling run): it sees
        ``fraction × activation_peak`` more than the budget (``freed``; 0 when the user gave the reserve
        as one total, whose split is unknown)."""
        notes.extend(self.auto_kv_note(arch, kv_dtype))
        notes.extend(trtllm_tower_note(arch, self.release, self.record.mm_profile_read))
        freed = 0
        if reserve is not None and reserve.total_override is None:
            activation = sum(t.bytes for t in reserve.terms if t.name == "activation_peak" and t.counted)
            freed = int(activation * (settings.gpu_util or TRTLLM_DEFAULT_FREE_FRACTION))
        stage = self.largest_stage(arch, settings.pp)
        view = self.stage_view(arch, kv_dtype, settings, notes)
        max_seq_len = settings.max_cache_len or arch.max_position_embeddings or 1 << 62
        costs = self.window_costs(arch, view.dtype, settings, stage, max_seq_len)
        spec = self.speculative(arch, settings, gpu)
        spec_bytes, extra = 0, 0
        if spec is not None:
            spec_bytes, creator, manager = self.spec_costs(spec, view.dtype, settings.tp)
            if (creator or manager) and len(costs) == 1:  # _util.py _get_kv_size_per_token
                ((window, (c, m)),) = costs.items()
                costs = {window: (c + creator, m + manager)}
            extra = spec.extra_tokens
            notes.extend(spec.notes)
        pool = TrtPool(costs, max(min(budgets), 0), view.block_size or TRTLLM_TOKENS_PER_BLOCK,
                       settings.max_tokens, round_up=self.record.blocks_round_up,
                       spec_bytes=spec_bytes, extra_tokens=extra, freed=freed)
        notes.extend(pool.notes)
        return pool

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """``max_seq_len`` (carried as ``max_cache_len``) is the request length; ``speculative_config``
        with ``decoding_type`` MTP loads the target's next-n layers."""
        update: dict[str, Any] = {}
        if settings.max_cache_len is None:
            update["max_cache_len"] = max(tokens, 1)
        if arch is not None and settings.speculative_config is not None and not settings.mtp:
            spec = self.speculative(arch, settings, gpu)
            if spec is not None and spec.decoding_type == "MTP":
                update["mtp"] = True
        return settings.model_copy(update=update) if update else settings

    def mxfp4_moe_repack(self, gpu: GPU | None) -> ExpertRepack | None:
        """``TrtLlmRelease.mxfp4_cutlass_pad``: the CUTLASS MoE backend's 128-element padding of
        MXFP4 experts (hidden and per-rank intermediate size; block scales and biases padded with
        them, no swizzled copy: ``block_scale_interleave`` writes in place) on every device the
        release runs on (NVIDIA's; a custom accelerator is taken as one); None on another vendor's
        part, and where the release's default backend was not read (main)."""
        from kvplan.weights import ExpertRepack

        if not self.record.mxfp4_cutlass_pad or (gpu is not None and not gpu.custom
                                                 and gpu.vendor != "NVIDIA"):
            return None
        return ExpertRepack("CUTLASS", hidden=128, inter=128, engine="TensorRT-LLM",
                            source="tensorrt_llm/_torch/modules/fused_moe/quantization.py "
                                   "MXFP4WeightCutlassFusedMoEMethod (weight_alignment 128), "
                                   "MXFP4WeightFusedMoEMethod.create_weights")

    def loading_rules(self, gpu: GPU | None) -> LoadingRules:
        """``kvplan.engines.trtllm.weights.trtllm_loading_rules`` (assumed equal to vLLM
        v0.33's scale rules)."""
        return trtllm_loading_rules(self, gpu)


@lru_cache(maxsize=64)
def _speculative_cached(arch: ModelArch, text: str, tp: int, pp: int, windows: int, release: str,
                        modelled: bool, rules: LoadingRules) -> TrtSpec:
    return resolve_trtllm_speculative(arch, text, tp=tp, pp=pp, windows=windows, release=release,
                                      modelled=modelled, rules=rules)


@dataclass(frozen=True)
class WindowPool:
    """One window size's primary pool: its blocks and the bytes one token costs in its layers."""

    window: int
    blocks: int
    token_bytes: int


class TrtPool(KVPool):
    """TensorRT-LLM's primary pools.

    One window (``calculate_max_num_blocks``): ``max_tokens = min(budget // creator cost,
    (budget + freed) // manager cost)`` where the manager holds whole heads the creator prices as a
    fraction (KV heads not divisible by TP) — the manager's ``fraction × free memory`` is the budget
    plus ``freed``, the fraction of the profile's activation released before it is built — capped by
    the ``max_tokens`` setting; speculative layers in the manager share main's ``max_tokens``, ``budget
    // (target + draft)`` (``_get_kv_size_per_token``: the one-model draft manager's cost is the
    creator's too, so the freed memory does not bind them); ``blocks = max_tokens // tokens_per_block``
    (rounded up up to 1.2.0, ``blocks_round_up``).
    Several window sizes
    (``calculate_max_num_blocks_for_vswa``): the budget split equally per window size, each pool
    ``int(budget / n / its layers' cost) // tokens_per_block`` blocks (``max_tokens`` ignored). A
    request of ``L`` tokens takes ``cdiv(min(L, W), tokens_per_block)`` blocks in window W's pool.
    """

    paged = True
    num_blocks: int
    block_size: int
    bytes_per_block: int

    def __init__(self, costs: dict[int, tuple[int, int]], budget: int, block_size: int,
                 max_tokens: int | None, round_up: bool = False, spec_bytes: int = 0,
                 extra_tokens: int = 0, freed: int = 0) -> None:
        self.block_size = block_size
        #: ``fraction × activation peak``: what the final manager sees beyond the budget.
        self.freed = freed
        #: One window: the creator's and the manager's bytes per token over the target's layers.
        self.creator = self.heads = 0
        #: Tokens a request holds past its own (``num_extra_kv_tokens`` + draft tokens).
        self.extra_tokens = extra_tokens
        self.spec_bytes = spec_bytes
        self.round_up = round_up
        self.notes: list[str] = []
        self.pools: tuple[WindowPool, ...]
        if len(costs) <= 1:
            ((window, (creator, manager)),) = costs.items() if costs else ((0, (0, 0)),)
            tokens = budget // creator if creator else 0
            if max_tokens is not None and creator:
                tokens = min(budget, creator * max_tokens) // creator
            if manager > creator:
                self.notes.append("KV heads not divisible by TP: the cache holds ceil(nkv / tp) whole "
                                  "heads per layer, so fewer tokens fit than KvCacheCreator estimated")
            heads = manager  # the manager's whole heads (ceil(nkv / tp)) over the target's layers
            manager += spec_bytes  # the spec layers' KV: the draft's share of the shared max_tokens
            if spec_bytes:  # main's _get_kv_size_per_token: max_tokens = budget // (target + draft)
                tokens = min(tokens, budget // manager)
            if heads > creator:  # calculate_max_num_blocks: fraction × free memory at creation
                tokens = min(tokens, (budget + freed) // manager)
            self.creator = creator
            self.heads = heads
            blocks = -(-tokens // block_size) if round_up else tokens // block_size
            self.pools = (WindowPool(window, blocks, manager),)
            self.max_tokens = tokens
        else:
            share = 1 / len(costs)
            self.pools = tuple(WindowPool(w, int(budget * share / manager) // block_size, manager)
                               for w, (_, manager) in costs.items())
            self.max_tokens = sum(p.blocks for p in self.pools) * block_size
            self.notes.append(f"max_attention_window: {len(costs)} window sizes, each pool gets 1/"
                              f"{len(costs)} of the KV memory (calculate_max_num_blocks_for_vswa)"
                              + ("; max_tokens is ignored" if max_tokens is not None else ""))
        largest = self.pools[-1]
        self.num_blocks = largest.blocks
        self.per_token = sum(p.token_bytes for p in self.pools)
        self.bytes_per_block = self.per_token * block_size
        self.capacity = largest.blocks

    def _pool_blocks(self, L: np.ndarray) -> list[np.ndarray]:
        L = np.asarray(L, dtype=np.int64)
        return [cdiv((np.minimum(L, p.window) if p.window else L) + self.extra_tokens, self.block_size)
                for p in self.pools]

    def blocks(self, L: np.ndarray) -> np.ndarray:
        """Blocks a request takes in the largest window's pool."""
        return self._pool_blocks(L)[-1]

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        return np.sum([b * p.token_bytes * self.block_size
                       for b, p in zip(self._pool_blocks(L), self.pools, strict=True)], axis=0)

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        return np.min([p.blocks // np.maximum(b, 1)
                       for b, p in zip(self._pool_blocks(L), self.pools, strict=True)], axis=0)

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        return np.min([p.blocks / np.maximum(b, 1)
                       for b, p in zip(self._pool_blocks(L), self.pools, strict=True)], axis=0)

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``((max(min budget, 0) // bytes per token) // tokens_per_block) // blocks(L)``, the block
        count rounded up for one window where the release rounds up (``round_up``, ≤ 1.2.0) as the
        constructor does; one window whose manager holds more heads than the creator prices takes
        ``min(budget // creator, (budget + freed) // manager)`` tokens, as the constructor."""
        budget = np.maximum(np.asarray(budgets, dtype=np.int64).min(axis=1), 0)
        if not self.per_token:
            return np.zeros(budget.shape, dtype=np.int64)
        tokens = budget // self.per_token
        if len(self.pools) == 1 and self.creator and self.heads > self.creator:
            tokens = np.minimum(budget // self.creator, (budget + self.freed) // self.per_token)
            if self.spec_bytes:
                tokens = np.minimum(tokens, budget // self.per_token)
        if self.round_up and len(self.pools) == 1:
            num_blocks = -(-tokens // self.block_size)
        else:
            num_blocks = tokens // self.block_size
        return num_blocks // int(self.blocks(np.asarray([L]))[0])

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        return np.full(np.shape(L), self.num_blocks * self.block_size)

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        """``capacity + max over pools of (users × blocks(L) − pool blocks)``: at most ``capacity``
        exactly when every window's pool holds ``users`` requests (one pool: users × blocks)."""
        return self.capacity + np.max([b * users - p.blocks for b, p in zip(
            self._pool_blocks(L), self.pools, strict=True)], axis=0)

    def formulas(self, L: int) -> dict[str, str]:
        parts = ", ".join(f"window {p.window:,}: {p.blocks:,} blocks" for p in self.pools)
        out = {"num_blocks": f"({self.max_tokens:,} tokens) // {self.block_size} per block → {parts}"}
        if self.spec_bytes or self.extra_tokens:
            out["spec_kv"] = (f"spec layers {self.spec_bytes:,} B per token in the target's manager "
                              f"(resource_manager.py get_pp_layers); a request holds {self.extra_tokens} "
                              "tokens more (num_extra_kv_tokens + draft tokens, prepare_resources)")
        return out

