"""Seed values from the issue: exact bytes for well-known models (arithmetic in each docstring)."""

from __future__ import annotations

import pytest

from kvplan.engines import EngineSettings
from kvplan.presets import load_model
from kvplan.sizing import kv_cache
from tests.plans import kv_plan

GIB = 1 << 30


def test_llama2_7b_fp16_bytes_per_token():
    """7B MHA: 32 layers × 2 (K,V) × 32 heads × 128 dims × 2 B = 524,288 B/token."""
    result = kv_cache(kv_plan(load_model("llama-2-7b"), 4096, kv_dtype="fp16", engine="hf"))
    assert 32 * 2 * 32 * 128 * 2 == 524_288
    assert result.kv_bytes_per_token == 524_288
    assert result.layers["full"].bytes_per_token_per_layer == 2 * 32 * 128 * 2 == 16_384


@pytest.mark.parametrize("engine", ["hf", "vllm", "sglang", "hf-static"])
@pytest.mark.parametrize(("tokens", "gib_halves"), [(1024, 1), (4096, 4), (8192, 8), (32768, 32)])
def test_llama2_7b_fp16_gib_table(engine, tokens, gib_halves):
    """524,288 B × {1,024; 4,096; 8,192; 32,768} = {0.5; 2; 4; 16} GiB exactly.

    vLLM: every length is a multiple of the 16-token block, so cdiv(T,16)·16 = T.
    """
    result = kv_cache(kv_plan(load_model("llama-2-7b"), tokens, kv_dtype="fp16", engine=engine))
    assert result.kv_bytes == gib_halves * GIB // 2
    assert result.kv_bytes == tokens * 524_288


def test_opt_13b_fp16():
    """OPT-13B: 40 layers × 2 × 40 heads × 128 × 2 B = 819,200 B/token; × 2,048 = 1,677,721,600 B."""
    result = kv_cache(kv_plan(load_model("opt-13b"), 2048, kv_dtype="fp16", engine="hf"))
    assert result.kv_bytes_per_token == 819_200
    assert result.kv_bytes == 1_677_721_600


@pytest.mark.parametrize("engine", ["hf", "vllm", "sglang"])
def test_deepseek_v2_vs_67b_bf16(engine):
    """V2: 60 MLA layers × (512 + 64) × 2 B = 69,120 B/token; 67B: 95 × 2 × 8 × 128 × 2 = 389,120.

    Reduction 1 − 69,120/389,120 = 0.82237 → 82.2 %. Lengths are block multiples (vLLM 16).
    """
    tokens = 4096
    v2 = kv_cache(kv_plan(load_model("deepseek-v2"), tokens, kv_dtype="bf16", engine=engine))
    dense = kv_cache(kv_plan(load_model("deepseek-llm-67b"), tokens, kv_dtype="bf16", engine=engine))
    assert v2.kv_bytes_per_token == 69_120
    assert dense.kv_bytes_per_token == 389_120
    assert round((1 - v2.kv_bytes / dense.kv_bytes) * 1000) == 822


def test_deepseek_v2_avg6bit_vs_67b_bf16():
    """6-bit average: 60 × ceil(576 × 6 / 8) = 60 × 432 = 25,920 B/token; 1 − 25,920/389,120 = 93.3 %."""
    v2 = kv_cache(kv_plan(load_model("deepseek-v2"), 4096, kv_dtype="avg6bit", engine="vllm"))
    dense = kv_cache(kv_plan(load_model("deepseek-llm-67b"), 4096, kv_dtype="bf16", engine="vllm"))
    assert v2.kv_bytes_per_token == 25_920
    assert round((1 - v2.kv_bytes / dense.kv_bytes) * 1000) == 933


def test_mistral_v01_hf_keeps_window_only():
    """transformers DynamicSlidingWindowLayer(4096) keeps W−1 = 4,095 tokens on all 32 layers.

    32 layers × 4,095 tokens × (2 × 8 heads × 128 × 2 B = 4,096 B) = 536,739,840 B at 32K tokens.
    """
    result = kv_cache(kv_plan(load_model("mistral-7b-v0.1"), 32768, kv_dtype="bf16", engine="hf"))
    assert result.kv_bytes == 32 * 4095 * 4096 == 536_739_840
    assert result.layers["sliding"].tokens_held_per_layer == 4095


def test_vllm_block_rounding_on_non_multiple():
    """vLLM holds whole 16-token blocks: 1,000 tokens → cdiv(1000,16) = 63 blocks = 1,008 tokens.

    Llama-2-7B fp16: 1,008 × 524,288 = 528,482,304 B (HF keeps exactly 1,000 × 524,288).
    """
    arch = load_model("llama-2-7b")
    assert kv_cache(kv_plan(arch, 1000, kv_dtype="fp16", engine="vllm")).kv_bytes == 528_482_304
    assert kv_cache(kv_plan(arch, 1000, kv_dtype="fp16", engine="hf")).kv_bytes == 524_288_000
    settings = EngineSettings(block_size=32)
    # cdiv(1000, 32) = 32 blocks = 1,024 tokens
    assert kv_cache(kv_plan(arch, 1000, kv_dtype="fp16", engine="vllm",
                            settings=settings)).kv_bytes == 1024 * 524_288
