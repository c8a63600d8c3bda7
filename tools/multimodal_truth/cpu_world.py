"""The CPU world the tower-peak tools run vLLM's vision towers in (dev-time only; README.md here).

Shared by ``tower_peak.py`` (Qwen2.5-VL, SigLIP) and ``qwen3_vl_tower_peak.py`` (Qwen3-VL):

* ``install_stand_ins()`` — before transformers or vLLM is imported: the torchvision stand-in
  (``torchvision_stand_in.py``) and a torchvision version reported to transformers (its
  ``is_torchvision_greater_or_equal`` parses one; the stand-in has no distribution metadata);
* ``LiveBytes`` — a ``TorchDispatchMode`` that counts the bytes of every tensor storage an op
  creates until its last tensor is freed, and keeps the largest total;
* ``cpu_world(port)`` — a one-rank gloo group under a ``VllmConfig`` on ``DeviceConfig("cpu")``,
  every ``CustomOp`` on its native path, bfloat16 the default dtype; ``on_cpu(*modules)`` — no
  pinned memory (``PIN_MEMORY`` off) and ``async_tensor_h2d`` a plain copy in the tower modules.

What is vLLM's code stays in the callers (the towers, built from each preset's ``vision_config``);
what is written here stands in for what needs CUDA.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).parent))
import torchvision_stand_in  # noqa: E402

TORCHVISION_VERSION = "0.28.0"


def install_stand_ins() -> None:
    """The torchvision stand-in, and transformers told its version (before either is imported)."""
    torchvision_stand_in.install()
    import transformers.utils.import_utils as iu

    available = iu._is_package_available

    def with_torchvision(name: str, return_version: bool = False) -> Any:
        if name == "torchvision":
            return (True, TORCHVISION_VERSION) if return_version else True
        return available(name, return_version=return_version)

    iu._is_package_available = with_torchvision


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


def h2d(data: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``async_tensor_h2d`` on CPU: the data as a tensor, no pinned staging copy."""
    return (data if isinstance(data, torch.Tensor) else torch.as_tensor(data)).to("cpu")


def on_cpu(*modules: ModuleType) -> None:
    """The tower modules' CPU stand-ins (imported inside ``cpu_world``): ``PIN_MEMORY`` off and
    ``async_tensor_h2d`` = ``h2d`` where a module has them."""
    for module in modules:
        if hasattr(module, "PIN_MEMORY"):
            module.PIN_MEMORY = False
        if hasattr(module, "async_tensor_h2d"):
            module.async_tensor_h2d = h2d


@contextmanager
def cpu_world(port: int) -> Iterator[None]:
    """vLLM's config and a one-rank gloo group on CPU, every ``CustomOp`` on its native path,
    ``async_tensor_h2d`` = ``h2d`` in vLLM's utilities, bfloat16 the default dtype. The towers'
    modules are imported inside it and passed to ``on_cpu``."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        initialize_model_parallel(1, 1)
        import vllm.model_executor.layers.attention.mm_encoder_attention as mea
        import vllm.utils.torch_utils as tu
        from vllm.model_executor.custom_op import CustomOp

        CustomOp.dispatch_forward = lambda self, *a, **k: self.forward_native
        on_cpu(tu, mea)
        torch.set_default_dtype(torch.bfloat16)
        yield


def tower_peaks(tower: Any, vision_config: Any, grids: list[list[int]], mode: LiveBytes,
                label: str = "") -> list[dict[str, Any]]:
    """One case per ``[t, h, w]`` patch grid: the live-bytes peak of ``tower(x, [grid])`` on a
    random bf16 ``x`` of ``t × h × w`` patches (each ``in_channels × temporal_patch_size ×
    patch_size²`` pixels, as vLLM's Qwen-VL towers take them), and the output's shape."""
    vc = vision_config
    pixel = vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2
    cases = []
    for grid in grids:
        patches = grid[0] * grid[1] * grid[2]
        mode.live = mode.peak = 0
        x = torch.randn(patches, pixel, dtype=torch.bfloat16)
        with torch.inference_mode(), mode:
            y = tower(x, [grid])
        cases.append({"grid_thw": grid, "patches": patches, "peak_bytes": mode.peak,
                      "output_shape": list(y.shape)})
        print(label, grid, patches, mode.peak, round(mode.peak / patches, 2), list(y.shape), flush=True)
        del x, y
    return cases
