"""SGLang 0.5.23's ``--kv-cache-dtype auto`` against its own code
(``tests/fixtures/sglang/kv_dtype_auto.json``, written by ``tools/sglang_truth/kv_dtype_auto.py``:
``ModelConfig.from_server_args``,
``get_quant_config`` and ``configure_kv_cache_dtype`` on each preset's config.json /
hf_quant_config.json and on synthetic quantization configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.arch import ModelArch
from kvplan.engines import get_engine
from kvplan.presets import load_model

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/sglang/kv_dtype_auto.json").read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in TRUTH["cases"]}
#: ``configure_kv_cache_dtype``'s torch dtype → kvplan's KV dtype name.
TORCH = {"float8_e4m3fn": "fp8_e4m3", "bfloat16": "bf16", "float16": "fp16"}
#: Known mismatches, not of the KV rule: the MiniMax-M2.5 preset's config.json sets no dtype, which
#: SGLang reads as float32 and runs in fp16 (``configs/model_config.py`` ``_get_and_verify_dtype``),
#: while kvplan's config import takes a missing dtype as bf16.
KNOWN = {"MiniMaxAI/MiniMax-M2.5": "bf16"}


def _arch(case: dict[str, object]) -> ModelArch:
    arch = load_model(str(case["preset"]))
    quant = case.get("quantization_config", case.get("hf_quant_config"))
    if quant is None:
        return arch
    weights = arch.weights.model_copy(update={"quantization": json.dumps(quant, sort_keys=True)})
    return arch.model_copy(update={"weights": weights})


def test_fixture_scope() -> None:
    assert TRUTH["sglang_version"] == "0.5.23"
    assert len(CASES) == 33 and not any("error" in c for c in CASES.values())
    dtypes = [c["sglang"]["torch_dtype"] for c in CASES.values()]
    assert (dtypes.count("float8_e4m3fn"), dtypes.count("bfloat16"), dtypes.count("float16")) == (17, 15, 1)
    classes = {c["sglang"].get("quant_config_class") for c in CASES.values()}
    assert classes == {"Fp8Config", "Mxfp4Config", "ModelOptFp4Config", "ModelOptFp8Config"}


@pytest.mark.parametrize("key", sorted(set(CASES) - set(KNOWN)))
def test_auto_kv_dtype_matches_sglang(key: str) -> None:
    case = CASES[key]
    engine = get_engine("sglang")
    assert engine.kv_dtype(_arch(case), "auto").name == TORCH[case["sglang"]["torch_dtype"]]


@pytest.mark.parametrize("key", sorted(KNOWN))
def test_known_model_dtype_mismatch(key: str) -> None:
    """Still the known mismatch (fix the config import's missing-dtype default, then move it up)."""
    case = CASES[key]
    assert case["sglang"]["torch_dtype"] == "float16" and case["sglang"]["kv_cache_quant_algo"] is None
    assert get_engine("sglang").kv_dtype(_arch(case), "auto").name == KNOWN[key]


def test_nvfp4_kv_is_not_taken_from_the_checkpoint() -> None:
    """A 4-bit KV declaration stays the model dtype in SGLang (vLLM ≥ 0.20 takes nvfp4)."""
    case = CASES["nvidia/Qwen3-32B-NVFP4|hfq-nvfp4-kv-nvfp4"]
    assert case["sglang"]["kv_cache_quant_algo"] == "NVFP4"
    assert get_engine("sglang").kv_dtype(_arch(case), "auto").name == "bf16"
