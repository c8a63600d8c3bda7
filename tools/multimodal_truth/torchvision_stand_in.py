"""A torchvision stand-in for the multimodal truth tools: vLLM's and transformers' multimodal
modules import torchvision at module level, the CPU venv has none, and nothing these tools call uses
it. ``install()`` must run before transformers or vLLM is imported."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

MODULES = ("torchvision", "torchvision.transforms", "torchvision.transforms.v2",
           "torchvision.transforms.v2.functional", "torchvision.transforms.functional",
           "torchvision.io", "torchvision.ops")


class _Stand(types.ModuleType):
    """Any attribute is another stand-in; calling one returns None."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


def install() -> None:
    """Put a stand-in for each of ``MODULES`` in ``sys.modules``."""
    for name in MODULES:
        module = _Stand(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = module
