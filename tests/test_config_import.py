"""config.json import: every fixture's layer kinds (counted by hand from the config), every preset,
and bad input → KVPlanError naming the key (never another exception type)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.config_import import parse_config
from kvplan.errors import KVPlanError
from kvplan.presets import load_model, model_presets

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


#: Expected kind counts, worked out from each config by hand:
#: gemma2 (i+1)%2 → sliding at even i; gemma3 (i+1)%6 → full at i = 5, 11, …; llama4 no_rope_layers
#: default int((i+1)%4 != 0) → 12 NoPE full; qwen3_next (i+1)%4 → 12 full; jamba i%8 == 4 → 4 attention;
#: qwen2/qwen3 use_sliding_window false → all full; Mistral v0.1 / Phi-3 sliding_window → all sliding.
EXPECTED: dict[str, dict[str, int]] = {
    "cohere": {"full": 32},
    "deepseek_v2": {"mla": 60},
    "deepseek_v3": {"mla": 61},
    "falcon": {"full": 32},
    "falcon_40b": {"full": 60},
    "gemma": {"full": 18},
    "gemma2": {"sliding": 21, "full": 21},
    "gemma3": {"sliding": 52, "full": 10},
    "gemma3_text": {"sliding": 22, "full": 4},
    "gpt_neox": {"full": 32},
    "gpt_oss": {"sliding": 18, "full": 18},
    "jamba": {"recurrent": 28, "full": 4},
    "kimi_k2": {"mla": 61},
    "llama": {"full": 32},
    "llama4": {"chunked": 36, "full": 12},
    "llama4_text": {"chunked": 36, "full": 12},
    "mistral": {"sliding": 32},
    "llama3-8B-eagle3": {"full": 1},  # an EAGLE3 head: one Llama decoder layer (test_vllm_spec_decode)
    "mixtral": {"full": 32},
    "opt": {"full": 40},
    "phi3": {"sliding": 32},
    "qwen2": {"full": 28},
    "qwen2_moe": {"full": 28},
    "qwen3": {"full": 36},
    "qwen3_moe": {"full": 94},
    "qwen3_next": {"recurrent": 36, "full": 12},
    "starcoder2": {"sliding": 32},
}


def _fixture_params():
    params = []
    for path in sorted(CONFIGS.glob("*.json")):
        params.append(pytest.param(path, id=path.stem))
    return params


def test_every_fixture_has_an_expectation():
    assert {p.stem for p in CONFIGS.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("path", _fixture_params())
def test_fixture_kind_counts(path):
    arch = parse_config(path.read_bytes())
    assert arch.kind_counts() == EXPECTED[path.stem]
    assert arch.n_layers == sum(EXPECTED[path.stem].values())


def test_gemma3_pattern_positions():
    """gemma3_text (1B): 26 layers, pattern 6 → full exactly at i = 5, 11, 17, 23; window 512."""
    arch = parse_config((CONFIGS / "gemma3_text.json").read_text())
    assert [i for i, layer in enumerate(arch.layers) if layer.kind == "full"] == [5, 11, 17, 23]
    assert {layer.window for layer in arch.layers if layer.kind == "sliding"} == {512}


def test_jamba_fixture_layers():
    """Jamba-1.5-Mini: attention at i % 8 == 4 → 4, 12, 20, 28; Mamba-1 d_inner = 2 × 4096 = 8,192,
    state 8,192 × 16 = 131,072 elements, kernel 4."""
    arch = parse_config((CONFIGS / "jamba.json").read_text())
    assert [i for i, layer in enumerate(arch.layers) if layer.kind == "full"] == [4, 12, 20, 28]
    rec = arch.layers[0]
    assert (rec.variant, rec.conv_channels, rec.conv_kernel, rec.ssm_elements) == ("mamba1", 8192, 4, 131_072)


def test_head_dims_from_configs():
    """head_dim key wins over hidden/heads (Gemma-2-9B 256 ≠ 3584/16 = 224); else hidden/heads
    (GPT-NeoX 2560/32 = 80); Falcon-40B new arch: 8 KV heads, HF caches all 128."""
    g2 = parse_config((CONFIGS / "gemma2.json").read_text())
    assert (g2.layers[0].n_kv_heads, g2.layers[0].head_dim_k) == (8, 256)
    neox = parse_config((CONFIGS / "gpt_neox.json").read_text())
    assert (neox.layers[0].n_kv_heads, neox.layers[0].head_dim_k) == (32, 80)
    f40 = parse_config((CONFIGS / "falcon_40b.json").read_text())
    assert (f40.layers[0].n_kv_heads, f40.layers[0].hf_cached_heads) == (8, 128)


@pytest.mark.parametrize("preset_id", sorted(model_presets()))
def test_every_preset_loads(preset_id):
    preset = model_presets()[preset_id]
    arch = load_model(preset_id)
    config = preset.config
    if not config.get("num_hidden_layers"):
        config = config["text_config"]
    assert arch.n_layers == config["num_hidden_layers"]
    assert arch.params_total == preset.params_total
    assert arch.name == preset.name


def test_new_presets_layer_kinds():
    """gemma-3-27b: 62 layers, full at i % 6 == 5 → 10 full + 52 sliding (W=1024);
    jamba-1.5-mini: 4 attention + 28 Mamba; active params from the model card."""
    g3 = load_model("gemma-3-27b")
    assert g3.kind_counts() == {"sliding": 52, "full": 10}
    assert {layer.window for layer in g3.layers if layer.kind == "sliding"} == {1024}
    jamba = load_model("jamba-1.5-mini")
    assert jamba.kind_counts() == {"recurrent": 28, "full": 4}
    assert (jamba.params_total, jamba.params_active) == (52_000_000_000, 12_000_000_000)


# --- bad input ----------------------------------------------------------------------------------

BASE = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 128}


def _without(key):
    return {k: v for k, v in BASE.items() if k != key}


@pytest.mark.parametrize(("raw", "code", "named"), [
    (_without("num_hidden_layers"), "config.missing_key", "num_hidden_layers"),
    ({**BASE, "num_attention_heads": 0}, "config.bad_value", "num_attention_heads"),
    ({**BASE, "num_key_value_heads": 0}, "config.bad_value", "num_key_value_heads"),
    ({**BASE, "num_key_value_heads": 8}, "config.bad_value", "num_key_value_heads"),
    ({**BASE, "num_hidden_layers": "32"}, "config.bad_value", "num_hidden_layers"),
    ({**BASE, "hidden_size": 1.5}, "config.bad_value", "hidden_size"),
    ({**BASE, "layer_types": ["full_attention"] * 3}, "config.bad_value", "layer_types"),
    ({**BASE, "layer_types": "full_attention"}, "config.bad_value", "layer_types"),
    ({**BASE, "layer_types": ["sliding_attention"] * 4}, "config.missing_key", "sliding_window"),
    ({**BASE, "sliding_window": 0}, "config.bad_value", "sliding_window"),
    ({**BASE, "model_type": "qwen3_next"}, "config.missing_key", "linear_num_value_heads"),
    ({**_without("hidden_size"), "num_attention_heads": 3, "hidden_size": 64}, "config.missing_key",
     "head_dim"),
])
def test_bad_config_names_the_key(raw, code, named):
    with pytest.raises(KVPlanError) as err:
        parse_config(json.dumps(raw))
    assert err.value.code == code
    assert f"'{named}'" in str(err.value)
    assert err.value.field == named


@pytest.mark.parametrize(("raw", "code"), [
    ("{not json", "config.not_json"),
    ("", "config.not_json"),
    ("[1, 2, 3]", "config.not_object"),
    ('"a string"', "config.not_object"),
    (b"\xff\xfe{\x00", "config.not_utf8"),
    (b'{"model_type": "llama", "name": "\xe9"}', "config.not_utf8"),
    ("[" * 5000 + "]" * 5000, "config.too_deep"),
    (" " * 2_000_001, "config.too_large"),
])
def test_unreadable_config_text(raw, code):
    with pytest.raises(KVPlanError) as err:
        parse_config(raw)
    assert err.value.code == code


def test_not_object_message_names_type():
    with pytest.raises(KVPlanError, match="must be a JSON object, got list"):
        parse_config("[]")




@pytest.mark.parametrize(("key", "update"), [
    ("intermediate_size", {"intermediate_size": "abc"}),
    ("intermediate_size", {"intermediate_size": -5}),
    ("max_position_embeddings", {"max_position_embeddings": "abc"}),
    ("max_position_embeddings", {"max_position_embeddings": 1.5}),
    ("num_local_experts", {"num_local_experts": "abc"}),
    ("num_local_experts", {"num_local_experts": [8]}),
    ("n_shared_experts", {"num_local_experts": 8, "n_shared_experts": "x"}),
    ("q_lora_rank", {"kv_lora_rank": 8, "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8,
                     "q_lora_rank": "x"}),
], ids=lambda v: v if isinstance(v, str) else repr(next(reversed(v.values()))))
def test_bad_value_in_other_keys_is_kvplan_error(key, update):
    try:
        parse_config(json.dumps({**BASE, **update}))
    except KVPlanError as err:
        assert f"'{key}'" in str(err)
    else:
        pytest.fail(f"accepted {update}")


def test_recurrent_state_without_a_layout_is_refused():
    """Mamba keys but no layer_types / hybrid_override_pattern: the layout is unknown, so refuse."""
    config = {**BASE, "mamba_d_state": 16, "mamba_expand": 2}
    with pytest.raises(KVPlanError) as err:
        parse_config(config)
    assert err.value.code == "config.unsupported" and "hybrid_override_pattern" in str(err.value)


def test_bad_hybrid_override_pattern_names_the_key():
    with pytest.raises(KVPlanError) as err:
        parse_config({**BASE, "hybrid_override_pattern": "MQ"})
    assert "hybrid_override_pattern" in str(err.value)


def test_mimo_v2_flash_hub_config_reads_hybrid_layer_pattern():
    """MiMo-V2-Flash's Hub config marks each layer in ``hybrid_layer_pattern`` (1 sliding, 0 full;
    SGLang ``configs/model_config.py`` ``get_hybrid_layer_ids``): 9 full layers with 4 KV heads and
    39 sliding layers with ``swa_num_key_value_heads`` 8, K 192 / V 128, window 128. Before this
    every layer was read as sliding with 8 heads. SGLang PR #18039's log prints the sliding pool of
    this split: K 8.38 GB, V 5.59 GB for 300,288 + 64 tokens at TP 4 (tests/test_sglang_logs.py)."""
    path = Path(__file__).parent / "fixtures" / "sglang_logs" / "configs" / "XiaomiMiMo__MiMo-V2-Flash.json"
    arch = parse_config(json.loads(path.read_text()))
    layers = [layer for layer, n in arch.layer_runs() for _ in range(n)]
    full = [i for i, layer in enumerate(layers) if layer.kind == "full"]
    assert full == [0, 5, 11, 17, 23, 29, 35, 41, 47]
    assert {(layer.kind, layer.n_kv_heads, layer.head_dim_k, layer.head_dim_v, layer.window)
            for layer in layers} == {("full", 4, 192, 128, None), ("sliding", 8, 192, 128, 128)}
    with pytest.raises(KVPlanError) as err:
        parse_config({**BASE, "hybrid_layer_pattern": [0, 2]})
    assert "hybrid_layer_pattern" in str(err.value)


def test_partial_rotary_factor():
    """``ModelArch.partial_rotary_factor`` / ``rotary_dim``: config.json ``partial_rotary_factor``
    (top level, or inside transformers 5's ``rope_parameters``), else ``rotary_dim`` / head_dim,
    else GPT-NeoX's ``rotary_pct``; 1.0 when none is set; MLA rotates ``qk_rope_head_dim``. A
    value outside (0, 1] is refused naming the key."""
    base = {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
            "num_hidden_layers": 2, "intermediate_size": 2048, "vocab_size": 1000}
    assert (parse_config(base).partial_rotary_factor, parse_config(base).rotary_dim) == (1.0, 128)
    assert parse_config({**base, "partial_rotary_factor": 0.5}).rotary_dim == 64
    nested = parse_config({**base, "rope_parameters": {"rope_type": "default",
                                                       "partial_rotary_factor": 0.25}})
    assert nested.rotary_dim == 32
    assert parse_config({**base, "rotary_dim": 64}).partial_rotary_factor == 0.5
    assert parse_config({**base, "rotary_pct": 0.25}).rotary_dim == 32
    assert load_model("MiniMaxAI/MiniMax-M2.7").rotary_dim == 64  # rotary_dim 64 of head_dim 128
    assert load_model("moonshotai/Kimi-K2.5").rotary_dim == 64    # MLA qk_rope_head_dim
    for key, value in (("partial_rotary_factor", 1.5), ("partial_rotary_factor", "half"),
                       ("rotary_dim", 256), ("rotary_pct", 0)):
        with pytest.raises(KVPlanError) as err:
            parse_config({**base, key: value})
        assert key in str(err.value)
