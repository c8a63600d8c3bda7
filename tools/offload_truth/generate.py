"""Dev-time generator: vLLM 0.33's and LMCache 0.5.6's own offload sizing code, run on CPU.

Writes ``tests/fixtures/offload/truth.json``; ``tests/test_offload_truth.py`` compares kvplan with
every case, exactly. Not run in CI (see README.md for the environment).

Called as is:
* vLLM 0.33.0 — ``FullAttentionSpec`` / ``MLAAttentionSpec.page_size_bytes``
  (v1/kv_cache_interface.py), the ``OffloadingConfig`` records (v1/kv_offload/config.py) and
  ``CPUOffloadingSpec.__init__`` (v1/kv_offload/cpu/spec.py): ``num_chunks`` and
  ``kv_bytes_per_chunk`` from ``cpu_bytes_to_use`` exactly as ``_post_init_kv_transfer_config`` passes
  it (``kv_offloading_size * (1 << 30)``).
* LMCache 0.5.6 — ``LMCacheMetadata.get_shapes`` (v1/metadata.py), ``lmcache.utils.get_size_bytes`` and
  ``AddressManager`` (v1/memory_management.py), allocating one chunk after another until the address
  space refuses: the count of chunks that fit ``max_local_cpu_size``.

Written here (read from the engines, not called): the per-rank shape vLLM hands over —
``get_num_layers`` = ``num_hidden_layers`` (PP 1), ``get_num_kv_heads`` = ``max(1, nkv // tp)``,
``get_head_size`` (``head_dim`` or ``hidden_size // heads``; MLA ``kv_lora_rank + qk_rope_head_dim``),
worker bytes per block = page × layers (one KV-cache group); the replicated-layout flag
(``build_offloading_config``: pure MLA, TP > 1, PP 1, one node); ``current_platform.is_cuda_alike``
patched to True so ``_uses_shared_region`` answers as on a CUDA machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "offload" / "truth.json"
DTYPES = {"bf16": torch.bfloat16, "fp8": torch.uint8}

# (preset, tp, kv dtype, backend, size GiB, chunk tokens or None)
CASES = [
    ("llama-3.1-70b", 8, "bf16", "native", 400.0, None),
    ("llama-3.1-70b", 8, "bf16", "native", 400.0, 256),
    ("llama-3.1-70b", 4, "fp8", "native", 123.5, 64),
    ("llama-3.1-8b", 1, "bf16", "native", 64.0, None),
    ("deepseek-v3", 8, "bf16", "native", 100.0, None),
    ("deepseek-v3", 8, "bf16", "native", 7.25, 32),
    ("llama-3.1-70b", 8, "bf16", "lmcache", 50.0, 256),
    ("llama-3.1-8b", 1, "bf16", "lmcache", 5.0, 256),
    ("llama-3.1-8b", 2, "fp8", "lmcache", 3.3, 100),
    ("deepseek-v3", 8, "bf16", "lmcache", 20.0, 256),
    ("Qwen--Qwen3.5-27B", 2, "bf16", "lmcache", 30.0, 256),
    ("deepseek-v3", 8, "bf16", "lmcache", 1.0, 7),
]


def _config(preset: str) -> dict:
    raw = json.loads((ROOT / "presets" / "models" / f"{preset}.json").read_text())["config"]
    return raw.get("text_config", raw)


def _shape(cfg: dict, tp: int) -> tuple[int, int, int, bool]:
    layers = cfg["num_hidden_layers"]
    if cfg.get("kv_lora_rank"):
        return layers, 1, cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], True
    heads = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or heads
    head = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return layers, max(1, nkv // tp), head, False


def _native(cfg: dict, tp: int, dtype: str, size: float, chunk: int | None) -> dict:
    from vllm.platforms import current_platform
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec
    from vllm.v1.kv_offload import config as oc
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    current_platform.is_cuda_alike = lambda: True  # type: ignore[method-assign]
    current_platform.is_rocm = lambda: False  # type: ignore[method-assign]
    layers, heads, head, mla = _shape(cfg, tp)
    spec_cls = MLAAttentionSpec if mla else FullAttentionSpec
    page = spec_cls(block_size=16, num_kv_heads=heads, head_size=head, dtype=DTYPES[dtype]).page_size_bytes
    per_block = page * layers
    blocks_per_chunk = 1 if chunk is None else chunk // 16
    config = oc.OffloadingConfig(
        groups=(oc.OffloadingGroupConfig(tokens_per_block=16, layer_names=("l",), group_id=0),),
        worker_kv_bytes_per_block=per_block, enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": size * (1 << 30)}, engine_id="e",
        model=oc.OffloadingModelConfig(name="m", dtype=dtype),
        cache=oc.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=blocks_per_chunk),
        parallel=oc.OffloadingParallelConfig(
            rank=0, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1, dcp_size=1, data_parallel_index=0,
            data_parallel_size=1, data_parallel_rank_local=None, is_parallelism_agnostic=False),
        replicated_layout=mla and tp > 1)
    spec = CPUOffloadingSpec(config)
    return {"worker_kv_bytes_per_block": per_block, "num_chunks": spec.num_chunks,
            "kv_bytes_per_chunk": spec.kv_bytes_per_chunk, "replicated": spec.replicated_layout}


def _lmcache(cfg: dict, tp: int, dtype: str, size: float, chunk: int) -> dict:
    import lmcache

    class _NoDevice:  # CPU only: LMCache's device ops are never called here
        def __getattr__(self, name: str) -> object:
            return lambda *a, **k: None

    if not hasattr(lmcache, "device_ops"):
        lmcache.device_ops = _NoDevice()  # type: ignore[attr-defined]
    from lmcache.utils import get_size_bytes
    from lmcache.v1.memory_management import AddressManager
    from lmcache.v1.metadata import LMCacheMetadata

    layers, heads, head, mla = _shape(cfg, tp)
    meta = LMCacheMetadata(model_name="m", world_size=tp, local_world_size=tp, worker_id=0,
                           local_worker_id=0, kv_dtype=DTYPES[dtype],
                           kv_shape=(layers, 1 if mla else 2, chunk, heads, head), use_mla=mla,
                           chunk_size=chunk)
    raw = get_size_bytes(meta.get_shapes(), [DTYPES[dtype]])
    manager = AddressManager(int(size * 1024**3))
    count = 0
    while True:
        try:
            manager.allocate(raw)
        except RuntimeError:
            break
        count += 1
    return {"chunk_raw_bytes": raw, "chunk_aligned_bytes": manager.compute_aligned_size(raw),
            "num_chunks": count}


def main() -> int:
    import lmcache
    import vllm

    cases = []
    for preset, tp, dtype, backend, size, chunk in CASES:
        cfg = _config(preset)
        truth = (_native(cfg, tp, dtype, size, chunk) if backend == "native"
                 else _lmcache(cfg, tp, dtype, size, chunk or 256))
        cases.append({"preset": preset, "tp": tp, "kv_dtype": dtype, "backend": backend, "size_gib": size,
                      "chunk_tokens": chunk, **truth})
        print(preset, tp, dtype, backend, size, chunk, truth, file=sys.stderr)
    OUT.write_text(json.dumps({
        "generator": "tools/offload_truth/generate.py",
        "versions": {"vllm": vllm.__version__, "lmcache": getattr(lmcache, "__version__", "?"),
                     "torch": torch.__version__},
        "cases": cases}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
