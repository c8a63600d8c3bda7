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


def test_releases_not_read_have_no_qwen3_vl_peak_term():
    """Only 0.11.0's and 0.33's Qwen3-VL tower code is read (``VllmRelease.qwen3_vl_tower``;
    0.11.1's ``Qwen2_5_VisionAttention`` already differs from 0.11.0's): no term on the others."""
    for engine in ("vllm@0.32", "vllm@0.11.2"):
        plan = make_plan(load_model("Qwen/Qwen3-VL-8B-Instruct"), get_gpu("h100-sxm"),
                         FitQuery(tokens=32_768, engine=engine))
        names = {t.name for t in plan.budget.reserve_detail.terms}
        assert "mm_encoder_cache" in names and "mm_encoder_peak" not in names, engine


FIXTURE_V011 = json.loads((Path(__file__).parent / "fixtures" / "multimodal_truth" /
                           "qwen3_vl_tower_peak_v0_11.json").read_text())


@pytest.mark.parametrize("model", FIXTURE_V011["models"], ids=lambda m: m["model"])
def test_v0_11_exact_on_vllms_own_tower(model):
    """vLLM 0.11.0's tower on CPU (``tools/multimodal_truth/qwen3_vl_tower_peak_v0_11.py``): every
    grid to the byte, given two things the rule leaves out: a grid of two frame groups holds one
    more int32 ``cu_seqlens`` entry (4 B; the profile's dummy is one group), and the rotary
    module's frequency cache (``Qwen2_5_VisionRotaryEmbedding.update_freqs_cache``: ``2 × side``
    rows of ``head_dim / 4`` float32 and a new ``inv_freq``, 2·side·head_dim + head_dim B) is
    allocated inside a run only when the grid's side exceeds what is cached — in the fixture's
    order the first grid (side 16) and the 32×64 one (side 64, freeing the side-16 cache). In a
    profile it is one allocation of at most tens of KiB (side 256: 36,936 B for head_dim 72), not
    counted by the rule."""
    arch = load_model(model["model"])
    tower = next(t for t in arch.weights.towers if t.name == "vision")
    head_dim = tower.hidden_size // tower.heads
    assert FIXTURE_V011["vllm"] == "0.11.0" and FIXTURE_V011["tp"] == 1
    cached = 0
    for case in model["cases"]:
        peak = tower_peak(arch, _budget(case["patches"] // 4), arch.processor, "bfloat16", 1, "0.11.0")
        assert peak is not None
        side = max(case["grid_thw"][1:])
        grown = 0
        if side > cached:  # cached: the rows held, 2 × the side that allocated them
            grown = (2 * side * head_dim + head_dim) - (cached * head_dim + head_dim if cached else 0)
            cached = 2 * side
        assert case["peak_bytes"] == peak.bytes + 4 * (case["grid_thw"][0] - 1) + grown, case


def test_v0_11_by_hand():
    """8B at TP 1 (h 1,152, head_dim 72, 3 deepstack mergers into 4,096): the rotary holds 3·h +
    10·h = 14,976 elements + 3,072 deepstack, and in float32 16·h + 6·72 = 18,864 B; with 1,536
    pixel values: 18,048 × 2 + 18,864 + 3,072 = 58,032 B a patch (0.33: 37,024). Qwen3-VL-30B-A3B
    at TP 4 (log 73: h 1,152, hidden 2,048): the all-gather holds 9·h + 3·h/4 = 11,232 elements +
    3 × 2,048 / 4 = 1,536, table 144 B: 12,768 × 2 + 144 + 3,072 = 28,752 B a patch; over the
    profile's 49,152 patches 1,413,218,304 + 20 B — below what v0.11.0's profile holds after it
    (the padded 2,516,582,400 B cache + the sampler), so log 73's excess term is 0 B."""
    arch = load_model("Qwen/Qwen3-VL-8B-Instruct")
    peak = tower_peak(arch, _budget(16_384), arch.processor, "bfloat16", 1, "0.11.0")
    assert peak is not None and (peak.block_elements, peak.patch_bytes) == (18_048, 18_864)
    assert peak.bytes == 65_536 * 58_032 + 20
    moe = load_model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    gather = tower_peak(moe, _budget(12_288), moe.processor, "bfloat16", 4, "0.11.0")
    assert gather is not None and "gather 9·h + 3·h/tp" in gather.rule
    assert gather.bytes == 49_152 * 28_752 + 20 == 1_413_218_324
    plan = make_plan(moe, get_gpu("rtx-3090"), FitQuery(tokens=65_536, engine="vllm@0.11", tp=4,
                                                         flashinfer_sampler=False))
    terms = {t.name: t for t in plan.budget.reserve_detail.terms}
    assert terms["mm_encoder_peak"].bytes == 0 and "gather 9·h + 3·h/tp" in terms["mm_encoder_peak"].formula
