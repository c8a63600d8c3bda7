"""Bias and norm rules read from the families' modeling files (issue #25, text-only presets).

Each number is transformers 5.24's meta-device count (``tests/fixtures/param_counts.json``,
``tests/fixtures/conformance/*.json``) or derived from it by hand below:

- GLM (``modeling_glm4_moe.py`` ``Glm4MoeAttention``): q/k/v ``bias=config.attention_bias``,
  ``o_proj`` ``bias=False``; per-head ``q_norm``/``k_norm`` only when ``use_qk_norm``.
- Phi (``modeling_phi.py``): q/k/v/dense and fc1/fc2 always biased, one biased LayerNorm per
  layer, a biased final LayerNorm and a biased ``lm_head``, whatever ``attention_bias`` says.
- Cohere (``CohereDecoderLayer``): one ``input_layernorm`` per layer (attention and MLP parallel).
- OLMo-1 (``OlmoLayerNorm``): norms without parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.config_import import parse_config
from kvplan.presets import load_model, model_presets
from kvplan.weights import model_tensors, params_from_tensors, weights_per_gpu

CONFORMANCE = Path(__file__).parent / "fixtures" / "conformance"


def _config(preset: str) -> dict:
    return dict(model_presets()[preset].config)


def test_glm47_biases_and_qk_norms_follow_the_config():
    """zai-org/GLM-4.7: 352,797,814,784 parameters (transformers 5.24); its 92 layers' q/k/v
    biases are 96·128 + 2·8·128 = 14,336 each and its per-head q/k norms 2·128 = 256 each."""
    config = _config("zai-org/GLM-4.7")
    assert parse_config(config).params_total == 352_797_814_784
    assert parse_config({**config, "attention_bias": False}).params_total == \
        352_797_814_784 - 92 * 14_336
    assert parse_config({**config, "use_qk_norm": False}).params_total == \
        352_797_814_784 - 92 * 256
    arch = load_model("zai-org/GLM-4.7")
    names = {t.name.rsplit(".", 2)[-2] + "." + t.name.rsplit(".", 1)[-1]
             for t in model_tensors(arch) if t.name.endswith(".bias")}
    assert names == {"q_proj.bias", "k_proj.bias", "v_proj.bias"}  # no o_proj bias
    assert weights_per_gpu(arch).total_bytes == 2 * 352_797_814_784  # bf16, MTP layer not loaded


def test_glm45_air_shape_has_no_qk_norms():
    """PrimeIntellect/INTELLECT-3 (GLM-4.5-Air's shape, use_qk_norm false): 106,852,245,504."""
    assert parse_config(_config("PrimeIntellect/INTELLECT-3")).params_total == 106_852_245_504


def test_phi_linears_are_always_biased():
    """microsoft/phi-1 (``attention_bias: false`` in its config.json): 1,414,562,935 parameters;
    the biases are 24 layers × (4·2,048 + 8,192 + 2,048) + the final LayerNorm's 2,048 + the
    lm_head's 50,295; fp32 as stored: 4 B each."""
    arch = load_model("microsoft/phi-1")
    assert arch.params_total == params_from_tensors(arch) == 1_414_562_935
    assert weights_per_gpu(arch).total_bytes == 4 * 1_414_562_935
    assert any(t.name == "lm_head.bias" for t in model_tensors(arch))


def test_cohere_stores_one_norm_per_layer():
    """Command-R: 34,980,831,232 parameters (transformers 5.24), 2 B each in bf16."""
    arch = load_model("command-r")
    assert arch.params_total == params_from_tensors(arch) == 34_980_831_232
    assert weights_per_gpu(arch).total_bytes == 69_961_662_464


def test_olmo1_norms_hold_no_parameters():
    """OlmoConfig's default (OLMo-7B's shape): 6,888,095,744 parameters, no norm tensors."""
    fixture = json.loads((CONFORMANCE / "olmo.json").read_text())
    arch = parse_config(fixture["default_config"])
    assert arch.params_total == fixture["params_default"] == 6_888_095_744
    assert not [t for t in model_tensors(arch) if t.part == "norms"]
    assert params_from_tensors(arch) == 6_888_095_744
