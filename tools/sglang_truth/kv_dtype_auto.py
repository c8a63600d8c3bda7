"""What SGLang's ``--kv-cache-dtype auto`` becomes per checkpoint, from SGLang 0.5.23's own code →
``tests/fixtures/sglang/kv_dtype_auto.json`` (dev-time only; the venv of ``setup.sh``).

``$VENV/bin/python tools/sglang_truth/kv_dtype_auto.py``; ``tests/test_sglang_kv_dtype_auto.py``
compares kvplan with every case.

Called as is: ``server_args.prepare_server_args`` and ``configs/model_config.py``
``ModelConfig.from_server_args`` on a directory holding the preset's ``config.json`` (and its
``hf_quant_config.json`` where the preset has one), which picks the quantization method
(``_verify_quantization`` / ``_parse_quant_hf_config``); ``model_loader/weight_utils.py``
``get_quant_config`` — the method's own ``from_config`` (``ModelOptFp8Config``, ``ModelOptFp4Config``,
``Fp8Config`` …), whose ``kv_cache_quant_algo`` the model keeps as ``model.quant_config``; and
``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype`` on a model holding that config (what
``model_runner.py`` calls after loading). The stubs are ``generate.py``'s (``install_stubs``: an
H100 platform, no torchvision).
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import tempfile
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import install_stubs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fixtures/sglang/kv_dtype_auto.json"
SYNTH_BASE = "nvidia/Qwen3-32B-NVFP4"
#: Synthetic hf_quant_config.json / quantization_config variants on ``SYNTH_BASE``.
SYNTH: dict[str, dict[str, Any]] = {
    "hfq-nvfp4-kv-nvfp4": {"hf_quant_config": {
        "producer": {"name": "modelopt", "version": "0.27.0"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4", "group_size": 16,
                         "exclude_modules": ["lm_head"]}}},
    "hfq-nvfp4-kv-none": {"hf_quant_config": {
        "producer": {"name": "modelopt", "version": "0.27.0"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                         "exclude_modules": ["lm_head"]}}},
    "hfq-fp8-kv-fp8": {"hf_quant_config": {
        "producer": {"name": "modelopt", "version": "0.27.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                         "exclude_modules": ["lm_head"]}}},
    "flat-nvfp4-kv-scheme-fp8": {"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}},
    "flat-nvfp4-kv-scheme-fp8-dynamic": {"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"},
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}},
    "flat-nvfp4-kv-scheme-nvfp4": {"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "float"},
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}},
    "flat-fp8-kv-scheme-fp8": {"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"],
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}},
    "flat-fp8-kv-algo-fp8": {"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "FP8", "ignore": ["lm_head"],
        "kv_cache_quant_algo": "FP8"}},
    "fp8-method-kv-algo-fp8": {"quantization_config": {
        "quant_method": "fp8", "activation_scheme": "dynamic", "kv_cache_quant_algo": "FP8"}},
    "fp8-method-no-kv": {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}},
}


def preset_files(path: Path) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["id"], data["config"], data.get("hf_quant_config")


def run_case(model_dir: Path, config: dict[str, Any], hf_quant: dict[str, Any] | None) -> dict[str, Any]:
    from sglang.srt import runtime_context as rc
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache import kv_cache_dtype as kvd
    from sglang.srt.model_loader.weight_utils import get_quant_config
    from sglang.srt.server_args import prepare_server_args

    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if hf_quant is not None:
        (model_dir / "hf_quant_config.json").write_text(json.dumps(hf_quant), encoding="utf-8")
    server_args = prepare_server_args(["--model-path", str(model_dir), "--device", "cuda",
                                       "--kv-cache-dtype", "auto"])
    rc.publish(server_args, role="scheduler", ranks=rc.SpawnRanks(world_rank=0, gpu_id=0))
    model_config = ModelConfig.from_server_args(server_args)
    record: dict[str, Any] = {"quantization": model_config.quantization}
    quant_config = None
    if model_config.quantization is not None:
        quant_config = get_quant_config(model_config, LoadConfig(), {})
        record["quant_config_class"] = type(quant_config).__name__
        algo = getattr(quant_config, "kv_cache_quant_algo", None)
        record["kv_cache_quant_algo"] = algo if isinstance(algo, str | type(None)) else repr(algo)
    resolved, dtype = kvd.configure_kv_cache_dtype(
        server_args_kv_cache_dtype="auto", model=SimpleNamespace(quant_config=quant_config),
        model_dtype=model_config.dtype, is_draft_worker=False, is_dflash=False,
        speculative_draft_attention_backend=None)
    record["resolved"] = resolved
    record["torch_dtype"] = str(dtype).removeprefix("torch.")
    return record


def main() -> None:
    sglang = install_stubs()
    logging.getLogger().setLevel(logging.ERROR)
    cases: list[dict[str, Any]] = []
    presets = {}
    for path in sorted((ROOT / "presets/models").glob("*.json")):
        preset, config, hf_quant = preset_files(path)
        presets[preset] = (config, hf_quant)
        if config.get("quantization_config") is not None or hf_quant is not None:
            cases.append({"id": preset, "preset": preset})
    for name, variant in SYNTH.items():
        cases.append({"id": f"{SYNTH_BASE}|{name}", "preset": SYNTH_BASE, **variant})
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            config, hf_quant = copy.deepcopy(presets[case["preset"]])
            if "quantization_config" in case or "hf_quant_config" in case:
                config.pop("quantization_config", None)
                hf_quant = case.get("hf_quant_config")
                if "quantization_config" in case:
                    config["quantization_config"] = case["quantization_config"]
            try:
                case["sglang"] = run_case(Path(tmp) / str(i), config, hf_quant)
            except Exception as exc:  # recorded: the test checks kvplan refuses or skips these
                case["error"] = f"{type(exc).__name__}: {exc}"[:400]
                case["traceback"] = traceback.format_exc(limit=-3)[-1200:]
            print(case["id"], json.dumps(case.get("sglang") or case.get("error"))[:200], flush=True)
    out = {"generator": "tools/sglang_truth/kv_dtype_auto.py", "sglang_version": sglang.__version__,
           "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
