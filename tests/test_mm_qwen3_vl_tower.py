"""Qwen3-VL's vision tower peak under vLLM 0.33 (issue #27): hand-derived, and exact on vLLM's own
``Qwen3_VisionTransformer`` run on CPU (``tools/multimodal_truth/qwen3_vl_tower_peak.py`` →
``tests/fixtures/multimodal_truth/qwen3_vl_tower_peak.json``; ``kvplan.engines.vllm.multimodal``
``_qwen3_vl_peak``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines.vllm.multimodal import EncoderBudget, tower_peak
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "multimodal_truth" /
                      "qwen3_vl_tower_peak.json").read_text())


def _budget(tokens: int, items: int = 1) -> EncoderBudget:
    return EncoderBudget({"image": tokens}, {"image": tokens}, tokens, tokens, "image", items)


@pytest.mark.parametrize("model", FIXTURE["models"], ids=lambda m: m["model"])
def test_exact_on_vllms_own_tower(model):
    """Every one-frame grid to the byte; two-frame-group grids (video, never the profile's dummy
    for Qwen3-VL) hold no position ids at the peak: 16 B per patch fewer, and 4 B more of
    cu_seqlens."""
    arch = load_model(model["model"])
    assert FIXTURE["vllm"] == "0.33.0" and FIXTURE["tp"] == 1
    for case in model["cases"]:
        peak = tower_peak(arch, _budget(case["patches"] // 4), arch.processor, "bfloat16", 1)
        assert peak is not None
        if case["grid_thw"][0] == 1:
            assert peak.bytes == case["peak_bytes"], case
        else:
            assert peak.bytes - 16 * case["patches"] + 4 == case["peak_bytes"], case


def test_qwen3_vl_8b_by_hand():
    """8B tower: h 1,152, I 4,304, 16 heads (head_dim 72), 3 deepstack mergers into hidden 4,096,
    pixels 3·2·16² = 1,536. Attention 4·1,152 + 8·1,152 = 13,824 > MLP 3·1,152 + 2·4,304 = 12,064;
    + 3·4,096/4 = 3,072 deepstack + 72 rotary = 16,968 elements; + 1,536 pixels; × 2 B + 16 B of
    ids = 37,024 B per patch. The profile's 4096×4096 image: 16,384 tokens × 4 = 65,536 patches →
    2,426,404,864 + 12 (cu_seqlens 2 × 4 B, max_seqlen 4 B) = 2,426,404,876 B."""
    arch = load_model("Qwen/Qwen3-VL-8B-Instruct")
    peak = tower_peak(arch, _budget(16_384), arch.processor, "bfloat16", 1)
    assert peak is not None and (peak.block_elements, peak.pixel_elements) == (16_968, 1_536)
    assert peak.bytes == 65_536 * 37_024 + 12 == 2_426_404_876
    # at tp 2 the attention's 8·h and the MLP's I split: 4·1,152 + 4·1,152 = 9,216 vs 3,456 +
    # 4,304 = 7,760: 9,216 + 3,072 + 72 = 12,360
    half = tower_peak(arch, _budget(16_384), arch.processor, "bfloat16", 2)
    assert half is not None and half.block_elements == 12_360


def test_the_plan_takes_the_excess_over_what_the_profile_holds():
    plan = make_plan(load_model("Qwen/Qwen3-VL-8B-Instruct"), get_gpu("h100-sxm"),
                     FitQuery(tokens=32_768, engine="vllm@0.33"))
    terms = {t.name: t for t in plan.budget.reserve_detail.terms}
    held = terms["activation_peak"].bytes + terms["mm_encoder_cache"].bytes
    assert terms["mm_encoder_peak"].bytes == 2_426_404_876 - held
    assert "Qwen3-VL block at its peak, attention 4·h + 8·h/tp" in terms["mm_encoder_peak"].formula


def test_older_releases_have_no_qwen3_vl_peak_term():
    """0.11.0's ``Qwen2_5_VisionAttention`` copies q, k and v and concatenates q and k before the
    rotary: another live set, not derived (``VllmRelease.qwen3_vl_tower_peak`` is 0.33's)."""
    plan = make_plan(load_model("Qwen/Qwen3-VL-8B-Instruct"), get_gpu("h100-sxm"),
                     FitQuery(tokens=32_768, engine="vllm@0.32"))
    names = {t.name for t in plan.budget.reserve_detail.terms}
    assert "mm_encoder_cache" in names and "mm_encoder_peak" not in names
