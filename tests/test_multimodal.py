"""Tokens per image (``kvplan.multimodal``) and vLLM's encoder budget (``engines/vllm/multimodal.py``),
derived by hand from the processor and engine code each test names."""

from __future__ import annotations

import json
import re

import pytest

from kvplan.capacity import fit
from kvplan.cli import main
from kvplan.engines.vllm.multimodal import encoder_budget
from kvplan.errors import KVPlanError
from kvplan.multimodal import (
    FixedProcessor,
    ImageRequest,
    QwenVLProcessor,
    TiledProcessor,
    image_prompt_tokens,
)
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

QWEN = "Qwen/Qwen2.5-VL-7B-Instruct"


@pytest.fixture(scope="module")
def qwen() -> QwenVLProcessor:
    processor = load_model(QWEN).processor
    assert isinstance(processor, QwenVLProcessor)
    return processor


@pytest.fixture(scope="module")
def gemma() -> FixedProcessor:
    processor = load_model("gemma-3-27b").processor
    assert isinstance(processor, FixedProcessor)
    return processor


def test_the_presets_keep_the_processor_values_with_their_source(qwen, gemma):
    # preprocessor_config.json of Qwen2.5-VL-7B-Instruct; config.json / processor of gemma-3-27b-it
    assert (qwen.patch_size, qwen.merge_size, qwen.temporal_patch_size) == (14, 2, 2)
    assert (qwen.min_pixels, qwen.max_pixels) == (3136, 12_845_056)
    assert (gemma.tokens_per_image, gemma.prompt_tokens_per_image, gemma.image_size) == (256, 260, 896)
    assert "preprocessor_config.json" in qwen.source and "mm_tokens_per_image 256" in gemma.source
    assert load_model("gemma-3-12b").processor == gemma.model_copy(update={"source": load_model(
        "gemma-3-12b").processor.source})
    assert load_model("llama-3.1-8b").processor is None


@pytest.mark.parametrize(("size", "resized", "tokens"), [
    # smart_resize (transformers image_processing_qwen2_vl.py), factor 14 × 2 = 28:
    # 720/28 = 25.71 → 26 → 728; 1280/28 = 45.71 → 46 → 1288; 937,664 px within [3,136, 12,845,056];
    # (728/14)·(1288/14)/4 = 52·92/4 = 1,196
    ((1280, 720), (1288, 728), 1196),
    # 1080/28 = 38.57 → 39 → 1092; 1920/28 = 68.57 → 69 → 1932; 78·138/4 = 2,691
    ((1920, 1080), (1932, 1092), 2691),
    # 3000/28 = 107.1 → 2996; 4000/28 = 142.9 → 4004; 11,995,984 px ≤ max: 214·286/4 = 15,301
    ((4000, 3000), (4004, 2996), 15301),
    # 224 = 8·28 exactly: 16·16/4 = 64
    ((224, 224), (224, 224), 64),
    # 10/28 rounds to 0 → below min_pixels: β = sqrt(3136/100) = 5.6, ceil(10·5.6/28) = 2 → 56; 4·4/4 = 4
    ((10, 10), (56, 56), 4),
])
def test_qwen_vl_tokens_per_image_follow_smart_resize(qwen, size, resized, tokens):
    assert qwen.resize(*size) == resized
    assert qwen.image_tokens(*size) == tokens
    # the chat template's <|vision_start|> … <|vision_end|> around the expanded <|image_pad|>
    assert qwen.prompt_tokens(*size) == tokens + 2


def test_max_pixels_from_mm_processor_kwargs_scales_the_image_down(qwen):
    # 4000×3000 above max_pixels 1,003,520 (1280·28·28): β = sqrt(12e6 / 1,003,520) = 3.458;
    # floor(3000/3.458/28) = 30 → 840, floor(4000/3.458/28) = 41 → 1148; 60·82/4 = 1,230
    assert qwen.resize(4000, 3000, max_pixels=1_003_520) == (1148, 840)
    assert qwen.image_tokens(4000, 3000, max_pixels=1_003_520) == 1230


def test_vllm_profiles_the_largest_qwen_image_and_video(qwen):
    # get_image_size_with_most_features: 12,845,056 // 28² = 16,384 = 128 × 128 → 3584×3584,
    # 16,384 tokens per image (the "16,384 tokens reserved per image" of vllm#20123)
    assert qwen.largest_image() == (3584, 3584)
    assert qwen.max_image_tokens() == 16384
    # max_pixels 1,003,520: 1,280 merged patches = 32 × 40 → 1120×896, 1,280 tokens
    assert qwen.largest_image(1_003_520) == (1120, 896)
    assert qwen.max_image_tokens(1_003_520) == 1280
    # _get_max_video_frames(128,000): 14 frames = 7 temporal groups × 16,384 = 114,688 ≤ 128,000,
    # 15 frames pad to 16 = 131,072 >; capped at _MAX_FRAMES_PER_VIDEO 14 → 114,688
    assert qwen.max_video_tokens(128_000) == 114_688
    # seq 32,768: 4 frames = 2 × 16,384 fit, 5 → 6 frames = 49,152 do not
    assert qwen.max_video_tokens(32_768) == 32_768


