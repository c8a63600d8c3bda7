"""Exact weight bytes from a checkpoint's safetensors headers, without reading tensor data.

A ``.safetensors`` file starts with an 8-byte little-endian header length ``N`` and ``N`` bytes of
JSON: ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}`` (safetensors
format spec, ``safetensors/src/tensor.rs`` ``SafeTensors::read_metadata``). A tensor's bytes are
``prod(shape) × dtype size``, which the spec requires to equal ``end − begin`` of its offsets.
Only the header is read; its size is bounded (``MAX_HEADER_BYTES``, the 100 MB the safetensors
library itself accepts, and ``MAX_READ_HEADER_BYTES`` / ``MAX_TOTAL_HEADER_BYTES``, what kvplan
parses per file and per checkpoint) and only regular files are opened (non-blocking, so a FIFO
never stalls). Shapes, offsets and sums are bounded (``MAX_TENSOR_BYTES``) so every number stays
an exact int64; shard names of an index must be plain file names (``shard_name``).

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

from kvplan.errors import KVPlanError, clip, short
from kvplan.weights import PARTS

#: The header limit of the safetensors library (``MAX_HEADER_SIZE`` = 100,000,000).
MAX_HEADER_BYTES = 100_000_000
#: The header bytes kvplan parses of one file (16 MB: about 100,000 tensors; the largest single-file
#: headers of public checkpoints are under 2 MB) and of one checkpoint in total — about 2 s of CPU.
MAX_READ_HEADER_BYTES = 16_000_000
MAX_TOTAL_HEADER_BYTES = 32_000_000
#: Safetensors files of one checkpoint (public checkpoints have at most a few hundred shards).
MAX_FILES = 10_000
#: Bytes of one tensor and of a whole checkpoint (2^53, 8 PiB): sums stay exact in int64 and float.
MAX_TENSOR_BYTES = 1 << 53
#: Bytes of ``model.safetensors.index.json`` kvplan reads (real ones are under 2 MB).
MAX_INDEX_BYTES = 50_000_000
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
    """Validate a parsed header (name → dtype, shape, offsets) into ``TensorInfo``s.

    The safetensors library's own checks (``safetensors/src/tensor.rs`` ``Metadata::validate``):
    a known dtype string, a shape of non-negative integers whose byte count does not overflow,
    ``data_offsets`` of two non-negative integers ``begin ≤ end`` spanning exactly those bytes."""
    if not isinstance(header, dict):
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="header is not an object")
    out = []
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS or not isinstance(shape, list) or not all(
                type(d) is int and d >= 0 for d in shape):
            raise KVPlanError("checkpoint.bad_file", path=clip(source),
                              detail=f"tensor {clip(name)} has no valid dtype/shape")
        nbytes = tensor_bytes(shape, DTYPE_BITS[dtype], source)
        offsets = entry.get("data_offsets")
        if offsets is not None:
            if not (isinstance(offsets, list) and len(offsets) == 2
                    and all(type(o) is int and 0 <= o < 1 << 64 for o in offsets)
                    and offsets[0] <= offsets[1]):
                raise KVPlanError("checkpoint.bad_file", path=clip(source),
                                  detail=f"tensor {clip(name)}: data_offsets must be two whole "
                                         f"numbers 0 ≤ begin ≤ end")
            if offsets[1] - offsets[0] != nbytes:
                raise KVPlanError("checkpoint.bad_file", path=clip(source),
                                  detail=f"tensor {clip(name)}: offsets span {offsets[1] - offsets[0]:,}"
                                         f" bytes, dtype × shape is {nbytes:,}")
        total += nbytes
        if total > MAX_TENSOR_BYTES:
            raise KVPlanError("checkpoint.too_large", path=clip(source), limit=MAX_TENSOR_BYTES)
        out.append(TensorInfo(str(name), dtype, tuple(shape), nbytes))
    return out


def tensor_bytes(shape: list[int], bits: int, source: str) -> int:
    """``prod(shape) × bits / 8`` rounded up, refused past ``MAX_TENSOR_BYTES`` (checked dimension by
    dimension, so a 4,000-digit dimension or a thousand huge ones cost nothing)."""
    elements = 1
    for dim in shape:
        if dim == 0:
            return 0
    for dim in shape:
        if dim > MAX_TENSOR_BYTES:
            elements = MAX_TENSOR_BYTES + 1
            break
        elements *= dim
        if elements > MAX_TENSOR_BYTES:
            break
    nbytes = -(-elements * bits // 8)
    if nbytes > MAX_TENSOR_BYTES:
        raise KVPlanError("checkpoint.too_large", path=clip(source), limit=MAX_TENSOR_BYTES)
    return nbytes


def read_header_file(path: Path, limit: int = MAX_READ_HEADER_BYTES) -> list[TensorInfo]:
    """The header of one local file: regular files only (opened non-blocking, then checked, so a
    FIFO or a device never stalls), never more than ``8 + N`` bytes read, ``N ≤ limit``."""
    return _read_header(path, limit)[0]


def _read_header(path: Path, limit: int, left: int | None = None,
                 parse: bool = True) -> tuple[list[TensorInfo], int]:
    """``read_header_file`` and its ``8 + N`` bytes; ``left``: the checkpoint's remaining header
    budget (``MAX_TOTAL_HEADER_BYTES``), refused by name before the body is read; ``parse=False``
    checks the length only (nothing past the first 8 bytes is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise KVPlanError("checkpoint.bad_file", path=clip(path),
                          detail=exc.strerror or "unreadable") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise KVPlanError("checkpoint.bad_file", path=clip(path), detail="not a regular file")
    try:
        with open(fd, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise KVPlanError("checkpoint.bad_file", path=clip(path), detail="shorter than 8 bytes")
            (size,) = struct.unpack("<Q", head)
            if size > min(limit, MAX_HEADER_BYTES):
                raise KVPlanError("checkpoint.header_too_large", path=clip(path), size=size,
                                  limit=min(limit, MAX_HEADER_BYTES))
            if left is not None and 8 + size > left:
                raise KVPlanError("checkpoint.headers_too_large", limit=MAX_TOTAL_HEADER_BYTES)
            if size > info.st_size - 8:
                raise KVPlanError("checkpoint.bad_file", path=clip(path),
                                  detail=f"header length {size:,} exceeds the file")
            if not parse:
                return [], 8 + size
            body = handle.read(size)
    except OSError as exc:
        raise KVPlanError("checkpoint.bad_file", path=clip(path),
                          detail=exc.strerror or "unreadable") from None
    return parse_header(head + body, str(path)), 8 + size


def shard_name(value: object, source: str) -> str:
    """A shard named by an index: a plain file name inside the repository or folder — no ``/``,
    ``\\``, ``..``, absolute path, control character or leading dot (an index may not send a
    fetch to another repository's path, nor a local read outside the folder)."""
    text = value if isinstance(value, str) else ""
    if (not text or len(text) > 255 or "/" in text or "\\" in text or text.startswith(".")
            or ".." in text or not text.isprintable() or not text.endswith(".safetensors")):
        raise KVPlanError("checkpoint.bad_shard", path=clip(source), name=short(value, 60))
    return text


def read_index(raw: bytes, source: str = "model.safetensors.index.json") -> tuple[int | None, list[str]]:
    """``metadata.total_size`` and the shard file names of a ``model.safetensors.index.json``.

    ``total_size`` must be a whole number of bytes in ``[0, MAX_TENSOR_BYTES]`` (``Infinity``,
    ``NaN``, ``1e400`` or ``-1`` are refused by name); every shard must pass ``shard_name``."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="not JSON") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise KVPlanError("checkpoint.bad_file", path=clip(source), detail="no weight_map")
    metadata = data.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if total is not None:
        whole = isinstance(total, int) and not isinstance(total, bool)
        if isinstance(total, float) and math.isfinite(total) and total.is_integer():
            whole, total = True, int(total)
        if not whole or not 0 <= total <= MAX_TENSOR_BYTES:
            raise KVPlanError("checkpoint.bad_total", path=clip(source), value=short(total, 40),
                              limit=MAX_TENSOR_BYTES)
    files = sorted({shard_name(v, source) for v in weight_map.values()})
    return total, files


def summarize(headers: dict[str, list[TensorInfo]], n_layers: int | None = None,
              index_total: int | None = None) -> CheckpointSummary:
    """Group the tensors of every header by part (the sum bounded by ``MAX_TENSOR_BYTES``)."""
    summary = CheckpointSummary(files=sorted(headers), index_total=index_total)
    for name in sorted(headers):
        for info in headers[name]:
            summary.add(info, n_layers)
    if summary.total_bytes > MAX_TENSOR_BYTES:
        raise KVPlanError("checkpoint.too_large", path="the checkpoint", limit=MAX_TENSOR_BYTES)
    return summary


def read_checkpoint_dir(path: str | Path, n_layers: int | None = None) -> CheckpointSummary:
    """Every ``*.safetensors`` header of a local checkpoint folder (not recursive).

    More than ``MAX_FILES`` files, an index naming a shard that is not in the folder, or more than
    ``MAX_TOTAL_HEADER_BYTES`` of headers in all are refused by name (never cut silently)."""
    from kvplan.files import read_limited

    folder = Path(path)
    if not folder.is_dir():
        raise KVPlanError("file.missing", path=clip(folder), detail="not a folder")
    files: list[Path] = []
    for entry in folder.glob("*.safetensors"):
        files.append(entry)
        if len(files) > MAX_FILES:
            raise KVPlanError("checkpoint.too_many_files", path=clip(folder), limit=MAX_FILES)
    files.sort()
    if not files:
        raise KVPlanError("checkpoint.not_found", path=clip(folder))
    index_total = None
    index = folder / "model.safetensors.index.json"
    if os.path.lexists(index):
        index_total, shards = read_index(read_limited(index, MAX_INDEX_BYTES, "checkpoint.index_too_large"),
                                         str(index))
        present = {p.name for p in files}
        missing = [name for name in shards if name not in present]
        if missing:
            raise KVPlanError("checkpoint.missing_shard", path=clip(index), name=clip(missing[0], 80),
                              count=f"{len(missing):,}")
    left = MAX_TOTAL_HEADER_BYTES
    for p in files:  # every length first: the budget is refused before any header is parsed
        left -= _read_header(p, MAX_READ_HEADER_BYTES, left, parse=False)[1]
    return summarize({p.name: read_header_file(p) for p in files}, n_layers, index_total)


def compare(summary: CheckpointSummary, estimate: dict[str, int]) -> dict[str, Any]:
    """Checkpoint bytes vs the config-derived estimate, per part and in total."""
    parts = sorted(set(summary.bytes_by_part) | set(estimate), key=lambda p: _ORDER.get(p, 99))
    rows = {p: {"checkpoint": summary.bytes_by_part.get(p, 0), "estimate": estimate.get(p, 0)}
            for p in parts}
    total_est = sum(estimate.values())
    return {"parts": rows, "checkpoint_total": summary.total_bytes, "estimate_total": total_est,
            "ratio": (total_est / summary.total_bytes) if summary.total_bytes else None}
