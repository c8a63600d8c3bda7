"""Videos in the link (issue #27): ``vn`` videos per request, ``vx``×``vy`` pixels per frame, ``vs``
seconds at ``vf`` frames per second; they round-trip, bad values fall back alone by name, and a
model whose processor has no video rule drops them by name (``scenario.check_names``)."""

from __future__ import annotations

import pytest

from kvplan.scenario import (
    Scenario,
    check_names,
    scenario_media_tokens,
    scenario_request_shape,
    scenario_request_tokens,
    scenario_video_tokens,
)

QWEN25 = "Qwen/Qwen2.5-VL-7B-Instruct"


def test_video_keys_round_trip():
    scenario = Scenario(model=QWEN25, tokens=1000, videos=2, video_width=640, video_height=480,
                        video_seconds=3.5, video_fps=29.97)
    query = scenario.to_query()
    assert {k: query[k] for k in ("vn", "vx", "vy", "vs", "vf")} == \
        {"vn": "2", "vx": "640", "vy": "480", "vs": "3.5", "vf": "29.97"}
    again, warnings = Scenario.from_query(query)
    assert warnings == [] and again == scenario
    # the defaults (10 s at 2 fps, 1280×720) stay out of the link
    assert set(Scenario(videos=1).to_query()) == {"v", "vn"}


def test_video_tokens_are_counted_in_the_request():
    """10 s × 2 fps = 20 frames at 1280×720: 11,962 prompt tokens per video (test_mm_video);
    2 images at 1280×720: 2 × 1,198 (test_multimodal)."""
    scenario, warnings = Scenario.from_query({"m": QWEN25, "t": "1000", "im": "2", "vn": "1"})
    fixed, more = check_names(scenario)
    assert warnings == more == []
    assert scenario_video_tokens(fixed) == 11962
    assert scenario_media_tokens(fixed) == 2 * 1198 + 11962
    assert scenario_request_tokens(fixed) == 1000 + 2 * 1198 + 11962 == 15358
    shape = scenario_request_shape(fixed)
    assert shape is not None and shape.startswith(
        "1,000 text tokens + 2 image(s) at 1280×720 × 1,198 tokens + 1 video(s) of 20 frames at "
        "1280×720 × 11,962 tokens = 15,358 tokens per request; per image: ")
    assert "; per video: 10 s × 2 fps = 20 frames" in shape


@pytest.mark.parametrize(("query", "why"), [
    ({"vs": "0"}, "link parameter 'vs'='0' was not used: Input should be greater than 0"),
    ({"vf": "-2"}, "link parameter 'vf'='-2' was not used: Input should be greater than 0"),
    ({"vf": "241"}, "link parameter 'vf'='241' was not used: Input should be less than or equal to 240"),
    ({"vs": "86401"},
     "link parameter 'vs'='86401' was not used: Input should be less than or equal to 86400"),
    ({"vn": "10001"},
     "link parameter 'vn'='10001' was not used: Input should be less than or equal to 10000"),
    ({"vx": "0"}, "link parameter 'vx'='0' was not used: Input should be greater than or equal to 1"),
    ({"vs": "inf"}, "link parameter 'vs'='inf' was not used: expected a number in ASCII digits "
                    "(like 0.5 or 1e3)"),
])
def test_bad_video_values_fall_back_alone_by_name(query, why):
    scenario, warnings = Scenario.from_query({"m": QWEN25, "vn": "1", **query})
    assert warnings == [why]
    assert scenario_video_tokens(check_names(scenario)[0]) == (0 if "vn" in query else 11962)


