"""Tokens an image brings into a request, as the checkpoint's processor counts them.

A multimodal checkpoint's processor (``preprocessor_config.json``, the vision values of config.json)
turns an image of ``W×H`` pixels into a number of placeholder tokens the language model attends to
— tokens that take KV cache like text — and the engine sizes its encoder cache from the largest
item the processor can make. One frozen class per processor family; each preset's values live in
``presets/processors/`` with their source (``kvplan.presets.processor_presets``).

* ``QwenVLProcessor`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): ``smart_resize`` to a multiple of
  ``patch_size × merge_size`` within ``[min_pixels, max_pixels]``, then
  ``(H/patch)·(W/patch)/merge²`` tokens (transformers ``models/qwen2_vl/image_processing_qwen2_vl.py``
  ``smart_resize``; vLLM ``model_executor/models/qwen2_vl.py`` ``Qwen2VLProcessingInfo._get_vision_info``).
* ``PixtralProcessor`` (Mistral-Small-3.1): Pixtral's patch grid within ``longest_edge``, merged
  ``merge × merge``, a break token per row (vLLM ``mistral3.py`` ``get_patch_grid_size``).
* ``FixedProcessor`` (Gemma-3 with pan-and-scan off, its default): every image is resized to the
  tower's ``image_size`` and becomes ``mm_tokens_per_image`` tokens (transformers
  ``models/gemma3/processing_gemma3.py`` ``full_image_sequence``; vLLM ``gemma3_mm.py``
  ``Gemma3ProcessingInfo.get_num_image_tokens`` with ``num_crops`` 0).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvplan.errors import KVPlanError, short

#: Largest side accepted for a stated image (pixels): larger is refused by name (a 16K frame is
#: 15,360 px; nothing a processor resizes from needs more).
MAX_IMAGE_SIDE = 65_536
#: Most images one request may state (vLLM's default ``--limit-mm-per-prompt`` is 999 per
#: modality, ``config/multimodal.py``; a request beyond this is not a planning question).
MAX_IMAGES = 10_000
#: vLLM's limit per modality when ``--limit-mm-per-prompt`` does not name it
#: (``config/multimodal.py`` ``MultiModalConfig.get_limit_per_prompt``).
DEFAULT_MM_LIMIT = 999


class _Processor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Where the values were read (the checkpoint's files, their public copy).
    source: str = ""

    def check_size(self, width: int, height: int) -> None:
        """Refuse an image this processor cannot take, naming it (0×0, negative, absurd sides)."""
        if width < 1 or height < 1:
            raise KVPlanError("mm.image_size", size=f"{width}×{height}", key="image_size",
                              detail="both sides must be at least 1 pixel")
        if max(width, height) > MAX_IMAGE_SIDE:
            raise KVPlanError("mm.image_size", size=f"{width}×{height}", key="image_size",
                              detail=f"a side above {MAX_IMAGE_SIDE:,} pixels is not an image a "
                                     "processor takes")


#: Qwen3-VL's video placeholder per soft token in vLLM v0.11.0–v0.12.0 (``qwen3_vl.py``
#: ``Qwen3VLProcessingInfo.get_max_video_tokens``: ``formatted_video_soft_tokens =
#: video_soft_tokens * 12.5``, "<{timestamp} seconds>" ≈ 9.5 tokens + vision_start + video +
#: vision_end per soft token; ``int()`` of it). v0.13.0 returns the soft tokens.
QWEN3_VL_VIDEO_PLACEHOLDER = 12.5


class QwenVLProcessor(_Processor):
    """Qwen-VL's dynamic resolution: ``smart_resize`` then one token per ``merge × merge`` patches.

    ``patch_size``, ``merge_size`` (config.json ``vision_config.spatial_merge_size``) and
    ``temporal_patch_size`` give the grid; ``min_pixels`` / ``max_pixels`` (``size.shortest_edge``
    / ``size.longest_edge``) bound the resized area; ``wrapper_tokens`` are the
    ``<|vision_start|>``/``<|vision_end|>`` tokens the chat template writes around each image's
    ``<|image_pad|>`` (which the processor expands to the image tokens)."""

    kind: Literal["qwen_vl"] = "qwen_vl"
    patch_size: int = Field(ge=1)
    merge_size: int = Field(ge=1)
    temporal_patch_size: int = Field(default=2, ge=1)
    min_pixels: int = Field(ge=1)
    max_pixels: int = Field(ge=1)
    wrapper_tokens: int = Field(default=2, ge=0)
    #: vLLM's ``_MAX_FRAMES_PER_VIDEO`` for the profile's dummy video (qwen2_vl.py: 14).
    max_frames_per_video: int = Field(default=14, ge=1)
    #: The video scope's bounds: the video processor's (``video_preprocessor_config.json``
    #: ``size.shortest_edge`` / ``longest_edge``) or ``--mm-processor-kwargs``' ``videos_kwargs``
    #: (None: the image bounds above; vLLM 0.33 ``_get_vision_info`` reads the video scope).
    video_min_pixels: int | None = Field(default=None, ge=1)
    video_max_pixels: int | None = Field(default=None, ge=1)
    #: Qwen3-VL's video processor: the video bounds are on ``frames × H × W``, not on one frame
    #: (transformers ``video_processing_qwen3_vl.py`` ``smart_resize``; vLLM ``qwen3_vl.py``).
    #: False: the Qwen2-VL rules (each frame resized as an image, with the video scope's bounds).
    video_clip: bool = False

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def resize(self, width: int, height: int, max_pixels: int | None = None,
               video: bool = False) -> tuple[int, int]:
        """``(width, height)`` after transformers' ``smart_resize(height, width, factor, min_pixels,
        max_pixels)``: both sides rounded to ``factor`` (Python's ``round``), scaled down by
        ``sqrt(H·W/max_pixels)`` (floor) when above ``max_pixels``, up by
        ``sqrt(min_pixels/(H·W))`` (ceil) when below ``min_pixels``; aspect ratios above 200 are
        refused, as transformers raises. ``video``: the video scope's bounds (vLLM 0.33
        ``_get_vision_info`` reads ``videos_kwargs`` for a video)."""
        self.check_size(width, height)
        if max(height, width) / min(height, width) > 200:
            raise KVPlanError("mm.image_size", size=f"{width}×{height}", key="image_size",
                              detail="aspect ratio above 200, which the Qwen-VL processor "
                                     "refuses (smart_resize)")
        bottom, top = self.bounds(video)
        top = top if max_pixels is None else max_pixels
        factor = self.factor
        h_bar = round(height / factor) * factor
        w_bar = round(width / factor) * factor
        if h_bar * w_bar > top:
            beta = math.sqrt((height * width) / top)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < bottom:
            beta = math.sqrt(bottom / (height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return w_bar, h_bar

    def bounds(self, video: bool = False) -> tuple[int, int]:
        """``(min_pixels, max_pixels)`` of the image scope, or of the video scope."""
        if not video:
            return self.min_pixels, self.max_pixels
        return (self.min_pixels if self.video_min_pixels is None else self.video_min_pixels,
                self.max_pixels if self.video_max_pixels is None else self.video_max_pixels)

    def image_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """Image tokens of one ``width × height`` image: ``(H'/patch)·(W'/patch) / merge²`` after
        ``resize`` (vLLM ``Qwen2VLProcessingInfo._get_vision_info``, one frame: ``grid_t`` 1)."""
        w, h = self.resize(width, height, max_pixels)
        return self._grid_tokens(w, h, 1)

    def _grid_tokens(self, width: int, height: int, frames: int) -> int:
        """Tokens of ``frames`` resized frames: frames padded to a multiple of
        ``temporal_patch_size``, ``grid_t`` (at least 1) × the frame's patches / ``merge²``."""
        padded = frames + (-frames % self.temporal_patch_size)
        grid_t = max(padded // self.temporal_patch_size, 1)
        return grid_t * (height // self.patch_size) * (width // self.patch_size) // self.merge_size ** 2

    def video_tokens(self, width: int, height: int, frames: int, max_pixels: int | None = None) -> int:
        """Tokens of ``frames`` frames of ``width × height``: each frame resized (``resize``, or
        Qwen3-VL's ``resize_video``), frames padded to a multiple of ``temporal_patch_size``,
        ``grid_t = frames' / temporal_patch_size`` (at least 1), times the frame's grid over
        ``merge²`` (vLLM ``_get_vision_info``)."""
        if frames < 1:
            raise KVPlanError("mm.frames", count=frames, detail="at least 1 frame")
        if self.video_clip:
            w, h = self.resize_video(width, height, frames)
        else:
            w, h = self.resize(width, height, max_pixels, video=True)
        return self._grid_tokens(w, h, frames)

    def resize_video(self, width: int, height: int, frames: int) -> tuple[int, int]:
        """``(width, height)`` of each frame after Qwen3-VL's video ``smart_resize(num_frames, height,
        width, temporal_factor, factor, min_pixels, max_pixels)`` (transformers
        ``video_processing_qwen3_vl.py``; vLLM ``qwen3_vl.py`` ``_get_vision_info``): fewer frames
        than ``temporal_patch_size`` are refused; sides below ``factor`` scaled up to it
        (``int``); both sides rounded to ``factor``, frames to ``temporal_patch_size``; scaled by
        ``sqrt(frames·H·W / max)`` (floor) when ``t·H'·W'`` is above the video scope's max, by
        ``sqrt(min / (frames·H·W))`` (ceil) when below its min (``bounds(video=True)``)."""
        self.check_size(width, height)
        low, top = self.bounds(video=True)
        temporal, factor = self.temporal_patch_size, self.factor
        if frames < temporal:
            raise KVPlanError("mm.frames", count=frames,
                              detail=f"at least {temporal} frames (Qwen3-VL's video processor)")
        if height < factor or width < factor:
            scale = max(factor / height, factor / width)
            height, width = int(height * scale), int(width * scale)
        if max(height, width) / min(height, width) > 200:
            raise KVPlanError("mm.image_size", size=f"{width}×{height}", key="image_size",
                              detail="aspect ratio above 200, which the Qwen-VL processor "
                                     "refuses (smart_resize)")
        h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
        t_bar = round(frames / temporal) * temporal
        if t_bar * h_bar * w_bar > top:
            beta = math.sqrt(frames * height * width / top)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif t_bar * h_bar * w_bar < low:
            beta = math.sqrt(low / (frames * height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return w_bar, h_bar

    def prompt_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """Tokens one image adds to the prompt: its image tokens plus the template's wrapper."""
        return self.image_tokens(width, height, max_pixels) + self.wrapper_tokens

    def video_frames(self, videos: VideoRequest) -> int:
        """Frames of one stated video that reach the processor under vLLM 0.33: every frame of the
        file, ``floor(seconds × fps)`` (the default ``opencv`` loader, ``multimodal/video.py``
        ``VideoBackend.load_bytes``: ``num_frames`` −1 and ``fps`` −1 keep them all; Qwen2-VL's
        video processor does not sample, ``do_sample_frames`` false, transformers
        ``video_processing_qwen2_vl.py``)."""
        return videos.frames

    def video_prompt_tokens(self, videos: VideoRequest, max_pixels: int | None = None) -> int:
        """Tokens one video adds to the prompt: ``video_tokens`` of its frames (``video_frames``)
        plus the template's ``<|vision_start|>``/``<|vision_end|>`` around ``<|video_pad|>``.
        Qwen3-VL's video processor (``video_clip``) is refused by name: vLLM writes a
        ``<X.X seconds>`` text timestamp before each temporal patch (``qwen3_vl.py``
        ``_get_prompt_updates``, ``_calculate_timestamps``), tokens of the tokenizer that kvplan
        does not count."""
        if self.video_clip:
            raise KVPlanError("mm.videos", count=videos.count, key="videos",
                              detail="Qwen3-VL's video prompt holds a '<X.X seconds>' text timestamp "
                                     "per temporal patch (vLLM qwen3_vl.py _get_prompt_updates), "
                                     "tokens kvplan does not count; not modelled")
        return self.video_tokens(videos.width, videos.height, self.video_frames(videos),
                                 max_pixels) + self.wrapper_tokens

    def describe_video(self, videos: VideoRequest, max_pixels: int | None = None) -> str:
        """The prompt tokens of one video as a formula with its values."""
        frames = self.video_frames(videos)
        w, h = self.resize(videos.width, videos.height, max_pixels, video=True)
        grid_t = max((frames + (-frames % self.temporal_patch_size)) // self.temporal_patch_size, 1)
        low, top = self.bounds(video=True)
        top = top if max_pixels is None else max_pixels
        return (f"{videos.seconds:g} s × {videos.fps:g} fps = {frames:,} frames (vLLM 0.33's opencv "
                f"loader keeps every frame), padded to a multiple of {self.temporal_patch_size}: "
                f"grid_t {grid_t:,}; each frame smart_resize {videos.width}×{videos.height} → {w}×{h} "
                f"(pixels {low:,}–{top:,}); {grid_t:,}·({h}/{self.patch_size})·({w}/{self.patch_size})/"
                f"{self.merge_size}² = {self.video_tokens(videos.width, videos.height, frames, max_pixels):,}"
                f" video tokens + {self.wrapper_tokens} template tokens (vLLM qwen2_vl.py "
                "_get_vision_info)")

    def describe(self, width: int, height: int, max_pixels: int | None = None) -> str:
        """The prompt tokens of one image as a formula with its values."""
        w, h = self.resize(width, height, max_pixels)
        top = self.max_pixels if max_pixels is None else max_pixels
        return (f"smart_resize {width}×{height} → {w}×{h} (multiple of {self.factor}, pixels "
                f"{self.min_pixels:,}–{top:,}); ({h}/{self.patch_size})·({w}/{self.patch_size})/"
                f"{self.merge_size}² = {self.image_tokens(width, height, max_pixels):,} image tokens "
                f"+ {self.wrapper_tokens} template tokens (transformers image_processing_qwen2_vl.py "
                "smart_resize; vLLM qwen2_vl.py _get_vision_info)")

    def largest_image(self, max_pixels: int | None = None) -> tuple[int, int]:
        """``(width, height)`` of vLLM's profile image (``get_image_size_with_most_features``): the
        ``max_pixels // factor²`` merged patches factored into the closest pair ``h ≤ w`` with
        ``w / h ≤ 200``, fewer patches until one exists; sides ``factor ×`` the pair."""
        unit = self.factor
        most = (self.max_pixels if max_pixels is None else max_pixels) // (unit * unit)
        hf, wf = 1, most
        for n in range(most, 0, -1):
            hf, wf = next(((d, n // d) for d in range(math.isqrt(n), 0, -1) if n % d == 0), (1, n))
            if wf / hf <= 200:
                break
        return unit * wf, unit * hf

    def max_image_tokens(self, max_pixels: int | None = None) -> int:
        """vLLM's ``get_max_image_tokens``: the tokens of ``largest_image``."""
        return self.image_tokens(*self.largest_image(max_pixels), max_pixels)

    def max_video_tokens(self, seq_len: int, videos: int = 1, max_pixels: int | None = None) -> int:
        """vLLM's ``get_max_video_tokens``: frames of ``largest_image`` added one at a time while
        their tokens stay within ``seq_len`` (``_get_max_video_frames``), shared by ``videos`` and
        capped at ``max_frames_per_video`` (``get_num_frames_with_most_features``). Qwen3-VL
        (``video_clip``; ``qwen3_vl.py`` ``get_max_video_tokens``): two frames of the largest
        image within the video scope's max pixels ``// temporal_patch_size``."""
        if self.video_clip:
            w, h = self.largest_image(self.bounds(video=True)[1] // self.temporal_patch_size)
            return self.video_tokens(w, h, 2)
        w, h = self.largest_image(max_pixels)
        frames = 1
        while self.video_tokens(w, h, frames + 1, max_pixels) <= seq_len:
            frames += 1
        per_video = max(min(frames // max(videos, 1), self.max_frames_per_video), 1)
        return self.video_tokens(w, h, per_video, max_pixels)

    def max_tokens_per_item(self, seq_len: int, max_pixels: int | None = None,
                            placeholder: bool = False) -> dict[str, int]:
        """vLLM's ``get_mm_max_tokens_per_item`` (one item of each modality): image and video (the
        placeholder is the expanded ``<|image_pad|>`` / ``<|video_pad|>`` run: no other tokens).
        Where the release counts placeholders (``placeholder``, v0.10.1–v0.12), Qwen3-VL's video
        (``video_clip``) counts ``int(soft tokens × 12.5)`` (``QWEN3_VL_VIDEO_PLACEHOLDER``; vLLM
        v0.11.0 and v0.12.0 ``qwen3_vl.py`` ``get_max_video_tokens``)."""
        video = self.max_video_tokens(seq_len, 1, max_pixels)
        if placeholder and self.video_clip:
            video = int(video * QWEN3_VL_VIDEO_PLACEHOLDER)
        return {"image": self.max_image_tokens(max_pixels), "video": video}


class FixedProcessor(_Processor):
    """A processor that resizes every image to the tower's square ``image_size``: each image is
    ``tokens_per_image`` embeddings (Gemma-3 ``mm_tokens_per_image`` / ``image_seq_length``, 256,
    with ``do_pan_and_scan`` off, its default) and ``prompt_tokens_per_image`` prompt tokens
    (Gemma-3's ``full_image_sequence``: ``\\n\\n``, ``<start_of_image>``, 256 ``<image_soft_token>``,
    ``<end_of_image>``, ``\\n\\n`` = 260 tokens)."""

    kind: Literal["fixed"] = "fixed"
    tokens_per_image: int = Field(ge=1)
    prompt_tokens_per_image: int = Field(ge=1)
    image_size: int = Field(ge=1)

    def image_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """``tokens_per_image`` for any size (the image is resized to ``image_size`` square)."""
        self.check_size(width, height)
        return self.tokens_per_image

    def prompt_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        self.check_size(width, height)
        return self.prompt_tokens_per_image

    def describe(self, width: int, height: int, max_pixels: int | None = None) -> str:
        """The prompt tokens of one image as a formula with its values."""
        self.check_size(width, height)
        return (f"{width}×{height} resized to {self.image_size}×{self.image_size}: "
                f"{self.tokens_per_image} image tokens, {self.prompt_tokens_per_image} prompt tokens "
                "with the boi/eoi and newline tokens (pan-and-scan off; transformers "
                "processing_gemma3.py full_image_sequence; vLLM gemma3_mm.py get_num_image_tokens)")

    def max_tokens_per_item(self, seq_len: int, max_pixels: int | None = None,
                            placeholder: bool = False) -> dict[str, int]:
        """Images only; vLLM counts the dummy image's embeddings (``encoder_budget.py``
        ``get_mm_max_toks_per_item`` through ``get_dummy_mm_inputs``): ``tokens_per_image`` — or,
        where the release counts the whole placeholder (``placeholder``; v0.10.1–v0.12), the
        ``prompt_tokens_per_image`` of the replacement."""
        return {"image": self.prompt_tokens_per_image if placeholder else self.tokens_per_image}


class TiledProcessor(_Processor):
    """Llama-4's tiles: the image is fitted without distortion into the best canvas of at most
    ``max_tiles`` square tiles of ``tile_size`` (transformers ``models/llama4/image_processing_llama4.py``
    ``find_supported_resolutions``, ``get_best_fit`` with ``resize_to_max_canvas`` off), each tile
    ``tokens_per_tile`` embeddings (``(tile_size / patch_size)² / downsample_ratio``: 576 / 4 = 144),
    plus one global tile when there is more than one. The prompt (``processing_llama4.py``
    ``_prompt_split_image``): ``<|image_start|>``, for several tiles each row's tiles with
    ``<|tile_x_separator|>`` between them and a ``<|tile_y_separator|>`` after the row, then
    ``<|image|>``, the global tile's tokens and ``<|image_end|>``."""

    kind: Literal["tiles"] = "tiles"
    tile_size: int = Field(ge=1)
    max_tiles: int = Field(ge=1)
    tokens_per_tile: int = Field(ge=1)

    def canvas(self, width: int, height: int) -> tuple[int, int]:
        """``(columns, rows)`` of tiles of ``get_best_fit``: per canvas the limiting scale
        ``min(H_c/H, W_c/W)`` (float32, as the torch tensors), the smallest scale ≥ 1 if any, else the
        largest below 1; among canvases with that scale the smallest area (first in
        ``find_supported_resolutions``' order on a tie)."""
        self.check_size(width, height)
        options: list[tuple[int, int]] = []
        by_ratio: dict[float, list[tuple[int, int]]] = {}
        for chunks in range(self.max_tiles, 0, -1):
            for factor in sorted({d for i in range(1, math.isqrt(chunks) + 1) if chunks % i == 0
                                  for d in (i, chunks // i)}):
                by_ratio.setdefault(factor / (chunks // factor), []).append((factor, chunks // factor))
        for pairs in by_ratio.values():
            options.extend(pairs)
        size = self.tile_size
        h32, w32 = np.float32(height), np.float32(width)
        scales = [min(np.float32(rows * size) / h32, np.float32(cols * size) / w32)
                  for rows, cols in options]
        up = [v for v in scales if v >= 1]
        chosen = min(up) if up else max(scales)
        picked = [(rows * cols, i) for i, ((rows, cols), v) in enumerate(zip(options, scales, strict=True))
                  if v == chosen]
        rows, cols = options[min(picked)[1]]
        return cols, rows

    def image_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """Embeddings: ``(tiles + 1 if tiles > 1) × tokens_per_tile``."""
        cols, rows = self.canvas(width, height)
        tiles = cols * rows
        return (tiles + (1 if tiles > 1 else 0)) * self.tokens_per_tile

    def prompt_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """Prompt tokens of ``_prompt_split_image``: the embeddings, the separators
        (``rows × (cols − 1)`` x, ``rows`` y, with several tiles) and start, ``<|image|>``, end."""
        cols, rows = self.canvas(width, height)
        separators = rows * (cols - 1) + rows if cols * rows > 1 else 0
        return self.image_tokens(width, height) + separators + 3

    def describe(self, width: int, height: int, max_pixels: int | None = None) -> str:
        """The prompt tokens of one image as a formula with its values."""
        cols, rows = self.canvas(width, height)
        return (f"{width}×{height} on a {cols}×{rows} canvas of {self.tile_size}-px tiles (get_best_fit, "
                f"≤ {self.max_tiles} tiles): {self.image_tokens(width, height):,} image tokens "
                f"({self.tokens_per_tile} per tile{', + the global tile' if cols * rows > 1 else ''}), "
                f"{self.prompt_tokens(width, height):,} prompt tokens with the separators "
                "(transformers image_processing_llama4.py get_best_fit, processing_llama4.py "
                "_prompt_split_image)")

    def max_tokens_per_item(self, seq_len: int, max_pixels: int | None = None,
                            placeholder: bool = False) -> dict[str, int]:
        """vLLM's dummy image (``mllama4.py`` ``get_image_size_with_most_features``): ``max_tiles ×
        tile_size`` high, ``tile_size`` wide — its embeddings, or its whole placeholder."""
        w, h = self.tile_size, self.max_tiles * self.tile_size
        return {"image": self.prompt_tokens(w, h) if placeholder else self.image_tokens(w, h)}


class PixtralProcessor(_Processor):
    """Pixtral's patch grid with Mistral-3's spatial merge (Mistral-Small-3.1): an image larger
    than ``longest_edge`` on a side is scaled down by ``max(W, H) / longest_edge`` (both sides
    floored), then cut into ``patch_size × merge_size`` cells, ``ceil`` per side: ``cols × rows``
    embeddings; the prompt is each row's ``[IMG]`` tokens and an ``[IMG_BREAK]``, the last one an
    ``[IMG_END]``: ``rows × (cols + 1)`` tokens (vLLM ``mistral3.py``
    ``Mistral3HFEncoderInfo.get_patch_grid_size`` and ``_get_prompt_updates``; transformers
    ``processing_pixtral.py``). ``longest_edge``: ``preprocessor_config.json`` ``size``."""

    kind: Literal["pixtral"] = "pixtral"
    longest_edge: int = Field(ge=1)
    patch_size: int = Field(ge=1)
    merge_size: int = Field(default=1, ge=1)

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """``(cols, rows)`` of merged patches (``get_patch_grid_size``)."""
        self.check_size(width, height)
        ratio = max(width / self.longest_edge, height / self.longest_edge)
        if ratio > 1:
            width, height = math.floor(width / ratio), math.floor(height / ratio)
        cell = self.patch_size * self.merge_size
        return (width - 1) // cell + 1, (height - 1) // cell + 1

    def image_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """Embeddings: ``cols × rows``."""
        cols, rows = self.grid(width, height)
        return cols * rows

    def prompt_tokens(self, width: int, height: int, max_pixels: int | None = None) -> int:
        """Prompt tokens: ``rows × (cols + 1)`` (the breaks and the end token)."""
        cols, rows = self.grid(width, height)
        return rows * (cols + 1)

    def describe(self, width: int, height: int, max_pixels: int | None = None) -> str:
        """The prompt tokens of one image as a formula with its values."""
        cols, rows = self.grid(width, height)
        cell = self.patch_size * self.merge_size
        return (f"{width}×{height} within {self.longest_edge} px a side, {cell}-px cells: {cols} × "
                f"{rows} = {cols * rows:,} image tokens, {rows} × ({cols} + 1) = "
                f"{rows * (cols + 1):,} prompt tokens with the row breaks (vLLM mistral3.py "
                "get_patch_grid_size)")

    def max_tokens_per_item(self, seq_len: int, max_pixels: int | None = None,
                            placeholder: bool = False) -> dict[str, int]:
        """vLLM's dummy image, ``longest_edge`` square (``get_image_size_with_most_features``):
        its embeddings, or its whole placeholder."""
        side = self.longest_edge
        return {"image": self.prompt_tokens(side, side) if placeholder else self.image_tokens(side, side)}


Processor = Annotated[QwenVLProcessor | FixedProcessor | TiledProcessor | PixtralProcessor,
                      Field(discriminator="kind")]


class ImageRequest(BaseModel):
    """The images one request brings: ``count`` images of ``width × height`` pixels."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(default=0, ge=0, le=MAX_IMAGES)
    width: int = 0
    height: int = 0

    @classmethod
    def parse(cls, count: int, size: str) -> ImageRequest:
        """``count`` images of ``size`` written ``WxH`` (``1280x720``); a named error if not."""
        parts = size.lower().replace("×", "x").split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() and len(p.strip()) <= 9 for p in parts):
            raise KVPlanError("mm.image_size", size=short(size, 40), key="image_size",
                              detail="expected WIDTHxHEIGHT in pixels, e.g. 1280x720")
        if count < 0 or count > MAX_IMAGES:
            raise KVPlanError("mm.images", count=count, key="images", detail=f"expected 0 to {MAX_IMAGES:,}")
        return cls(count=count, width=int(parts[0]), height=int(parts[1]))


def image_prompt_tokens(model: str, processor: Processor | None,
                        images: ImageRequest, limit: int | None = DEFAULT_MM_LIMIT,
                        max_pixels: int | None = None, flag: str = "--limit-mm-per-prompt",
                        refusal: str = "per prompt (vLLM refuses the request)") -> int:
    """Prompt tokens of a request's images: ``count × processor.prompt_tokens(W, H)``; refused by
    name for a model without a known processor, more images than ``limit``, the engine's
    (``Engine.image_limit``, named by its ``flag`` and what the engine then does, ``refusal``,
    "per prompt (…)" / "per request (…)";
    None: no limit; vLLM ``--limit-mm-per-prompt``, default 999: "At most N image(s) may be
    provided", ``multimodal/processing`` ``_validate_mm_counts``; SGLang
    ``--limit-mm-data-per-request``) or a size the processor refuses."""
    if not images.count:
        return 0
    if processor is None:
        raise KVPlanError("mm.images", count=images.count, key="images",
                          detail=f"no image processor is known for {model} (presets/processors/ "
                                 "lists the checkpoints that have one)")
    top = limit
    if top is not None and images.count > top:
        raise KVPlanError("mm.images", count=images.count, key="images",
                          detail=f"above {flag}'s {top} {refusal}")
    return images.count * processor.prompt_tokens(images.width, images.height, max_pixels)


#: Longest video a request may state (seconds: a day) and its highest frame rate (frames per
#: second): beyond either it is not a planning question, refused by name.
MAX_VIDEO_SECONDS = 86_400
MAX_VIDEO_FPS = 240


class VideoRequest(BaseModel):
    """The videos one request brings: ``count`` videos of ``width × height`` pixels, each
    ``seconds`` long at ``fps`` frames per second (the file's frame rate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(default=0, ge=0, le=MAX_IMAGES)
    width: int = 0
    height: int = 0
    seconds: float = Field(default=0, ge=0, le=MAX_VIDEO_SECONDS)
    fps: float = Field(default=0, ge=0, le=MAX_VIDEO_FPS)

    @property
    def frames(self) -> int:
        """The file's frames, ``floor(seconds × fps)`` in decimal (2.3 s × 10 fps = 23, not the
        float product's 22.99…)."""
        from decimal import Decimal

        return math.floor(Decimal(repr(self.seconds)) * Decimal(repr(self.fps)))

    @classmethod
    def parse(cls, count: int, size: str, seconds: float, fps: float) -> VideoRequest:
        """``count`` videos of ``size`` (``WxH``), ``seconds`` long at ``fps``; a named error for
        a bad size, a count outside 0–``MAX_IMAGES``, a duration or frame rate that is not a
        positive finite number within its bound, or a video of less than one frame."""
        if count < 0 or count > MAX_IMAGES:
            raise KVPlanError("mm.videos", count=count, key="videos", detail=f"expected 0 to {MAX_IMAGES:,}")
        try:
            image = ImageRequest.parse(0, size)
        except KVPlanError as exc:
            raise KVPlanError("mm.video_input", flag="--video-size", key="video_size",
                              value=short(size, 40), detail=str(exc.fields["detail"])) from None
        if image.width < 1 or image.height < 1 or max(image.width, image.height) > MAX_IMAGE_SIDE:
            raise KVPlanError("mm.video_input", flag="--video-size", key="video_size",
                              value=f"{image.width}x{image.height}",
                              detail=f"each side from 1 to {MAX_IMAGE_SIDE:,} pixels")
        for name, value, top, unit in (("seconds", seconds, MAX_VIDEO_SECONDS, "seconds"),
                                       ("fps", fps, MAX_VIDEO_FPS, "frames per second")):
            if not math.isfinite(value) or value <= 0 or value > top:
                raise KVPlanError("mm.video_input", flag=f"--video-{name}", key=f"video_{name}",
                                  value=short(value, 30),
                                  detail=f"expected more than 0 and at most {top:,} {unit}")
        video = cls(count=count, width=image.width, height=image.height, seconds=seconds, fps=fps)
        if count and video.frames < 1:
            raise KVPlanError("mm.video_input", flag="--video-seconds", key="video_seconds",
                              value=short(seconds, 30),
                              detail=f"{seconds:g} s × {fps:g} fps is less than one frame")
        return video


def video_prompt_tokens(model: str, processor: Processor | None, videos: VideoRequest,
                        limit: int | None = DEFAULT_MM_LIMIT, max_pixels: int | None = None,
                        flag: str = "--limit-mm-per-prompt",
                        refusal: str = "per prompt (vLLM refuses the request)") -> int:
    """Prompt tokens of a request's videos: ``count × processor.video_prompt_tokens``; refused by
    name for a model whose processor takes no video (Gemma-3, Llama-4, Mistral-3: image-only in
    vLLM 0.33), Qwen3-VL's timestamped video prompt, more videos than the engine's ``limit``
    (``Engine.image_limit``: the same count per modality, vLLM ``--limit-mm-per-prompt``,
    SGLang ``--limit-mm-data-per-request``) or a frame size the processor refuses."""
    if not videos.count:
        return 0
    if not isinstance(processor, QwenVLProcessor):
        what = "no processor is known" if processor is None else "its processor takes no video"
        raise KVPlanError("mm.videos", count=videos.count, key="videos",
                          detail=f"{what} for {model} (the Qwen-VL processors of presets/processors/ do)")
    if limit is not None and videos.count > limit:
        raise KVPlanError("mm.videos", count=videos.count, key="videos",
                          detail=f"above {flag}'s {limit} {refusal}")
    return videos.count * processor.video_prompt_tokens(videos, max_pixels)


#: The HF processor kwarg scopes vLLM 0.33 routes ``--mm-processor-kwargs`` into
#: (``config/multimodal.py`` ``_HF_PROCESSOR_KWARG_SCOPES``), the two a vision processor reads.
_SCOPES = ("images_kwargs", "videos_kwargs")


def _refuse_kwarg(model: str, key: str, detail: str) -> KVPlanError:
    return KVPlanError("mm.kwargs", key=short(key, 40), model=model, detail=detail)


def _pixels(model: str, where: str, value: object) -> int:
    """A pixel count of ``--mm-processor-kwargs``: a whole number from 1 to ``MAX_IMAGE_SIDE``²."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IMAGE_SIDE ** 2:
        raise _refuse_kwarg(model, where, f"expected a whole number of pixels from 1 to "
                                          f"{MAX_IMAGE_SIDE ** 2:,}, got {short(repr(value), 30)}")
    return value


def _qwen_scope(model: str, prefix: str, kwargs: dict[str, object]) -> dict[str, object]:
    """One mapping's ``min_pixels`` / ``max_pixels`` (None: no override, as HF reads it) and
    ``size`` edges, checked; any other key is refused by name."""
    out: dict[str, object] = {}
    for key, value in kwargs.items():
        if not prefix and key in _SCOPES:
            continue
        if key == "size":
            if not isinstance(value, dict):
                raise _refuse_kwarg(model, f"{prefix}size", "expected an object "
                                    '{"shortest_edge": N, "longest_edge": N}')
            for edge, pixels in value.items():
                if edge not in {"shortest_edge", "longest_edge"}:
                    raise _refuse_kwarg(model, f"{prefix}size.{edge}", "the Qwen-VL processor's "
                                        "size takes shortest_edge and longest_edge (pixels)")
                _pixels(model, f"{prefix}size.{edge}", pixels)
            out["size"] = dict(value)
        elif key in {"min_pixels", "max_pixels"}:
            out[key] = None if value is None else _pixels(model, prefix + key, value)
        else:
            raise _refuse_kwarg(model, prefix + key, "the Qwen-VL processor's kwargs kvplan "
                                "models are min_pixels, max_pixels and size (and images_kwargs / "
                                "videos_kwargs holding them)")
    return out


def _scoped(model: str, kwargs: dict[str, object], scope: str) -> dict[str, object]:
    value = kwargs.get(scope)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse_kwarg(model, scope, "expected a JSON object")
    return value


def _scope_bounds(flat: dict[str, object], scoped: dict[str, object], low: int,
                  high: int) -> tuple[int, int]:
    """``(min_pixels, max_pixels)`` one scope resolves to. vLLM 0.33: each flat key the HF
    processor supports is routed into the scope, a scoped value taking precedence, ``size``
    merged leaf by leaf (``multimodal/processing/context.py`` ``_resolve_mm_processor_kwargs``,
    ``_merge_scoped_mm_processor_value``); then the checkpoint's ``size``, updated by the
    scope's ``size``, overridden by a non-None ``min_pixels`` / ``max_pixels`` (qwen2_vl.py
    ``_get_vision_size``)."""
    merged = {**flat, **scoped}
    size = {**_mapping(flat.get("size")), **_mapping(scoped.get("size"))}
    edges = {"shortest_edge": low, "longest_edge": high, **size}
    bottom, top = merged.get("min_pixels"), merged.get("max_pixels")
    low_edge, high_edge = edges["shortest_edge"], edges["longest_edge"]
    return (bottom if isinstance(bottom, int) else low_edge if isinstance(low_edge, int) else low,
            top if isinstance(top, int) else high_edge if isinstance(high_edge, int) else high)


def _mapping(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}


def _qwen_kwargs(processor: QwenVLProcessor, model: str, kwargs: dict[str, object]) -> QwenVLProcessor:
    """Qwen-VL's bounds per scope (``_scope_bounds``); the video scope starts from the image
    processor's ``size`` as vLLM's ``_get_vision_info`` does for a video."""
    flat = _qwen_scope(model, "", kwargs)
    image = _qwen_scope(model, "images_kwargs.", _scoped(model, kwargs, "images_kwargs"))
    video = _qwen_scope(model, "videos_kwargs.", _scoped(model, kwargs, "videos_kwargs"))
    low, high = _scope_bounds(flat, image, processor.min_pixels, processor.max_pixels)
    v_low, v_high = _scope_bounds(flat, video, *processor.bounds(video=True))
    for name, a, b in (("min_pixels", low, high), ("videos_kwargs.min_pixels", v_low, v_high)):
        if a > b:
            raise _refuse_kwarg(model, name, f"min_pixels {a:,} is above max_pixels {b:,} "
                                "(transformers smart_resize refuses it)")
    return processor.model_copy(update={
        "min_pixels": low, "max_pixels": high,
        "video_min_pixels": None if (v_low, v_high) == (low, high) else v_low,
        "video_max_pixels": None if (v_low, v_high) == (low, high) else v_high})


def _pan_and_scan_kwargs(model: str, kwargs: dict[str, object]) -> None:
    """Gemma-3: ``do_pan_and_scan`` false (its default) is accepted; true adds crops per image
    (vLLM gemma3_mm.py ``get_num_crops``), which kvplan does not model, so it is refused by
    name; any other key is refused."""
    for prefix, scope in (("", kwargs), ("images_kwargs.", _scoped(model, kwargs, "images_kwargs"))):
        for key, value in scope.items():
            if not prefix and key == "images_kwargs":
                continue
            if key != "do_pan_and_scan":
                raise _refuse_kwarg(model, prefix + key, "the Gemma-3 processor's kwarg kvplan "
                                    "models is do_pan_and_scan (false)")
            if value not in (False, None):
                raise _refuse_kwarg(model, prefix + key, "pan-and-scan crops (more images per "
                                    "image, gemma3_mm.py get_num_crops) are not modelled; only "
                                    "false, the default, is")


def with_processor_kwargs(model: str, processor: Processor | None,
                          text: str | None) -> Processor | None:
    """``processor`` with vLLM's ``--mm-processor-kwargs`` (a JSON object, already canonical)
    applied, or a named refusal for a key the processor does not take or kvplan does not model.

    Qwen-VL: ``min_pixels``, ``max_pixels``, ``size.shortest_edge`` / ``size.longest_edge``, flat
    or inside ``images_kwargs`` / ``videos_kwargs`` (vLLM 0.33 ``config/multimodal.py``
    ``_merge_mm_processor_kwargs``; qwen2_vl.py ``_get_vision_size``). Gemma-3:
    ``do_pan_and_scan`` false. Llama-4's tiles and Pixtral's patch grid: none."""
    if text is None:
        return processor
    import json

    kwargs = json.loads(text)
    if not kwargs:
        return processor
    first = next(iter(kwargs))
    if processor is None:
        raise _refuse_kwarg(model, first, "no image processor is known for this model "
                            "(presets/processors/ lists the checkpoints that have one)")
    if isinstance(processor, QwenVLProcessor):
        return _qwen_kwargs(processor, model, kwargs)
    if isinstance(processor, FixedProcessor):
        _pan_and_scan_kwargs(model, kwargs)
        return processor
    if isinstance(processor, PixtralProcessor):
        raise _refuse_kwarg(model, first, "the Pixtral processor takes no kwargs kvplan models "
                            "(its longest edge is the checkpoint's)")
    raise _refuse_kwarg(model, first, "the Llama-4 tile processor takes no kwargs kvplan models "
                        "(max_patches is the checkpoint's)")
