"""kvplan's tokens per image and vLLM encoder budget against the libraries' own code.

``tests/fixtures/multimodal_truth/cases.json`` is written by the dev-time generator
``tools/multimodal_truth/generate.py`` (vLLM 0.33.0's ``Qwen2VLProcessingInfo`` and
``compute_mm_encoder_budget`` / ``MultiModalBudget._get_max_items``, transformers 5.20.2's
``smart_resize``, run on CPU); every case must match exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines.vllm.multimodal import encoder_budget
from kvplan.errors import KVPlanError
from kvplan.multimodal import QwenVLProcessor, TiledProcessor, with_processor_kwargs
from kvplan.presets import load_model

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "multimodal_truth" / "cases.json").read_text())
MODELS = {m["hf_repo"]: m for m in FIXTURE["models"]}


def _processor(repo: str) -> QwenVLProcessor:
    processor = load_model(repo).processor
    assert isinstance(processor, QwenVLProcessor)
    return processor


def test_the_fixture_names_its_versions_and_holds_cases():
    assert (FIXTURE["vllm"], FIXTURE["transformers"]) == ("0.33.0", "5.20.2")
    model = MODELS["Qwen/Qwen2.5-VL-7B-Instruct"]
    assert len(model["images"]) == 64 and len(model["budgets"]) == 24 and len(model["videos"]) == 24


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_tokens_per_image_equal_vllms_and_transformers(repo):
    processor = _processor(repo)
    for case in MODELS[repo]["images"]:
        w, h, top = case["width"], case["height"], case["max_pixels"]
        if "error" in case:  # transformers raises: kvplan refuses by name
            with pytest.raises(KVPlanError, match="aspect ratio above 200"):
                processor.image_tokens(w, h, top)
            continue
        assert list(processor.resize(w, h, top)) == case["resized"], case
        assert processor.image_tokens(w, h, top) == case["tokens"], case
    for case in MODELS[repo]["videos"]:
        got = processor.video_tokens(case["width"], case["height"], case["frames"], case["max_pixels"])
        assert got == case["tokens"], case


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_largest_item_equals_vllms_profile_dummy(repo):
    processor = _processor(repo)
    for case in MODELS[repo]["largest"]:
        top = case["max_pixels"]
        assert list(processor.largest_image(top)) == case["largest_image"], case
        assert processor.max_image_tokens(top) == case["max_image_tokens"], case
        assert processor.max_tokens_per_item(case["seq_len"], top) == case["max_tokens_per_item"], case


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_mm_processor_kwargs_resolve_as_vllms_merge(repo):
    """``--mm-processor-kwargs`` (flat, ``images_kwargs`` / ``videos_kwargs``, ``size`` edges,
    null) through vLLM 0.33's own ``_merge_mm_processor_kwargs`` and ``_resolve_mm_processor_kwargs``:
    kvplan's processor gives the same tokens, largest image and largest items, all 13 values."""
    cases = MODELS[repo]["kwargs"]
    assert len(cases) == 13
    for case in cases:
        processor = with_processor_kwargs(repo, _processor(repo), json.dumps(case["mm_processor_kwargs"]))
        assert isinstance(processor, QwenVLProcessor)
        for size, tokens in case["image_tokens"].items():
            w, h = map(int, size.split("x"))
            assert processor.image_tokens(w, h) == tokens, (case, size)
        assert processor.video_tokens(1280, 720, 8) == case["video_tokens_1280x720x8"], case
        assert list(processor.largest_image()) == case["largest_image"], case
        assert processor.max_image_tokens() == case["max_image_tokens"], case
        assert processor.max_tokens_per_item(32_768) == case["max_tokens_per_item"], case


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_encoder_budget_equals_vllms(repo):
    arch = load_model(repo)
    for case in MODELS[repo]["budgets"]:
        got = encoder_budget(arch, mnbt=case["mnbt"], max_num_seqs=case["max_num_seqs"],
                             max_model_len=case["max_model_len"], image_limit=case["limit"],
                             max_pixels=case["max_pixels"], chunked_prefill=case["chunked_prefill"])
        assert got is not None
        assert (got.compute_budget, got.cache_size, got.budget, got.modality, got.items_per_batch) == (
            case["compute_budget"], case["cache_size"], case["budget"], case["modality"],
            case["items_per_batch"]), case


