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
from kvplan.errors import KVPlanError
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
    "google--gemma-4-26B-A4B": (0.00043, "Gemma4ForConditionalGeneration's text model (its "
                                         "towers aside) is 10,832,128 parameters below kvplan's "
                                         "count: not analysed here"),
    "nvidia--Gemma-4-26B-A4B-NVFP4": (0.00043, "as google--gemma-4-26B-A4B"),
    "mistralai--Mistral-Small-3.1-24B-Instruct-2503": (
        0.03, "the config states no tie_word_embeddings: transformers 5.24 ties Mistral3's lm_head "
              "to the embeddings by the top-level default (22,901,314,560), vLLM builds the text "
              "model from text_config (MistralConfig, untied) and loads the stored lm_head: "
              "kvplan counts it (+671,088,640 = 131,072 × 5,120)"),
    "nvidia--Gemma-4-31B-IT-NVFP4": (0.0034, "Gemma4ForConditionalGeneration's text model is "
                                            "103,907,328 parameters below kvplan's count: not "
                                            "analysed here"),
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
    # a multimodal checkpoint is held to the text model of its own class (the class's count less
    # its towers, which test_tower_params holds); a text model to AutoModelForCausalLM's class
    whole = entry.get("architecture_class", {})
    counted = entry["causal_lm"] if "error" not in entry["causal_lm"] else whole
    assert "error" not in counted
    reference = whole["text_model"] if "text_model" in whole else counted["params"]
    config = json.loads((PRESETS_DIR / "models" / f"{preset}.json").read_text())["config"]
    computed = parse_config(config).params_total
    if preset in GAPS:
        bound, reason = GAPS[preset]
        error = abs(computed - reference) / reference
        assert 0 < error <= bound, f"{preset}: {computed:,} vs {reference:,} ({error:.5%}); {reason}"
    else:
        assert computed == reference


#: preset → (largest relative error, reason): kvplan's tower parameters (``vision``/``audio``
#: parts of ``weights.model_tensors``) against transformers' (the class's parameters under
#: ``model.visual``, ``vision_tower``, ``vision_model``, ``multi_modal_projector``, ``audio_tower``).
TOWER_GAPS: dict[str, tuple[float, str]] = {
    "llama-4-scout": (0.064, "Llama-4's vision adapter (pixel-shuffle MLP) and class embedding are "
                             "not in the generic ViT rule: 816,877,952 against 871,932,416"),
    "llama-4-maverick": (0.064, "as llama-4-scout"),
    "google--gemma-4-26B-A4B": (0.25, "Gemma-4's tower is not sized by the generic ViT rule: "
                                      "427,395,312 against 569,548,080"),
    "nvidia--Gemma-4-26B-A4B-NVFP4": (0.25, "as google--gemma-4-26B-A4B"),
    "nvidia--Gemma-4-31B-IT-NVFP4": (0.25, "as google--gemma-4-26B-A4B (430,344,432 against "
                                           "569,548,080)"),
}


def _with_towers():
    return sorted(k for k, e in COUNTS["models"].items()
                  if "towers" in e.get("architecture_class", {}))


@pytest.mark.parametrize("preset", _with_towers())
def test_tower_params(preset):
    """Towers as kvplan sizes them (``weights._tower`` / ``_qwen_vl_tower``) against transformers'
    own modules: exact for the Qwen-VL layouts (Qwen2.5-VL, Qwen3-VL, Qwen3.5/3.6), Gemma-3's
    SigLIP with its projector, Pixtral (Mistral-Small-3.1) and MoonViT (Kimi-K2.5)."""
    from kvplan.weights import model_tensors

    config = json.loads((PRESETS_DIR / "models" / f"{preset}.json").read_text())["config"]
    ours = sum(t.params for t in model_tensors(parse_config(config)) if t.part in {"vision", "audio"})
    reference = COUNTS["models"][preset]["architecture_class"]["towers"]
    if preset in TOWER_GAPS:
        bound, reason = TOWER_GAPS[preset]
        error = abs(ours - reference) / reference
        assert 0 < error <= bound, f"{preset}: {ours:,} vs {reference:,}; {reason}"
    else:
        assert ours == reference


def test_qwen3_vl_8b_tower_by_hand():
    """Qwen3-VL-8B's tower (vision hidden 1,152, MLP 4,304, 27 blocks, merge 2, out 4,096, 3
    deepstack mergers; transformers modeling_qwen3_vl.py, vLLM qwen3_vl.py
    Qwen3_VisionTransformer): patch Conv3d 1,152 × (3·2·16²) + 1,152 bias = 1,770,624; positions
    2,304 × 1,152 = 2,654,208; per block LayerNorms 4 × 1,152 + qkv 3,456 × 1,153 + proj
    1,152 × 1,153 + fc1 4,304 × 1,153 + fc2 1,152 × 4,305 = 15,239,504, × 27 = 411,466,608;
    merger LN 2 × 1,152 + 4,608 × 4,609 + 4,096 × 4,609 = 40,119,040; each deepstack merger the
    same with its LN over 4,608 (2 × 4,608): 40,125,952, × 3 = 120,377,856. Sum 576,388,336;
    in bf16 1,152,776,672 B."""
    from kvplan.presets import load_model
    from kvplan.weights import weights_per_gpu

    assert 1_770_624 + 2_654_208 + 411_466_608 + 40_119_040 + 120_377_856 == 576_388_336
    assert COUNTS["models"]["Qwen--Qwen3-VL-8B-Instruct"]["architecture_class"]["towers"] == 576_388_336
    arch = load_model("Qwen/Qwen3-VL-8B-Instruct")
    assert weights_per_gpu(arch).total_by_part["vision"] == 1_152_776_672


