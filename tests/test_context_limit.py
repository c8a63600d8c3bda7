"""The longest request each engine serves, derived from the config as that engine derives it.

Every expected value is read off the engine's function, cited per case:
* vLLM v0.33 ``vllm/config/model.py`` ``_get_and_verify_max_len`` (+ ``derive_max_model_len_and_key``
  in ``vllm/transformers_utils/model_arch_config_convertor.py``): smallest length key,
  ``model_max_length`` wins, × the RoPE factor unless the type is su/longrope/llama3/yarn/
  deepseek_yarn/deepseek_llama_scaling, Gemma 3 never scaled; v0.14–v0.28: a YaRN set restarts from
  ``original_max_position_embeddings`` × factor.
* SGLang 0.5.23 ``sglang/srt/utils/hf_transformers/common.py`` ``get_context_length``: first of
  max_sequence_length, seq_length, max_seq_len, model_max_length, max_position_embeddings; × factor
  unless the set has ``original_max_position_embeddings`` or is llama3.
* TensorRT-LLM ``_torch/pyexecutor/model_engine.py`` ``_infer_max_seq_len_from_config``:
  ``max_position_embeddings`` × factor unless su/longrope/llama3/yarn, rounded up.
* transformers: no limit enforced; kvplan flags beyond ``max_position_embeddings``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.config_import import parse_config
from kvplan.engines import get_engine
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model, model_presets

ENGINES = ("hf", "vllm@0.33", "vllm@0.19", "sglang", "trtllm@main")


def _qwen(**update: object) -> dict:
    """Qwen2.5-7B's config.json (max_position_embeddings 32,768, no rope scaling) with changes."""
    config = dict(model_presets()["qwen2.5-7b"].config)
    config.update(update)
    return {k: v for k, v in config.items() if v is not None}


def _limits(config: dict) -> tuple[int | None, ...]:
    arch = parse_config(config)
    return tuple(None if (c := get_engine(e).context_limit(arch)) is None else c.tokens for e in ENGINES)


