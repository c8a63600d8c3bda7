"""Qwen3-VL's processor against vLLM's and transformers' own code, and the 2026 multimodal presets.

``tests/fixtures/multimodal_truth/qwen3_vl.json`` is written by the dev-time generator
``tools/multimodal_truth/qwen3_vl.py`` (vLLM 0.33.0 ``qwen3_vl.py`` ``Qwen3VLProcessingInfo``;
transformers' image ``smart_resize`` and Qwen3-VL video ``smart_resize``, on CPU). kvplan's
``QwenVLProcessor`` with the preset's values must give every count exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KVPlanError
from kvplan.multimodal import QwenVLProcessor
from kvplan.presets import load_model

TRUTH = json.loads((Path(__file__).parent / "fixtures" / "multimodal_truth" / "qwen3_vl.json")
                   .read_text(encoding="utf-8"))
MODELS = {m["hf_repo"]: m for m in TRUTH["models"]}


def _processor(repo: str) -> QwenVLProcessor:
    processor = load_model(repo).processor
    assert isinstance(processor, QwenVLProcessor)
    return processor


def test_truth_is_vllm_0_33_on_four_checkpoints():
    """Qwen3-VL dense and MoE, and Qwen3.5 / 3.6 (vLLM ``Qwen3_5ProcessingInfo`` is
    ``Qwen3VLProcessingInfo``): 49 image and video sizes each."""
    assert TRUTH["vllm"] == "0.33.0"
    assert set(MODELS) == {"Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-30B-A3B-Instruct",
                           "Qwen/Qwen3.5-27B", "Qwen/Qwen3.6-35B-A3B"}
    assert sum(len(m["images"]) + len(m["videos"]) for m in TRUTH["models"]) == 196


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_image_tokens_as_vllm_counts_them(repo):
    processor = _processor(repo)
    for case in MODELS[repo]["images"]:
        if "error" in case:
            with pytest.raises(KVPlanError, match="aspect ratio above 200"):
                processor.image_tokens(case["width"], case["height"])
        else:
            assert processor.image_tokens(case["width"], case["height"]) == case["tokens"], case


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_video_tokens_as_vllm_counts_them(repo):
    processor = _processor(repo)
    for case in MODELS[repo]["videos"]:
        assert "error" not in case
        assert processor.video_tokens(case["width"], case["height"], case["frames"]) == \
            case["tokens"], case


@pytest.mark.parametrize("repo", sorted(MODELS))
def test_largest_items_as_vllm_profiles_them(repo):
    processor = _processor(repo)
    for case in MODELS[repo]["largest"]:
        assert list(processor.largest_image()) == case["largest_image"]
        assert processor.max_image_tokens() == case["max_image_tokens"]
        assert processor.max_tokens_per_item(case["seq_len"]) == case["max_tokens_per_item"]


def test_qwen3_vl_by_hand():
    """1280×720 image: factor 16 · 2 = 32; 720/32 = 22.5 rounds to 22 (banker's) → 704, 1280 → 1280;
    (704/16)·(1280/16)/4 = 44 · 80 / 4 = 880 tokens. A 4096×4096 image (16,777,216 px, the
    max) is 128 · 128 merged patches = 16,384 — vLLM's largest image. Video: 16 frames of
    1280×720 are 16 · 704 · 1280 = 14,417,920 ≤ 25,165,824 px, so no scaling: 8 temporal groups
    × 880 = 7,040; 64 frames (57,671,680 px) scale by sqrt(64·720·1280 / 25,165,824) ≈ 1.532
    to 448 × 832 → 32 · (28 · 52)/4 = 11,648. vLLM's largest video: two frames of the largest
    image within 25,165,824 // 2 = 12,582,912 px: 12,288 merged patches, the closest pair
    96 × 128 → 4,096 × 3,072; 2 · 3,072 · 4,096 is the max itself, so no scaling: one temporal
    group of (3,072/16)·(4,096/16)/4 = 12,288 tokens, below the image's 16,384 (the encoder
    budget's item is the image). A single frame is refused (temporal_patch_size 2)."""
    qwen = _processor("Qwen/Qwen3-VL-8B-Instruct")
    assert qwen.resize(1280, 720) == (1280, 704) and qwen.image_tokens(1280, 720) == 880
    assert qwen.prompt_tokens(1280, 720) == 882
    assert qwen.max_image_tokens() == 16_384
    assert qwen.video_tokens(1280, 720, 16) == 7_040
    assert qwen.resize_video(1280, 720, 64) == (832, 448)
    assert qwen.video_tokens(1280, 720, 64) == 32 * 28 * 52 // 4 == 11_648
    assert qwen.largest_image(12_582_912) == (4096, 3072)
    assert qwen.max_video_tokens(32_768) == 12_288
    with pytest.raises(KVPlanError, match="at least 2 frames"):
        qwen.video_tokens(1280, 720, 1)


QWEN3_VL = ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
            "Qwen/Qwen3-VL-32B-Instruct", "Qwen/Qwen3-VL-32B-Thinking",
            "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Instruct"]


