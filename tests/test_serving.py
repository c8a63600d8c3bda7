"""Serving-section core: allocation strategies, prefix sharing, offloading, quantized/static caches,
roofline bounds and window explanations."""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.engines import get_engine
from kvplan.errors import KVPlanError
from kvplan.presets import get_gpu, load_model
from kvplan.serving import (
    LengthDist,
    allocation_table,
    in_flight_snapshot,
    offloading,
    parse_lengths_csv,
    prefix_caching,
    quantized_cache,
    roofline,
    sample_workload,
    shared_prefix_tokens,
    static_cache,
    vllm_paper_workload,
    window_explanations,
)


def test_paged_blocks_exact():
    lengths = np.array([10, 17, 33])
    table = allocation_table(lengths, lengths, max_len=2048, block_size=16).set_index("strategy")
    paged = table.loc["paged (block 16)"]
    assert paged["reserved_slots"] == 96  # 1 + 2 + 3 = 6 blocks
    assert paged["used_tokens"] == 60
    assert paged["wasted_slots"] == 36
    assert paged["internal_waste_slots"] == 36
    assert table.loc["token-granular", "wasted_slots"] == 0
    contiguous = table.loc["contiguous (max length)"]
    assert contiguous["reserved_slots"] == 3 * 2048
    assert contiguous["internal_waste_slots"] == 3 * 2048 - 60


def test_reservation_waste_and_concurrency():
    table = allocation_table(np.array([10, 20]), np.array([30, 40]), max_len=100, block_size=16,
                             bytes_per_token=2, budget_bytes=1000).set_index("strategy")
    contiguous = table.loc["contiguous (max length)"]
    assert contiguous["reservation_waste_slots"] == 40
    assert contiguous["internal_waste_slots"] == 130
    assert contiguous["concurrent_requests"] == 5  # 1000 // (100 × 2)
    assert table.loc["token-granular", "concurrent_requests"] == 33  # 1000 // (15 tokens × 2 B)


def test_shared_prefix_100_tokens_block_16():
    assert shared_prefix_tokens(100, 200, get_engine("vllm"), 16) == 96
    assert shared_prefix_tokens(100, 200, get_engine("sglang"), 1) == 100
    assert shared_prefix_tokens(100, 100, get_engine("sglang"), 1) == 99  # last prompt token recomputed
    assert shared_prefix_tokens(96, 96, get_engine("vllm"), 16) == 80  # min(96, 95) // 16 = 5 blocks
    assert shared_prefix_tokens(100, 200, get_engine("hf")) == 0


def test_prefix_caching_memory():
    arch = load_model("llama-3.1-8b")
    result = prefix_caching(arch, 4, 100, 200, 56, engine=get_engine("vllm"))
    assert result.shared_blocks == 6
    bpt = result.bytes_per_token
    assert bpt == 32 * 8 * 128 * 2 * 2
    assert result.without_sharing_bytes == 4 * 256 * bpt
    assert result.with_sharing_bytes == (96 + 4 * (256 - 96)) * bpt
    assert result.curve["requests"].tolist() == [1, 2, 3, 4]
    with pytest.raises(KVPlanError):
        prefix_caching(arch, 4, 300, 200, 56, get_engine("vllm"))


def test_vllm_paper_reproduction():
    result = vllm_paper_workload(load_model("opt-13b"))
    table = result.table.set_index("strategy")
    contiguous = table.loc["contiguous (max length)", "utilization_pct"]
    paged = table.loc["paged (block 16)", "utilization_pct"]
    assert 20 <= contiguous <= 40
    assert paged > 90
    assert result.bytes_per_token == 819_200  # paper §3: 800 KB per token
    assert any("ShareGPT" in a for a in result.assumptions)
    again = vllm_paper_workload(load_model("opt-13b"))
    assert again.table.equals(result.table)  # seeded: deterministic


def test_sampling_is_seeded_and_clipped():
    dist = LengthDist(kind="lognormal", mean=500, sigma=1.5)
    a = sample_workload(1000, dist, dist, seed=3, max_len=1024)
    b = sample_workload(1000, dist, dist, seed=3, max_len=1024)
    assert np.array_equal(a.prompt, b.prompt) and np.array_equal(a.output, b.output)
    assert a.final.max() <= 1024 and a.prompt.min() >= 1
    u = sample_workload(100, LengthDist(kind="uniform", low=5, high=9),
                        LengthDist(kind="fixed", value=3))
    assert u.prompt.min() >= 5 and u.prompt.max() <= 9 and set(u.output) == {3}
    current, final = in_flight_snapshot(a, "in_flight", seed=1)
    assert (current <= final).all() and (current >= 1).all()


