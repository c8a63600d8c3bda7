"""Videos in a request (issue #27): tokens per video of a stated duration × frame rate, hand-derived.

vLLM 0.33 decodes a video with its default ``opencv`` loader (``multimodal/video.py``
``VideoBackend.load_bytes``: ``num_frames`` −1 and ``fps`` −1 keep every frame), and Qwen2-VL's video
processor does not sample (``do_sample_frames`` false): the file's ``floor(seconds × fps)`` frames
are padded to a multiple of ``temporal_patch_size`` (2) and each pair of frames is one ``grid_t``
step of ``(H'/14)·(W'/14)/2²`` tokens after ``smart_resize`` (vLLM ``qwen2_vl.py``
``_get_vision_info``), plus ``<|vision_start|>``/``<|vision_end|>``.
"""

from __future__ import annotations

import json
import math

import pytest
from cli_helpers import run_cli

from kvplan.engines import get_engine
from kvplan.engines.settings import EngineSettings
from kvplan.errors import KVPlanError
from kvplan.multimodal import QwenVLProcessor, VideoRequest, video_prompt_tokens
from kvplan.presets import load_model

QWEN25 = "Qwen/Qwen2.5-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"


def _qwen25() -> QwenVLProcessor:
    processor = load_model(QWEN25).processor
    assert isinstance(processor, QwenVLProcessor)
    return processor


def test_qwen25_vl_ten_seconds_at_2_fps():
    """10 s × 2 fps = 20 frames → grid_t 10; 1280×720 → smart_resize 1288×728 (round(1280/28) = 46,
    round(720/28) = 26; 937,664 px within 3,136–12,845,056): 10 · 52 · 92 / 4 = 11,960 + 2."""
    video = VideoRequest.parse(1, "1280x720", 10, 2)
    assert video.frames == 20
    assert _qwen25().video_prompt_tokens(video) == 10 * 52 * 92 // 4 + 2 == 11962


def test_qwen25_vl_odd_frames_are_padded_and_decimal_products_exact():
    """3.5 s × 2 fps = 7 frames → padded to 8: grid_t 4; 640×480 → 644×476 (23·28, 17·28):
    4 · 46 · 34 / 4 = 1,564 + 2. 0.29 s × 100 fps is 29 frames (the float product is 28.99…) →
    30 padded: grid_t 15; 30 s × 29.97 fps = 899 frames (899.1 floored) → grid_t 450."""
    seven = VideoRequest.parse(1, "640x480", 3.5, 2)
    assert _qwen25().video_prompt_tokens(seven) == 4 * 46 * 34 // 4 + 2 == 1566
    assert 0.29 * 100 < 29 and VideoRequest.parse(1, "640x480", 0.29, 100).frames == 29
    assert _qwen25().video_prompt_tokens(VideoRequest.parse(1, "640x480", 0.29, 100)) == 15 * 391 + 2
    long = VideoRequest.parse(1, "640x480", 30, 29.97)
    assert long.frames == math.floor(899.1) == 899
    assert _qwen25().video_prompt_tokens(long) == 450 * 391 + 2


def test_videos_per_request_and_the_engines_limit():
    arch = load_model(QWEN25)
    two = VideoRequest.parse(2, "1280x720", 10, 2)
    assert video_prompt_tokens(arch.name, arch.processor, two) == 2 * 11962
    sglang = get_engine("sglang")
    one = EngineSettings(limit_mm_data_per_request='{"video": 1}')
    with pytest.raises(KVPlanError) as exc:
        video_prompt_tokens(arch.name, arch.processor, two, sglang.image_limit(one, "video"),
                            flag=sglang.image_limit_flag, refusal=sglang.image_limit_refusal)
    assert str(exc.value) == ("2 video(s) per request: above --limit-mm-data-per-request's 1 per "
                              "request (SGLang refuses the request: managers/tokenizer_manager.py "
                              "_validate_mm_limits)")
    vllm = "^2 video\\(s\\) per request: above --limit-mm-per-prompt's 1 per prompt"
    with pytest.raises(KVPlanError, match=vllm):
        video_prompt_tokens(arch.name, arch.processor, two, 1)


def test_models_without_a_modelled_video_prompt_are_refused_by_name():
    video = VideoRequest.parse(1, "1280x720", 10, 2)
    qwen3 = load_model(QWEN3)
    with pytest.raises(KVPlanError) as exc:
        video_prompt_tokens(qwen3.name, qwen3.processor, video)
    assert str(exc.value) == ("1 video(s) per request: Qwen3-VL's video prompt holds a '<X.X seconds>' text "
                              "timestamp per temporal patch (vLLM qwen3_vl.py _get_prompt_updates), tokens "
                              "kvplan does not count; not modelled")
    gemma = load_model("gemma-3-27b")
    with pytest.raises(KVPlanError) as exc:
        video_prompt_tokens(gemma.name, gemma.processor, video)
    assert str(exc.value) == ("1 video(s) per request: its processor takes no video for Gemma-3-27B (the "
                              "Qwen-VL processors of presets/processors/ do)")
    llama = load_model("llama-3.1-8b")
    with pytest.raises(KVPlanError, match="no processor is known for Llama-3.1-8B"):
        video_prompt_tokens(llama.name, llama.processor, video)


