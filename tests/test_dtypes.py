"""Element formats: exact bytes of one head vector, scales included (sources in kvplan/dtypes.py)."""

from __future__ import annotations

import pytest

from kvplan.dtypes import DTYPES, get_dtype, get_weight_dtype, model_dtype_name
from kvplan.engines import resolve_dtype
from kvplan.errors import KVPlanError


@pytest.mark.parametrize(("name", "dim", "expected"), [
    ("fp32", 128, 512),
    ("fp16", 128, 256),
    ("bf16", 576, 1152),       # MLA latent 512 + 64
    ("fp8_e4m3", 128, 128),    # vLLM stores fp8 as uint8, per-layer scalar scales
    ("fp8_e5m2", 64, 64),
    ("int8", 128, 132),        # vLLM per-token-head: (hk + hv)·1 + 2·4 per head slot = 2 × 132
    ("nvfp4", 128, 72),        # vLLM FlashInfer: hd/2 + hd/16 = 64 + 8
    ("mxfp4", 128, 68),        # 4 blocks of 32 × 4 bit + 4 × 1-byte e8m0 scales = 64 + 4
    ("int4", 128, 72),         # 2 groups of 64: 512 bit + 2 × (16 + 16) bit = 576 bit
    ("int2", 128, 40),         # 256 bit + 2 × 32 bit = 320 bit
    ("int4", 65, 41),          # 260 bit + 2 groups × 32 bit = 324 bit → ceil(40.5)
    ("avg6bit", 576, 432),     # 576 × 6 / 8
    ("avg6bit", 3, 3),         # 18 bit → ceil(2.25)
    ("fp16", 0, 0),
])
def test_vector_bytes(name, dim, expected):
    assert DTYPES[name].vector_bytes(dim) == expected


def test_groups():
    assert DTYPES["fp16"].groups(128) == 0
    assert DTYPES["int8"].groups(128) == 1
    assert DTYPES["int4"].groups(129) == 3
    assert DTYPES["nvfp4"].groups(128) == 8


@pytest.mark.parametrize(("alias", "name"), [
    ("fp8", "fp8_e4m3"), ("FP8_E4M3FN", "fp8_e4m3"), ("float16", "fp16"), ("half", "fp16"),
    ("bfloat16", "bf16"), (" BF16 ", "bf16"), ("float32", "fp32"),
])
def test_aliases(alias, name):
    assert get_dtype(alias).name == name


def test_unknown_dtype():
    with pytest.raises(KeyError):
        get_dtype("fp7")
    with pytest.raises(KVPlanError) as err:
        resolve_dtype("fp7")
    assert err.value.code == "unknown.dtype"
    assert "fp7" in str(err.value) and "bf16" in str(err.value)


@pytest.mark.parametrize(("torch_dtype", "name"), [
    (None, "bf16"), ("", "bf16"), ("float16", "fp16"), ("torch.bfloat16", "bf16"),
    ("float32", "fp32"), ("complex64", "bf16"),
])
def test_model_dtype_name(torch_dtype, name):
    assert model_dtype_name(torch_dtype) == name


def test_weight_dtypes():
    """AWQ/GPTQ g128: 128 × 4 bit + fp16 scale + 4-bit zero = 532 bit → 67 B."""
    assert get_weight_dtype("awq").bytes_for(128) == 67
    assert get_weight_dtype("int4").name == "int4_g128"
    assert get_weight_dtype("fp8_e4m3").name == "fp8"
    assert get_weight_dtype("bf16").bytes_for(1000) == 2000
    with pytest.raises(KeyError):
        get_weight_dtype("int3")
