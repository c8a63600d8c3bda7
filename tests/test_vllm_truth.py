"""kvplan against vLLM's own KV-cache planning, case by case (``tests/fixtures/vllm_truth/cases.json``).

The fixture is written by ``tools/vllm_truth/generate.py``, which runs vLLM's
``get_global_kv_cache_groups`` / ``get_kv_cache_configs`` (``vllm/v1/core/kv_cache_planning.py``)
and ``get_kv_cache_capacity`` (``vllm/v1/core/kv_cache_utils.py``) with a given available KV
memory; no GPU, no network. Here ``kvplan.capacity.fit`` gets the same memory
(``kv_cache_memory_bytes``), length, TP/PP, KV dtype, hybrid-manager switch,
``max_num_batched_tokens`` and async scheduling, and must give the same block count, bytes per
block, blocks per request, "GPU KV cache size" tokens and maximum concurrency — exactly.

Known disagreements are listed in ``KNOWN_MISMATCH`` (case id → the vLLM code that decides it);
such a case must still disagree, so a fix fails here until its entries are deleted.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from kvplan.arch import ModelArch
from kvplan.capacity import FitQuery, fit
from kvplan.config_import import parse_config
from kvplan.engines import get_engine
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/cases.json").read_text(encoding="utf-8"))
CASES = {case["id"]: case for case in TRUTH["cases"]}
GPU = custom_gpu(80)  # capacity is irrelevant: the KV memory is given

#: Cases where kvplan and vLLM 0.33 disagree (case id → the vLLM code that decides it). The four
#: classes the fixture first showed (all-sliding models with the hybrid manager off, Llama 4's
#: default hybrid manager, float32 configs with kv auto, pp without async scheduling) are fixed.
KNOWN_MISMATCH: dict[str, str] = {}


@cache
def arch_of(model: str) -> ModelArch:
    """The model of a case: a preset by id, or a fixture config with the generator's overrides."""
    entry = TRUTH["models"][model]
    if entry["config_path"].startswith("presets/") and not entry.get("config_overrides"):
        return load_model(Path(entry["config_path"]).stem)
    raw = json.loads((ROOT / entry["config_path"]).read_text(encoding="utf-8"))
    raw = {**raw, **entry.get("config_overrides", {})}
    return parse_config({k: v for k, v in raw.items() if v is not None}, name=model,
                        params_total=10**9)


