"""Dev-time truth generator: vLLM's and transformers' own multimodal token counts and encoder budget.

Run with a venv that has vLLM 0.33.0 and transformers installed (see ``README.md`` here); CI never
runs this file, it only reads the JSON it writes (``tests/fixtures/multimodal_truth/cases.json``,
compared by ``tests/test_multimodal_truth.py``).

What is the libraries' code and what is not:

* Called as is: transformers ``models/qwen2_vl/image_processing_qwen2_vl.py`` ``smart_resize``;
  vLLM ``model_executor/models/qwen2_vl.py`` ``Qwen2VLProcessingInfo`` — ``_get_vision_info``,
  ``get_num_image_tokens``, ``get_num_video_tokens``, ``get_image_size_with_most_features``,
  ``get_max_image_tokens``, ``get_num_frames_with_most_features``, ``get_max_video_tokens``,
  ``get_mm_max_tokens_per_item``, ``_get_vision_size``, ``_complete_mm_processor_size_aliases``;
  ``v1/core/encoder_cache_manager.py`` ``compute_mm_encoder_budget``;
  ``multimodal/encoder_budget.py`` ``MultiModalBudget._get_max_items`` and
  ``get_encoder_budget``; transformers' ``Qwen2_5_VLConfig`` built from the preset's config.json.
* Written here (vLLM builds them from a loaded model and a Hub processor): the processing-info
  stub (``QwenInfo``: no ``InputProcessingContext``; the image processor is only its ``size``
  from the preset's ``preprocessor_config.json`` values; ``--mm-processor-kwargs`` merged flat
  into ``images_kwargs``/``videos_kwargs`` as ``BaseProcessingInfo._merge_and_resolve_mm_processor_kwargs``
  does for a processor without per-modality defaults), the scheduler-config stub
  (``max_num_encoder_input_tokens`` = ``encoder_cache_size`` = ``max_num_batched_tokens``, as
  ``SchedulerConfig.__post_init__`` sets them) and the budget stub for ``_get_max_items``.

torchvision is not imported: its compiled ops do not load against this torch build, and nothing
called here uses it (transformers' module imports ``torchvision.transforms.v2.functional`` at the
top; a stand-in module is put in ``sys.modules``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "multimodal_truth" / "cases.json"


sys.path.insert(0, str(Path(__file__).parent))
import torchvision_stand_in  # noqa: E402

torchvision_stand_in.install()

import transformers  # noqa: E402
import vllm  # noqa: E402
from transformers import Qwen2_5_VLConfig  # noqa: E402
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (  # noqa: E402
    Qwen2VLImageProcessor,
    smart_resize,
)
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor  # noqa: E402
from vllm.config.multimodal import _merge_mm_processor_kwargs  # noqa: E402
from vllm.model_executor.models.qwen2_vl import Qwen2VLProcessingInfo  # noqa: E402
from vllm.multimodal.encoder_budget import MultiModalBudget  # noqa: E402
from vllm.multimodal.processing.context import _resolve_mm_processor_kwargs  # noqa: E402
from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget  # noqa: E402

SIZES = [(1280, 720), (1920, 1080), (4000, 3000), (224, 224), (10, 10), (640, 480), (3840, 2160),
         (1000, 1), (2000, 10), (29, 29), (42, 42), (56, 10000), (7680, 4320), (1024, 1024),
         (333, 777), (12345, 678)]
MAX_PIXELS = [None, 1_003_520, 200_704, 50_176]
SEQ_LENS = [2048, 8192, 32_768, 128_000]
FRAMES = [1, 2, 3, 8, 14, 15]
SCHEDULES = [  # (max_num_batched_tokens, max_num_seqs, max_model_len, limit, chunked_prefill)
    (8192, 1024, 128_000, 999, True), (2048, 256, 32_768, 999, True), (16_384, 512, 32_768, 4, True),
    (8192, 4, 512, 999, False), (2048, 1024, 8192, 1, True), (4096, 128, 128_000, 999, True)]


class QwenInfo(Qwen2VLProcessingInfo):
    """``Qwen2VLProcessingInfo`` without a context: the preset's config and processor values."""

    def __init__(self, config: dict[str, Any], size: dict[str, int], mm_kwargs: dict[str, Any]) -> None:
        self._config = Qwen2_5_VLConfig(**config)
        self._processor = SimpleNamespace(size=dict(size))
        self._mm_kwargs = mm_kwargs

    def get_hf_config(self) -> Any:
        return self._config

    def get_image_processor(self, **kwargs: object) -> Any:
        return self._processor

    def _merge_and_resolve_mm_processor_kwargs(self, mm_kwargs: Any) -> dict[str, Any]:
        merged = self._complete_mm_processor_size_aliases({**self._mm_kwargs, **dict(mm_kwargs)})
        return {"images_kwargs": merged, "videos_kwargs": merged}


