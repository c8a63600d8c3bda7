"""Mamba-1 / Mamba-2 hybrids (Nemotron-H, Jamba, Falcon-H1) through vLLM's own cache-mode, block
alignment, KV-cache planning and start-up check → ``tests/fixtures/vllm_truth/mamba_hybrids.json``
(dev-time only; the venv of ``README.md``). ``tests/test_vllm_mamba_hybrids.py`` compares kvplan.

``python tools/vllm_truth/mamba_hybrids.py`` (a minute or two: importing the model files).

Called as is (vLLM 0.33.0), in the order ``VllmConfig`` runs them:

* the architecture's config hook (``models/config.py`` ``MODELS_CONFIG_MAP``: NemotronH's
  ``NemotronHForCausalLMConfig`` sets the SSM cache dtype) and, the model being hybrid,
  ``HybridAttentionMambaModelConfig.verify_and_update_config`` → ``MambaModelConfig``: the Mamba
  cache mode from ``enable_prefix_caching`` ("align" / "none") and ``mamba_block_size``
  (``VllmConfig.try_verify_and_update_config``);
* ``Platform._align_hybrid_block_size`` (``platforms/interface.py``) with the FlashAttention backend:
  the attention block raised so one page holds the Mamba state, the Mamba page padded to it (the
  model class's ``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config``
  through ``ModelRegistry.resolve_model_cls``);
* ``MambaSpec`` / ``FullAttentionSpec`` (``customize_attention_spec``), ``get_kv_cache_configs``
  and ``get_kv_cache_capacity`` (``generate.py``'s stub ``VllmConfig``, with this case's cache mode);
* ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` (``config/compilation.py``): FULL_AND_PIECEWISE
  graphs, ``UNIFORM_BATCH`` support, ``max_num_reqs`` = 1,024 / 256 / the block count / one more.

Written here: ``vllm_config`` is a namespace holding what those functions read (TP size, cache
config, bf16 model dtype, ``hf_config`` built by transformers' ``AutoConfig.for_model``, chunked
prefill on, no speculative tokens); ``_find_non_ssm_backends`` answers ``[FlashAttentionBackend]``
(it needs the built model's layers), ``get_mamba_prefill_checkpoint_alignment`` answers None (no
Mamba-1/Mamba-2 mixer declares one: only ``qwen_gdn_linear_attn.py`` overrides
``get_prefill_checkpoint_alignment``), ``set_current_vllm_config`` is a no-op; which layer holds
which cache follows the model files (``nemotron_h.py`` ``hybrid_override_pattern``: "M" Mamba-2,
"*" attention; ``jamba.py`` ``attn_layer_period`` / ``offset``; ``falcon_h1.py``: attention **and** a
Mamba-2 mixer in every layer).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers  # noqa: E402
import vllm  # noqa: E402
from generate import GIB, ROOT, stub_config  # noqa: E402
from vllm.config import vllm as vllm_config_module  # noqa: E402
from vllm.config.compilation import CompilationConfig, CUDAGraphMode  # noqa: E402
from vllm.model_executor.layers.mamba import abstract as mamba_abstract  # noqa: E402
from vllm.model_executor.models.config import (  # noqa: E402
    MODELS_CONFIG_MAP,
    HybridAttentionMambaModelConfig,
)
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backend import AttentionCGSupport  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec  # noqa: E402
from vllm.v1.worker.utils import customize_attention_spec  # noqa: E402

OUT = ROOT / "tests/fixtures/vllm_truth/mamba_hybrids.json"
#: model → (config file, key holding config.json or None, kvplan preset or None: the test parses
#: the config file).
MODELS = {
    "nemotron-3-nano-30b-a3b": ("presets/models/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", "config",
                                "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
    "nemotron-h-56b": ("presets/models/nvidia--Nemotron-H-56B-Base-8K.json", "config",
                       "nvidia/Nemotron-H-56B-Base-8K"),
    "jamba-1.5-mini": ("presets/models/jamba-1.5-mini.json", "config", "jamba-1.5-mini"),
    "falcon-h1-0.5b": ("tests/fixtures/vllm_truth/configs/falcon-h1-0.5b.json", None, None),
}
MODEL_FILES = {"NemotronHForCausalLM": "vllm.model_executor.models.nemotron_h",
               "JambaForCausalLM": "vllm.model_executor.models.jamba",
               "FalconH1ForCausalLM": "vllm.model_executor.models.falcon_h1"}
MAMBA_TYPE = {"NemotronHForCausalLM": MambaAttentionBackendEnum.MAMBA2,
              "FalconH1ForCausalLM": MambaAttentionBackendEnum.MAMBA2,
              "JambaForCausalLM": MambaAttentionBackendEnum.MAMBA1}


def load(path: str, key: str | None) -> dict:
    data = json.loads((ROOT / path).read_text(encoding="utf-8"))
    config = data[key] if key else data
    return {k: v for k, v in config.items() if not k.startswith("_")}


def layer_caches(config: dict) -> list[tuple[str, str]]:
    """(layer name, "attn" | "mamba") for every cache-holding layer, as the model files build them."""
    arch = config["architectures"][0]
    if arch == "NemotronHForCausalLM":
        pattern = config["hybrid_override_pattern"]
        return [(f"model.layers.{i}.mixer", {"M": "mamba", "*": "attn"}[c])
                for i, c in enumerate(pattern) if c in "M*"]
    if arch == "JambaForCausalLM":
        period, offset = config["attn_layer_period"], config["attn_layer_offset"]
        return [(f"model.layers.{i}.{'self_attn' if i % period == offset else 'mamba'}",
                 "attn" if i % period == offset else "mamba")
                for i in range(config["num_hidden_layers"])]
    out = []  # FalconH1DecoderLayer: self_attn and mamba in every layer
    for i in range(config["num_hidden_layers"]):
        out += [(f"model.layers.{i}.self_attn.attn", "attn"), (f"model.layers.{i}.mamba", "mamba")]
    return out


def vllm_namespace(config: dict, hf_config, tp: int, prefix_caching: bool, max_model_len: int):
    arch = config["architectures"][0]
    nkv = config.get("num_key_value_heads") or config["num_attention_heads"]
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    cache = SimpleNamespace(
        block_size=16, user_specified_block_size=False, cache_dtype="auto",
        enable_prefix_caching=prefix_caching, mamba_cache_mode="none", mamba_block_size=None,
        mamba_page_size_padded=None, mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto",
        use_replayssm=False, kv_cache_dtype_skip_layers=[])
    model = SimpleNamespace(
        architecture=arch, architectures=[arch], hf_config=hf_config, hf_text_config=hf_config,
        dtype=torch.bfloat16, use_mla=False, is_hybrid=True, max_model_len=max_model_len,
        get_num_kv_heads=lambda _pc: max(1, nkv // tp), get_head_size=lambda: head,
        convert_type="none", runner_type="generate", model="x", trust_remote_code=False,
        model_impl="auto")
    return SimpleNamespace(
        model_config=model, cache_config=cache,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1,
                                        decode_context_parallel_size=1),
        scheduler_config=SimpleNamespace(enable_chunked_prefill=True), num_speculative_tokens=0,
        speculative_config=None, compilation_config=SimpleNamespace())


def resolve(config: dict, hf_config, model_cls, tp: int, prefix_caching: bool, max_model_len: int):
    """vLLM's own hooks on the namespace: cache mode, SSM dtype, block alignment, padding."""
    vcfg = vllm_namespace(config, hf_config, tp, prefix_caching, max_model_len)
    hook = MODELS_CONFIG_MAP.get(config["architectures"][0])
    if hook is not None and hook is not HybridAttentionMambaModelConfig:
        hook.verify_and_update_config(vcfg)
    HybridAttentionMambaModelConfig.verify_and_update_config(vcfg)
    Platform._align_hybrid_block_size(vcfg, FlashAttentionBackend)
    return vcfg


