"""Dev-time truth generator: run vLLM's own KV-cache planning on a grid of real configs.

Run with a venv that has vLLM installed (see ``README.md`` here); CI never runs this file, it
only reads the JSON it writes (``tests/fixtures/vllm_truth/cases.json``).

What is vLLM's code and what is not:

* vLLM's code, called as is: the spec classes (``vllm/v1/kv_cache_interface.py``), the
  grouping, page unification, hybrid-off promotion, block-stride and block-count arithmetic
  (``vllm/v1/core/kv_cache_planning.py`` ``get_global_kv_cache_groups``,
  ``get_kv_cache_configs``), the logged capacity (``vllm/v1/core/kv_cache_utils.py``
  ``get_kv_cache_capacity``), the in-flight tokens (``vllm/config/vllm.py``
  ``VllmConfig.max_concurrent_batches`` / ``max_in_flight_tokens``, called on the stub), the
  auto dtype (``vllm/config/model.py`` ``_resolve_auto_dtype``), the Mamba state shapes and
  dtypes (``vllm/model_executor/layers/mamba/mamba_utils.py``), the backend's spec hook
  (``vllm/v1/worker/utils.py`` ``customize_attention_spec`` with ``FlashAttentionBackend``),
  the layout resolution (``vllm/v1/attention/backends/utils.py`` ``resolve_kv_cache_layout``)
  and the chunked-local switch (``vllm/envs.py``
  ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``).
* Written here (vLLM needs a GPU and the model weights to build them), each citing the vLLM
  code it follows: which layer gets which spec (``layer_specs``), the hybrid-manager default
  (``hma_default``, ``VllmConfig.__post_init__``), the attention block raised for Mamba
  hybrids (``mamba_block_size``, ``Platform._align_hybrid_block_size``) and the ``VllmConfig``
  stub itself (``stub_config``: only the attributes the planning code reads).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import torch
import vllm
from vllm import envs
from vllm.config import model as vllm_model_config
from vllm.config.vllm import VllmConfig
from vllm.distributed.utils import get_pp_indices
from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.attention.backends.utils import (
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    get_kv_quant_mode,
)
from vllm.v1.worker.utils import customize_attention_spec

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
#: CUDA SM ≥ 8.0 (``vllm/platforms/cuda.py`` ``CudaPlatform.supported_dtypes``).
CUDA_SUPPORTED_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
               torch.uint8: "uint8"}


def load_config(entry: dict) -> dict:
    """The config.json of a model entry: a preset's ``config`` or a fixture file, plus overrides."""
    data = json.loads((ROOT / entry["config_path"]).read_text())
    if entry["config_path"].startswith("presets/"):
        data = data["config"]
    data = {**data, **entry.get("config_overrides", {})}
    return data


def text_config(cfg: dict) -> dict:
    """The language model's config (``text_config`` for multimodal wrappers)."""
    text = cfg.get("text_config")
    return {**text} if isinstance(text, dict) and not cfg.get("num_hidden_layers") else cfg


def model_dtype(cfg: dict) -> torch.dtype:
    """``ModelConfig`` dtype with ``dtype="auto"``: the config's ``dtype``/``torch_dtype``
    (float32 when absent, as transformers' ``PretrainedConfig``), through vLLM's own
    ``_resolve_auto_dtype`` on a CUDA SM ≥ 8.0 platform."""
    text = text_config(cfg)
    name = (cfg.get("dtype") or cfg.get("torch_dtype") or text.get("dtype")
            or text.get("torch_dtype") or "float32")
    config_dtype = STR_DTYPE_TO_TORCH_DTYPE[name]
    saved = vllm_model_config.current_platform
    vllm_model_config.current_platform = SimpleNamespace(supported_dtypes=CUDA_SUPPORTED_DTYPES)
    try:
        return vllm_model_config._resolve_auto_dtype(
            text.get("model_type", ""), config_dtype, is_pooling_model=False)
    finally:
        vllm_model_config.current_platform = saved


