"""kvplan's ``hf`` engine against transformers' own caches, model type by model type.

Fixtures: ``tests/fixtures/conformance/<model_type>.json``, measured by the dev-time generator
``tools/conformance/generate.py`` (transformers 5.24.0, torch 2.13.0 CPU; see its README). Each holds
a small config.json, the bytes of every tensor of the cache transformers returned after real
forwards (batch 2; 5, 17, 40 tokens and a 16 + 1 decode step; float32) and the parameter counts.
``conformance_check.check`` gives each type one state (exact / exact KV / refused / WRONG / not
measured). A type whose state changes fails here: a fix deletes its entry from the tables below,
a regression adds nothing silently.
"""

from __future__ import annotations

import pytest
from conformance_check import FIXTURES, check, fixture_paths, load

from kvplan.config_import import SUPPORTED_MODEL_TYPES, VERIFIED_MODEL_TYPES, parse_config
from kvplan.errors import KVPlanError
from kvplan.sizing import kv_cache
from tests.plans import kv_plan

#: Types where kvplan prints a cache size transformers does not hold, with the reason. (The eight
#: Mamba types — transformers keeps their SSM state in fp32 in bf16 runs — are fixed in kvplan's
#: hf engine and exact now.)
KNOWN_MISMATCH: dict[str, str] = {}

#: Types kvplan refuses, with the part of the message that names what it does not understand.
REFUSED: dict[str, str] = {
    "axk2": "('indexed_attention')",
    "deepseek_v32": "('indexed_attention')",
    "deepseek_v4": "('heavily_compressed_attention')",
    "glm_moe_dsa": "('indexed_attention')",
    "hy_v4": "('indexed_attention')",
    "inkling2_loop_text": "('hybrid_sliding')",
    "inkling2_text": "('hybrid_sliding')",
    "inkling_mm_model": "('hybrid_sliding')",
    "inkling_text": "('hybrid_sliding')",
    "lfm2_moe": "('conv')",
    "lfm3": "('conv')",
    "longcat_flash": "two MLA attention blocks per decoder layer",
    "minimax": "the recurrent state of minimax layers is not supported",
    "mllama": "cross-attention layers (cross_attention_layers)",
    "recurrent_gemma": "recurrent block types (block_types)",
    "reformer": "one hidden state per token per layer",
    "rwkv": "RWKV time-mixing state",
    "xlnet": "mems: one hidden state per token per layer",
    "zamba": "('hybrid')",
    "zamba2": "('hybrid')",
    "zaya": "('hybrid')",
}

_BIASES = "linear/LayerNorm biases and learned position/token-type embeddings are not counted"
_TOWER = "the class transformers builds holds a vision/audio tower kvplan does not count"
_PLE = "Gemma 3n per-layer embeddings, AltUp and LAuReL blocks are not counted"
_LFM2 = "LFM2 short-conv blocks and its w1/w2/w3 MLP sizing (block_auto_adjust_ff_dim)"
_DEFAULT = "transformers cannot build its own full-size default config, so no reference count"
#: Types whose KV is exact but whose full-size parameter count is off by more than 0.1%:
#: (largest relative error accepted, reason). ``None``: no full-size count to compare.
_NO_LAYOUT = ("the class-default full-size config names no hybrid layout (no layer_types or "
              "hybrid_override_pattern), which kvplan refuses; the measured small config has one")
