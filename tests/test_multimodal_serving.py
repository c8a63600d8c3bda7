"""The serving view and the recommender count requests of the workload's shape: text tokens plus
the images each request brings (issue #27 item 3), for a Qwen-VL and a Gemma-3 preset, with exact
values; images a request cannot bring are refused by name on every surface (CLI, link, views).

Per image (hand-derived in tests/test_multimodal.py): Qwen2.5-VL-7B at 1280×720 is 1,198 prompt
tokens (smart_resize → 1288×728, (728/14)·(1288/14)/2² = 1,196 + 2 template tokens); Gemma-3-27B
260 (256 soft tokens + 4, ``full_image_sequence``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from md_text import unmd
from streamlit.testing.v1 import AppTest

from kvplan.capacity import fit
from kvplan.errors import KVPlanError
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import load_model
from kvplan.recommend import RecommendQuery, candidate_scenario, recommend
from kvplan.scenario import Scenario, scenario_plan, scenario_request_tokens
from kvplan.serving import LengthDist, Workload, with_image_tokens

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)
APP = Path(__file__).resolve().parent.parent / "app.py"
QWEN = "Qwen/Qwen2.5-VL-7B-Instruct"
MODELS = [(QWEN, 1198), ("gemma-3-27b", 260)]


def test_with_image_tokens_adds_them_to_every_prompt_and_clips_the_text():
    w = Workload(prompt=np.array([10, 500, 3000]), output=np.array([5, 600, 100]), source="csv")
    out = with_image_tokens(w, 2396, 2)
    assert out.prompt.tolist() == [2406, 2896, 5396] and out.output.tolist() == [5, 600, 100]
    assert out.source == "csv; each prompt + 2,396 image tokens (2 image(s))"
    # max length 3,000: text ≤ 3,000 − 1 − 2,396 = 603, output ≤ 3,000 − text − 2,396
    clipped = with_image_tokens(w, 2396, 2, max_len=3000)
    assert clipped.prompt.tolist() == [2406, 2896, 2999] and clipped.output.tolist() == [5, 104, 1]
    assert with_image_tokens(w, 0) is w
    with pytest.raises(KVPlanError, match=r"2 image\(s\) per request: their 2,396 tokens leave no room "
                                          r"for a text token and an output token within the maximum "
                                          r"length 2,397"):
        with_image_tokens(w, 2396, 2, max_len=2397)


@pytest.mark.parametrize(("model", "per_image"), MODELS)
def test_recommend_counts_two_images_at_1280x720_plus_1000_text_tokens(model, per_image):
    plan = make_plan(load_model(model), None, FitQuery(engine="vllm@0.33"))
    query = RecommendQuery(users=16, prompt=LengthDist(kind="fixed", value=1000),
                           output=LengthDist(kind="fixed", value=256), gpus=("h100-sxm",),
                           image_tokens=2 * per_image, images=2)
    rec = recommend(plan, query)
    assert rec.lengths.prompt == 1000 + 2 * per_image
    assert rec.lengths.context == 1256 + 2 * per_image
    assert rec.lengths.image_tokens == 2 * per_image
    assert any(f"{2 * per_image:,} image tokens (2 image(s)" in a for a in rec.assumptions)
    # every candidate's link opens the same question: text 1,256 + the scenario's 2 images
    scenario = Scenario(model=model, images=2, image_width=1280, image_height=720,
                        engine_version="0.33")
    text_only = recommend(plan, query.model_copy(update={"image_tokens": 0, "images": 0}))
    assert text_only.lengths.context == 1256
    for row in rec.ranked.head(3).itertuples(index=False):
        linked = candidate_scenario(row, scenario, rec.lengths)
        assert (linked.tokens, linked.images) == (1256, 2)
        assert scenario_request_tokens(linked) == rec.lengths.context
        assert fit(scenario_plan(linked)).max_requests == int(row.max_requests)
    # the KV per request is the engine's for the whole request: more than the text alone's
    kv = dict(zip(rec.table["kv_dtype"].astype(str) + rec.table["tp"].astype(str),
                  rec.table["kv_bytes_per_request"], strict=True))
    kv_text = dict(zip(text_only.table["kv_dtype"].astype(str) + text_only.table["tp"].astype(str),
                       text_only.table["kv_bytes_per_request"], strict=True))
    assert all(kv[k] > kv_text[k] for k in kv)


def test_recommend_kv_per_request_of_qwen_images_is_exact():
    # Qwen2.5-VL-7B on vLLM, fp8 KV: 28 layers × 2 × 4 KV heads × 128 × 1 B = 28,672 B per token;
    # 3,652 tokens in 16-token blocks: ceil(3,652 / 16) = 229 blocks = 3,664 tokens → 105,054,208 B
    plan = make_plan(load_model(QWEN), None, FitQuery(engine="vllm@0.33"))
    rec = recommend(plan, RecommendQuery(users=16, prompt=LengthDist(kind="fixed", value=1000),
                                         output=LengthDist(kind="fixed", value=256), gpus=("h100-sxm",),
                                         kv_dtypes=("fp8_e4m3",), tp=(1,), pp=(1,),
                                         image_tokens=2396, images=2))
    assert set(rec.table["kv_bytes_per_request"].tolist()) == {229 * 16 * 28_672} == {105_054_208}


def test_recommend_refuses_images_that_leave_no_room_in_max_context():
    plan = make_plan(load_model(QWEN), None, FitQuery(engine="vllm@0.33"))
    with pytest.raises(KVPlanError, match="leave no room for a text token and an output token within "
                                          "the maximum length 2,000"):
        recommend(plan, RecommendQuery(max_context=2000, image_tokens=2396, images=2, gpus=("h100-sxm",)))


def test_cli_recommend_takes_images():
    code, out, err = run_cli(["recommend", "--model", "gemma-3-27b", "--users", "16", "--prompt-tokens",
                              "1000", "--output-tokens", "256", "--images", "2", "--image-size",
                              "1280x720", "--gpus", "h100-sxm", "--engine-version", "0.33", "--json"])
    assert code == 0, err
    payload = json.loads(out)
    assert payload["lengths"]["prompt"] == 1520 and payload["lengths"]["context"] == 1776
    assert payload["lengths"]["image_tokens"] == 520
    assert payload["request"]["prompt_tokens_per_image"] == 260
    assert "t=1256" in payload["table"][0]["link"] and "im=2" in payload["table"][0]["link"]
    code, out, _ = run_cli(["recommend", "--model", "gemma-3-27b", "--users", "16", "--prompt-tokens",
                            "1000", "--output-tokens", "256", "--images", "2", "--image-size",
                            "1280x720", "--gpus", "h100-sxm", "--engine-version", "0.33"])
    assert code == 0 and "context 1,776 tokens (each with 2 × 1280x720 image(s) = 520 tokens)" in out


@pytest.mark.parametrize(("extra", "why"), [
    (["--images", "1", "--image-size", "0x0"], "image size 0×0: both sides must be at least 1 pixel"),
    (["--images", "1", "--image-size", "99999x720"], "a side above 65,536 pixels"),
    (["--images", "3", "--image-size", "8x8", "--limit-mm-per-prompt", "2"],
     "3 image(s) per request: above --limit-mm-per-prompt's 2 per prompt"),
    (["--images", "2"], "give each image's size with --image-size WxH"),
])
def test_cli_recommend_refuses_bad_images_by_name(extra, why):
    code, out, err = run_cli(["recommend", "--model", "gemma-3-27b", "--gpus", "h100-sxm", *extra])
    assert code != 0 and why in err and "Traceback" not in err, (code, out, err)


def make_app(**params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params.update(params)
    at.run()
    return at


def _captions(at: AppTest) -> list[str]:
    return [unmd(c.value) for c in at.caption]


@pytest.mark.parametrize(("model", "per_image"), MODELS)
def test_serving_view_counts_the_images_of_every_request(model, per_image):
    at = make_app(m=model, t="1000", u="16", o="256", im="2", iw="1280", ih="720", kd="bf16",
                  g="h100-sxm", vw="serving")
    assert not at.exception, [e.value for e in at.exception]
    tokens = 1000 + 2 * per_image
    captions = _captions(at)
    assert any(c.startswith(f"Each request: 1,000 text tokens + 2 image(s) at 1280×720 × {per_image:,} "
                            f"tokens = {tokens:,} tokens per request") for c in captions), captions
    assert any(f"maximum length {tokens:,} tokens" in c and f"each prompt + {2 * per_image:,} image "
               "tokens (2 image(s))" in c for c in captions), captions
    assert any(f"TTFT lower bound for one {tokens - 256:,}-token prompt" in c for c in captions)
    assert any(f"max_cache_len = {tokens:,} tokens" in c for c in captions)
    assert any(f"(prompt {tokens - 256:,}, output 256 tokens)" in c for c in captions)


def test_serving_view_refuses_a_length_too_short_for_the_images():
    at = make_app(m=QWEN, t="1000", u="4", im="2", vw="serving", sv="max_len:2000")
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(unmd(e.value) for e in at.error)
    assert "2 image(s) per request: their 2,396 tokens leave no room for a text token and an output " \
           "token within the maximum length 2,000" in errors, errors


@pytest.mark.parametrize(("model", "per_image"), MODELS)
def test_recommend_view_counts_the_images_of_every_request(model, per_image):
    at = make_app(m=model, t="1000", u="16", o="256", im="2", iw="1280", ih="720", kd="bf16",
                  g="h100-sxm", vw="recommend", ev="0.33", sv="rc_prompt_tokens:1000")
    assert not at.exception, [e.value for e in at.exception]
    captions = _captions(at)
    assert any(f"Each prompt also brings 2 image(s) at 1280×720 = {2 * per_image:,} tokens" in c
               for c in captions), captions
    assert any(f"prompt {1000 + 2 * per_image:,} tokens, context {1256 + 2 * per_image:,} tokens" in c
               for c in captions), captions


@pytest.mark.parametrize(("params", "why", "kept"), [
    # a 0-pixel width falls back alone (to 1280): the two images stay, at 1280×720
    ({"m": "gemma-3-27b", "im": "2", "iw": "0", "vw": "serving"}, "iw", "2 image(s) at 1280×720"),
    ({"m": "gemma-3-27b", "im": "3", "mi": "2", "vw": "recommend"}, "above --limit-mm-per-prompt's 2",
     None),
    ({"m": QWEN, "im": "1", "iw": "5000", "ih": "10", "vw": "serving"}, "aspect ratio above 200", None),
    ({"m": "llama-3.1-8b", "im": "2", "vw": "recommend"}, "no image processor is known for Llama-3.1-8B",
     None),
])
def test_views_refuse_images_a_model_cannot_take_by_name(params, why, kept):
    at = make_app(**params)
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(unmd(w.value) for w in at.warning)
    assert why in warnings, warnings
    shapes = [c for c in _captions(at) if c.startswith(("Each request:", "Each prompt also brings"))]
    assert (shapes and all(kept in c for c in shapes)) if kept else not shapes, shapes


def test_the_image_limit_is_the_engines_own():
    """vLLM refuses more images than ``--limit-mm-per-prompt`` (default 999); SGLang 0.5.23 has no
    limit unless ``--limit-mm-data-per-request`` is set (``TokenizerManager._validate_mm_limits``
    returns early), and vLLM's flag is not its own: ``image_limit`` now refuses it by name (it
    returned None for it before; tests/test_mm_limits.py pins the refusal), so SGLang's default is
    asked with no flag; a link's ``mi`` is still ignored under SGLang (``own_settings``)."""
    from kvplan.engines import get_engine
    from kvplan.engines.settings import EngineSettings
    from kvplan.multimodal import ImageRequest, image_prompt_tokens
    from kvplan.scenario import check_names

    arch = load_model("gemma-3-27b")
    many = ImageRequest(count=1000, width=1280, height=720)
    two = EngineSettings(limit_mm_per_prompt=2)
    assert (get_engine("vllm").image_limit(EngineSettings()), get_engine("vllm@0.33").image_limit(two),
            get_engine("sglang").image_limit(EngineSettings())) == (999, 2, None)
    with pytest.raises(KVPlanError, match="1000 image\\(s\\) per request: above --limit-mm-per-prompt's 999"):
        image_prompt_tokens(arch.name, arch.processor, many)
    assert image_prompt_tokens(arch.name, arch.processor, many, None) == 1000 * 260
    vllm = Scenario(model="gemma-3-27b", images=3, engine_settings={"limit_mm_per_prompt": 2})
    sglang = vllm.model_copy(update={"engine": "sglang"})
    fixed, warnings = check_names(vllm)
    assert fixed.images == 0 and any("above --limit-mm-per-prompt's 2" in w for w in warnings)
    fixed, warnings = check_names(sglang)
    assert fixed.images == 3 and scenario_request_tokens(fixed) == fixed.tokens + 3 * 260
    code, out, err = run_cli(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--engine", "sglang",
                              "--tokens", "1000", "--images", "1000", "--image-size", "1280x720", "--json"])
    assert code == 0, err
    assert json.loads(out)["request"]["tokens"] == 1000 + 1000 * 260
