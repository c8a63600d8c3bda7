"""Dev-time truth: vLLM 0.33's own Qwen2.5-VL vision tower run on CPU, its live-tensor peak per patch.

Run with the venv of ``generate.py`` (``README.md`` here); writes
``tests/fixtures/multimodal_truth/tower_peak.json``, which ``tests/test_multimodal_truth.py``
compares with ``kvplan.engines.vllm.multimodal.tower_peak``.

What is vLLM's code: ``Qwen2_5_VisionTransformer`` (``model_executor/models/qwen2_5_vl.py``) built
from the preset's ``vision_config`` and run forward on random pixel values of a grid (its real
``prepare_encoder_metadata``, rotary tables, window index, blocks and merger). What is written here:

* ``cpu_world.py``'s ``LiveBytes`` (the bytes of every tensor storage an op creates until its last
  tensor is freed, the largest total; the pixel values enter it at the tower's first op) and its CPU
  world (no pinned memory, every ``CustomOp`` on its native path); here ``SiluAndMul`` allocates
  only its output as the CUDA kernel
  ``torch.ops._C.silu_and_mul`` does (``layers/activation.py`` ``forward_cuda``; the eager native
  path would add a ``silu`` temporary no CUDA run has);
* attention on CPU runs ``scaled_dot_product_attention`` as one op, whose output alone is counted —
  as FlashAttention on CUDA, no score matrix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cpu_world  # noqa: E402

cpu_world.install_stand_ins()  # before transformers or vLLM is imported
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import vllm  # noqa: E402
from cpu_world import LiveBytes, on_cpu  # noqa: E402
from transformers import Qwen2_5_VLConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "tower_peak.json"
GRIDS = [[1, 32, 32], [1, 64, 64], [2, 64, 64], [1, 48, 96], [2, 16, 112]]
SIGLIP_IMAGE_SIZE = 224


def main() -> None:
    preset = json.loads((ROOT / "presets" / "models" / "Qwen--Qwen2.5-VL-7B-Instruct.json").read_text())
    config = Qwen2_5_VLConfig(**preset["config"])
    mode = LiveBytes()
    with cpu_world.cpu_world(29533):
        from vllm.model_executor.layers.activation import SiluAndMul
        from vllm.model_executor.models import qwen2_5_vl

        def fused_silu_and_mul(self, x):  # type: ignore[no-untyped-def]
            d = x.shape[-1] // 2
            out = torch.empty(x.shape[:-1] + (d,), dtype=x.dtype)
            mode.paused = True
            out.copy_(F.silu(x[..., :d]) * x[..., d:])
            mode.paused = False
            return out

        SiluAndMul.forward_native = fused_silu_and_mul
        on_cpu(qwen2_5_vl)
        tower = qwen2_5_vl.Qwen2_5_VisionTransformer(config.vision_config, norm_eps=1e-6)
        cases = cpu_world.tower_peaks(tower, config.vision_config, GRIDS, mode, "qwen2.5-vl")
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
