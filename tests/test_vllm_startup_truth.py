"""kvplan's start-up check, default ``max_num_seqs`` and MoE split under data parallelism against
vLLM 0.33's own code run on CPU (``tests/fixtures/vllm_truth/startup.json``, written by
``tools/vllm_truth/startup.py``): ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` on vLLM's
own ``KVCacheConfig``, ``EngineArgs.get_batch_defaults`` per catalogue GPU, and
``FusedMoEParallelConfig.make`` / ``determine_expert_map`` per DP × TP layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.engines import get_engine
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, get_gpu, load_model
from kvplan.weights import weights_per_gpu

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/startup.json").read_text(encoding="utf-8"))
CHECKS = {f"{c['id']}|seqs{c['max_num_seqs']}": c for c in TRUTH["state_checks"]}
DP_POOLS = {c["id"]: c for c in TRUTH["dp_rank_pools"]}
#: The Qwen3.5 / Qwen3.6 hybrids (GDN + full attention, SSM state in the config's ``mamba_ssm_dtype``).
QWEN35 = {c["preset"] for c in TRUTH["state_checks"] if "Qwen3.5" in c["id"] or "Qwen3.6" in c["id"]}
EXPERT_MODELS = {256: "deepseek-v3", 384: "kimi-k2", 160: "deepseek-v2"}


def test_fixture_scope() -> None:
    """vLLM 0.33.0; ≥ 20 block-count cases, some refused and some started; every CUDA GPU."""
    assert TRUTH["vllm_version"] == "0.33.0"
    assert len(CHECKS) == 316
    assert {c["starts"] for c in CHECKS.values()} == {True, False}
    assert len(TRUTH["default_max_num_seqs"]) >= 10 and len(TRUTH["moe_layouts"]) == 30
    assert len(QWEN35) == 7 and len(DP_POOLS) == 30
    assert sum(c["num_blocks"] is None for c in CHECKS.values()) == 4


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_state_check_matches_vllm(key: str) -> None:
    case = CHECKS[key]
    query = FitQuery(engine="vllm@0.33", tokens=case["max_model_len"], tp=case["tp"],
                     kv_dtype=case["kv_dtype"], kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], max_num_seqs=case["max_num_seqs"])
    result = fit(make_plan(load_model(case.get("preset", case["model"])), custom_gpu(80), query),
                 search_gpus=False)
    if case["num_blocks"] is None:  # get_kv_cache_configs refuses: one request does not fit
        assert case["error"].startswith("To serve at least one request with the model's max seq len")
        assert not result.fits and result.max_requests == 0
        return
    assert (result.num_blocks, result.state_blocks, result.starts) == \
        (case["num_blocks"], case["num_blocks"], case["starts"])
    if not case["starts"]:
        quoted = f"max_num_seqs ({case['max_num_seqs']}) exceeds available Mamba cache blocks " \
                 f"({case['num_blocks']})"
        assert case["error"].startswith(quoted) and quoted in result.start_reason


@pytest.mark.parametrize("key", sorted(DP_POOLS))
def test_dp_rank_pool_matches_vllm(key: str) -> None:
    """One DP attention rank of DeepSeek-V3 / Kimi-K2 (MLA, FlashMLA's 64-token block): its
    ``get_kv_cache_configs`` pool at the attention TP size, as kvplan's per-rank pool."""
    case = DP_POOLS[key]
    query = FitQuery(engine="vllm@0.33", tokens=case["max_model_len"], tp=case["tp"], dp=case["dp"],
                     num_gpus=case["dp"] * case["tp"], kv_dtype=case["kv_dtype"],
                     kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], block_size=case["mla_block_size"])
    result = fit(make_plan(load_model(case["preset"]), custom_gpu(80), query), search_gpus=False)
    assert (result.num_blocks, result.bytes_per_block, result.kv_pool_tokens, result.max_concurrency) \
        == (case["num_blocks"], case["bytes_per_block"], case["kv_cache_size_tokens"],
            case["max_concurrency"])
    assert (result.dp, result.state_blocks, result.starts) == (case["dp"], None, True)


@pytest.mark.parametrize("gpu_id", sorted(TRUTH["default_max_num_seqs"]))
def test_default_max_num_seqs_matches_get_batch_defaults(gpu_id: str) -> None:
    engine = get_engine("vllm@0.33")
    assert engine.default_max_num_seqs(get_gpu(gpu_id)) == TRUTH["default_max_num_seqs"][gpu_id]


@pytest.mark.parametrize("row", TRUTH["moe_layouts"], ids=lambda r: (
    f"E{r['experts']}-tp{r['tp']}-dp{r['dp']}-ep{int(r['enable_expert_parallel'])}"))
def test_moe_layers_span_every_dp_tp_gpu(row: dict) -> None:
    """vLLM shards the MoE layers over all ``dp × tp`` GPUs (``flatten_tp_across_dp_and_pcp``):
    as EP with ``--enable-expert-parallel`` (the fullest rank holds ``ceil(E / (dp × tp))`` experts,
    ``determine_expert_map``), as TP without. kvplan's data-parallel weights hold the routed
    experts of a ``dp × tp``-way split: the fullest rank's share of the model's expert bytes."""
    gpus = row["dp"] * row["tp"]
    if row["enable_expert_parallel"]:
        assert (row["moe_tp_size"], row["ep_size"]) == (1, gpus)
    else:
        assert (row["moe_tp_size"], row["ep_size"], row["max_local_experts"]) == (gpus, 1, row["experts"])
        return
    arch = load_model(EXPERT_MODELS[row["experts"]])
    assert arch.moe is not None and arch.moe.n_experts == row["experts"]
    whole = weights_per_gpu(arch, None, 1, 1, 1).heaviest["experts"]
    plan = make_plan(arch, get_gpu("h200"), FitQuery(engine="vllm@0.33", tp=row["tp"], dp=row["dp"],
                                                     num_gpus=gpus))
    assert plan.weights.heaviest["experts"] * row["experts"] == whole * row["max_local_experts"]