def test_gemma3_images_are_256_tokens_at_any_size(gemma):
    assert gemma.image_tokens(1280, 720) == gemma.image_tokens(4000, 100) == 256
    assert gemma.max_tokens_per_item(131_072) == {"image": 256}


@pytest.mark.parametrize(("size", "message"), [
    ((0, 0), "image size 0×0: both sides must be at least 1 pixel"),
    ((-5, 10), "image size -5×10: both sides must be at least 1 pixel"),
    ((100_000, 10), "image size 100000×10: a side above 65,536 pixels"),
])
def test_bad_image_sizes_are_refused_by_name(qwen, gemma, size, message):
    for processor in (qwen, gemma):
        with pytest.raises(KVPlanError, match=message):
            processor.image_tokens(*size)


def test_qwen_refuses_aspect_ratios_above_200_as_transformers_does(qwen):
    with pytest.raises(KVPlanError, match="aspect ratio above 200"):
        qwen.image_tokens(5000, 10)
    assert qwen.image_tokens(2000, 10) > 0  # 200 exactly is accepted


def test_a_request_of_images_counts_prompt_tokens_and_checks_the_limit(qwen, gemma):
    two = ImageRequest.parse(2, "1280x720")
    assert (two.count, two.width, two.height) == (2, 1280, 720)
    assert image_prompt_tokens("Qwen2.5-VL", qwen, two) == 2 * 1198
    assert image_prompt_tokens("Gemma-3", gemma, two) == 2 * 260
    assert image_prompt_tokens("Gemma-3", gemma, ImageRequest()) == 0
    with pytest.raises(KVPlanError, match="2 image.s. per request: above --limit-mm-per-prompt's 1"):
        image_prompt_tokens("Gemma-3", gemma, two, limit=1)
    with pytest.raises(KVPlanError, match="no image processor is known for Llama"):
        image_prompt_tokens("Llama-3.1-8B", None, two)
    for bad in ("1280", "axb", "1280x720x3", "99999999999x1"):
        with pytest.raises(KVPlanError, match="expected WIDTHxHEIGHT"):
            ImageRequest.parse(1, bad)


def test_encoder_budget_is_max_of_mnbt_and_the_largest_item():
    """``compute_mm_encoder_budget`` (v1/core/encoder_cache_manager.py) and
    ``MultiModalBudget._get_max_items`` (multimodal/encoder_budget.py), vLLM 0.10 – 0.33."""
    qwen = load_model(QWEN)
    budget = encoder_budget(qwen, mnbt=8192, max_num_seqs=1024, max_model_len=128_000)
    assert budget is not None
    assert budget.max_tokens_per_item == {"image": 16384, "video": 114_688}
    assert (budget.compute_budget, budget.cache_size, budget.modality) == (114_688, 114_688, "video")
    # 114,688 // 114,688 = 1 item; per prompt max(1, min(999, 128,000 // 114,688)) = 1
    assert budget.items_per_batch == 1
    assert budget.log_line() == ("Encoder cache will be initialized with a budget of 114688 tokens, "
                                 "and profiled with 1 video items of the maximum feature size.")
    gemma = load_model("gemma-3-27b")
    budget = encoder_budget(gemma, mnbt=2048, max_num_seqs=1024, max_model_len=32_768)
    assert budget is not None
    # max(2048, 256) = 2048 tokens: 2048 // 256 = 8 images (1024 seqs × min(999, 128) is more)
    assert (budget.budget, budget.modality, budget.items_per_batch) == (2048, "image", 8)
    # without chunked prefill max_num_seqs is capped at 2048 // 256 = 8 too; with 4 seqs: 4 × 128
    small = encoder_budget(gemma, mnbt=2048, max_num_seqs=4, max_model_len=512, chunked_prefill=False)
    assert small is not None and small.items_per_batch == 8  # min(8, 4 × min(999, 512 // 256 = 2))
    # --limit-mm-per-prompt 0: text only, no budget, no encoder profile
    assert encoder_budget(gemma, mnbt=2048, max_num_seqs=4, max_model_len=512, image_limit=0) is None
    assert encoder_budget(load_model("llama-3.1-8b"), mnbt=2048, max_num_seqs=4, max_model_len=512) is None


def _reserve(plan):
    return {t.name: t for t in plan.budget.reserve_detail.terms}


