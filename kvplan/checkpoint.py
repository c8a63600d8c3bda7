"""Exact weight bytes from a checkpoint's safetensors headers, without reading tensor data.

A ``.safetensors`` file starts with an 8-byte little-endian header length ``N`` and ``N`` bytes of
JSON: ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}`` (safetensors
format spec, ``safetensors/src/tensor.rs`` ``SafeTensors::read_metadata``). A tensor's bytes are
``prod(shape) × dtype size``, which the spec requires to equal ``end − begin`` of its offsets.
Only the header is read; its size is bounded (``MAX_HEADER_BYTES``, the 100 MB the safetensors
library itself accepts) and only regular files are opened.

Tensors are grouped into the parts of ``kvplan.weights.PARTS`` by their names and compared with
the config-derived estimate (``kvplan.weights.weights_per_gpu`` at TP 1).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvplan.errors import KVPlanError, clip
from kvplan.weights import PARTS

#: The header limit of the safetensors library (``MAX_HEADER_SIZE`` = 100,000,000).
MAX_HEADER_BYTES = 100_000_000
MAX_FILES = 10_000
#: Bits per element of every safetensors dtype (``safetensors/src/tensor.rs`` ``Dtype::bitsize``).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
    "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass
class CheckpointSummary:
    """Bytes per part of every tensor in the headers read (and which files they came from)."""

    files: list[str] = field(default_factory=list)
    tensors: int = 0
    bytes_by_part: dict[str, int] = field(default_factory=dict)
    dtypes: dict[str, int] = field(default_factory=dict)
    #: ``metadata.total_size`` of ``model.safetensors.index.json``, when one was given.
    index_total: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_part.values())

    def add(self, info: TensorInfo, n_layers: int | None) -> None:
        part = part_of(info.name, n_layers)
        self.bytes_by_part[part] = self.bytes_by_part.get(part, 0) + info.nbytes
        self.dtypes[info.dtype] = self.dtypes.get(info.dtype, 0) + info.nbytes
        self.tensors += 1

    def as_dict(self) -> dict[str, Any]:
        return {"files": len(self.files), "tensors": self.tensors, "total_bytes": self.total_bytes,
                "bytes_by_part": {p: b for p, b in sorted(
                    self.bytes_by_part.items(), key=lambda kv: _ORDER.get(kv[0], 99))},
                "bytes_by_dtype": dict(sorted(self.dtypes.items())),
                "index_total_size": self.index_total}


_ORDER = {p: i for i, p in enumerate((*PARTS, "other"))}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def part_of(name: str, n_layers: int | None = None) -> str:
    """The part a checkpoint tensor belongs to, from its name (HF module naming)."""
    low = name.lower()
    if any(k in low for k in ("vision", "visual", "image_newline", "multi_modal_projector",
                              "mm_projector", "patch_embed", "img_")):
        return "vision"
    if "audio" in low:
        return "audio"
    if "embed_tokens_per_layer" in low or "per_layer_model_projection" in low:
        return "per_layer_embeddings"
    match = _LAYER.search(low)
    if match and n_layers is not None and int(match.group(1)) >= n_layers:
        return "mtp"
    if "lm_head" in low or low.startswith("output."):
        return "lm_head"
    if any(k in low for k in ("embed_tokens", "wte.", "word_embeddings", "embed_positions",
                              "tok_embeddings")):
        return "embeddings"
    if "shared_expert" in low:
        return "shared_experts"
    if ".experts." in low or low.endswith(".experts") or "experts." in low:
        return "experts"
    if re.search(r"\.(router|gate)(\.|$)", low) or "e_score_correction_bias" in low:
        return "router"
    if "norm" in low or ".ln_" in low or "layernorm" in low:
        return "norms"
    if any(k in low for k in ("self_attn", "attention", ".attn.", "mixer", "linear_attn")):
        return "attention"
    if any(k in low for k in ("mlp", "feed_forward", "ffn")):
        return "mlp"
    return "other"


def parse_header(raw: bytes, source: str) -> list[TensorInfo]:
    """Tensors of one safetensors header given as bytes (the file's first ``8 + N`` bytes or
    more); raises ``checkpoint.bad_file`` when it is not a valid header."""
    if len(raw) < 8:
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="shorter than 8 bytes")
    (size,) = struct.unpack("<Q", raw[:8])
    if size > MAX_HEADER_BYTES:
        raise KVPlanError("checkpoint.header_too_large", path=clip(source), size=size,
                          limit=MAX_HEADER_BYTES)
    if len(raw) < 8 + size:
        raise KVPlanError("checkpoint.bad_file", path=clip(source),
                          detail=f"header says {size:,} bytes, only {len(raw) - 8:,} present")
    try:
        header = json.loads(raw[8:8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise KVPlanError("checkpoint.bad_file", path=clip(source),
                          detail=f"header is not JSON ({type(exc).__name__})") from None
    return header_tensors(header, source)


def header_tensors(header: Any, source: str) -> list[TensorInfo]:
    """Validate a parsed header (name → dtype, shape, offsets) into ``TensorInfo``s."""
    if not isinstance(header, dict):
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="header is not an object")
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in DTYPE_BITS or not isinstance(
                entry.get("shape"), list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in entry["shape"]):
            raise KVPlanError("checkpoint.bad_file", path=clip(source),
                              detail=f"tensor {clip(name)} has no valid dtype/shape")
        elements = math.prod(entry["shape"])
        nbytes = -(-elements * DTYPE_BITS[entry["dtype"]] // 8)
        offsets = entry.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2 and all(
                isinstance(o, int) for o in offsets) and offsets[1] - offsets[0] != nbytes:
            raise KVPlanError("checkpoint.bad_file", path=clip(source),
                              detail=f"tensor {clip(name)}: offsets span {offsets[1] - offsets[0]:,}"
                                     f" bytes, dtype × shape is {nbytes:,}")
        out.append(TensorInfo(str(name), entry["dtype"], tuple(entry["shape"]), nbytes))
    return out


def read_header_file(path: Path) -> list[TensorInfo]:
    """The header of one local file: regular files only, never more than ``8 + N`` bytes read."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise KVPlanError("checkpoint.bad_file", path=clip(path),
                          detail=exc.strerror or "unreadable") from None
    if not stat.S_ISREG(info.st_mode):
        raise KVPlanError("checkpoint.bad_file", path=clip(path), detail="not a regular file")
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise KVPlanError("checkpoint.bad_file", path=clip(path), detail="shorter than 8 bytes")
            (size,) = struct.unpack("<Q", head)
            if size > MAX_HEADER_BYTES:
                raise KVPlanError("checkpoint.header_too_large", path=clip(path), size=size,
                                  limit=MAX_HEADER_BYTES)
            if size > info.st_size - 8:
                raise KVPlanError("checkpoint.bad_file", path=clip(path),
                                  detail=f"header length {size:,} exceeds the file")
            body = handle.read(size)
    except OSError as exc:
        raise KVPlanError("checkpoint.bad_file", path=clip(path),
                          detail=exc.strerror or "unreadable") from None
    return parse_header(head + body, str(path))