def specs_for(config: dict, vcfg, model_cls) -> dict:
    cache, model = vcfg.cache_config, vcfg.model_config
    shapes = tuple(tuple(s) for s in model_cls.get_mamba_state_shape_from_config(vcfg))
    dtypes = tuple(model_cls.get_mamba_state_dtype_from_config(vcfg))
    specs = {}
    for name, kind in layer_caches(config):
        if kind == "mamba":  # MambaBase.get_kv_cache_spec (layers/mamba/abstract.py)
            specs[name] = MambaSpec(
                shapes=shapes, dtypes=dtypes, block_size=cache.mamba_block_size,
                page_size_padded=cache.mamba_page_size_padded,
                mamba_type=MAMBA_TYPE[model.architecture], mamba_cache_mode=cache.mamba_cache_mode,
                num_speculative_blocks=0)
        else:
            specs[name] = customize_attention_spec(FlashAttentionBackend, FullAttentionSpec(
                block_size=cache.block_size, num_kv_heads=model.get_num_kv_heads(None),
                head_size=model.get_head_size(), dtype=torch.bfloat16))
    return specs


def state_check(kv_config, max_num_seqs: int) -> tuple[bool, str]:
    compilation = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    try:
        compilation.resolve_cudagraph_mode_and_sizes(
            AttentionCGSupport.UNIFORM_BATCH, "FlashAttentionBackend", 1, use_v2_model_runner=True,
            kv_cache_config=kv_config, max_num_reqs=max_num_seqs, is_profiling=False)
        return True, ""
    except ValueError as exc:
        return False, str(exc)


