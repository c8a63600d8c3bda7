"""vLLM's RoPE cos/sin caches in its weights (``kvplan.engines.vllm.weights``, the ``rope_cache``
part): one per distinct ``get_rope`` set, ``positions × rotary_dim`` in the model dtype
(``rotary_embedding/base.py`` ``RotaryEmbeddingBase.__init__``: ``cache.to(dtype)``; v0.6.6
``rotary_embedding.py`` the same), with each release's LongRoPE and MRoPE layouts. Every number is
derived by hand from the source named beside it. Every vLLM plan holds it
(``Vllm.loading_rules``)."""

from __future__ import annotations

from typing import Any

from kvplan.config_import import parse_config
from kvplan.engines import get_engine
from kvplan.engines.vllm.engine import Vllm
from kvplan.engines.vllm.releases import V0_6, V0_8, V0_9, V0_11, V0_33
from kvplan.presets import GPU, get_gpu, load_model
from kvplan.weights import LoadingRules, rope_cache_bytes, weights_per_gpu

BASE: dict[str, Any] = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "num_hidden_layers": 2, "intermediate_size": 8192,
                        "vocab_size": 32_000, "max_position_embeddings": 4096,
                        "torch_dtype": "bfloat16"}


def _rules(engine: str, gpu: GPU) -> LoadingRules:
    vllm = get_engine(engine)
    assert isinstance(vllm, Vllm)
    return vllm.loading_rules(gpu)


def _rope(engine: str, config: dict[str, Any]) -> int:
    arch = parse_config(config)
    return weights_per_gpu(arch, None, rules=_rules(engine, get_gpu("h100-sxm"))).stages[0]["rope_cache"]


def test_llama_3_1_8b_holds_its_cache_in_bf16():
    """Llama-3.1-8B (``llama3`` set: ``Llama3RotaryEmbedding`` keeps ``max_position``):
    131,072 × 128 × 2 B = 33,554,432 B in every vLLM release, on every pipeline stage; SGLang's
    fp32 cache is twice that (``sglang.weights``)."""
    arch = load_model("llama-3.1-8b")
    gpu = get_gpu("h100-sxm")
    for engine in ("vllm@0.6", "vllm@0.19", "vllm"):
        layout = weights_per_gpu(arch, None, pp=2, rules=_rules(engine, gpu))
        assert [s["rope_cache"] for s in layout.stages] == [131_072 * 128 * 2] * 2 == [33_554_432] * 2
    sglang = weights_per_gpu(arch, None, rules=get_engine("sglang").loading_rules(gpu))
    assert sglang.stages[0]["rope_cache"] == 67_108_864
    fp16 = weights_per_gpu(arch, "float16", rules=_rules("vllm", gpu))
    fp32 = weights_per_gpu(arch, "float32", rules=_rules("vllm", gpu))
    assert (fp16.stages[0]["rope_cache"], fp32.stages[0]["rope_cache"]) == (33_554_432, 67_108_864)


def test_scaled_sets_by_their_classes():
    """``linear_scaling_rope.py`` / ``dynamic_ntk_scaling_rope.py``: ``max_position × factor``;
    ``yarn_scaling_rope.py`` ``YaRNScalingRotaryEmbedding._compute_cos_sin_cache``: ``original ×
    factor``; the partial rotary factor scales ``rotary_dim`` (``get_rope``)."""
    assert _rope("vllm@0.19", BASE) == 4096 * 128 * 2
    assert _rope("vllm@0.19", {**BASE, "partial_rotary_factor": 0.5}) == 4096 * 64 * 2
    linear = {**BASE, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    assert _rope("vllm@0.19", linear) == 16_384 * 128 * 2
    dynamic = {**BASE, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    assert _rope("vllm@0.19", dynamic) == 8192 * 128 * 2
    yarn = {**BASE, "max_position_embeddings": 131_072,
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}}
    assert _rope("vllm@0.19", yarn) == 131_072 * 128 * 2 == 33_554_432


def test_longrope_one_concatenated_cache_from_v0_11():
    """``phi3_long_rope_scaled_rope.py`` (0.11.0–0.19.0): short (``original``) and long
    (``max_position``) caches cast to the model dtype, only ``long_short_cos_sin_cache`` registered:
    (4,096 + 131,072) × 96 × 2 B; v0.6.6 registers the short and long caches besides."""
    config = {**BASE, "hidden_size": 3072, "max_position_embeddings": 131_072,
              "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 48,
                               "long_factor": [1.0] * 48, "original_max_position_embeddings": 4096}}
    concat = (4096 + 131_072) * 96 * 2
    assert _rope("vllm@0.19", config) == concat == 25_952_256
    assert _rope("vllm@0.6", config) == 4096 * 96 * 2 + 131_072 * 96 * 2 + concat == 51_904_512
    assert rope_cache_bytes(parse_config(config), element=2, longrope_concat_only=True) == [concat]


