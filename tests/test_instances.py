"""Several engines on one GPU (``kvplan.instances``), derived by hand from each engine's code:

* vLLM v0.33 / v0.14.1+: ``v1/worker/utils.py`` ``request_memory`` (``ceil(total × util)``, raises
  ``ValueError`` "Free memory on device cuda:0 (…) on startup is less than desired GPU memory
  utilization …" when ``free < requested``; ``format_gib`` = ``round(b / GiB, 2)``); v0.10–v0.13:
  ``v1/worker/gpu_worker.py`` ``init_device`` (``total × util`` unrounded, no device in the message);
  the budget counts only the engine's own use (``memory_profiling`` from the start-up snapshot);
* vLLM v0.8.0 / v0.9.0: ``v1/worker/gpu_worker.py`` ``determine_available_memory``
  (``non_torch_allocations = (total − free) − torch allocated``: every process's memory), and
  ``v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory`` ("No available memory for the cache
  blocks…");
* vLLM v0.6.0: ``worker/worker.py`` ``determine_num_available_blocks`` (``peak = init_gpu_memory −
  free``: its own use only, no check);
* SGLang v0.5.23: ``distributed/bootstrap.py`` ``measure_pre_model_load_memory`` (free memory before
  loading) and ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes`` (``rest = free
  after loading − pre × (1 − mfs)``, the ``ValueError`` when ``rest ≤ 0``);
* TensorRT-LLM: ``_torch/pyexecutor/_util.py`` ``KvCacheCreator`` (``total_used_bytes = total −
  free`` of the whole device in the peak; ``_cal_max_memory``: ``(total − peak) × fraction``).

Llama-3.1-8B (bf16 weights 16,060,522,496 B) on one H100-SXM (CUDA total 85,027,979,264 B),
8 requests of 8,192 tokens; a vLLM block is 32 layers × 16 tokens × 8 heads × 128 × 2 × 2 B =
2,097,152 B, an SGLang / TRT-LLM token 131,072 B.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.engines import EngineSettings
from kvplan.errors import KVPlanError
from kvplan.instances import parse_instance, share
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

H100 = get_gpu("h100-sxm")
LLAMA8 = load_model("llama-3.1-8b")
TOTAL = 85_027_979_264
WEIGHTS = 16_060_522_496
#: vLLM's weights of the same model: + its RoPE cos/sin cache in bf16 (``rotary_embedding/base.py``
#: RotaryEmbedding.__init__): 131,072 × 128 × 2 = 33,554,432 B. Every vLLM budget below is 33,554,432
#: B smaller than before the cache joined the weights, its pool 16 blocks (of 2,097,152 B) fewer, and
#: what an instance holds unchanged (weights + reserve + its pool: the 16 blocks are the cache).
VLLM_WEIGHTS = WEIGHTS + 33_554_432
#: SGLang's weights of the same model: + what its loading holds besides the tensors (fp32 RoPE cache
#: 67,108,864 + allocator segments 1,564,672; test_sglang_weights.test_what_sglang_holds_at_load_end).
SGL_WEIGHTS = WEIGHTS + 68_673_536
GIB = 1 << 30


def _plan(engine: str, util: float, users: int = 8, tokens: int = 8192, gpu=H100, held: float | None = 0):
    """SGLang's memory held before loading is set to 0 (``reserve_terms``) unless ``held`` is None, so
    the hand arithmetic below is the fraction rule alone; its fitted default (``SGLANG_HELD_BEFORE_LOAD``,
    0.509 GiB on NVIDIA = 546,534,588 B) is in the tests that name it and in the CLI / link ones."""
    terms = {"held_before_load": held} if engine.startswith("sglang") and held is not None else None
    return make_plan(LLAMA8, gpu, FitQuery(tokens=tokens, users=users, engine=engine, reserve_terms=terms,
                                           settings=EngineSettings(gpu_util=util)))


#: SGLang's fitted default memory held before loading on NVIDIA (round(0.509 × 2^30)).
SGLANG_HELD = 546_534_588


#: vLLM v0.33 at 0.45 alone: ceil(85,027,979,264 × 0.45) = 38,262,590,669 − weights − reserve
#: (activation 1,313,341,440 + non-torch 143,129,785 + CUDA graphs 408,662,949 = 1,865,134,174)
#: = 20,303,379,567 B → 9,681 blocks; it holds weights + reserve + 9,681 × 2,097,152.
V33_HOLDS = VLLM_WEIGHTS + 1_865_134_174 + 9_681 * 2_097_152


def test_two_vllm_033_at_045_both_start_and_keep_their_own_budget() -> None:
    """v0.33 counts only its own use, so the second instance's budget is the first's; the start-up
    check passes: free 85,027,979,264 − 38,261,739,614 = 46,766,239,650 ≥ 38,262,590,669."""
    answer = share([("a", _plan("vllm@0.33", 0.45)), ("b", _plan("vllm@0.33", 0.45))])
    a, b = answer.instances
    assert V33_HOLDS == 38_261_739_614 == a.held_bytes == b.held_bytes
    assert (a.others, b.others) == (0, 38_261_739_614)
    assert a.kv_budget == b.kv_budget == math.ceil(TOTAL * 0.45) - VLLM_WEIGHTS - 1_865_134_174 \
        == 20_303_379_567
    assert b.starts and b.fits and b.message == "" and b.fix == ""
    assert b.kv_pool_tokens == 9_681 * 16 == 154_896 and b.max_requests == (9_681 - 1) // 512 == 18
    assert answer.order == ("a", "b")
    assert answer.free_after == TOTAL - 2 * 38_261_739_614 == 8_504_500_036
    held = {t.name: t.bytes for t in b.ledger if t.group == "others"}
    assert held == {"held by other processes": 38_261_739_614}


def test_vllm_033_after_sglang_refuses_with_its_free_memory_message() -> None:
    """SGLang at mem_fraction_static 0.8 holds int(85,027,979,264 × 0.8) = 68,022,383,411 B (weights +
    pool, alone on the GPU); vLLM v0.33 then sees 17,005,595,853 B free < 38,262,590,669 requested:
    round(17,005,595,853 / 2^30, 2) = 15.84, round(85,027,979,264 / 2^30, 2) = 79.19,
    round(38,262,590,669 / 2^30, 2) = 35.63."""
    s, v = share([("s", _plan("sglang", 0.8)), ("v", _plan("vllm@0.33", 0.45))]).instances
    assert s.held_bytes == int(TOTAL * 0.8) == 68_022_383_411
    assert not v.starts and v.held_bytes == 0 and v.max_requests == 0
    assert v.message == ("Free memory on device cuda:0 (15.84/79.19 GiB) on startup is less than desired "
                         "GPU memory utilization (0.45, 35.63 GiB). Decrease GPU memory utilization or "
                         "reduce GPU memory used by other processes.")
    # 0.32 is the smallest share holding 8 × 8,192 tokens; ceil(TOTAL × 0.32) > 17,005,595,853 free
    assert v.fix.startswith("none by gpu_memory_utilization: 0.32 is the smallest that holds")


def test_vllm_011_message_has_no_device_and_an_unrounded_request() -> None:
    """v0.10–v0.13 ``init_device``: ``requested = total × util`` (float), the message without the
    device name."""
    v = share([("s", _plan("sglang", 0.8)), ("v", _plan("vllm@0.11", 0.45))]).instances[1]
    assert v.message.startswith("Free memory on device (15.84/79.19 GiB) on startup is less than "
                                "desired GPU memory utilization (0.45, 35.63 GiB).")


def test_vllm_08_second_instance_needs_a_larger_utilization() -> None:
    """v0.8.0: KV = int(total × util) − weights − reserve (activation + non-torch 1,456,471,225; CUDA
    graphs 536,870,933 not subtracted but held) − everything others hold. The first holds 16,094,076,928
    + 1,456,471,225 + 536,870,933 + 9,876 × 2,097,152 = 38,798,892,238 B; at 0.45 the second's budget
    is 20,712,042,515 − 38,798,892,238 < 0 → "No available memory"; at 0.77: int(TOTAL × 0.77) =
    65,471,544,033 − 16,094,076,928 − 1,456,471,225 − 38,798,892,238 = 9,122,103,642 B → 4,349 blocks
    → (4,349 − 1) // 512 = 8 requests; at 0.76: 8,271,823,849 → 3,944 blocks → 7 (9,155,658,074 and
    8,305,378,281 B before vLLM's 33,554,432 B RoPE cache joined the weights)."""
    a, b = share([("a", _plan("vllm@0.8", 0.45)), ("b", _plan("vllm@0.8", 0.45))]).instances
    assert a.held_bytes == 38_798_892_238
    assert not b.starts and b.message == ("No available memory for the cache blocks. Try increasing "
                                          "`gpu_memory_utilization` when initializing the engine.")
    assert b.fix == ("gpu_memory_utilization 0.77 (the smallest in steps of 0.01 with which it starts "
                     "and fits)")
    c = share([("a", _plan("vllm@0.8", 0.45)), ("c", _plan("vllm@0.8", 0.77))]).instances[1]
    assert c.kv_budget == int(TOTAL * 0.77) - VLLM_WEIGHTS - 1_456_471_225 - 38_798_892_238 == 9_122_103_642
    assert c.starts and c.fits and c.max_requests == (9_122_103_642 // 2_097_152 - 1) // 512 == 8
    d = share([("a", _plan("vllm@0.8", 0.45)), ("d", _plan("vllm@0.8", 0.76))]).instances[1]
    assert d.kv_budget == 8_271_823_849 and d.max_requests == 7 and not d.fits and d.starts


def test_vllm_06_sizes_its_own_use_and_runs_out_of_memory_beside_others() -> None:
    """v0.6.0 does not check free memory: 38,262,590,668 B (int(TOTAL × 0.45)) to allocate beside
    17,005,595,853 free runs out of CUDA memory; beside another v0.6 instance its budget is its own:
    38,262,590,668 − weights (with vLLM's 33,554,432 B RoPE cache) − activation 1,280,507,904 − V0
    non-torch 375,809,638 = 20,512,196,198 (20,545,750,630 before the cache)."""
    v = share([("s", _plan("sglang", 0.8)), ("v", _plan("vllm@0.6", 0.45))]).instances[1]
    assert not v.starts and v.message.startswith(
        "CUDA out of memory allocating the KV cache: total × gpu_memory_utilization = 38,262,590,668 B, "
        "17,005,595,853 B free")
    a, b = share([("a", _plan("vllm@0.6", 0.45)), ("b", _plan("vllm@0.6", 0.45))]).instances
    assert a.kv_budget == b.kv_budget == 20_512_196_198 and b.starts


def test_sglang_takes_its_fraction_of_the_memory_free_before_loading() -> None:
    """After vLLM v0.33 (38,261,739,614 B): pre = 46,766,239,650; KV = int(pre × 0.8) − weights =
    37,412,991,720 − 16,129,196,032 (SGL_WEIGHTS) = 21,283,795,688 B → // 131,072 = 162,382 tokens."""
    s = share([("v", _plan("vllm@0.33", 0.45)), ("s", _plan("sglang", 0.8))]).instances[1]
    assert s.kv_budget == int((TOTAL - V33_HOLDS) * 0.8) - SGL_WEIGHTS == 21_283_795_688
    assert s.kv_pool_tokens == 21_283_795_688 // 131_072 == 162_382
    assert s.held_bytes == SGL_WEIGHTS + 21_283_795_688 and s.starts


def test_sglang_refuses_when_the_weights_leave_no_kv_under_its_fraction() -> None:
    """After vLLM v0.33 at 0.8 (holds 68,020,326,494 B): pre = 17,007,652,770 B; int(pre × 0.8) −
    16,129,196,032 (SGL_WEIGHTS) < 0 → the ValueError of ``_profile_available_bytes``: minimum = 1 −
    (pre − W) / pre = 0.94835…, suggested ceil(× 1000) / 1000 = 0.949."""
    v, s = share([("v", _plan("vllm@0.33", 0.8)), ("s", _plan("sglang", 0.8))]).instances
    pre = TOTAL - v.held_bytes
    assert pre == 17_007_652_770
    minimum = 1 - ((pre - SGL_WEIGHTS) / GIB) / (pre / GIB)
    assert f"{minimum:.4f}" == "0.9483" and math.ceil(minimum * 1000) / 1000 == 0.949
    assert not s.starts and s.message == (
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8. Raise "
        "--mem-fraction-static above 0.949 (minimum viable = 1 - available/pre = 0.9483). If using "
        "speculative decoding, draft weights are now counted.")
    assert "started first (alone on the GPU) it fits" in s.fix


def test_trtllm_takes_its_fraction_after_the_others() -> None:
    """After vLLM v0.33: int((85,027,979,264 − 38,261,739,614 − 16,060,522,496 − activation
    905,969,664 (8,192 tokens × (3 × 4,096 + 3 × 14,336) × 2 B, ``memory.forward_peak``) − non-torch
    2,705,829,396 (``TRTLLM_NON_TORCH_BYTES``, fitted on TRT-LLM log 05; issue #30 added the term,
    which moved this pin from 26,819,772,741 B)) × 0.9) = int(27,093,918,094 × 0.9) =
    24,384,526,284 B; beside SGLang at 0.9 (76,525,181,337 B) the weights do not load:
    8,502,797,927 B free."""
    t = share([("v", _plan("vllm@0.33", 0.45)), ("t", _plan("trtllm", 0.9))]).instances[1]
    assert t.kv_budget == int((TOTAL - V33_HOLDS - WEIGHTS - 905_969_664 - 2_705_829_396) * 0.9) \
        == 24_384_526_284
    t2 = share([("s", _plan("sglang", 0.9)), ("t", _plan("trtllm", 0.9))]).instances[1]
    assert not t2.starts and t2.message == (
        "CUDA out of memory while loading the weights: 16,060,522,496 B per GPU, 8,502,797,927 B free "
        "(85,027,979,264 − 76,525,181,337 held by the instances started before)")


def test_bad_instances_are_refused_by_name() -> None:
    with pytest.raises(KVPlanError, match=r"sum to 1.05, more than the device \(a 0.45, b 0.6"):
        share([("a", _plan("vllm@0.33", 0.45)), ("b", _plan("vllm@0.33", 0.6))])
    with pytest.raises(KVPlanError, match="'a' is given twice"):
        share([("a", _plan("vllm@0.33", 0.3)), ("a", _plan("vllm@0.33", 0.3))])
    with pytest.raises(KVPlanError, match="'b' is on a100-80gb-sxm but 'a' is on h100-sxm"):
        share([("a", _plan("vllm@0.33", 0.3)), ("b", _plan("vllm@0.33", 0.3, gpu=get_gpu("a100-80gb-sxm")))])
    with pytest.raises(KVPlanError, match="at least one"):
        share([])
    # v0.8's utilization counts the others: shares are not summed there
    assert len(share([("a", _plan("vllm@0.8", 0.45)), ("b", _plan("vllm@0.8", 0.77))]).instances) == 2


def test_one_instance_alone_is_the_plain_plan() -> None:
    plan = _plan("vllm@0.33", 0.45)
    (a,) = share([("a", plan)]).instances
    assert a.kv_budget == plan.budget.kv_budget and a.others == 0
    assert not [t for t in a.ledger if t.group == "others"]


CHAT = "name=chat,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8"
BATCH = "name=batch,model=llama-3.1-8b,engine=sglang,gu=0.8,tokens=8192,users=8"


def test_cli_share_json_gives_each_instance_in_start_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["share", "--gpu", "h100-sxm", "--instance", CHAT, "--instance", BATCH, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["start_order"] == ["chat", "batch"] and out["all_fit"] is True
    chat, batch = out["instances"]
    assert chat["holds_bytes"] == V33_HOLDS and batch["held_by_others_at_start"] == V33_HOLDS
    # SGLang with its default held before loading (546,534,588 B): pre = 85,027,979,264 − 38,261,739,614
    # − 546,534,588 = 46,219,705,062; KV = int(pre × 0.8) − SGL_WEIGHTS = 20,846,568,017 → 159,046 tokens;
    # it holds 546,534,588 + int(pre × 0.8) = 37,522,298,637
    pre = TOTAL - V33_HOLDS - SGLANG_HELD
    assert batch["kv_budget_bytes"] == int(pre * 0.8) - SGL_WEIGHTS == 20_846_568_017
    assert batch["kv_pool_tokens"] == 20_846_568_017 // 131_072 == 159_046
    assert batch["setting"] == "mem_fraction_static" and batch["setting_value"] == 0.8
    assert out["free_after_bytes"] == TOTAL - V33_HOLDS - SGLANG_HELD - int(pre * 0.8) == 9_243_941_013


def test_cli_share_text_names_a_refusal_and_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["share", "--gpu", "h100-sxm", "--instance", BATCH, "--instance", CHAT]) == 0
    out = capsys.readouterr().out
    assert "started in this order: batch → chat" in out
    # SGLang holds 546,534,588 + int((TOTAL − 546,534,588) × 0.8) = 68,131,690,328 B: 15.74 GiB left
    assert "2. chat: vLLM" in out and "Does NOT start: Free memory on device cuda:0 (15.74/79.19 GiB)" in out
    assert "Smallest change: none by gpu_memory_utilization: 0.32" in out


@pytest.mark.parametrize(("spec", "message"), [
    ("model=llama-3.1-8b,zz=1", "unknown key 'zz'"),
    ("model=llama-3.1-8b,gu=1.5", "gu (--gpu-util) '1.5': must be at least"),
    ("model=llama-3.1-8b,tokens=-3", "tokens must be a positive whole number, got '-3'"),
    ("gu=0.5", "no model="),
    ("model=llama-3.1-8b,gu", "'gu' is not KEY=VALUE"),
])
def test_cli_share_bad_instance_is_named(spec: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["share", "--gpu", "h100-sxm", "--instance", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_share_shares_past_the_device_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["share", "--gpu", "h100-sxm", "--instance", CHAT,
                 "--instance", CHAT.replace("chat", "chat2").replace("0.45", "0.6")]) == 2
    assert "sum to 1.05, more than the device (chat 0.45, chat2 0.6" in capsys.readouterr().err


TRUTH = json.loads((Path(__file__).parent / "fixtures" / "vllm_truth" / "request_memory.json").read_text())


@pytest.mark.parametrize("case", TRUTH["cases"], ids=lambda c: c["case"])
def test_vllm_start_up_check_is_vllms_own(case: dict) -> None:
    """``tools/vllm_truth/request_memory.py``: vLLM 0.33.0's ``v1/worker/utils.py`` ``request_memory``
    run on the free memory the instances before it leave: its ``ValueError`` text, or the requested
    bytes (kvplan's memory target) when it starts — the 0.198 case passes the check
    (ceil(85,027,979,264 × 0.198) = 16,835,539,895 ≤ 16,896,288,936 free beside SGLang) and then the
    weights leave no KV memory — kvplan's other refusal)."""
    gpu = get_gpu(case["gpu"])
    named = [parse_instance(text, gpu, index=i)
             for i, text in enumerate([*case["before"], case["instance"]], 1)]
    last = share(named).instances[-1]
    assert last.others == case["total_memory"] - case["free_memory"]
    if case["error"] is None:
        assert not last.message.startswith("Free memory on device")
        assert last.starts == (case["case"] != "after-sglang-0.8-fits")
        assert named[-1][1].vary(held_by_others=last.others).budget.target == case["requested_memory"]
    else:
        assert last.message == case["error"] and not last.starts


def test_hf_transformers_takes_what_the_others_leave() -> None:
    """HF transformers has no memory setting: its budget (device total − weights − its 1 GiB flat
    reserve = 67,893,714,944 B) loses the 38,261,739,614 B vLLM v0.33 holds → 29,631,975,330 B."""
    hf = make_plan(LLAMA8, H100, FitQuery(tokens=8192, users=8, engine="hf"))
    assert hf.budget.kv_budget == TOTAL - WEIGHTS - (1 << 30) == 67_893_714_944
    b = share([("a", _plan("vllm@0.33", 0.45)), ("b", hf)]).instances[1]
    assert b.setting_value is None and b.kv_budget == 67_893_714_944 - V33_HOLDS == 29_631_975_330
    assert b.starts and b.fits


def test_sglang_alone_holds_its_context_and_its_fraction_of_what_was_free() -> None:
    """``_profile_available_bytes``: the fraction applies to the memory free before loading, so an SGLang
    process holds its 546,534,588 B (fitted default) plus int((85,027,979,264 − 546,534,588) × 0.8) =
    67,585,155,740 B: 68,131,690,328 B, the memory target the ledger holds back from; the ledger's terms
    then add up to the device total with a remainder under one token (131,072 B)."""
    plan = _plan("sglang", 0.8, held=None)
    assert plan.budget.target == SGLANG_HELD + int((TOTAL - SGLANG_HELD) * 0.8) == 68_131_690_328
    (alone,) = share([("s", plan)]).instances
    assert alone.held_bytes == 68_131_690_328
    unallocated = next(t for t in plan.ledger if t.name == "unallocated")
    assert 0 <= unallocated.bytes < 131_072
