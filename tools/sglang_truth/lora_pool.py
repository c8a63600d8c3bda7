"""Dev-time only: SGLang 0.5.23's own LoRA buffer shapes (``lora/mem_pool.py``) into a fixture.

Runs ``LoRAMemoryPool.get_lora_A_shape`` / ``get_lora_B_shape`` / ``get_embedding_lora_A_shape`` /
``get_embedding_lora_B_shape`` unmodified on the CPU for kvplan's model presets, and writes
``tests/fixtures/sglang/lora_pool.json``; ``tests/test_sglang_lora.py`` compares
``kvplan.engines.sglang.lora.sglang_lora_pool`` with it, module by module. What is not SGLang's:

* the pool object is made with ``object.__new__`` and given the attributes ``__init__`` would set
  for one dense model (``tp_size`` = ``attn_tp_size`` = ``moe_tp_size`` = TP, no added tokens,
  ``lm_head_shard_indices`` None — ``__init__`` needs a process group);
* the base model is a bare ``torch.nn.Module`` holding the HF config (``LlamaConfig`` /
  ``Qwen3Config`` / ``MistralConfig`` from the preset's config.json): no ``get_hidden_dim`` override
  (Llama, Qwen3 and Mistral define none in SGLang 0.5.23), no linears (so ``_dense_local_dim``
  returns None and the even split applies, as the base layers' partitions give for these sizes);
* ``lm_head``'s B with TP > 1: ``shard_indices`` (the base ``ParallelLMHead``) is None here, so
  SGLang's fallback returns the whole vocabulary; the fixture records the per-rank rows the base
  layer would give (``min(pad64(vocab) / tp, vocab)``, ``vocab_parallel_embedding.py``) beside it.

Buffers: every layer index (``init_buffers``: ``range(num_layer)``), one embedding pair each.

    # the venv of setup.sh, plus what the import chain of lora/mem_pool.py needs beyond
    # generate.py's (pure-Python, --no-deps, into a side folder):
    $VENV/bin/python -m pip install --no-deps --target /tmp/sgl_extra einops==0.8.2 openai==3.57.0 \
        httpx2==2.16.2 distro==1.9.0 jiter==0.19.0 partial_json_parser==0.2.1.1.post7
    PYTHONPATH=/tmp/sgl_extra $VENV/bin/python tools/sglang_truth/lora_pool.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

CASES = [("llama-3.1-8b", 1, 8, 16), ("llama-3.1-8b", 2, 4, 64), ("llama-3.1-8b", 16, 1, 8),
         ("qwen3-8b", 4, 8, 32), ("mistral-7b-v0.1", 8, 2, 128)]
MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
#: Packages imported by modules on the import path of mem_pool.py but never used by the shape
#: functions: empty stubs (as generate.py does for torchvision).
STUBS = {"torchvision"}


def main() -> None:
    import torch
    import transformers
    from generate import _StubPackages
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()
    sys.meta_path.insert(0, _StubPackages(STUBS))
    import sglang
    from sglang.srt.lora.mem_pool import LoRAMemoryPool

    out = {"sglang": sglang.__version__, "torch": torch.__version__,
           "transformers": transformers.__version__,
           "source": "sglang/srt/lora/mem_pool.py LoRAMemoryPool get_lora_A_shape, get_lora_B_shape, "
                     "get_embedding_lora_A_shape, get_embedding_lora_B_shape (run unmodified)",
           "cases": []}
    for model, tp, slots, rank in CASES:
        preset = json.loads((ROOT / "presets" / "models" / f"{model}.json").read_text())
        cfg = dict(preset["config"])
        cls = getattr(transformers, cfg["architectures"][0].replace("ForCausalLM", "Config"))
        config = cls(**{k: v for k, v in cfg.items() if k != "architectures"})

        class Base(torch.nn.Module):
            def __init__(self, c):
                super().__init__()
                self.config = c

        base = Base(config)
        pool = object.__new__(LoRAMemoryPool)
        pool.base_hf_config, pool.num_layer = config, config.num_hidden_layers
        pool.max_loras_per_batch = slots
        pool.tp_size = pool.attn_tp_size = pool.moe_tp_size = tp
        pool.lora_added_tokens_size, pool.lm_head_shard_indices = 0, None
        pool.experts_shared_outer_loras = pool.moe_use_local_expert_ids = False
        shapes = {m: [list(pool.get_lora_A_shape(m, base, rank, 0)),
                      list(pool.get_lora_B_shape(m, base, rank, 0))] for m in MODULES}
        for m in ("embed_tokens", "lm_head"):
            shapes[m] = [list(pool.get_embedding_lora_A_shape(m, base, rank, 0)),
                         list(pool.get_embedding_lora_B_shape(m, base, rank, 0))]
        vocab = config.vocab_size
        lm_rows = min(-(-vocab // 64) * 64 // tp, vocab)
        shapes["lm_head"][1][1] = lm_rows  # the base ParallelLMHead's num_org_elements on rank 0
        elements = {m: (config.num_hidden_layers if m in MODULES else 1)
                    * (math.prod(a) + math.prod(b)) for m, (a, b) in shapes.items()}
        out["cases"].append({"model": model, "tp": tp, "max_loras_per_batch": slots, "max_lora_rank": rank,
                             "layers": config.num_hidden_layers, "shapes": shapes, "elements": elements})
    target = ROOT / "tests" / "fixtures" / "sglang" / "lora_pool.json"
    target.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {target} ({len(out['cases'])} cases)")


if __name__ == "__main__":
    main()
