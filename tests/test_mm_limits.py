"""The engines' own caps on a request's images (issue #27), each hand-derived from the engine's code.

* vLLM: ``--limit-mm-per-prompt`` (999 per modality unset, ``config/multimodal.py``).
* SGLang: ``--limit-mm-data-per-request`` from 0.5.7 (``server_args.py``; absent at 0.5.6), checked
  per request by ``TokenizerManager._validate_mm_limits`` (0.5.23 ``managers/tokenizer_manager.py``):
  unset, the check returns early (no limit); set, ``count > limit`` raises ``"Image count N exceeds
  limit L per request."`` — so 0 refuses every image. Each engine's flag is refused by name under the
  other.
"""

from __future__ import annotations

import pytest
from cli_helpers import run_cli

from kvplan.engines import get_engine
from kvplan.engines.settings import EngineSettings
from kvplan.errors import KVPlanError
from kvplan.multimodal import ImageRequest, image_prompt_tokens
from kvplan.presets import load_model
from kvplan.scenario import Scenario, check_names, scenario_request_tokens

GEMMA = "gemma-3-27b"  # FixedProcessor: 260 prompt tokens per image (processing_gemma3.py)
#: SGLang's own form of the limit (``--limit-mm-data-per-request`` is ``json.loads``ed), canonical.
TWO = '{"image":2,"video":2}'
ZERO = '{"image":0}'
SPELLED = '{"image": 2, "video": 2}'  # as typed on SGLang's command line


def _tokens(engine: str, settings: EngineSettings, count: int) -> int:
    arch = load_model(GEMMA)
    e = get_engine(engine)
    images = ImageRequest(count=count, width=1280, height=720)
    return image_prompt_tokens(arch.name, arch.processor, images, e.image_limit(settings),
                               flag=e.image_limit_flag, refusal=e.image_limit_refusal)


def test_sglang_limit_is_its_own_flag_from_0_5_7():
    two = EngineSettings(limit_mm_data_per_request=TWO)
    assert [get_engine(f"sglang@{v}").image_limit(two) for v in ("0.5.7", "0.5.23")] == [2, 2]
    assert get_engine("sglang").image_limit(EngineSettings()) is None  # unset: no limit
    assert _tokens("sglang", two, 2) == 2 * 260
    assert _tokens("sglang", EngineSettings(), 5000) == 5000 * 260  # no cap, not vLLM's 999
    with pytest.raises(KVPlanError) as exc:
        _tokens("sglang", two, 3)
    assert str(exc.value) == ("3 image(s) per request: above --limit-mm-data-per-request's 2 per "
                              "request (SGLang refuses the request: managers/tokenizer_manager.py "
                              "_validate_mm_limits)")
    zero = "^1 image\\(s\\) per request: above --limit-mm-data-per-request's 0"
    with pytest.raises(KVPlanError, match=zero):
        _tokens("sglang", EngineSettings(limit_mm_data_per_request=ZERO), 1)  # count 1 > limit 0
    assert _tokens("sglang", EngineSettings(limit_mm_data_per_request=ZERO), 0) == 0


def test_each_engines_flag_is_refused_under_the_other():
    with pytest.raises(KVPlanError) as exc:
        get_engine("sglang").image_limit(EngineSettings(limit_mm_per_prompt=2))
    assert str(exc.value) == ("--limit-mm-per-prompt under SGLang (token pool): it is vLLM's flag; SGLang's "
                              "is --limit-mm-data-per-request (0.5.7+)")
    with pytest.raises(KVPlanError) as exc:
        get_engine("vllm").image_limit(EngineSettings(limit_mm_data_per_request=TWO))
    assert str(exc.value) == ("--limit-mm-data-per-request under vLLM (v1 paged blocks): it is SGLang's "
                              "flag; vLLM's is --limit-mm-per-prompt")
    with pytest.raises(KVPlanError) as exc:
        get_engine("sglang@0.5.5").image_limit(EngineSettings(limit_mm_data_per_request=TWO))
    assert str(exc.value) == ("--limit-mm-data-per-request under SGLang 0.5.5: SGLang added it in 0.5.7 "
                              "(absent from 0.5.6's server_args.py)")


def test_sglang_0_5_7_record_changes_only_the_flag():
    """The 0.5.7 record is 0.5.5's memory rules plus the flag (its changes say so)."""
    old, new = get_engine("sglang@0.5.5").record, get_engine("sglang@0.5.7").record
    assert (old.name, new.name) == ("SGLang 0.5.5", "SGLang 0.5.7")
    assert old.memory_table == new.memory_table and old.memory_top == new.memory_top
    assert (old.mm_data_limit, new.mm_data_limit, get_engine("sglang@0.5.23").record.mm_data_limit) == \
        (False, True, True)


