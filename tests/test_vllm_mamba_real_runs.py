"""kvplan's Mamba state-block ceiling against public runs it was not built from
(``tests/fixtures/vllm_truth/mamba_real_runs.json``, each with its source and quote). The model the
runs name (Qwen3.8-27B) has no reachable config.json: Qwen3.5-27B stands in, with the layer layout
the report gives (48 Gated DeltaNet + 16 attention layers); the weight format is FP8 by assumption.
A miss is asserted as it stands, so a change in kvplan's number is seen, not fitted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.engines.vllm.engine import Vllm
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, get_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
RUNS = {r["id"]: r for r in json.loads(
    (ROOT / "tests/fixtures/vllm_truth/mamba_real_runs.json").read_text(encoding="utf-8"))["runs"]}
GIB = 1 << 30


def _record(version: str) -> str:
    record, _ = Vllm.release_for_version(version)
    return f"vllm@{record.key}"


def test_fixture_scope() -> None:
    assert len(RUNS) == 7 and sum(r["status"] == "compared" for r in RUNS.values()) == 2
    assert all(r["source"].startswith("https://github.com/") and r["quote"] for r in RUNS.values())
    assert all(r.get("missing") for r in RUNS.values() if r["status"] == "recorded")


@pytest.mark.parametrize("pool_gib", [3.855, 3.86, 3.8649])
def test_rx7900xt_pool_gives_the_logged_blocks_tokens_and_refusal(pool_gib: float) -> None:
    """vLLM 0.23.1 (record v0.21–v0.24), TP 2, 122,633 tokens: the logged pool "3.86 GiB, 123 399
    tokens" (any value its rounding allows) holds 161 blocks of 784 tokens × 25,690,112 B; a request
    takes cdiv(122,633, 784) = 157 attention blocks + 3 GDN groups × 1 state page = 160 — prefix
    caching off, the release's default for hybrids (``is_prefix_caching_supported``, on from v0.26) —
    so int(161 / 160 × 122,633) = 123,399 tokens, the logged number. The default max_num_seqs of a
    20 GB device is 256 > 161: the quoted refusal."""
    run = RUNS["49064-rx7900xt-tp2-v0.23.1"]
    fields = dict(engine=_record(run["vllm_version"]), tokens=run["max_model_len"], tp=run["tp"],
                  num_gpus=run["tp"], kv_cache_memory_bytes=int(pool_gib * GIB),
                  weight_dtype=run["kvplan_weight_dtype"])
    result = fit(make_plan(load_model(run["kvplan_model"]), custom_gpu(20), FitQuery(**fields)),
                 search_gpus=False)
    assert (result.num_blocks, result.block_size, result.bytes_per_block, result.blocks_per_request) == \
        (run["mamba_blocks"], 784, 25_690_112, 160)
    assert result.kv_pool_tokens == run["kv_pool_tokens"]
    assert (result.max_num_seqs, result.starts) == (256, False)
    assert run["error"] in result.start_reason
    on = fit(make_plan(load_model(run["kvplan_model"]), custom_gpu(20),
                       FitQuery(**fields, enable_prefix_caching=True)), search_gpus=False)
    assert (on.blocks_per_request, on.kv_pool_tokens) == (163, 121_128)  # "align": not the log


def test_h100_v0_28_block_count_is_a_reported_miss() -> None:
    """vLLM 0.28.0 on an H100 80GB at 132,000 tokens and 0.90: the run printed 969 blocks; kvplan
    predicts 869 from the catalogue H100-SXM (Qwen3.5-27B in FP8 standing in: 26.6 GiB of weights,
    3.1 GiB of reserve with the encoder cache vLLM profiles for its vision tower, 41.7 GiB of KV) —
    100 blocks (10 %) fewer, about 4.7 GiB of KV memory it does not see (the real checkpoint's
    weights are not known). Both refuse the default 1,024. (872 before the Qwen3.5 presets had a
    processor, i.e. before the mm_encoder_cache term applied to them.)"""
    run = RUNS["49064-h100-v0.28.0"]
    query = FitQuery(engine=_record(run["vllm_version"]), tokens=run["max_model_len"],
                     gpu_util=run["gpu_memory_utilization"], weight_dtype=run["kvplan_weight_dtype"])
    result = fit(make_plan(load_model(run["kvplan_model"]), get_gpu("h100-sxm"), query), search_gpus=False)
    assert (result.num_blocks, run["mamba_blocks"]) == (869, 969)
    assert (result.max_num_seqs, result.starts) == (1024, False)
    assert "max_num_seqs (1024) exceeds available Mamba cache blocks (869)" in result.start_reason