def layer_kinds(cfg: dict) -> list[tuple[str, int | None]]:
    """(kind, window) per decoder layer, as the vLLM model files build their attention layers.

    * ``layer_types`` when present (Gemma 3, gpt-oss ``models/gpt_oss.py``, Qwen3-Next
      ``models/qwen3_next.py``): ``sliding_attention`` → sliding, ``linear_attention`` → gdn.
    * Gemma 2 (``models/gemma2.py``): even layers use ``config.sliding_window``.
    * Gemma 3 without ``layer_types``: ``(i + 1) % sliding_window_pattern != 0`` is sliding.
    * Llama 4 (``models/llama4.py``): NoPE layers (``no_rope_layers[i] == 0``, default every
      4th) are full; the others ``ChunkedLocalAttention(attention_chunk_size)``.
    * Mistral v0.1 / Phi-3 (``sliding_window`` and no ``layer_types``): every layer sliding
      (``vllm/config/model.py`` ``get_sliding_window`` feeds every ``Attention``).
    * Qwen3-Next without ``layer_types``: transformers' default, every
      ``full_attention_interval``-th layer full, the others Gated DeltaNet.
    * Jamba (``models/jamba.py``): attention where ``i % attn_layer_period ==
      attn_layer_offset``, Mamba1 elsewhere.
    * DeepSeek V2/V3 (``models/deepseek_v2.py``): MLA on every layer.
    """
    text = text_config(cfg)
    mt = text.get("model_type", "")
    n = text["num_hidden_layers"]
    window = text.get("sliding_window")
    if mt in {"deepseek_v2", "deepseek_v3", "kimi_k2"}:
        return [("mla", None)] * n
    if mt == "jamba":
        period, offset = text["attn_layer_period"], text["attn_layer_offset"]
        return [("full", None) if i % period == offset else ("mamba1", None) for i in range(n)]
    if mt in {"llama4", "llama4_text"}:
        interval = text.get("no_rope_layer_interval", 4)
        nope = text.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        chunk = text["attention_chunk_size"]
        return [("chunked", chunk) if nope[i] else ("full", None) for i in range(n)]
    types = text.get("layer_types")
    if not types and mt == "qwen3_next":  # transformers Qwen3NextConfig default layer_types
        interval = text.get("full_attention_interval", 4)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    if types:
        out = []
        for t in types:
            if t == "sliding_attention":
                out.append(("sliding", window))
            elif t == "linear_attention":
                out.append(("gdn", None))
            else:
                out.append(("full", None))
        return out
    if mt == "gemma2":
        return [("sliding", window) if i % 2 == 0 else ("full", None) for i in range(n)]
    if mt in {"gemma3", "gemma3_text"}:
        pattern = (text.get("sliding_window_pattern") or text.get("_sliding_window_pattern")
                   or 6)  # transformers Gemma3TextConfig default
        return [("sliding", window) if (i + 1) % pattern else ("full", None) for i in range(n)]
    if window and text.get("use_sliding_window") is not False:
        return [("sliding", window)] * n
    return [("full", None)] * n


def kv_heads(text: dict, tp: int) -> int:
    """``max(1, total_num_kv_heads // tp)`` (``models/llama.py`` and the others)."""
    total = text.get("num_key_value_heads") or text["num_attention_heads"]
    return max(1, total // tp)


def head_dim(text: dict) -> int:
    return text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]