@pytest.mark.parametrize(("argv", "why"), [
    (["--engine", "sglang", "--limit-mm-per-prompt", "2"],
     "--limit-mm-per-prompt under SGLang (token pool): it is vLLM's flag"),
    (["--engine", "sglang", "--limit-mm-data-per-request", SPELLED, "--images", "3",
      "--image-size", "1280x720"],
     "3 image(s) per request: above --limit-mm-data-per-request's 2 per request"),
    (["--engine", "sglang", "--engine-version", "0.5.5", "--limit-mm-data-per-request", SPELLED],
     "SGLang added it in 0.5.7"),
    (["--engine", "vllm", "--limit-mm-data-per-request", SPELLED], "it is SGLang's flag"),
])
def test_cli_refuses_a_limit_by_name(argv, why):
    code, out, err = run_cli(["fit", "--model", GEMMA, "--gpu", "h100-sxm", "--tokens", "1000", *argv])
    assert code == 2 and why in err and "Traceback" not in err, (code, out, err)


def test_cli_takes_sglangs_limit():
    import json

    code, out, err = run_cli(["fit", "--model", GEMMA, "--gpu", "h100-sxm", "--tokens", "1000", "--engine",
                              "sglang", "--limit-mm-data-per-request", SPELLED, "--images", "2",
                              "--image-size", "1280x720", "--json"])
    assert code == 0, err
    assert json.loads(out)["request"]["tokens"] == 1000 + 2 * 260


def test_link_drops_images_above_sglangs_limit_by_name():
    scenario, warnings = Scenario.from_query({"m": GEMMA, "e": "sglang", "md": TWO, "im": "3"})
    assert not warnings and scenario.engine_settings.limit_mm_data_per_request == TWO
    fixed, warnings = check_names(scenario)
    assert fixed.images == 0
    assert any("above --limit-mm-data-per-request's 2 per request" in w for w in warnings), warnings
    # vLLM's mi is not SGLang's knob: ignored there, like every knob an engine does not have
    fixed, warnings = check_names(scenario.model_copy(update={"engine_settings": EngineSettings(
        limit_mm_per_prompt=2)}))
    assert fixed.images == 3 and scenario_request_tokens(fixed) == fixed.tokens + 3 * 260


@pytest.mark.parametrize(("query", "link", "checked", "images"), [
    # a 0×0 image: each side falls back alone to its default (1280×720); the images stay
    ({"im": "2", "iw": "0", "ih": "0"},
     ["link parameter 'iw'='0' was not used: Input should be greater than or equal to 1",
      "link parameter 'ih'='0' was not used: Input should be greater than or equal to 1"], [], 2),
    ({"im": "2", "iw": "70000"},
     ["link parameter 'iw'='70000' was not used: Input should be less than or equal to 65536"], [], 2),
    ({"im": "20000"},
     ["link parameter 'im'='20000' was not used: Input should be less than or equal to 10000"], [], 0),
    ({"im": "3", "mi": "2"}, [],
     ["link parameter 'im'='3×1280x720' was not used: 3 image(s) per request: above "
      "--limit-mm-per-prompt's 2 per prompt (vLLM refuses the request)"], 0),
    ({"im": "3", "e": "sglang", "md": '{"image": 2}'}, [],
     ["link parameter 'im'='3×1280x720' was not used: 3 image(s) per request: above "
      "--limit-mm-data-per-request's 2 per request (SGLang refuses the request: "
      "managers/tokenizer_manager.py _validate_mm_limits)"], 0),
    ({"im": "3", "e": "sglang", "md": TWO, "ev": "0.5.5"}, [],
     ["link parameter 'im'='3×1280x720' was not used: --limit-mm-data-per-request under SGLang "
      "0.5.5: SGLang added it in 0.5.7 (absent from 0.5.6's server_args.py)"], 0),
    # a bare number is SGLang's JSON number, not its per-modality object: refused by name (kvplan's
    # earlier md=N is read as the object, test_earlier_bare_count_link_is_read_as_sglangs_json)
    ({"md": "-4"}, ["link parameter 'md'='-4' was not used: expected SGLang's JSON object of "
                    "counts, e.g. {\"image\": 2, \"video\": 1}"], [], 0),
    ({"md": '{"image": -1}'}, ["link parameter 'md'='{\"image\": -1}' was not used: image count -1 is "
                               "negative (0 refuses every image)"],
     [], 0),
])
def test_link_messages_for_bad_images_and_limits(query, link, checked, images):
    """Each bad value is named in the link's warnings and falls back alone (the sidebar shows them)."""
    scenario, warnings = Scenario.from_query({"m": GEMMA, **query})
    assert warnings == link
    fixed, warnings = check_names(scenario)
    assert warnings == checked and fixed.images == images