CASES = {
    # Qwen's documented long-context recipe: YaRN ×4 over 32,768. v0.33: YaRN not scaled again;
    # v0.19: 32,768 × 4; SGLang: the set has original_max_position_embeddings → ×1; TRT: yarn → ×1.
    "yarn x4": (_qwen(rope_scaling={"type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 32768}),
                (32768, 32768, 131072, 32768, 32768)),
    # Linear scaling ×4 over 4,096: every serving engine scales, transformers keeps 4,096.
    "linear x4": (_qwen(max_position_embeddings=4096, rope_scaling={"type": "linear", "factor": 4.0}),
                  (4096, 16384, 16384, 16384, 16384)),
    # Dynamic NTK ×2.5 over 4,096: TRT rounds 10,240 up (exact here), vLLM truncates.
    "dynamic x2.5": (_qwen(max_position_embeddings=4096, rope_scaling={"rope_type": "dynamic",
                                                                         "factor": 2.5}),
                     (4096, 10240, 10240, 10240, 10240)),
    # llama3 scaling never extends the length.
    "llama3": (_qwen(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
               (32768, 32768, 32768, 32768, 32768)),
    # ChatGLM-style seq_length below max_position_embeddings: vLLM takes the smallest key, SGLang
    # prefers seq_length, TRT reads max_position_embeddings only.
    "seq_length": (_qwen(seq_length=8192), (32768, 8192, 8192, 8192, 32768)),
    # Command-R style model_max_length above max_position_embeddings: vLLM and SGLang take it.
    "model_max_length": (_qwen(max_position_embeddings=8192, model_max_length=131072),
                         (8192, 131072, 131072, 131072, 8192)),
}


@pytest.mark.parametrize("name", CASES)
def test_context_limit_per_engine(name):
    config, expected = CASES[name]
    assert _limits(config) == expected


def test_gemma3_linear_rope_is_never_scaled():
    """Gemma 3 (linear ×8 over 131,072): vLLM skips Gemma 3 by name; transformers 5 nests the legacy
    ``rope_scaling`` under ``full_attention`` (``NESTED_ROPE_TYPES``), so SGLang's and TRT-LLM's
    top-level ``factor`` lookup finds none."""
    arch = load_model("gemma-3-27b")
    assert [r.layer_type for r in arch.rope_scalings] == ["full_attention"]
    assert {get_engine(e).context_limit(arch).tokens for e in ENGINES} == {131072}


def test_yarn_limit_depends_on_the_vllm_release():
    """gpt-oss: YaRN ×32 over 4,096 = 131,072 either way, but the derivation differs by release."""
    arch = load_model("gpt-oss-120b")
    assert get_engine("vllm@0.33").context_limit(arch).rule == (
        "max_position_embeddings 131,072; vLLM v0.33 _get_and_verify_max_len")
    assert get_engine("vllm@0.19").context_limit(arch).rule == (
        "original_max_position_embeddings 4,096 × RoPE factor 32; vLLM v0.18–v0.19 "
        "_get_and_verify_max_len")


def test_fit_refuses_beyond_the_release_limit():
    """A 65,536-token request on the YaRN ×4 Qwen config: v0.19 derives 131,072 and serves it;
    v0.33 derives 32,768 and refuses, naming the derivation and the override."""
    arch = parse_config(CASES["yarn x4"][0])
    old = fit(make_plan(arch, get_gpu("h100-sxm"), FitQuery(tokens=65536, engine="vllm@0.19")))
    new = fit(make_plan(arch, get_gpu("h100-sxm"), FitQuery(tokens=65536, engine="vllm@0.33")))
    assert (old.context_limit, new.context_limit, new.fits) == (131072, 32768, False)
    assert old.fits is True
    assert new.reason.startswith("65,536 tokens exceed the model's context limit of 32,768 "
                                 "(max_position_embeddings 32,768; vLLM v0.33 _get_and_verify_max_len)")
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in new.reason


def test_a_config_without_length_keys():
    """No length key (and no model-type default): vLLM takes any ``--max-model-len`` (no limit),
    SGLang assumes 2,048, TensorRT-LLM infers 2,048, transformers has nothing to flag."""
    config = {k: v for k, v in _qwen(model_type="kvplan-test").items()
              if k not in ("max_position_embeddings", "architectures")}
    assert _limits(config) == (None, None, None, 2048, 2048)


def test_length_keys_and_rope_travel_in_the_link():
    """An uploaded config's length keys and RoPE set survive the link: the v0.19 derivation of the
    YaRN ×4 Qwen config (with a smaller ``seq_length``, which the YaRN branch overrides) is the same
    after encoding and decoding."""
    from kvplan.scenario import custom_arch, decode_config, encode_config, link_config

    config = CASES["yarn x4"][0] | {"seq_length": 16384}
    back = decode_config(encode_config(link_config(config)))
    assert (back["seq_length"], back["rope_scaling"]["factor"]) == (16384, 4.0)
    limit = get_engine("vllm@0.19").context_limit(custom_arch(back))
    assert (limit.tokens, limit.rule) == (
        131072, "original_max_position_embeddings 32,768 × RoPE factor 4; vLLM v0.18–v0.19 "
                "_get_and_verify_max_len")
    assert get_engine("vllm@0.33").context_limit(custom_arch(back)).tokens == 16384


TRUTH = json.loads((Path(__file__).parent / "fixtures" / "vllm_truth" / "context_limits.json").read_text())


def _truth_config(name: str) -> dict:
    kind, _, key = name.partition(":")
    if kind == "preset":
        return model_presets()[key].config
    if kind == "config":
        return json.loads((Path(__file__).parent / "fixtures" / "configs" / f"{key}.json").read_text())
    return CASES[key][0]


def test_the_vllm_truth_covers_every_preset_and_case():
    """``tools/vllm_truth/context_limits.py`` ran vLLM 0.33.0's own ``_get_and_verify_max_len`` on
    every preset, every vendored config and every case above; only the configs the recorded
    transformers cannot build are skipped (kimi_k2 is remote code)."""
    assert (TRUTH["vllm"], TRUTH["transformers"]) == ("0.33.0", "5.20.2")
    assert set(TRUTH["skipped"]) == {"config:kimi_k2", "preset:kimi-k2"}
    assert {f"preset:{p}" for p in model_presets()} <= set(TRUTH["cases"]) | set(TRUTH["skipped"])
    assert {f"case:{c}" for c in CASES} <= set(TRUTH["cases"])
    # 126 → 139: thirteen presets of issue #25 (granite-3.0-2b-instruct, OLMo-2-1124-13B,
    # Olmo-3.1-32B-Instruct, olmOCR-2-7B-1025, EXAONE-4.0-32B, Llama-3.1-8B/70B-Instruct,
    # Llama-3.2-3B-Instruct, Devstral-Small-2-24B- and Devstral-2-123B-Instruct-2512, Qwen3.5-9B,
    # ALLaM-7B-Instruct-preview, gemma-3-4b-it), one case each; the rerun left every earlier case
    # as it was; 139 → 143: zai-org/GLM-4.7, PrimeIntellect/INTELLECT-3 and -Base, microsoft/phi-1
    # (issue #25, text-only presets), one case each, every earlier case unchanged by the rerun;
    # 143 → 146: Qwen/Qwen2.5-3B, Qwen2.5-14B, Qwen3-14B, likewise; 146 → 147:
    # NousResearch/Hermes-3-Llama-3.1-405B; 147 → 148: perplexity-ai/r1-1776-distill-llama-70b;
    # 148 → 149: NousResearch/Hermes-2-Pro-Llama-3-70B; 149 → 150: QuantTrio/GLM-4.7-AWQ
    # 150 → 153: issue #27's multimodal presets Qwen2.5-VL-3B-Instruct, Qwen2.5-VL-7B-Instruct-AWQ and
    # Qwen2.5-VL-72B-Instruct-AWQ (128,000 each, their max_position_embeddings), earlier cases unchanged
    assert len(TRUTH["cases"]) == 153


@pytest.mark.parametrize("name", sorted(TRUTH["cases"]))
def test_context_limit_equals_vllm_033(name):
    """kvplan's ``Vllm.context_limit`` equals what vLLM 0.33.0's ``_get_and_verify_max_len`` derives
    (None: no length key, any ``--max-model-len`` is taken)."""
    limit = get_engine("vllm@0.33").context_limit(parse_config(_truth_config(name)))
    assert (None if limit is None else limit.tokens) == TRUTH["cases"][name]["derived_max_model_len"]


SGLANG_TRUTH = json.loads((Path(__file__).parent / "fixtures" / "sglang" / "context_limits.json").read_text())


def test_the_sglang_truth_covers_every_preset_and_case():
    """``tools/sglang_truth/context_limits.py`` ran SGLang 0.5.23's own ``get_context_length`` (on
    ``get_hf_text_config``) on the same configs, none skipped."""
    assert (SGLANG_TRUTH["sglang"], SGLANG_TRUTH["transformers"]) == ("0.5.23", "5.19.0")
    assert SGLANG_TRUTH["skipped"] == {}
    assert set(SGLANG_TRUTH["cases"]) == set(TRUTH["cases"]) | set(TRUTH["skipped"])


@pytest.mark.parametrize("name", sorted(SGLANG_TRUTH["cases"]))
def test_context_limit_equals_sglang(name):
    """kvplan's ``SGLang.context_limit`` equals SGLang 0.5.23's ``get_context_length``."""
    limit = get_engine("sglang").context_limit(parse_config(_truth_config(name)))
    assert limit.tokens == SGLANG_TRUTH["cases"][name]["context_length"]
