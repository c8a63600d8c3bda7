"""TensorRT-LLM and multimodal checkpoints (issue #27): a request with images or videos is refused by
name, a text-only answer of a multimodal checkpoint says what it leaves out.

Read on main, ``tensorrt_llm/_torch/pyexecutor/_util.py`` at 00043967 (the commit the ``main`` record
cites), ``KvCacheCreator``: ``_create_dummy_context_requests`` keeps the LLM's dummy text-only;
``_create_dummy_encoder_inputs`` builds one encoder batch of ``min(encoder_batch_size,
encoder_max_num_tokens // tokens per item)`` items from the input processor's ``get_dummy_mm_data``
for every ``MultimodalModelMixin`` model unless ``disable_mm_encoder`` (not per request);
``configure_kv_cache_capacity`` encodes it after the peak reset, keeps ``output.detach().clone()``
through the text dummy, then adds ``_get_multimodal_encoder_memory_reserve`` (the unprofiled part of
``mm_encoder_output_budget_bytes`` + ``encoder_cache_max_bytes`` when ``encoder_cache_active``) to the
peak. None of it is sized by kvplan for TensorRT-LLM (``kvplan.engines.trtllm.multimodal``).
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli

from kvplan.engines import get_engine
from kvplan.errors import KVPlanError
from kvplan.presets import load_model
from kvplan.scenario import Scenario, check_names, scenario_request_tokens

QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"
GEMMA = "gemma-3-27b"
SOURCE = ("tensorrt_llm/_torch/pyexecutor/_util.py 00043967 KvCacheCreator._create_dummy_encoder_inputs, "
          "_encode_dummy_inputs, _get_multimodal_encoder_memory_reserve")
MAIN = "TensorRT-LLM main 2026 (PyTorch backend; blocks floored)"
REFUSAL = (" profiles the multimodal encoder with a dummy batch of its own (encoder_max_num_tokens, "
           "encoder_batch_size) and reserves its output copy, mm_encoder_output_budget_bytes and "
           f"encoder_cache_max_bytes ({SOURCE}); kvplan does not size that profile for TensorRT-LLM, so "
           "it does not plan requests that bring images or videos under it")


def test_cli_refuses_images_under_trtllm_main_by_name():
    code, out, err = run_cli(["fit", "--model", QWEN_VL, "--engine", "trtllm", "--gpu", "h100-sxm",
                              "--tokens", "1000", "--images", "2", "--image-size", "1280x720"])
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"kvplan: error: 2 image(s) per request: {MAIN}{REFUSAL}"


def test_cli_refuses_videos_under_trtllm_1_1_naming_what_was_read():
    code, out, err = run_cli(["fit", "--model", QWEN_VL, "--engine", "trtllm", "--engine-version", "1.1",
                              "--gpu", "h100-sxm", "--tokens", "1000", "--videos", "1",
                              "--video-size", "640x360", "--video-seconds", "2", "--video-fps", "2"])
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "kvplan: error: 1 video(s) per request: TensorRT-LLM main (read; TensorRT-LLM ≤ 1.1 "
        f"(primary-pool blocks rounded up)'s own profile was not read){REFUSAL}")


def test_recommend_refuses_images_under_trtllm():
    code, _, err = run_cli(["recommend", "--model", QWEN_VL, "--engine", "trtllm", "--gpus", "h100-sxm",
                            "--images", "1", "--image-size", "640x480"])
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        f"kvplan: error: 1 image(s) per request: {MAIN} profiles the multimodal encoder"), err


def test_other_engines_take_the_same_request():
    """The refusal is TensorRT-LLM's alone: vLLM, SGLang and transformers size the images (their
    tokens are pinned by tests/test_multimodal.py); TensorRT-LLM names the modality it refuses."""
    arch = load_model(QWEN_VL)
    for engine in ("vllm", "sglang", "hf"):
        assert get_engine(engine).media_refusal(arch) is None
        get_engine(engine).check_media(arch, images=2, videos=1)  # no refusal
    get_engine("trtllm").check_media(arch)  # text only: nothing to refuse
    with pytest.raises(KVPlanError) as exc:
        get_engine("trtllm").check_media(arch, videos=3)
    assert str(exc.value) == f"3 video(s) per request: {MAIN}{REFUSAL}" and exc.value.field == "videos"


def test_text_only_answer_of_a_multimodal_checkpoint_names_what_it_leaves_out():
    code, out, err = run_cli(["fit", "--model", QWEN_VL, "--engine", "trtllm", "--gpu", "h100-sxm",
                              "--tokens", "1000", "--json"])
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert notes[0] == (
        f"Qwen2.5-VL-7B-Instruct is multimodal: {MAIN} profiles its encoder at start-up whatever the "
        "requests bring (unless disable_mm_encoder): the tower's activation on a dummy batch, that "
        "batch's output copy, mm_encoder_output_budget_bytes and encoder_cache_max_bytes "
        f"({SOURCE}); kvplan does not size them, so this KV pool is larger than TensorRT-LLM's by "
        "those bytes")
    # a text checkpoint has no such note
    code, out, err = run_cli(["fit", "--model", "Qwen/Qwen2.5-7B-Instruct", "--engine", "trtllm",
                              "--gpu", "h100-sxm", "--tokens", "1000", "--json"])
    assert code == 0, err
    assert not any("is multimodal" in n for n in json.loads(out)["notes"])


def test_link_drops_images_under_trtllm_by_name():
    """The dashboard's path: the link's images are dropped with the refusal in its warnings (shown by
    the sidebar as plain text), the request is its text alone."""
    scenario, warnings = Scenario.from_query({"m": GEMMA, "e": "trtllm", "im": "2", "t": "1000"})
    assert not warnings
    fixed, warnings = check_names(scenario)
    assert fixed.images == 0 and scenario_request_tokens(fixed) == fixed.tokens
    assert warnings == [f"link parameter 'im'='2×1280x720' was not used: 2 image(s) per request: "
                        f"{MAIN}{REFUSAL}"]


def test_only_main_records_a_read_encoder_profile():
    """``TrtLlmRelease.mm_profile_read``: main's ``_util.py`` 00043967 was read; 1.1 and 1.2.0 name
    main's code and say theirs was not read, in the refusal and in the text-only note."""
    assert [get_engine(f"trtllm@{k}").record.mm_profile_read for k in ("1.1", "1.2.0", "main")] == \
        ["", "", SOURCE]
    code, out, err = run_cli(["fit", "--model", QWEN_VL, "--engine", "trtllm", "--engine-version", "1.2.0",
                              "--gpu", "h100-sxm", "--tokens", "1000", "--json"])
    assert code == 0, err
    assert json.loads(out)["notes"][0].startswith(
        "Qwen2.5-VL-7B-Instruct is multimodal: TensorRT-LLM main (read; TensorRT-LLM 1.2.0 (PyTorch "
        "backend; primary-pool blocks still rounded up)'s own profile was not read) profiles its encoder")
