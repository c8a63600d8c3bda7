"""Dev-time truth: vLLM 0.33's own Qwen2.5-VL vision tower run on CPU, its live-tensor peak per patch.

Run with the venv of ``generate.py`` (``README.md`` here); writes
``tests/fixtures/multimodal_truth/tower_peak.json``, which ``tests/test_multimodal_truth.py``
compares with ``kvplan.engines.vllm.multimodal.tower_peak``.

What is vLLM's code: ``Qwen2_5_VisionTransformer`` (``model_executor/models/qwen2_5_vl.py``) built
from the preset's ``vision_config`` and run forward on random pixel values of a grid (its real
``prepare_encoder_metadata``, rotary tables, window index, blocks and merger). What is written here:

* a ``TorchDispatchMode`` that counts the bytes of every tensor storage an op creates until its last
  tensor is freed, and keeps the largest total (the pixel values enter it at the tower's first op);
* CPU stand-ins for what needs CUDA: no pinned memory (``PIN_MEMORY``, ``async_tensor_h2d``), every
  ``CustomOp`` on its native path, and ``SiluAndMul`` allocating only its output as the CUDA kernel
  ``torch.ops._C.silu_and_mul`` does (``layers/activation.py`` ``forward_cuda``; the eager native
  path would add a ``silu`` temporary no CUDA run has);
* attention on CPU runs ``scaled_dot_product_attention`` as one op, whose output alone is counted —
  as FlashAttention on CUDA, no score matrix.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import generate  # noqa: E402,F401  (the torchvision stand-in, before vLLM imports transformers)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import vllm  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
from transformers import Qwen2_5_VLConfig  # noqa: E402
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "tower_peak.json"
GRIDS = [[1, 32, 32], [1, 64, 64], [2, 64, 64], [1, 48, 96], [2, 16, 112]]
SIGLIP_IMAGE_SIZE = 224


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages ops created that some tensor still holds; the largest total."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.count: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.ids: dict[int, weakref.ref] = {}
        self.paused = False

    def _drop(self, key: int, ident: int) -> None:
        self.ids.pop(ident, None)
        self.count[key] -= 1
        if not self.count[key]:
            self.live -= self.size.pop(key)
            del self.count[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or (id(t) in self.ids and self.ids[id(t)]() is t):
                continue
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if not size:
                continue
            self.ids[id(t)] = weakref.ref(t)
            if key not in self.count:
                self.count[key], self.size[key] = 0, size
                self.live += size
                self.peak = max(self.peak, self.live)
            self.count[key] += 1
            weakref.finalize(t, self._drop, key, id(t))
        return out


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    preset = json.loads((ROOT / "presets" / "models" / "Qwen--Qwen2.5-VL-7B-Instruct.json").read_text())
    config = Qwen2_5_VLConfig(**preset["config"])
    mode = LiveBytes()
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method="tcp://127.0.0.1:29533")
        initialize_model_parallel(1, 1)
        import vllm.model_executor.layers.attention.mm_encoder_attention as mea
        import vllm.utils.torch_utils as tu
        from vllm.model_executor.custom_op import CustomOp
        from vllm.model_executor.layers.activation import SiluAndMul
        from vllm.model_executor.models import qwen2_5_vl

        def h2d(data, dtype=None, *args, **kwargs):  # type: ignore[no-untyped-def]
            return (data if isinstance(data, torch.Tensor) else torch.as_tensor(data)).to("cpu")

        def fused_silu_and_mul(self, x):  # type: ignore[no-untyped-def]
            d = x.shape[-1] // 2
            out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype)
            mode.paused = True
            out.copy_(F.silu(x[..., :d]) * x[..., d:])
            mode.paused = False
            return out

        CustomOp.dispatch_forward = lambda self, *a, **k: self.forward_native
        SiluAndMul.forward_native = fused_silu_and_mul
        qwen2_5_vl.PIN_MEMORY = False
        qwen2_5_vl.async_tensor_h2d = tu.async_tensor_h2d = mea.async_tensor_h2d = h2d
        torch.set_default_dtype(torch.bfloat16)
        tower = qwen2_5_vl.Qwen2_5_VisionTransformer(config.vision_config, norm_eps=1e-6)
        vc = config.vision_config
        pixel = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
        cases = []
        for grid in GRIDS:
            patches = grid[0] * grid[1] * grid[2]
            mode.live = mode.peak = 0
            x = torch.randn(patches, pixel, dtype=torch.bfloat16)
            with torch.inference_mode(), mode:
                y = tower(x, [grid])
            cases.append({"grid_thw": grid, "patches": patches, "peak_bytes": mode.peak,
                          "output_shape": list(y.shape)})
            del x, y
        from transformers import Gemma3Config
        from vllm.model_executor.models.siglip import SiglipVisionModel

        gemma = json.loads((ROOT / "presets" / "models" / "gemma-3-27b.json").read_text())
        # image_size 224 instead of 896 keeps two CPU cores at seconds, not minutes: the terms a
        # patch holds do not depend on how many patches there are (the position table aside,
        # which is a parameter)
        size = SIGLIP_IMAGE_SIZE
        vision = Gemma3Config(**gemma["config"]).vision_config
        vision.image_size = size
        siglip = SiglipVisionModel(vision)
        side = size // vision.patch_size
        siglip_cases = []
        for images in (1, 2, 3):
            mode.live = mode.peak = 0
            x = torch.randn(images, 3, size, size, dtype=torch.bfloat16)
            with torch.inference_mode(), mode:
                y = siglip(x)
            siglip_cases.append({"images": images, "patches": images * side * side,
                                 "peak_bytes": mode.peak, "output_shape": list(y.shape)})
            del x, y
    doc = {"vllm": vllm.__version__, "torch": torch.__version__,
           "siglip": {"model": gemma["hf_repo"], "image_size": SIGLIP_IMAGE_SIZE, "cases": siglip_cases},
           "source": "tools/multimodal_truth/tower_peak.py (vLLM's Qwen2_5_VisionTransformer on CPU)",
           "model": preset["hf_repo"], "dtype": "bfloat16", "tp": 1, "cases": cases}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}: {len(cases)} cases")
    for c in cases + siglip_cases:
        print(c.get("grid_thw", c.get("images")), c["patches"], c["peak_bytes"],
              round(c["peak_bytes"] / c["patches"], 2))


if __name__ == "__main__":
    main()