#: ``BaseProcessingInfo.get_supported_mm_processor_kwargs`` for Qwen2.5-VL: the keys of the HF
#: image and video processors' ``valid_kwargs`` (the processor is not instantiated here).
SUPPORTED = {"images_kwargs": set(Qwen2VLImageProcessor.valid_kwargs.__annotations__),
             "videos_kwargs": set(Qwen2VLVideoProcessor.valid_kwargs.__annotations__)}

#: ``--mm-processor-kwargs`` values: flat, scoped, size aliases, and their precedence.
KWARGS = [
    {"max_pixels": 1_003_520}, {"min_pixels": 200_704}, {"size": {"longest_edge": 1_003_520}},
    {"size": {"shortest_edge": 50_176, "longest_edge": 401_408}},
    {"images_kwargs": {"max_pixels": 1_003_520}}, {"videos_kwargs": {"max_pixels": 200_704}},
    {"max_pixels": 200_704, "images_kwargs": {"max_pixels": 1_003_520}},
    {"max_pixels": 200_704, "images_kwargs": {"size": {"longest_edge": 1_003_520}}},
    {"size": {"longest_edge": 200_704}, "images_kwargs": {"size": {"longest_edge": 1_003_520}}},
    {"max_pixels": 1_003_520, "size": {"longest_edge": 200_704}},
    {"images_kwargs": {"max_pixels": 401_408}, "videos_kwargs": {"min_pixels": 3136, "max_pixels": 50_176}},
    {"max_pixels": None}, {"min_pixels": 1_003_520, "max_pixels": 12_845_056},
]


class QwenKwargsInfo(QwenInfo):
    """``QwenInfo`` with vLLM 0.33's own merge of ``--mm-processor-kwargs`` (the configured value)
    and the request's (``MultiModalConfig.merge_mm_processor_kwargs`` → ``_merge_mm_processor_kwargs``,
    then ``_resolve_mm_processor_kwargs`` with the supported keys, as
    ``Qwen2VLProcessingInfo._merge_and_resolve_mm_processor_kwargs`` → ``InputProcessingContext.
    get_merged_mm_kwargs`` does)."""

    def _merge_and_resolve_mm_processor_kwargs(self, mm_kwargs: Any) -> dict[str, Any]:
        prepared = self._complete_mm_processor_size_aliases(mm_kwargs)
        merged = _merge_mm_processor_kwargs(self._mm_kwargs, prepared)
        return _resolve_mm_processor_kwargs(merged, supported_mm_processor_kwargs=SUPPORTED)


