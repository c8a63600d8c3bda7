"""Dev-time truth for Mistral-3's Pixtral patch grid: vLLM's own code on CPU.

Run with the venv of ``README.md`` here (vLLM 0.33.0); CI never runs this file, it only reads
``tests/fixtures/multimodal_truth/mistral3.json`` (compared by ``tests/test_multimodal_qwen3_vl.py``).

Called as is: vLLM ``model_executor/models/mistral3.py`` ``Mistral3HFEncoderInfo`` —
``get_patch_grid_size``, ``get_num_image_tokens`` (the embeddings) — built from transformers'
``Mistral3Config`` of the preset's config.json and the processor's ``longest_edge``; the prompt is
counted as ``Mistral3MultiModalProcessor._get_prompt_updates`` writes it (``[IMG]`` × cols +
``[IMG_BREAK]`` per row, the last token ``[IMG_END]``), here by its length.

    $S/bin/python tools/multimodal_truth/mistral3.py
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402,F401  — puts the torchvision stand-in in place first


# mistral_common (the tokenizer path of pixtral.py / vLLM's tokenizers, never called here) is not
# installed: any of its modules is a stand-in, as torchvision's in generate.py
class _StandFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "mistral_common" or name.startswith("mistral_common."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = generate._Stand(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: Any) -> None:
        return None


sys.meta_path.insert(0, _StandFinder())

# isort: split
import transformers  # noqa: E402
import vllm  # noqa: E402
from transformers import Mistral3Config  # noqa: E402
from vllm.model_executor.models.mistral3 import Mistral3HFEncoderInfo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "mistral3.json"
SIZES = [(1280, 720), (1920, 1080), (1540, 1540), (1541, 1540), (4000, 3000), (224, 224), (1, 1),
         (28, 28), (29, 29), (640, 480), (3840, 2160), (10000, 56), (56, 10000), (333, 777),
         (12345, 678), (1024, 1024)]


def main() -> None:
    repo = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
    name = repo.replace("/", "--")
    preset = json.loads((ROOT / "presets" / "models" / f"{name}.json").read_text())
    proc = json.loads((ROOT / "presets" / "processors" / f"{name}.json").read_text())["processor"]
    info = Mistral3HFEncoderInfo(Mistral3Config(**preset["config"]), proc["longest_edge"])
    images = []
    for w, h in SIZES:
        cols, rows = info.get_patch_grid_size(image_width=w, image_height=h)
        tokens = ([0] * cols + [1]) * rows
        images.append({"width": w, "height": h, "grid": [cols, rows],
                       "tokens": info.get_num_image_tokens(image_width=w, image_height=h),
                       "prompt_tokens": len(tokens)})
    side = info.get_image_size()
    out = {"vllm": vllm.__version__, "transformers": transformers.__version__,
           "source": "tools/multimodal_truth/mistral3.py (vLLM's code on CPU)",
           "hf_repo": repo, "dummy_image": [side, side], "images": images}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}: {len(images)} cases")


if __name__ == "__main__":
    main()