QWEN3_5 = ["Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-122B-A10B",
           "Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.6-35B-A3B", "nvidia/Qwen3.5-122B-A10B-NVFP4",
           "nvidia/Qwen3.5-397B-A17B-NVFP4"]


@pytest.mark.parametrize("repo", QWEN3_VL + QWEN3_5)
def test_every_qwen3_vl_preset_has_its_processor_and_an_exact_architecture(repo):
    from kvplan.config_import import support_status

    arch = load_model(repo)
    assert isinstance(arch.processor, QwenVLProcessor)
    assert (arch.processor.patch_size, arch.processor.merge_size) == (16, 2)
    assert support_status(arch)[0] == "exact"
    assert arch.weights.towers[0].layout == "qwen3_vl"


MISTRAL3 = json.loads((Path(__file__).parent / "fixtures" / "multimodal_truth" / "mistral3.json")
                      .read_text(encoding="utf-8"))


def test_pixtral_grid_as_vllm_counts_it():
    """Mistral-Small-3.1's images against vLLM 0.33's ``Mistral3HFEncoderInfo`` (16 sizes, written by
    ``tools/multimodal_truth/mistral3.py``): grid, embeddings and the prompt with its row breaks."""
    from kvplan.multimodal import PixtralProcessor

    assert MISTRAL3["vllm"] == "0.33.0" and len(MISTRAL3["images"]) == 16
    processor = load_model(MISTRAL3["hf_repo"]).processor
    assert isinstance(processor, PixtralProcessor)
    for case in MISTRAL3["images"]:
        w, h = case["width"], case["height"]
        assert list(processor.grid(w, h)) == case["grid"], case
        assert processor.image_tokens(w, h) == case["tokens"], case
        assert processor.prompt_tokens(w, h) == case["prompt_tokens"], case
    side = MISTRAL3["dummy_image"][0]
    assert processor.max_tokens_per_item(32_768) == {"image": processor.image_tokens(side, side)}


def test_pixtral_by_hand():
    """1280×720 fits in 1,540 px: 28-px cells (14 × merge 2), (1279 // 28 + 1) = 46 columns,
    (719 // 28 + 1) = 26 rows: 1,196 embeddings, 26 × 47 = 1,222 prompt tokens. 4000×3000 is
    scaled by 4000/1540 to 1540 × 1155 (floors): 1539 // 28 + 1 = 55 columns, 1154 // 28 + 1 = 42
    rows → 2,310 embeddings, 42 × 56 = 2,352 prompt tokens. vLLM's dummy image 1540² → 55 × 55 =
    3,025 embeddings (55 × 56 = 3,080 with the breaks)."""
    processor = load_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503").processor
    assert processor.grid(1280, 720) == (46, 26)
    assert (processor.image_tokens(1280, 720), processor.prompt_tokens(1280, 720)) == (1196, 1222)
    assert processor.grid(4000, 3000) == (55, 42) and processor.image_tokens(4000, 3000) == 2310
    assert processor.prompt_tokens(4000, 3000) == 2352
    assert processor.max_tokens_per_item(8192) == {"image": 3025}
    assert processor.max_tokens_per_item(8192, placeholder=True) == {"image": 3080}
    with pytest.raises(KVPlanError, match="0×0"):
        processor.image_tokens(0, 0)