def test_mrope_caches_four_times_the_positions_from_v0_11():
    """``mrope.py`` ``MRotaryEmbedding.__init__`` (0.11.0–0.19.0): ``cache_max_position_num =
    max_position_embeddings * 4`` (Qwen2.5-VL-7B: 128,000 × 4 × 128 × 2 B = 131,072,000 B); with
    YaRN it is built from ``original × 4`` and YaRN's cache takes ``× factor``; v0.6.6's
    ``MRotaryEmbedding`` keeps ``max_position``. The legacy type ``mrope`` and a ``default`` set
    with an ``mrope_section`` are the same class (``patch_rope_parameters``)."""
    section = {"rope_type": "default", "mrope_section": [16, 24, 24]}
    config = {**BASE, "max_position_embeddings": 128_000, "rope_scaling": section}
    assert parse_config(config).rope_scalings[0].mrope
    assert _rope("vllm@0.19", config) == 128_000 * 4 * 128 * 2 == 131_072_000
    assert _rope("vllm@0.6", config) == 128_000 * 128 * 2
    legacy = {**config, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    assert _rope("vllm@0.19", legacy) == 131_072_000
    yarn = {**BASE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mrope_section": [16, 24, 24],
                                     "original_max_position_embeddings": 32_768}}
    assert _rope("vllm@0.19", yarn) == 32_768 * 4 * 4 * 128 * 2


def test_sets_per_layer_type_take_their_layers_head():
    """Gemma 4 (``gemma4.py``, vLLM 0.19.0): a ``default`` set for the sliding layers (head 256)
    and a ``proportional`` one for the global layers (``global_head_dim`` 512), whose
    ``Gemma4RotaryEmbedding`` rotates the whole head: 262,144 × 512 × 2 B + 262,144 × 256 × 2 B
    = 256 + 128 MiB; a partial factor does not shrink a ``proportional`` set in vLLM."""
    text = {"model_type": "gemma4_text", "hidden_size": 2816, "num_attention_heads": 16,
            "num_key_value_heads": 8, "num_global_key_value_heads": 2, "head_dim": 256,
            "global_head_dim": 512, "num_hidden_layers": 6, "intermediate_size": 2112,
            "vocab_size": 262_144, "max_position_embeddings": 262_144, "sliding_window": 1024,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
            "rope_parameters": {"full_attention": {"rope_type": "proportional", "rope_theta": 1e6},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
            "torch_dtype": "bfloat16"}
    arch = parse_config(text)
    assert {x.kind.value: x.head_dim_k for x in arch.distinct_layers()} == {"sliding": 256, "full": 512}
    assert rope_cache_bytes(arch, element=2, proportional_full_head=True) == \
        [262_144 * 512 * 2, 262_144 * 256 * 2] == [268_435_456, 134_217_728]
    flat = parse_config({**BASE, "partial_rotary_factor": 0.25,
                         "rope_scaling": {"rope_type": "proportional"}})
    assert rope_cache_bytes(flat, element=2) == [4096 * 32 * 2]  # SGLang's rule: the partial dim
    assert rope_cache_bytes(flat, element=2, proportional_full_head=True) == [4096 * 128 * 2]
    assert _rope("vllm@0.19", {**BASE, "partial_rotary_factor": 0.25,
                               "rope_scaling": {"rope_type": "proportional"}}) == 4096 * 128 * 2


def test_records_name_their_layout():
    """v0.6.6 layouts on ``vllm@0.6`` (and the unread v0.8–v0.9, which inherit it); v0.11.0's from
    ``vllm@0.11`` to the latest record."""
    for record in (V0_6, V0_8, V0_9):
        assert (record.rope_longrope_concat_only, record.rope_mrope_positions) == (False, 1)
    for record in (V0_11, V0_33):
        assert (record.rope_longrope_concat_only, record.rope_mrope_positions) == (True, 4)
    rules = _rules("vllm", get_gpu("h100-sxm"))
    assert (rules.rope_cache, rules.rope_proportional_full_head) == ("model", True)
    # each release's plans take its record's layout
    assert (rules.rope_longrope_concat_only, rules.rope_mrope_positions) == (True, 4)
    old = _rules("vllm@0.6", get_gpu("h100-sxm"))
    assert (old.rope_cache, old.rope_longrope_concat_only, old.rope_mrope_positions) == ("model", False, 1)
