"""The dashboard answers requests of text tokens plus images (link ``im``/``iw``/``ih``), for a
Qwen-VL and a Gemma-3 preset, with the core's numbers; images a model cannot take are refused by
name (a warning), the rest of the link kept."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from md_text import unmd
from streamlit.testing.v1 import AppTest

from kvplan.capacity import fit
from kvplan.scenario import Scenario, scenario_plan

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)

APP = Path(__file__).resolve().parent.parent / "app.py"


def make_app(**params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(params)
    at.run()
    return at


@pytest.mark.parametrize(("model", "per_image", "requests"), [
    # 1,196 image tokens + 2 (smart_resize 1288×728, test_multimodal): 3,396-token requests, vLLM 0.33
    # bf16 on an H100-SXM (80 GiB): 299 of them (300 before vLLM's MRoPE cos/sin cache, 4 × 128,000 ×
    # 128 × 2 = 131,072,000 B, joined the weights: 2,285 tokens of 57,344 B, one request less)
    ("Qwen/Qwen2.5-VL-7B-Instruct", 1198, 299),
    # Gemma-3's fixed 256 + 4 (processing_gemma3.py): 1,520-token requests, 27B weights leave 21
    ("gemma-3-27b", 260, 21),
])
def test_two_images_at_1280x720_plus_1000_text_tokens(model, per_image, requests):
    at = make_app(m=model, t="1000", u="1", im="2", iw="1280", ih="720", kd="bf16")
    assert not at.exception, [e.value for e in at.exception]
    tokens = 1000 + 2 * per_image
    headers = [m.value for m in at.markdown if "that fit, per replica" in m.value]
    assert headers and f"Requests of {tokens:,} tokens that fit" in headers[0]
    assert any(f"× {per_image:,} tokens = {tokens:,} tokens per request" in unmd(c.value)
               for c in at.caption)
    scenario = Scenario(model=model, tokens=1000, users=1, images=2, kv_dtypes=["bf16"])
    expected = fit(scenario_plan(scenario))
    assert (expected.tokens, expected.max_requests) == (tokens, requests)
    shown = [m for m in at.metric if m.label.startswith("bf16") or "bf16" in m.label]
    assert shown and shown[0].value == f"{requests:,}"


@pytest.mark.parametrize(("params", "why"), [
    ({"m": "gemma-3-27b", "im": "2", "iw": "0"}, "iw"),
    ({"m": "llama-3.1-8b", "im": "2"}, "no image processor is known for Llama-3.1-8B"),
    ({"m": "gemma-3-27b", "im": "3", "mi": "2"}, "above --limit-mm-per-prompt's 2"),
    ({"m": "Qwen/Qwen2.5-VL-7B-Instruct", "im": "1", "iw": "5000", "ih": "10"}, "aspect ratio above 200"),
])
def test_images_a_model_cannot_take_are_refused_by_name(params, why):
    at = make_app(**params)
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(unmd(w.value) for w in at.warning)
    assert why in warnings, warnings
    headers = [m.value for m in at.markdown if "that fit, per replica" in m.value]
    assert headers  # the answer is still shown, for the text alone


def test_a_request_too_long_with_its_images_is_refused_by_name():
    from kvplan.scenario import check_names

    scenario = Scenario(model="Qwen/Qwen2.5-VL-7B-Instruct", tokens=99_000_000, images=999,
                        image_width=3584, image_height=3584)
    fixed, warnings = check_names(scenario)
    assert fixed.images == 0
    # 999 × (16,384 + 2) = 16,369,614 image tokens
    assert any("999×3584x3584" in w and "16,369,614 image tokens is above 100,000,000" in w
               for w in warnings), warnings


QWEN25 = "Qwen/Qwen2.5-VL-7B-Instruct"


def _answer(at: AppTest) -> tuple[str, str]:
    headers = [m.value for m in at.markdown if "that fit, per replica" in m.value]
    shown = [m.value for m in at.metric if m.label == "bf16 KV"]
    assert headers and shown, (headers, shown)
    return headers[0], shown[0]


def test_a_video_and_two_images_plus_1000_text_tokens():
    """1,000 text + 2 × 1,198 (two 1280×720 images) + 11,962 (one 10 s video at 2 fps, 1280×720:
    test_mm_video) = 15,358 tokens: 66 requests on an H100-SXM in bf16 (the core's fit)."""
    at = make_app(m=QWEN25, t="1000", u="1", im="2", vn="1", vs="10", vf="2", kd="bf16")
    assert not at.exception, [e.value for e in at.exception]
    scenario = Scenario(model=QWEN25, tokens=1000, users=1, images=2, videos=1, kv_dtypes=["bf16"])
    expected = fit(scenario_plan(scenario))
    assert (expected.tokens, expected.max_requests) == (15358, 66)
    header, shown = _answer(at)
    assert "Requests of 15,358 tokens that fit" in header and shown == "66"
    assert any("+ 1 video(s) of 20 frames at 1280×720 × 11,962 tokens = 15,358 tokens per request"
               in unmd(c.value) for c in at.caption)


def test_video_widgets_change_the_answer():
    """The Serving workload box's video inputs (keys w_vn … w_vf) go into the answer and the link;
    a length of 0 s is refused under its widget and not applied."""
    at = make_app(m=QWEN25, t="1000", u="1", kd="bf16")
    at.session_state["w_serving_box"] = True
    at.run()
    at.number_input(key="w_vn").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Requests of 12,962 tokens that fit" in _answer(at)[0]  # 1,000 + 11,962
    assert at.query_params["vn"] in ("1", ["1"])
    at.number_input(key="w_vs").set_value(3.5).run()  # 7 frames → 8: grid_t 4 × 1,196 + 2 = 4,786
    assert "Requests of 5,786 tokens that fit" in _answer(at)[0]
    at.number_input(key="w_vs").set_value(0.0).run()
    assert [unmd(e.value) for e in at.sidebar.error] == [
        "Video length (s): must be more than 0; not applied until corrected."]
    assert "Requests of 12,962 tokens that fit" in _answer(at)[0]  # the default 10 s meanwhile


@pytest.mark.parametrize(("model", "why"), [
    ("Qwen/Qwen3-VL-8B-Instruct", "Qwen3-VL's video prompt holds a '<X.X seconds>' text timestamp"),
    ("gemma-3-27b", "its processor takes no video for Gemma-3-27B"),
])
def test_videos_a_model_cannot_take_are_refused_by_name(model, why):
    at = make_app(m=model, t="1000", u="1", vn="1", kd="bf16")
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(unmd(w.value) for w in at.warning)
    assert "link parameter 'vn'='1×1280x720×10 s×2 fps' was not used: 1 video(s) per request: " \
           + why in warnings, warnings
    assert "Requests of 1,000 tokens that fit" in _answer(at)[0]  # the text alone


def test_serving_and_recommend_views_count_the_videos():
    at = make_app(m=QWEN25, t="1000", u="1", vn="1", kd="bf16", vw="serving")
    assert not at.exception, [e.value for e in at.exception]
    captions = [unmd(c.value) for c in at.caption]
    assert any(c.startswith("Each request: 1,000 text tokens + 1 video(s) of 20 frames at 1280×720 × "
                            "11,962 tokens = 12,962 tokens per request; per video: ")
               and c.endswith("Every prompt and context below includes the video tokens.")
               for c in captions), captions
    assert any("each prompt + 11,962 image and video tokens (0 image(s), 1 video(s))" in c
               for c in captions), captions
    at = make_app(m=QWEN25, t="1000", u="1", vn="1", kd="bf16", vw="recommend")
    assert not at.exception, [e.value for e in at.exception]
    captions = [unmd(c.value) for c in at.caption]
    assert ("Each prompt also brings 1 video(s) of 10 s at 2 fps, 1280×720 = 11,962 tokens (sidebar: "
            "Serving workload); the prompt lengths here count its text.") in captions
    assert any(c.startswith("Images and videos: 11,962 tokens of each prompt and context above are "
                            "theirs (per video: 10 s × 2 fps = 20 frames") for c in captions), captions


@pytest.mark.parametrize(("params", "warning"), [
    ({"m": "gemma-3-27b", "im": "2", "iw": "0", "ih": "0"},
     ["link parameter 'iw'='0' was not used: Input should be greater than or equal to 1",
      "link parameter 'ih'='0' was not used: Input should be greater than or equal to 1"]),
    ({"m": QWEN25, "im": "1", "iw": "70000"},
     ["link parameter 'iw'='70000' was not used: Input should be less than or equal to 65536"]),
    ({"m": QWEN25, "im": "1", "iw": "5000", "ih": "10"},
     ["link parameter 'im'='1×5000x10' was not used: image size 5000×10: aspect ratio above 200, which "
      "the Qwen-VL processor refuses (smart_resize)"]),
    ({"m": "gemma-3-27b", "im": "3", "mi": "2"},
     ["link parameter 'im'='3×1280x720' was not used: 3 image(s) per request: above "
      "--limit-mm-per-prompt's 2 per prompt (vLLM refuses the request)"]),
    ({"m": "gemma-3-27b", "im": "3", "e": "sglang", "md": '{"image": 2}'},
     ["link parameter 'im'='3×1280x720' was not used: 3 image(s) per request: above "
      "--limit-mm-data-per-request's 2 per request (SGLang refuses the request: "
      "managers/tokenizer_manager.py _validate_mm_limits)"]),
])
def test_bad_images_in_a_link_get_exact_messages(params, warning):
    """0×0 falls back to the default size (the images stay); the rest drop the images, by name."""
    at = make_app(t="1000", u="1", kd="bf16", **params)
    assert not at.exception, [e.value for e in at.exception]
    assert [unmd(w.value) for w in at.warning] == warning


@pytest.mark.parametrize(("params", "widgets", "why"), [
    ({"m": "gemma-3-27b", "mi": "2"}, {"w_im": 3},
     "3 image(s) per request: above --limit-mm-per-prompt's 2 per prompt (vLLM refuses the request)"),
    ({"m": QWEN25, "im": "1"}, {"w_ih": 10, "w_iw": 5000},
     "image size 5000×10: aspect ratio above 200, which the Qwen-VL processor refuses (smart_resize)"),
])
def test_bad_images_typed_in_the_sidebar_get_exact_messages(params, widgets, why):
    """Typed in the Serving workload box (no link check between): the answer says why, and so does
    each view that needs the request (the widgets' bounds keep sides within 1–65,536)."""
    at = make_app(t="1000", u="1", kd="bf16", **params)
    at.session_state["w_serving_box"] = True
    at.run()
    for key, value in widgets.items():
        at.number_input(key=key).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [unmd(w.value) for w in at.warning] == [f"Does not fit: {why}."]
    assert [unmd(e.value) for e in at.error] == [f"Key numbers: {why}", f"KV vs context: {why}"]
