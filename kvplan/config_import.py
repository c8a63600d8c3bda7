"""Read a Hugging Face ``config.json`` into a :class:`~kvplan.arch.ModelArch`.

Layer-type rules follow transformers' config classes (v5.x) and vLLM's model files:

* ``layer_types`` wins when present (gpt-oss, newer configs).
* gemma2: ``"sliding_attention" if (i + 1) % 2 else "full_attention"`` (configuration_gemma2.py).
* gemma3: ``(i + 1) % sliding_window_pattern`` (default 6) → sliding (configuration_gemma3.py).
* llama4: ``no_rope_layers[i]`` (default ``int((i + 1) % 4 != 0)``) → chunked, else full
  (configuration_llama4.py; vLLM llama4.py ``use_chunked_local_attn = not self.nope``).
* qwen3_next: ``(i + 1) % full_attention_interval`` (default 4) → linear attention.
* mimo_v2_flash (Hub config): ``hybrid_layer_pattern[i]`` 1 → sliding, 0 → full (SGLang
  ``configs/model_config.py`` ``get_hybrid_layer_ids``).
* jamba: attention where ``i % attn_layer_period == attn_layer_offset`` (8, 4), Mamba elsewhere.
* qwen2/qwen3 families: sliding only when ``use_sliding_window`` and ``i >= max_window_layers``.
* otherwise a non-null ``sliding_window`` makes every layer sliding (Mistral v0.1, Phi-3), and a
  non-null ``attention_chunk_size`` every layer chunked.

``head_dim`` is read when the key exists; ``hidden_size / num_attention_heads`` only otherwise.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from kvplan.arch import (
    MLA,
    Attention,
    Kind,
    LayerSpec,
    ModelArch,
    MoE,
    NoCache,
    Recurrent,
    RopeScaling,
    VisionSpec,
    WeightSpec,
)
from kvplan.dtypes import model_dtype_name
from kvplan.errors import KVPlanError, clip, short

#: Every config.json key the importer reads (links carry exactly these; a test keeps it complete).
ARCHITECTURE_KEYS = (
    "_sliding_window_pattern", "architectures", "attention_chunk_size", "attention_heads",
    "attention_k_eq_v", "attention_layers", "attn_layer_indices", "attn_layer_offset",
    "attn_layer_period", "block_types", "chunk_size", "conv_kernel", "cross_attention_layers",
    "d_model", "decoder_attention_heads", "decoder_ffn_dim", "decoder_layers", "dim", "dtype",
    "emb_dim", "expand", "expert_ffn_hidden_size", "expert_layer_period", "experts_per_token",
    "ffn_dim", "ffn_hidden_size", "first_k_dense_replace", "full_attention_interval",
    "global_head_dim", "head_dim", "hidden_size", "hybrid_layer_pattern", "hybrid_override_pattern",
    "index_head_dim", "index_topk", "interleave_moe_layer_step", "intermediate_size", "intermediate_size_mlp",
    "is_decoder", "is_moe", "kv_channels", "kv_lora_rank", "layer_types", "layers_block_type",
    "linear_conv_kernel_dim", "linear_head_dim", "linear_key_head_dim", "linear_num_heads",
    "linear_num_key_heads", "linear_num_value_heads", "linear_value_head_dim", "mamba_chunk_size",
    "mamba_conv_bias", "mamba_d_conv", "mamba_d_head", "mamba_d_ssm", "mamba_d_state", "mamba_dt_rank",
    "mamba_expand", "mamba_head_dim", "mamba_n_groups", "mamba_n_heads", "mamba_num_heads",
    "mamba_proj_bias", "mamba_rms_norm", "mamba_ssm_cache_dtype", "mamba_ssm_dtype",
    "max_position_embeddings", "max_seq_len", "max_window_layers", "mlp_layer_types",
    "mlp_only_layers", "model_type", "moe_intermediate_size", "moe_k", "moe_layer_start_index",
    "moe_num_experts", "moe_num_shared_experts", "moe_topk", "multi_query", "multi_query_attention",
    "multi_query_group_num", "n_embd", "n_groups", "n_head", "n_head_kv", "n_heads", "n_inner",
    "n_layer", "n_layers", "n_positions", "n_routed_experts", "n_shared_experts",
    "new_decoder_architecture", "no_rope_layer_interval", "no_rope_layers", "num_attention_heads",
    "num_decoder_attention_heads", "num_decoder_layers", "num_dense_layers", "num_experts",
    "num_experts_per_tok", "num_experts_per_token", "num_global_key_value_heads", "num_heads",
    "num_hidden_layers", "num_key_value_heads", "num_kv_heads", "num_kv_shared_layers", "num_layers",
    "num_local_experts", "num_shared_experts", "padded_vocab_size", "partial_rotary_factor",
    "per_layer_config", "q_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "rotary_dim", "rotary_pct",
    "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
    "shared_intermediate_size", "dense_intermediate_size", "num_attention_heads_per_layer",
    "short_conv_kernel_size", "sliding_window", "sliding_window_pattern", "sliding_window_size",
    "ssm_state_size", "state_size", "swa_head_dim", "swa_num_key_value_heads", "swa_v_head_dim",
    "text_config", "tie_word_embeddings", "time_step_rank", "torch_dtype", "type_vocab_size",
    "use_sliding_window", "v_head_dim", "vocab_size", "window_size",
    # weights (kvplan.weights): what the checkpoint stores and in which format
    "attention_bias", "audio_config", "compression_config", "decoder_sparse_step", "enable_moe_block",
    "expert_layer_offset", "hidden_size_per_layer_input", "mlp_bias", "num_nextn_predict_layers",
    "qk_norm_type", "quantization_config", "spatial_merge_size", "use_qk_norm", "vision_config",
    "gating", "use_double_wide_mlp", "attention_out_bias",
    "vocab_size_per_layer_input",
    # context length (the engines' context-limit rules)
    "max_sequence_length", "max_seq_length", "max_target_positions", "model_max_length",
    "rope_parameters", "rope_scaling", "seq_len", "seq_length",
)

MAX_CONFIG_BYTES = 2_000_000
MAX_DEPTH = 32
MAX_LAYERS = 10_000
MAX_DIM = 1_000_000

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
    "gemma", "gemma2", "gemma3", "gemma3_text", "phi3", "falcon", "opt", "gpt_neox",
    "deepseek_v2", "deepseek_v3", "kimi_k2", "llama4", "llama4_text", "gpt_oss", "jamba",
)
#: Model types whose ``hf`` cache kvplan reproduces byte for byte on transformers 5.24's own
#: caches (``tests/fixtures/conformance``; ``tests/test_conformance.py`` keeps this in sync).
VERIFIED_MODEL_TYPES = frozenset({
    "afmoe", "apertus", "apertus1p5_text", "arcee", "aria_text", "axk1", "bailing_hybrid", "bamba",
    "bart", "beam", "bert", "bert-generation", "big_bird", "bigbird_pegasus", "biogpt", "bitnet",
    "blenderbot", "blenderbot-small", "bloom", "camembert", "codegen", "cohere", "cohere2",
    "cohere2_moe", "ctrl", "cwm", "data2vec-text", "deepseek_v2", "deepseek_v3", "diffllama", "doge",
    "dots1", "electra", "emu3_text_model", "ernie", "ernie4_5", "ernie4_5_moe", "exaone", "exaone4",
    "exaone_moe", "falcon", "falcon_h1", "falcon_mamba", "flex_olmo", "flint", "gemma", "gemma2",
    "gemma3_text",
    "gemma3n_text", "gemma4_text", "gemma4_unified_text", "git", "glm", "glm4", "glm4_moe",
    "glm4_moe_lite", "gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "gpt_neox_japanese", "gpt_oss",
    "gptj", "granite", "granite_swa", "granitemoe", "granitemoe_swa", "granitemoehybrid",
    "granitemoeshared", "helium", "hunyuan_v1_dense", "hunyuan_v1_moe", "hy_v3", "hyperclovax",
    "internlm3", "iquestcoder", "jais2", "jamba", "jetmoe", "kimi_linear", "kolibri1", "laguna",
    "lara_mini", "lfm2", "llama", "llama4_text", "mamba", "mamba2", "marian", "mbart", "megatron-bert",
    "mellum", "mimo_v2_flash", "minicpm3", "minimax_m2", "minimax_m3_vl_text", "ministral",
    "ministral3", "mistral", "mixtral", "modernbert-decoder", "moshi", "mpt", "mvp", "nanochat",
    "nemotron", "nemotron_h", "olmo", "olmo2", "olmo3", "olmo_hybrid", "olmoe", "openai-gpt", "opt",
    "pegasus", "persimmon", "phi", "phi3", "phi4_multimodal", "phimoe", "plbart", "prophetnet",
    "qwen2", "qwen2_5_vl_text", "qwen2_moe", "qwen3", "qwen3_5_moe_text", "qwen3_5_text",
    "qwen3_moe", "qwen3_next", "qwen3_vl_moe_text", "qwen3_vl_text",
    "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "sarvam_mla", "sarvam_moe",
    "seed_oss", "smollm3", "solar_open", "stablelm", "starcoder2", "trocr", "vaultgemma", "whisper",
    "xglm", "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod", "youtu",
})
#: Defaults of transformers config classes for keys that real config.json files leave out
#: (``Gemma3TextConfig``: vocab 262,208, 8 heads, 4 KV heads, head_dim 256, window 4096).
MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "sliding_window": 4096, "hidden_size": 2304,
                    "num_hidden_layers": 26, "intermediate_size": 9216,
                    "max_position_embeddings": 131_072},
    # transformers ``FalconConfig.__init__``: ``max_position_embeddings=2048`` (the Hub configs
    # omit it; vLLM 0.33's ``_get_and_verify_max_len`` reads the attribute:
    # tests/fixtures/vllm_truth/context_limits.json)
    "falcon": {"max_position_embeddings": 2048},
}
_QWEN_SWA_TYPES = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl"}
#: Two-matrix MLPs (up/fc1 → down/fc2, no gate), read from each ``modeling_<type>.py`` MLP class.
_UNGATED_MLP_TYPES = {
    "opt", "gpt_neox", "falcon", "gpt2", "gpt_bigcode", "phi", "gptj", "starcoder2", "bloom", "mpt",
    "apertus", "apertus1p5_text", "arcee", "biogpt", "codegen", "jais2", "nanochat", "gpt_neo",
    "gpt_neox_japanese", "persimmon", "fuyu", "xglm", "nemotron", "git", "moshi", "openai-gpt",
    "ctrl", "xlm", "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra",
    "ernie", "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
    "xlm-roberta", "xlm-roberta-xl", "xmod", "bart", "mbart", "blenderbot", "blenderbot-small",
    "marian", "pegasus", "plbart", "mvp", "bigbird_pegasus", "trocr", "whisper", "gpt-sw3",
    "nemotron_h",
}
#: Config classes whose ``tie_word_embeddings`` defaults to True when the file leaves it out.
_TIED_BY_DEFAULT = {"opt", "gemma", "gemma2", "gemma3", "gemma3_text", "falcon", "cohere", "cohere2",
                    "gpt2", "gpt_bigcode", "starcoder2", "bloom"}
_FULL = {"full_attention", "attention", "global", "global_attention", "full"}
_SLIDING = {"sliding_attention", "sliding_window", "local", "local_attention", "sliding"}
_CHUNKED = {"chunked_attention", "chunked"}
_RECURRENT = {"linear_attention", "mamba", "mamba2", "mamba1"}
_NO_CACHE = {"dummy", "moe", "mlp", "none", "shared"}


def with_hf_quant_config(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> dict[str, Any]:
    """config.json with the checkpoint's ``hf_quant_config.json`` as its ``quantization_config``
    when config.json has none: ModelOpt ≤ 0.29 keeps the format only there, and vLLM reads it so
    (``transformers_utils/config.py`` ``get_config``); a config that has one keeps it."""
    if hf_quant is None or config.get("quantization_config") is not None:
        return config
    return {**config, "quantization_config": hf_quant}


def load_config_text(raw: str | bytes) -> dict[str, Any]:
    """Parse config.json text; every failure is a KVPlanError naming what is wrong."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_CONFIG_BYTES:
            raise KVPlanError("config.too_large", size=len(raw), limit=MAX_CONFIG_BYTES)
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise KVPlanError("config.not_utf8") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise KVPlanError("config.too_large", size=len(raw), limit=MAX_CONFIG_BYTES)
    if json_depth(raw, MAX_DEPTH) > MAX_DEPTH:
        raise KVPlanError("config.too_deep", limit=MAX_DEPTH)
    try:
        data = json.loads(raw)
    except RecursionError:
        raise KVPlanError("config.too_deep", limit=MAX_DEPTH) from None
    except ValueError as exc:
        raise KVPlanError("config.not_json", detail=str(exc)[:120]) from None
    if not isinstance(data, dict):
        raise KVPlanError("config.not_object", got=type(data).__name__)
    _check_depth(data, 0)
    return data


