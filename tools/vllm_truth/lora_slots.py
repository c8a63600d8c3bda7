"""Dev-time generator: vLLM 0.33.0's own LoRA wrappers allocate their GPU slots on the meta device
→ ``tests/fixtures/vllm_truth/lora_slots.json`` (``tests/test_vllm_lora.py`` compares kvplan's
``kvplan.engines.vllm.lora.lora_slots`` with every case, exactly).

Run in the venv of ``tools/vllm_truth/README.md``: ``$S/venv/bin/python tools/vllm_truth/lora_slots.py``.

What is vLLM's code: the base layers (``QKVParallelLinear``, ``MergedColumnParallelLinear``,
``RowParallelLinear``, ``VocabParallelEmbedding``, ``ParallelLMHead``, ``LogitsProcessor``) built as
a Llama-style decoder layer builds them (``models/llama.py`` ``LlamaAttention``/``LlamaMLP``), the
wrapper choice and slot allocation (``vllm/lora/utils.py`` ``from_layer`` with the model's
``packed_modules_mapping``, ``from_layer_logits_processor`` → each class's ``create_lora_weights``),
the ``LoRAConfig`` validation and the punica workspace (``PunicaWrapperGPU``). Each TP size runs in
its own forked processes joined by a gloo group of that size (``init_distributed_environment``,
``initialize_model_parallel``), so the TP split is vLLM's. Written here: the model dimensions (read
from the presets' config values below) and summing ``numel × element_size`` of every tensor the
wrappers hold on the meta device (what ``torch.zeros(..., device=cuda)`` would allocate).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
from pathlib import Path

import torch

#: The dims of three presets (``presets/models/*.json``, each from the model's config.json).
MODELS = {
    "llama-3.1-8b": {"architecture": "LlamaForCausalLM",
                     "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
                     "intermediate": 14336, "vocab": 128256},
    "qwen2.5-7b": {"architecture": "Qwen2ForCausalLM",
                   "hidden": 3584, "heads": 28, "kv_heads": 4, "head_dim": 128,
                   "intermediate": 18944, "vocab": 152064},
    "llama-3.2-1b": {"architecture": "LlamaForCausalLM",
                     "hidden": 2048, "heads": 32, "kv_heads": 8, "head_dim": 64,
                     "intermediate": 8192, "vocab": 128256},
}
#: (model, tp, max_loras, max_lora_rank, max_num_batched_tokens, max_num_seqs, fully_sharded_loras)
CASES = [
    ("llama-3.1-8b", 1, 4, 64, 8192, 1024, False),
    ("llama-3.1-8b", 2, 1, 16, 2048, 256, False),
    ("qwen2.5-7b", 2, 8, 32, 8192, 1024, False),
    ("qwen2.5-7b", 4, 2, 320, 16384, 1024, False),
    ("llama-3.2-1b", 4, 3, 8, 2048, 256, False),
    ("llama-3.1-8b", 2, 2, 64, 8192, 1024, True),
    ("qwen2.5-7b", 4, 1, 16, 2048, 256, True),
]
OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vllm_truth" / "lora_slots.json"


def _bytes(obj: object) -> int:
    """Bytes of every tensor attribute (and tuple of tensors) not on the CPU; views (``_base`` set,
    e.g. ``lora_a_stacked_2d``) share their base's memory and are not counted again."""
    total = 0
    for value in vars(obj).values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.device.type != "cpu" and item._base is None:
                total += item.numel() * item.element_size()
            elif hasattr(item, "__dataclass_fields__"):
                total += _bytes(item)
    return total


def _embedding_modules(architecture: str) -> dict[str, str]:
    """The model class's ``embedding_modules`` (vLLM's registry, as ``LoRAModelManager`` sees them)."""
    from vllm.model_executor.models.registry import ModelRegistry

    cls = ModelRegistry._try_load_model_cls(architecture)
    assert cls is not None, architecture
    return dict(cls.embedding_modules)


