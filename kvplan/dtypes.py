"""KV-cache element formats: the one place that defines how many bytes a vector of elements takes.

A vector of ``dim`` elements (one head's K or V for one token) in format ``f`` takes
``ceil((dim * bits + n_groups * (scale_bits + zero_bits)) / 8)`` bytes, where ``n_groups`` is
``ceil(dim / group_size)`` for block formats, 1 for per-vector scales and 0 for per-tensor scales
(a per-layer scalar is not per-token memory).

Sources: vLLM ``vllm/utils/torch_utils.py`` (fp8 variants stored as uint8, per-layer k/v scales),
vLLM ``vllm/v1/kv_cache_interface.py`` (int8 per-token-head: ``(hk+hv)*1 + 2*4`` bytes per head slot;
nvfp4: ``hd/2 + hd/16``), transformers ``cache_utils.py`` QuantizedLayer defaults
(``q_group_size=64``, scale and zero-point per group), OCP MX spec (MXFP4: 32-element blocks, e8m0 scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GroupSize = int | Literal["vector", "tensor"]


@dataclass(frozen=True)
class KVDType:
    """One cache element format with its scale/zero-point overhead."""

    name: str
    bits: int
    group_size: GroupSize = "tensor"
    scale_bits: int = 0
    zero_bits: int = 0
    label: str = ""
    source: str = ""

    def groups(self, dim: int) -> int:
        """Scale groups in one vector of ``dim`` elements."""
        if self.group_size == "tensor":
            return 0
        if self.group_size == "vector":
            return 1
        return -(-dim // self.group_size)

    def vector_bytes(self, dim: int) -> int:
        """Exact bytes of one ``dim``-element vector, scales included."""
        if dim <= 0:
            return 0
        return -(-(dim * self.bits + self.groups(dim) * (self.scale_bits + self.zero_bits)) // 8)

    def bytes_for(self, n_elements: int) -> int:
        """Exact bytes of ``n_elements`` elements laid out in full groups (weights)."""
        return self.vector_bytes(n_elements)

    @property
    def overhead_note(self) -> str:
        if self.group_size == "tensor":
            return "no per-token scales (per-tensor/per-layer scalar scale, if any)"
        per = "each head vector" if self.group_size == "vector" else f"every {self.group_size} elements"
        zero = f" + {self.zero_bits}-bit zero-point" if self.zero_bits else ""
        return f"{self.scale_bits}-bit scale{zero} for {per}"


_DTYPES: tuple[KVDType, ...] = (
    KVDType("fp32", 32, label="FP32", source="IEEE 754 binary32"),
    KVDType("fp16", 16, label="FP16", source="IEEE 754 binary16"),
    KVDType("bf16", 16, label="BF16", source="bfloat16"),
    KVDType("fp8_e4m3", 8, label="FP8 (e4m3)",
            source="vLLM vllm/utils/torch_utils.py: fp8 stored as torch.uint8; k_scale/v_scale per layer"),
    KVDType("fp8_e5m2", 8, label="FP8 (e5m2)", source="vLLM vllm/utils/torch_utils.py"),
    KVDType("int8", 8, group_size="vector", scale_bits=32, label="INT8 (per-token-head fp32 scale)",
            source="vLLM kv_cache_interface.py Triton per-token-head int8: (hk+hv)*1 + 2*4 B per head slot"),
    KVDType("int4", 4, group_size=64, scale_bits=16, zero_bits=16, label="INT4 (g64, fp16 scale+zero)",
            source="transformers QuantizedLayer defaults nbits=4, q_group_size=64 (quanto/hqq)"),
    KVDType("int2", 2, group_size=64, scale_bits=16, zero_bits=16, label="INT2 (g64, fp16 scale+zero)",
            source="transformers QuantizedLayer nbits=2, q_group_size=64 (quanto/hqq)"),
    KVDType("nvfp4", 4, group_size=16, scale_bits=8, label="NVFP4 (g16, fp8 scale)",
            source="vLLM FlashInfer nvfp4 KV: hd/2 + hd/16 B per head"),
    KVDType("mxfp4", 4, group_size=32, scale_bits=8, label="MXFP4 (g32, e8m0 scale)",
            source="OCP Microscaling spec v1.0: 32-element blocks, 8-bit shared exponent"),
    KVDType("fp8_ds_mla", 8, group_size=128, scale_bits=32,
            label="FP8 DeepSeek MLA layout (MLA only; bf16 rope)",
            source="vLLM kv_cache_interface.py: fp8_ds_mla = 512 fp8 + 4 fp32 scales + 64 bf16 rope "
                   "= 656 B per token and layer"),
    KVDType("avg6bit", 6, label="6-bit average (DeepSeek-V2 deployment)",
            source="DeepSeek-V2 report §3.2.3: KV elements compressed to 6 bits on average"),
)

DTYPES: dict[str, KVDType] = {d.name: d for d in _DTYPES}

#: Weight formats (bits per parameter plus group scales), independent of the KV format.
_WEIGHT_DTYPES: tuple[KVDType, ...] = (
    DTYPES["fp32"], DTYPES["fp16"], DTYPES["bf16"],
    KVDType("fp8", 8, label="FP8 (per-tensor/channel scales)", source="FP8 checkpoints (e4m3)"),
    KVDType("int8", 8, label="INT8 (per-channel scales)", source="W8A8/W8A16 checkpoints"),
    KVDType("int4_g128", 4, group_size=128, scale_bits=16, zero_bits=4,
            label="INT4 AWQ/GPTQ g128 (fp16 scale + 4-bit zero)",
            source="AutoAWQ/GPTQ: group_size=128, fp16 scales, packed 4-bit zeros"),
    DTYPES["nvfp4"], DTYPES["mxfp4"],
)
WEIGHT_DTYPES: dict[str, KVDType] = {d.name: d for d in _WEIGHT_DTYPES}
ALIASES: dict[str, str] = {
    "fp8": "fp8_e4m3", "float8": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
}
#: Engine-facing formats listed in the UI (the 6-bit average is for paper reproductions only).
KV_DTYPE_CHOICES: tuple[str, ...] = tuple(d.name for d in _DTYPES)


def get_dtype(name: str) -> KVDType:
    """Look a format up by name or alias; raises KeyError naming the valid choices."""
    key = ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key not in DTYPES:
        raise KeyError(name)
    return DTYPES[key]


def get_weight_dtype(name: str) -> KVDType:
    key = ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    key = {"int4": "int4_g128", "awq": "int4_g128", "gptq": "int4_g128", "fp8_e4m3": "fp8"}.get(key, key)
    if key not in WEIGHT_DTYPES:
        raise KeyError(name)
    return WEIGHT_DTYPES[key]


def model_dtype_name(torch_dtype: str | None) -> str:
    """Map a config's ``torch_dtype``/``dtype`` string to a format name (default bf16)."""
    if not torch_dtype:
        return "bf16"
    try:
        return get_dtype(str(torch_dtype).replace("torch.", "")).name
    except KeyError:
        return "bf16"