def ssm_cache_dtype(cfg: dict) -> str:
    """``cache_config.mamba_ssm_cache_dtype`` after vLLM's own per-architecture hook
    (``vllm/model_executor/models/config.py`` ``MODELS_CONFIG_MAP[arch].verify_and_update_config``,
    run from ``VllmConfig.try_verify_and_update_config`` before the hybrid block alignment): Qwen3.5
    (``Qwen3_5ForConditionalGenerationConfig``) takes the text config's ``mamba_ssm_dtype``; "auto"
    when the architecture has no hook or the hook leaves it."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP, Qwen3_5ForConditionalGenerationConfig

    hook = MODELS_CONFIG_MAP.get((cfg.get("architectures") or [""])[0])
    if hook is None or not issubclass(hook, Qwen3_5ForConditionalGenerationConfig):
        return "auto"  # other hooks need a full ModelConfig; none of them touches the SSM dtype here
    stub = SimpleNamespace(cache_config=SimpleNamespace(mamba_ssm_cache_dtype="auto"),
                           model_config=SimpleNamespace(hf_text_config=SimpleNamespace(**text_config(cfg))))
    hook.verify_and_update_config(stub)
    return stub.cache_config.mamba_ssm_cache_dtype


def mamba_spec(text: dict, kind: str, tp: int, dtype: torch.dtype, block: int,
               padded: int | None, ssm_dtype: str = "auto") -> MambaSpec:
    """``MambaBase.get_kv_cache_spec`` (``layers/mamba/abstract.py``) in "align" mode: shapes
    and dtypes from ``MambaStateShapeCalculator`` / ``MambaStateDtypeCalculator``."""
    if kind == "gdn":
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp, text["linear_num_key_heads"], text["linear_num_value_heads"],
            text["linear_key_head_dim"], text["linear_value_head_dim"],
            text["linear_conv_kernel_dim"], 0)
        dtypes = MambaStateDtypeCalculator.gated_delta_net_state_dtype(dtype, "auto", ssm_dtype)
        mtype = MambaAttentionBackendEnum.GDN_ATTN
    else:
        shapes = MambaStateShapeCalculator.mamba1_state_shape(
            tp, text["mamba_expand"] * text["hidden_size"], text["mamba_d_state"],
            text["mamba_d_conv"])
        dtypes = MambaStateDtypeCalculator.mamba1_state_dtype(dtype, "auto", ssm_dtype)
        mtype = MambaAttentionBackendEnum.MAMBA1
    return MambaSpec(shapes=tuple(shapes), dtypes=tuple(dtypes), block_size=block,
                     page_size_padded=padded, mamba_type=mtype, mamba_cache_mode="align")


def mamba_block_size(text: dict, kinds: list, tp: int, dtype: torch.dtype,
                     attn_token_bytes: int, ssm_dtype: str = "auto") -> tuple[int, int | None]:
    """``Platform._align_hybrid_block_size`` (``vllm/platforms/interface.py``) for FlashAttention
    (kernel sizes ``MultipleOf(16)``), "align" mode without prefill checkpoints:
    ``block = 16 · cdiv(mamba_page, 16 · attention bytes per token)``; the Mamba page padded to
    the attention page."""
    kind = next(k for k, _ in kinds if k in {"gdn", "mamba1"})
    page = mamba_spec(text, kind, tp, dtype, 16, None, ssm_dtype).page_size_bytes
    align = 16
    block = align * math.ceil(page / (align * attn_token_bytes))
    block = max(block, 16)
    attn_page = block * attn_token_bytes
    return block, (attn_page if attn_page != page else None)


def layer_specs(cfg: dict, tp: int, kv_dtype: str, mla_block: int) -> tuple[dict, torch.dtype]:
    """The per-rank ``{layer_name: KVCacheSpec}`` one worker reports (``get_kv_cache_spec``)."""
    text = text_config(cfg)
    mdtype = model_dtype(cfg)
    dtype = mdtype if kv_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv_dtype]
    quant = get_kv_quant_mode(kv_dtype)
    kinds = layer_kinds(cfg)
    specs: dict = {}
    block, padded = 16, None
    ssm_dtype = ssm_cache_dtype(cfg)
    if any(k in {"gdn", "mamba1"} for k, _ in kinds):
        per_token = 2 * kv_heads(text, tp) * head_dim(text) * dtype.itemsize
        block, padded = mamba_block_size(text, kinds, tp, mdtype, per_token, ssm_dtype)
    for i, (kind, window) in enumerate(kinds):
        name = f"model.layers.{i}.attn"
        if kind in {"gdn", "mamba1"}:
            specs[name] = mamba_spec(text, kind, tp, mdtype, block, padded, ssm_dtype)
            continue
        if kind == "mla":
            specs[name] = MLAAttentionSpec(
                block_size=mla_block, num_kv_heads=1, max_tp_shards=1,
                head_size=text["kv_lora_rank"] + text["qk_rope_head_dim"], dtype=dtype,
                cache_dtype_str=kv_dtype, kv_quant_mode=quant)
            continue
        common = dict(block_size=block, num_kv_heads=kv_heads(text, tp), head_size=head_dim(text),
                      dtype=dtype, kv_quant_mode=quant)
        if kind == "sliding":
            spec = SlidingWindowSpec(**common, sliding_window=window)
        elif kind == "chunked":
            spec = ChunkedLocalAttentionSpec(**common, attention_chunk_size=window)
        else:
            spec = FullAttentionSpec(**common)
        specs[name] = customize_attention_spec(FlashAttentionBackend, spec)
    return specs, mdtype


def hma_default(text: dict) -> bool:
    """``VllmConfig.__post_init__`` (``vllm/config/vllm.py``): the hybrid manager is on unless a
    chunked-local model runs with ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0``
    (default 1 in ``vllm/envs.py``) or EAGLE (not modelled here)."""
    chunked = text.get("attention_chunk_size") is not None
    return not (chunked and not envs.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE)


def stub_config(max_model_len: int, tp: int, mnbt: int, hybrid: bool, async_sched: bool,
                pp: int = 1, layout: str | None = None) -> SimpleNamespace:
    """The attributes of ``VllmConfig`` the planning code reads (nothing else is set)."""
    cfg = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=max_model_len,
                                     original_max_model_len=max_model_len,
                                     supports_kv_cache_grouping=False, architectures=[]),
        cache_config=SimpleNamespace(num_gpu_blocks_override=None, kv_cache_layout=layout,
                                     prefix_cache_retention_interval=None,
                                     enable_prefix_caching=True, mamba_cache_mode="align",
                                     kv_cache_size_tokens=None, kv_cache_max_concurrency=None),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                        decode_context_parallel_size=1),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=mnbt,
                                         async_scheduling=async_sched,
                                         disable_hybrid_kv_cache_manager=not hybrid,
                                         max_num_encoder_input_tokens=0),
        attention_config=SimpleNamespace(hisparse_config=None),
        device_config=SimpleNamespace(device_type="cuda"),
        kv_transfer_config=None, speculative_config=None, use_v2_model_runner=True,
    )
    cfg.max_concurrent_batches = VllmConfig.max_concurrent_batches.fget(cfg)
    cfg.max_in_flight_tokens = VllmConfig.max_in_flight_tokens.fget(cfg)
    cfg.num_prefill_lookahead_tokens = VllmConfig.num_prefill_lookahead_tokens.fget(cfg)
    from vllm.v1.kv_cache_layout import KVCacheLayout

    def resolved():
        return KVCacheLayout[cfg.cache_config.kv_cache_layout]

    cfg.cache_config.get_resolved_kv_cache_layout = resolved
    return cfg


def spec_summary(spec) -> dict:
    first = spec.first_spec if isinstance(spec, UniformTypeKVCacheSpecs) else spec
    out = {"type": type(spec).__name__, "block_size": spec.block_size,
           "page_size_bytes": spec.page_size_bytes}
    for attr in ("sliding_window", "attention_chunk_size"):
        if getattr(first, attr, None):
            out[attr] = getattr(first, attr)
    return out


def plan_case(model: dict, case: dict):
    """vLLM's ``VllmConfig`` stub and the largest worker's ``KVCacheConfig`` for ``case`` (also
    read by ``startup.py``)."""
    return _plan(model, case)[:2]


def run_case(model: dict, case: dict) -> dict:
    vcfg, kv_config, hybrid, mdtype, specs, layout = _plan(model, case)
    tokens, concurrency = get_kv_cache_capacity(vcfg, kv_config)
    return _result(case, vcfg, kv_config, hybrid, mdtype, specs, layout, tokens, concurrency)


def _plan(model: dict, case: dict):
    cfg = load_config(model)
    text = text_config(cfg)
    hybrid = hma_default(text) if case["hybrid_manager"] is None else case["hybrid_manager"]
    specs, mdtype = layer_specs(cfg, case["tp"], case["kv_dtype"], case.get("mla_block_size", 16))
    pp = case.get("pp", 1)
    vcfg = stub_config(case["max_model_len"], case["tp"], case["max_num_batched_tokens"], hybrid,
                       case["async_scheduling"], pp)
    layouts = [[x.name for x in get_supported_kv_cache_layouts([FlashAttentionBackend])]]
    layout = resolve_kv_cache_layout(vcfg, layouts, specs.values())
    vcfg.cache_config.kv_cache_layout = layout.name
    names = list(specs)
    workers = []  # one PP stage per worker, layers split by get_pp_indices
    for rank in range(pp):
        start, stop = get_pp_indices(len(names), rank, pp)
        workers.append({n: specs[n] for n in names[start:stop]})
    groups = get_global_kv_cache_groups(vcfg, [dict(w) for w in workers])
    configs = get_kv_cache_configs(vcfg, workers, [case["available_memory"]] * pp, groups)
    kv_config = max(configs, key=lambda c: c.kv_cache_tensors[0].size)
    return vcfg, kv_config, hybrid, mdtype, specs, layout


def _result(case, vcfg, kv_config, hybrid, mdtype, specs, layout, tokens, concurrency) -> dict:
    bytes_per_block = kv_config.kv_cache_tensors[0].size // kv_config.num_blocks \
        if kv_config.num_blocks else None
    blocks_per_request = sum(
        -(-g.kv_cache_spec.max_memory_usage_bytes(vcfg) // g.kv_cache_spec.page_size_bytes)
        for g in kv_config.kv_cache_groups)
    return {
        **case,
        "hybrid_manager_effective": hybrid,
        "model_dtype": DTYPE_NAMES[mdtype],
        "kv_torch_dtype": DTYPE_NAMES[next(iter(specs.values())).dtypes[0]
                                      if isinstance(next(iter(specs.values())), MambaSpec)
                                      else next(iter(specs.values())).dtype],
        "in_flight_tokens": vcfg.max_in_flight_tokens,
        "layout": layout.name,
        "num_blocks": kv_config.num_blocks,
        "bytes_per_block": bytes_per_block,
        "blocks_per_request": blocks_per_request,
        "max_concurrency": concurrency,
        "kv_cache_size_tokens": tokens,
        "groups": [{"layers": len(g.layer_names), **spec_summary(g.kv_cache_spec)}
                   for g in kv_config.kv_cache_groups],
        "log": (f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
                f"{case['max_model_len']:,} tokens per request: {concurrency:.2f}x"),
    }


MODELS = {
    "llama-3.1-8b": {"config_path": "presets/models/llama-3.1-8b.json"},
    "llama-2-7b": {"config_path": "presets/models/llama-2-7b.json"},
    "mistral-7b-v0.1": {"config_path": "presets/models/mistral-7b-v0.1.json"},
    "phi-3-mini": {"config_path": "presets/models/phi-3-mini.json"},
    "gemma-2-9b": {"config_path": "presets/models/gemma-2-9b.json"},
    "gemma-3-12b": {"config_path": "presets/models/gemma-3-12b.json"},
    "gemma-3-27b": {"config_path": "presets/models/gemma-3-27b.json"},
    "gpt-oss-20b": {"config_path": "presets/models/gpt-oss-20b.json"},
    "gpt-oss-120b": {"config_path": "presets/models/gpt-oss-120b.json"},
    "llama-4-scout": {"config_path": "presets/models/llama-4-scout.json"},
    "deepseek-v2-lite": {"config_path": "presets/models/deepseek-v2-lite.json"},
    "deepseek-v3": {"config_path": "presets/models/deepseek-v3.json"},
    "kimi-k2": {"config_path": "presets/models/kimi-k2.json"},
    "qwen3-next-80b-a3b": {"config_path": "presets/models/qwen3-next-80b-a3b.json"},
    "jamba-1.5-mini": {"config_path": "presets/models/jamba-1.5-mini.json"},
    **{stem: {"config_path": f"presets/models/{stem}.json"} for stem in (
        "Qwen--Qwen3.5-27B", "Qwen--Qwen3.5-35B-A3B", "Qwen--Qwen3.5-122B-A10B",
        "Qwen--Qwen3.5-397B-A17B", "Qwen--Qwen3.6-35B-A3B", "nvidia--Qwen3.5-122B-A10B-NVFP4",
        "nvidia--Qwen3.5-397B-A17B-NVFP4")},
    "qwen2-float32": {"config_path": "tests/fixtures/configs/qwen2.json",
                      "config_overrides": {"torch_dtype": "float32"}},
    "qwen2-float32-dtype-key": {"config_path": "tests/fixtures/configs/qwen2.json",
                                "config_overrides": {"torch_dtype": None, "dtype": "float32"}},
}
AVAILABLE = [20 * GIB, 61_540_000_000]


def grid() -> list[dict]:
    """The case grid: every model × a few TP/dtype/length/memory points, plus targeted cases."""
    cases = []

    def add(model, tp=1, kv="auto", L=32768, mem=AVAILABLE[0], hybrid=None, mnbt=8192,
            async_sched=True, mla=16, pp=1):
        cid = f"{model}|tp{tp}|{kv}|L{L}|mem{mem}|hma{hybrid}|mnbt{mnbt}|async{int(async_sched)}"
        if pp > 1:
            cid += f"|pp{pp}"
        is_mla = model.startswith("deepseek")
        if is_mla:
            cid += f"|mla{mla}"
        case = {"id": cid, "model": model, "tp": tp, "kv_dtype": kv, "max_model_len": L,
                "available_memory": mem, "hybrid_manager": hybrid,
                "max_num_batched_tokens": mnbt, "async_scheduling": async_sched}
        if is_mla:
            case["mla_block_size"] = mla
        if pp > 1:
            case["pp"] = pp
        cases.append(case)

    for model in ("llama-3.1-8b", "llama-2-7b"):
        for tp in (1, 2, 8):
            for kv in ("auto", "fp8"):
                add(model, tp=tp, kv=kv, L=32768 if model != "llama-2-7b" else 4096)
        add(model, L=4095, mem=AVAILABLE[1])
    for model in ("mistral-7b-v0.1", "phi-3-mini"):
        for hybrid in (None, False):
            for L in (4096, 32768):
                add(model, L=L, hybrid=hybrid)
        add(model, tp=2, kv="fp8", mem=AVAILABLE[1], mnbt=2048)
    for model in ("gemma-2-9b", "gemma-3-12b", "gemma-3-27b"):
        for hybrid in (None, False):
            add(model, hybrid=hybrid)
        add(model, tp=2, kv="fp8", L=131072, mem=AVAILABLE[1])
        add(model, L=4096, mnbt=2048, async_sched=False)
    for model in ("gpt-oss-20b", "gpt-oss-120b"):
        for hybrid in (None, False):
            for L in (4096, 131072):
                add(model, L=L, hybrid=hybrid)
        add(model, tp=8, kv="fp8", L=131072, mem=AVAILABLE[1])
    for model in ("gpt-oss-20b", "gemma-2-9b", "llama-3.1-8b"):  # in-flight tokens under PP
        for async_sched in (True, False):
            add(model, pp=2, L=131072 if model == "gpt-oss-20b" else 32768, async_sched=async_sched)
    for hybrid in (None, True, False):
        for L in (32768, 131072):
            add("llama-4-scout", tp=8, L=L, hybrid=hybrid, mem=AVAILABLE[1])
    add("llama-4-scout", tp=2, kv="fp8", L=4096)
    for model in ("deepseek-v2-lite", "deepseek-v3"):
        for mla in (16, 32, 64):
            add(model, tp=8 if model == "deepseek-v3" else 1, L=32768, mla=mla, mem=AVAILABLE[1])
        add(model, tp=2, kv="fp8", L=131072, mla=64)
        add(model, L=4096, mla=16)
    for model in ("qwen3-next-80b-a3b", "jamba-1.5-mini"):
        for tp in (1, 2, 8) if model == "qwen3-next-80b-a3b" else (1, 2):
            add(model, tp=tp, L=32768)
        add(model, L=131072, mem=AVAILABLE[1])
    for model in ("qwen2-float32", "qwen2-float32-dtype-key"):
        add(model, L=32768)
        add(model, tp=2, L=4096, mem=AVAILABLE[1])
        add(model, kv="fp8", L=32768)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/vllm_truth/cases.json")
    args = parser.parse_args()
    results, skipped = [], []
    for case in grid():
        try:
            results.append(run_case(MODELS[case["model"]], case))
        except (ValueError, AssertionError, NotImplementedError) as exc:
            skipped.append({"id": case["id"], "error": f"{type(exc).__name__}: {exc}"[:300]})
    payload = {
        "generator": "tools/vllm_truth/generate.py",
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "env": {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE":
                os.environ.get("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "(default)")},
        "backend": "FLASH_ATTN (non-MLA; MLA specs use the given block size)",
        "models": {k: v for k, v in MODELS.items() if k in {c["model"] for c in grid()}},
        "cases": results,
        "refused": skipped,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"{len(results)} cases, {len(skipped)} refused by vLLM → {args.out}")


if __name__ == "__main__":
    main()
