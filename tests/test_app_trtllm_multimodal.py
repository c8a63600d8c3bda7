"""The dashboard under TensorRT-LLM with images (issue #27): refused by name, as plain text, no
traceback (``Engine.check_media`` → ``TrtLlm.media_refusal``, ``kvplan.engines.trtllm.multimodal``)."""

from __future__ import annotations

import logging
from pathlib import Path

from md_text import unmd
from streamlit.testing.v1 import AppTest

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)

APP = Path(__file__).resolve().parent.parent / "app.py"
MAIN = "TensorRT-LLM main 2026 (PyTorch backend; blocks floored)"
WHY = (f"2 image(s) per request: {MAIN} profiles the multimodal encoder with a dummy batch of its own "
       "(encoder_max_num_tokens, encoder_batch_size) and reserves its output copy, "
       "mm_encoder_output_budget_bytes and encoder_cache_max_bytes (tensorrt_llm/_torch/pyexecutor/"
       "_util.py 00043967 KvCacheCreator._create_dummy_encoder_inputs, _encode_dummy_inputs, "
       "_get_multimodal_encoder_memory_reserve); kvplan does not size that profile for TensorRT-LLM, "
       "so it does not plan requests that bring images or videos under it")


def make_app(**params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(params)
    at.run()
    return at


def test_link_with_images_under_trtllm_drops_them_by_name():
    at = make_app(m="Qwen/Qwen2.5-VL-7B-Instruct", e="trtllm", im="2", t="1000", u="1", kd="bf16")
    assert not at.exception, [e.value for e in at.exception]
    assert [unmd(w.value) for w in at.warning] == [f"link parameter 'im'='2×1280x720' was not used: {WHY}"]


def test_images_typed_in_the_sidebar_under_trtllm_get_the_refusal():
    """Typed in the Serving workload box (no link check between): each answer says why."""
    at = make_app(m="Qwen/Qwen2.5-VL-7B-Instruct", e="trtllm", t="1000", u="1", kd="bf16")
    at.session_state["w_serving_box"] = True
    at.run()
    at.number_input(key="w_im").set_value(2).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [unmd(w.value) for w in at.warning] == [f"Does not fit: {WHY}."]
    assert [unmd(e.value) for e in at.error] == [f"Key numbers: {WHY}", f"KV vs context: {WHY}"]