WEIGHTS_GAP: dict[str, tuple[float | None, str]] = {
    "bamba": (None, _NO_LAYOUT),
    "bert-generation": (0.003, _BIASES),
    "big_bird": (0.036, _BIASES),
    "bigbird_pegasus": (0.224, _BIASES + "; its block-sparse layers differ"),
    "blenderbot-small": (0.006, _BIASES),
    "ctrl": (0.236, "CTRL's untied 246k-vocabulary head and biases; not analysed further"),
    "dots1": (None, _DEFAULT),
    "electra": (0.28, "ELECTRA's factored embeddings (embedding_size 128 + projection)"),
    "fuyu": (0.002, _BIASES),
    "gemma3": (0.036, _TOWER),
    "gemma3n": (0.383, _PLE),
    "gemma3n_text": (0.383, _PLE),
    "git": (0.504, _TOWER),
    "glm4_moe": (None, "Glm4MoeConfig's class default states no head_dim and 4,096 / 96 heads is "
                       "not whole; transformers (modeling_glm4_moe.py Glm4MoeAttention: hidden // "
                       "heads) floors it to 42 — no checkpoint does (GLM-4.5/4.6/4.7 "
                       "state head_dim 128), so kvplan asks for head_dim instead of guessing"),
    "got_ocr2": (0.176, _TOWER),
    "hunyuan_v1_dense": (None, _DEFAULT),
    "hunyuan_v1_moe": (None, _DEFAULT),
    "jetmoe": (0.144, "JetMoE's attention experts (MoA) are counted as one dense attention"),
    "lfm2": (0.38, _LFM2),
    "lfm2_vl": (0.38, _LFM2),
    "megatron-bert": (0.006, _BIASES),
    "ministral": (None, _DEFAULT),
    "modernbert-decoder": (0.005, _BIASES),
    "moshi": (0.221, "Moshi's depth decoder and audio codebook embeddings"),
    "moss_transcribe_diarize": (0.177, _TOWER),
    "nemotron": (None, _DEFAULT),
    "phi4_multimodal": (0.175, _TOWER),
    "qwen3_vl_moe": (0.024, "the class-default config ties the embeddings in text_config (true) "
                            "but not at the top (false): transformers 5.24 builds an untied "
                            "lm_head (256 × 64 small), kvplan reads text_config's; real "
                            "checkpoints state one value (Qwen3-VL-30B-A3B and 235B-A22B exact "
                            "in test_param_counts.py)"),
    "prophetnet": (0.185, "ProphetNet's n-gram self-attention (predict streams, relative position "
                          "buckets) is counted as plain attention"),
    "rembert": (0.096, "RemBERT's decoupled input embeddings"),
    "roberta-prelayernorm": (0.01, _BIASES),
    "roc_bert": (0.133, "RoCBert's pronunciation and shape embeddings"),
    "roformer": (0.007, _BIASES),
    "trocr": (0.003, _BIASES),
    "vision-encoder-decoder": (0.21, "its default decoder is a BERT with cross-attention "
                                     "(add_cross_attention), not counted; " + _BIASES),
    "whisper": (0.007, _BIASES),
    "xlm": (0.003, _BIASES),
    "xmod": (0.071, "X-MOD's per-language adapters are not counted"),
    "xlm-roberta-xl": (0.003, _BIASES),
}
PARAMS_TOLERANCE = 0.001


def _params():
    return [pytest.param(path, id=path.stem) for path in fixture_paths()]


def test_fixture_set_is_large_and_small():
    """≥ 150 causal-LM model types measured; the whole set stays a few MB; one transformers."""
    measured = [load(p) for p in fixture_paths() if load(p)["status"] == "measured"]
    assert len(measured) >= 150
    assert sum(p.stat().st_size for p in fixture_paths()) < 4_000_000
    assert {f["transformers_version"] for f in measured} == {"5.24.0"}
    assert {f["torch_version"] for f in measured} == {"2.13.0"}


def test_failures_keep_their_error():
    """Every type the generator could not run says why (never dropped silently)."""
    for path in fixture_paths():
        fixture = load(path)
        assert fixture["model_type"] == path.stem
        if fixture["status"] != "measured":
            assert fixture["status"] == "failed" and fixture["error"].strip()


def test_tables_name_fixtures():
    names = {p.stem for p in fixture_paths()}
    for table in (KNOWN_MISMATCH, REFUSED, WEIGHTS_GAP):
        assert set(table) <= names


@pytest.mark.parametrize("path", _params())
def test_fixture_bytes_add_up(path):
    """Each measurement's role totals are the sum of its non-aliased tensors' bytes."""
    fixture = load(path)
    for m in fixture.get("measurements", []):
        totals: dict[str, int] = {}
        for t in m["tensors"]:
            assert t["bytes"] > 0
            if not t["alias"]:
                totals[t["role"]] = totals.get(t["role"], 0) + t["bytes"]
        assert totals == m["bytes_by_role"]