def kwargs_cases(config: dict[str, Any], size: dict[str, int]) -> list[dict[str, Any]]:
    """Per ``KWARGS`` value: image tokens at three sizes, the profile's largest image and its
    tokens, video tokens of 8 frames at 1280×720 and the largest item per modality."""
    out = []
    for kwargs in KWARGS:
        info = QwenKwargsInfo(config, size, kwargs)
        best = info.get_image_size_with_most_features()
        out.append({
            "mm_processor_kwargs": kwargs,
            "image_tokens": {f"{w}x{h}": info.get_num_image_tokens(
                image_width=w, image_height=h, image_processor=info._processor, mm_kwargs={})
                for w, h in ((4000, 3000), (1280, 720), (224, 224))},
            "video_tokens_1280x720x8": info.get_num_video_tokens(
                image_width=1280, image_height=720, num_frames=8, image_processor=info._processor,
                mm_kwargs={}),
            "largest_image": [best.width, best.height], "max_image_tokens": info.get_max_image_tokens(),
            "max_tokens_per_item": dict(info.get_mm_max_tokens_per_item(
                seq_len=32_768, mm_counts={"image": 1, "video": 1}))})
    return out


def _budget(tokens: dict[str, int], mnbt: int, seqs: int, max_model_len: int, limit: int,
            chunked: bool) -> dict[str, Any]:
    scheduler = SimpleNamespace(max_num_encoder_input_tokens=mnbt, encoder_cache_size=mnbt,
                                max_num_batched_tokens=mnbt, disable_chunked_mm_input=False,
                                enable_chunked_prefill=chunked)
    compute, cache = compute_mm_encoder_budget(scheduler, tokens)
    stub = SimpleNamespace(encoder_compute_budget=compute, encoder_cache_size=cache,
                           mm_limits=dict.fromkeys(tokens, limit), max_model_len=max_model_len,
                           scheduler_config=scheduler, max_num_reqs=seqs)
    stub.get_encoder_budget = lambda: MultiModalBudget.get_encoder_budget(stub)
    modality = max(tokens.items(), key=lambda x: (x[1], x[0]))[0]
    per_prompt, per_batch = MultiModalBudget._get_max_items(stub, modality, tokens[modality])
    return {"compute_budget": compute, "cache_size": cache, "budget": min(compute, cache),
            "modality": modality, "items_per_prompt": per_prompt, "items_per_batch": per_batch}


def qwen_cases(hf_repo: str) -> dict[str, Any]:
    name = hf_repo.replace("/", "--")
    preset = json.loads((ROOT / "presets" / "models" / f"{name}.json").read_text())
    proc = json.loads((ROOT / "presets" / "processors" / f"{name}.json").read_text())["processor"]
    size = {"shortest_edge": proc["min_pixels"], "longest_edge": proc["max_pixels"]}
    factor = proc["patch_size"] * proc["merge_size"]
    images, videos, largest, budgets = [], [], [], []
    for top in MAX_PIXELS:
        kwargs = {} if top is None else {"max_pixels": top}
        info = QwenInfo(preset["config"], size, kwargs)
        limit = size["longest_edge"] if top is None else top
        for w, h in SIZES:
            try:
                rh, rw = smart_resize(h, w, factor=factor, min_pixels=size["shortest_edge"], max_pixels=limit)
                tokens = info.get_num_image_tokens(image_width=w, image_height=h,
                                                   image_processor=info._processor, mm_kwargs={})
            except ValueError as exc:
                images.append({"width": w, "height": h, "max_pixels": top, "error": str(exc)})
                continue
            images.append({"width": w, "height": h, "max_pixels": top, "resized": [rw, rh],
                           "tokens": tokens})
            for frames in FRAMES if (w, h) == (1280, 720) else ():
                videos.append({"width": w, "height": h, "frames": frames, "max_pixels": top,
                               "tokens": info.get_num_video_tokens(
                                   image_width=w, image_height=h, num_frames=frames,
                                   image_processor=info._processor, mm_kwargs={})})
        best = info.get_image_size_with_most_features()
        for seq in SEQ_LENS:
            per_item = dict(info.get_mm_max_tokens_per_item(seq_len=seq, mm_counts={"image": 1, "video": 1}))
            largest.append({"max_pixels": top, "seq_len": seq, "largest_image": [best.width, best.height],
                            "max_image_tokens": info.get_max_image_tokens(),
                            "max_tokens_per_item": per_item})
        for mnbt, seqs, mml, lim, chunked in SCHEDULES:
            per_item = dict(info.get_mm_max_tokens_per_item(seq_len=mml, mm_counts={"image": 1, "video": 1}))
            budgets.append({"max_pixels": top, "mnbt": mnbt, "max_num_seqs": seqs, "max_model_len": mml,
                            "limit": lim, "chunked_prefill": chunked,
                            **_budget(per_item, mnbt, seqs, mml, lim, chunked)})
    return {"hf_repo": hf_repo, "images": images, "videos": videos, "largest": largest,
            "budgets": budgets, "kwargs": kwargs_cases(preset["config"], size)}


