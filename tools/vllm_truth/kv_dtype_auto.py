"""What vLLM's ``--kv-cache-dtype auto`` becomes per checkpoint, release by release, from vLLM's own
code → ``tests/fixtures/vllm_truth/kv_dtype_auto.json`` (dev-time only).

``python tools/vllm_truth/kv_dtype_auto.py`` (any Python ≥ 3.11; no vLLM install: the functions are
read from each release's wheel, ``pip download vllm==X --no-deps``, or from ``--src X=DIR`` holding
the unpacked ``vllm/`` tree). ``tests/test_vllm_kv_dtype_auto.py`` compares kvplan with every case.

Called as is, per release (their source text executed here, nothing else of vLLM imported):

* ``transformers_utils/model_arch_config_convertor.py``
  ``ModelArchConfigConvertorBase._normalize_quantization_config`` — writes ``quant_method``
  (``modelopt`` / ``modelopt_fp4``) into a ModelOpt ``hf_quant_config.json`` as ``ModelConfig``
  does before the engine arguments are resolved;
* ``utils/torch_utils.py`` ``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``, ``get_kv_cache_quant_algo_string``
  and ``resolve_kv_cache_dtype_string("auto", model_config)`` — what
  ``engine/arg_utils.py`` ``EngineArgs.create_engine_config`` passes to ``CacheConfig(cache_dtype=…)``
  (the call is checked to be there; a release without it keeps "auto").

Written here: ``model_config`` is a namespace with ``hf_config.quantization_config`` = the preset's
``config.json`` ``quantization_config``, else its ``hf_quant_config.json`` (vLLM
``transformers_utils/config.py`` ``get_config`` merges it so), plus synthetic variants of the
quantization config (the formats the function distinguishes) on one preset.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import logging
import subprocess
import tempfile
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fixtures/vllm_truth/kv_dtype_auto.json"
#: The releases read: the last without the rule, the first with it, the last before nvfp4, the
#: first with nvfp4, the newest.
RELEASES = ("0.13.0", "0.14.0", "0.19.1", "0.20.0", "0.33.0")
TORCH_UTILS = "vllm/utils/torch_utils.py"
CONVERTOR = "vllm/transformers_utils/model_arch_config_convertor.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
#: Synthetic quantization configs (on ``SYNTH_BASE``): each a format the function tells apart.
SYNTH_BASE = "nvidia/Qwen3.5-122B-A10B-NVFP4"
SYNTH: dict[str, dict[str, Any]] = {
    "flat-nvfp4-kv-fp8-scheme": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                 "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}},
    "flat-nvfp4-kv-nvfp4-scheme": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                   "kv_cache_scheme": {"dynamic": False, "num_bits": 4, "type": "float"}},
    "flat-fp8-kv-dynamic-scheme": {"quant_method": "modelopt", "quant_algo": "FP8",
                                   "kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}},
    "flat-fp8-kv-scheme-no-dynamic": {"quant_method": "modelopt", "quant_algo": "FP8",
                                      "kv_cache_scheme": {"num_bits": 8, "type": "float"}},
    "flat-fp8-kv-int8-scheme": {"quant_method": "modelopt", "quant_algo": "FP8",
                                "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "int"}},
    "flat-modelopt-fp4-kv-algo-fp8": {"quant_method": "modelopt_fp4", "quant_algo": "NVFP4",
                                      "kv_cache_quant_algo": "fp8"},
    "flat-modelopt-kv-algo-nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                    "kv_cache_quant_algo": "NVFP4"},
    "flat-modelopt-kv-algo-int8": {"quant_method": "modelopt", "quant_algo": "FP8",
                                   "kv_cache_quant_algo": "INT8"},
    "flat-modelopt-no-kv": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
    "flat-modelopt-upper-method": {"quant_method": "ModelOpt", "quant_algo": "FP8",
                                   "kv_cache_quant_algo": "FP8"},
    "nested-fp8-kv-fp8": {"producer": {"name": "modelopt", "version": "0.27.0"},
                          "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}},
    "nested-nvfp4-kv-fp8": {"producer": {"name": "modelopt", "version": "0.27.0"},
                            "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                                             "group_size": 16}},
    "nested-fp8-pc-pt-kv-fp8": {"producer": {"name": "modelopt", "version": "0.27.0"},
                                "quantization": {"quant_algo": "FP8_PER_CHANNEL_PER_TOKEN",
                                                 "kv_cache_quant_algo": "FP8"}},
    "nested-nvfp4-kv-null": {"producer": {"name": "modelopt", "version": "0.27.0"},
                             "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None}},
    "nested-other-producer-kv-fp8": {"producer": {"name": "other", "version": "1"},
                                     "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}},
    "fp8-method-kv-algo-fp8": {"quant_method": "fp8", "activation_scheme": "dynamic",
                               "kv_cache_quant_algo": "FP8"},
    "compressed-tensors-kv-scheme": {"quant_method": "compressed-tensors", "format": "float-quantized",
                                     "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float",
                                                         "strategy": "tensor"}},
}


def release_sources(version: str, src: dict[str, Path], cache: Path) -> dict[str, str]:
    """The three files' text from ``--src`` or the release's wheel (downloaded once)."""
    if version in src:
        return {f: (src[version] / f).read_text(encoding="utf-8") for f in (TORCH_UTILS, CONVERTOR, ARG_UTILS)
                if (src[version] / f).exists()}
    wheels = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        subprocess.run(["python3", "-m", "pip", "download", f"vllm=={version}", "--no-deps", "-d",
                        str(cache)], check=True, capture_output=True)
        wheels = sorted(cache.glob(f"vllm-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        return {f: wheel.read(f).decode("utf-8") for f in (TORCH_UTILS, CONVERTOR, ARG_UTILS) if f in names}


def _segment(text: str, names: set[str], method_of: str | None = None) -> str:
    """The source of the named top-level functions / assignments (or methods of ``method_of``)."""
    tree = ast.parse(text)
    body = tree.body
    if method_of is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == method_of).body
    out = []
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            out.append(ast.get_source_segment(text, node) or "")
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in names for t in node.targets):
            out.append(ast.get_source_segment(text, node) or "")
    return "\n\n".join(__import__("textwrap").dedent(s) for s in out)


def vllm_resolver(files: dict[str, str]) -> Any:
    """``quant_cfg → cache dtype`` with the release's own functions, or None if it has no rule."""
    torch_utils = files.get(TORCH_UTILS, "")
    if "def resolve_kv_cache_dtype_string" not in torch_utils:
        return None
    assert "resolve_kv_cache_dtype_string(" in files[ARG_UTILS].split("def create_engine_config", 1)[1]
    ns: dict[str, Any] = {"Any": Any, "logger": logging.getLogger("vllm"), "ModelConfig": Any,
                          "PretrainedConfig": Any, "PreTrainedConfig": Any}
    code = _segment(torch_utils, {"MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP", "get_kv_cache_quant_algo_string",
                                  "resolve_kv_cache_dtype_string"})
    code += "\n\n" + _segment(files[CONVERTOR], {"_normalize_quantization_config"},
                              method_of="ModelArchConfigConvertorBase")
    exec(compile("from __future__ import annotations\n" + code, "vllm", "exec"), ns)

    def resolve(quant_cfg: dict[str, Any]) -> str:
        hf_config = SimpleNamespace(quantization_config=copy.deepcopy(quant_cfg))
        ns["_normalize_quantization_config"](None, hf_config)
        return str(ns["resolve_kv_cache_dtype_string"]("auto", SimpleNamespace(hf_config=hf_config)))

    return resolve