#: A JSON string (to its closing quote, or to the end when unterminated) or one bracket; the
#: possessive quantifiers never backtrack, so a scan is linear in the text.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]')


def json_depth(text: str | bytes, limit: int) -> int:
    """Nesting depth of JSON text, counted before parsing (a parser recurses once per level);
    stops counting at ``limit + 1``. Brackets inside strings do not count."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", "replace")
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif token in "]}":
            depth -= 1
    return deepest


def _check_depth(node: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise KVPlanError("config.too_deep", limit=MAX_DEPTH)
    if isinstance(node, dict):
        for value in node.values():
            _check_depth(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            _check_depth(value, depth + 1)


class _Cfg:
    """Typed, validated access to config keys (first key present wins)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def get(self, *keys: str) -> Any:
        for key in keys:
            if self.data.get(key) is not None:
                return self.data[key]
        return None

    def has(self, *keys: str) -> bool:
        return self.get(*keys) is not None

    def int(self, *keys: str, why: str, default: int | None = None, low: int = 1,
            high: int = MAX_DIM) -> int:
        value = self.get(*keys)
        if value is None:
            if default is not None:
                return default
            raise KVPlanError("config.missing_key", key=keys[0], why=why)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and (not math.isfinite(value) or value != int(value))
        ):
            raise KVPlanError("config.bad_value", key=_present(self.data, keys),
                              expected="a whole number", value=short(value))
        value = int(value)
        if not low <= value <= high:
            raise KVPlanError("config.bad_value", key=_present(self.data, keys),
                              expected=f"between {low:,} and {high:,}", value=short(value))
        return value


#: Keys that state a context length, as vLLM (``ModelArchConfigConvertorBase.derive_max_model_len_and_key``,
#: ``vllm/transformers_utils/model_arch_config_convertor.py``), SGLang (``CONTEXT_LENGTH_KEYS``,
#: ``sglang/srt/utils/hf_transformers/common.py``) and TensorRT-LLM read them.
CONTEXT_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                       "model_max_length", "max_target_positions", "max_sequence_length",
                       "max_seq_length", "seq_len")


def _context_keys(data: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """The context-length keys the config sets to a positive whole number (others are not lengths)."""
    found = []
    for key in CONTEXT_LENGTH_KEYS:
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                and value == int(value) and 0 < value <= 10**9:
            found.append((key, int(value)))
    return tuple(found)


#: Model types whose transformers-5 config nests RoPE parameters per layer type, so a legacy flat
#: ``rope_scaling`` becomes the ``full_attention`` set (measured with transformers 5.19:
#: ``CONFIG_MAPPING[t](rope_scaling={...}).rope_parameters`` has no top-level ``rope_type``).
NESTED_ROPE_TYPES = frozenset({"deepseek_v4", "gemma3_text", "gemma3n_text", "modernbert",
                               "modernbert-decoder", "olmo3", "step3p5", "t5gemma2_decoder",
                               "t5gemma2_text"})


def _rope_scalings(data: dict[str, Any], model_type: str = "") -> tuple[RopeScaling, ...]:
    """The config's RoPE parameter sets: ``rope_parameters`` (transformers 5; one per layer type
    when nested) else the legacy ``rope_scaling``; legacy ``type`` read as ``rope_type``
    (vLLM ``patch_rope_parameters``); a flat set of a ``NESTED_ROPE_TYPES`` model is its
    ``full_attention`` set, as transformers 5 loads it. Sets without a string type are skipped."""
    raw = data.get("rope_parameters")
    if not isinstance(raw, dict):
        raw = data.get("rope_scaling")
    if not isinstance(raw, dict):
        return ()
    nested = "rope_type" not in raw and "type" not in raw and all(
        isinstance(v, dict) or v is None for v in raw.values())
    sets = [(str(k), v) for k, v in raw.items() if isinstance(v, dict)] if nested else \
        [("full_attention" if model_type in NESTED_ROPE_TYPES else "", raw)]
    out = []
    for layer_type, rp in sets[:64]:
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        factor, original = rp.get("factor"), rp.get("original_max_position_embeddings")
        if not isinstance(rope_type, str):
            continue
        out.append(RopeScaling(
            rope_type=rope_type[:40], layer_type=layer_type[:40],
            factor=float(factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool)
            and math.isfinite(factor) and 0 < factor <= 1e6 else None,
            original_max_position_embeddings=int(original) if isinstance(original, int)
            and not isinstance(original, bool) and 0 < original <= 10**9 else None,
            mrope=rope_type == "mrope" or "mrope_section" in rp))
    return tuple(out)


def _partial_rotary_factor(data: dict[str, Any], head_dim: int) -> float:
    """The share of a head RoPE rotates (``ModelArch.partial_rotary_factor``): ``partial_rotary_factor``
    (top level, else a flat ``rope_parameters``: transformers 5 moves it there), else ``rotary_dim``
    / ``head_dim`` (GPT-J, Phi, MiniMax), else ``rotary_pct`` (GPT-NeoX); 1.0 when none is set.
    A value outside (0, 1] is refused by name."""
    rope = data.get("rope_parameters")
    nested = rope if isinstance(rope, dict) else {}
    for key, source in (("partial_rotary_factor", data), ("partial_rotary_factor", nested),
                        ("rotary_pct", data)):
        value = source.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and 0 < value <= 1):
            raise KVPlanError("config.bad_value", key=key, expected="a number in (0, 1]",
                              value=short(value))
        return float(value)
    dim = data.get("rotary_dim")
    if dim is None:
        return 1.0
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= head_dim:
        raise KVPlanError("config.bad_value", key="rotary_dim",
                          expected=f"a whole number between 1 and head_dim {head_dim:,}", value=short(dim))
    return dim / head_dim