def read_index(raw: bytes, source: str = "model.safetensors.index.json") -> tuple[int | None, list[str]]:
    """``metadata.total_size`` and the shard file names of a ``model.safetensors.index.json``."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="not JSON") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="no weight_map")
    total = data.get("metadata", {}).get("total_size") if isinstance(data.get("metadata"), dict) else None
    files = sorted({str(v) for v in weight_map.values()})
    return (int(total) if isinstance(total, (int, float)) else None), files


def summarize(headers: dict[str, list[TensorInfo]], n_layers: int | None = None,
              index_total: int | None = None) -> CheckpointSummary:
    """Group the tensors of every header by part."""
    summary = CheckpointSummary(files=sorted(headers), index_total=index_total)
    for name in sorted(headers):
        for info in headers[name]:
            summary.add(info, n_layers)
    return summary


def read_checkpoint_dir(path: str | Path, n_layers: int | None = None) -> CheckpointSummary:
    """Every ``*.safetensors`` header of a local checkpoint folder (not recursive)."""
    folder = Path(path)
    if not folder.is_dir():
        raise KVPlanError("file.missing", path=clip(folder), detail="not a folder")
    files = sorted(p for p in folder.glob("*.safetensors"))[:MAX_FILES]
    if not files:
        raise KVPlanError("checkpoint.not_found", path=clip(folder))
    index_total = None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        index_total, _ = read_index(index.read_bytes()[:50_000_000], str(index))
    return summarize({p.name: read_header_file(p) for p in files}, n_layers, index_total)


def compare(summary: CheckpointSummary, estimate: dict[str, int]) -> dict[str, Any]:
    """Checkpoint bytes vs the config-derived estimate, per part and in total."""
    parts = sorted(set(summary.bytes_by_part) | set(estimate), key=lambda p: _ORDER.get(p, 99))
    rows = {p: {"checkpoint": summary.bytes_by_part.get(p, 0), "estimate": estimate.get(p, 0)}
            for p in parts}
    total_est = sum(estimate.values())
    return {"parts": rows, "checkpoint_total": summary.total_bytes, "estimate_total": total_est,
            "ratio": (total_est / summary.total_bytes) if summary.total_bytes else None}
