"""Dev-time truth: vLLM 0.33's own Qwen3-VL vision tower run on CPU, its live-tensor peak per patch.

Run with the venv of ``generate.py`` (``README.md`` here); writes
``tests/fixtures/multimodal_truth/qwen3_vl_tower_peak.json``, which ``tests/test_multimodal_truth.py``
compares with ``kvplan.engines.vllm.multimodal.tower_peak``.

What is vLLM's code: ``Qwen3_VisionTransformer`` (``model_executor/models/qwen3_vl.py``) built from
each preset's ``vision_config`` and run forward on random pixel values of a grid (its real
``prepare_encoder_metadata``: the interpolated position embeddings and rotary tables; its blocks,
deepstack mergers and merger). What is written here: the live-bytes counter and the CPU stand-ins of
``tower_peak.py`` (pinned memory off, every ``CustomOp`` on its native path, attention as one
``scaled_dot_product_attention`` op — FlashAttention's footprint, no score matrix).
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import torchvision_stand_in  # noqa: E402

torchvision_stand_in.install()
import transformers.utils.import_utils as _iu  # noqa: E402

_available = _iu._is_package_available


def _with_torchvision(name: str, return_version: bool = False) -> Any:
    """The stand-in has no distribution metadata: report a version so transformers' version checks
    (``is_torchvision_greater_or_equal``) parse."""
    if name == "torchvision":
        return (True, "0.28.0") if return_version else True
    return _available(name, return_version=return_version)


_iu._is_package_available = _with_torchvision
sys.modules["generate"] = types.ModuleType("generate")  # tower_peak's stand-in import, done above
import torch  # noqa: E402
import vllm  # noqa: E402
from tower_peak import LiveBytes  # noqa: E402
from transformers import Qwen3VLConfig  # noqa: E402
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "qwen3_vl_tower_peak.json"
MODELS = ["Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
GRIDS = [[1, 16, 16], [1, 32, 32], [2, 32, 32], [1, 32, 64]]


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mode = LiveBytes()
    out = []
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method="tcp://127.0.0.1:29534")
        initialize_model_parallel(1, 1)
        import vllm.model_executor.layers.attention.mm_encoder_attention as mea
        import vllm.utils.torch_utils as tu
        from vllm.model_executor.custom_op import CustomOp
        from vllm.model_executor.models import qwen2_5_vl, qwen3_vl

        def h2d(data, dtype=None, *args, **kwargs):  # type: ignore[no-untyped-def]
            return (data if isinstance(data, torch.Tensor) else torch.as_tensor(data)).to("cpu")

        from vllm.model_executor.layers.rotary_embedding.common import ApplyRotaryEmb

        native_rotary = ApplyRotaryEmb.forward_native

        def rotary_out_only(self, x, cos, sin):  # type: ignore[no-untyped-def]
            out = torch.empty_like(x)
            mode.paused = True
            out.copy_(native_rotary(self, x, cos, sin))
            mode.paused = False
            return out

        CustomOp.dispatch_forward = lambda self, *a, **k: self.forward_native
        ApplyRotaryEmb.forward_native = rotary_out_only
        qwen3_vl.PIN_MEMORY = qwen2_5_vl.PIN_MEMORY = False
        qwen2_5_vl.async_tensor_h2d = tu.async_tensor_h2d = mea.async_tensor_h2d = h2d
        qwen3_vl.HAS_TRITON = False
        torch.set_default_dtype(torch.bfloat16)
        for repo in MODELS:
            preset = json.loads((ROOT / "presets" / "models" / f"{repo.replace('/', '--')}.json").read_text())
            config = Qwen3VLConfig(**preset["config"])
            vc = config.vision_config
            tower = qwen3_vl.Qwen3_VisionTransformer(vc, norm_eps=1e-6)
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
                print(repo, grid, patches, mode.peak, round(mode.peak / patches, 2), list(y.shape),
                      flush=True)
                del x, y
            out.append({"model": repo, "cases": cases})
            del tower
    doc = {"vllm": vllm.__version__, "torch": torch.__version__, "dtype": "bfloat16", "tp": 1,
           "source": "tools/multimodal_truth/qwen3_vl_tower_peak.py (vLLM's Qwen3_VisionTransformer "
                     "on CPU)", "models": out}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
