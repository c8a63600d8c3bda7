"""TensorRT-LLM's KV dtype ``auto`` for checkpoints declaring KV quantization, hand-derived from its
source (TensorRT-LLM cannot run here, ``tools/trtllm_truth/generate.py``): ``_torch/model_config.py``
``ModelConfig.from_pretrained`` → ``load_modelopt_quant_config`` (``hf_quant_config.json``'s
``quantization.kv_cache_quant_algo``) or, on main, ``load_hf_quant_config`` →
``quantization/modelopt_config.py`` (2edf354d) ``read_modelopt_quant_config`` (a flat ModelOpt
config.json: ``kv_cache_scheme`` ``(float, 8)`` FP8, ``(float, 4)`` NVFP4, ``(int, 8)`` INT8);
``resource_manager.py`` ``get_cache_size_per_token`` sizes FP8 at 1 byte, NVFP4 at
``ceil(x/2) + ceil(x/16)`` and asserts on any other quantized KV."""

from __future__ import annotations

import json

import pytest

from kvplan.arch import ModelArch
from kvplan.engines import get_engine
from kvplan.errors import KVPlanError
from kvplan.presets import load_model


def _with(preset: str, quant: dict[str, object]) -> ModelArch:
    arch = load_model(preset)
    weights = arch.weights.model_copy(update={"quantization": json.dumps(quant, sort_keys=True)})
    return arch.model_copy(update={"weights": weights})


@pytest.mark.parametrize(("preset", "v1_1", "main"), [
    # hf_quant_config.json, quantization.kv_cache_quant_algo "FP8": both releases
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8_e4m3", "fp8_e4m3"),
    ("nvidia/Qwen3-32B-NVFP4", "fp8_e4m3", "fp8_e4m3"),
    ("nvidia/DeepSeek-V3.1-NVFP4", "fp8_e4m3", "fp8_e4m3"),
    # hf_quant_config.json with kv_cache_quant_algo null: the model dtype
    ("nvidia/DeepSeek-V3-0324-NVFP4", "bf16", "bf16"),
    # flat config.json (quant_method modelopt, kv_cache_scheme float 8): main only
    ("nvidia/Qwen3.5-122B-A10B-NVFP4", "bf16", "fp8_e4m3"),
    ("nvidia/Gemma-4-31B-IT-NVFP4", "bf16", "fp8_e4m3"),
    # no KV declaration (fp8 blocks, MXFP4, none)
    ("deepseek-v3", "bf16", "bf16"),
    ("gpt-oss-20b", "bf16", "bf16"),
    ("llama-3.1-8b", "bf16", "bf16"),
])
def test_presets(preset: str, v1_1: str, main: str) -> None:
    arch = load_model(preset)
    assert get_engine("trtllm@1.1").kv_dtype(arch, "auto").name == v1_1
    assert get_engine("trtllm@main").kv_dtype(arch, "auto").name == main


@pytest.mark.parametrize(("quant", "main"), [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4",
      "kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "float"}}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_scheme": "nvfp4"}, "nvfp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": {"num_bits": 8, "type": "float",
                                                                           "dynamic": True}}, "fp8_e4m3"),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}, "fp8_e4m3"),
    ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
                                                         "kv_cache_quant_algo": "NVFP4"}}, "nvfp4"),
    ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
                                                         "kv_cache_quant_algo": "none"}}, "bf16"),
    ({"quant_method": "fp8", "kv_cache_quant_algo": "FP8"}, "bf16"),  # load_hf_quant_config: no KV key
    # update_quant_config_from_compressed_tensors: 8-bit float kv_cache_scheme → FP8
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, "fp8_e4m3"),
    ({"quant_method": "compressed-tensors"}, "bf16"),
])
def test_formats_on_main(quant: dict[str, object], main: str) -> None:
    arch = _with("nvidia/Qwen3-32B-NVFP4", quant)
    assert get_engine("trtllm@main").kv_dtype(arch, "auto").name == main


def test_int8_kv_is_refused_by_name() -> None:
    arch = _with("nvidia/Qwen3-32B-NVFP4", {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "INT8"}})
    with pytest.raises(KVPlanError, match="kv_cache_quant_algo INT8.*Quantized kv cache is not expected"):
        get_engine("trtllm@main").kv_dtype(arch, "auto")
    assert get_engine("trtllm@main").kv_dtype(arch, "bf16").name == "bf16"
    ct = _with("nvidia/Qwen3-32B-NVFP4", {"quant_method": "compressed-tensors",
                                         "kv_cache_scheme": {"num_bits": 8, "type": "int"}})
    with pytest.raises(KVPlanError, match="kv_cache_scheme"):
        get_engine("trtllm@main").kv_dtype(ct, "auto")
    assert get_engine("trtllm@1.1").kv_dtype(ct, "auto").name == "bf16"
