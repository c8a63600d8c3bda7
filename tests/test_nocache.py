"""FLOPs with and without the KV cache: exact counts for a tiny model and growth properties."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.arch import Attention, ModelArch
from kvplan.flops import generation_flops, layer_flops, step_flops
from kvplan.nocache import compare
from kvplan.presets import get_gpu, load_model

TINY = ModelArch(
    name="tiny", model_type="llama",
    layers=(Attention(n_kv_heads=4, head_dim_k=16, head_dim_v=16),) * 2,
    hidden_size=64, n_heads=4, head_dim=16, intermediate_size=128, vocab_size=100,
    params_total=100_000,
)


def test_tiny_layer_costs():
    lf = layer_flops(TINY)[0]
    assert lf.dense == 2 * 64 * 16 * 12 + 2 * 4 * 16 * 64 + 2 * 3 * 64 * 128 == 81920
    assert lf.attn_coeff == 2 * 2 * 4 * 16 == 256


def test_tiny_exact_totals():
    """P = 3, N = 2 (arithmetic in ``kvplan.nocache``'s docstring)."""
    result = generation_flops(TINY, 3, 2)
    assert result["cached"] == 655360 + 5120 + 25600 == 686080
    assert result["no_cache"] == 1146880 + 8192 + 25600 == 1180672
    assert "2·2·H·d·ctx" in result["formula"]


def test_one_new_token_is_the_same_either_way():
    r = generation_flops(TINY, 5, 1)
    assert r["cached"] == r["no_cache"]


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 200), n=st.integers(4, 60))
def test_growth(p, n):
    cached, nocache = step_flops(TINY, p, n, exact=True)
    total_c = np.cumsum(cached)
    total_n = np.cumsum(nocache)
    # cached decode steps grow by the attention term only: second difference = 256 × 2 layers
    assert set(np.diff(total_c[1:], 2)) == {512}
    # no cache reprocesses the prefix: third difference constant (attention), and the
    # non-attention part is quadratic in N (second difference = dense per token × layers)
    assert len(set(np.diff(total_n, 3))) == 1
    dense = 81920 * 2
    lin_c = np.array([p * dense] + [dense] * (n - 1)).cumsum()
    lin_n = np.array([(p + k) * dense for k in range(n)]).cumsum()
    assert set(np.diff(lin_c[1:], 2)) == {0}
    assert set(np.diff(lin_n, 2)) == {dense}
    assert total_n[-1] >= total_c[-1]


def test_compare_options():
    gpu = get_gpu("h100-sxm")
    frame, notes = compare(load_model("llama-3.1-8b"), gpu, 512, 64)
    options = set(frame["option"])
    assert {"no cache", "full cache", "quantized int4", "offloaded", "static"} <= options
    last = frame.groupby("option").last()
    assert last.loc["no cache", "flops"] > last.loc["full cache", "flops"]
    assert last.loc["no cache", "time_s"] > last.loc["full cache", "time_s"]
    assert (frame.groupby("option")["time_s"].diff().dropna() > 0).all()
    windowed, _ = compare(load_model("gemma-3-27b"), gpu, 512, 8)
    assert "windowed (DynamicCache)" in set(windowed["option"])
    assert "quantized int4" not in set(windowed["option"])