@pytest.mark.parametrize(("argv", "message"), [
    (["--images", "1", "--image-size", "0x0"],
     "kvplan: error: image size 0×0: both sides must be at least 1 pixel"),
    (["--images", "1", "--image-size", "70000x10"],
     "kvplan: error: image size 70000×10: a side above 65,536 pixels is not an image a processor takes"),
    (["--images", "1", "--image-size", "99999999999x1"],
     "kvplan: error: image size '99999999999x1': expected WIDTHxHEIGHT in pixels, e.g. 1280x720"),
    # the count's own flag is named (it named --kv-cache-memory-bytes before: a shared parser)
    (["--images", "-1", "--image-size", "10x10"],
     "kvplan: error: argument --images: --images must be between 0 and 10,000, got '-1'"),
    (["--images", "1000", "--image-size", "10x10"],
     "kvplan: error: 1000 image(s) per request: above --limit-mm-per-prompt's 999 per prompt (vLLM refuses "
     "the request)"),
])
def test_cli_messages_for_bad_images(argv, message):
    code, out, err = run_cli(["fit", "--model", GEMMA, "--gpu", "h100-sxm", "--tokens", "100", *argv])
    assert code == 2 and err.strip().splitlines()[-1] == message, (code, out, err)


def test_sglang_gpu_feature_transport_reserves_its_pool():
    """0.5.23 ``mm_runtime_reservation_gb``: SGLANG_VLM_CACHE_SIZE_MB (100 MiB), + the transport pool
    SGLANG_MM_FEATURE_CACHE_MB (1,024 MiB) with ``--mm-feature-transport cuda_ipc|cuda_vmm``, out of
    the KV budget before the token division. Qwen2.5-VL-7B on an H100 (KV budget 43,170,624,528 B,
    57,344 B per token): (43,170,624,528 − 104,857,600) // 57,344 = 751,007 tokens; with cuda_ipc
    (43,170,624,528 − 1,178,599,424) // 57,344 = 732,282."""
    from kvplan.engines.sglang.engine import sglang_mm_reservation
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import get_gpu

    qwen = load_model("Qwen/Qwen2.5-VL-7B-Instruct")
    assert [sglang_mm_reservation(qwen, t) for t in (None, "cpu", "cuda_ipc", "cuda_vmm")] == \
        [104_857_600, 104_857_600, 1_178_599_424, 1_178_599_424]
    assert sglang_mm_reservation(load_model("llama-3.1-8b"), "cuda_ipc") == 0  # not multimodal
    with pytest.raises(KVPlanError) as exc:
        sglang_mm_reservation(qwen, "nvlink")
    assert str(exc.value) == "--mm-feature-transport 'nvlink': expected one of cpu, cuda_ipc, cuda_vmm"
    tokens = []
    for transport in (None, "cuda_ipc"):
        plan = make_plan(qwen, get_gpu("h100-sxm"), FitQuery(
            tokens=1000, engine="sglang", settings=EngineSettings(mm_feature_transport=transport)))
        tokens.append(plan.pool.capacity)
    # SGLang's weights hold the mrope fp32 cache (128,000 × 128 × 4 = 65,536,000 B) and the allocator's
    # segments (204,941,312 B) besides the tensors (test_sglang_weights): 43,170,624,528 → 42,900,147,216
    budget = 42_900_147_216
    assert tokens == [(budget - 104_857_600) // 57_344, (budget - 1_178_599_424) // 57_344]
    assert tokens == [746_290, 727_566]


def test_cli_refuses_the_transport_before_0_5_23_by_name():
    code, out, err = run_cli(["fit", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100-sxm",
                              "--tokens", "1000", "--engine", "sglang", "--engine-version", "0.5.7",
                              "--mm-feature-transport", "cuda_ipc"])
    assert code == 2 and err.strip().endswith("--mm-feature-transport under SGLang 0.5.7: kvplan reads its "
                                              "reservation at 0.5.23 (mm_runtime_reservation_gb)"), err


def test_sglang_takes_its_own_json_per_modality():
    """``'{"image": 2, "video": 1}'``: SGLang's ``_validate_mm_limits`` checks each modality the JSON
    names (``count > limit``); a modality left out has no limit; ``audio`` is allowed (kvplan's
    requests bring none)."""
    sglang = get_engine("sglang")
    both = EngineSettings(limit_mm_data_per_request='{"image": 2, "video": 1}')
    assert both.limit_mm_data_per_request == '{"image":2,"video":1}'  # canonical: one spelling
    assert (sglang.image_limit(both), sglang.image_limit(both, "video")) == (2, 1)
    only = EngineSettings(limit_mm_data_per_request='{"video": 0, "audio": 3}')
    assert (sglang.image_limit(only), sglang.image_limit(only, "video")) == (None, 0)
    assert _tokens("sglang", only, 5000) == 5000 * 260  # images left out: no limit
    empty = EngineSettings(limit_mm_data_per_request="{}")  # SGLang: falsy, the check returns early
    assert (sglang.image_limit(empty), sglang.image_limit(empty, "video")) == (None, None)


@pytest.mark.parametrize(("text", "why"), [
    ('{"image": 2', "not valid JSON (Expecting ',' delimiter: line 1 column 12 (char 11))"),
    # SGLang json.loads a bare 2 into a number, which its per-request check cannot iterate
    ("2", 'expected SGLang\'s JSON object of counts, e.g. {"image": 2, "video": 1}'),
    ("[2]", 'expected SGLang\'s JSON object of counts, e.g. {"image": 2, "video": 1}'),
    ('{"images": 2}', "unknown modality 'images': SGLang allows image, video, audio"),
    ('{"image": -1}', "image count -1 is negative (0 refuses every image)"),
    ('{"video": 1.5}', "video count 1.5 is not a whole number"),
    ('{"image": true}', "image count True is not a whole number"),
    ('{"image": 10001}', "image count 10,001 is above 10,000"),
])
def test_cli_refuses_bad_sglang_limits_naming_the_flag(text, why):
    code, out, err = run_cli(["fit", "--model", GEMMA, "--gpu", "h100-sxm", "--tokens", "1000",
                              "--engine", "sglang", "--limit-mm-data-per-request", text])
    assert (code, out) == (2, "")
    assert err == (f"kvplan: error: argument --limit-mm-data-per-request: --limit-mm-data-per-request: "
                   f"{why} (got {text!r})\n")


def test_cli_takes_sglangs_json_and_counts_each_modality():
    import json

    base = ["fit", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100-sxm", "--tokens", "1000",
            "--engine", "sglang", "--limit-mm-data-per-request", '{"image": 2, "video": 1}',
            "--images", "2", "--image-size", "1280x720", "--video-size", "1280x720",
            "--video-seconds", "10", "--video-fps", "2", "--json"]
    code, out, err = run_cli([*base, "--videos", "1"])
    assert code == 0, err
    # 1,198 per image (test_multimodal), 11,962 per video (test_mm_video)
    assert json.loads(out)["request"]["tokens"] == 1000 + 2 * 1198 + 11962
    code, out, err = run_cli([*base, "--videos", "2"])
    assert code == 2 and "2 video(s) per request: above --limit-mm-data-per-request's 1 per request" in err


def test_earlier_bare_count_link_is_read_as_sglangs_json():
    """kvplan's earlier ``md=2`` (one count for images and videos) is read as SGLang's object."""
    scenario, warnings = Scenario.from_query({"m": GEMMA, "e": "sglang", "md": "2"})
    assert warnings == ['link parameter \'md\'=\'2\' was read as md={"image":2,"video":2} '
                        "(--limit-mm-data-per-request)"]
    assert scenario.engine_settings.limit_mm_data_per_request == TWO
    assert scenario.to_query()["md"] == TWO


@pytest.mark.parametrize("engine", ["trtllm", "trtllm@1.1", "hf"])
def test_engines_without_an_item_limit_take_any_count_and_refuse_both_flags(engine):
    """TensorRT-LLM's PyTorch backend (its encoder is sized by ``encoder_max_num_tokens`` and
    ``encoder_batch_size``, no per-request count) and transformers have no limit kvplan knows: no
    999 cap (vLLM's default), and vLLM's and SGLang's flags are refused by name, not applied."""
    e = get_engine(engine)
    assert e.image_limit(EngineSettings()) is None and e.image_limit(EngineSettings(), "video") is None
    assert _tokens(engine, EngineSettings(), 5000) == 5000 * 260
    for settings, flag, owner in ((EngineSettings(limit_mm_per_prompt=2), "--limit-mm-per-prompt", "vLLM"),
                                  (EngineSettings(limit_mm_data_per_request=TWO),
                                   "--limit-mm-data-per-request", "SGLang")):
        with pytest.raises(KVPlanError) as exc:
            e.image_limit(settings)
        assert str(exc.value) == (f"{flag} under {e.label}: it is {owner}'s flag; kvplan knows no "
                                  f"{e.short} flag that caps a request's images or videos")


def test_cli_refuses_vllms_limit_under_trtllm_by_name():
    code, out, err = run_cli(["fit", "--model", GEMMA, "--gpu", "h100-sxm", "--tokens", "1000", "--engine",
                              "trtllm", "--images", "3", "--image-size", "1280x720",
                              "--limit-mm-per-prompt", "2"])
    assert (code, out) == (2, "")
    assert err == ("kvplan: error: --limit-mm-per-prompt under TensorRT-LLM (PyTorch backend, 32-token "
                   "blocks): it is vLLM's flag; kvplan knows no TensorRT-LLM flag that caps a request's "
                   "images or videos\n")
