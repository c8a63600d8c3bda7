"""Dev-time truth for Qwen3-VL's processor: vLLM's and transformers' own token counts on CPU.

Run with the venv of ``README.md`` here (vLLM 0.33.0, transformers 5.20.x); CI never runs this
file, it only reads ``tests/fixtures/multimodal_truth/qwen3_vl.json`` (compared by
``tests/test_multimodal_qwen3_vl.py``).

Called as is: vLLM ``model_executor/models/qwen3_vl.py`` ``Qwen3VLProcessingInfo`` —
``_get_vision_info`` (images: transformers ``qwen2_vl`` ``smart_resize``; videos: transformers
``video_processing_qwen3_vl.py`` ``smart_resize``), ``get_num_image_tokens``,
``get_num_video_tokens``, ``get_image_size_with_most_features``, ``get_max_image_tokens``,
``get_max_video_tokens``, ``get_mm_max_tokens_per_item`` (Qwen3.5 / 3.6: ``qwen3_5.py``
``Qwen3_5ProcessingInfo`` is that class); transformers' ``Qwen3VLConfig`` (``Qwen3_5Config``) built
from the preset's config.json and a real ``Qwen3VLVideoProcessor`` with the preset's video
values. Written here: the processing-info stub (no ``InputProcessingContext``: the image
processor is only its ``size``; no ``--mm-processor-kwargs``), as in ``generate.py``'s ``QwenInfo``.

    $S/bin/python tools/multimodal_truth/qwen3_vl.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402,F401  — puts the torchvision stand-in in place first

# isort: split

import transformers  # noqa: E402
import vllm  # noqa: E402
from transformers import Qwen3_5Config, Qwen3_5MoeConfig, Qwen3VLConfig, Qwen3VLMoeConfig  # noqa: E402
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor  # noqa: E402
from vllm.model_executor.models.qwen3_vl import Qwen3VLProcessingInfo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "qwen3_vl.json"
SIZES = [(1280, 720), (1920, 1080), (4000, 3000), (224, 224), (10, 10), (640, 480), (3840, 2160),
         (2000, 10), (31, 33), (64, 64), (56, 10000), (7680, 4320), (1024, 1024), (333, 777),
         (12345, 678), (256, 256), (100, 200)]
FRAMES = [2, 3, 4, 8, 16, 32, 64, 768]
SEQ_LENS = [2048, 32_768, 262_144]


class Qwen3Info(Qwen3VLProcessingInfo):
    """``Qwen3VLProcessingInfo`` without a context: the preset's config and processor values."""

    def __init__(self, config: dict[str, Any], image: dict[str, int], video: dict[str, int],
                 proc: dict[str, Any]) -> None:
        cls = {"qwen3_vl_moe": Qwen3VLMoeConfig, "qwen3_5": Qwen3_5Config,
               "qwen3_5_moe": Qwen3_5MoeConfig}.get(config["model_type"], Qwen3VLConfig)
        self._config = cls(**config)
        self._image = SimpleNamespace(size=dict(image))
        self._video = Qwen3VLVideoProcessor(size=dict(video), patch_size=proc["patch_size"],
                                            temporal_patch_size=proc["temporal_patch_size"],
                                            merge_size=proc["merge_size"])

    def get_hf_config(self) -> Any:
        return self._config

    def get_image_processor(self, **kwargs: object) -> Any:
        return self._image

    def get_video_processor(self, **kwargs: object) -> Any:
        return self._video

    def _merge_and_resolve_mm_processor_kwargs(self, mm_kwargs: Any) -> dict[str, Any]:
        return {"images_kwargs": {}, "videos_kwargs": {}}


def cases(hf_repo: str) -> dict[str, Any]:
    name = hf_repo.replace("/", "--")
    preset = json.loads((ROOT / "presets" / "models" / f"{name}.json").read_text())
    proc = json.loads((ROOT / "presets" / "processors" / f"{name}.json").read_text())["processor"]
    image = {"shortest_edge": proc["min_pixels"], "longest_edge": proc["max_pixels"]}
    video = {"shortest_edge": proc["video_min_pixels"], "longest_edge": proc["video_max_pixels"]}
    info = Qwen3Info(preset["config"], image, video, proc)
    images, videos = [], []
    for w, h in SIZES:
        try:
            tokens = info.get_num_image_tokens(image_width=w, image_height=h,
                                               image_processor=info._image, mm_kwargs={})
            images.append({"width": w, "height": h, "tokens": tokens})
        except ValueError as exc:
            images.append({"width": w, "height": h, "error": str(exc)})
        for frames in FRAMES if (w, h) in {(1280, 720), (3840, 2160), (224, 224), (10, 10)} else ():
            try:
                tokens = info.get_num_video_tokens(image_width=w, image_height=h, num_frames=frames,
                                                   image_processor=info._video, mm_kwargs={})
                videos.append({"width": w, "height": h, "frames": frames, "tokens": tokens})
            except ValueError as exc:
                videos.append({"width": w, "height": h, "frames": frames, "error": str(exc)})
    best = info.get_image_size_with_most_features()
    largest = [{"seq_len": seq, "largest_image": [best.width, best.height],
                "max_image_tokens": info.get_max_image_tokens(),
                "max_tokens_per_item": dict(info.get_mm_max_tokens_per_item(
                    seq_len=seq, mm_counts={"image": 1, "video": 1}))} for seq in SEQ_LENS]
    return {"hf_repo": hf_repo, "images": images, "videos": videos, "largest": largest}


def main() -> None:
    repos = ["Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3.5-27B",
             "Qwen/Qwen3.6-35B-A3B"]
    out = {"vllm": vllm.__version__, "transformers": transformers.__version__,
           "source": "tools/multimodal_truth/qwen3_vl.py (vLLM's and transformers' code on CPU)",
           "models": [cases(r) for r in repos]}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}: {sum(len(m['images']) + len(m['videos']) for m in out['models'])} cases")


if __name__ == "__main__":
    main()
