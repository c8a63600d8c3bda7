"""Design variants: the same model rebuilt as MHA / GQA / SWA / MLA, with exact per-token bytes."""

from __future__ import annotations

import pytest

from kvplan import designs
from kvplan.arch import MLA, Attention, Recurrent
from kvplan.capacity import FitQuery
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.sizing import full_length_bytes_per_token, kv_cache
from tests.plans import kv_plan


def test_llama2_7b_variants_bytes_per_token():
    """7B: 32 layers × 2 × 32 heads × 128 × 2 B = 524,288 (MHA = GQA = real, it has 32 KV heads);
    MLA: 32 × (512 + 64) × 2 B = 36,864."""
    arch = load_model("llama-2-7b")
    out = designs.variants(arch)
    assert list(out) == ["real", "mha", "gqa", "swa", "mla"]
    per_token = {k: full_length_bytes_per_token(kv_plan(v, 1, kv_dtype="bf16", engine="hf")) for k,
                 v in out.items()}
    assert per_token["real"] == per_token["mha"] == per_token["gqa"] == 524_288
    assert per_token["mla"] == 32 * 576 * 2 == 36_864
    assert per_token["swa"] == 524_288  # same growth until the window caps it


def test_swa_plateaus_at_window():
    """HF DynamicSlidingWindowLayer keeps W − 1 tokens: 32 × 2 × 8 × 128 × 2 × 4,095 B past the window."""
    arch = load_model("llama-3.1-8b")
    swa = designs.as_swa(arch, window=4096)
    assert all(isinstance(layer, Attention) for layer in swa.layers)
    assert {(layer.kind, layer.window) for layer in swa.layers} == {("sliding", 4096)}
    long = kv_cache(kv_plan(swa, 100_000, kv_dtype="bf16", engine="hf")).kv_bytes
    assert long == kv_cache(kv_plan(swa, 50_000, kv_dtype="bf16", engine="hf")).kv_bytes
    assert long == 32 * 2 * 8 * 128 * 2 * 4095


def test_gqa_keeps_real_heads_and_mha_uses_query_heads():
    arch = load_model("llama-3.1-8b")
    gqa = designs.as_gqa(arch)
    mha = designs.as_mha(arch)
    assert {layer.n_kv_heads for layer in gqa.layers} == {8}
    assert {layer.n_kv_heads for layer in mha.layers} == {32}
    assert full_length_bytes_per_token(kv_plan(mha, 1)) == 4 * full_length_bytes_per_token(kv_plan(gqa, 1))
    assert gqa.params_total == arch.params_total and gqa.n_layers == arch.n_layers


def test_mla_model_gets_assumed_gqa_heads_and_real_latent():
    """DeepSeek-V2 has no KV heads: GQA assumes 8; its MLA variant equals the real 69,120 B/token."""
    arch = load_model("deepseek-v2")
    assert designs.real_gqa_heads(arch) == 8
    out = designs.variants(arch)
    assert full_length_bytes_per_token(kv_plan(out["real"], 1, kv_dtype="bf16", engine="hf")) == 69_120
    assert full_length_bytes_per_token(kv_plan(out["mla"], 1, kv_dtype="bf16", engine="hf")) == 69_120
    assert all(isinstance(layer, MLA) for layer in out["mla"].layers)


def test_recurrent_layers_are_kept():
    arch = load_model("jamba-1.5-mini")
    mla = designs.as_mla(arch)
    recurrent_before = sum(isinstance(layer, Recurrent) for layer in arch.layers)
    assert recurrent_before and sum(isinstance(layer, Recurrent) for layer in mla.layers) == recurrent_before


def test_design_table_matches_fit():
    from kvplan.capacity import fit

    arch, gpu = load_model("llama-3.1-8b"), get_gpu("h100-sxm")
    query = FitQuery(tokens=32768, users=8, kv_dtype="bf16", engine="vllm")
    table = designs.design_table(make_plan(arch, gpu, query)).set_index("design")
    assert list(table.index) == ["real", "mha", "gqa", "swa", "mla"]
    assert table.loc["real", "max_requests"] == fit(make_plan(arch, gpu, query)).max_requests
    requests = table["max_requests"]
    assert requests["mha"] < requests["gqa"] <= requests["swa"]
    assert table.loc["mha", "kv_bytes_per_token"] == 32 * 2 * 32 * 128 * 2


@pytest.mark.parametrize("window", [1024, 8192])
def test_assumptions_name_the_values(window):
    text = " ".join(designs.assumptions(load_model("llama-2-7b"), swa_window=window))
    assert f"{window:,}" in text and "512" in text and "64" in text
