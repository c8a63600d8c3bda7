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