@pytest.mark.parametrize("path", _params())
def test_kv_against_transformers(path):
    verdict = check(load(path))
    name = verdict.model_type
    if verdict.state == "not measured":
        assert name not in KNOWN_MISMATCH and name not in REFUSED
        pytest.skip(f"generator could not run {name}: {verdict.detail[:120]}")
    if verdict.state == "WRONG":
        assert name in KNOWN_MISMATCH, verdict.detail
    else:
        assert name not in KNOWN_MISMATCH, f"{name} is {verdict.state} now: delete its entry"
    if verdict.state == "refused":
        assert name in REFUSED, verdict.detail
        assert REFUSED[name] in verdict.detail
    else:
        assert name not in REFUSED, f"{name} is {verdict.state} now: delete its entry"
    if verdict.state in {"exact", "exact KV"}:
        assert verdict.kv and all(measured == computed for _, _, measured, computed in verdict.kv)


@pytest.mark.parametrize("path", _params())
def test_weights_against_transformers(path):
    verdict = check(load(path))
    if verdict.state not in {"exact", "exact KV"}:
        pytest.skip(verdict.state)
    name = verdict.model_type
    error = verdict.params_error
    if name in WEIGHTS_GAP:
        bound, reason = WEIGHTS_GAP[name]
        assert reason
        if bound is None:
            assert error is None
        else:
            assert error is not None and PARAMS_TOLERANCE < error <= bound, (
                f"{name}: error {error:.4%}; tighten or delete its WEIGHTS_GAP entry")
    else:
        assert error is not None and error <= PARAMS_TOLERANCE, verdict.detail


def test_counts():
    """The acceptance counts of issue #15 at this stage: every wrong row is listed, and how many
    are exact for the KV cache and within 0.1% for the full-size parameter count."""
    verdicts = [check(load(p)) for p in fixture_paths()]
    states = [v.state for v in verdicts]
    assert states.count("WRONG") == len(KNOWN_MISMATCH)
    assert states.count("exact") + states.count("exact KV") >= 150
    within = [v for v in verdicts if v.params_error is not None and v.params_error <= PARAMS_TOLERANCE]
    assert len(within) >= 149


def test_llama_fixture_by_hand():
    """llama, 2 layers, 4 KV heads, head_dim 24, float32, batch 2, T = 40:
    2 layers × 2 seq × 4 heads × 40 tokens × 24 × 4 B = 61,440 B of keys, as many values."""
    fixture = load(FIXTURES / "llama.json")
    (m,) = [m for m in fixture["measurements"]
            if m["mode"] == "prefill" and m["length"] == 40 and "dtype" not in m]
    assert m["bytes_by_role"] == {"k": 61_440, "v": 61_440}
    arch = parse_config(fixture["config"])
    assert kv_cache(kv_plan(arch, 40, 2, kv_dtype="fp32", engine="hf")).kv_bytes == 122_880


def test_gemma4_fixture_by_hand():
    """gemma4 (per_layer_config {5: head_dim 512}): 5 sliding layers keep W − 1 = 7 tokens of
    2 heads × 24, the full layer 40 tokens of 2 heads × 512; batch 2, fp32, K and V:
    5 × 2 × 2 × 7 × 24 × 4 × 2 = 26,880 and 2 × 2 × 40 × 512 × 4 × 2 = 655,360 → 682,240 B."""
    fixture = load(FIXTURES / "gemma4.json")
    (m,) = [m for m in fixture["measurements"]
            if m["mode"] == "prefill" and m["length"] == 40 and "dtype" not in m]
    assert m["bytes_by_role"]["k"] + m["bytes_by_role"]["v"] == 682_240
    arch = parse_config(fixture["config"])
    assert kv_cache(kv_plan(arch, 40, 2, kv_dtype="fp32", engine="hf")).kv_bytes == 682_240


GEMMA4_31B_STYLE = {
    "model_type": "gemma4_text", "num_hidden_layers": 6, "hidden_size": 5376,
    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,
    "global_head_dim": 512, "num_global_key_value_heads": 4, "attention_k_eq_v": True,
    "sliding_window": 1024, "intermediate_size": 21504, "vocab_size": 262144,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "dtype": "bfloat16",
}


def test_gemma4_global_keys():
    """configuration_gemma4.py ``__post_init__``: full layers get head_dim = global_head_dim and,
    with attention_k_eq_v, num_global_key_value_heads. bf16, T = 32,768, batch 1:
    sliding 5 × 16 heads × 1,023 tokens × 256 × 2 B × 2 = 83,804,160;
    full 1 × 4 heads × 32,768 × 512 × 2 B × 2 = 268,435,456 → 352,239,616 B."""
    arch = parse_config(GEMMA4_31B_STYLE)
    assert kv_cache(kv_plan(arch, 32_768, 1, kv_dtype="bf16", engine="hf")).kv_bytes == 352_239_616
    without_gate = parse_config({**GEMMA4_31B_STYLE, "attention_k_eq_v": False})
    full = [layer for layer in without_gate.layers if layer.kind == "full"]
    assert [(x.n_kv_heads, x.head_dim_k) for x in full] == [(16, 512)]


