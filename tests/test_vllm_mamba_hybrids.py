"""Nemotron-H, Jamba and Falcon-H1 against vLLM 0.33's own cache mode, hybrid block alignment,
``get_kv_cache_configs`` and start-up check run on CPU (``tests/fixtures/vllm_truth/mamba_hybrids.json``,
written by ``tools/vllm_truth/mamba_hybrids.py``): the block size, block count, bytes per block,
logged tokens and concurrency, and whether ``max_num_seqs`` passes the Mamba state-block check —
with prefix caching on (Mamba cache mode "align") and off ("none")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvplan.capacity import FitQuery, FitResult, fit
from kvplan.config_import import parse_config
from kvplan.engines.vllm.engine import Vllm
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/mamba_hybrids.json").read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in TRUTH["cases"] if c["preset"] is not None}
FALCON = [c for c in TRUTH["cases"] if c["model"] == "falcon-h1-0.5b"]


def _assert_as_vllm(result: FitResult, case: dict[str, Any]) -> None:
    """kvplan's pool and start-up check against one case vLLM's own code produced."""
    assert (result.block_size, result.num_blocks, result.bytes_per_block, result.kv_pool_tokens) == \
        (case["block_size"], case["num_blocks"], case["bytes_per_block"], case["kv_cache_size_tokens"])
    assert result.max_concurrency == pytest.approx(case["max_concurrency"], rel=1e-12)
    assert (result.state_blocks, result.starts) == (case["num_blocks"], case["starts"])
    if not case["starts"]:
        quoted = f"max_num_seqs ({case['max_num_seqs']}) exceeds available Mamba cache blocks " \
                 f"({case['num_blocks']})"
        assert case["error"].startswith(quoted) and quoted in result.start_reason


def test_fixture_scope() -> None:
    """vLLM 0.33.0; both cache modes, refusals and starts, one refused pool; Falcon-H1 (no preset:
    its config file) compared too."""
    assert TRUTH["vllm_version"] == "0.33.0"
    assert len(TRUTH["cases"]) == 237 and len(CASES) == 189 and len(FALCON) == 48
    assert {c["mamba_cache_mode"] for c in CASES.values()} == {"align", "none"}
    assert {c["starts"] for c in CASES.values() if c["num_blocks"]} == {True, False}
    assert sum(c["num_blocks"] is None for c in CASES.values()) == 1
    # no Mamba-2 "all" mode in 0.33: prefix caching gives "align" whatever the mixer
    assert {c["mamba_cache_mode"] for c in CASES.values() if c["prefix_caching"]} == {"align"}


def _fit(case: dict):
    query = FitQuery(engine="vllm@0.33", tokens=case["max_model_len"], tp=case["tp"],
                     kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], max_num_seqs=case.get("max_num_seqs"),
                     enable_prefix_caching=case["prefix_caching"])
    return fit(make_plan(load_model(case["preset"]), custom_gpu(80), query), search_gpus=False)


@pytest.mark.parametrize("key", sorted(CASES))
def test_mamba_hybrid_pool_and_check_match_vllm(key: str) -> None:
    case = CASES[key]
    result = _fit(case)
    if case["num_blocks"] is None:  # get_kv_cache_configs: one max_model_len request does not fit
        assert case["error"].startswith("To serve at least one request with the model's max seq len")
        assert not result.fits and result.max_requests == 0
        return
    _assert_as_vllm(result, case)


def test_nemotron_h_state_layers_stay_in_the_pool() -> None:
    """Nemotron-H-56B sets no ``mamba_ssm_cache_dtype``: vLLM's hook gives float32 (v0.20.0+), and
    the 54 Mamba layers are still six groups of the pool beside the 10 attention layers (a request
    of 8,192 tokens holds 2 attention blocks of 4,128 tokens + 6 state blocks = 8)."""
    case = CASES["nemotron-h-56b|tp2|pc0|4294967296|seqs50"]
    plan = make_plan(load_model(case["preset"]), custom_gpu(80), FitQuery(
        engine="vllm@0.33", tokens=8192, tp=2, kv_cache_memory_bytes=case["available_memory"],
        enable_prefix_caching=False))
    assert [len(g["type"]) for g in case["groups"]].count(len("MambaSpec")) == 6
    assert int(plan.pool.blocks([8192])[0]) == 8 and case["max_concurrency"] == 50 / 8


FALCON_ARCH = {k: v for k, v in json.loads((ROOT / TRUTH["sources"]["falcon-h1-0.5b"]).read_text(
    encoding="utf-8")).items() if not k.startswith("_")}


@pytest.mark.parametrize("index", range(len(FALCON)))
def test_falcon_h1_pool_and_check_match_vllm(index: int) -> None:
    """Falcon-H1 runs attention and a Mamba-2 mixer in every decoder layer (``falcon_h1.py``
    ``FalconH1ParallelHybrid``): vLLM registers 72 specs, two groups of 36 (``ModelArch.
    parallel_mixers``: two entries of ``layers`` per decoder layer). At TP 1: 512 B per attention
    token (2 KV heads × 64 × 2 × 2 B), a 403,968 B state → 16 · cdiv(403,968, 16 · 512) = 800-token
    blocks, page 409,600 B; one block id is a page in each of the 36 tensors the two groups share:
    36 × 409,600 = 14,745,600 B per block. Every case of the fixture: 24 at TP 1, 24 at TP 2."""
    case = FALCON[index]
    assert [g["layers"] for g in case["groups"]] == [36, 36]
    query = FitQuery(engine="vllm@0.33", tokens=case["max_model_len"], tp=case["tp"],
                     kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], max_num_seqs=case.get("max_num_seqs"),
                     enable_prefix_caching=case["prefix_caching"])
    result = fit(make_plan(parse_config(FALCON_ARCH), custom_gpu(80), query), search_gpus=False)
    _assert_as_vllm(result, case)


#: The same grid on older releases' own code (``tools/vllm_truth/mamba_hybrids_v027.py``).
OLDER = {name: json.loads((ROOT / f"tests/fixtures/vllm_truth/mamba_hybrids_{name}.json").read_text(
    encoding="utf-8")) for name in ("v020", "v027", "v029")}
OLDER_CASES = {f"{name}|{c['id']}": (truth["vllm_version"], c) for name, truth in OLDER.items()
               for c in truth["cases"]}


#: vLLM version, checks, and the Mamba cache mode prefix caching gives these models.
OLDER_SCOPE = {"v020": ("0.20.0", 95, "all"), "v027": ("0.27.0", 95, "all"), "v029": ("0.29.0", 96, "align")}


@pytest.mark.parametrize("name", sorted(OLDER))
def test_older_fixture_scope(name: str) -> None:
    """vLLM 0.20.0 and 0.27.0: "all" for the ``SupportsMambaPrefixCaching`` models with prefix
    caching; 0.29.0: "align" (``MambaModelConfig`` from 0.28.0); "none" without; refusals and starts."""
    truth = OLDER[name]
    cases = truth["cases"]
    version, count, mode = OLDER_SCOPE[name]
    assert (truth["vllm_version"], len(cases)) == (version, count)
    assert {(c["prefix_caching"], c["mamba_cache_mode"]) for c in cases} == {(True, mode), (False, "none")}
    assert {c["starts"] for c in cases} == {True, False}
    # Jamba (Mamba-1, no chunk size): "all" aligns the block to get_mamba_chunk_size's 2,048
    jamba = {c["block_size"] for c in cases if c["model"] == "jamba-1.5-mini" and c["prefix_caching"]}
    assert jamba == ({2048} if mode == "all" else {80})


@pytest.mark.parametrize("key", sorted(OLDER_CASES))
def test_older_release_mamba_hybrid_pool_and_check_match_vllm(key: str) -> None:
    """The "all" mode (a state page per block of a chunk-aligned block), the logged tokens (0.20.0:
    ``num_blocks // groups × block``) and the raise, as vLLM 0.20.0 / 0.27.0 / 0.29.0 run them."""
    version, case = OLDER_CASES[key]
    record, _ = Vllm.release_for_version(version)
    query = FitQuery(engine=f"vllm@{record.key}", tokens=case["max_model_len"], tp=case["tp"],
                     kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], max_num_seqs=case["max_num_seqs"],
                     enable_prefix_caching=case["prefix_caching"])
    result = fit(make_plan(load_model(case["preset"]), custom_gpu(80), query), search_gpus=False)
    _assert_as_vllm(result, case)