@pytest.mark.parametrize("case", FIXTURE["tiled"], ids=lambda c: c["hf_repo"])
def test_llama4_tiles_equal_transformers_and_vllm(case):
    """transformers' ``get_best_fit`` canvas and ``_prompt_split_image`` prompt, vLLM's
    ``get_patch_per_chunk`` (144) and dummy image (336 × 5376), for every size of the grid."""
    processor = load_model(case["hf_repo"]).processor
    assert isinstance(processor, TiledProcessor)
    assert processor.tokens_per_tile == case["tokens_per_tile"]
    assert [processor.tile_size, processor.max_tiles * processor.tile_size] == case["dummy_image"]
    assert len(case["images"]) == 18
    for image in case["images"]:
        w, h = image["width"], image["height"]
        assert list(processor.canvas(w, h)) == image["canvas"], image
        assert processor.image_tokens(w, h) == image["tokens"], image
        assert processor.prompt_tokens(w, h) == image["prompt_tokens"], image
    dummy_w, dummy_h = case["dummy_image"]
    assert processor.max_tokens_per_item(4096) == {"image": processor.image_tokens(dummy_w, dummy_h)}


TOWER = json.loads((Path(__file__).parent / "fixtures" / "multimodal_truth" / "tower_peak.json").read_text())


def test_the_qwen25_vl_tower_peak_equals_vllms_own_tower_run():
    """``tools/multimodal_truth/tower_peak.py`` runs vLLM 0.33's ``Qwen2_5_VisionTransformer`` on CPU
    (five grids, 1,024 to 8,192 patches) and records the live-tensor peak; kvplan's
    ``tower_peak`` (the block at ``down_proj``, the rotary tables, the pixel values: 35,992 B a
    patch) is it less only the int64 window indices (``window_index``, its ``torch.cat`` and
    ``reverse_indices``: 3 × 8 B per merged token of 4 patches = 6 B a patch) and the int32 window
    offsets (``cu_window_seqlens``, 2 copies of 4 B per 64-patch window) with a few constants."""
    from kvplan.engines.vllm.multimodal import EncoderBudget, tower_peak

    assert (TOWER["vllm"], TOWER["model"], TOWER["tp"]) == ("0.33.0", "Qwen/Qwen2.5-VL-7B-Instruct", 1)
    arch = load_model(TOWER["model"])
    assert len(TOWER["cases"]) == 5
    for case in TOWER["cases"]:
        tokens = case["patches"] // 4
        budget = EncoderBudget({"image": tokens}, {"image": tokens}, tokens, tokens, "image", 1)
        peak = tower_peak(arch, budget, arch.processor, "bfloat16", 1)
        assert peak is not None and peak.patches == case["patches"]
        assert peak.bytes == case["patches"] * 35_992
        extra = case["peak_bytes"] - peak.bytes
        assert 6 * case["patches"] <= extra <= 6.25 * case["patches"] + 256, case


def test_the_siglip_tower_peak_equals_vllms_own_tower_run():
    """The same run for Gemma-3-27B's SigLIP (vLLM 0.33 ``SiglipVisionModel``, 1 to 3 images at an
    image size of 224 to keep the CPU run short: a patch's terms do not depend on the count):
    27,608 B a patch measured, kvplan's (4 × 1,152 + 2 × 4,304 + 588 pixel values) × 2 B exactly."""
    from kvplan.engines.vllm.multimodal import EncoderBudget, tower_peak

    siglip = TOWER["siglip"]
    assert (siglip["model"], siglip["image_size"], len(siglip["cases"])) == ("google/gemma-3-27b-it", 224, 3)
    arch = load_model(siglip["model"])
    processor = arch.processor.model_copy(update={"image_size": siglip["image_size"]})
    for case in siglip["cases"]:
        budget = EncoderBudget({"image": 256}, {"image": 256}, 8192, 8192, "image", case["images"])
        peak = tower_peak(arch, budget, processor, "bfloat16", 1)
        assert peak is not None and peak.patches == case["patches"]
        assert peak.bytes == case["peak_bytes"] == case["patches"] * 27_608, case
