"""``--kv-cache-dtype auto`` for ModelOpt checkpoints that declare a KV-cache format, against vLLM's
own ``resolve_kv_cache_dtype_string`` (``utils/torch_utils.py``) and ``_normalize_quantization_config``
of five releases (``tests/fixtures/vllm_truth/kv_dtype_auto.json``, written by
``tools/vllm_truth/kv_dtype_auto.py``), and the pool that follows from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.arch import ModelArch
from kvplan.capacity import FitQuery, fit
from kvplan.engines import get_engine
from kvplan.engines.vllm.engine import Vllm
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/kv_dtype_auto.json").read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in TRUTH["cases"]}
STARTUP = json.loads((ROOT / "tests/fixtures/vllm_truth/startup.json").read_text(encoding="utf-8"))


def _arch(case: dict[str, object]) -> ModelArch:
    arch = load_model(str(case["preset"]))
    quant = case["quantization_config"]
    if quant is None:
        return arch
    weights = arch.weights.model_copy(update={"quantization": json.dumps(quant, sort_keys=True)})
    return arch.model_copy(update={"weights": weights})


def test_fixture_scope() -> None:
    """Five releases (0.13.0 without the rule); every preset with a quantization config; fp8 and
    nvfp4 both reached, and "auto" kept for formats the function does not map."""
    assert TRUTH["vllm_versions"] == ["0.13.0", "0.14.0", "0.19.1", "0.20.0", "0.33.0"]
    assert TRUTH["has_rule"] == {"0.13.0": False, "0.14.0": True, "0.19.1": True, "0.20.0": True,
                                 "0.33.0": True}
    assert len(CASES) == 40
    latest = [c["cache_dtype"]["0.33.0"] for c in CASES.values()]
    assert (latest.count("fp8_e4m3"), latest.count("nvfp4"), latest.count("auto")) == (17, 2, 21)
    assert CASES["nvidia/Qwen3.5-122B-A10B-NVFP4"]["cache_dtype"] == {
        "0.13.0": "auto", "0.14.0": "fp8_e4m3", "0.19.1": "fp8_e4m3", "0.20.0": "fp8_e4m3",
        "0.33.0": "fp8_e4m3"}


@pytest.mark.parametrize("version", TRUTH["vllm_versions"])
@pytest.mark.parametrize("key", sorted(CASES))
def test_auto_kv_dtype_matches_vllm(key: str, version: str) -> None:
    case = CASES[key]
    record, _ = Vllm.release_for_version(version)
    engine = get_engine(f"vllm@{record.key}")
    arch = _arch(case)
    expected = case["cache_dtype"][version]
    want = engine.model_dtype(arch) if expected == "auto" else expected
    assert engine.kv_dtype(arch, "auto").name == want


def test_explicit_kv_dtype_is_kept() -> None:
    """``resolve_kv_cache_dtype_string`` returns any value but "auto" unchanged."""
    arch = load_model("nvidia/Qwen3.5-122B-A10B-NVFP4")
    assert get_engine("vllm@0.33").kv_dtype(arch, "bf16").name == "bf16"
    assert get_engine("vllm@0.33").kv_dtype(arch, "auto").name == "fp8_e4m3"


FP8_NVFP4 = [c for c in STARTUP["state_checks"]
             if c["kv_dtype"] == "fp8" and c["preset"] in CASES
             and CASES[c["preset"]]["cache_dtype"]["0.33.0"] == "fp8_e4m3" and c["max_num_seqs"] == 256]


def test_pool_cases_in_scope() -> None:
    assert len(FP8_NVFP4) == 12


@pytest.mark.parametrize("case", FP8_NVFP4, ids=[c["id"] for c in FP8_NVFP4])
def test_auto_pool_is_vllms_fp8_pool(case: dict[str, object]) -> None:
    """vLLM 0.33's own pool for the NVFP4 Qwen3.5 checkpoints with ``kv_cache_dtype`` fp8
    (``startup.json``) is the pool kvplan plans for "auto", since vLLM resolves "auto" to
    ``fp8_e4m3`` for them (the fixture above): e.g. Qwen3.5-122B-A10B-NVFP4, TP 1, 8 GiB — 167 blocks
    of 4,176 tokens, not bf16's 166 of 2,096."""
    query = FitQuery(engine="vllm@0.33", tokens=case["max_model_len"], tp=case["tp"], kv_dtype="auto",
                     kv_cache_memory_bytes=case["available_memory"],
                     max_num_batched_tokens=case["max_num_batched_tokens"],
                     async_scheduling=case["async_scheduling"], max_num_seqs=case["max_num_seqs"])
    result = fit(make_plan(load_model(str(case["preset"])), custom_gpu(80), query), search_gpus=False)
    if case["num_blocks"] is None:
        assert result.max_requests == 0
        return
    assert (result.num_blocks, result.state_blocks, result.starts) == \
        (case["num_blocks"], case["num_blocks"], case["starts"])


def test_answer_names_where_auto_came_from() -> None:
    """``fit`` says why "auto" is fp8_e4m3 (and says nothing for a model-dtype "auto")."""
    query = FitQuery(engine="vllm@0.33", tokens=32768, kv_dtype="auto")
    nvfp4 = fit(make_plan(load_model("nvidia/Qwen3.5-122B-A10B-NVFP4"), custom_gpu(141), query),
                search_gpus=False)
    assert nvfp4.kv_dtype == "fp8_e4m3"
    assert "KV dtype auto = fp8_e4m3: the checkpoint's quantization config declares its KV format " \
           "(vLLM ≥ 0.14 engine/arg_utils.py create_engine_config → utils/torch_utils.py " \
           "resolve_kv_cache_dtype_string)" in nvfp4.notes
    old = fit(make_plan(load_model("nvidia/Qwen3.5-122B-A10B-NVFP4"), custom_gpu(141),
                        query.model_copy(update={"engine": "vllm@0.13"})), search_gpus=False)
    assert old.kv_dtype == "bf16" and not any(n.startswith("KV dtype auto") for n in old.notes)