LLAMA4_SIZES = [(1280, 720), (1920, 1080), (336, 336), (100, 100), (336, 5376), (5376, 336),
                (4000, 3000), (3840, 2160), (720, 1280), (1000, 1000), (673, 337), (12345, 678),
                (1, 1), (2000, 500), (640, 480), (1344, 1344), (1345, 1344), (30000, 20)]


def llama4_cases(hf_repo: str) -> dict[str, Any]:
    """transformers' ``find_supported_resolutions`` / ``get_best_fit`` (the canvas), its
    ``Llama4Processor._prompt_split_image`` (the prompt: counted as its special tokens) and vLLM's
    ``Mllama4ProcessingInfo.get_patch_per_chunk`` (tokens per tile) and dummy image size."""
    import re

    import torch
    from transformers.image_utils import SizeDict
    from transformers.models.llama4.configuration_llama4 import Llama4VisionConfig
    from transformers.models.llama4.image_processing_llama4 import find_supported_resolutions, get_best_fit
    from transformers.models.llama4.processing_llama4 import Llama4Processor
    from vllm.model_executor.models.mllama4 import Mllama4ProcessingInfo

    name = hf_repo.replace("/", "--")
    preset = next(d for p in sorted((ROOT / "presets" / "models").glob("*.json"))
                  if (d := json.loads(p.read_text()))["hf_repo"] == hf_repo)
    proc = json.loads((ROOT / "presets" / "processors" / f"{name}.json").read_text())["processor"]
    vision = Llama4VisionConfig(**preset["config"]["vision_config"])
    per_tile = Mllama4ProcessingInfo.get_patch_per_chunk(vision)
    tile = proc["tile_size"]
    options = torch.tensor(find_supported_resolutions(proc["max_tiles"], SizeDict(height=tile, width=tile)))
    images = []
    for w, h in LLAMA4_SIZES:
        canvas = get_best_fit((h, w), options, resize_to_max_canvas=False)
        rows, cols = int(canvas[0]) // tile, int(canvas[1]) // tile
        text = Llama4Processor._prompt_split_image(None, (rows, cols), per_tile)
        specials = len(re.findall(r"<\|[a-z_]+\|>", text))
        images.append({"width": w, "height": h, "canvas": [cols, rows],
                       "tokens": text.count("<|patch|>"), "prompt_tokens": specials})
    dummy = [tile, proc["max_tiles"] * tile]  # get_image_size_with_most_features: (width, height)
    return {"hf_repo": hf_repo, "tokens_per_tile": per_tile, "dummy_image": dummy, "images": images}


def main() -> None:
    cases = {"vllm": vllm.__version__, "transformers": transformers.__version__,
             "source": "tools/multimodal_truth/generate.py (vLLM's and transformers' code on CPU)",
             "models": [qwen_cases("Qwen/Qwen2.5-VL-7B-Instruct")],
             "tiled": [llama4_cases("meta-llama/Llama-4-Scout-17B-16E-Instruct")]}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(cases, indent=1) + "\n")
    count = sum(len(m["images"]) + len(m["videos"]) + len(m["budgets"]) + len(m["kwargs"])
                for m in cases["models"])
    print(f"wrote {OUT}: {count} cases")


if __name__ == "__main__":
    main()