def _present(data: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((k for k in keys if data.get(k) is not None), keys[0])


def parse_config(
    raw: dict[str, Any] | str | bytes,
    name: str | None = None,
    params_total: int | None = None,
    params_active: int | None = None,
    params_source: str = "",
    source: str = "config.json",
) -> ModelArch:
    """Build a ModelArch from config.json (dict or text); raises KVPlanError on bad input."""
    data = load_config_text(raw) if isinstance(raw, (str, bytes)) else raw
    if not isinstance(data, dict):
        raise KVPlanError("config.not_object", got=type(data).__name__)
    outer = data
    outer_type = data.get("model_type")
    architectures = data.get("architectures")
    text = data.get("text_config")
    if isinstance(text, dict) and not data.get("num_hidden_layers"):
        # the wrapper's dtype applies to its text model when text_config does not set its own
        inherited = {k: data[k] for k in ("torch_dtype", "dtype") if data.get(k) is not None}
        data = {**inherited, **text}
    model_type = str(data.get("model_type") or outer_type or "unknown")
    if model_type == "gemma3":
        model_type = "gemma3_text"
    data = {**MODEL_TYPE_DEFAULTS.get(model_type, {}), **data}
    cfg = _Cfg(data)
    _refuse_unknown_layouts(cfg, model_type)
    if not isinstance(architectures, list):
        architectures = data.get("architectures") if isinstance(data.get("architectures"), list) else None
    architecture = str(architectures[0]) if architectures else None

    listed = cfg.get("layer_types", "layers_block_type")
    n_layers = cfg.int("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers",
                       "num_decoder_layers",
                       why="the number of layers", high=MAX_LAYERS,
                       default=len(listed) if isinstance(listed, list) and listed else None)
    hidden = cfg.int("hidden_size", "n_embd", "d_model", "dim", "emb_dim", why="the hidden size")
    pure_recurrent = model_type in _PURE_RECURRENT_TYPES
    n_heads = cfg.int("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads",
                      "decoder_attention_heads", "num_decoder_attention_heads",
                      why="the attention head count",
                      default=1 if pure_recurrent else None)
    per_layer_heads = cfg.get("num_attention_heads_per_layer")
    if isinstance(per_layer_heads, list) and per_layer_heads:
        # Laguna (transformers 5.24 configuration_laguna.py / modeling_laguna.py
        # ``LagunaAttention``: the query heads of each layer come from this list, not from
        # num_attention_heads); one count for all layers is what kvplan sizes
        if len({str(x) for x in per_layer_heads}) != 1:
            raise KVPlanError("config.unsupported", what="per-layer query head counts",
                              detail="num_attention_heads_per_layer lists different counts")
        n_heads = _Cfg({"num_attention_heads_per_layer": per_layer_heads[0]}).int(
            "num_attention_heads_per_layer", why="the attention head count")
    n_kv, hf_heads = _kv_heads(cfg, model_type, n_heads)
    if pure_recurrent:
        head_dim = max(1, hidden // n_heads)
    elif cfg.has("head_dim", "kv_channels"):  # kv_channels: JetMoe, ChatGLM
        head_dim = cfg.int("head_dim", "kv_channels", why="the head size")
    elif cfg.has("kv_lora_rank") and cfg.has("qk_rope_head_dim"):
        # MLA: transformers' ``head_dim`` is the rope part (DeepseekV3Config.__post_init__
        # ``head_dim = qk_rope_head_dim``; Glm4MoeLiteConfig.attribute_map ``head_dim`` →
        # ``qk_rope_head_dim``, so its to_dict carries none) — found by Glm4MoeLiteConfig's class
        # default (hidden 2,048, 20 heads), refused before for a missing head_dim
        head_dim = cfg.int("qk_rope_head_dim", why="the MLA rope head size")
    else:
        if hidden % n_heads:
            raise KVPlanError("config.missing_key", key="head_dim",
                              why=f"the head size (hidden_size {hidden} is not a multiple of "
                                  f"{n_heads} heads)")
        head_dim = hidden // n_heads
    if n_kv > n_heads:
        raise KVPlanError("config.bad_value", key="num_key_value_heads",
                          expected=f"at most num_attention_heads ({n_heads})", value=n_kv)

    types = _layer_types(cfg, model_type, n_layers)
    no_cache = model_type in _NO_CACHE_TYPES or (model_type in _DECODER_FLAG_TYPES
                                                 and cfg.get("is_decoder") is not True)
    if cfg.has(*_RECURRENT_KEYS) and not any(t in _RECURRENT for t in types):
        raise KVPlanError("config.unsupported", what="this hybrid layout",
                          detail="the config describes recurrent (Mamba / linear-attention) state but "
                                 "no layer_types or hybrid_override_pattern says which layers hold it")
    shared = cfg.int("num_kv_shared_layers", why="KV-sharing layers", default=0, low=0,
                     high=n_layers)
    own_types = types
    if shared:  # the last layers reuse earlier layers' KV (Gemma 3n; HF DummyLayer, vLLM kv sharing)
        types = types[: n_layers - shared] + ["shared"] * shared
    attention_spec = _attention_spec(cfg, n_kv, head_dim, n_heads, hf_heads)
    overrides = _per_layer_attention(cfg, model_type, types, n_heads)
    reuse: tuple[tuple[int, int], ...] = ()
    if shared and model_type in GEMMA4_TYPES and isinstance(attention_spec, Attention):
        # Gemma4TextAttention / Gemma4UnifiedTextAttention (transformers 5.24): a "reuse" layer
        # builds q_proj and q_norm of its own head size (per_layer_config, or global_head_dim
        # on full-attention layers) and o_proj; "Layers sharing kv states don't need any
        # weight matrices" for k/v
        own = _per_layer_attention(cfg, model_type, own_types, n_heads)
        reuse = tuple((i, own.get(i, {}).get("head_dim_k", attention_spec.head_dim_k))
                      for i in range(n_layers - shared, n_layers))
    if overrides and not isinstance(attention_spec, Attention):
        raise KVPlanError("config.unsupported", what="per-layer settings of MLA layers",
                          detail="per_layer_config")
    swa = _swa_attention(cfg, model_type, n_heads, n_kv)
    layers: list[LayerSpec] = []
    recurrent: Recurrent | None = None
    for i, layer_type in enumerate(types):
        if layer_type in _FULL:
            layers.append(attention_spec.model_copy(update=overrides[i]) if i in overrides
                          else attention_spec)
        elif layer_type in _SLIDING:
            window = cfg.int("sliding_window", "sliding_window_size", "window_size",
                             why=f"layer {i} ({layer_type})")
            update = {**swa, **overrides.get(i, {})}
            layers.append(attention_spec.model_copy(update={"kind": Kind.SLIDING, "window": window,
                                                            **update})
                          if isinstance(attention_spec, Attention)
                          else attention_spec.model_copy(update={"window": window}))
        elif layer_type in _CHUNKED:
            chunk = cfg.int("attention_chunk_size", why=f"layer {i} ({layer_type})")
            if not isinstance(attention_spec, Attention):
                raise KVPlanError("config.unsupported", what="chunked MLA layers", detail=layer_type)
            layers.append(attention_spec.model_copy(update={"kind": Kind.CHUNKED, "window": chunk}))
        elif layer_type in _RECURRENT:
            recurrent = recurrent or _recurrent_spec(cfg, model_type, hidden)
            layers.append(recurrent)
        elif layer_type in _NO_CACHE:
            layers.append(NoCache())
        else:
            raise KVPlanError("config.unsupported", what=f"layer type of layer {i}",
                              detail=short(layer_type))

    moe = _moe(cfg, model_type, n_layers)
    gated = model_type not in _UNGATED_MLP_TYPES
    intermediate = _intermediate(cfg, hidden)
    vocab = cfg.int("vocab_size", "padded_vocab_size", why="the embedding size", high=10_000_000)
    tie = cfg.get("tie_word_embeddings")
    if tie is None:
        tie = model_type in _TIED_BY_DEFAULT
    elif not isinstance(tie, bool):
        raise KVPlanError("config.bad_value", key="tie_word_embeddings", expected="true or false",
                          value=short(tie))
    max_pos = cfg.int("max_position_embeddings", "n_positions", "max_seq_len",
                      why="the context limit", default=0, low=0, high=10**9) or None
    arch = ModelArch(
        name=name or str(data.get("_name_or_path") or architecture or model_type),
        model_type=model_type,
        architecture=architecture,
        layers=_interned(layers),
        hidden_size=hidden,
        n_heads=n_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        context_keys=_context_keys(data),
        rope_scalings=_rope_scalings(data, model_type),
        partial_rotary_factor=_partial_rotary_factor(data, head_dim),
        model_dtype=model_dtype_name(cfg.get("torch_dtype", "dtype")),
        tie_word_embeddings=tie,
        gated_mlp=gated,
        moe=moe,
        weights=_weight_spec(cfg, _Cfg(outer), model_type, n_layers, moe, hidden).model_copy(
            update={"kv_reuse_layers": tuple(i for i, _ in reuse),
                    "kv_reuse_head_dims": tuple(d for _, d in reuse),
                    "kv_reuse_double_mlp": bool(reuse) and cfg.get("use_double_wide_mlp") is True}),
        params_total=0,
        source=source,
        parallel_mixers=model_type in PARALLEL_MIXER_TYPES,
    )
    total, active, method = estimate_params(arch)
    extra = _embedding_family_params(cfg, arch)
    total += extra
    active = active + extra if active is not None else None
    if no_cache:  # the attention weights stay; only the cache goes
        arch = arch.model_copy(update={
            "layers": (NoCache(),) * n_layers,
            "notes": ("transformers keeps no KV cache for this model"
                      + (" (is_decoder is not true)" if model_type in _DECODER_FLAG_TYPES else ""),)})
    if params_total:
        method = params_source or "given"
        total = params_total
        active = params_active if params_active else (None if moe is None else active)
    notes = arch.notes
    if model_type not in VERIFIED_MODEL_TYPES and model_type not in SUPPORTED_MODEL_TYPES:
        notes += (f"generic rules: model_type '{clip(model_type)}' has not been checked "
                  "against transformers; sized from the keys it shares with known models",)
    return arch.model_copy(update={"params_total": total, "params_active": active,
                                   "params_method": method, "notes": notes})


def support_status(arch: ModelArch) -> tuple[str, str]:
    """Whether the model's architecture is ``exact`` (its model_type's cache and parameters were
    checked against transformers: ``tests/fixtures/conformance``, ``docs/architectures.md``) or
    sized by ``generic`` rules, with the reason. (A layout kvplan does not understand is refused
    by ``parse_config`` and never gets here.)"""
    if arch.model_type in VERIFIED_MODEL_TYPES or arch.model_type in SUPPORTED_MODEL_TYPES:
        return "exact", (f"model_type '{arch.model_type}' checked against transformers' own cache "
                         "and parameter counts (docs/architectures.md)")
    return "generic", (f"model_type '{arch.model_type}' has not been checked against transformers; "
                       "sized from the keys it shares with known models")


def _refuse_unknown_layouts(cfg: _Cfg, model_type: str) -> None:
    """Refuse, by name, the layouts kvplan does not size yet (never a silent generic number)."""
    if model_type in _UNSUPPORTED_TYPES:
        raise KVPlanError("config.unsupported", what=f"model type {model_type}",
                          detail=_UNSUPPORTED_TYPES[model_type])
    if cfg.has("block_types"):
        raise KVPlanError("config.unsupported", what="recurrent block types (block_types)",
                          detail=f"{model_type}: RG-LRU recurrent blocks with local attention")
    if cfg.has("cross_attention_layers"):
        raise KVPlanError("config.unsupported", what="cross-attention layers (cross_attention_layers)",
                          detail=f"{model_type}: their cache is sized by the image/encoder tokens")


def _intermediate(cfg: _Cfg, hidden: int) -> int:
    """MLP width; a per-layer list (Gemma 3n ``intermediate_size``) must be uniform."""
    widths = cfg.get("intermediate_size")
    if isinstance(widths, list) and not cfg.has("intermediate_size_mlp"):
        if not widths or len(set(map(str, widths))) != 1:
            raise KVPlanError("config.unsupported", what="per-layer MLP widths",
                              detail="intermediate_size lists different widths")
        return _Cfg({"intermediate_size": widths[0]}).int("intermediate_size", why="the MLP size",
                                                            low=0)
    # ``dense_intermediate_size``: the dense MLP's width where ``intermediate_size`` is the
    # experts' (transformers 5.24 modeling_minimax_m3_vl.py ``MiniMaxM3VLDenseMLP``;
    # configuration_inkling.py reads a checkpoint's the same way)
    return cfg.int("intermediate_size_mlp", "dense_intermediate_size", "intermediate_size",
                   "ffn_dim", "n_inner",
                   "decoder_ffn_dim", "ffn_hidden_size", why="the MLP size", default=4 * hidden,
                   low=0)


def _per_layer_attention(cfg: _Cfg, model_type: str, types: list[str],
                         n_heads: int) -> dict[int, dict[str, int]]:
    """Per-layer head sizes and KV heads: Gemma 4's full-attention layers.

    transformers ``Gemma4TextConfig.__post_init__`` (configuration_gemma4.py): without
    ``per_layer_config``, every ``full_attention`` layer gets ``head_dim = global_head_dim``
    (default 512) and, when ``attention_k_eq_v``, ``num_key_value_heads =
    num_global_key_value_heads``; ``Gemma4TextAttention`` reads ``config.per_layer_config[i]``.
    """
    per_layer = cfg.get("per_layer_config")
    if per_layer is None and model_type.startswith("gemma4"):
        layer: dict[str, Any] = {"head_dim": cfg.get("global_head_dim") or 512}
        if cfg.get("attention_k_eq_v") and cfg.has("num_global_key_value_heads"):
            layer["num_key_value_heads"] = cfg.get("num_global_key_value_heads")
        per_layer = {str(i): layer for i, t in enumerate(types) if t == "full_attention"}
    if per_layer is None:
        return {}
    if not isinstance(per_layer, dict):
        raise KVPlanError("config.bad_value", key="per_layer_config",
                          expected="an object of layer index → settings", value=short(per_layer))
    out: dict[int, dict[str, int]] = {}
    for key, layer in per_layer.items():
        if not str(key).isdigit() or int(key) >= len(types) or not isinstance(layer, dict):
            raise KVPlanError("config.bad_value", key="per_layer_config",
                              expected=f"layer indices below {len(types)} with settings",
                              value=short(key))
        unknown = set(layer) - {"head_dim", "num_key_value_heads"}
        if unknown:
            raise KVPlanError("config.unsupported", what="per_layer_config settings",
                              detail=", ".join(sorted(unknown)))
        sub = _Cfg(layer)
        update: dict[str, int] = {}
        if sub.has("head_dim"):
            update["head_dim_k"] = update["head_dim_v"] = sub.int("head_dim", why="a layer's head size")
        if sub.has("num_key_value_heads"):
            update["n_kv_heads"] = sub.int("num_key_value_heads", why="a layer's KV heads",
                                           high=n_heads)
        out[int(key)] = update
    return out


def _swa_attention(cfg: _Cfg, model_type: str, n_heads: int, n_kv: int) -> dict[str, int]:
    """Sliding layers' own KV heads and head sizes (MiMo-V2-Flash).

    transformers ``MiMoV2FlashAttention.__init__`` (modeling_mimo_v2_flash.py): sliding layers have
    ``num_key_value_heads * 2`` KV heads; vLLM reads ``swa_num_key_value_heads`` / ``swa_head_dim``.
    """
    update: dict[str, int] = {}
    if cfg.has("swa_num_key_value_heads"):
        update["n_kv_heads"] = cfg.int("swa_num_key_value_heads", why="sliding KV heads", high=n_heads)
    elif model_type == "mimo_v2_flash":
        update["n_kv_heads"] = min(2 * n_kv, n_heads)
    if cfg.has("swa_head_dim"):
        update["head_dim_k"] = cfg.int("swa_head_dim", why="sliding head size")
        update["head_dim_v"] = cfg.int("swa_v_head_dim", "swa_head_dim", why="sliding value size")
    return update


def _kv_heads(cfg: _Cfg, model_type: str, n_heads: int) -> tuple[int, int | None]:
    """KV heads stored per layer, and the heads transformers caches when it broadcasts."""
    if model_type == "falcon":
        if cfg.get("new_decoder_architecture"):
            n_kv = cfg.int("num_kv_heads", "n_head_kv", why="Falcon KV heads", default=n_heads)
            return n_kv, n_heads  # modeling_falcon.py broadcasts K/V to num_heads before caching
        if cfg.get("multi_query", "multi_query_attention") is not False:
            return 1, None  # falcon-7b: multi_query defaults to True
        return n_heads, None
    if cfg.get("multi_query") is True:
        return 1, None
    n_kv = cfg.int("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num",
                   why="KV heads", default=n_heads)
    return n_kv, None


def _attention_spec(cfg: _Cfg, n_kv: int, head_dim: int, n_heads: int,
                    hf_heads: int | None) -> Attention | MLA:
    if cfg.has("kv_lora_rank"):
        return MLA(
            kv_lora_rank=cfg.int("kv_lora_rank", why="the MLA latent size"),
            qk_rope_head_dim=cfg.int("qk_rope_head_dim", why="the MLA rope key size", low=0),
            n_heads=n_heads,
            qk_nope_head_dim=cfg.int("qk_nope_head_dim", why="the expanded MLA key size", low=0),
            v_head_dim=cfg.int("v_head_dim", why="the expanded MLA value size"),
            q_lora_rank=cfg.int("q_lora_rank", why="the MLA query rank", default=0, low=0),
            indexer_head_dim=cfg.int("index_head_dim", why="the DSA indexer head size",
                                     default=128 if cfg.has("index_topk") else 0, low=0),
        )
    head_dim_v = cfg.int("v_head_dim", why="value head size", default=head_dim)
    return Attention(n_kv_heads=n_kv, head_dim_k=head_dim, head_dim_v=head_dim_v,
                     hf_cached_heads=hf_heads)


#: Encoder-decoder families whose causal-LM decoder holds an (unused without encoder) cross-attention
#: block per layer (``BartDecoderLayer.encoder_attn`` and copies).
CROSS_ATTENTION_DECODERS = {"bart", "mbart", "blenderbot", "blenderbot-small", "marian", "pegasus",
                            "plbart", "mvp", "bigbird_pegasus", "trocr", "whisper", "prophetnet"}
#: Layouts no generic rule covers, refused by name.
_UNSUPPORTED_TYPES = {
    "longcat_flash": "two MLA attention blocks per decoder layer (modeling_longcat_flash.py)",
    "rwkv": "RWKV time-mixing state, no attention (modeling_rwkv.py)",
    "xlnet": "mems: one hidden state per token per layer (modeling_xlnet.py XLNetModel.cache_mem)",
    "reformer": "LSH/local attention caching one hidden state per token per layer "
                "(modeling_reformer.py ReformerDynamicCache.states_cache)",
    "xlstm": "mLSTM matrix-memory state, no attention (modeling_xlstm.py)",
}
#: Models transformers runs without any cache (their causal-LM heads return no past_key_values).
_NO_CACHE_TYPES = {"openai-gpt", "xlm"}
#: Encoder families whose causal-LM class caches only when the config sets ``is_decoder: true``
#: (e.g. ``BertLMHeadModel``: "add `is_decoder=True`"; otherwise ``use_cache`` is ignored).
_DECODER_FLAG_TYPES = {
    "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
    "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
    "xlm-roberta", "xlm-roberta-xl", "xmod",
}
#: Attention-free Mamba models: every layer recurrent, no attention heads needed.
_PURE_RECURRENT_TYPES = {"mamba", "falcon_mamba", "mamba2"}
#: Models whose every decoder layer is one block — a norm and one mixer (transformers
#: ``modeling_nemotron_h.py`` ``NemotronHBlock``: Mamba2 "M", attention "*", MLP "-", MoE "E").
ONE_BLOCK_TYPES = {"nemotron_h"}
_PATTERN_CHARS = {"M": "mamba", "*": "full_attention", "-": "mlp", "E": "moe"}
#: Models whose every decoder layer runs attention and a Mamba-2 mixer in parallel on the same input
#: (vLLM ``falcon_h1.py`` ``FalconH1ParallelHybrid``, transformers ``FalconH1DecoderLayer``): two
#: entries of ``ModelArch.layers`` per decoder layer (``ModelArch.parallel_mixers``).
PARALLEL_MIXER_TYPES = {"falcon_h1"}
#: Config keys that describe a recurrent (Mamba / linear-attention) state.
_RECURRENT_KEYS = ("linear_num_value_heads", "linear_num_heads", "mamba_n_heads", "mamba_num_heads",
                   "mamba_d_state", "ssm_state_size", "mamba_expand")


def _layer_types(cfg: _Cfg, model_type: str, n: int) -> list[str]:
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:  # NemotronH: one character per layer
        if not isinstance(pattern, str) or len(pattern) != n or set(pattern) - set(_PATTERN_CHARS):
            raise KVPlanError("config.bad_value", key="hybrid_override_pattern",
                              expected=f"{n} characters from 'M*-E'", value=short(pattern))
        return [_PATTERN_CHARS[c] for c in pattern]
    if model_type in _PURE_RECURRENT_TYPES:
        return ["mamba"] * n
    if model_type in PARALLEL_MIXER_TYPES:  # attention and a Mamba-2 mixer in every decoder layer
        return ["full_attention", "mamba"] * n
    flags = cfg.get("hybrid_layer_pattern")
    if cfg.get("layer_types", "layers_block_type") is None and flags is not None:
        # MiMo-V2-Flash Hub config: 1 = sliding, 0 = full attention per layer (SGLang
        # configs/model_config.py get_hybrid_layer_ids, models/mimo_v2_flash.py)
        if not isinstance(flags, list) or len(flags) != n or set(flags) - {0, 1}:
            raise KVPlanError("config.bad_value", key="hybrid_layer_pattern",
                              expected=f"{n} flags (0 full, 1 sliding)", value=short(flags))
        return ["sliding_attention" if flag else "full_attention" for flag in flags]
    if cfg.get("layer_types", "layers_block_type") is None and isinstance(
            cfg.get("attention_layers"), list):
        # GPT-Neo "local" layers mask a window but cache every token: transformers builds cache
        # layers from layer_types / sliding_window only (cache_utils.get_layer_types_and_kwargs)
        return ["full_attention"] * n
    explicit = cfg.get("layer_types", "layers_block_type")
    if explicit is not None:
        if not isinstance(explicit, list) or not all(isinstance(t, str) for t in explicit):
            raise KVPlanError("config.bad_value", key="layer_types", expected="a list of strings",
                              value=short(explicit))
        if len(explicit) != n:
            raise KVPlanError("config.bad_value", key="layer_types",
                              expected=f"{n} entries (num_hidden_layers)", value=len(explicit))
        return [t.lower() for t in explicit]
    indices = cfg.get("attn_layer_indices")
    if isinstance(indices, list):  # Bamba: attention at these indices, Mamba-2 elsewhere
        return ["full_attention" if i in indices else "mamba" for i in range(n)]
    if model_type == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if model_type in {"gemma3", "gemma3_text"}:
        pattern = cfg.int("sliding_window_pattern", "_sliding_window_pattern",
                          why="the Gemma 3 layer pattern", default=6)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if model_type in {"llama4", "llama4_text"}:
        interval = cfg.int("no_rope_layer_interval", why="NoPE interval", default=4)
        no_rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        if not isinstance(no_rope, list) or len(no_rope) != n:
            raise KVPlanError("config.bad_value", key="no_rope_layers",
                              expected=f"a list of {n} flags", value=short(no_rope))
        chunked = cfg.has("attention_chunk_size")
        return ["chunked_attention" if flag and chunked else "full_attention" for flag in no_rope]
    if model_type == "qwen3_next":
        interval = cfg.int("full_attention_interval", why="the full-attention interval", default=4)
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    if model_type == "jamba":
        period = cfg.int("attn_layer_period", why="Jamba attention period", default=8)
        offset = cfg.int("attn_layer_offset", why="Jamba attention offset", default=4, low=0)
        return ["full_attention" if i % period == offset else "mamba" for i in range(n)]
    if model_type in _QWEN_SWA_TYPES:
        if cfg.get("use_sliding_window") and cfg.has("sliding_window"):
            first = cfg.int("max_window_layers", why="Qwen sliding layers", default=n, low=0,
                            high=MAX_LAYERS)
            return ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
        return ["full_attention"] * n
    if cfg.get("use_sliding_window") is False:
        return ["full_attention"] * n
    if cfg.has("sliding_window"):
        return ["sliding_attention"] * n
    if cfg.has("attention_chunk_size"):
        return ["chunked_attention"] * n
    return ["full_attention"] * n


#: Kimi-Delta-Attention families whose forget and output gates are full-rank ``h × H·d``
#: (transformers 5.24 modeling_bailing_hybrid.py ``BailingHybridForgetGate.f_proj``,
#: ``BailingHybridKimiDeltaAttention.g_proj``); Kimi's own are low-rank through ``d``.
_KDA_FULL_RANK_GATES = {"bailing_hybrid"}


def _recurrent_spec(cfg: _Cfg, model_type: str, hidden: int) -> Recurrent:
    if model_type == "mamba2":  # Mamba2Config: num_heads × head_dim = expand × hidden
        cfg = _Cfg({"mamba_n_heads": cfg.get("num_heads"), "mamba_d_head": cfg.get("head_dim"),
                    "mamba_d_state": cfg.get("state_size"), "mamba_n_groups": cfg.get("n_groups"),
                    "mamba_d_conv": cfg.get("conv_kernel"), "chunk_size": cfg.get("chunk_size"),
                    "mamba_ssm_cache_dtype": cfg.get("mamba_ssm_cache_dtype")})
    elif model_type in {"mamba", "falcon_mamba"}:  # MambaConfig: d_inner = intermediate_size
        kernel = cfg.int("conv_kernel", why="Mamba conv kernel", default=4)
        state = cfg.int("state_size", why="Mamba state size", default=16)
        d_inner = cfg.int("intermediate_size", why="Mamba inner size",
                          default=cfg.int("expand", why="Mamba expansion", default=2) * hidden)
        rank = _dt_rank(cfg.get("time_step_rank"), hidden)
        return Recurrent(variant="mamba1", conv_channels=d_inner, conv_kernel=kernel,
                         ssm_elements=d_inner * state, tp_shard_unit=d_inner, ssm_dtype=_ssm_dtype(cfg),
                         params=_mamba1_params(hidden, d_inner, state, kernel, rank, norms=0))
    if model_type in PARALLEL_MIXER_TYPES:
        return _falcon_h1_mixer(cfg, hidden)
    if cfg.has("linear_num_value_heads"):  # Gated DeltaNet (Qwen3-Next / Qwen3.5)
        nk = cfg.int("linear_num_key_heads", why="GDN key heads")
        nv = cfg.int("linear_num_value_heads", why="GDN value heads")
        hk = cfg.int("linear_key_head_dim", why="GDN key head size")
        hv = cfg.int("linear_value_head_dim", why="GDN value head size")
        kernel = cfg.int("linear_conv_kernel_dim", why="GDN conv kernel", default=4)
        conv = 2 * nk * hk + nv * hv
        # Qwen3NextGatedDeltaNet parameters: in_proj_qkvz and in_proj_ba, a conv1d without bias,
        # dt_bias and A_log per value head, a norm of the value head size, then out_proj.
        params = hidden * (2 * nk * hk + 2 * nv * hv) + hidden * 2 * nv + conv * kernel + 2 * nv \
            + hv + nv * hv * hidden
        return Recurrent(variant="gdn", conv_channels=conv, conv_kernel=kernel,
                         ssm_elements=nv * hk * hv, tp_shard_unit=nv, ssm_dtype=_ssm_dtype(cfg),
                         params=params)
    if cfg.has("linear_num_heads"):  # Kimi Delta Attention (kimi_linear, bailing_hybrid)
        # transformers caches one conv over q, k and v ([3·H·d, kernel], model dtype) and an fp32
        # [H, d, d] state per layer (measured: tests/fixtures/conformance/kimi_linear.json), the
        # Gated DeltaNet layout with as many key as value heads
        heads = cfg.int("linear_num_heads", why="KDA heads")
        size = cfg.int("linear_head_dim", why="KDA head size")
        kernel = cfg.int("linear_conv_kernel_dim", "short_conv_kernel_size", why="KDA conv kernel",
                         default=4)
        inner = heads * size
        # KimiDeltaAttention (transformers 5.24 modeling_kimi_linear.py; vLLM
        # model_executor/layers/kda.py the same tensors): q/k/v_proj h × H·d, a conv over each
        # (H·d × kernel, no bias), the forget gate's dt_bias H·d and A_log H, b_proj h × H,
        # o_norm d, o_proj H·d × h, and two gates (forget f, output g) — low-rank
        # h × d + d × H·d in Kimi (``f_a_proj``/``f_b_proj``, ``g_a_proj``/``g_b_proj``), full
        # h × H·d in ``_KDA_FULL_RANK_GATES`` (modeling_bailing_hybrid.py ``f_proj``, ``g_proj``).
        gate = hidden * inner if model_type in _KDA_FULL_RANK_GATES else hidden * size + size * inner
        params = 3 * hidden * inner + 3 * inner * kernel + inner + heads + 2 * gate \
            + hidden * heads + size + inner * hidden
        # vLLM keeps KDA's recurrent state in fp32 by default (mamba_utils.py), as transformers does
        return Recurrent(variant="gdn", conv_channels=3 * heads * size, conv_kernel=kernel,
                         ssm_elements=heads * size * size, tp_shard_unit=heads,
                         ssm_dtype=_ssm_dtype(cfg) or "fp32", params=params)
    if cfg.has("mamba_n_heads", "mamba_num_heads"):  # Mamba-2
        heads = cfg.int("mamba_n_heads", "mamba_num_heads", why="Mamba-2 heads")
        head_dim = cfg.int("mamba_d_head", "mamba_head_dim", why="Mamba-2 head size")
        state = cfg.int("mamba_d_state", "ssm_state_size", why="Mamba-2 state size")
        groups = cfg.int("mamba_n_groups", "n_groups", why="Mamba-2 groups", default=1)
        kernel = cfg.int("mamba_d_conv", "conv_kernel", why="Mamba-2 conv kernel", default=4)
        d_inner = heads * head_dim
        conv = d_inner + 2 * groups * state
        # Mamba2Mixer: in_proj h × (d_inner + conv + heads), conv1d with bias, dt_bias, A_log, D,
        # gated RMSNorm (d_inner), out_proj
        params = hidden * (d_inner + conv + heads) + conv * (kernel + 1) + 3 * heads + d_inner \
            + d_inner * hidden
        return Recurrent(variant="mamba2", conv_channels=conv,
                         conv_kernel=kernel, ssm_elements=d_inner * state, tp_shard_unit=heads,
                         ssm_dtype=_ssm_dtype(cfg), params=params, n_groups=groups, state_size=state,
                         chunk_size=cfg.int("chunk_size", "mamba_chunk_size", why="Mamba-2 chunk",
                                            default=256))
    if cfg.has("mamba_d_state", "mamba_expand"):  # Mamba-1 (Jamba)
        expand = cfg.int("mamba_expand", why="Mamba expansion", default=2)
        state = cfg.int("mamba_d_state", why="Mamba state size", default=16)
        kernel = cfg.int("mamba_d_conv", why="Mamba conv kernel", default=4)
        d_inner = expand * hidden
        rank = _dt_rank(cfg.get("mamba_dt_rank"), hidden)
        return Recurrent(variant="mamba1", conv_channels=d_inner, conv_kernel=kernel,
                         ssm_elements=d_inner * state, tp_shard_unit=d_inner,
                         ssm_dtype=_ssm_dtype(cfg),
                         params=_mamba1_params(hidden, d_inner, state, kernel, rank,
                                               norms=rank + 2 * state))
    if model_type.startswith(("qwen3_next", "qwen3_5")):  # Gated DeltaNet families
        raise KVPlanError("config.missing_key", key="linear_num_value_heads",
                          why=f"the recurrent state of {model_type} layers")
    raise KVPlanError("config.unsupported", what=f"the recurrent state of {model_type} layers",
                      detail="no Gated DeltaNet (linear_num_value_heads), Mamba-2 (mamba_n_heads) or "
                             "Mamba-1 (mamba_d_state) keys")


def _falcon_h1_mixer(cfg: _Cfg, hidden: int) -> Recurrent:
    """Falcon-H1's Mamba-2 mixer (vLLM ``falcon_h1.py`` ``FalconH1SSMDecoderLayer`` →
    ``MambaMixer2``; state shapes ``FalconH1ForCausalLM.get_mamba_state_shape_from_config``):
    inner size ``mamba_d_ssm`` (else ``mamba_expand × hidden``), conv over inner + 2 × groups ×
    state channels, SSM state heads × head size × state. Parameters: in_proj ``h × (inner + conv
    + heads)`` (+ bias with ``mamba_proj_bias``), conv1d (+ bias with ``mamba_conv_bias``), A, D,
    dt_bias per head, the gated RMSNorm only with ``mamba_rms_norm``, out_proj ``inner × h``."""
    heads = cfg.int("mamba_n_heads", why="Mamba-2 heads")
    head_dim = cfg.int("mamba_d_head", why="Mamba-2 head size")
    state = cfg.int("mamba_d_state", why="Mamba-2 state size")
    groups = cfg.int("mamba_n_groups", why="Mamba-2 groups", default=1)
    kernel = cfg.int("mamba_d_conv", why="Mamba-2 conv kernel", default=4)
    inner = cfg.int("mamba_d_ssm", why="the Mamba-2 inner size",
                    default=cfg.int("mamba_expand", why="Mamba expansion", default=2) * hidden)
    conv = inner + 2 * groups * state
    proj = inner + conv + heads
    flag = {key: cfg.get(key) for key in ("mamba_proj_bias", "mamba_conv_bias", "mamba_rms_norm")}
    for key, value in flag.items():
        if value is not None and not isinstance(value, bool):
            raise KVPlanError("config.bad_value", key=key, expected="true or false", value=short(value))
    params = hidden * proj + (proj if flag["mamba_proj_bias"] else 0) + conv * kernel \
        + (conv if flag["mamba_conv_bias"] is not False else 0) + 3 * heads \
        + (inner if flag["mamba_rms_norm"] else 0) + inner * hidden \
        + (hidden if flag["mamba_proj_bias"] else 0)
    return Recurrent(variant="mamba2", conv_channels=conv, conv_kernel=kernel,
                     ssm_elements=heads * head_dim * state, tp_shard_unit=heads,
                     ssm_dtype=_ssm_dtype(cfg), params=params, n_groups=groups, state_size=state,
                     chunk_size=cfg.int("mamba_chunk_size", why="Mamba-2 chunk", default=256))


def _dt_rank(value: Any, hidden: int) -> int:
    """``time_step_rank`` / ``mamba_dt_rank``: ``"auto"`` is ``ceil(hidden / 16)`` (MambaConfig)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return -(-hidden // 16)


def _mamba1_params(h: int, d_inner: int, state: int, kernel: int, rank: int, norms: int) -> int:
    """MambaMixer: in_proj ``h × 2·d_inner``, conv1d with bias, x_proj ``d_inner × (r + 2N)``,
    dt_proj with bias, A_log ``d_inner × N``, D, out_proj; Jamba adds dt/B/C RMSNorms (``norms``)."""
    return (h * 2 * d_inner + d_inner * (kernel + 1) + d_inner * (rank + 2 * state)
            + rank * d_inner + d_inner + d_inner * state + d_inner + d_inner * h + norms)


def _ssm_dtype(cfg: _Cfg) -> str | None:
    """``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype`` as a format name, when the config sets one."""
    from kvplan.dtypes import get_dtype

    value = cfg.get("mamba_ssm_cache_dtype", "mamba_ssm_dtype")
    if value is None or str(value) == "auto":
        return None
    try:
        return get_dtype(str(value).replace("torch.", "")).name
    except KeyError:
        raise KVPlanError("config.bad_value", key="mamba_ssm_cache_dtype",
                          expected="a float dtype name", value=short(value)) from None


def _moe(cfg: _Cfg, model_type: str, n_layers: int) -> MoE | None:
    n_experts = cfg.int("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts",
                        why="MoE experts", default=0, low=0)
    if n_experts <= 1 or cfg.get("is_moe") is False:  # Doge: is_moe false keeps a dense MLP
        return None
    active = cfg.int("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_k",
                     "moe_topk", why="active experts", default=1)
    expert_inter = cfg.int("moe_intermediate_size", "expert_ffn_hidden_size", "intermediate_size",
                           why="expert size")
    shared = cfg.int("n_shared_experts", "num_shared_experts", "moe_num_shared_experts",
                     why="shared experts", default=0, low=0)
    shared_inter = cfg.int("shared_expert_intermediate_size",
                           "moe_shared_expert_intermediate_size",  # NemotronH
                           # MiniMax-M3 (modeling_minimax_m3_vl.py ``MiniMaxM3VLSparseMoeBlock
                           # .shared_experts``), Granite MoE shared (``shared_mlp``); 0: none
                           "shared_intermediate_size",
                           why="shared expert size", default=0, low=0)
    if model_type in {"llama4", "llama4_text"}:
        shared, shared_inter = 1, expert_inter
    if cfg.get("enable_moe_block") is True:  # Gemma 4: a dense MLP beside the experts in each layer
        shared, shared_inter = 1, cfg.int("intermediate_size", why="the dense MLP size")
    if shared_inter and not shared:
        shared = 1
    if shared and not shared_inter:
        shared_inter = expert_inter
    dense = 0
    if isinstance(cfg.get("mlp_layer_types"), list):  # "dense" / "sparse" per layer: what the
        # model builds from (transformers derives it from first_k_dense_replace when absent)
        dense = sum(1 for kind in cfg.get("mlp_layer_types") if kind == "dense")
    elif cfg.has("first_k_dense_replace"):
        dense = cfg.int("first_k_dense_replace", why="dense layers", low=0, high=MAX_LAYERS)
    elif cfg.has("interleave_moe_layer_step"):
        step = cfg.int("interleave_moe_layer_step", why="MoE interleave", default=1)
        dense = n_layers - n_layers // step
    elif cfg.has("expert_layer_period"):
        period = cfg.int("expert_layer_period", why="MoE period", default=1)
        dense = n_layers - n_layers // period
    elif isinstance(cfg.get("mlp_only_layers"), list):
        dense = len(cfg.get("mlp_only_layers"))
    elif cfg.has("num_dense_layers", "moe_layer_start_index"):  # AfMoE; ERNIE 4.5 MoE
        dense = cfg.int("num_dense_layers", "moe_layer_start_index", why="dense layers", low=0,
                        high=MAX_LAYERS)
    if active > n_experts:
        raise KVPlanError("config.bad_value", key="num_experts_per_tok",
                          expected=f"at most the {n_experts} experts", value=active)
    return MoE(n_experts=n_experts, n_active=active, n_shared=shared,
               expert_intermediate=expert_inter, shared_intermediate=shared_inter,
               n_dense_layers=min(dense, n_layers))


def estimate_params(arch: ModelArch) -> tuple[int, int | None, str]:
    """Parameter count from the architecture (weights only; biases and norms included roughly).

    embeddings ``V·h`` (+ an untied LM head ``V·h``); attention ``h·d·(H + 2·KV) + H·d·h``
    (MLA: q/kv low-rank projections); MLP ``3·h·I`` gated or ``2·h·I`` plain; MoE
    ``E·3·h·I_e + shared + router``; recurrent layers their in/out projections and conv.
    """
    h = arch.hidden_size
    embed = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    if arch.model_type == "opt":
        embed += ((arch.max_position_embeddings or 2048) + 2) * h
    cross = 0
    if arch.model_type in CROSS_ATTENTION_DECODERS:  # the decoder's encoder_attn: q, k, v, o
        cross = 4 * h * h
    mlp_mult = 3 if arch.gated_mlp else 2
    total = active = embed + h + _family_global_params(arch)
    moe = arch.moe
    moe_ids = set(arch.weights.moe_layers or ()) if moe is not None else set()
    reuse = dict(zip(arch.weights.kv_reuse_layers, arch.weights.kv_reuse_head_dims, strict=True))

    def is_moe(index: int) -> bool:  # the layers ``moe_layer_indices`` gives, as model_tensors
        if moe is None:
            return False
        return index in moe_ids if arch.weights.moe_layers is not None else \
            index >= moe.n_dense_layers

    for index, layer in enumerate(arch.layers):
        attn = mixer_params(layer, arch) + _family_layer_params(arch, layer, is_moe(index))
        if index in reuse:  # Gemma 4's KV-reusing layer: q_proj, q_norm, o_proj (WeightSpec)
            attn += 2 * h * arch.n_heads * reuse[index] + reuse[index]
            if arch.weights.kv_reuse_double_mlp:
                attn += mlp_mult * h * arch.intermediate_size
        if arch.parallel_mixers and isinstance(layer, Recurrent):
            total += attn  # the Mamba-2 branch of the decoder layer: its MLP and norms are counted
            active += attn  # with the attention entry (FalconH1ParallelHybrid)
            continue
        if arch.model_type in ONE_BLOCK_TYPES:
            # NemotronHBlock: a norm and one mixer (Mamba2 / attention, the MLP of a "-", or the
            # MoE of an "E": router, routed and shared experts, MLPs of up/down projections)
            if moe is not None and index in moe_ids and not layer.kind.caches:
                router = h * moe.n_experts
                shared = moe.n_shared * mlp_mult * h * moe.shared_intermediate
                per_expert = mlp_mult * h * moe.expert_intermediate
                total += router + shared + moe.n_experts * per_expert + h
                active += router + shared + moe.n_active * per_expert + h
                continue
            block = attn if layer.kind.caches else mlp_mult * h * arch.intermediate_size
            total += block + h
            active += block + h
        elif moe is not None and is_moe(index):
            router = h * moe.n_experts
            shared = moe.n_shared * 3 * h * moe.shared_intermediate
            per_expert = 3 * h * moe.expert_intermediate
            total += attn + router + shared + moe.n_experts * per_expert + 2 * h
            active += attn + router + shared + moe.n_active * per_expert + 2 * h
        elif arch.model_type in _PURE_RECURRENT_TYPES:  # MambaBlock: norm + mixer, no MLP
            total += attn + h
            active += attn + h
        else:
            dense = mlp_mult * h * arch.intermediate_size
            total += attn + cross + dense + 2 * h
            active += attn + cross + dense + 2 * h
    method = ("computed from config: embeddings + attention/mixer + MLP/MoE experts + norms"
              + ("" if arch.tie_word_embeddings else " + untied LM head"))
    return total, (active if moe is not None else None), method


GEMMA4_TYPES = {"gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text"}
_GATED_ATTENTION_TYPES = {"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"}
#: Families whose MoE block ends in its own RMSNorm of ``h`` (transformers 5.24 modeling_axk1.py
#: ``AXK1MoE.post_mlp_layernorm``: "A.X-K1's single delta" from DeepSeek-V3; the checkpoint
#: stores it as the layer's ``post_mlp_layernorm``) — AXK1Config's class default: 60 MoE layers
#: × 7,168 = 430,080 short of transformers' count before.
POST_MOE_NORM_TYPES = {"axk1"}
#: Families with a sigmoid output gate on every attention layer, a linear from ``h`` (transformers
#: 5.24): AfMoE (modeling_afmoe.py ``AfmoeAttention.gate_proj`` h × H·d), Beam (modeling_beam.py
#: ``gate_proj`` h × H·d and ``gate_bias`` H), Laguna (modeling_laguna.py ``g_proj``, width by
#: ``gating``), BailingHybrid's MLA layers (modeling_bailing_hybrid.py ``g_proj`` h × H) — found
#: by their class defaults' counts, short by exactly these.
ATTENTION_GATE_TYPES = {"afmoe": "channel", "beam": "channel", "laguna": "config",
                        "bailing_hybrid": "head"}
_ATTENTION_GATE_BIAS_TYPES = {"beam"}
#: Families whose router score-correction bias is an ``nn.Parameter`` (counted by transformers;
#: DeepSeek-V3's is a buffer): modeling_ernie4_5_moe.py ``moe_statics.e_score_correction_bias``,
#: modeling_laguna.py ``e_score_correction_bias``, modeling_afmoe.py ``expert_bias`` —
#: ``n_experts`` per MoE layer.
ROUTER_SCORE_BIAS_TYPES = {"ernie4_5_moe", "laguna", "afmoe"}
_SHARED_EXPERT_GATE_TYPES = {"qwen2_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"}
#: Four norms per decoder layer (Gemma 2/3/4 pre/post attention and feed-forward, AfMoE
#: ``AfmoeDecoderLayer``, Beam ``BeamDecoderLayer`` and Kolibri1 ``post_self_attn_layernorm`` /
#: ``post_mlp_layernorm`` the same — transformers 5.24; GLM-4
#: ``Glm4DecoderLayer`` adds ``post_self_attn_layernorm`` and ``post_mlp_layernorm``); one set
#: for both counts (``kvplan.weights`` stores these norms too).
FOUR_NORM_TYPES = {"gemma2", "gemma3", "gemma3_text", "glm4", *GEMMA4_TYPES, "afmoe", "beam",
                   "kolibri1"}
#: One norm per decoder layer, attention and MLP in parallel on its output (transformers
#: ``CohereDecoderLayer``, ``PhiDecoderLayer``: ``input_layernorm`` only); ``kvplan.weights``
#: stores one norm per layer for them too.
ONE_NORM_TYPES = {"cohere", "cohere2", "cohere2_moe", "phi"}
#: Norms without parameters (transformers modeling_olmo.py ``OlmoLayerNorm``:
#: ``F.layer_norm(..., None, None)``, no weight, no bias; vLLM olmo.py ``nn.LayerNorm(...,
#: elementwise_affine=False)``): OLMo-1's two norms per layer and final norm hold nothing
#: (OlmoConfig's default, OLMo-7B's shape: 266,240 = 65 × 4,096 over transformers 5.24's count
#: before this rule, tests/fixtures/conformance/olmo.json).
NON_PARAMETRIC_NORM_TYPES = {"olmo"}
#: Every linear and LayerNorm has a bias; GPT-2-style learned positions (``n_positions``).
_ALL_BIAS_TYPES = {"gpt2", "gpt-sw3", "gpt_bigcode", "opt", "openai-gpt", "biogpt"}
#: Learned position tables ``(P + offset)·h`` (OPT's is counted with its embeddings).
_LEARNED_POSITION_OFFSET = {"gpt2": 0, "gpt-sw3": 0, "gpt_bigcode": 0, "openai-gpt": 0, "biogpt": 2,
                            "gpt_neo": 0}


_BERT_LM_TYPES = {"bert", "camembert", "xlm-roberta", "data2vec-text", "ernie", "roberta"}
#: BART-style causal decoders: (learned position offset, or None for sinusoidal tables,
#: ``layernorm_embedding``, final ``layer_norm``).
_BART_DECODERS = {"bart": (2, True, False), "mbart": (2, True, True), "pegasus": (0, False, True),
                  "marian": (0, False, False), "plbart": (2, True, False), "mvp": (2, True, False)}


def _embedding_family_params(cfg: _Cfg, arch: ModelArch) -> int:
    """Encoder families' extra embeddings and biases (modeling_bert.py, modeling_bart.py).

    BERT-style LM heads: positions ``P·h``, token types ``T·h``, the embedding LayerNorm, the
    head's transform (``h² + h`` and a LayerNorm) and output bias ``V``; no final norm; every
    layer's biases (q, k, v, o, both MLP linears, both LayerNorms: ``7·h + I``). BART-style
    decoders: positions ``(P + offset)·h``, optional embedding and final LayerNorms, and per layer
    the self- and cross-attention biases, the MLP biases and three LayerNorms' biases
    (``13·h + I``). Falcon's new decoder architecture: two biased LayerNorms per layer
    (``2·h`` more). Gemma 4 per-layer embeddings (modeling_gemma4.py): ``embed_tokens_per_layer``
    ``V_ple × L·h_ple``, ``per_layer_model_projection`` ``h × L·h_ple`` and its norm, and per layer
    the input gate and projection (``2·h·h_ple``) and ``post_per_layer_input_norm``.
    """
    h, layers, inter = arch.hidden_size, arch.n_layers, arch.intermediate_size
    positions = arch.max_position_embeddings or 0
    if arch.model_type in _BERT_LM_TYPES:
        types = cfg.int("type_vocab_size", why="token types", default=2, low=0)
        return (positions * h + types * h + 2 * h - h + h * h + 3 * h + arch.vocab_size
                + layers * (7 * h + inter))
    if arch.model_type == "falcon" and cfg.get("new_decoder_architecture"):
        return layers * 2 * h  # ln_attn and ln_mlp, each with a bias (FalconDecoderLayer)
    ple = cfg.int("hidden_size_per_layer_input", why="per-layer input size", default=0, low=0)
    if arch.model_type in GEMMA4_TYPES and ple:  # Gemma4TextModel per-layer embeddings (PLE)
        ple_vocab = cfg.int("vocab_size_per_layer_input", why="per-layer vocabulary",
                            default=arch.vocab_size, high=10_000_000)
        return (ple_vocab * layers * ple + h * layers * ple + ple
                + layers * (2 * h * ple + h))
    if arch.model_type in _BART_DECODERS:
        offset, emb_norm, final_norm = _BART_DECODERS[arch.model_type]
        return ((positions + offset) * h + 2 * h * emb_norm + 2 * h * final_norm - h
                + layers * (13 * h + inter))
    return 0


def _family_global_params(arch: ModelArch) -> int:
    """Model-level parameters some families add: learned positions, the final norm's bias."""
    h = arch.hidden_size
    extra = -h if arch.model_type in NON_PARAMETRIC_NORM_TYPES else 0  # no final norm weight
    if arch.model_type in _LEARNED_POSITION_OFFSET:  # GPT2Model.wpe and the like
        extra += ((arch.max_position_embeddings or 1024) + _LEARNED_POSITION_OFFSET[arch.model_type]) * h
    if arch.model_type == "openai-gpt":  # no final LayerNorm
        extra -= h
    elif arch.model_type in _ALL_BIAS_TYPES or arch.model_type in {"falcon", "gpt_neo"}:
        extra += h  # the final LayerNorm's bias
    elif arch.model_type in ALWAYS_BIAS_TYPES:
        # PhiModel.final_layernorm's bias and PhiForCausalLM's lm_head bias (``bias=True``)
        extra += h + arch.vocab_size
    return extra


def _family_layer_params(arch: ModelArch, layer: LayerSpec, moe_layer: bool) -> int:
    """Per-layer parameters beyond the generic formula, read from each family's modeling file.

    qwen3/gemma3 ``q_norm``/``k_norm`` (2·d); qwen2 q/k/v biases ((H + 2·KV)·d); Qwen3-Next
    gated attention (``q_proj`` doubled: H·d·h) and ``shared_expert_gate`` (h); Gemma 2/3
    pre/post-feedforward norms (2·h); Cohere's single LayerNorm per layer (−h); gpt-oss attention
    and expert biases, sinks and router bias; GPT-2/OPT biases on every linear and LayerNorm.
    """
    h, kind = arch.hidden_size, arch.model_type
    extra = 0
    if kind in FOUR_NORM_TYPES:
        extra += 2 * h
    if kind in ONE_NORM_TYPES:
        extra -= h
    if kind in NON_PARAMETRIC_NORM_TYPES:
        extra -= 2 * h
    if moe_layer and kind in _SHARED_EXPERT_GATE_TYPES and arch.moe and arch.moe.n_shared:
        extra += h
    if moe_layer and kind in POST_MOE_NORM_TYPES:
        extra += h
    if moe_layer and arch.weights.router_score_bias and arch.moe:
        extra += arch.moe.n_experts
    if isinstance(layer, (Attention, MLA)) and arch.weights.attn_gate:
        heads = layer.n_heads if isinstance(layer, MLA) else arch.n_heads
        width = heads if arch.weights.attn_gate == "head" else heads * (
            layer.v_head_dim if isinstance(layer, MLA) else layer.head_dim_v)
        extra += h * width + (heads if arch.weights.attn_gate_bias else 0)
    if isinstance(layer, Attention):
        q, kv = arch.n_heads * layer.head_dim_k, layer.n_kv_heads * (layer.head_dim_k + layer.head_dim_v)
        if arch.weights.qk_norm_full:
            extra += (arch.n_heads + layer.n_kv_heads) * layer.head_dim_k
        elif arch.weights.qk_norm:
            extra += 2 * layer.head_dim_k
        if kind in _QKV_BIAS_TYPES or (kind in _QKV_BIAS_IF_SET_TYPES and arch.weights.attention_bias):
            extra += q + kv
        if kind in ALWAYS_BIAS_TYPES:  # PhiAttention q/k/v/dense, PhiMLP fc1/fc2 and the
            extra += q + kv + h + arch.intermediate_size + h + h  # input LayerNorm's biases
        if kind in _GATED_ATTENTION_TYPES:
            extra += q * h
        if has_sinks(arch, layer):
            extra += arch.n_heads
        extra += sum(size for _, size in layer_vectors(arch, layer))
        if kind == "gpt_oss" and arch.moe:
            moe = arch.moe
            extra += q + kv + h + moe.n_experts * (1 + 2 * moe.expert_intermediate + h)
        if kind in _ALL_BIAS_TYPES:  # attention, MLP and both LayerNorms' biases
            extra += q + kv + h + arch.intermediate_size + h + 2 * h
        if kind == "gpt_neo":  # no q/k/v biases
            extra += h + arch.intermediate_size + h + 2 * h
    return extra


#: Families whose attention layers hold one learned sink logit per query head (``sinks``,
#: ``num_attention_heads`` values): on every attention layer, or on the sliding ones only.
#: transformers 5.24 modeling_gpt_oss.py ``GptOssAttention``, modeling_flint.py
#: ``FlintAttention``, modeling_granite_swa.py / modeling_granitemoe_swa.py (every layer);
#: modeling_mimo_v2_flash.py ``MiMoV2FlashAttention`` (``if is_swa``) — found by their class
#: defaults' counts, short by exactly layers × heads (mimo_v2_flash 39 × 64 = 2,496).
SINK_TYPES: dict[str, str] = {"gpt_oss": "all", "flint": "all", "granite_swa": "all",
                              "granitemoe_swa": "all", "mimo_v2_flash": "sliding"}


def layer_vectors(arch: ModelArch, layer: LayerSpec) -> list[tuple[str, int]]:
    """Small per-layer vectors some families add to an attention decoder layer (name under the
    layer, elements), counted by both ``estimate_params`` and ``kvplan.weights`` (transformers
    5.24): Apertus' xIELU activation ``mlp.act_fn.alpha_p`` / ``alpha_n`` (modeling_apertus.py,
    one value each); BitNet's ``self_attn.attn_sub_norm`` (h) and ``mlp.ffn_sub_norm`` (I)
    (modeling_bitnet.py); DiffLlama's ``lambda_q1/k1/q2/k2`` (head_dim each,
    modeling_diffllama.py) — found by their class defaults' counts, short by exactly these."""
    if not isinstance(layer, Attention):
        return []
    kind = arch.model_type
    if kind in {"apertus", "apertus1p5", "apertus1p5_text"}:
        return [("mlp.act_fn.alpha_p", 1), ("mlp.act_fn.alpha_n", 1)]
    if kind == "bitnet":
        return [("self_attn.attn_sub_norm", arch.hidden_size),
                ("mlp.ffn_sub_norm", arch.intermediate_size)]
    if kind == "diffllama":
        return [(f"self_attn.lambda_{x}", layer.head_dim_k) for x in ("q1", "k1", "q2", "k2")]
    return []


def has_sinks(arch: ModelArch, layer: LayerSpec) -> bool:
    """Whether this attention layer stores per-head sinks (``SINK_TYPES``)."""
    where = SINK_TYPES.get(arch.model_type)
    return isinstance(layer, Attention) and where is not None and (
        where == "all" or layer.kind == Kind.SLIDING)


def mixer_params(layer: LayerSpec, arch: ModelArch) -> int:
    """Parameters of one layer's token mixer (attention, MLA or recurrent block), no MLP."""
    h = arch.hidden_size
    if isinstance(layer, Attention):
        return h * layer.head_dim_k * (arch.n_heads + layer.n_kv_heads) + \
            h * layer.head_dim_v * layer.n_kv_heads + arch.n_heads * layer.head_dim_v * h
    if isinstance(layer, MLA):
        qk = layer.qk_nope_head_dim + layer.qk_rope_head_dim
        q_lora = layer.q_lora_rank
        q = (h * q_lora + q_lora + q_lora * layer.n_heads * qk) if q_lora else h * layer.n_heads * qk
        kv = h * (layer.kv_lora_rank + layer.qk_rope_head_dim) + layer.kv_lora_rank + \
            layer.kv_lora_rank * layer.n_heads * (layer.qk_nope_head_dim + layer.v_head_dim)
        return q + kv + layer.n_heads * layer.v_head_dim * h
    if isinstance(layer, Recurrent):
        if layer.params is not None:
            return layer.params
        if layer.variant == "mamba1":
            d_inner, d_state = layer.conv_channels, layer.ssm_elements // layer.conv_channels
            dt_rank = -(-h // 16)
            return (h * 2 * d_inner + d_inner * layer.conv_kernel + d_inner * (dt_rank + 2 * d_state)
                    + dt_rank * d_inner + d_inner * d_state + d_inner * h)
        return 2 * h * layer.conv_channels + layer.conv_channels * layer.conv_kernel
    return 0


#: Model families whose q/k/v projections carry a bias by default (Qwen2 ``Qwen2Attention``).
_QKV_BIAS_TYPES = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text",
                   "qwen2_5_vl_text"}
#: Families with biases on every linear layer (OPT, GPT-NeoX).
_ALL_BIAS_TYPES = {"opt", "gpt_neox"}
#: Families whose q/k/v projections carry a bias when ``attention_bias`` says so and whose o_proj
#: never does (transformers modeling_glm.py / modeling_glm4.py / modeling_glm4_moe.py: q/k/v
#: ``bias=config.attention_bias``, ``o_proj`` ``bias=False``; vLLM glm4_moe.py the same) — found
#: by zai-org/GLM-4.7's count, 1,342,464 = 92 layers × (12,288 + 2 × 1,024) q/k/v biases + the
#: 256 of its per-head q/k norms short of transformers 5.24's.
_QKV_ONLY_BIAS_TYPES = {"glm", "glm4", "glm4_moe"}
#: Families whose q/k/v biases follow ``attention_bias`` (the o_proj's, where the config has
#: one, ``attention_out_bias``: transformers 5.24 modeling_seed_oss.py ``SeedOssAttention`` —
#: Seed-OSS' class default holds q/k/v biases, 64 × (10,240 + 2 × 1,024) = 786,432, and no o_proj
#: bias).
_QKV_BIAS_IF_SET_TYPES = {*_QKV_ONLY_BIAS_TYPES, "seed_oss"}
#: Families with per-head q/k RMSNorms only when the config sets ``use_qk_norm`` (transformers
#: modeling_glm4_moe.py ``Glm4MoeAttention``; vLLM glm4_moe.py the same): GLM-4.5/4.6/4.7 set it,
#: GLM-4.5-Air does not.
_QK_NORM_IF_SET_TYPES = {"glm4_moe"}
#: ``attention_bias`` where the config leaves it out: the config class's default
#: (``GlmConfig``/``Glm4Config``: True; ``Glm4MoeConfig``: False).
_ATTENTION_BIAS_DEFAULT = {"glm": True, "glm4": True}
#: Families whose attention and MLP linears always carry a bias, whatever ``attention_bias`` says
#: (transformers modeling_phi.py: ``PhiAttention`` q/k/v/dense ``bias=True``, ``PhiMLP`` fc1/fc2,
#: ``PhiForCausalLM.lm_head`` ``bias=True``, LayerNorms with a bias) — found by microsoft/phi-1,
#: whose config.json says ``attention_bias: false``: 494,711 short of transformers 5.24's count
#: (24 × 18,432 + 2,048 + 50,295).
ALWAYS_BIAS_TYPES = {"phi"}
#: Families with RMSNorm on each head's q and k (Qwen3 ``q_norm``/``k_norm``, Gemma 3; Qwen3.5's
#: full-attention layers, transformers modeling_qwen3_5.py ``Qwen3_5Attention``; EXAONE 4.0,
#: modeling_exaone4.py ``Exaone4Attention`` — found by LGAI-EXAONE/EXAONE-4.0-32B's count, 16,384
#: = 64 layers × 2 × 128 below transformers'; MiniMax-M3, modeling_minimax_m3_vl.py
#: ``MiniMaxM3VLAttention`` ``q_norm``/``k_norm`` of ``head_dim``: 60 × 2 × 128 = 15,360;
#: Gemma 4 unified, modeling_gemma4_unified.py ``Gemma4UnifiedTextAttention``: 2 × (25 × 256 +
#: 5 × 512) = 17,920 in its class default; Flint, modeling_flint.py ``FlintAttention``: 49 × 2 ×
#: 128 = 12,544; modeling_exaone_moe.py, modeling_hy_v3.py, modeling_mellum.py the same: their
#: class defaults' counts short by exactly layers × 2 × head_dim). (One set: an
#: earlier second definition with the Qwen3.5 types was shadowed by this one.)
_QK_NORM_TYPES = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text",
                  "qwen3_5_moe_text", "qwen3_vl_text", "qwen3_vl_moe_text", "gemma3", "gemma3_text",
                  "gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text", "exaone4",
                  "minimax_m3_vl", "minimax_m3_vl_text", "flint", "exaone_moe", "hy_v3",
                  "mellum", "afmoe", "beam", "laguna", "apertus", "apertus1p5", "apertus1p5_text",
                  "kolibri1", "sarvam_moe"}
#: Families whose q/k RMSNorm spans the whole projection, whatever the config says (transformers
#: modeling_minimax_m2.py ``MiniMaxM2Attention``: ``q_norm`` of ``heads × head_dim``, ``k_norm`` of
#: ``kv_heads × head_dim``, built unconditionally; vLLM minimax_m2.py ``MiniMaxM2Attention`` the
#: same). The Hub's transformers-5 MiniMax-M2 config drops ``use_qk_norm``/``qk_norm_type``; the
#: norms are there all the same. The OLMo family likewise: transformers modeling_olmo2.py
#: ``Olmo2Attention`` (``q_norm`` of ``num_attention_heads × head_dim``, ``k_norm`` of
#: ``num_key_value_heads × head_dim``; modeling_olmo3.py, modeling_olmoe.py ``OlmoeAttention`` and
#: modeling_flex_olmo.py the same; vLLM olmo2.py ``Olmo2Attention``, olmoe.py the same) — found by
#: allenai/OLMo-2-1124-13B's count, 399,360 parameters below transformers' (40 layers × (2 × 5,120
#: − 2 × 128)).
_QK_NORM_FULL_TYPES = {"minimax_m2", "olmo2", "olmo3", "olmoe", "flex_olmo"}


def moe_layer_indices(cfg: _Cfg, n_layers: int, moe: MoE, model_type: str = "") -> tuple[int, ...]:
    """Decoder layers that hold experts, as each family's modeling file decides.

    One-block families (NemotronH, ``ONE_BLOCK_TYPES``): the layers whose block is the MoE — an
    ``E`` of ``hybrid_override_pattern`` or a ``moe`` of ``layers_block_type`` (transformers 5.24
    modeling_nemotron_h.py ``NemotronHBlock``: ``mixer`` is ``NemotronHMoE`` only for "moe"; an
    "mlp" block is a dense ``NemotronHMLP``; vLLM nemotron_h.py ``NemotronHMoEDecoderLayer`` for
    "E" only) — found by NemotronHConfig's class default (one block each of Mamba2, MoE,
    attention, MLP), whose MLP block was counted as a MoE: 390,692,864 over transformers' count.
    DeepSeek ``first_k_dense_replace`` (layers ≥ k); Llama 4 ``interleave_moe_layer_step``
    (``(i + 1) % step == 0``); Qwen MoE ``decoder_sparse_step`` and ``mlp_only_layers``
    (``Qwen3MoeDecoderLayer``); Jamba ``expert_layer_period``/``expert_layer_offset``.
    """
    if model_type in ONE_BLOCK_TYPES:
        return tuple(i for i, kind in enumerate(_layer_types(cfg, model_type, n_layers))
                     if kind == "moe")
    kinds = cfg.get("mlp_layer_types")
    if isinstance(kinds, list) and not isinstance(cfg.get("mlp_only_layers"), list):
        # "dense" / "sparse" per layer, as ``_moe`` counts them (transformers 5.24
        # modeling_kimi_linear.py ``KimiLinearDecoderLayer``: ``KimiLinearMoE`` where
        # ``mlp_layer_types[i] == "sparse"``; BailingHybrid the same, over its
        # first_k_dense_replace) — found by KimiLinearConfig's class default, whose dense first
        # layer was stored as a MoE by ``model_tensors``: 1,755,906,048 over.
        return tuple(i for i, kind in enumerate(kinds) if kind != "dense")
    if cfg.has("first_k_dense_replace"):
        return tuple(range(moe.n_dense_layers, n_layers))
    if cfg.has("interleave_moe_layer_step"):
        step = cfg.int("interleave_moe_layer_step", why="MoE interleave", default=1)
        return tuple(i for i in range(n_layers) if (i + 1) % step == 0)
    if cfg.has("expert_layer_period"):
        period = cfg.int("expert_layer_period", why="MoE period", default=1)
        offset = cfg.int("expert_layer_offset", why="MoE offset", default=1, low=0)
        return tuple(i for i in range(n_layers) if i % period == offset)
    only = cfg.get("mlp_only_layers")
    if not isinstance(only, list) and cfg.has("num_dense_layers", "moe_layer_start_index"):
        # AfMoE ``num_dense_layers``, ERNIE 4.5 ``moe_layer_start_index``: the first layers
        # dense, as ``_moe`` counts them (they were stored as MoE layers by ``model_tensors``)
        return tuple(range(moe.n_dense_layers, n_layers))
    step = cfg.int("decoder_sparse_step", why="MoE layer step", default=1)
    dense = set(only) if isinstance(only, list) else set()
    return tuple(i for i in range(n_layers) if i not in dense and (i + 1) % step == 0)


#: Canonical layer specs shared by every parsed config (bounded; oldest dropped first), so equal
#: specs are one object and models parsed twice compare by identity, not field by field.
_CANONICAL_LAYERS: dict[Any, Any] = {}
_MAX_CANONICAL_LAYERS = 4096


def _interned(layers: list[Any]) -> tuple[Any, ...]:
    """The layers with every equal spec the same object (across configs too), so later comparisons
    are identity checks (a 10,000-layer config holds a handful of distinct specs)."""
    out = []
    for layer in layers:
        canonical = _CANONICAL_LAYERS.get(layer)
        if canonical is None:
            if len(_CANONICAL_LAYERS) >= _MAX_CANONICAL_LAYERS:
                _CANONICAL_LAYERS.pop(next(iter(_CANONICAL_LAYERS)))
            canonical = _CANONICAL_LAYERS[layer] = layer
        out.append(canonical)
    return tuple(out)


#: Checkpoints (outer ``model_type``) whose vision tower has the Qwen-VL layout, sized to the
#: parameter by ``weights._qwen_vl_tower``.
_QWEN_VL_TOWERS: dict[str, Literal["qwen2_5_vl", "qwen3_vl"]] = {
    "qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_moe": "qwen3_vl",
    "qwen3_5": "qwen3_vl", "qwen3_5_moe": "qwen3_vl"}


#: Qwen2.5-VL's vision config class defaults, which transformers and vLLM apply to a
#: ``vision_config`` that leaves a key out (the Hub's Qwen2.5-VL-72B-Instruct-AWQ states only
#: hidden_size, intermediate_size, out_hidden_size and the patch keys): transformers 5.24
#: ``configuration_qwen2_5_vl.py`` ``Qwen2_5_VLVisionConfig.__init__``. (The Qwen3-VL / 3.5 towers
#: are read as stated: their configs state every key, and Qwen3.5's class defaults differ.)
_QWEN2_5_VL_VISION_DEFAULTS: dict[str, Any] = {
    "depth": 32, "hidden_size": 3584, "hidden_act": "silu", "intermediate_size": 3420, "num_heads": 16,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "out_hidden_size": 3584}


def _tower(raw: Any, name: str, text_hidden: int, outer_type: str = "",
           merge_size: int = 1) -> VisionSpec | None:
    """A vision/audio encoder from ``vision_config``/``audio_config`` (ViT shape, see weights.py;
    the Qwen-VL towers by their own layout, ``_QWEN_VL_TOWERS``).

    A tower whose width or depth the config does not state under these keys is not estimated
    (checkpoint headers give its exact bytes)."""
    if not isinstance(raw, dict):
        return None
    if name == "vision" and outer_type == "kimi_k25":
        return _moonvit_tower(raw, text_hidden)
    if name == "vision" and outer_type == "gemma3" and raw.get("model_type") == "siglip_vision_model":
        tower = _tower(raw, name, text_hidden)
        return None if tower is None else tower.model_copy(update={"layout": "gemma3"})
    if name == "vision" and outer_type == "mistral3" and raw.get("model_type") == "pixtral":
        tower = _tower(raw, name, text_hidden)
        return None if tower is None else tower.model_copy(update={
            "layout": "mistral3", "projector_merge": merge_size, "positions": 0})
    layout: Literal["vit", "qwen2_5_vl", "qwen3_vl"] = \
        _QWEN_VL_TOWERS.get(outer_type, "vit") if name == "vision" else "vit"
    if layout == "qwen2_5_vl":  # a key the file leaves out is its vision config class's default
        raw = {**_QWEN2_5_VL_VISION_DEFAULTS, **raw}
    vc = _Cfg(raw)
    if not vc.has("hidden_size", "embed_dim") or not vc.has("num_hidden_layers", "depth", "num_layers"):
        return None
    hidden = vc.int("hidden_size", "embed_dim", why=f"the {name} tower width")
    layers = vc.int("num_hidden_layers", "depth", "num_layers", why=f"the {name} tower depth",
                     high=MAX_LAYERS)
    inter = vc.int("intermediate_size", why=f"the {name} tower MLP size", default=4 * hidden)
    patch = vc.int("patch_size", why=f"the {name} patch size", default=14)
    image = vc.int("image_size", why=f"the {name} image size", default=0, low=0)
    positions = vc.int("position_embedding_size", "num_position_embeddings",
                        why=f"the {name} positions", default=(image // patch) ** 2 if image else 0,
                        low=0, high=10**8)
    merge = vc.int("spatial_merge_size", why="the vision merger", default=1)
    out = vc.int("out_hidden_size", "projector_output_dim", why="the projector size",
                  default=text_hidden)
    act = str(raw.get("hidden_act") or raw.get("hidden_activation") or "")
    deep = raw.get("deepstack_visual_indexes")
    return VisionSpec(hidden_size=hidden, intermediate_size=inter,
                      n_layers=layers, patch_size=patch,
                      in_channels=vc.int("num_channels", "in_channels", "in_chans",
                                          why="image channels", default=3),
                      positions=positions, gated_mlp=act == "silu", projector_out=out,
                      projector_merge=merge, name=name, layout=layout,
                      temporal_patch=vc.int("temporal_patch_size", why="the temporal patch size",
                                            default=1) if layout != "vit" else 1,
                      deepstack=len(deep) if layout == "qwen3_vl" and isinstance(deep, list) else 0,
                      heads=vc.int("num_heads", "num_attention_heads", why=f"the {name} heads",
                                   default=0, low=0))


def _moonvit_tower(raw: dict[str, Any], text_hidden: int) -> VisionSpec | None:
    """Kimi-K2.5's MoonViT from its ``vt_*`` keys (transformers ``modeling_kimi_k25.py``
    ``Kimi_K25VisionModel`` and ``mm_projector``; vLLM ``kimi_k25.py``): ViT blocks with biases and
    LayerNorms, a patch Conv2d with bias, learned positions ``init_pos_emb_height ×
    init_pos_emb_width``, a final LayerNorm, and the patch-merger projector over
    ``merge_kernel_size`` patches (pre-norm, in/out projections with biases)."""
    vc = _Cfg(raw)
    if not vc.has("vt_hidden_size") or not vc.has("vt_num_hidden_layers"):
        return None
    hidden = vc.int("vt_hidden_size", why="the vision tower width")
    kernel = raw.get("merge_kernel_size") or [1, 1]
    if not (isinstance(kernel, list) and len(kernel) == 2 and kernel[0] == kernel[1]
            and isinstance(kernel[0], int) and 1 <= kernel[0] <= 16):
        raise KVPlanError("config.bad_value", key="merge_kernel_size",
                          expected="a square kernel [k, k]", value=short(kernel))
    return VisionSpec(
        hidden_size=hidden, layout="moonvit",
        intermediate_size=vc.int("vt_intermediate_size", why="the vision MLP size", default=4 * hidden),
        n_layers=vc.int("vt_num_hidden_layers", why="the vision tower depth", high=MAX_LAYERS),
        patch_size=vc.int("patch_size", why="the vision patch size", default=14),
        positions=vc.int("init_pos_emb_height", why="the vision positions", default=0, low=0,
                         high=10**4) * vc.int("init_pos_emb_width", why="the vision positions",
                                              default=0, low=0, high=10**4),
        projector_out=vc.int("text_hidden_size", why="the projector size", default=text_hidden),
        projector_merge=kernel[0], name="vision")


def _weight_spec(cfg: _Cfg, outer: _Cfg, model_type: str, n_layers: int, moe: MoE | None,
                 hidden: int) -> WeightSpec:
    """What the checkpoint stores besides the cache-relevant layer shapes (``kvplan.weights``)."""
    quant = outer.get("quantization_config", "compression_config") or cfg.get(
        "quantization_config", "compression_config")
    if quant is not None and not isinstance(quant, dict):
        raise KVPlanError("config.bad_value", key="quantization_config", expected="an object",
                          value=short(quant))
    bias = cfg.get("attention_bias")
    if bias is None:
        bias = _ATTENTION_BIAS_DEFAULT.get(model_type)
    all_bias = model_type in _ALL_BIAS_TYPES or model_type in ALWAYS_BIAS_TYPES
    towers = tuple(t for t in (_tower(outer.get("vision_config"), "vision", hidden,
                                      str(outer.get("model_type") or ""),
                                      outer.int("spatial_merge_size", why="the patch merger",
                                                default=1, high=16)),
                               _tower(outer.get("audio_config"), "audio", hidden)) if t is not None)
    names = {"mixtral": ("block_sparse_moe", "gate"), "gpt_oss": ("mlp", "router"),
             "llama4": ("feed_forward", "router"), "llama4_text": ("feed_forward", "router")}
    mlp_name, router_name = names.get(model_type, ("mlp", "gate"))
    qk_full = model_type in _QK_NORM_FULL_TYPES
    return WeightSpec(
        moe_layers=moe_layer_indices(cfg, n_layers, moe, model_type) if moe is not None else None,
        attention_bias=all_bias or model_type in _QKV_BIAS_TYPES or bias is True,
        attention_out_bias=all_bias or (cfg.get("attention_out_bias") is True
                                        if cfg.has("attention_out_bias") else
                                        bias is True and model_type not in _QKV_ONLY_BIAS_TYPES),
        mlp_bias=all_bias or cfg.get("mlp_bias") is True,
        qk_norm=model_type in _QK_NORM_TYPES or qk_full
        or (model_type in _QK_NORM_IF_SET_TYPES and cfg.get("use_qk_norm") is True),
        qk_norm_full=qk_full,
        expert_bias=model_type == "gpt_oss",
        mtp_layers=cfg.int("num_nextn_predict_layers", why="MTP layers", default=0, low=0,
                           high=MAX_LAYERS),
        per_layer_vocab=cfg.int("vocab_size_per_layer_input", why="per-layer embeddings",
                                default=0, low=0, high=10_000_000)
        if cfg.get("hidden_size_per_layer_input") else 0,
        per_layer_size=cfg.int("hidden_size_per_layer_input", why="per-layer embeddings",
                               default=0, low=0),
        towers=towers,
        quantization=json.dumps(quant, sort_keys=True) if quant is not None else None,
        mlp_name=mlp_name, router_name=router_name,
        attn_gate=_attention_gate(cfg, model_type),
        attn_gate_bias=model_type in _ATTENTION_GATE_BIAS_TYPES,
        router_score_bias=model_type in ROUTER_SCORE_BIAS_TYPES,
    )


def _attention_gate(cfg: _Cfg, model_type: str) -> Literal["", "head", "channel"]:
    """The attention output gate's width (``ATTENTION_GATE_TYPES``); Laguna's follows ``gating``
    (modeling_laguna.py: per head when ``gating`` is true or "per-head", else per channel)."""
    gate = ATTENTION_GATE_TYPES.get(model_type, "")
    if gate == "config":
        gating = cfg.get("gating")
        return "head" if gating is True or gating == "per-head" else "channel"
    return "channel" if gate == "channel" else "head" if gate == "head" else ""
