"""Engine settings, each declared once: its bounds, link key, CLI flag and sidebar label.

``EngineSettings`` is the one pydantic model of every engine knob; each user-facing field carries a
``Setting`` (in ``json_schema_extra``) that the link codec (``kvplan.scenario``), the CLI
(``kvplan.cli``), the sidebar (``kvplan.ui.sidebar``) and the report read. An engine class lists the
settings it honours and may relabel them (``Engine.setting_labels``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kvplan.errors import short

MAX_TOKENS = 100_000_000
#: Longest JSON text a ``json`` setting takes (``--speculative-config``).
MAX_JSON_CHARS = 600
#: Longest name or path a ``text`` setting takes (``--speculative-draft-model-path``).
MAX_TEXT_CHARS = 300
#: The modalities vLLM's ``--limit-mm-per-prompt`` counts that kvplan sizes (``kvplan.multimodal``).
MODALITIES = ("image", "video")


@dataclass(frozen=True)
class Setting:
    """One user-facing engine knob: where it lives in the link, the CLI and the sidebar."""

    name: str
    key: str
    flag: str
    kind: Literal["int", "float", "bool", "tristate", "int_list", "json", "text"]
    label: str
    help: str
    low: float | None = None
    high: float | None = None
    #: ``gt`` rather than ``ge`` for the lower bound (fractions).
    low_open: bool = False
    #: Other CLI spellings of the flag (an engine's own name for the same knob).
    aliases: tuple[str, ...] = ()
    #: Most entries of an ``int_list`` value.
    max_items: int = 0
    #: ``bool``/``tristate``: the flag names the engine's negation (vLLM
    #: ``--disable-hybrid-kv-cache-manager``), so giving it sets the value False and its ``--no-``
    #: form sets it True.
    inverted: bool = False
    #: ``tristate``: kvplan's earlier spelling, ``FLAG auto|on|off``, still read (its help says it is
    #: deprecated and names ``flag``).
    deprecated_flag: str = ""
    #: ``int``: also read vLLM's per-modality JSON (``--limit-mm-per-prompt '{"image": N, "video":
    #: N}'``) when it gives every modality of ``MODALITIES`` the same count.
    per_modality: bool = False
    #: ``json``: the value is SGLang's per-modality counts (``--limit-mm-data-per-request '{"image":
    #: 2, "video": 1}'``): a JSON object whose keys are among these modalities and whose values are
    #: whole counts from ``low`` to ``high``; kept as canonical JSON text.
    modalities: tuple[str, ...] = ()

    def parse(self, text: str, check_bounds: bool = True) -> Any:
        """The value of ``text`` as the link and the CLI write it; ``ValueError`` says why not
        (``check_bounds=False``: syntax only, the caller validates the range)."""
        text = text.strip()
        if self.kind == "json":
            return self._modality_counts(text, check_bounds) if self.modalities else self._json(text)
        if self.kind == "text":
            return self._text(text)
        if self.per_modality and text.startswith("{"):
            return self._per_modality(text, check_bounds)
        if len(text) > 40 + 12 * self.max_items:
            raise ValueError("too long")
        if self.kind in {"bool", "tristate"}:
            if text not in {"0", "1", "true", "false"}:
                raise ValueError("expected 0 or 1")
            return text in {"1", "true"}
        if self.kind == "int_list":
            items = [item.strip() for item in text.split(",") if item.strip()]
            if not items or len(items) > self.max_items:
                raise ValueError(f"expected 1 to {self.max_items} comma-separated whole numbers")
            return tuple(self._number(item, int) for item in items)
        return self._number(text, int if self.kind == "int" else float, check_bounds)

    def _json(self, text: str) -> str:
        """A JSON object of at most ``MAX_JSON_CHARS`` characters, as canonical text (sorted keys,
        no spaces), so equal settings have one spelling in the link and one cache key."""
        if len(text) > MAX_JSON_CHARS:
            raise ValueError(f"longer than {MAX_JSON_CHARS} characters")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"not valid JSON ({str(exc)[:80]})") from None
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object {{...}}, got {type(value).__name__}")
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    def _modality_counts(self, text: str, check_bounds: bool) -> str:
        """SGLang's ``--limit-mm-data-per-request`` JSON (0.5.7 ``server_args.py``, 0.5.23
        ``arg_groups/fields/mm.py``: ``type=json.loads``; ``serving_hook.py`` refuses a modality
        outside image, video, audio; ``TokenizerManager._validate_mm_limits`` compares each count
        with ``count > limit``, a modality left out unlimited, ``{}`` no limit at all). SGLang does
        not check the counts: kvplan refuses a count that is not a whole number from ``low`` to
        ``high`` (a negative one would refuse every item). A bare number is refused: SGLang reads
        it as a JSON number, which ``_validate_mm_limits`` cannot iterate."""
        canonical = self._json(text) if text.startswith("{") else ""
        if not canonical:
            raise ValueError('expected SGLang\'s JSON object of counts, e.g. {"image": 2, '
                             '"video": 1}')
        value = json.loads(canonical)
        for modality, count in value.items():
            if modality not in self.modalities:
                raise ValueError(f"unknown modality {short(modality, 30)}: SGLang allows "
                                 + ", ".join(self.modalities))
            if isinstance(count, bool) or not isinstance(count, int):
                raise ValueError(f"{modality} count {short(count, 30)} is not a whole number")
            if count < 0:
                raise ValueError(f"{modality} count {count} is negative (0 refuses every {modality})")
            if check_bounds and self.high is not None and count > self.high:
                raise ValueError(f"{modality} count {count:,} is above {self.high:,.0f}")
        return canonical

    def _per_modality(self, text: str, check_bounds: bool) -> int:
        """vLLM's ``{"image": N, "video": N}`` (``config/multimodal.py``: a modality left out keeps
        the default 999), as the one count kvplan takes for every modality."""
        value = json.loads(self._json(text))
        if set(value) != set(MODALITIES) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                    for v in value.values()):
            raise ValueError(f"kvplan takes the JSON form with a whole count for each of "
                             f"{' and '.join(MODALITIES)} (a modality left out is 999 in vLLM)")
        counts = set(value.values())
        if len(counts) != 1:
            raise ValueError("kvplan takes one count for every modality, not "
                             + ", ".join(f"{k} {v}" for k, v in sorted(value.items())))
        return self._number(str(counts.pop()), int, check_bounds)

    def _text(self, text: str) -> str:
        """A name or path of at most ``MAX_TEXT_CHARS`` printable characters (``--speculative-*``):
        what it names is checked where it is used."""
        if not text:
            raise ValueError("empty")
        if len(text) > MAX_TEXT_CHARS:
            raise ValueError(f"longer than {MAX_TEXT_CHARS} characters")
        if not text.isprintable():
            raise ValueError("holds control characters")
        return text

    def _number(self, text: str, kind: type, check_bounds: bool = True) -> Any:
        if kind is int and not (text.lstrip("-").isdigit() and len(text) <= 19):
            raise ValueError("expected a whole number of at most 18 digits")
        value = kind(text)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("expected a finite number")
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        if check_bounds and (not low_ok or (self.high is not None and value > self.high)):
            raise ValueError(f"must be {'more than' if self.low_open else 'at least'} {self.low:g} "
                             f"and at most {self.high:g}")
        return value

    def format(self, value: Any) -> str:
        """The link/CLI text of ``value`` (``parse`` reads it back)."""
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return repr(value) if isinstance(value, float) else str(value)


def _setting(default: Any, setting: Setting) -> Any:
    low = None if setting.kind in {"int_list", "json"} else setting.low
    high = None if setting.kind in {"int_list", "json"} else setting.high
    return Field(default=default, json_schema_extra={"setting": dict(setting.__dict__)},
                 gt=low if setting.low_open else None, ge=None if setting.low_open else low,
                 le=high)


def _from_schema_extra(fields: dict[str, Any]) -> Setting:
    """The ``Setting`` that ``_setting`` stored as a plain dict in ``json_schema_extra``."""
    return Setting(**{**fields, "aliases": tuple(fields.get("aliases", ()))})


GPU_UTIL = Setting("gpu_util", "gu", "--gpu-util", "float", "Memory fraction",
                   "Share of memory the engine may use; empty = the engine default (vLLM "
                   "--gpu-memory-utilization, SGLang --mem-fraction-static, TensorRT-LLM "
                   "trtllm-serve --kv_cache_free_gpu_memory_fraction).",
                   low=0.001, high=1, aliases=("--gpu-memory-utilization", "--mem-fraction-static",
                                               "--kv_cache_free_gpu_memory_fraction"))
BLOCK_SIZE = Setting("block_size", "bs", "--block-size", "int", "Block size (tokens)",
                     "Tokens per KV block or page; empty = the engine/backend default.",
                     low=1, high=1_000_000, aliases=("--page-size",))
MAX_NUM_BATCHED_TOKENS = Setting(
    "max_num_batched_tokens", "mb", "--max-num-batched-tokens", "int",
    "max_num_batched_tokens (tokens)",
    "Tokens scheduled per step; sliding-window reservations grow with it (TensorRT-LLM --max_num_tokens: "
    "its profiling forward runs this many tokens).", low=1, high=MAX_TOKENS, aliases=("--max_num_tokens",))
MAX_NUM_SEQS = Setting(
    "max_num_seqs", "ns", "--max-num-seqs", "int", "max_num_seqs (requests)",
    "Requests scheduled per step (SGLang --max-running-requests); every answer is capped by it. "
    "vLLM's profile run warms the sampler up on this many rows of vocabulary logits and captures "
    "CUDA graphs up to 2 × it; a hybrid model needs one state block per sequence.", low=1,
    high=1_000_000, aliases=("--max-running-requests",))
ENFORCE_EAGER = Setting(
    "enforce_eager", "ee", "--enforce-eager", "bool", "enforce_eager",
    "No CUDA graphs: vLLM then reserves no CUDA-graph memory.")
FLASHINFER_SAMPLER = Setting(
    "flashinfer_sampler", "fs", "--flashinfer-sampler", "tristate", "FlashInfer sampler",
    "vLLM VLLM_USE_FLASHINFER_SAMPLER: the sampler warm-up holds ~10 B per row × vocab with "
    "FlashInfer, ~39 B with the PyTorch sort; auto = the release's default (v0.10–v0.11.0: FlashInfer "
    "when installed, as in the docker image — their pip wheels lack it unless installed with the "
    "[flashinfer] extra; v0.11.1–v0.20: off unless opted in; v0.21 on: on).")
ASYNC_SCHEDULING = Setting(
    "async_scheduling", "as", "--async-scheduling", "bool", "Async scheduling",
    "vLLM ≥ 0.26: in-flight tokens = (pp + 1) × max_num_batched_tokens; off = releases before.")
HYBRID_MANAGER = Setting(
    "hybrid_manager", "hm", "--disable-hybrid-kv-cache-manager", "tristate",
    "Hybrid KV-cache manager",
    "vLLM --disable-hybrid-kv-cache-manager (off) / --no-disable-hybrid-kv-cache-manager (on); "
    "unset = the engine default; off sizes windowed layers as full attention.",
    inverted=True, deprecated_flag="--hybrid-manager")
PREFIX_CACHING = Setting(
    "enable_prefix_caching", "pc", "--enable-prefix-caching", "tristate", "Prefix caching",
    "vLLM --enable-prefix-caching / --no-enable-prefix-caching; unset = the engine default (vLLM: "
    "on; Mamba hybrids off before v0.26). Mamba hybrids: prefix caching decides the state pages a "
    "request reserves and the attention block.", deprecated_flag="--prefix-caching")
MAX_CACHE_LEN = Setting("max_cache_len", "mc", "--max-cache-len", "int", "max_cache_len (tokens)",
                        "StaticCache pre-allocation; empty = the context length.",
                        low=1, high=1_000_000_000)
MAX_TOKENS_SETTING = Setting(
    "max_tokens", "xt", "--max-tokens", "int", "max_tokens (tokens)",
    "TensorRT-LLM KvCacheConfig.max_tokens: caps the KV memory at max_tokens × bytes per token.",
    low=1, high=10**12)
MAX_ATTENTION_WINDOW = Setting(
    "max_attention_window", "aw", "--max-attention-window", "int_list",
    "max_attention_window (tokens, per layer)",
    "TensorRT-LLM: window per layer, repeated over the layers (e.g. 1024,1024,1024,1024,1024,131072); "
    "two or more sizes split the KV memory equally between their pools.",
    low=1, high=MAX_TOKENS, max_items=256)
SWA_FULL_TOKENS_RATIO = Setting(
    "swa_full_tokens_ratio", "sr", "--swa-full-tokens-ratio", "float", "SWA/full tokens ratio",
    "SGLang hybrid-SWA pools: SWA tokens = ratio × full tokens (default 0.8).",
    low=0, high=1, low_open=True)
DISABLE_HYBRID_SWA = Setting(
    "disable_hybrid_swa_memory", "dh", "--disable-hybrid-swa-memory", "bool",
    "Disable hybrid SWA memory", "SGLang: price every layer at full length (one pool).")
MAX_TOTAL_TOKENS = Setting(
    "max_total_tokens", "mx", "--max-total-tokens", "int", "max_total_tokens (tokens)",
    "SGLang: caps the token pool (then aligned down to the page size).", low=1, high=10**12)
SWA_EVICTION_INTERVAL = Setting(
    "swa_eviction_interval", "se", "--swa-eviction-interval", "int", "SWA eviction interval (tokens)",
    "SGLang keeps up to window + this many tokens on sliding layers.", low=0, high=MAX_TOKENS)
EXPERT_PARALLEL = Setting(
    "ep", "ep", "--ep", "int", "Expert parallel size",
    "MoE experts split over this many ranks (their intermediate size over tp / ep); must divide "
    "tp. vLLM --enable-expert-parallel uses ep = tp; SGLang --ep-size.", low=1, high=4096,
    aliases=("--ep-size", "--expert-parallel-size"))
DATA_PARALLEL = Setting(
    "dp", "dp", "--data-parallel-size", "int", "Data-parallel attention ranks",
    "Attention data parallel: this many ranks of tp GPUs per replica, each with its own requests and "
    "KV pool (vLLM --data-parallel-size with --enable-expert-parallel; SGLang --enable-dp-attention "
    "--dp N with --tp N × tp); MoE experts split over all dp × tp GPUs.", low=1, high=4096,
    aliases=("--dp", "--dp-size", "-dp"))
MAX_MAMBA_CACHE_SIZE = Setting(
    "max_mamba_cache_size", "ms", "--max-mamba-cache-size", "int", "max_mamba_cache_size (slots)",
    "SGLang hybrids: Mamba state slots (instead of mamba_full_memory_ratio's share of the memory).",
    low=1, high=10**9)
MTP_LAYERS = Setting(
    "mtp", "mt", "--mtp", "bool", "Load MTP (next-n) layers",
    "Multi-token-prediction layers are loaded only when speculative decoding uses them.")

ENABLE_LORA = Setting(
    "enable_lora", "lo", "--enable-lora", "bool", "enable_lora",
    "vLLM --enable-lora: every LoRA-capable module gets max_loras GPU slots at max_lora_rank, "
    "allocated with the weights (vllm/lora/model_manager.py); SGLang --enable-lora: the LoRA memory "
    "pool (lora/mem_pool.py), allocated after the weights, before the KV pool.")
MAX_LORAS = Setting(
    "max_loras", "ml", "--max-loras", "int", "max_loras (adapters per batch)",
    "vLLM --max-loras: adapter slots on the GPU (default 1); SGLang --max-loras-per-batch: the LoRA "
    "memory pool's slots (SGLang's default 8).", low=1, high=4096, aliases=("--max-loras-per-batch",))
MAX_LORA_RANK = Setting(
    "max_lora_rank", "lr", "--max-lora-rank", "int", "max_lora_rank",
    "vLLM --max-lora-rank: every slot is allocated at this rank (v0.33: 1, 8, 16, 32, 64, 128, 256, "
    "320, 512; default 16).", low=1, high=512)
FULLY_SHARDED_LORAS = Setting(
    "fully_sharded_loras", "lf", "--fully-sharded-loras", "bool", "fully_sharded_loras",
    "vLLM --fully-sharded-loras: column-parallel LoRA A split by rank and row-parallel B by output "
    "over TP (the *WithShardedLoRA layers).")
MAX_CPU_LORAS = Setting(
    "max_cpu_loras", "lc", "--max-cpu-loras", "int", "max_cpu_loras (adapters in host memory)",
    "vLLM --max-cpu-loras: adapters cached in CPU memory (≥ max_loras; empty = max_loras).",
    low=1, high=1_000_000)
LORA_TARGET_MODULES = Setting(
    "lora_target_modules", "lt", "--lora-target-modules", "text", "lora_target_modules",
    "Which modules get LoRA buffers, comma-separated (q_proj,k_proj,v_proj → qkv_proj; gate_proj,"
    "up_proj → gate_up_proj; o_proj, down_proj, embed_tokens, lm_head): vLLM --lora-target-modules "
    "(LoRAConfig.target_modules, matched by suffix and packed modules; empty = every supported "
    "module); SGLang --lora-target-modules (get_normalized_target_modules; 'all' or empty = every "
    "module).")
SPECULATIVE_CONFIG = Setting(
    "speculative_config", "sd", "--speculative-config", "json", "speculative_config (JSON)",
    "vLLM --speculative-config, a JSON object: method (draft_model, eagle, eagle3, mtp or a "
    "deprecated *_mtp name, ngram, suffix), model (a draft or EAGLE head: a kvplan preset or a "
    "directory with its config.json), num_speculative_tokens, draft_tensor_parallel_size (1 or tp). "
    "The drafter's attention layers join the target's KV-cache groups; its weights are loaded "
    "beside the target's (v0.33). TensorRT-LLM speculative_config (the YAML/JSON of "
    "extra_llm_api_options): decoding_type (Eagle3, Eagle, MTP, Draft_Target, NGram), "
    "max_draft_len, speculative_model, eagle3_one_model, num_nextn_predict_layers, use_mtp_vanilla.")
SPECULATIVE_ALGORITHM = Setting(
    "speculative_algorithm", "qa", "--speculative-algorithm", "text", "speculative_algorithm",
    "SGLang --speculative-algorithm: EAGLE, EAGLE3, NEXTN (EAGLE with the target's next-n layers), "
    "STANDALONE (a small draft model) or NGRAM. The draft's KV joins the token pool's cell "
    "(pool_configurator.py), its weights come off the KV budget, and --max-running-requests "
    "defaults to 48 (SGLang 0.5.23).")
SPECULATIVE_DRAFT_MODEL_PATH = Setting(
    "speculative_draft_model_path", "qp", "--speculative-draft-model-path", "text",
    "speculative_draft_model_path",
    "SGLang --speculative-draft-model-path: the EAGLE head or draft model (a kvplan preset or a "
    "directory with its config.json); empty = the target's own next-n layers where SGLang defaults "
    "to them (DeepSeek-V3/V3.2, GLM-4.5 MoE, …).")
SPECULATIVE_NUM_STEPS = Setting(
    "speculative_num_steps", "qn", "--speculative-num-steps", "int", "speculative_num_steps",
    "SGLang --speculative-num-steps: draft steps (empty = SGLang's choice, 3 or 5 by architecture).",
    low=1, high=64)
SPECULATIVE_EAGLE_TOPK = Setting(
    "speculative_eagle_topk", "qk", "--speculative-eagle-topk", "int", "speculative_eagle_topk",
    "SGLang --speculative-eagle-topk: branches per draft step (set with --speculative-num-steps).",
    low=1, high=64)
SPECULATIVE_NUM_DRAFT_TOKENS = Setting(
    "speculative_num_draft_tokens", "qt", "--speculative-num-draft-tokens", "int",
    "speculative_num_draft_tokens",
    "SGLang --speculative-num-draft-tokens: tokens verified per step (steps + 1 when topk is 1).",
    low=1, high=1024)


LIMIT_MM_PER_PROMPT = Setting(
    "limit_mm_per_prompt", "mi", "--limit-mm-per-prompt", "int", "limit_mm_per_prompt (images/videos)",
    "vLLM --limit-mm-per-prompt '{\"image\": N, \"video\": N}': items per prompt for each modality "
    "(empty = 999, config/multimodal.py); 0 = text only: no encoder budget, the towers are not "
    "profiled (multimodal/encoder_budget.py). Takes N or vLLM's JSON with the same N for image "
    "and video.", low=0, high=10_000, per_modality=True)
LIMIT_MM_DATA_PER_REQUEST = Setting(
    "limit_mm_data_per_request", "md", "--limit-mm-data-per-request", "json",
    "limit_mm_data_per_request (JSON)",
    "SGLang --limit-mm-data-per-request '{\"image\": 2, \"video\": 1}' (from 0.5.7): items per "
    "request for each modality (image, video, audio); a modality left out and unset = no limit "
    "(managers/tokenizer_manager.py _validate_mm_limits); a request above it is refused, no memory "
    "changes.", low=0, high=10_000, modalities=("image", "video", "audio"))
MM_FEATURE_TRANSPORT = Setting(
    "mm_feature_transport", "mf", "--mm-feature-transport", "text", "mm_feature_transport",
    "SGLang --mm-feature-transport cpu | cuda_ipc | cuda_vmm (0.5.23): a GPU transport also "
    "reserves SGLANG_MM_FEATURE_CACHE_MB (1,024 MiB) of the KV budget beside the embedding cache "
    "(mem_cache/kv_cache_configurator.py mm_runtime_reservation_gb); unset = cpu on one node.")
MM_PROCESSOR_KWARGS = Setting(
    "mm_processor_kwargs", "mk", "--mm-processor-kwargs", "json", "mm_processor_kwargs (JSON)",
    "vLLM --mm-processor-kwargs, a JSON object for the checkpoint's processor: Qwen-VL min_pixels / "
    "max_pixels (or size.shortest_edge / size.longest_edge), flat or inside images_kwargs / "
    "videos_kwargs (vLLM 0.33 config/multimodal.py); Gemma-3 do_pan_and_scan false. Other keys are "
    "refused by name; empty = the checkpoint's preprocessor_config.json.")
#: The link key of the earlier ``--mm-processor-max-pixels N`` setting, read as
#: ``mk={"max_pixels":N}`` (``scenario.Scenario.from_query`` says so).
LEGACY_MAX_PIXELS_KEY = "mp"


class EngineSettings(BaseModel):
    """Every engine knob; ``None`` means the engine's own default. ``tp``/``pp`` come from the query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, ge=1, le=4096)
    pp: int = Field(default=1, ge=1, le=4096)
    gpu_util: float | None = _setting(None, GPU_UTIL)
    block_size: int | None = _setting(None, BLOCK_SIZE)
    max_num_batched_tokens: int | None = _setting(None, MAX_NUM_BATCHED_TOKENS)
    max_num_seqs: int | None = _setting(None, MAX_NUM_SEQS)
    enforce_eager: bool = _setting(False, ENFORCE_EAGER)
    flashinfer_sampler: bool | None = _setting(None, FLASHINFER_SAMPLER)
    async_scheduling: bool = _setting(True, ASYNC_SCHEDULING)
    hybrid_manager: bool | None = _setting(None, HYBRID_MANAGER)
    enable_prefix_caching: bool | None = _setting(None, PREFIX_CACHING)
    max_cache_len: int | None = _setting(None, MAX_CACHE_LEN)
    swa_eviction_interval: int = _setting(128, SWA_EVICTION_INTERVAL)
    max_tokens: int | None = _setting(None, MAX_TOKENS_SETTING)
    max_attention_window: tuple[int, ...] | None = _setting(None, MAX_ATTENTION_WINDOW)
    swa_full_tokens_ratio: float | None = _setting(None, SWA_FULL_TOKENS_RATIO)
    disable_hybrid_swa_memory: bool = _setting(False, DISABLE_HYBRID_SWA)
    max_total_tokens: int | None = _setting(None, MAX_TOTAL_TOKENS)
    ep: int = _setting(1, EXPERT_PARALLEL)
    dp: int = _setting(1, DATA_PARALLEL)
    max_mamba_cache_size: int | None = _setting(None, MAX_MAMBA_CACHE_SIZE)
    mtp: bool = _setting(False, MTP_LAYERS)
    enable_lora: bool = _setting(False, ENABLE_LORA)
    max_loras: int = _setting(1, MAX_LORAS)
    max_lora_rank: int = _setting(16, MAX_LORA_RANK)
    max_cpu_loras: int | None = _setting(None, MAX_CPU_LORAS)
    fully_sharded_loras: bool = _setting(False, FULLY_SHARDED_LORAS)
    lora_target_modules: str | None = _setting(None, LORA_TARGET_MODULES)
    speculative_config: str | None = _setting(None, SPECULATIVE_CONFIG)
    speculative_algorithm: str | None = _setting(None, SPECULATIVE_ALGORITHM)
    speculative_draft_model_path: str | None = _setting(None, SPECULATIVE_DRAFT_MODEL_PATH)
    speculative_num_steps: int | None = _setting(None, SPECULATIVE_NUM_STEPS)
    speculative_eagle_topk: int | None = _setting(None, SPECULATIVE_EAGLE_TOPK)
    speculative_num_draft_tokens: int | None = _setting(None, SPECULATIVE_NUM_DRAFT_TOKENS)
    limit_mm_per_prompt: int | None = _setting(None, LIMIT_MM_PER_PROMPT)
    limit_mm_data_per_request: str | None = _setting(None, LIMIT_MM_DATA_PER_REQUEST)
    mm_feature_transport: str | None = _setting(None, MM_FEATURE_TRANSPORT)
    mm_processor_kwargs: str | None = _setting(None, MM_PROCESSOR_KWARGS)

    @field_validator("max_attention_window")
    @classmethod
    def _windows_in_bounds(cls, value: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if value is not None:
            MAX_ATTENTION_WINDOW.parse(MAX_ATTENTION_WINDOW.format(tuple(value)))
        return value

    @field_validator("speculative_config", "mm_processor_kwargs")
    @classmethod
    def _json_setting(cls, value: str | None) -> str | None:
        """Canonical JSON (``Setting.parse``); a ``ValueError`` names what is wrong."""
        return None if value is None else SPECULATIVE_CONFIG.parse(value)

    @field_validator("limit_mm_data_per_request")
    @classmethod
    def _modality_counts(cls, value: str | None) -> str | None:
        """SGLang's per-modality JSON, canonical (``Setting.parse``)."""
        return None if value is None else LIMIT_MM_DATA_PER_REQUEST.parse(value)

    @field_validator("speculative_algorithm", "speculative_draft_model_path", "lora_target_modules",
                     "mm_feature_transport")
    @classmethod
    def _text_setting(cls, value: str | None) -> str | None:
        """A printable name or path (``Setting.parse``); a ``ValueError`` names what is wrong."""
        return None if value is None else SPECULATIVE_ALGORITHM.parse(value)

    @model_validator(mode="before")
    @classmethod
    def _page_size_is_block_size(cls, data: Any) -> Any:
        """SGLang's ``page_size`` is this model's ``block_size`` (one knob, one name)."""
        if isinstance(data, dict) and "page_size" in data:
            data = dict(data)
            page = data.pop("page_size")
            if data.get("block_size") is None:
                data["block_size"] = page
        return data


def declared_settings() -> dict[str, Setting]:
    """Every user-facing setting by field name, read from ``EngineSettings``' declarations."""
    out: dict[str, Setting] = {}
    for name, info in EngineSettings.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and isinstance(declared := extra.get("setting"), dict):
            out[name] = _from_schema_extra(declared)
    return out


SETTINGS: dict[str, Setting] = declared_settings()
SETTING_DEFAULTS: dict[str, Any] = {name: EngineSettings.model_fields[name].default for name in SETTINGS}
