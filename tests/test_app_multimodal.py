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


@pytest.mark.parametrize(("model", "per_image"), [("Qwen/Qwen2.5-VL-7B-Instruct", 1198),
                                                   ("gemma-3-27b", 260)])
def test_two_images_at_1280x720_plus_1000_text_tokens(model, per_image):
    at = make_app(m=model, t="1000", u="1", im="2", iw="1280", ih="720", kd="bf16")
    assert not at.exception, [e.value for e in at.exception]
    tokens = 1000 + 2 * per_image
    headers = [m.value for m in at.markdown if "that fit, per replica" in m.value]
    assert headers and f"Requests of {tokens:,} tokens that fit" in headers[0]
    assert any(f"× {per_image:,} tokens = {tokens:,} tokens per request" in unmd(c.value)
               for c in at.caption)
    scenario = Scenario(model=model, tokens=1000, users=1, images=2, kv_dtypes=["bf16"])
    expected = fit(scenario_plan(scenario))
    assert expected.tokens == tokens
    shown = [m for m in at.metric if m.label.startswith("bf16") or "bf16" in m.label]
    assert shown and shown[0].value == f"{expected.max_requests:,}"


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