def kvplan_answer(case: dict) -> dict:
    query = FitQuery(engine="vllm", tokens=case["max_model_len"], tp=case["tp"],
                     pp=case.get("pp", 1), kv_dtype=case["kv_dtype"],
                     kv_cache_memory_bytes=case["available_memory"],
                     hybrid_manager=case["hybrid_manager"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"],
                     block_size=case.get("mla_block_size"))
    result = fit(make_plan(arch_of(case["model"]), GPU, query), search_gpus=False)
    return {"num_blocks": result.num_blocks, "bytes_per_block": result.bytes_per_block,
            "blocks_per_request": result.blocks_per_request,
            "kv_cache_size_tokens": result.kv_pool_tokens,
            "max_concurrency": result.max_concurrency,
            "log": ", ".join(get_engine(result.engine).log_lines(result))}


def vllm_answer(case: dict) -> dict:
    """The case's numbers and the capacity line as v0.33 logs it (``update_kv_cache_capacity``)."""
    return {key: case[key] for key in ("num_blocks", "bytes_per_block", "blocks_per_request",
                                       "kv_cache_size_tokens", "max_concurrency", "log")}


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case_matches_vllm(case_id: str) -> None:
    """Every vLLM number, exactly; a known mismatch must still be one (delete it when fixed)."""
    case = CASES[case_id]
    if case_id in KNOWN_MISMATCH:
        assert kvplan_answer(case) != vllm_answer(case), (
            f"fixed? delete KNOWN_MISMATCH[{case_id!r}]")
    else:
        assert kvplan_answer(case) == vllm_answer(case)


def test_fixture_scope() -> None:
    """≥ 60 cases from vLLM 0.33, every mismatch entry names a real case."""
    assert TRUTH["vllm_version"] == "0.33.0"
    assert len(CASES) == 82 and not TRUTH["refused"]
    assert set(KNOWN_MISMATCH) <= set(CASES)
    assert {c["model"] for c in CASES.values()} == set(TRUTH["models"])


def test_issue_14_bugs_are_in_the_truth() -> None:
    """The three bugs of issue #14, as vLLM 0.33 decided them in the fixture.

    1. Llama 4 Scout (TP 8, 48 layers: 36 chunked + 12 NoPE full, 8 KV heads → 1 per rank,
       head 128, bf16): the hybrid manager is on by default → 4 groups of 12 layers; a block is
       12 × 16 × 1 × 2 × 128 × 2 B = 98,304 B; at L = 32,768 a request takes
       3 × cdiv(min(8192 + 2 × 8192, 32768), 16) + 32768 / 16 = 3 × 1536 + 2048 = 6,656 blocks.
    2. Qwen2 config with float32 (either key): KV auto → bfloat16: 28 layers × 16 × 4 heads ×
       2 × 128 × 2 B = 917,504 B a block.
    3. Mistral-7B v0.1, hybrid manager off: one SlidingWindowSpec group; at L = 4,096 a request
       takes cdiv(min(4095 + 16384, 4096), 16) + 1 = 257 blocks.
    """
    scout = CASES["llama-4-scout|tp8|auto|L32768|mem61540000000|hmaNone|mnbt8192|async1"]
    assert scout["hybrid_manager_effective"] is True
    assert [(g["type"], g["layers"]) for g in scout["groups"]] == \
        [("ChunkedLocalAttentionSpec", 12)] * 3 + [("FullAttentionSpec", 12)]
    assert scout["bytes_per_block"] == 98_304 and scout["blocks_per_request"] == 6656
    for model in ("qwen2-float32", "qwen2-float32-dtype-key"):
        case = CASES[f"{model}|tp1|auto|L32768|mem21474836480|hmaNone|mnbt8192|async1"]
        assert (case["model_dtype"], case["kv_torch_dtype"]) == ("bfloat16", "bfloat16")
        assert case["bytes_per_block"] == 917_504
    mistral = CASES["mistral-7b-v0.1|tp1|auto|L4096|mem21474836480|hmaFalse|mnbt8192|async1"]
    assert mistral["hybrid_manager_effective"] is False
    assert [(g["type"], g["layers"]) for g in mistral["groups"]] == [("SlidingWindowSpec", 32)]
    assert mistral["blocks_per_request"] == 257


def test_matching_case_by_hand() -> None:
    """One matching case re-derived: gpt-oss-20b, TP 1, bf16, L = 131,072, 20 GiB.

    24 layers (12 sliding W = 128, 12 full), 8 KV heads × 64, 2 groups of 12 →
    a block = 12 × 16 × 8 × 2 × 64 × 2 B = 393,216 B; num_blocks = 20 GiB // 393,216 = 54,613;
    a request: sliding cdiv(min(127 + 16384, L), 16) + 1 = 1033, full 131072 / 16 = 8192 →
    9,225 blocks; tokens = int(54613 / 9225 × 131072) = 775,960.
    """
    case = CASES["gpt-oss-20b|tp1|auto|L131072|mem21474836480|hmaNone|mnbt8192|async1"]
    expected = {"num_blocks": 54_613, "bytes_per_block": 393_216, "blocks_per_request": 9225,
                "kv_cache_size_tokens": 775_960, "max_concurrency": 54613 / 9225,
                "log": "GPU KV cache size: 775,960 tokens, Maximum concurrency for 131,072 tokens "
                       "per request: 5.92x"}
    assert vllm_answer(case) == expected
    assert kvplan_answer(case) == expected


HYBRID = sorted(cid for cid in CASES if CASES[cid]["model"] in {"qwen3-next-80b-a3b", "jamba-1.5-mini"})


@pytest.mark.parametrize("case_id", HYBRID)
@pytest.mark.parametrize("over", [0, 1])
def test_state_blocks_are_vllms_num_blocks_and_the_check_is_at_them(case_id: str, over: int) -> None:
    """The Mamba state blocks of the start-up check are vLLM 0.33's own ``num_blocks`` for the
    hybrid cases (``kv_cache_config.num_blocks``, from ``get_kv_cache_configs``); with
    ``max_num_seqs`` = that count vLLM starts, one more and ``resolve_cudagraph_mode_and_sizes``
    raises (``max_num_reqs > kv_cache_config.num_blocks``, ``config/compilation.py:1526``)."""
    case = CASES[case_id]
    blocks = case["num_blocks"]
    query = FitQuery(engine="vllm@0.33", tokens=case["max_model_len"], tp=case["tp"],
                     kv_dtype=case["kv_dtype"], kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], max_num_seqs=blocks + over)
    result = fit(make_plan(arch_of(case["model"]), GPU, query), search_gpus=False)
    assert (result.state_blocks, result.max_num_seqs) == (blocks, blocks + over)
    assert result.starts is (over == 0)
    assert len(HYBRID) == 7