def _slots(model: dict, max_loras: int, rank: int, mnbt: int, seqs: int,
           sharded: bool) -> dict[str, int]:
    import vllm.lora.punica_wrapper.punica_gpu as punica_gpu
    from vllm.config.lora import LoRAConfig
    from vllm.lora.ops.triton_ops.lora_kernel_metadata import LoRAKernelMeta
    from vllm.lora.utils import from_layer, from_layer_logits_processor
    from vllm.model_executor.layers.linear import (
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    config = LoRAConfig(max_lora_rank=rank, max_loras=max_loras, lora_dtype=torch.bfloat16,
                        fully_sharded_loras=sharded)
    h, dtype = model["hidden"], torch.bfloat16
    out: dict[str, int] = {}
    with torch.device("meta"):
        layers = {
            "qkv_proj": (QKVParallelLinear(h, model["head_dim"], model["heads"], model["kv_heads"],
                                           bias=False, params_dtype=dtype), ["q_proj", "k_proj", "v_proj"]),
            "o_proj": (RowParallelLinear(model["heads"] * model["head_dim"], h, bias=False,
                                         params_dtype=dtype), []),
            "gate_up_proj": (MergedColumnParallelLinear(h, [model["intermediate"]] * 2, bias=False,
                                                        params_dtype=dtype), ["gate_proj", "up_proj"]),
            "down_proj": (RowParallelLinear(model["intermediate"], h, bias=False, params_dtype=dtype), []),
            "embed_tokens": (VocabParallelEmbedding(model["vocab"], h, params_dtype=dtype), []),
        }
        # get_supported_lora_modules: the LinearBase layers and the class's embedding_modules.
        vocab = _embedding_modules(model["architecture"])
        for name, (layer, packed) in layers.items():
            if name == "embed_tokens" and name not in vocab:
                continue
            wrapped = from_layer(layer, max_loras, config, packed)
            assert wrapped is not layer, name
            out[name] = _bytes(wrapped)
            out[name + ":class"] = type(wrapped).__name__  # type: ignore[assignment]
        if "lm_head" in vocab:
            head = ParallelLMHead(model["vocab"], h, params_dtype=dtype)
            logits = from_layer_logits_processor(LogitsProcessor(model["vocab"]), head, max_loras, config)
            out["lm_head"] = _bytes(logits)
        # punica_gpu.py imports LoRAKernelMeta only when Triton is installed (absent on this CPU box).
        punica_gpu.LoRAKernelMeta = LoRAKernelMeta  # type: ignore[attr-defined]
        punica = punica_gpu.PunicaWrapperGPU(mnbt, seqs, "meta", lora_config=config)
        out["workspace"] = _bytes(punica)
    return out


def _worker(rank: int, tp: int, port: int, cases: list[tuple], queue: mp.Queue) -> None:
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    # A config without a model: the CustomOps the layers are read it; no CUDA platform here.
    config = set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu")))
    config.__enter__()  # held (a local) until the worker ends
    init_distributed_environment(world_size=tp, rank=rank, local_rank=rank,
                                 distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
    initialize_model_parallel(tensor_model_parallel_size=tp, backend="gloo")
    for case in cases:
        model, _, loras, r, mnbt, seqs, sharded = case
        slots = _slots(MODELS[model], loras, r, mnbt, seqs, sharded)
        if rank == 0:  # the other ranks hold the group (their shapes are rank 0's)
            queue.put((case, slots))
    torch.distributed.barrier()


def main() -> None:
    import vllm

    os.environ.setdefault("VLLM_LORA_ENABLE_DUAL_STREAM", "0")
    results = []
    ctx = mp.get_context("fork")
    for index, tp in enumerate(sorted({c[1] for c in CASES})):
        cases = [c for c in CASES if c[1] == tp]
        queue: mp.Queue = ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(r, tp, 29600 + index, cases, queue)) for r in range(tp)]
        for p in procs:
            p.start()
        for _ in cases:
            while True:
                try:
                    case, slots = queue.get(timeout=5)
                    break
                except Exception:  # queue.Empty: fail fast when a worker died
                    if any(p.exitcode for p in procs):
                        sys.exit(f"worker failed (tp {tp})")
            model, tp_, loras, r, mnbt, seqs, sharded = case
            results.append({"model": model, "tp": tp_, "max_loras": loras, "max_lora_rank": r,
                            "fully_sharded_loras": sharded,
                            "max_num_batched_tokens": mnbt, "max_num_seqs": seqs, "dtype": "bf16",
                            "per_layer": {k: slots[k] for k in ("qkv_proj", "o_proj", "gate_up_proj",
                                                                "down_proj")},
                            "architecture": MODELS[model]["architecture"],
                            "embed_tokens": slots.get("embed_tokens"), "lm_head": slots.get("lm_head"),
                            "workspace": slots["workspace"],
                            "classes": {k.split(":")[0]: v for k, v in slots.items()
                                        if k.endswith(":class")}})
        for p in procs:
            p.join(timeout=600)
            if p.exitcode:
                sys.exit(f"worker failed (tp {tp})")
    payload = {"generator": "tools/vllm_truth/lora_slots.py", "vllm": vllm.__version__,
               "torch": torch.__version__,
               "source": "vLLM's LoRA wrappers (vllm/lora/utils.py from_layer, from_layer_logits_processor, "
                         "create_lora_weights) and PunicaWrapperGPU on the meta device, TP by gloo groups",
               "cases": results}
    OUT.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {len(results)} cases to {OUT}")


if __name__ == "__main__":
    main()