def test_qwen2_5_vl_7b_tower_by_hand():
    """Qwen2.5-VL-7B's tower (hidden 1,280, gated MLP 3,420, 32 blocks, merge 2, out 3,584;
    modeling_qwen2_5_vl.py, vLLM qwen2_5_vl.py): patch Conv3d 1,280 × 1,176 (no bias) =
    1,505,280; per block RMSNorms 2 × 1,280 + qkv 3,840 × 1,281 + proj 1,280 × 1,281 + gate/up
    2 × 3,420 × 1,281 + down 1,280 × 3,421 = 19,702,200, × 32 = 630,470,400; merger ln_q 1,280 +
    5,120 × 5,121 + 3,584 × 5,121 = 44,574,464. Sum 676,550,144 (transformers' count)."""
    from kvplan.presets import load_model
    from kvplan.weights import weights_per_gpu

    assert 1_505_280 + 630_470_400 + 44_574_464 == 676_550_144
    arch = load_model("Qwen/Qwen2.5-VL-7B-Instruct")
    assert weights_per_gpu(arch).total_by_part["vision"] == 2 * 676_550_144


def test_kimi_k2_5_moonvit_by_hand():
    """Kimi-K2.5's MoonViT (vt_hidden 1,152, MLP 4,304, 27 blocks, patch 14, positions 64 × 64,
    merge 2 × 2, text hidden 7,168; transformers modeling_kimi_k25.py, vLLM kimi_k25_vit.py):
    per block q/k/v 3 · 1,152 × 1,153 + proj 1,152 × 1,153 + fc1 4,304 × 1,153 + fc2
    1,152 × 4,305 + two LayerNorms 4 × 1,152 = 15,239,504, × 27 = 411,466,608; patch Conv2d
    1,152 × (3 · 14²) + 1,152 = 678,528; positions 4,096 × 1,152 = 4,718,592; final LayerNorm
    2,304; projector pre-norm 2,304 + in 4,608 × 4,609 + out 7,168 × 4,608 + 7,168 = 54,277,888.
    Sum 471,143,920 (transformers' count of the tower and mm_projector); 942,287,840 B in bf16."""
    from kvplan.multimodal import ImageRequest, image_prompt_tokens
    from kvplan.presets import load_model
    from kvplan.weights import weights_per_gpu

    assert 411_466_608 + 678_528 + 4_718_592 + 2_304 + 54_277_888 == 471_143_920
    assert COUNTS["models"]["moonshotai--Kimi-K2.5"]["architecture_class"]["towers"] == 471_143_920
    arch = load_model("moonshotai/Kimi-K2.5")
    assert weights_per_gpu(arch).total_by_part["vision"] == 942_287_840
    # no processor preset: a request's images are refused by name, never guessed
    with pytest.raises(KVPlanError, match="no image processor is known for Kimi-K2.5"):
        image_prompt_tokens(arch.name, arch.processor, ImageRequest(count=1, width=1280, height=720))


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


#: multimodal preset → why its ``params_total`` is not transformers' count of its class.
PARAMS_TOTAL_EXCEPTIONS: dict[str, str] = {
    "mistralai--Mistral-Small-3.1-24B-Instruct-2503": (
        "config.json states no tie_word_embeddings: transformers 5.24's Mistral3ForConditionalGeneration "
        "ties the lm_head by the top-level default (23,340,272,640), while the checkpoint stores "
        "lm_head.weight and vLLM builds the text model from text_config (MistralConfig, untied) and "
        "loads it: 23,340,272,640 + 131,072 × 5,120 = 24,011,361,280, the count of what is stored"),
}


def _multimodal():
    out = []
    for preset in _presets():
        config = json.loads((PRESETS_DIR / "models" / f"{preset}.json").read_text())["config"]
        if "vision_config" in config or "text_config" in config:
            out.append(preset)
    return out


def test_every_multimodal_preset_has_its_class_counted():
    """Every preset with a ``vision_config`` or ``text_config`` has transformers' count of its
    ``architectures[0]`` class in the fixture."""
    missing = [p for p in _multimodal()
               if "params" not in COUNTS["models"][p].get("architecture_class", {})]
    assert missing == []
    assert set(PARAMS_TOTAL_EXCEPTIONS) <= set(_multimodal())


@pytest.mark.parametrize("preset", _multimodal())
def test_multimodal_params_total_is_the_whole_class(preset):
    """One rule for a multimodal checkpoint's ``params_total`` (the models table's parameters, and
    the weights the recommender prices when the checkpoint is not pre-quantized): transformers
    5.24's meta-device count of the checkpoint's own class (``architectures[0]``, e.g.
    ``Qwen3_5ForConditionalGeneration``), towers and projectors included — not its text model
    alone. Before this rule 15 presets held the text model only (Qwen3.5 / 3.6 and their NVFP4
    releases, Gemma-3 12B / 27B, Gemma-4, Llama-4 Maverick) or a printout's figure (Llama-4
    Scout 109,676,279,296 against the class's 108,641,793,536)."""
    preset_file = json.loads((PRESETS_DIR / "models" / f"{preset}.json").read_text())
    whole = COUNTS["models"][preset]["architecture_class"]
    if preset in PARAMS_TOTAL_EXCEPTIONS:
        assert preset_file["params_total"] == whole["text_model"] + whole["towers"] + 671_088_640
    else:
        assert preset_file["params_total"] == whole["params"]
        assert whole["params"] == whole["text_model"] + whole["towers"]
