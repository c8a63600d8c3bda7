"""Ground truth for kvplan's ``sglang`` engine: SGLang's own KV-pool sizing run on CPU.

Dev-time only (not imported by kvplan or CI). Runs in the virtualenv made by ``setup.sh``::

    /work/scratch/sglang/venv/bin/python tools/sglang_truth/generate.py   # writes the fixture

For every case of ``GRID`` it runs, unmodified, SGLang 0.5.23's

* argument parsing and resolution: ``server_args.prepare_server_args`` + ``ServerArgs.resolve_once``
  (all ``arg_groups`` hooks: ``mem_fraction_static``, attention backend, page size, Gemma's forced
  ``disable_hybrid_swa_memory`` …) and ``runtime_context.publish``;
* ``configs/model_config.py`` ``ModelConfig.from_server_args`` on the case's config.json
  (dtype resolution, hybrid-SWA layer ids, MLA dims, context length);
* ``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype`` and the ``model_runner_components``
  helpers that build a ``KVCacheConfigurator`` exactly as ``ModelRunner.init_kv_cache_configurator``;
* ``KVCacheConfigurator._resolve_memory_pool_config`` (``_profile_available_bytes``, the Mamba split,
  ``config_from_budget`` → ``model_executor/pool_configurator.py`` ``create_memory_pool_configurator``
  → ``DefaultPoolConfigurator`` / ``HybridSWAPoolConfigurator`` ``calculate_pool_sizes``, the
  ``--max-total-tokens`` cap, ``resolve_max_num_reqs``).

Only what needs a GPU is stubbed (see ``install_stubs`` and the README):

1. platform facts: ``runtime_context.override_platform`` (SGLang's own override hook) says CUDA,
   SM 9.0, Hopper with CUDA ≥ 12.3, FlashInfer present — an H100;
2. device capacity: ``get_device_memory_capacity`` (nvidia-smi) returns 81559 MiB;
3. free memory: ``get_available_gpu_memory`` (``torch.cuda.mem_get_info``) returns the case's free
   bytes after the weights; ``pre_model_load_memory`` (free bytes before the weights) is passed in;
4. the model: a plain object (no weights); ``get_attention_sliding_window_size`` is given for the
   hybrid-SWA models whose SGLang class defines it (``sliding_window - 1``, ``models/gpt_oss.py``);
5. ``torchvision`` (imported by multimodal helpers, never by sizing) is an empty stub package;
6. process groups: ``world_group`` is a placeholder (one process; the free-memory stub is
   already the minimum over ranks that the distributed query would all-reduce);
7. ``layers/quantization/__init__.py`` registers ``mxfp4`` (gpt-oss) only when CUDA is seen at
   import time; it is registered as on a CUDA machine.

Weights: the free memory after loading is ``capacity − cuda_context − weights`` with kvplan's own
per-GPU weight bytes (``kvplan.plan.Plan.weights``), so fixtures and kvplan share the
input and only the KV arithmetic is compared.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.abc
import importlib.machinery
import json
import logging
import sys
import tempfile
import traceback
import types
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = REPO / "tests" / "fixtures" / "sglang" / "cases.json"
GIB = 1 << 30
MIB = 1 << 20
H100_MIB = 81559  # nvidia-smi memory.total of an H100 SXM5 80GB (presets/gpus/h100-sxm.json)
H100_BYTES = H100_MIB * MIB


class _Anything:
    """Value of any name looked up on a stub module (never called on the sizing path)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Anything(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        return _Anything(f"{self._name}()")


class _StubPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import hook answering for whole packages with empty modules."""

    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def missing(item, _name=spec.name):
            if item.startswith("__"):
                raise AttributeError(item)
            return _Anything(f"{_name}.{item}")

        module.__getattr__ = missing
        return module

    def exec_module(self, module) -> None:
        return None


def install_stubs():
    """Stub 5 (torchvision) and stubs 1–2 (platform, device capacity); returns SGLang modules."""
    from transformers.utils import import_utils

    # transformers caches "torchvision absent" before the stub exists, so it stays absent there.
    import_utils.is_torchvision_available()
    import_utils.is_torchvision_v2_available()
    sys.meta_path.insert(0, _StubPackages({"torchvision"}))

    import sglang
    from sglang.srt import runtime_context as rc
    from sglang.srt.arg_groups import memory_hook
    from sglang.srt.utils import common

    def capacity(device=None):
        return float(H100_MIB)

    memory_hook.get_device_memory_capacity = capacity
    # Stub 7: layers/quantization/__init__.py registers "mxfp4" (gpt-oss) only when is_cuda() at
    # import time; register it as a CUDA import would.
    from sglang.srt.layers import quantization
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    quantization.BASE_QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)
    quantization.QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)
    common.get_device_memory_capacity = capacity
    rc.override_platform(
        is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
        is_sm90=True, is_sm100=False, is_sm100_or_sm110=False, is_sm110=False, is_sm120=False,
        is_blackwell=False, is_hopper_with_cuda_12_3=True, has_amx=False, has_flashinfer=True,
        device_sm=90, device_capability=(9, 0),
    ).install()
    return sglang


def native_architectures(sglang_dir: Path) -> set[str]:
    """``EntryClass`` names of ``sglang/srt/models/*.py`` — what ``models/registry.py``
    ``import_model_classes`` registers (read with ``ast``: importing every model needs CUDA)."""
    names: set[str] = set()
    for path in sorted((sglang_dir / "srt" / "models").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in targets):
                value = node.value
                items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
                names.update(i.id for i in items if isinstance(i, ast.Name))
                names.update(i.attr for i in items if isinstance(i, ast.Attribute))
    return names


def kvplan_weights(model: str, overrides: dict, tp: int) -> tuple[int, dict]:
    """kvplan's per-GPU weight bytes for the stubbed weights (as ``fit`` sizes them for SGLang:
    the checkpoint's format, the engine's auto dtype), and the case's config.json."""
    from kvplan.config_import import parse_config
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import model_presets

    if model.endswith(".json"):  # a config file of the repository (no preset: Falcon-H1)
        data = json.loads((REPO / model).read_text(encoding="utf-8"))
        config = {**{k: v for k, v in data.items() if not k.startswith("_")}, **overrides}
        arch = parse_config(config, name=Path(model).stem)
    else:
        preset = model_presets()[model]
        config = {**copy.deepcopy(preset.config), **overrides}
        arch = parse_config(config, name=preset.name, params_total=preset.params_total,
                            params_active=preset.params_active)
    query = FitQuery(engine="sglang", tp=tp)
    return max(make_plan(arch, None, query).weights.stage_bytes), config


def run_case(case: dict, workdir: Path, natives: set[str]) -> dict:
    """Run SGLang's configuration and pool sizing for one case; returns the fixture record."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.mem_cache import kv_cache_configurator as kcc
    from sglang.srt.mem_cache import kv_cache_dtype as kvd
    from sglang.srt.model_executor.model_runner_components.kv_pool_runtime import (
        is_post_capture_kv_active,
    )
    from sglang.srt.model_executor.model_runner_components.layer_setup import (
        resolve_layer_indices,
    )
    from sglang.srt.model_executor.model_runner_components.load_model_utils import (
        resolve_sliding_window_size,
    )
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    tp = case.get("tp", 1)
    weights, config = kvplan_weights(case["model"], case.get("config_overrides", {}), tp)
    model_dir = workdir / case["id"]
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    record = {k: v for k, v in case.items()}
    arch_name = (config.get("architectures") or ["?"])[0]
    argv = ["--model-path", str(model_dir), "--device", "cuda", "--tp-size", str(tp),
            "--kv-cache-dtype", case.get("kv_cache_dtype", "auto"), *case.get("args", [])]
    if case.get("page_size"):
        argv += ["--page-size", str(case["page_size"])]
    record["argv"] = ["--model-path", f"<{case['model']} config.json>", *argv[2:]]
    server_args = prepare_server_args(argv)
    rc.publish(server_args, role="scheduler", ranks=rc.SpawnRanks(world_rank=0, gpu_id=0))
    # Stub 6: no process groups in one CPU process; the stubbed free memory is already the
    # minimum over ranks that get_available_gpu_memory(distributed=True) would all-reduce.
    rc.get_parallel().override_permanently(world_group=SimpleNamespace(cpu_group=None))
    view = resolved_view(server_args)
    model_config = ModelConfig.from_server_args(server_args)
    if arch_name not in natives:
        from sglang.srt.model_loader.utils import resolve_transformers_arch

        try:
            resolve_transformers_arch(model_config, [arch_name])
        except ValueError as exc:
            record["unsupported"] = str(exc)
            return record
        record["transformers_fallback"] = True

    model = SimpleNamespace()
    if model_config.is_hybrid_swa and getattr(model_config.hf_config, "sliding_window", None):
        window = model_config.hf_config.sliding_window - 1
        model.get_attention_sliding_window_size = lambda: window  # stub 4 (models/gpt_oss.py)
    spec = SpeculativeAlgorithm.from_string(rc.get_spec().speculative_algorithm)
    resolved_kv, kv_dtype = kvd.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=rc.get_model().kv_cache_dtype, model=model,
        model_dtype=model_config.dtype, is_draft_worker=False, is_dflash=False,
        speculative_draft_attention_backend=None,
        speculative_draft_kv_cache_dtype=rc.get_spec().speculative_draft_kv_cache_dtype)
    kvc = kcc.KVCacheConfigurator(
        device="cuda", gpu_id=0, attn_dp_size=rc.get_parallel().attn_dp_size, pp_size=1,
        pp_group=None, model=model, model_config=model_config, server_args=server_args,
        kv_cache_dtype=kv_dtype,
        kv_cache_dtype_str=resolved_kv if resolved_kv is not None else rc.get_model().kv_cache_dtype,
        model_dtype=model_config.dtype, page_size=rc.get_schedule().page_size,
        sliding_window_size=resolve_sliding_window_size(model, model_config),
        spec_algorithm=spec, is_draft_worker=False,
        post_capture_kv_active=is_post_capture_kv_active(
            server_args=server_args, is_draft_worker=False, spec_algorithm=spec,
            token_to_kv_pool_allocator=None),
        spec_aux_config=resolve_spec_aux_hidden_state_config(
            server_args=server_args, model_config=model_config, spec_algorithm=spec,
            is_draft_worker=False),
        is_hybrid_swa=model_config.is_hybrid_swa,
        is_hybrid_swa_compress=model_config.is_hybrid_swa_compress,
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
        layer_info=resolve_layer_indices(model=model, model_config=model_config,
                                         is_draft_worker=False),
        forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None,
        memory_pool_config=None)

    # Stub 3: free memory. "budget" cases: free after weights = the KV budget and nothing held
    # back (pre_model_load_memory = 0). "default_fraction" cases: a whole H100 whose free memory
    # before the weights is capacity − cuda_context_bytes.
    if case["mode"] == "budget":
        free_after, pre = case["available_bytes"], 0
    else:
        free_before = H100_BYTES - case.get("cuda_context_bytes", 0)
        # a draft's weights (tools/sglang_truth/spec_decode.py) are loaded before the profile too
        free_after, pre = free_before - weights - case.get("draft_weights_bytes", 0), free_before
        record["weights_bytes"] = weights
        record["gpu_capacity_bytes"] = H100_BYTES
    kcc.get_available_gpu_memory = lambda *a, **k: free_after / GIB
    profiled = kvc._profile_available_bytes(pre / GIB)
    config = kvc._resolve_memory_pool_config(pre / GIB)
    configurator = create_memory_pool_configurator(kvc)
    record["sglang"] = {
        "max_total_num_tokens": config.max_total_num_tokens,
        "full_max_total_num_tokens": config.full_max_total_num_tokens,
        "swa_max_total_num_tokens": config.swa_max_total_num_tokens,
        "max_running_requests": config.max_running_requests,
        "available_bytes": profiled,
        "cell_size": float(configurator._cell_size),
        "configurator": type(configurator).__name__,
        "mem_fraction_static": rc.get_schedule().mem_fraction_static,
        "page_size": rc.get_schedule().page_size,
        "attention_backend": view.attention_backend,
        "model_dtype": str(model_config.dtype).removeprefix("torch."),
        "kv_cache_dtype": str(kv_dtype).removeprefix("torch."),
        "is_hybrid_swa": bool(model_config.is_hybrid_swa),
        "full_attention_layers": len(kvc.layer_info.full_attention_layer_ids or []),
        "swa_attention_layers": len(kvc.layer_info.swa_attention_layer_ids or []),
        "context_len": model_config.context_len,
        "max_mamba_cache_size": rc.get_schedule().max_mamba_cache_size
        if kvc.mambaish_config is not None else None,
    }
    if not spec.is_none():
        aux = kvc.spec_aux_config
        record["sglang"]["speculative"] = {
            "speculative_algorithm": rc.get_spec().speculative_algorithm,
            "speculative_num_steps": rc.get_spec().speculative_num_steps,
            "speculative_eagle_topk": rc.get_spec().speculative_eagle_topk,
            "speculative_num_draft_tokens": rc.get_spec().speculative_num_draft_tokens,
            "eagle_draft_num_layers": aux.eagle_draft_num_layers,
            "eagle_draft_swa_num_layers": aux.eagle_draft_swa_num_layers,
            "num_effective_layers": kvc.layer_info.num_effective_layers,
        }
    return record


def grid() -> list[dict]:
    """The cases: real configs × settings (ids are stable; tests key on them)."""
    g40 = 40 * GIB
    cases: list[dict] = []

    def add(id_, model, **kw):
        kw.setdefault("mode", "budget")
        if kw["mode"] == "budget":
            kw.setdefault("available_bytes", g40)
        cases.append({"id": id_, "model": model, **kw})

    dense = ["llama-2-7b", "llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "mistral-7b-v0.1",
             "gemma-2-9b", "gemma-3-12b", "deepseek-v2-lite", "gpt-oss-20b", "llama-4-scout",
             "mixtral-8x7b", "phi-4"]
    for model in dense:
        add(f"{model}-budget40g-auto-p1", model)
        add(f"{model}-budget40g-fp8-p1", model, kv_cache_dtype="fp8_e4m3")
        add(f"{model}-budget40g-auto-p64", model, page_size=64)
    for model in ["llama-3.1-8b", "qwen2.5-7b", "llama-2-7b", "gpt-oss-20b", "llama-3.1-70b"]:
        add(f"{model}-tp8-budget20g-auto-p1", model, tp=8, available_bytes=20 * GIB)
    add("qwen2.5-7b-tp8-budget20g-fp8-p64", "qwen2.5-7b", tp=8, available_bytes=20 * GIB,
        kv_cache_dtype="fp8_e4m3", page_size=64)
    add("deepseek-v3-tp8-budget20g-auto-p1", "deepseek-v3", tp=8, available_bytes=20 * GIB)
    add("deepseek-v3-tp8-budget20g-fp8-p64", "deepseek-v3", tp=8, available_bytes=20 * GIB,
        kv_cache_dtype="fp8_e4m3", page_size=64)
    add("deepseek-v2-lite-tp2-budget30g-auto-p1", "deepseek-v2-lite", tp=2,
        available_bytes=30 * GIB)
    for model in ["llama-2-7b", "llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "gemma-2-9b",
                  "deepseek-v2-lite", "gpt-oss-20b", "qwen3-8b"]:
        for context in (0, 512 * MIB):
            tag = "ctx0" if not context else "ctx512m"
            add(f"{model}-h100-default-{tag}", model, mode="default_fraction",
                cuda_context_bytes=context)
    add("gemma-3-12b-h100-default-ctx0", "gemma-3-12b", mode="default_fraction",
        cuda_context_bytes=0)
    add("llama-4-scout-tp8-h100-default-ctx0", "llama-4-scout", tp=8, mode="default_fraction",
        cuda_context_bytes=0)
    add("qwen3-next-80b-a3b-tp4-h100-default-ctx0", "qwen3-next-80b-a3b", tp=4,
        mode="default_fraction", cuda_context_bytes=0)
    add("llama-3.1-70b-tp8-h100-default-ctx0", "llama-3.1-70b", tp=8, mode="default_fraction",
        cuda_context_bytes=0)
    add("llama-3.2-1b-f32cfg-budget40g-auto-p1", "llama-3.2-1b",
        config_overrides={"torch_dtype": "float32"})
    add("qwen3-8b-f32cfg-budget40g-auto-p1", "qwen3-8b", config_overrides={"torch_dtype": "float32"})
    add("gemma-2-9b-f32cfg-budget40g-auto-p1", "gemma-2-9b",
        config_overrides={"torch_dtype": "float32"})
    add("llama-3.2-1b-f32cfg-budget40g-fp8-p1", "llama-3.2-1b",
        config_overrides={"torch_dtype": "float32"}, kv_cache_dtype="fp8_e4m3")
    for model in ["gpt-oss-20b", "llama-4-scout"]:
        add(f"{model}-budget40g-swa-ratio0.5", model, args=["--swa-full-tokens-ratio", "0.5"])
        add(f"{model}-budget40g-disable-hybrid-swa", model, args=["--disable-hybrid-swa-memory"])
    add("gpt-oss-120b-budget40g-auto-p1", "gpt-oss-120b")
    for model in ["llama-3.1-8b", "gpt-oss-20b", "deepseek-v2-lite"]:
        add(f"{model}-budget40g-max-total-100000", model, args=["--max-total-tokens", "100000"])
    add("qwen3-next-80b-a3b-budget40g-auto-p1", "qwen3-next-80b-a3b")
    add("qwen3-next-80b-a3b-tp4-budget40g-auto-p1", "qwen3-next-80b-a3b", tp=4)
    add("falcon-7b-budget40g-auto-p1", "falcon-7b")
    add("falcon-40b-budget40g-auto-p1", "falcon-40b")
    add("jamba-1.5-mini-budget40g-auto-p1", "jamba-1.5-mini")
    # Qwen3.5 / Qwen3.6 hybrids (GDN + full attention): the Mamba slots and request cap.
    for model, tp in (("Qwen/Qwen3.5-27B", 1), ("Qwen/Qwen3.5-27B", 2), ("Qwen/Qwen3.5-35B-A3B", 1),
                      ("Qwen/Qwen3.5-122B-A10B", 4), ("Qwen/Qwen3.5-397B-A17B", 8),
                      ("Qwen/Qwen3.6-35B-A3B", 2)):
        tag = model.split("/")[1].lower()
        add(f"{tag}{'' if tp == 1 else f'-tp{tp}'}-budget40g-auto-p1", model, tp=tp)
        add(f"{tag}-tp{tp}-budget8g-auto-p1", model, tp=tp, available_bytes=8 * GIB)
    # Falcon-H1: attention and a Mamba-2 mixer in every layer (configs/falcon_h1.py: both
    # full_attention_layer_ids and linear_layer_ids are every layer; one B/C group, so TP 2
    # replicates it: mamba_utils.py extra_groups_for_head_shards).
    falcon = "tests/fixtures/vllm_truth/configs/falcon-h1-0.5b.json"
    for tp in (1, 2):
        add(f"falcon-h1-0.5b{'' if tp == 1 else f'-tp{tp}'}-budget40g-auto-p1", falcon, tp=tp)
        add(f"falcon-h1-0.5b-tp{tp}-budget8g-auto-p1", falcon, tp=tp, available_bytes=8 * GIB)
    # MLA MoE with DP attention (--enable-dp-attention --dp-size D): one rank's pool and cap.
    for model in ("deepseek-v3", "kimi-k2"):
        for dp in (8, 4):
            add(f"{model}-tp8-dp{dp}-dpattn-budget20g-auto-p1", model, tp=8, available_bytes=20 * GIB,
                args=["--enable-dp-attention", "--dp-size", str(dp)])
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("-k", default="", help="only cases whose id contains this")
    args = parser.parse_args()
    sglang = install_stubs()
    logging.getLogger().setLevel(logging.WARNING)
    import torch
    import transformers

    natives = native_architectures(Path(sglang.__file__).parent)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in grid():
            if args.k not in case["id"]:
                continue
            try:
                record = run_case(case, Path(tmp), natives)
            except Exception as exc:  # recorded, not hidden: the test refuses "error" records
                record = {**case, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(limit=-4)}
            print(case["id"], json.dumps(record.get("sglang") or record.get("unsupported")
                                          or record.get("error"))[:300], flush=True)
            records.append(record)
    out = {
        "generator": "tools/sglang_truth/generate.py",
        "sglang_version": sglang.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "device_stub": {"name": "NVIDIA H100 80GB HBM3", "capacity_mib": H100_MIB,
                        "compute_capability": [9, 0]},
        "cases": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} cases to {args.out}")


if __name__ == "__main__":
    main()
