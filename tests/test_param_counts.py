"""Preset parameter counts: kvplan's config-derived count against transformers' own.

``tests/fixtures/param_counts.json`` is written by the dev-time script
``tools/conformance/param_counts.py`` (transformers 5.24.0 on the ``meta`` device; the class
``AutoModelForCausalLM`` picks, and the ``architectures[0]`` class for multimodal presets).
kvplan's count is ``estimate_params`` of the preset's embedded config.json (``parse_config``
without the preset's published ``params_total``). Every difference is listed with its reason and
the largest relative error accepted; a fix that makes a count exact must delete its entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.config_import import parse_config
from kvplan.presets import PRESETS_DIR

FIXTURE = Path(__file__).parent / "fixtures" / "param_counts.json"
COUNTS = json.loads(FIXTURE.read_text())

#: preset → (largest relative error, reason). Differences worked out from the modeling files.
GAPS: dict[str, tuple[float, str]] = {
    "deepseek-v2-lite": (0.0028, "the preset's config (mlc-llm's copy) omits q_lora_rank: "
                                 "transformers' DeepseekV2Config then defaults it to 1536 and builds "
                                 "q_a/q_b projections, kvplan reads no q LoRA as the checkpoint's "
                                 "config.json (q_lora_rank null) says; kvplan matches the published "
                                 "15,706,484,224"),
    "google--gemma-4-26B-A4B": (0.022, "Gemma4ForConditionalGeneration holds the vision tower "
                                       "(≈ 0.56B); kvplan counts the text model"),
    "nvidia--Gemma-4-26B-A4B-NVFP4": (0.022, "as google--gemma-4-26B-A4B"),
    "nvidia--Gemma-4-31B-IT-NVFP4": (0.015, "Gemma4ForConditionalGeneration holds the vision "
                                            "tower (≈ 0.47B); kvplan counts the text model"),
    "Qwen--Qwen2.5-VL-7B-Instruct": (0.082, "Qwen2_5_VLForConditionalGeneration holds the vision "
                                            "tower (676,550,144 parameters); kvplan's parameter "
                                            "count is the text model (its weights include the tower)"),
    "gemma-3-12b": (0.035, "Gemma3ForConditionalGeneration holds the SigLIP vision tower and "
                           "projector (≈ 0.42B); kvplan counts the text model"),
    "gemma-3-27b": (0.016, "Gemma3ForConditionalGeneration holds the SigLIP vision tower and "
                           "projector (≈ 0.42B); kvplan counts the text model"),
}


def _presets():
    return sorted(p.stem for p in (PRESETS_DIR / "models").glob("*.json"))


def test_fixture_covers_every_preset():
    assert set(COUNTS["models"]) == set(_presets())
    assert COUNTS["transformers_version"] == "5.24.0"
    assert set(GAPS) <= set(_presets())


@pytest.mark.parametrize("preset", _presets())
def test_preset_params(preset):
    entry = COUNTS["models"][preset]
    assert "error" not in entry
    # a model_type with no causal-LM class (qwen2_5_vl) is held to the checkpoint's own class, towers
    # included, as kvplan counts them
    counted = entry["causal_lm"] if "error" not in entry["causal_lm"] else entry["architecture_class"]
    assert "error" not in counted
    reference = counted["params"]
    config = json.loads((PRESETS_DIR / "models" / f"{preset}.json").read_text())["config"]
    computed = parse_config(config).params_total
    if preset in GAPS:
        bound, reason = GAPS[preset]
        error = abs(computed - reference) / reference
        assert 0 < error <= bound, f"{preset}: {computed:,} vs {reference:,} ({error:.5%}); {reason}"
    else:
        assert computed == reference


def test_llama_3_1_8b_by_hand():
    """Llama-3.1-8B: embeddings 2 × 128,256 × 4,096 (untied) + 32 layers × (attention 4,096 ×
    (4,096 + 2 × 1,024) + 4,096 × 4,096, MLP 3 × 4,096 × 14,336, 2 norms × 4,096) + final norm
    4,096 = 8,030,261,248, as transformers counts."""
    assert COUNTS["models"]["llama-3.1-8b"]["causal_lm"]["params"] == 8_030_261_248


def test_multimodal_classes_recorded():
    """Llama 4 presets: AutoModelForCausalLM picks the text-only Llama4ForCausalLM; the
    checkpoint's Llama4ForConditionalGeneration adds the vision tower (871,932,416 parameters)."""
    scout = COUNTS["models"]["llama-4-scout"]
    assert scout["causal_lm"]["class"] == "Llama4ForCausalLM"
    assert scout["architecture_class"]["class"] == "Llama4ForConditionalGeneration"
    assert scout["architecture_class"]["params"] - scout["causal_lm"]["params"] == 871_932_416