@pytest.mark.parametrize(("query", "why"), [
    ({"m": "Qwen/Qwen3-VL-8B-Instruct"},
     "link parameter 'vn'='1×1280x720×10 s×2 fps' was not used: 1 video(s) per request: Qwen3-VL's "
     "video prompt holds a '<X.X seconds>' text timestamp per temporal patch (vLLM qwen3_vl.py "
     "_get_prompt_updates), tokens kvplan does not count; not modelled"),
    ({"m": "gemma-3-27b"},
     "link parameter 'vn'='1×1280x720×10 s×2 fps' was not used: 1 video(s) per request: its "
     "processor takes no video for Gemma-3-27B (the Qwen-VL processors of presets/processors/ do)"),
    ({"m": QWEN25, "vs": "0.1"},
     "link parameter 'vn'='1×1280x720×0.1 s×2 fps' was not used: --video-seconds 0.1: 0.1 s × 2 fps "
     "is less than one frame"),
    ({"m": QWEN25, "mi": "0"},
     "link parameter 'vn'='1×1280x720×10 s×2 fps' was not used: 1 video(s) per request: above "
     "--limit-mm-per-prompt's 0 per prompt (vLLM refuses the request)"),
    ({"m": QWEN25, "e": "sglang", "md": '{"image": 3, "video": 0}'},
     "link parameter 'vn'='1×1280x720×10 s×2 fps' was not used: 1 video(s) per request: above "
     "--limit-mm-data-per-request's 0 per request (SGLang refuses the request: "
     "managers/tokenizer_manager.py _validate_mm_limits)"),
])
def test_videos_a_model_cannot_take_are_dropped_by_name(query, why):
    scenario, warnings = Scenario.from_query({"vn": "1", "t": "1000", **query})
    assert warnings == []
    fixed, warnings = check_names(scenario)
    assert warnings == [why]
    assert fixed.videos == 0 and scenario_request_tokens(fixed) == 1000


def test_sglang_image_limit_leaves_videos_alone():
    """SGLang's JSON names images only: videos have no limit (``_validate_mm_limits``)."""
    scenario, _ = Scenario.from_query({"m": QWEN25, "e": "sglang", "md": '{"image": 0}', "vn": "3",
                                       "t": "1000"})
    fixed, warnings = check_names(scenario)
    assert warnings == [] and scenario_request_tokens(fixed) == 1000 + 3 * 11962


def test_a_request_too_long_with_its_videos_is_refused_by_name():
    scenario = Scenario(model=QWEN25, tokens=99_000_000, videos=10, video_seconds=86_400, video_fps=2)
    fixed, warnings = check_names(scenario)
    assert fixed.videos == 0 and len(warnings) == 1
    # 172,800 frames → grid_t 86,400 × 1,196 (52·92/4) + 2 = 103,334,402 per video, × 10
    assert warnings[0] == ("link parameter 'vn'='10×1280x720×86400 s×2 fps' was not used: 99,000,000 "
                           "text + 0 image + 1,033,344,020 video tokens is above 100,000,000 tokens "
                           "per request")


def test_recommend_candidate_links_carry_the_videos():
    """The recommender's candidates open the same question: text 1,256 (1,000 prompt + 256 output) +
    one 10 s video at 2 fps (11,962 tokens) + two 1280×720 images (2 × 1,198)."""
    from kvplan.capacity import fit
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import load_model
    from kvplan.recommend import RecommendQuery, candidate_scenario, recommend
    from kvplan.scenario import scenario_plan
    from kvplan.serving import LengthDist

    scenario = Scenario(model=QWEN25, images=2, videos=1, engine_version="0.33")
    media = scenario_media_tokens(scenario)
    assert media == 2 * 1198 + 11962
    plan = make_plan(load_model(QWEN25), None, FitQuery(engine="vllm@0.33"))
    query = RecommendQuery(users=16, prompt=LengthDist(kind="fixed", value=1000),
                           output=LengthDist(kind="fixed", value=256), gpus=("h100-sxm",),
                           image_tokens=media, images=2, videos=1)
    rec = recommend(plan, query)
    assert (rec.lengths.prompt, rec.lengths.context) == (1000 + media, 1256 + media)
    for row in rec.ranked.head(2).itertuples(index=False):
        linked = candidate_scenario(row, scenario, rec.lengths)
        assert (linked.tokens, linked.images, linked.videos) == (1256, 2, 1)
        assert scenario_request_tokens(linked) == rec.lengths.context
        assert fit(scenario_plan(linked)).max_requests == int(row.max_requests)
    text_only = recommend(plan, query.model_copy(update={"image_tokens": 0, "images": 0, "videos": 0}))
    linked = candidate_scenario(next(text_only.ranked.head(1).itertuples(index=False)), scenario,
                                text_only.lengths)
    assert (linked.tokens, linked.images, linked.videos) == (1256, 0, 0)