GRID = {  # model → (TP sizes, max_model_len)
    "nemotron-3-nano-30b-a3b": ((1, 2, 4), 32768),
    "nemotron-h-56b": ((2, 4, 8), 8192),
    "jamba-1.5-mini": ((1, 2), 32768),
    "falcon-h1-0.5b": ((1, 2), 16384),
}
MEMORY = (1 * GIB, 4 * GIB, 20 * GIB)


def main() -> None:
    logging.disable(logging.WARNING)
    vllm_config_module.set_current_vllm_config = lambda *_a, **_k: contextlib.nullcontext()
    Platform._find_non_ssm_backends = classmethod(lambda cls, _cfg: [FlashAttentionBackend])
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda _cfg: None
    cases = []
    for model, (path, key, preset) in MODELS.items():
        config = load(path, key)
        arch = config["architectures"][0]
        model_cls = getattr(importlib.import_module(MODEL_FILES[arch]), arch)
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **{
            k: v for k, v in config.items() if k not in {"model_type", "auto_map"}})
        tps, max_len = GRID[model]
        for tp in tps:
            for pc in (True, False):
                vcfg = resolve(config, hf_config, model_cls, tp, pc, max_len)
                specs = specs_for(config, vcfg, model_cls)
                for mem in MEMORY:
                    stub = stub_config(max_len, tp, 8192, True, True)
                    stub.cache_config.enable_prefix_caching = pc
                    stub.cache_config.mamba_cache_mode = vcfg.cache_config.mamba_cache_mode
                    layouts = [[x.name for x in get_supported_kv_cache_layouts([FlashAttentionBackend])]]
                    stub.cache_config.kv_cache_layout = resolve_kv_cache_layout(
                        stub, layouts, specs.values()).name
                    groups = get_global_kv_cache_groups(stub, [dict(specs)])
                    base = {"model": model, "preset": preset, "tp": tp, "prefix_caching": pc,
                            "max_model_len": max_len, "available_memory": mem,
                            "max_num_batched_tokens": 8192, "async_scheduling": True,
                            "mamba_cache_mode": vcfg.cache_config.mamba_cache_mode,
                            "block_size": vcfg.cache_config.block_size,
                            "mamba_block_size": vcfg.cache_config.mamba_block_size,
                            "mamba_page_size_padded": vcfg.cache_config.mamba_page_size_padded,
                            "mamba_ssm_cache_dtype": vcfg.cache_config.mamba_ssm_cache_dtype}
                    try:
                        kv_config = get_kv_cache_configs(stub, [specs], [mem], groups)[0]
                    except ValueError as exc:
                        cases.append({**base, "id": f"{model}|tp{tp}|pc{int(pc)}|{mem}", "num_blocks": None,
                                      "error": str(exc)})
                        print(cases[-1]["id"], "refused", flush=True)
                        continue
                    tokens, conc = get_kv_cache_capacity(stub, kv_config)
                    blocks = kv_config.num_blocks
                    pool = {**base, "num_blocks": blocks,
                            "bytes_per_block": kv_config.kv_cache_tensors[0].size // blocks,
                            "kv_cache_size_tokens": tokens, "max_concurrency": conc,
                            "groups": [{"layers": len(g.layer_names), "type": type(g.kv_cache_spec).__name__,
                                        "block_size": g.kv_cache_spec.block_size,
                                        "page_size_bytes": g.kv_cache_spec.page_size_bytes}
                                       for g in kv_config.kv_cache_groups]}
                    for seqs in sorted({1024, 256, blocks, blocks + 1}):
                        starts, error = state_check(kv_config, seqs)
                        cases.append({**pool, "id": f"{model}|tp{tp}|pc{int(pc)}|{mem}|seqs{seqs}",
                                      "max_num_seqs": seqs, "starts": starts, "error": error})
                    print(pool["model"], tp, pc, mem, base["mamba_cache_mode"], base["block_size"],
                          blocks, tokens, f"{conc:.2f}", flush=True)
    out = {"generator": "tools/vllm_truth/mamba_hybrids.py", "vllm_version": vllm.__version__,
           "torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "sources": {m: p for m, (p, _, _) in MODELS.items()}, "cases": cases}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