def test_the_profiled_encoder_outputs_are_a_ledger_term_and_limit_zero_drops_them():
    qwen, gpu = load_model(QWEN), get_gpu("h100-sxm")
    plan = make_plan(qwen, gpu, FitQuery(tokens=128_000, engine="vllm@0.33"))
    term = _reserve(plan)["mm_encoder_cache"]
    # 1 video × 114,688 tokens × hidden 3,584 × 2 B (bf16)
    assert term.bytes == 114_688 * 3584 * 2 == 822_083_584
    assert "compute_mm_encoder_budget" in term.source
    assert term.formula.endswith('vLLM logs "Encoder cache will be initialized with a budget of 114688 '
                                 'tokens, and profiled with 1 video items of the maximum feature size."')
    assert any(t.name == "reserve: mm_encoder_cache" and t.bytes == 822_083_584 for t in plan.ledger)
    text_only = plan.vary(settings=plan.query.settings.model_copy(update={"limit_mm_per_prompt": 0}))
    assert "mm_encoder_cache" not in _reserve(text_only)
    assert "mm_encoder_peak" not in _reserve(text_only)
    # the budget gains the profiled video, the tower's peak beyond it and, on v0.33, the weights
    # of the tower, as test_text_only_v0_33_loads_no_vision_tower shows
    peak = _reserve(plan)["mm_encoder_peak"].bytes
    assert peak == 458_752 * 17_996 * 2 - (1_557_135_360 + 822_083_584) == 14_132_183_040
    assert text_only.budget.stage_budgets[0] - plan.budget.stage_budgets[0] == (
        822_083_584 + peak + 1_353_100_288)
    # --mm-processor-kwargs max_pixels 1,003,520: largest image 1,280 tokens, a video of 14 frames
    # (the cap) 7 × 1,280 = 8,960 tokens, above mnbt 8,192 → budget 8,960, 1 video: 8,960 × 3,584 × 2
    capped = plan.vary(settings=plan.query.settings.model_copy(
        update={"mm_processor_kwargs": '{"max_pixels":1003520}'}))
    assert _reserve(capped)["mm_encoder_cache"].bytes == 8960 * 3584 * 2
    gemma = make_plan(load_model("gemma-3-27b"), gpu, FitQuery(tokens=32_768, engine="vllm@0.33"))
    # mnbt 8,192 on an H100 (get_batch_defaults): 32 images × 256 × hidden 5,376 × 2 B
    assert _reserve(gemma)["mm_encoder_cache"].bytes == 32 * 256 * 5376 * 2 == 88_080_384


