"""``mamba_hybrids.py`` on vLLM 0.27.0, the last release whose default Mamba cache mode for
``SupportsMambaPrefixCaching`` models is "all" → ``tests/fixtures/vllm_truth/mamba_hybrids_v027.json``
(dev-time only; ``tests/test_vllm_mamba_hybrids.py`` compares kvplan's ``vllm@0.27``).

A venv like ``README.md``'s with ``vllm==0.27.0`` instead of 0.33.0 (same CPU torch 2.13 wheel);
``python tools/vllm_truth/mamba_hybrids_v027.py``. The same script runs on 0.20.0 (the first release
that raises; "all" / "align" as 0.27) and writes ``mamba_hybrids_v020.json``, and on 0.29.0 ("align"
for every hybrid from 0.28) → ``mamba_hybrids_v029.json``.

Called as is (vLLM 0.27.0): the architecture hook and ``HybridAttentionMambaModelConfig`` →
``MambaModelConfig.verify_and_update_config`` (cache mode: "all" for ``supports_mamba_prefix_caching``,
answered by ``ModelRegistry`` for the architecture), ``Platform._align_hybrid_block_size`` (the
"all" mode's chunk-aligned block), ``MambaSpec`` / ``FullAttentionSpec``
(``Attention.get_kv_cache_spec``: no backend hook in 0.27),
``kv_cache_utils.get_kv_cache_configs`` / ``get_kv_cache_capacity`` and
``CompilationConfig.resolve_cudagraph_mode_and_sizes``. Written here: the namespace ``vllm_config``
(what those read; ``max_in_flight_tokens`` = (pp + 1) × 8,192 with async scheduling, v0.26+
``VllmConfig.max_in_flight_tokens``), the same three stand-ins as ``mamba_hybrids.py``, and the
models, memory sizes and ``max_num_seqs`` of its grid (Falcon-H1 left out: compared on 0.33
only).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import transformers
import vllm
from vllm.config import vllm as vllm_config_module
from vllm.config.compilation import CompilationConfig, CUDAGraphMode
from vllm.model_executor.models import ModelRegistry
from vllm.model_executor.models.config import MODELS_CONFIG_MAP, HybridAttentionMambaModelConfig
from vllm.platforms.interface import Platform
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.attention.backends import flash_attn
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

ROOT = Path(__file__).resolve().parents[2]
#: One fixture per release run (``mamba_hybrids_v027.json`` for 0.27.0, ``…_v020.json`` for 0.20.0).
_MAJOR, _MINOR = (int(x) for x in vllm.__version__.split(".")[:2])
OUT = ROOT / f"tests/fixtures/vllm_truth/mamba_hybrids_v{_MAJOR}{_MINOR:02d}.json"
GIB = 1 << 30
MODELS = {
    "nemotron-3-nano-30b-a3b": ("presets/models/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json",
                                "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", (1, 2), 32768),
    "nemotron-h-56b": ("presets/models/nvidia--Nemotron-H-56B-Base-8K.json", "nvidia/Nemotron-H-56B-Base-8K",
                       (4, 8), 8192),
    "jamba-1.5-mini": ("presets/models/jamba-1.5-mini.json", "jamba-1.5-mini", (1, 2), 32768),
}
MODEL_FILES = {"NemotronHForCausalLM": "vllm.model_executor.models.nemotron_h",
               "JambaForCausalLM": "vllm.model_executor.models.jamba"}
MAMBA_TYPE = {"NemotronHForCausalLM": MambaAttentionBackendEnum.MAMBA2,
              "JambaForCausalLM": MambaAttentionBackendEnum.MAMBA1}
MEMORY = (4 * GIB, 20 * GIB)
MNBT = 8192
#: ``use_v2_model_runner`` is a parameter of ``resolve_cudagraph_mode_and_sizes`` from v0.21.
RUNNER_KW = ({"use_v2_model_runner": True} if "use_v2_model_runner" in
             CompilationConfig.resolve_cudagraph_mode_and_sizes.__code__.co_varnames else {})


def layer_caches(config: dict) -> list[tuple[str, str]]:
    arch = config["architectures"][0]
    if arch == "NemotronHForCausalLM":
        return [(f"model.layers.{i}.mixer", {"M": "mamba", "*": "attn"}[c])
                for i, c in enumerate(config["hybrid_override_pattern"]) if c in "M*"]
    period, offset = config["attn_layer_period"], config["attn_layer_offset"]
    return [(f"model.layers.{i}.x", "attn" if i % period == offset else "mamba")
            for i in range(config["num_hidden_layers"])]


def namespace(config: dict, hf_config, tp: int, pc: bool, max_len: int) -> SimpleNamespace:
    arch = config["architectures"][0]
    nkv = config.get("num_key_value_heads") or config["num_attention_heads"]
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    info, _ = ModelRegistry.inspect_model_cls([arch], SimpleNamespace(
        model_impl="auto", convert_type="none", runner_type="generate", architectures=[arch],
        hf_config=hf_config))
    model = SimpleNamespace(
        architecture=arch, architectures=[arch], hf_config=hf_config, hf_text_config=hf_config,
        dtype=torch.bfloat16, use_mla=False, is_hybrid=True, max_model_len=max_len,
        original_max_model_len=max_len, get_num_kv_heads=lambda _pc: max(1, nkv // tp),
        get_head_size=lambda: head, convert_type="none", runner_type="generate", model_impl="auto",
        supports_mamba_prefix_caching=info.supports_mamba_prefix_caching,
        get_mamba_chunk_size=lambda: (getattr(hf_config, "mamba_chunk_size", None)
                                      or getattr(hf_config, "chunk_size", None) or 2048))
    cache = SimpleNamespace(
        block_size=16, user_specified_block_size=False, cache_dtype="auto", enable_prefix_caching=pc,
        mamba_cache_mode="none", mamba_block_size=None, mamba_page_size_padded=None,
        mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto", num_gpu_blocks_override=None,
        calculate_kv_scales=False, use_replayssm=False, user_specified_mamba_block_size=False,
        prefix_cache_retention_interval=None, kv_cache_size_tokens=None, kv_cache_max_concurrency=None,
        kv_cache_dtype_skip_layers=[])
    return SimpleNamespace(
        model_config=model, cache_config=cache,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1,
                                        decode_context_parallel_size=1, prefill_context_parallel_size=1),
        scheduler_config=SimpleNamespace(enable_chunked_prefill=True, max_num_batched_tokens=MNBT,
                                         async_scheduling=True, disable_hybrid_kv_cache_manager=False,
                                         max_num_encoder_input_tokens=0),
        attention_config=SimpleNamespace(backend=None), speculative_config=None, kv_transfer_config=None,
        num_speculative_tokens=0, max_in_flight_tokens=2 * MNBT, compilation_config=SimpleNamespace(),
        device_config=SimpleNamespace(device_type="cuda"))


def layer_specs(config: dict, vcfg: SimpleNamespace, cls: type) -> dict:
    """``MambaBase.get_kv_cache_spec`` / ``Attention.get_kv_cache_spec`` (no backend hook in 0.27)."""
    cache, model = vcfg.cache_config, vcfg.model_config
    arch = config["architectures"][0]
    shapes = tuple(tuple(s) for s in cls.get_mamba_state_shape_from_config(vcfg))
    dtypes = tuple(cls.get_mamba_state_dtype_from_config(vcfg))
    specs = {}
    for name, kind in layer_caches(config):
        if kind == "mamba":
            specs[name] = MambaSpec(shapes=shapes, dtypes=dtypes, block_size=cache.mamba_block_size,
                                    page_size_padded=cache.mamba_page_size_padded,
                                    mamba_type=MAMBA_TYPE[arch], mamba_cache_mode=cache.mamba_cache_mode)
        else:
            specs[name] = FullAttentionSpec(block_size=cache.block_size,
                                            num_kv_heads=model.get_num_kv_heads(None),
                                            head_size=model.get_head_size(), dtype=torch.bfloat16)
    return specs


def resolve_layout(vcfg: SimpleNamespace, specs: dict) -> None:
    """v0.28+: the engine core's ``resolve_kv_cache_layout`` over the FlashAttention backend's
    layouts (``get_supported_kv_cache_layouts``), read back by ``get_resolved_kv_cache_layout``."""
    try:
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    except ImportError:
        return
    from vllm.v1.kv_cache_layout import KVCacheLayout

    vcfg.cache_config.kv_cache_layout = None
    layouts = [[x.name for x in get_supported_kv_cache_layouts([FlashAttentionBackend])]]
    layout = resolve_kv_cache_layout(vcfg, layouts, specs.values())
    vcfg.cache_config.get_resolved_kv_cache_layout = lambda: KVCacheLayout[layout.name]


def backing_bytes(kv) -> int:
    """The KV memory allocated: up to 0.27 one ``KVCacheTensor`` per layer slot of a group
    (``shared_by`` its layers), each its own allocation — their sum; from 0.28 tensors place layers
    in one backing allocation and overlap ("cache groups overlay each other") — its end."""
    tensors = kv.kv_cache_tensors
    if all(hasattr(t, "shared_by") for t in tensors):
        return sum(t.size for t in tensors)
    return max(t.offset + t.size for t in tensors)


def capacity(vcfg: SimpleNamespace, kv) -> tuple[int, float]:
    """``get_kv_cache_capacity`` (v0.21+); in 0.20.0 ``_report_kv_cache_config`` logs
    ``num_blocks // len(groups) × min block size`` tokens (restated: it only logs) beside the real
    ``get_max_concurrency_for_kv_cache_config``."""
    if hasattr(kv_cache_utils, "get_kv_cache_capacity"):
        return kv_cache_utils.get_kv_cache_capacity(vcfg, kv)
    block = min(g.kv_cache_spec.block_size for g in kv.kv_cache_groups)
    tokens = kv.num_blocks // len(kv.kv_cache_groups) * block
    return tokens, kv_cache_utils.get_max_concurrency_for_kv_cache_config(vcfg, kv)


def main() -> None:
    logging.disable(logging.WARNING)
    vllm_config_module.set_current_vllm_config = lambda *_a, **_k: contextlib.nullcontext()
    Platform._find_non_ssm_backends = classmethod(lambda cls, _cfg: [FlashAttentionBackend])
    cases = []
    for model, (path, preset, tps, max_len) in MODELS.items():
        config = {k: v for k, v in json.loads((ROOT / path).read_text())["config"].items()
                  if not k.startswith("_")}
        arch = config["architectures"][0]
        cls = getattr(importlib.import_module(MODEL_FILES[arch]), arch)
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **{
            k: v for k, v in config.items() if k not in {"model_type", "auto_map"}})
        for tp in tps:
            for pc in (True, False):
                vcfg = namespace(config, hf_config, tp, pc, max_len)
                # 0.20.0 FlashAttentionBackend.get_supported_kernel_block_sizes reads the current config
                flash_attn.get_current_vllm_config = lambda v=vcfg: v
                hook = MODELS_CONFIG_MAP.get(arch)
                if hook is not None and hook is not HybridAttentionMambaModelConfig:
                    hook.verify_and_update_config(vcfg)
                HybridAttentionMambaModelConfig.verify_and_update_config(vcfg)
                Platform._align_hybrid_block_size(vcfg, FlashAttentionBackend)
                cache = vcfg.cache_config
                specs = layer_specs(config, vcfg, cls)
                resolve_layout(vcfg, specs)
                for mem in MEMORY:
                    kv = get_kv_cache_configs(vcfg, [specs], [mem])[0]
                    tokens, conc = capacity(vcfg, kv)
                    blocks = kv.num_blocks
                    for seqs in sorted({256, 1024, blocks, blocks + 1}):
                        compilation = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
                        try:
                            compilation.resolve_cudagraph_mode_and_sizes(
                                AttentionCGSupport.UNIFORM_BATCH, "FlashAttentionBackend", 1,
                                kv_cache_config=kv, max_num_reqs=seqs, **RUNNER_KW)
                            starts, error = True, ""
                        except ValueError as exc:
                            starts, error = False, str(exc)
                        cases.append({
                            "id": f"{model}|tp{tp}|pc{int(pc)}|{mem}|seqs{seqs}", "model": model,
                            "preset": preset, "tp": tp, "prefix_caching": pc, "max_model_len": max_len,
                            "available_memory": mem, "max_num_batched_tokens": MNBT, "async_scheduling": True,
                            "mamba_cache_mode": cache.mamba_cache_mode, "block_size": cache.block_size,
                            "mamba_block_size": cache.mamba_block_size, "num_blocks": blocks,
                            "bytes_per_block": backing_bytes(kv) // blocks,
                            "kv_cache_size_tokens": tokens, "max_concurrency": conc, "max_num_seqs": seqs,
                            "starts": starts, "error": error})
                    print(model, tp, pc, mem, cache.mamba_cache_mode, cache.block_size, blocks, tokens,
                          f"{conc:.2f}", flush=True)
    OUT.write_text(json.dumps({"generator": "tools/vllm_truth/mamba_hybrids_v027.py",
                               "vllm_version": vllm.__version__, "torch_version": torch.__version__,
                               "transformers_version": transformers.__version__, "cases": cases},
                              indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
