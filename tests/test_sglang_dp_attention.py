"""SGLang 0.5.23's own per-rank pool and request cap under DP attention for DeepSeek-V3 and Kimi-K2
(``tests/fixtures/sglang/dp_attention.json``, ``tools/sglang_truth/dp_attention.py``:
``--tp T --enable-dp-attention --dp-size D`` → attention TP ``T / D``, one rank's MLA pool
``max_total_num_tokens`` and the server's ``max_running_requests``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.engines import get_engine
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "tests/fixtures/sglang/dp_attention.json").read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in DATA["cases"]}


def _dp(case: dict) -> int:
    args = case["args"]
    return int(args[args.index("--dp-size") + 1])


def _gpu():
    """The generator's device stub: the catalogue H100 with its 81,559 MiB CUDA total."""
    stub = DATA["device_stub"]
    gpu = get_gpu("h100-sxm")
    return gpu.model_copy(update={"cuda_total_mib": stub["capacity_mib"],
                                  "status": {**gpu.status, "cuda_total": "fixture stub"}})


def test_fixture_scope() -> None:
    assert DATA["sglang_version"] == "0.5.23" and len(CASES) == 40
    assert not any("error" in c for c in CASES.values())
    assert {(c["tp"], _dp(c)) for c in CASES.values()} == {(8, 8), (8, 4), (8, 2), (16, 16), (16, 8)}
    assert len({c["sglang"]["max_running_requests"] for c in CASES.values()}) > 1


@pytest.mark.parametrize("key", sorted(CASES))
def test_rank_pool_and_cap_match_sglang(key: str) -> None:
    case = CASES[key]
    sg, dp = case["sglang"], _dp(case)
    query = FitQuery(engine="sglang", tokens=sg["context_len"], tp=case["tp"] // dp, dp=dp,
                     num_gpus=case["tp"], kv_dtype=case["kv_cache_dtype"],
                     kv_cache_memory_bytes=case["available_bytes"])
    result = fit(make_plan(load_model(case["model"]), _gpu(), query), search_gpus=False)
    assert (result.kv_pool_tokens, result.max_num_seqs, result.dp) == \
        (sg["max_total_num_tokens"], sg["max_running_requests"], dp)
    assert get_engine("sglang").dp_flags(dp, case["tp"] // dp).startswith(
        f"--enable-dp-attention --dp {dp} --tp {case['tp']}")