def test_fit_answers_two_images_at_1280x720_plus_1000_text_tokens(capsys):
    for model, per_image in ((QWEN, 1198), ("gemma-3-27b", 260)):
        assert main(["fit", "--model", model, "--gpu", "h100-sxm", "--tokens", "1000", "--images", "2",
                     "--image-size", "1280x720", "--engine-version", "0.33", "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["request"]["prompt_tokens_per_image"] == per_image
        assert payload["request"]["tokens"] == payload["tokens"] == 1000 + 2 * per_image
        plain = make_plan(load_model(model), get_gpu("h100-sxm"),
                          FitQuery(tokens=1000 + 2 * per_image, engine="vllm@0.33"))
        assert payload["max_requests"] == fit(plain).max_requests


@pytest.mark.parametrize(("extra", "message"), [
    (["--images", "2", "--image-size", "0x0"], "image size 0×0: both sides must be at least 1 pixel"),
    (["--images", "2", "--image-size", "70000x70000"], "a side above 65,536 pixels"),
    (["--images", "3", "--image-size", "640x480", "--limit-mm-per-prompt", "2"],
     "3 image.s. per request: above --limit-mm-per-prompt's 2"),
    (["--images", "2"], "give each image's size with --image-size"),
])
def test_fit_refuses_bad_images_by_name(capsys, extra, message):
    assert main(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--tokens", "1000", *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_releases_before_v0_13_count_gemma3s_whole_placeholder_as_a_public_log_shows():
    """A public vLLM 0.11.0rc2 start-up of google/gemma-3-27b-it (``max_model_len`` 4096,
    ``limit_mm_per_prompt`` {image: 2}, MNBT 8192; a README's startup log, find_string id
    9297248278) logs "Encoder cache will be initialized with a budget of 8192 tokens, and profiled
    with 31 image items": 8192 // 260 placeholder tokens = 31 (v0.10.1–v0.12 count
    ``PlaceholderRange.length``, PR #21798); from v0.13 the 256 embeddings: 8192 // 256 = 32.
    v0.11.0–v0.11.2's profile pads each image's 256 encoder rows to the 8,192-row budget
    (``profile_run``: ``new_zeros((encoder_budget, width))``, ``VllmRelease.mm_profile_pads``): 31 ×
    8,192 rows are cached where v0.10 caches 31 × 256."""
    gemma = load_model("gemma-3-27b")
    old = encoder_budget(gemma, mnbt=8192, max_num_seqs=1024, max_model_len=4096, image_limit=2,
                         placeholder=True)
    assert old is not None
    assert old.log_line() == ("Encoder cache will be initialized with a budget of 8192 tokens, and "
                              "profiled with 31 image items of the maximum feature size.")
    # the encoder writes 256 embeddings per image whichever way the budget counts
    assert old.profiled_tokens == 31 * 256
    new = encoder_budget(gemma, mnbt=8192, max_num_seqs=1024, max_model_len=4096, image_limit=2)
    assert new is not None and new.items_per_batch == 32
    gpu = get_gpu("h100-sxm")
    query = FitQuery(tokens=4096, engine="vllm@0.11", settings={"limit_mm_per_prompt": 2,
                                                                 "max_num_batched_tokens": 8192})
    term = _reserve(make_plan(gemma, gpu, query))["mm_encoder_cache"]
    assert term.bytes == 31 * 8192 * 5376 * 2 == 2_730_491_904
    before = make_plan(gemma, gpu, query.model_copy(update={"engine": "vllm@0.10"}))
    assert _reserve(before)["mm_encoder_cache"].bytes == 31 * 256 * 5376 * 2 == 85_327_872
    later = make_plan(gemma, gpu, query.model_copy(update={"engine": "vllm@0.17"}))
    assert _reserve(later)["mm_encoder_cache"].bytes == 32 * 256 * 5376 * 2


def test_a_public_qwen25_vl_start_up_log_has_the_budget_kvplan_derives():
    """A public vLLM 0.23.0 start-up of Qwen2.5-VL-7B-Instruct (defaults, ``max_model_len`` 128,000;
    a GitHub README's docker log, find_string id 55021192520) logs "Encoder cache will be
    initialized with a budget of 114688 tokens, and profiled with 1 video items": the 14-frame
    dummy video of 3584×3584 frames, 7 × 16,384 tokens (vLLM ``get_max_video_tokens``)."""
    plan = make_plan(load_model(QWEN), get_gpu("h100-sxm"), FitQuery(tokens=128_000, engine="vllm@0.24"))
    budget = plan.engine.mm_budget(plan.arch, plan.gpu, plan.settings, 128_000)
    assert budget is not None
    assert budget.log_line() == ("Encoder cache will be initialized with a budget of 114688 tokens, "
                                 "and profiled with 1 video items of the maximum feature size.")


def test_qwen3_vl_video_counts_its_timestamped_placeholder_before_v0_13():
    """vLLM log 73 (v0.11.0, Qwen3-VL-30B-A3B-Instruct at TP 4, ``max_model_len`` 65,536, MNBT 2,048)
    logs "Encoder cache will be initialized with a budget of 153600 tokens, and profiled with 1
    video items of the maximum feature size." v0.11.0 and v0.12.0 ``qwen3_vl.py``
    ``get_max_video_tokens`` return ``int(soft tokens × 12.5)`` (the "<{t} seconds>" text and the
    vision tokens around each soft token) and ``MultiModalProfiler.get_mm_max_contiguous_tokens``
    takes it: the dummy video's 12,288 soft tokens (two 4,096 × 3,072 frames within the video
    processor's 25,165,824 pixels: 1 × 256 × 192 patches / 2²) → 153,600, above the image's 16,384,
    so the profile's modality is video and one item fits (153,600 // 153,600). v0.13.0 returns the
    soft tokens: the image's 16,384 is the largest item, as kvplan's v0.17+ records give."""
    arch = load_model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    old = encoder_budget(arch, mnbt=2048, max_num_seqs=256, max_model_len=65_536, placeholder=True)
    assert old is not None
    assert old.max_tokens_per_item == {"image": 16_384, "video": 153_600} and 12_288 * 12.5 == 153_600
    assert old.log_line() == ("Encoder cache will be initialized with a budget of 153600 tokens, and "
                              "profiled with 1 video items of the maximum feature size.")
    # the encoder writes the soft tokens (embeddings), not the placeholder
    assert old.profiled_tokens == 12_288
    new = encoder_budget(arch, mnbt=2048, max_num_seqs=256, max_model_len=65_536)
    assert new is not None and (new.modality, new.budget, new.profiled_tokens) == ("image", 16_384, 16_384)
    # a Qwen2.5-VL video (no timestamps) is counted as its soft tokens either way
    qwen25 = load_model(QWEN).processor
    assert qwen25.max_tokens_per_item(65_536, placeholder=True) == qwen25.max_tokens_per_item(65_536)


def test_text_only_v0_33_loads_no_vision_tower():
    """``--limit-mm-per-prompt`` 0 on v0.33: the tower is a ``StageMissingLayer`` (interfaces.py
    ``_mark_tower_model``), so its 1,353,100,288 B of weights leave the GPU with the encoder profile.
    The same from v0.15.0 (``_mark_tower_model`` read in 0.15.0–0.32.0); v0.10.1–v0.14.1 by
    Qwen2.5-VL's own ``__init__`` (``self.visual = None`` at limits 0; Gemma-3's builds its tower
    whatever the limit); v0.9 builds every tower."""
    qwen, gpu = load_model(QWEN), get_gpu("h100-sxm")
    full = make_plan(qwen, gpu, FitQuery(tokens=32_768, engine="vllm@0.33"))
    assert full.weights.total_by_part["vision"] == 1_353_100_288
    text = full.vary(settings=full.query.settings.model_copy(update={"limit_mm_per_prompt": 0}))
    assert "vision" not in text.weights.total_by_part
    assert full.weights.total_bytes - text.weights.total_bytes == 1_353_100_288
    # the budget gains the tower, the profiled video (2 × 16,384 tokens × 3,584 × 2 B) and the
    # tower's peak beyond it: 131,072 patches × 17,996 × 2 B − (activation peak + the video)
    gained = text.budget.stage_budgets[0] - full.budget.stage_budgets[0]
    peak = 131_072 * 17_996 * 2 - (1_557_135_360 + 32_768 * 3584 * 2)
    assert gained == 1_353_100_288 + 32_768 * 3584 * 2 + peak
    def vision(model, engine):  # type: ignore[no-untyped-def]
        query = FitQuery(tokens=4096, engine=engine, settings={"limit_mm_per_prompt": 0})
        return make_plan(model, gpu, query).weights.total_by_part.get("vision", 0)

    assert [vision(qwen, e) for e in ("vllm@0.32", "vllm@0.17", "vllm@0.14", "vllm@0.10", "vllm@0.9")] \
        == [0, 0, 0, 0, 1_353_100_288]
    gemma = load_model("gemma-3-27b")
    assert [vision(gemma, e) for e in ("vllm@0.17", "vllm@0.14", "vllm@0.11")] \
        == [0, 846_120_672, 846_120_672]
    # Qwen3-VL (from v0.11.0) skips its tower in its own __init__ until v0.15 marks it
    qwen3 = load_model("Qwen/Qwen3-VL-8B-Instruct")
    assert [vision(qwen3, e) for e in ("vllm@0.14", "vllm@0.11")] == [0, 0]


def test_a_video_of_no_frames_is_refused(qwen):
    with pytest.raises(KVPlanError, match="video of 0 frames: at least 1 frame"):
        qwen.video_tokens(1280, 720, 0)
    # 3 frames pad to 4 (temporal_patch_size 2): 2 × 1,196
    assert qwen.video_tokens(1280, 720, 3) == 2392


def test_llama4_tiles_a_1280x720_image_into_12_plus_a_global_tile():
    """transformers ``get_best_fit`` (image_processing_llama4.py), 336-px tiles, ≤ 16: for 720×1280
    (h × w) the 3 × 4 canvas scales by min(1008/720, 1344/1280) = 1.05, the smallest ≥ 1 (4 × 4
    ties at 1.05 with more area); 12 tiles + the global tile = 13 × 144 = 1,872 embeddings; the
    prompt adds 3 rows × 3 x-separators, 3 y-separators, <|image_start|>, <|image|>, <|image_end|>."""
    processor = load_model("llama-4-scout").processor
    assert isinstance(processor, TiledProcessor)
    assert processor.canvas(1280, 720) == (4, 3)
    assert processor.image_tokens(1280, 720) == 1872
    assert processor.prompt_tokens(1280, 720) == 1872 + 9 + 3 + 3 == 1887
    assert processor.image_tokens(300, 300) == 144 and processor.prompt_tokens(300, 300) == 147
    # vLLM's dummy image 336 × 5376: 16 tiles + global = 2,448; MNBT 8,192 // 2,448 = 3 items
    budget = encoder_budget(load_model("llama-4-scout"), mnbt=8192, max_num_seqs=1024, max_model_len=65_536)
    assert budget is not None and (budget.budget, budget.items_per_batch) == (8192, 3)


# ------------------------------------------------------------- --mm-processor-kwargs (vLLM's JSON flag)


def test_mm_processor_kwargs_bound_the_qwen_processor_per_scope(qwen):
    """vLLM 0.33 ``_resolve_mm_processor_kwargs``: a flat ``max_pixels`` reaches both scopes; a
    scoped one wins in its scope; the pixel key beats a ``size`` edge (qwen2_vl.py
    ``_get_vision_size``)."""
    from kvplan.multimodal import with_processor_kwargs

    flat = with_processor_kwargs(QWEN, qwen, '{"max_pixels":1003520}')
    assert isinstance(flat, QwenVLProcessor)
    assert (flat.bounds(), flat.bounds(video=True)) == ((3136, 1_003_520), (3136, 1_003_520))
    assert flat.image_tokens(4000, 3000) == 1230  # smart_resize to 1148×840, as max_pixels= above
    scoped = with_processor_kwargs(QWEN, qwen, '{"images_kwargs":{"max_pixels":1003520},"max_pixels":200704}')
    assert isinstance(scoped, QwenVLProcessor)
    assert (scoped.bounds(), scoped.bounds(video=True)) == ((3136, 1_003_520), (3136, 200_704))
    # the profile's video: frames of the image scope's largest image (1120×896) resized in the
    # video scope: β = sqrt(1120·896/200704) = 2.236 → 476×392 → 17·14/4 = 59.5 → 238 per 2 frames
    assert scoped.max_tokens_per_item(32_768) == {"image": 1280, "video": 7 * 238}
    pixel_wins = with_processor_kwargs(QWEN, qwen, '{"max_pixels":1003520,"size":{"longest_edge":200704}}')
    assert isinstance(pixel_wins, QwenVLProcessor) and pixel_wins.bounds() == (3136, 1_003_520)
    assert with_processor_kwargs(QWEN, qwen, None) is qwen
    assert with_processor_kwargs(QWEN, qwen, "{}") is qwen


@pytest.mark.parametrize(("model", "text", "message"), [
    (QWEN, '{"fps":2}', "key 'fps' for .*min_pixels, max_pixels and size"),
    (QWEN, '{"images_kwargs":{"do_resize":false}}', "key 'images_kwargs.do_resize'"),
    (QWEN, '{"size":{"height":448}}', "key 'size.height'.*shortest_edge and longest_edge"),
    (QWEN, '{"max_pixels":"big"}', "key 'max_pixels'.*expected a whole number of pixels.*'big'"),
    (QWEN, '{"max_pixels":0}', "key 'max_pixels'.*from 1 to"),
    (QWEN, '{"min_pixels":2000000,"max_pixels":1003520}',
     "min_pixels 2,000,000 is above max_pixels 1,003,520"),
    (QWEN, '{"videos_kwargs":3}', "key 'videos_kwargs'.*expected a JSON object"),
    ("gemma-3-27b", '{"do_pan_and_scan":true}', "do_pan_and_scan.*pan-and-scan crops"),
    ("gemma-3-27b", '{"max_pixels":1003520}', "key 'max_pixels'.*do_pan_and_scan"),
    ("llama-4-scout", '{"max_patches":4}', "key 'max_patches'.*Llama-4 tile processor"),
    ("llama-3.1-8b", '{"max_pixels":1003520}', "no image processor is known"),
])
def test_mm_processor_kwargs_refuse_what_kvplan_does_not_model_by_name(model, text, message):
    from kvplan.multimodal import with_processor_kwargs

    arch = load_model(model)
    with pytest.raises(KVPlanError, match=message):
        with_processor_kwargs(arch.name, arch.processor, text)


def test_gemma_pan_and_scan_off_is_its_default(gemma):
    from kvplan.multimodal import with_processor_kwargs

    assert with_processor_kwargs("gemma", gemma, '{"do_pan_and_scan":false}') is gemma
    assert with_processor_kwargs("gemma", gemma, '{"images_kwargs":{"do_pan_and_scan":false}}') is gemma


def test_fit_takes_mm_processor_kwargs_as_vllm_spells_it(capsys):
    assert main(["fit", "--model", QWEN, "--gpu", "h100-sxm", "--tokens", "1000", "--images", "2",
                 "--image-size", "4000x3000", "--engine-version", "0.33", "--json",
                 "--mm-processor-kwargs", '{"max_pixels": 1003520}']) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["request"]["image_tokens_per_image"] == 1230
    assert payload["request"]["tokens"] == 1000 + 2 * (1230 + 2)
    assert main(["fit", "--model", QWEN, "--gpu", "h100-sxm", "--tokens", "1000",
                 "--mm-processor-kwargs", '{"fps": 2}']) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--mm-processor-kwargs key 'fps'" in err, err


def test_the_old_mp_link_key_is_read_as_max_pixels_with_a_note():
    from kvplan.scenario import Scenario, check_names

    scenario, warnings = Scenario.from_query({"m": QWEN, "mp": "1003520"})
    assert scenario.engine_settings.mm_processor_kwargs == '{"max_pixels":1003520}'
    assert warnings == ["link parameter 'mp'='1003520' was read as mk={\"max_pixels\":1003520} "
                        "(--mm-processor-kwargs)"]
    assert scenario.to_query()["mk"] == '{"max_pixels":1003520}' and "mp" not in scenario.to_query()
    _, bad = Scenario.from_query({"m": QWEN, "mp": "lots"})
    assert bad == ["link parameter 'mp'='lots' was not used: expected a whole number of pixels (it is "
                   "now max_pixels of --mm-processor-kwargs, link key mk)"]
    refused, notes = check_names(Scenario.from_query({"m": QWEN, "mk": '{"fps":2}'})[0])
    assert refused.engine_settings.mm_processor_kwargs is None
    assert len(notes) == 1 and notes[0].startswith("link parameter 'mk'='{\"fps\":2}' was not used: "
                                                   "--mm-processor-kwargs key 'fps'")


# ------------------------------------------------------------- the vision tower's profile peak


def test_the_qwen25_vl_tower_peak_is_its_mlp_over_every_patch_of_the_dummy_video():
    """vLLM 0.33 ``profile_run`` → ``embed_multimodal`` on the dummy video (114,688 tokens × merge 2²
    = 458,752 patches); ``Qwen2_5_VisionBlock.forward`` at ``down_proj``: the block input, x_attn,
    the fused norm's residual and output, the output (5 × 1,280), gate_up + its activation (3 ×
    3,420), the rotary cos/sin kept twice (2 × head_dim 80), plus the pixel values (3 × 2 × 14² =
    1,176): 17,996 elements × 2 B per patch = 16,511,401,984 B; the reserve adds what exceeds the
    language model's dummy forward (1,557,135,360 B) and the encoder outputs (822,083,584 B)."""
    from kvplan.engines.vllm.multimodal import tower_peak

    plan = make_plan(load_model(QWEN), get_gpu("h100-sxm"), FitQuery(tokens=128_000, engine="vllm@0.33"))
    budget = plan.engine.mm_budget(plan.arch, plan.gpu, plan.settings, 128_000)
    assert budget is not None
    peak = tower_peak(plan.arch, budget, plan.arch.processor, "bfloat16", 1)
    assert peak is not None
    assert (peak.patches, peak.block_elements, peak.pixel_elements) == (458_752, 16_820, 1_176)
    assert peak.bytes == 16_511_401_984
    term = _reserve(plan)["mm_encoder_peak"]
    assert term.bytes == 16_511_401_984 - 1_557_135_360 - 822_083_584
    assert term.formula.endswith("(activation peak + encoder outputs)) = 14,132,183,040 B")
    assert "qwen2_5_vl.py Qwen2_5_VisionBlock.forward" in term.source
    # TP 2 splits the MLP and the QKV (vLLM's ViT is tensor parallel): 5 × 1,280 + 3 × 1,710 + 160
    tp2 = tower_peak(plan.arch, budget, plan.arch.processor, "bfloat16", 2)
    assert tp2 is not None and tp2.block_elements == 6400 + 5130 + 160
    # --mm-processor-kwargs max_pixels 1,003,520: a 14-frame video of 1,280 tokens a frame pair,
    # 8,960 tokens → 35,840 patches; its peak stays below what the text forward holds: no term
    capped = plan.vary(settings=plan.query.settings.model_copy(
        update={"mm_processor_kwargs": '{"max_pixels":1003520}'}))
    assert _reserve(capped)["mm_encoder_peak"].bytes == max(
        0, 35_840 * 17_996 * 2 - (1_557_135_360 + 8960 * 3584 * 2)) == 0


def test_the_gemma3_siglip_peak_covers_every_image_of_the_profile():
    """Gemma-3-27B on an H100 (vLLM 0.33, MNBT 8,192): 32 dummy images × (896 / 14)² = 131,072
    patches; ``SiglipEncoderLayer.forward`` at ``fc2``: the embeddings the transformer keeps, the
    layer's input, residual sum and layer_norm2's output (4 × 1,152) and fc1's output + activation
    (2 × 4,304), plus the pixel values (3 × 14² = 588): 13,804 × 2 B per patch = 3,618,635,776 B,
    of which 845,545,472 B exceed the sampler warm-up's 2,685,009,920 B and the 88,080,384 B of
    encoder outputs."""
    gemma = make_plan(load_model("gemma-3-27b"), get_gpu("h100-sxm"),
                      FitQuery(tokens=32_768, engine="vllm@0.33"))
    term = _reserve(gemma)["mm_encoder_peak"]
    assert term.bytes == 131_072 * 13_804 * 2 - 2_685_009_920 - 88_080_384 == 845_545_472
    assert "SigLIP layer: 4·h + 2·I/tp = 13,216" in term.formula


def test_towers_not_derived_get_no_peak_term():
    """Llama-4's tiles: the tower's code was not read, so no ``mm_encoder_peak`` (the encoder
    outputs stay counted)."""
    scout = make_plan(load_model("llama-4-scout"), get_gpu("h100-sxm"),
                      FitQuery(tokens=8192, engine="vllm@0.33", tp=8))
    terms = _reserve(scout)
    assert "mm_encoder_cache" in terms and "mm_encoder_peak" not in terms


def test_a_public_failed_start_up_is_the_towers_peak():
    """Log 71 (vLLM 0.23.0, Qwen2.5-VL-7B at --gpu-memory-utilization 0.22 of an A100-SXM4-80GB,
    find_string id 55021192520): "Available KV cache memory: -14.28 GiB". kvplan's reserve holds
    the tower's 15.4 GiB peak over the dummy video and finds no room either
    (−14.01 GiB; −13.88 before the Qwen2.5-VL tower rule counted 1,343,488 B more, −13.89 before
    vLLM's MRoPE cos/sin cache joined the weights: 4 × 128,000 positions × 128 × 2 B = 131,072,000 B,
    0.122 GiB, v0.11+ ``mrope.py``)."""
    plan = make_plan(load_model(QWEN), get_gpu("a100-80gb-sxm"),
                     FitQuery(tokens=128_000, engine="vllm@0.24", gpu_util=0.22))
    assert round(min(plan.budget.stage_budgets) / (1 << 30), 2) == -14.01
    assert fit(plan).max_requests == 0


def test_pixtral_takes_no_processor_kwargs():
    """Mistral-Small-3.1's Pixtral grid has no kwargs kvplan models: refused by name, not ignored."""
    from kvplan.multimodal import PixtralProcessor, with_processor_kwargs

    arch = load_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    assert isinstance(arch.processor, PixtralProcessor)
    assert with_processor_kwargs(arch.name, arch.processor, None) is arch.processor
    with pytest.raises(KVPlanError) as err:
        with_processor_kwargs(arch.name, arch.processor, '{"max_pixels": 1003520}')
    assert err.value.code == "mm.kwargs" and "Pixtral processor takes no kwargs" in str(err.value)


def test_the_longest_length_is_replanned_where_the_reserve_grows_with_it():
    """vLLM profiles max_model_len: Qwen2.5-VL-7B's encoder budget and tower peak grow with the
    length, so the pool of a 1-token plan (room for 128,000) is not the pool at 128,000. The longest
    length is the largest whose own plan holds the user (capacity._longest_as_planned): 114,687 on
    an A100-40GB-PCIe, and one token more does not fit."""
    plan = make_plan(load_model(QWEN), get_gpu("a100-40gb-pcie"), FitQuery(tokens=1, engine="vllm"))
    result = fit(plan, search_gpus=False)
    assert result.max_tokens_per_request == 114_687
    assert "longest length re-planned: the engine sizes its reserve from the length, so 114,687 " \
        "tokens (not 128,000 from the plan at 1) is the longest whose own plan holds 1 user(s)" \
        in result.notes
    assert fit(plan.vary(tokens=114_687), search_gpus=False).max_requests_kv == 1
    assert fit(plan.vary(tokens=114_688), search_gpus=False).max_requests_kv == 0


@pytest.mark.parametrize(("tokens", "users", "asked_fits", "searched", "longest"), [
    # searched: 29,712 and 32 before vLLM's 131,072,000 B MRoPE cache (2,285 tokens of 57,344 B)
    # joined the weights: 224 and 16 tokens fewer per user, one block-multiple down
    (32_768, 10, 9, 29_488, 32_767), (114_688, 2_862, 0, 16, 112)])
def test_the_longest_length_is_searched_up_where_a_shorter_plan_reserves_less(
        tokens: int, users: int, asked_fits: int, searched: int, longest: int) -> None:
    """The other direction (found by the long capacity-properties profile): where the plan at the
    asked length holds fewer than the users, the pool of that plan gives ``searched`` tokens, but a
    shorter length's own plan reserves less (vLLM's encoder budget and tower peak follow
    max_model_len), so the longest whose own plan holds them is longer: ``longest`` holds the
    users, ``longest`` + 1 does not (Qwen2.5-VL-7B, vLLM v0.33, A100-40GB-PCIe)."""
    plan = make_plan(load_model(QWEN), get_gpu("a100-40gb-pcie"),
                     FitQuery(tokens=tokens, users=users, engine="vllm"))
    result = fit(plan, search_gpus=False)
    assert (result.max_requests_kv, result.max_tokens_per_request) == (asked_fits, longest)
    assert f"(not {searched:,} from the plan at {tokens:,})" in " ".join(result.notes)
    assert fit(plan.vary(tokens=longest), search_gpus=False).max_requests_kv >= users
    assert fit(plan.vary(tokens=longest + 1), search_gpus=False).max_requests_kv < users


def test_v0_11_pads_the_profiles_encoder_outputs_to_the_budget():
    """vLLM 0.11.0–0.11.2 ``gpu_model_runner.py`` ``profile_run``: ``if encoder_output_shape[0] <
    encoder_budget`` each dummy output is copied into ``output.new_zeros((encoder_budget, width))``
    and the padded copies stay in ``encoder_cache`` through the dummy forward and the sampler (absent
    in 0.10.2 and 0.12.0). Qwen3-VL-30B-A3B at 65,536 tokens (public log 73's settings): one dummy
    video of 12,288 embeddings, a placeholder-counted budget of int(12,288 × 12.5) = 153,600 — so
    v0.11.0 caches 153,600 rows of 2,048 × (1 + 3 deepstack) bf16 columns = 2,516,582,400 B; v0.10
    and v0.12–v0.13 the 12,288 rows = 201,326,592 B. The tower's outputs are held beside the padded
    copy while it is made (2,717,908,992 B), below the sampler warm-up's 1,516,929,024 B on top of
    the copy, so the excess term is 0 B."""
    arch = load_model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    gpu = get_gpu("rtx-3090")
    query = FitQuery(tokens=65_536, engine="vllm@0.11", tp=4, flashinfer_sampler=False)
    terms = _reserve(make_plan(arch, gpu, query))
    assert terms["mm_encoder_cache"].bytes == 153_600 * 2048 * 4 * 2 == 2_516_582_400
    # the tower's own peak (0.11.0's rule, 1,413,218,324 B) and the pad copy are both below it: 0 B
    assert terms["mm_encoder_peak"].bytes == 0
    for engine in ("vllm@0.10", "vllm@0.13"):
        other = _reserve(make_plan(arch, gpu, query.model_copy(update={"engine": engine})))
        assert other["mm_encoder_cache"].bytes == 12_288 * 2048 * 4 * 2 == 201_326_592, engine
    assert _reserve(make_plan(arch, gpu, query.model_copy(update={"engine": "vllm@0.11.2"}))
                    )["mm_encoder_cache"].bytes == 2_516_582_400