@pytest.mark.parametrize("text, fragment", [
    ("", "no data rows"),
    ("prompt,output\n", "no data rows"),
    ("10,20,30\n", "row 1"),
    ("10,abc\n", "not a whole number"),
    ("10,-5\n", "not a whole number"),
    ("0,0\n", "at least one token"),
    ("5\n", "expected 2 columns"),
])
def test_csv_errors(text, fragment):
    with pytest.raises(KVPlanError) as info:
        parse_lengths_csv(text)
    assert info.value.code == "csv.invalid"
    assert fragment in str(info.value)


def test_csv_ok_and_limits():
    w = parse_lengths_csv(b"prompt,output\n10, 20\n\n5,0\n")
    assert w.prompt.tolist() == [10, 5] and w.output.tolist() == [20, 0]
    with pytest.raises(KVPlanError, match="more than 2 rows"):
        parse_lengths_csv("1,1\n2,2\n3,3\n", max_rows=2)
    with pytest.raises(KVPlanError, match="UTF-8"):
        parse_lengths_csv(b"\xff\xfe1,2")


def test_offloading():
    arch = load_model("llama-2-7b")  # 32 layers, 32 KV heads × 128, bf16: 16 KiB per token per layer
    gpu = get_gpu("h100-sxm")
    r = offloading(arch, gpu, tokens=1000, batch=2, cpu_ram_bytes=2 * 10**9)
    layer = 1000 * 2 * 32 * 128 * 2 * 2
    assert r.offloaded_layers == 32
    assert r.gpu_kv_bytes == 2 * layer
    assert r.cpu_kv_bytes == 32 * layer == r.transfer_bytes_per_step
    assert r.transfer_s_per_token == pytest.approx(32 * layer / (gpu.host_link_gbps * 1e9))
    assert r.fits_cpu is True


def test_quantized_cache():
    arch = load_model("llama-2-7b")
    r = quantized_cache(arch, np.array([1, 127, 128, 4096]))
    # int4 g64 with fp16 scale + zero: 128-dim vector = 64 B + 2 groups × 4 B = 72 B
    assert r.quant_bytes_per_token == 32 * 32 * 2 * 72
    assert r.full_bytes_per_token == 32 * 32 * 2 * 256
    c = r.curve.set_index("tokens")
    assert c.loc[127, "quantized_worst_bytes"] == c.loc[127, "unquantized_bytes"]
    assert c.loc[4096, "quantized_best_bytes"] < c.loc[4096, "unquantized_bytes"] / 3
    assert r.worth_it_from_tokens is not None and r.worth_it_from_tokens > 127
    with pytest.raises(KVPlanError) as info:
        quantized_cache(load_model("gemma-3-27b"), np.array([10]))
    assert info.value.code == "engine.dtype"


def test_static_cache():
    arch = load_model("llama-2-7b")
    r = static_cache(arch, np.array([100, 300, 5000]), max_cache_len=1000)
    per_tok = 32 * 32 * 2 * 256
    assert r.allocated_bytes == 3 * 1000 * per_tok
    assert r.used_bytes == (100 + 300 + 1000) * per_tok
    assert r.overflow_requests == 1


def test_roofline_bounds():
    arch = load_model("llama-2-70b")
    gpu = get_gpu("h100-sxm")
    frame, notes = roofline(arch, gpu, 2048, 1024, np.array([1, 8, 64, 4096]), tp=8)
    assert (np.diff(frame["tpot_ms"]) > 0).all()
    assert (np.diff(frame["tokens_per_s"]) > 0).all()
    assert frame["meets llama2-70b interactive"].iloc[0]
    assert not frame["meets llama2-70b interactive"].iloc[-1]
    kv = 80 * 8 * 128 * 2 * 2 * 2048  # bytes per sequence at 2048 tokens
    weights = 68976648192 * 2
    assert frame["tpot_ms"].iloc[0] == pytest.approx((weights + kv) / 8 / 3.35e12 * 1e3)
    assert any("lower bound" in n for n in notes)


def test_window_explanations():
    rows = window_explanations(load_model("gemma-3-27b"))
    hf_sliding = [r for r in rows if r["engine"] == "hf" and r["kind"] == "sliding"]
    assert hf_sliding and "1,023" in hf_sliding[0]["behaviour"]
    assert any(r["engine"] == "vllm" and r["kind"] == "sliding" for r in rows)