@pytest.mark.parametrize(("args", "message"), [
    ((1, "0x0", 10, 2), "--video-size 0x0: each side from 1 to 65,536 pixels"),
    ((1, "70000x10", 10, 2), "--video-size 70000x10: each side from 1 to 65,536 pixels"),
    ((1, "axb", 10, 2), "--video-size 'axb': expected WIDTHxHEIGHT in pixels, e.g. 1280x720"),
    ((1, "1280x720", -1, 2), "--video-seconds -1: expected more than 0 and at most 86,400 seconds"),
    ((1, "1280x720", 0, 2), "--video-seconds 0: expected more than 0 and at most 86,400 seconds"),
    ((1, "1280x720", 1e9, 2),
     "--video-seconds 1000000000.0: expected more than 0 and at most 86,400 seconds"),
    ((1, "1280x720", float("nan"), 2),
     "--video-seconds nan: expected more than 0 and at most 86,400 seconds"),
    ((1, "1280x720", 10, float("inf")),
     "--video-fps inf: expected more than 0 and at most 240 frames per second"),
    ((1, "1280x720", 10, 0), "--video-fps 0: expected more than 0 and at most 240 frames per second"),
    ((1, "1280x720", 0.1, 2), "--video-seconds 0.1: 0.1 s × 2 fps is less than one frame"),
    ((10_001, "1280x720", 10, 2), "10001 video(s) per request: expected 0 to 10,000"),
])
def test_bad_videos_are_refused_by_name(args, message):
    with pytest.raises(KVPlanError) as exc:
        VideoRequest.parse(*args)
    assert str(exc.value) == message


def test_cli_fit_counts_the_videos():
    code, out, err = run_cli(["fit", "--model", QWEN25, "--gpu", "h100-sxm", "--tokens", "1000",
                              "--videos", "2", "--video-size", "1280x720", "--video-seconds", "10",
                              "--video-fps", "2",
                              "--images", "1", "--image-size", "1280x720", "--json"])
    assert code == 0, err
    request = json.loads(out)["request"]
    assert (request["video_frames"], request["prompt_tokens_per_video"], request["video_tokens"]) == \
        (20, 11962, 2 * 11962)
    assert request["tokens"] == 1000 + 1198 + 2 * 11962  # 1,198: the image's 1,196 + 2 (test_multimodal)


@pytest.mark.parametrize(("extra", "why"), [
    (["--videos", "1", "--video-size", "1280x720"], "1 video(s) per request: give --videos N with "
                                                    "--video-seconds, --video-fps"),
    (["--video-seconds", "10"], "0 video(s) per request: give --videos N with --video-size, --video-fps"),
    (["--videos", "1", "--video-size", "1280x720", "--video-seconds", "-3", "--video-fps", "2"],
     "--video-seconds -3.0: expected more than 0"),
    (["--videos", "1", "--video-size", "1280x720", "--video-seconds", "ten", "--video-fps", "2"],
     "--video-seconds must be a number, got 'ten'"),
    (["--videos", "1", "--video-size", "1280x720", "--video-seconds", "1e999", "--video-fps", "2"],
     "--video-seconds must be a finite number, got '1e999'"),  # as typed, not float's "inf"
    (["--videos", "1", "--video-size", "1280x720", "--video-seconds", "10", "--video-fps", "nan"],
     "--video-fps must be a finite number, got 'nan'"),
    (["--videos", "3", "--video-size", "64x64", "--video-seconds", "1", "--video-fps", "2",
      "--limit-mm-per-prompt", "2"], "3 video(s) per request: above --limit-mm-per-prompt's 2 per prompt"),
    (["--videos", "1", "--video-size", "1280x720", "--video-seconds", "86400", "--video-fps", "240"],
     "video tokens is above"),
])
@pytest.mark.parametrize("command", ["fit", "recommend"])
def test_cli_refuses_bad_videos_by_name(command, extra, why):
    base = ["fit", "--model", QWEN25, "--gpu", "h100-sxm", "--tokens", "1000"] if command == "fit" else \
        ["recommend", "--model", QWEN25, "--gpus", "h100-sxm"]
    code, out, err = run_cli([*base, *extra])
    assert code == 2 and why in err and "Traceback" not in err, (code, out, err)


def test_cli_recommend_counts_and_names_the_videos():
    code, out, err = run_cli(["recommend", "--model", QWEN25, "--gpus", "h100-sxm", "--prompt-tokens", "1000",
                              "--videos", "1", "--video-size", "1280x720", "--video-seconds", "10",
                              "--video-fps", "2", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["request"]["tokens"] == doc["lengths"]["prompt"] == 1000 + 11962
    assert doc["lengths"]["source"].endswith("each prompt + 11,962 image and video tokens (0 image(s), "
                                             "1 video(s))")
    assert any(a.startswith("Each prompt brings 11,962 image and video tokens (0 image(s), 1 video(s), ")
               for a in doc["assumptions"])
