"""vLLM's own start-up decisions on CPU → ``tests/fixtures/vllm_truth/startup.json`` (dev-time only).

Run with the venv of ``README.md`` (vLLM 0.33.0 wheel, CPU torch): ``python tools/vllm_truth/startup.py``.
``tests/test_vllm_startup_truth.py`` compares kvplan with every case.

Called as is (vLLM 0.33.0):

* **the Mamba state-block check** — ``CompilationConfig.resolve_cudagraph_mode_and_sizes``
  (``vllm/config/compilation.py``) on the ``KVCacheConfig`` that ``generate.py``'s
  ``plan_case`` builds with vLLM's own ``get_kv_cache_configs``, FULL_AND_PIECEWISE graphs (the
  default), ``max_num_reqs`` = the default or a given ``max_num_seqs``; it raises or returns;
* **the default ``max_num_seqs``** — ``EngineArgs.get_batch_defaults`` (``vllm/engine/arg_utils.py``)
  under ``UsageContext.OPENAI_API_SERVER``, with ``current_platform`` answering each catalogue GPU's
  CUDA total, name and compute capability (the only platform calls it makes);
* **the MoE layout under data parallelism** — ``FusedMoEParallelConfig.make`` (``fused_moe/config.py``,
  the DP group rank stubbed) and ``determine_expert_map`` (``fused_moe/expert_map_manager.py``):
  the MoE TP/EP sizes and the experts of the fullest rank for ``--data-parallel-size`` ×
  ``--tensor-parallel-size`` with and without ``--enable-expert-parallel``;
* **one DP attention rank's pool** — ``get_kv_cache_configs`` / ``get_kv_cache_capacity`` on the
  rank's own TP workers (``dp_rank_pool``) for DeepSeek-V3 and Kimi-K2 (MLA, 64-token blocks).

Hybrid presets: Qwen3-Next, Jamba-1.5-Mini and the Qwen3.5 / Qwen3.6 presets (GDN + full
attention; their SSM state dtype through vLLM's own ``Qwen3_5ForConditionalGenerationConfig`` hook,
``generate.py`` ``ssm_cache_dtype``). A pool too small for one ``max_model_len`` request is
``get_kv_cache_configs``' own refusal, recorded with ``num_blocks: null``.

Written here: the attention backends' CUDA-graph support (``UNIFORM_BATCH``: the FlashAttention /
GDN / Mamba2 builders' level, which keeps FULL decode graphs), the stubbed ``VllmConfig`` of
``generate.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm  # noqa: E402
from generate import AVAILABLE, GIB, MODELS, ROOT, plan_case  # noqa: E402
from vllm.config.compilation import CompilationConfig, CUDAGraphMode  # noqa: E402
from vllm.engine import arg_utils  # noqa: E402
from vllm.model_executor.layers.fused_moe import config as moe_config  # noqa: E402
from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map  # noqa: E402
from vllm.usage.usage_lib import UsageContext  # noqa: E402
from vllm.v1.attention.backend import AttentionCGSupport  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity  # noqa: E402


def state_check(case: dict, max_num_seqs: int) -> dict:
    """vLLM's ``resolve_cudagraph_mode_and_sizes`` on the case's own ``KVCacheConfig``; a pool that
    cannot hold one ``max_model_len`` request is ``get_kv_cache_configs``' own refusal
    (``_check_enough_kv_cache_memory``), recorded with no block count."""
    try:
        _, kv_config = plan_case(MODELS[case["model"]], case)
    except ValueError as exc:
        return {**case, "max_num_seqs": max_num_seqs, "num_blocks": None, "has_mamba_layers": True,
                "starts": False, "error": str(exc)}
    compilation = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    try:
        compilation.resolve_cudagraph_mode_and_sizes(
            AttentionCGSupport.UNIFORM_BATCH, "FlashAttentionBackend", 1, use_v2_model_runner=True,
            kv_cache_config=kv_config, max_num_reqs=max_num_seqs, is_profiling=False)
        starts, error = True, ""
    except ValueError as exc:
        starts, error = False, str(exc)
    return {**case, "max_num_seqs": max_num_seqs, "num_blocks": kv_config.num_blocks,
            "has_mamba_layers": kv_config.has_mamba_layers, "starts": starts, "error": error}


def preset_id(model: str) -> str:
    """The kvplan preset id of a generator model (the preset file's ``id``)."""
    return json.loads((ROOT / MODELS[model]["config_path"]).read_text(encoding="utf-8"))["id"]


def dp_rank_pool(case: dict) -> dict:
    """One data-parallel rank's KV pool: each DP rank's ``EngineCore._initialize_kv_caches``
    (``vllm/v1/engine/core.py``) calls ``get_kv_cache_configs`` on its own ``tp`` workers' specs
    and profiled memory (nothing in ``kv_cache_planning.py`` reads the DP size or syncs block
    counts across DP ranks), so the rank's pool is ``plan_case`` at the attention TP size; the
    capacity line from ``get_kv_cache_capacity``."""
    vcfg, kv_config = plan_case(MODELS[case["model"]], case)
    tokens, concurrency = get_kv_cache_capacity(vcfg, kv_config)
    return {**case, "num_blocks": kv_config.num_blocks,
            "bytes_per_block": kv_config.kv_cache_tensors[0].size // kv_config.num_blocks,
            "kv_cache_size_tokens": tokens, "max_concurrency": concurrency,
            "has_mamba_layers": kv_config.has_mamba_layers}


def batch_default(gpu: dict) -> int:
    """``get_batch_defaults`` for ``vllm serve`` on ``gpu`` (its CUDA total, name, capability)."""
    total = gpu["cuda_total_mib"] * (1 << 20)
    major, minor = (int(x) for x in gpu["compute_capability"].split("."))
    platform = SimpleNamespace(
        get_device_total_memory=lambda: total, get_device_name=lambda: gpu["device_name"],
        is_device_capability=lambda cap: cap == (major, minor), is_tpu=lambda: False,
        is_cpu=lambda: False)
    saved = arg_utils.current_platform
    arg_utils.current_platform = platform
    try:
        _, seqs = arg_utils.EngineArgs.get_batch_defaults(1)
    finally:
        arg_utils.current_platform = saved
    return seqs[UsageContext.OPENAI_API_SERVER]


def moe_layout(tp: int, dp: int, ep: bool, experts: int) -> dict:
    """``FusedMoEParallelConfig.make`` on every rank; the fullest rank's experts."""
    sizes = []
    for dp_rank in range(dp):
        saved = moe_config.get_dp_group
        moe_config.get_dp_group = lambda r=dp_rank: SimpleNamespace(rank_in_group=r)
        try:
            for tp_rank in range(tp):
                saved_tp = moe_config.get_tensor_model_parallel_rank
                moe_config.get_tensor_model_parallel_rank = lambda r=tp_rank: r
                try:
                    cfg = moe_config.FusedMoEParallelConfig.make(
                        tp, 1, dp, 1, SimpleNamespace(enable_expert_parallel=ep, all2all_backend="naive",
                                                      enable_eplb=False))
                finally:
                    moe_config.get_tensor_model_parallel_rank = saved_tp
                local, _, _ = determine_expert_map(cfg.ep_size, cfg.ep_rank, experts)
                sizes.append((cfg.tp_size, cfg.ep_size, local))
        finally:
            moe_config.get_dp_group = saved
    return {"tp": tp, "dp": dp, "enable_expert_parallel": ep, "experts": experts,
            "moe_tp_size": sizes[0][0], "ep_size": sizes[0][1], "max_local_experts": max(s[2] for s in sizes)}


def main() -> None:
    cases = []
    hybrids = (("qwen3-next-80b-a3b", (1, 2, 4, 8), "auto"), ("jamba-1.5-mini", (1, 2), "auto"),
               ("Qwen--Qwen3.5-27B", (1, 2, 4), "auto"), ("Qwen--Qwen3.5-35B-A3B", (1, 2), "auto"),
               ("Qwen--Qwen3.5-122B-A10B", (2, 4), "auto"), ("Qwen--Qwen3.5-397B-A17B", (4, 8), "auto"),
               ("Qwen--Qwen3.6-35B-A3B", (1, 2), "auto"),
               ("nvidia--Qwen3.5-122B-A10B-NVFP4", (1, 2), "fp8"),
               ("nvidia--Qwen3.5-397B-A17B-NVFP4", (4,), "fp8"))
    for model, tps, kv in hybrids:
        for tp in tps:
            for mem in (1 * GIB, 3 * GIB, 8 * GIB, AVAILABLE[0]):
                cid = f"{model}|tp{tp}|mem{mem}" + ("" if kv == "auto" else f"|{kv}")
                case = {"id": cid, "model": model, "preset": preset_id(model), "tp": tp,
                        "kv_dtype": kv, "max_model_len": 32768, "available_memory": mem,
                        "hybrid_manager": None, "max_num_batched_tokens": 8192,
                        "async_scheduling": True}
                for seqs in (1024, 256):
                    cases.append(state_check(case, seqs))
                blocks = cases[-1]["num_blocks"]
                if blocks is None:
                    continue
                for seqs in (blocks, blocks + 1):
                    cases.append(state_check(case, seqs))
    dp_pools = []
    for model in ("deepseek-v3", "kimi-k2"):
        for tp, dp in ((1, 8), (2, 4), (4, 2), (8, 2), (1, 16)):
            for kv, mem in (("auto", 20 * GIB), ("fp8", AVAILABLE[1]), ("auto", 3 * GIB)):
                dp_pools.append(dp_rank_pool({
                    "id": f"{model}|dp{dp}|tp{tp}|{kv}|mem{mem}", "model": model,
                    "preset": preset_id(model), "tp": tp, "dp": dp, "kv_dtype": kv,
                    "max_model_len": 32768, "available_memory": mem, "hybrid_manager": None,
                    "max_num_batched_tokens": 8192, "async_scheduling": True,
                    "mla_block_size": 64}))
    gpus = {}
    for path in sorted((ROOT / "presets/gpus").glob("*.json")):
        gpu = json.loads(path.read_text(encoding="utf-8"))
        if gpu.get("vendor", "").lower() == "nvidia" and gpu.get("cuda_total_mib") \
                and gpu.get("compute_capability"):
            gpus[path.stem] = batch_default(gpu)
    moe = [moe_layout(tp, dp, ep, experts) for experts in (256, 384, 160)
           for tp, dp in ((8, 1), (1, 8), (2, 4), (4, 2), (1, 16))
           for ep in (True, False)]
    payload = {"generator": "tools/vllm_truth/startup.py", "vllm_version": vllm.__version__,
               "state_checks": cases, "default_max_num_seqs": gpus, "moe_layouts": moe,
               "dp_rank_pools": dp_pools}
    out = ROOT / "tests/fixtures/vllm_truth/startup.json"
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{len(cases)} state checks, {len(gpus)} GPUs, {len(moe)} MoE layouts, "
          f"{len(dp_pools)} DP-rank pools → {out}")


if __name__ == "__main__":
    main()
