"""Dev-time truth: vLLM 0.11.0's own Qwen3-VL vision tower run on CPU, its live-tensor peak per patch.

vLLM 0.11.0's tower holds another live set than 0.33's (``kvplan.engines.vllm.multimodal``
``_qwen3_vl_peak_v0_11``); this writes ``tests/fixtures/multimodal_truth/qwen3_vl_tower_peak_v0_11.json``,
compared by ``tests/test_mm_qwen3_vl_tower.py``. Run it with a vLLM 0.11.0 venv (README.md here):

    python3.11 -m venv /tmp/mmlogs_venv
    echo <the vLLM 0.33 CPU venv's site-packages> > /tmp/mmlogs_venv/lib/python3.11/site-packages/zz.pth
    /tmp/mmlogs_venv/bin/pip install --no-deps vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl \\
        transformers==4.57.1 tokenizers==0.22.1 huggingface-hub==0.35.3 setproctitle blake3 gguf
    PYTHONDONTWRITEBYTECODE=1 /tmp/mmlogs_venv/bin/python tools/multimodal_truth/qwen3_vl_tower_peak_v0_11.py

(torch 2.13.0+cpu and the rest come from the 0.33 venv through the ``.pth``; vLLM 0.11.0's own
modules shadow 0.33's.) What is vLLM's code: ``Qwen3_VisionTransformer`` (``qwen3_vl.py``) with its
``Qwen2_5_VisionAttention`` (``qwen2_5_vl.py``) built from each preset's ``vision_config`` and run
forward on random pixel values. What is written here: ``cpu_world.py``'s stand-ins and
``LiveBytes``; the CUDA path of the attention (``FLASH_ATTN``, vLLM's ViT default on CUDA ≥ SM 8.0:
``platforms/cuda.py`` ``get_vit_attn_backend``) with ``vllm.vllm_flash_attn.flash_attn_varlen_func``
a stand-in that allocates only its output, as the kernel does; ``apply_rotary_emb`` allocating only
its (float32) output, as ``vllm_flash_attn.layers.rotary`` does on CUDA. One rank (TP 1).
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cpu_world  # noqa: E402

cpu_world.install_stand_ins()  # before transformers or vLLM is imported
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import vllm  # noqa: E402
from cpu_world import LiveBytes  # noqa: E402
from transformers import Qwen3VLConfig  # noqa: E402
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "qwen3_vl_tower_peak_v0_11.json"
MODELS = ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
GRIDS = [[1, 16, 16], [1, 32, 32], [2, 32, 32], [1, 32, 64]]


def main() -> None:
    mode = LiveBytes()

    def varlen(q, k, v, cu_seqlens_q=None, **kwargs):  # type: ignore[no-untyped-def]
        out = torch.empty_like(q)
        mode.paused = True
        cu = cu_seqlens_q.tolist()
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            qi, ki, vi = (t[a:b].transpose(0, 1) for t in (q, k, v))
            out[a:b] = F.scaled_dot_product_attention(qi, ki, vi).transpose(0, 1)
        mode.paused = False
        return out

    stub = types.ModuleType("vllm.vllm_flash_attn")
    stub.flash_attn_varlen_func = varlen  # type: ignore[attr-defined]
    sys.modules["vllm.vllm_flash_attn"] = stub
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    out = []
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method="tcp://127.0.0.1:29541")
        initialize_model_parallel(1, 1)
        from vllm.model_executor.custom_op import CustomOp
        from vllm.model_executor.models import qwen2_vl, qwen3_vl
        from vllm.platforms import _Backend

        CustomOp.dispatch_forward = lambda self, *a, **k: self.forward_native
        native = qwen2_vl.apply_rotary_emb_torch

        def rotary_out_only(x, cos, sin, interleaved=False):  # type: ignore[no-untyped-def]
            res = torch.empty_like(x)
            mode.paused = True
            res.copy_(native(x, cos, sin, interleaved))
            mode.paused = False
            return res

        qwen2_vl.apply_rotary_emb_torch = rotary_out_only
        torch.set_default_dtype(torch.bfloat16)
        for repo in MODELS:
            preset = json.loads((ROOT / "presets" / "models" / f"{repo.replace('/', '--')}.json").read_text())
            vc = Qwen3VLConfig(**preset["config"]).vision_config
            tower = qwen3_vl.Qwen3_VisionTransformer(vc, norm_eps=1e-6)
            tower.attn_backend = _Backend.FLASH_ATTN
            for blk in tower.blocks:
                blk.attn.attn_backend = _Backend.FLASH_ATTN
                blk.attn.is_flash_attn_backend, blk.attn.use_upstream_fa = True, False
            cases = cpu_world.tower_peaks(tower, vc, GRIDS, mode, repo)
            out.append({"model": repo, "cases": cases})
            del tower
    doc = {"vllm": vllm.__version__, "torch": torch.__version__, "dtype": "bfloat16", "tp": 1,
           "source": "tools/multimodal_truth/qwen3_vl_tower_peak_v0_11.py (vLLM 0.11.0's "
                     "Qwen3_VisionTransformer on CPU)", "models": out}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
