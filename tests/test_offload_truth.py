"""kvplan's offload tiers against vLLM 0.33's and LMCache 0.5.6's own sizing code, run on CPU by
``tools/offload_truth/generate.py`` (``tests/fixtures/offload/truth.json``): ``CPUOffloadingSpec``'s
``num_chunks`` and ``kv_bytes_per_chunk``, and the chunks LMCache's ``AddressManager`` places in
``max_local_cpu_size`` — every case exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.offload import OffloadQuery, tiers_of
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

TRUTH = json.loads((Path(__file__).parent / "fixtures" / "offload" / "truth.json").read_text())


def test_the_fixture_names_its_versions() -> None:
    assert TRUTH["versions"]["vllm"] == "0.33.0" and TRUTH["versions"]["lmcache"] == "0.5.6"
    assert len(TRUTH["cases"]) == 12


@pytest.mark.parametrize("case", TRUTH["cases"], ids=lambda c: f"{c['preset']}-tp{c['tp']}-{c['kv_dtype']}-"
                         f"{c['backend']}-{c['size_gib']}-{c['chunk_tokens']}")
def test_kvplan_matches_the_connectors_own_sizing(case: dict) -> None:
    plan = make_plan(load_model(case["preset"].replace("--", "/")), get_gpu("h200"),
                     FitQuery(tokens=4096, tp=case["tp"], num_gpus=case["tp"], kv_dtype=case["kv_dtype"]))
    (tier,) = tiers_of(plan, OffloadQuery(backend=case["backend"], size_gib=case["size_gib"],
                                          chunk_tokens=case["chunk_tokens"]))
    if case["backend"] == "native":
        assert plan.pool.bytes_per_block == case["worker_kv_bytes_per_block"]
        assert tier.unit_bytes == case["kv_bytes_per_chunk"]
        assert any("replicated MLA" in note for note in tier.notes) == case["replicated"]
        assert tier.ranks_per_unit == (1 if case["replicated"] else case["tp"])
    else:
        assert tier.rank_token_bytes * tier.tokens_per_unit == case["chunk_raw_bytes"]
        assert tier.unit_bytes == case["chunk_aligned_bytes"]
    assert tier.units == case["num_chunks"]


HICACHE = json.loads((Path(__file__).parent / "fixtures" / "offload" / "hicache_truth.json").read_text())


def test_the_hicache_fixture_names_its_version() -> None:
    assert HICACHE["versions"]["sglang"] == "0.5.23" and len(HICACHE["cases"]) == 7


@pytest.mark.parametrize("case", HICACHE["cases"], ids=lambda c: f"{c['layers']}x{c['heads']}x"
                         f"{c['head_dim']}-p{c['page_size']}-r{c['hicache_ratio']}-s{c['hicache_size']}-ram{c['host_ram_gib']}")
def test_kvplan_matches_sglangs_host_pool(case: dict) -> None:
    """SGLang's ``HostKVCache.__init__`` (is_dummy) and ``host_memory_budget_bytes`` on CPU
    (``tools/offload_truth/hicache.py``) against ``hicache_tier`` / ``host_allowance``."""
    from kvplan.engines.sglang.hicache import hicache_tier, host_allowance

    per_token = 2 * case["layers"] * case["heads"] * case["head_dim"] * case["dtype_bytes"]
    assert per_token == case["size_per_token"]
    tier = hicache_tier(device_tokens=case["device_tokens"], token_bytes=per_token,
                        page_size=case["page_size"], world_size=1, ratio=case["hicache_ratio"],
                        size_gb=case["hicache_size"])
    assert tier.units == case["page_num"]
    assert tier.units * tier.tokens_per_unit == case["host_tokens"]
    assert tier.allocation_bytes == case["host_bytes"]
    if case["host_ram_gib"] is not None:
        allowance = host_allowance(case["host_ram_gib"] * 1024**3, 1)
        assert allowance == case["allowance"]
        assert (tier.allocation_bytes > allowance) == case["refused"]
