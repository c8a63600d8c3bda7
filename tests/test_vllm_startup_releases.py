"""The start-up check of ``max_num_seqs`` against a hybrid's Mamba state blocks, release by release,
against each release's own code (``tests/fixtures/vllm_truth/startup_releases.json``, written by
``tools/vllm_truth/startup_releases.py`` from v0.11.0 … v0.33.0's ``config/compilation.py``):
v0.20.0+ raise "max_num_seqs (N) exceeds available Mamba cache blocks (M)"; v0.18–v0.19 cap the
capture sizes (``adjust_cudagraph_sizes_for_mamba_cache``) and start; v0.11–v0.17 have no check (a
FULL decode capture above the blocks meets ``causal_conv1d_update``'s assert)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines import get_engine
from kvplan.engines.settings import EngineSettings
from kvplan.engines.vllm.engine import Vllm
from kvplan.engines.vllm.startup import vllm_startup_check
from kvplan.presets import load_model

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/startup_releases.json").read_text(encoding="utf-8"))
CASES = {f"{c['version']}|{c['num_blocks']}|{c['max_num_seqs']}": c for c in TRUTH["cases"]}
RULE = {"raise": "raise", "cap": "cap", "none": "assert"}


def test_fixture_scope() -> None:
    """Ten releases, one per record from v0.11; each kind of check; refusals and starts."""
    assert len(TRUTH["releases"]) == 10 and len(CASES) == 120
    by_release = {c["version"]: c["check"] for c in CASES.values()}
    assert by_release == {"0.11.0": "none", "0.13.0": "none", "0.17.1": "none", "0.19.1": "cap",
                          "0.20.0": "raise", "0.24.0": "raise", "0.27.0": "raise", "0.29.0": "raise",
                          "0.32.0": "raise", "0.33.0": "raise"}
    assert {c["starts"] for c in CASES.values() if c["check"] == "raise"} == {True, False}
    assert all(c["conv_assert"] for c in CASES.values())


@pytest.mark.parametrize("key", sorted(CASES))
def test_release_check_matches_its_code(key: str) -> None:
    case = CASES[key]
    engine = get_engine(f"vllm@{case['record']}")
    assert isinstance(engine, Vllm)
    assert engine.record.state_block_check == RULE[case["check"]]
    check = vllm_startup_check(engine.record, engine.label, load_model("jamba-1.5-mini"), EngineSettings(),
                               case["num_blocks"], case["max_num_seqs"], TRUTH["max_num_batched_tokens"],
                               blackwell=False, cap_source="set")
    if case["check"] == "raise":
        assert check.starts == case["starts"]
        quoted = f"max_num_seqs ({case['max_num_seqs']}) exceeds available Mamba cache blocks " \
                 f"({case['num_blocks']})"
        assert case["starts"] or (case["error"].startswith(quoted) and quoted in check.reason)
    elif case["check"] == "cap":
        assert check.starts and list(check.capture_sizes) == case["kept_sizes"]
        assert check.action == ("clamps" if case["kept_sizes"] != case["capture_sizes"] else "ok")
    else:  # no check: the largest FULL decode capture (≤ max_num_seqs) against the blocks
        decode = [s for s in case["capture_sizes"] if s <= case["max_num_seqs"]]
        assert check.starts == (not decode or decode[-1] <= case["num_blocks"])
