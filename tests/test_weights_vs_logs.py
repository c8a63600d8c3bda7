"""kvplan's weights per GPU vs vLLM's "Model loading took X GiB" in public start-up logs.

``tests/fixtures/vllm_logs/*.json`` (sources in each file and its README). Compared: every log
that logs the weights (``model_loading_gib``, or V0's ``model_weights_gib``) and whose model's
config is available — a preset, a vendored config in ``configs/``, or a preset with the very same
architecture (stated per case). Within 2 % unless listed in ``KNOWN_MISMATCH`` with the reason;
each later fix removes its entry (the test fails when a listed case comes within 2 %).

Why a compared case is not exact: vLLM's number is the memory the allocator gained while loading
(``gpu_model_runner.py`` ``load_model``: ``memory_usage``), so it also holds non-parameter buffers
(rotary cos/sin caches, ``sinks``, kernel workspaces) and is printed with 4 decimals (V0: 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.config_import import parse_config
from kvplan.presets import load_model
from kvplan.weights import weights_per_gpu

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
GIB = 1 << 30

#: id → (model: preset id or vendored config file, tp, why it is not exact).
CASES: dict[str, tuple[str, int, str]] = {
    "01": ("qwen2.5-7b", 1, "Qwen2-7B-Instruct has the qwen2.5-7b preset's architecture (3,584 wide, "
                            "28 layers, 28/4 heads, 18,944 MLP, vocab 152,064, untied); +0.06 GiB of "
                            "buffers (rotary cache) in the log"),
    "02": ("qwen2.5-7b", 1, "as 01"),
    "03": ("qwen2.5-7b", 2, "as 01, per rank at TP 2"),
    "04": ("qwen2.5-7b", 2, "as 03"),
    "05": ("qwen2.5-7b", 2, "as 03"),
    "06": ("openai__gpt-oss-120b", 4, "see KNOWN_MISMATCH"),
    "07": ("llama-3.1-8b", 1, "bf16 exact parameters; the log adds 0.03 GiB of buffers"),
    "08": ("llama-3.1-8b", 1, "as 07"),
    "09": ("llama-3.1-8b", 1, "Meta-Llama-3-8B has Llama-3.1-8B's shapes; V0 prints 2 decimals"),
    "10": ("openai__gpt-oss-120b", 1, "see KNOWN_MISMATCH"),
    "11": ("gpt-oss-120b", 1, "see KNOWN_MISMATCH"),
    "14": ("gpt-oss-20b", 1, "see KNOWN_MISMATCH"),
    "15": ("google__gemma-4-26B-A4B", 1, "Gemma 4 text MoE exact by shape; the vision tower is "
                                         "kvplan's generic ViT estimate (−1.7 % in all)"),
    "27": ("gpt-oss-20b", 1, "see KNOWN_MISMATCH"),
    "30": ("llama-3.1-8b", 1, "as 07"),
}

#: Logs that print the weights but whose checkpoint format could not be read (no config.json with
#: its quantization_config in the presets or configs/): not compared, each with the reason.
NOT_COMPARED: dict[str, str] = {
    "17": "Meta-Llama-3.1-405B-Instruct-FP8: its quantization_config (fbgemm_fp8 skip list) was "
          "not retrieved",
    "18": "Qwen2.5-0.5B-Instruct: no preset or vendored config",
    "19": "Qwen2.5-VL-72B-Instruct: no vendored config (vision tower shape unknown)",
    "20": "Qwen3.8-27B-FP8: no vendored config",
    "24": "Qwen3.8-27B NVFP4: local folder, config not published",
    "25": "TheBloke/Mixtral-8x7B-v0.1-GPTQ: its quantization_config (group size, act order) was "
          "not retrieved",
    "26": "Qwen3-Coder-30B-A3B AWQ: its quantization_config was not retrieved",
    "28": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic: its compressed-tensors config was not "
          "retrieved",
    "29": "as 28",
}

_MARLIN = ("vLLM's Marlin MXFP4 MoE backend pads the experts (mxfp4.py create_weights: "
           "intermediate per rank round_up(·, 128), hidden round_up(2,880, 256) = 3,072): kvplan "
           "sizes the checkpoint's stored shapes")
#: id → (reason, the reason's own number: weights in GiB with the padding applied, or None).
KNOWN_MISMATCH: dict[str, tuple[str, float | None]] = {
    "06": (_MARLIN + " — A100, TP 4: 720 → 768 per rank; padded 17.186 GiB vs logged 17.2217",
           17.186),
    "10": (_MARLIN + " — v0.10.1 on H100 without triton_kernels chose Marlin: 2,880 → 2,944; "
           "padded 65.897 GiB vs logged 65.9651", 65.897),
    "14": (_MARLIN + " — A100: padded 13.671 GiB vs logged 13.72", 13.671),
    "11": ("H100, v0.14.1: the MXFP4 backend is not in the log; its padding lies between the "
           "128/128 alignment (63.32 GiB) and Marlin's 128/256 (65.90 GiB); logged 64.38", None),
    "27": ("H100 (llm-d): backend not in the summary; 128/128 alignment gives 13.24 GiB, Marlin "
           "13.67; logged 13.47", None),
}


def _arch(model: str):
    path = LOGS / "configs" / f"{model}.json"
    if path.exists():
        return parse_config(json.loads(path.read_text()), name=model)
    return load_model(model)


def _logged(case: str) -> float:
    (path,) = LOGS.glob(f"{case}-*.json")
    logged = json.loads(path.read_text())["logged"]
    value = logged.get("model_loading_gib") or logged.get("model_weights_gib")
    return float(value[0] if isinstance(value, list) else value)


def _marlin_padded_gib(model: str, tp: int) -> float:
    """gpt-oss weights with Marlin's padding of the experts (the reason's number, recomputed)."""
    arch = _arch(model)
    moe = arch.moe
    assert moe is not None
    layout = weights_per_gpu(arch, None, tp)
    rest = sum(v for k, v in layout.heaviest.items() if k != "experts")
    inter = -(-(moe.expert_intermediate // tp) // 128) * 128
    hidden = -(-arch.hidden_size // 256) * 256
    per_expert = (2 * inter * hidden + hidden * inter) * 17 // 32 + (2 * inter + hidden) * 2
    moe_layers = len(arch.weights.moe_layers or ())
    return (rest + moe_layers * moe.n_experts * per_expert) / GIB


def test_every_log_with_weights_is_compared_or_excused():
    with_weights = set()
    for path in LOGS.glob("[0-9][0-9]-*.json"):
        logged = json.loads(path.read_text())["logged"]
        if logged.get("model_loading_gib") or logged.get("model_weights_gib"):
            with_weights.add(path.name[:2])
    assert with_weights == set(CASES) | set(NOT_COMPARED)
    assert not set(CASES) & set(NOT_COMPARED) and set(KNOWN_MISMATCH) <= set(CASES)
    assert len(CASES) >= 12


@pytest.mark.parametrize("case", sorted(CASES))
def test_weights_per_gpu_match_the_log(case):
    model, tp, _why = CASES[case]
    ours = max(weights_per_gpu(_arch(model), None, tp).stage_bytes) / GIB
    logged = _logged(case)
    if case in KNOWN_MISMATCH:
        assert abs(ours / logged - 1) > 0.02, f"{case} now within 2 %: remove it from KNOWN_MISMATCH"
        padded = KNOWN_MISMATCH[case][1]
        if padded is not None:
            assert _marlin_padded_gib(model, tp) == pytest.approx(padded, abs=0.001)
            assert padded == pytest.approx(logged, rel=0.005)
    else:
        assert ours == pytest.approx(logged, rel=0.02)
