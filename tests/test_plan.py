"""The Plan: the engine resolved once at the boundary, and a memory ledger whose terms add up to the
device total, each with bytes, formula and source."""

from __future__ import annotations

import json

import pytest

import kvplan.plan as plan_module
from kvplan.capacity import FitQuery, fit
from kvplan.cli import main
from kvplan.plan import LEDGER_GROUPS, make_plan
from kvplan.presets import get_gpu, load_model

#: Llama-3.1-70B, TP 8 on H100-SXM, 8,192 tokens under vLLM v0.33 (tests/test_cli.py derives the
#: same figures term by term): every byte of one GPU.
LLAMA70_TP8 = FitQuery(tokens=8192, users=32, num_gpus=8, tp=8, engine="vllm@0.33")


def _ledger(result_ledger: list[dict[str, object]]) -> dict[str, int]:
    return {str(term["name"]): int(term["bytes"]) for term in result_ledger}  # type: ignore[call-overload]


def test_ledger_of_llama_70b_tp8_on_h100_adds_up_to_the_device_total() -> None:
    """CUDA's total 85,027,979,264 B; target ``ceil(total × 0.92)`` = 78,225,740,923 B, so 6,802,238,341 B
    are held back; weights 17,640,734,720 B + vLLM's RoPE cache 131,072 × 128 × 2 B = 33,554,432 B
    (helper vllmrope) = 17,674,289,152 B; reserve 1,313,341,440 + 590,558,003 + 531,261,849 =
    2,435,161,292 B; KV budget 58,116,290,479 B → 88,678 blocks × 655,360 B (80 layers × 16 tokens ×
    1 KV head × 128 × 2 × 2 B) = 58,116,014,080 B allocated, 276,399 B left (88,729 blocks and
    407,471 B before the cache)."""
    result = fit(make_plan(load_model("llama-3.1-70b"), get_gpu("h100-sxm"), LLAMA70_TP8))
    ledger = _ledger(result.ledger)
    assert ledger["device total"] == 85_027_979_264
    assert ledger["held back by the memory target"] == 6_802_238_341
    assert sum(v for k, v in ledger.items() if k.startswith("weights: ")) == 17_674_289_152
    assert ledger["weights: rope_cache"] == 33_554_432
    assert ledger["weights: mlp"] == 14_092_861_440
    assert (ledger["reserve: activation_peak"], ledger["reserve: non_torch"],
            ledger["reserve: cuda_graphs"]) == (1_313_341_440, 590_558_003, 531_261_849)
    assert ledger["KV cache pool"] == 88_678 * 655_360 == 58_116_014_080
    assert ledger["unallocated"] == 276_399 == result.kv_budget_bytes - ledger["KV cache pool"]
    assert sum(v for k, v in ledger.items() if k != "device total") == ledger["device total"]
    sources = {str(t["name"]): str(t["source"]) for t in result.ledger}
    assert "gpu_model_runner.py" in sources["reserve: activation_peak"]
    assert "88,678 blocks × 655,360 B per block" in next(
        str(t["formula"]) for t in result.ledger if t["name"] == "KV cache pool")


@pytest.mark.parametrize(("model", "gpu", "query"), [
    ("llama-3.1-8b", "l4", FitQuery(tokens=4096, engine="vllm@0.19")),
    ("gemma-3-27b", "h100-sxm", FitQuery(tokens=32768, engine="sglang")),
    ("gpt-oss-120b", "h200", FitQuery(tokens=8192, engine="trtllm@main")),
    ("deepseek-v3", "h200", FitQuery(tokens=4096, tp=8, num_gpus=8, engine="vllm@0.33")),
    ("qwen3-30b-a3b", "a100-80gb-sxm", FitQuery(tokens=2048, tp=2, pp=2, engine="vllm@0.33",
                                                   reserve_gib=3.0)),
    ("llama-3.1-8b", "h100-sxm", FitQuery(tokens=4096, engine="hf")),
])
def test_every_ledger_adds_up_and_names_its_sources(model: str, gpu: str, query: FitQuery) -> None:
    """Whatever the engine, release, layout or override: the terms but the total add up to CUDA's
    total, each has a formula and a source, and the KV pool never exceeds the KV budget."""
    result = fit(make_plan(load_model(model), get_gpu(gpu), query), search_gpus=False)
    terms = result.ledger
    assert {str(t["group"]) for t in terms} <= set(LEDGER_GROUPS)
    summed = sum(int(t["bytes"]) for t in terms  # type: ignore[call-overload]
                 if t["group"] in {"held back", "weights", "reserve", "kv", "free"})
    assert summed == result.gpu_capacity_bytes
    assert all(t["formula"] and t["source"] for t in terms)
    pool = next(int(t["bytes"]) for t in terms if t["group"] == "kv")  # type: ignore[call-overload]
    assert 0 <= pool <= max(result.kv_budget_bytes, 0)


def test_the_engine_is_looked_up_once_per_question(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make_plan`` resolves the engine id; ``fit`` — with its layout search for the smallest change —
    and the neighbouring questions of ``Plan.vary`` reuse that engine object."""
    calls: list[str] = []
    real = plan_module.get_engine

    def counted(engine_id: str) -> object:
        calls.append(engine_id)
        return real(engine_id)

    monkeypatch.setattr(plan_module, "get_engine", counted)
    plan = make_plan(load_model("llama-3.1-70b"), get_gpu("h100-sxm"), FitQuery(tokens=32768, users=64,
                                                                                engine="vllm@0.19"))
    result = fit(plan)
    assert not result.fits and result.suggestion  # the search for a larger layout ran
    assert [fit(plan.vary(kv_dtype=d), search_gpus=False).engine_release for d in ("bf16", "fp8")] == \
        ["vLLM v0.18–v0.19"] * 2
    assert plan.vary(tp=2, num_gpus=2).engine is plan.engine
    assert calls == ["vllm@0.19"]
    assert plan.vary(engine="sglang").engine.id == "sglang"
    assert calls == ["vllm@0.19", "sglang"]


def test_fit_json_carries_the_ledger(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--num-gpus", "8", "--tp", "8",
                 "--engine-version", "0.33",
                 "--tokens", "8192", "--users", "32", "--json"]) == 0
    ledger = _ledger(json.loads(capsys.readouterr().out)["ledger"])
    # with the RoPE cache
    assert ledger["KV cache pool"] == 58_116_014_080 and ledger["unallocated"] == 276_399


def test_a_question_without_an_accelerator_says_so() -> None:
    from kvplan.errors import KVPlanError

    plan = make_plan(load_model("llama-3.1-8b"), None, FitQuery())
    assert plan.specs.token_bytes == 131_072  # 32 layers × 8 KV heads × 128 × 2 × 2 B: no GPU needed
    with pytest.raises(KVPlanError, match="unknown accelerator|GPU"):
        _ = plan.budget
