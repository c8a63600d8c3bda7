"""Dev-time truth: vLLM 0.33's own Qwen3-VL vision tower run on CPU, its live-tensor peak per patch.

Run with the venv of ``generate.py`` (``README.md`` here); writes
``tests/fixtures/multimodal_truth/qwen3_vl_tower_peak.json``, which ``tests/test_multimodal_truth.py``
compares with ``kvplan.engines.vllm.multimodal.tower_peak``.

What is vLLM's code: ``Qwen3_VisionTransformer`` (``model_executor/models/qwen3_vl.py``) built from
each preset's ``vision_config`` and run forward on random pixel values of a grid (its real
``prepare_encoder_metadata``: the interpolated position embeddings and rotary tables; its blocks,
deepstack mergers and merger). What is written here: ``cpu_world.py``'s live-bytes counter and CPU
world, shared with ``tower_peak.py`` (pinned memory off, every ``CustomOp`` on its native path,
attention as one ``scaled_dot_product_attention`` op — FlashAttention's footprint, no score
matrix), and ``ApplyRotaryEmb`` allocating only its output as the CUDA kernel does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cpu_world  # noqa: E402

cpu_world.install_stand_ins()  # before transformers or vLLM is imported
import torch  # noqa: E402
import vllm  # noqa: E402
from cpu_world import LiveBytes, on_cpu  # noqa: E402
from transformers import Qwen3VLConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "qwen3_vl_tower_peak.json"
MODELS = ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
GRIDS = [[1, 16, 16], [1, 32, 32], [2, 32, 32], [1, 32, 64]]


def main() -> None:
    mode = LiveBytes()
    out = []
    with cpu_world.cpu_world(29534):
        from vllm.model_executor.layers.rotary_embedding.common import ApplyRotaryEmb
        from vllm.model_executor.models import qwen2_5_vl, qwen3_vl

        native_rotary = ApplyRotaryEmb.forward_native

        def rotary_out_only(self, x, cos, sin):  # type: ignore[no-untyped-def]
            out = torch.empty_like(x)
            mode.paused = True
            out.copy_(native_rotary(self, x, cos, sin))
            mode.paused = False
            return out

        ApplyRotaryEmb.forward_native = rotary_out_only
        on_cpu(qwen2_5_vl, qwen3_vl)
        qwen3_vl.HAS_TRITON = False
        for repo in MODELS:
            preset = json.loads((ROOT / "presets" / "models" / f"{repo.replace('/', '--')}.json").read_text())
            config = Qwen3VLConfig(**preset["config"])
            vc = config.vision_config
            tower = qwen3_vl.Qwen3_VisionTransformer(vc, norm_eps=1e-6)
            cases = cpu_world.tower_peaks(tower, vc, GRIDS, mode, repo)
            out.append({"model": repo, "cases": cases})
            del tower
    doc = {"vllm": vllm.__version__, "torch": torch.__version__, "dtype": "bfloat16", "tp": 1,
           "source": "tools/multimodal_truth/qwen3_vl_tower_peak.py (vLLM's Qwen3_VisionTransformer "
                     "on CPU)", "models": out}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