def preset_quant(path: Path) -> tuple[str, dict[str, Any] | None]:
    data = json.loads(path.read_text(encoding="utf-8"))
    quant = data.get("config", {}).get("quantization_config") or data.get("hf_quant_config")
    return data["id"], quant


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", default=[], help="VERSION=DIR with an unpacked vllm/")
    args = parser.parse_args()
    src = {k: Path(v) for k, v in (s.split("=", 1) for s in args.src)}
    logging.disable(logging.WARNING)
    cases: list[dict[str, Any]] = []
    quants: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "presets/models").glob("*.json")):
        preset, quant = preset_quant(path)
        if quant is not None:
            quants[preset] = quant
            cases.append({"id": preset, "preset": preset, "quantization_config": None})
    for name, quant in SYNTH.items():
        cases.append({"id": f"{SYNTH_BASE}|{name}", "preset": SYNTH_BASE, "quantization_config": quant})
    with tempfile.TemporaryDirectory() as tmp:
        resolvers = {v: vllm_resolver(release_sources(v, src, Path(tmp))) for v in RELEASES}
    for case in cases:
        quant = case["quantization_config"] or quants[case["preset"]]
        case["cache_dtype"] = {v: (r(quant) if r is not None else "auto") for v, r in resolvers.items()}
    out = {"generator": "tools/vllm_truth/kv_dtype_auto.py", "vllm_versions": list(RELEASES),
           "has_rule": {v: r is not None for v, r in resolvers.items()}, "cases": cases}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases × {len(RELEASES)} releases → {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
