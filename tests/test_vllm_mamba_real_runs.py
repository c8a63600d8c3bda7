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
    predicts 866 from the catalogue H100-SXM (Qwen3.5-27B in FP8 standing in: 26.7 GiB of weights,
    3.1 GiB of reserve with the encoder cache vLLM profiles for its vision tower, 41.5 GiB of KV) —
    103 blocks (11 %) fewer, about 4.9 GiB of KV memory it does not see (the real checkpoint's
    weights are not known). Both refuse the default 1,024. (872 before the Qwen3.5 presets had a
    processor, i.e. before the mm_encoder_cache term applied to them; 869 before vLLM's MRoPE cos/sin
    cache joined the weights: 4 × 262,144 positions × 64 rotary dims × 2 B = 134,217,728 B, v0.11+
    ``mrope.py``, 3 blocks of 51,380,224 B.)"""
    run = RUNS["49064-h100-v0.28.0"]
    query = FitQuery(engine=_record(run["vllm_version"]), tokens=run["max_model_len"],
                     gpu_util=run["gpu_memory_utilization"], weight_dtype=run["kvplan_weight_dtype"])
    result = fit(make_plan(load_model(run["kvplan_model"]), get_gpu("h100-sxm"), query), search_gpus=False)
    assert (result.num_blocks, run["mamba_blocks"]) == (866, 969)
    assert (result.max_num_seqs, result.starts) == (1024, False)
    assert "max_num_seqs (1024) exceeds available Mamba cache blocks (866)" in result.start_reason


def test_both_runs_say_the_stand_in_holds_more_memory_than_the_checkpoint_that_ran() -> None:
    """Issue #28's miss, traced: what the H100 run lacks is not an engine term kvplan leaves out.

    * H100, v0.28.0: 969 blocks need ≥ 969 × 51,380,224 = 49,787,437,056 B of KV budget; kvplan has
      44,542,381,916 B (ceil(85,027,979,264 × 0.9) = 76,525,181,338 − weights 28,586,220,000 − the
      MRoPE cos/sin cache 134,217,728 − reserve 3,262,361,694): 5,245,055,140 B (4.88 GiB) short
      (5,110,837,412 before the cache joined the weights).
    * Text only does not close it: ``--limit-mm-per-prompt`` 0 drops the encoder-cache term (one
      16,384-token item × 5,120 × 2 B = 167,772,160 B, v0.28 ``compute_mm_encoder_budget``) and
      the vision tower's 921,460,192 B of weights (``_mark_tower_model``, read in 0.15.0–0.33.0:
      ``VllmRelease.mm_skip_towers_at_zero``; 872 blocks when it was read for v0.33 only) for 888
      blocks (890 before the RoPE cache), still 81 short of 969, and the report names no such flag.
    * The 2 × RX 7900 XT run of "the same checkpoint" logged its pool: 3.86 GiB per GPU. Planned
      from its settings alone (v0.23.1, TP 2, 0.85 of 20 GiB, 122,633 tokens), kvplan leaves
      1,895,693,764 B — 2,248,949,676 B (2.09 GiB) per GPU less than the log, with a different
      reserve (256 sequences, TP 2; 2,029,911,492 and 2,114,731,948 B before the unsplit 134,217,728
      B MRoPE cache). Both runs point at kvplan's weights for the stand-in
      (Qwen3.5-27B in FP8: 28,586,220,000 B; 14,432,626,032 B per GPU at TP 2 with the cache) being ≈ 4–5 GiB
      more than the Qwen3.8-27B checkpoint that ran, whose format the reports do not give."""
    rx = RUNS["49064-rx7900xt-tp2-v0.23.1"]
    planned = fit(make_plan(load_model(rx["kvplan_model"]), custom_gpu(20), FitQuery(
        engine=_record(rx["vllm_version"]), tokens=rx["max_model_len"], tp=rx["tp"],
        num_gpus=rx["tp"], gpu_util=rx["gpu_memory_utilization"],
        weight_dtype=rx["kvplan_weight_dtype"])), search_gpus=False)
    assert (planned.weights_bytes, planned.kv_budget_bytes) == (14_432_626_032, 1_895_693_764)
    assert int(rx["kv_pool_gib"] * GIB) - planned.kv_budget_bytes == 2_248_949_676
    h100 = RUNS["49064-h100-v0.28.0"]
    base = dict(engine=_record(h100["vllm_version"]), tokens=h100["max_model_len"],
                gpu_util=h100["gpu_memory_utilization"], weight_dtype=h100["kvplan_weight_dtype"])
    result = fit(make_plan(load_model(h100["kvplan_model"]), get_gpu("h100-sxm"), FitQuery(**base)),
                 search_gpus=False)
    assert h100["mamba_blocks"] * result.bytes_per_block - result.kv_budget_bytes == 5_245_055_140
    text_only = fit(make_plan(load_model(h100["kvplan_model"]), get_gpu("h100-sxm"),
                              FitQuery(**base, limit_mm_per_prompt=0)), search_gpus=False)
    # + the 134,217,728 B MRoPE cache
    assert (text_only.num_blocks, text_only.weights_bytes) == (888, 27_798_977_536)