def test_gemma4_default_global_head_dim():
    """Without global_head_dim, Gemma4TextConfig uses 512 for the full layers."""
    config = {k: v for k, v in GEMMA4_31B_STYLE.items() if k != "global_head_dim"}
    full = [x for x in parse_config(config).layers if x.kind == "full"]
    assert full[0].head_dim_k == 512


def test_per_layer_config_refuses_unknown_settings():
    with pytest.raises(KVPlanError) as err:
        parse_config({**GEMMA4_31B_STYLE, "per_layer_config": {"5": {"rope_theta": 1.0}}})
    assert "rope_theta" in str(err.value)


def test_verified_types_in_sync():
    """VERIFIED_MODEL_TYPES is exactly the (imported) model types of the KV-exact fixtures."""
    exact = set()
    for path in fixture_paths():
        fixture = load(path)
        if check(fixture).state in {"exact", "exact KV"}:
            exact.add(parse_config(fixture["config"]).model_type)
    assert exact == VERIFIED_MODEL_TYPES


def test_unknown_type_gets_the_generic_note():
    """A model_type never checked gets a visible "generic rules" note; verified ones none."""
    config = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}
    (note,) = parse_config({**config, "model_type": "my_new_llm"}).notes
    assert note.startswith("generic rules: model_type 'my_new_llm' has not been checked")
    assert parse_config({**config, "model_type": "llama"}).notes == ()
    assert parse_config({**config, "model_type": "kimi_k2"}).notes == ()
    assert "kimi_k2" in SUPPORTED_MODEL_TYPES and "kimi_k2" not in VERIFIED_MODEL_TYPES


def test_text_config_inherits_the_wrapper_dtype():
    """A multimodal config.json often sets ``torch_dtype`` only at the top level."""
    text = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "vocab_size": 10}
    assert parse_config({"text_config": text, "torch_dtype": "float16"}).model_dtype == "fp16"
    own = {**text, "torch_dtype": "float32"}
    assert parse_config({"text_config": own, "torch_dtype": "float16"}).model_dtype == "fp32"


def test_mamba_state_stays_fp32_in_bf16():
    """transformers keeps the Mamba SSM state in fp32 when the model runs in bf16. mamba fixture in
    bf16, T = 40, batch 2, 2 layers, d_inner 80, kernel 4, state 8: conv 2 × 2 × 80 × 4 × 2 B = 2,560
    (bf16) and SSM state 2 × 2 × 80 × 8 × 4 B = 10,240 (fp32) → 12,800, as kvplan's hf rule now
    sizes it (it said 2,560 + 5,120 before)."""
    fixture = load(FIXTURES / "mamba.json")
    (m,) = [m for m in fixture["measurements"] if m.get("dtype") == "bfloat16"]
    assert m["bytes_by_role"] == {"conv": 2_560, "state": 10_240}
    assert {t["dtype"] for t in m["tensors"] if t["role"] == "state"} == {"float32"}
    assert check(fixture).state in {"exact", "exact KV"}


@pytest.mark.parametrize("path", _params())
def test_small_config_is_representative(path):
    """The small config keeps every layer kind of the full-size default, and its windows are
    crossed by the 17- and 40-token measurements."""
    fixture = load(path)
    if fixture["status"] != "measured" or "default_config" not in fixture:
        pytest.skip("not measured")
    try:
        small, full = parse_config(fixture["config"]), parse_config(fixture["default_config"])
    except KVPlanError as exc:
        pytest.skip(str(exc))
    assert set(full.kind_counts()) <= set(small.kind_counts())
    assert all(layer.window <= 16 for layer in small.layers if getattr(layer, "window", None))


def test_exact_types_are_exact_small_too():
    """Where the full-size count is exact, the small model's count (odd head sizes, few layers,
    small vocabulary) is exact as well: the formula, not a coincidence of defaults."""
    for path in fixture_paths():
        verdict = check(load(path))
        if verdict.state == "exact":
            measured, computed = verdict.params_small
            assert measured == computed, verdict.model_type
