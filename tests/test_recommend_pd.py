"""xPyD (disaggregated prefill/decode) candidates in the recommender, hand-derived.

Llama-3.1-8B bf16 on vLLM 0.33 on a custom 24 GiB, 1 TB/s, 100 TFLOPS accelerator (no interconnect
listed: the recommender's 32 GB/s fallback link), one layout (TP 1 × PP 1, KV bf16, weights auto).
From ``test_recommend.test_memory_decides``: weights 16,060,522,496 B per GPU, a block 16 tokens ×
32 layers × 8 heads × 128 × 2 (K, V) × 2 B = 2,097,152 B, 3,227 blocks (3,226 without the null
block), a 1,280-token request 80 blocks → 40 requests aggregated.
"""

from __future__ import annotations

import json
import math

import pytest

from kvplan import recommend as rc
from kvplan.cli import main
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.recommend import RecommendQuery, recommend

V033 = "vllm@0.33"
GPU = "custom:24:1:100"
LLAMA8 = load_model("llama-3.1-8b")
ONE = {"gpus": (GPU,), "tp": (1,), "pp": (1,), "kv_dtypes": ("bf16",), "weight_dtypes": ("auto",),
       "prices": {GPU: 2.0}, "ttft_ms": 100_000.0, "tpot_ms": 1000.0}
BLOCK = 2_097_152
#: Llama-3.1-8B's 16,060,522,496 B + vLLM's RoPE cos/sin cache 131,072 × 128 × 2 = 33,554,432 B
#: (``rotary_embedding/base.py``, bf16): 3,226 → 3,210 decode blocks, every TPOT +0.0336 ms.
WEIGHTS = 16_094_076_928


def _rec(**update: object) -> rc.Recommendation:
    query = RecommendQuery(**{**ONE, "disagg": True, **update})  # type: ignore[arg-type]
    return recommend(make_plan(LLAMA8, None, FitQuery(engine=V033)), query)


def _mode(rec: rc.Recommendation, aggregated: bool):  # noqa: ANN202
    rows = rec.table[(rec.table["mode"] == "aggregated") == aggregated]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_one_xpyd_candidate_by_hand() -> None:
    """20 requests/s of 1,024 + 256 tokens. Decode pool 3,210 blocks; the prompt takes 64, a request
    at full length 80: one prompt must fit beside the running batch, so B ≤ (3,210 − 64) // 80 = 39
    (aggregated: 40), and at 39 running (3,210 − 39 × 80) // 64 = 1 prompt can be in flight.
    TPOT(39) = (16,094,076,928 + 39 × 80 × 2,097,152) / 10¹² = 22.637191168 ms (memory-bound: 39
    tokens × F_dec / 10¹⁴ is below it); a decode instance serves 39 / TPOT tokens/s, so y =
    ceil(20 × 256 / (39 / 0.022637191168)) = ceil(2.9718) = 3. A prefill instance takes
    t_pf = F_pf(1,024) / 10¹⁴ = 14,569,848,176,640 / 10¹⁴ = 145.698 ms per prompt (compute-bound:
    above W / BW = 16.09 ms), x = ceil(20 × 0.145698) = ceil(2.914) = 3.
    The transfer: 64 × 2,097,152 = 134,217,728 B over 32 GB/s = 4.194304 ms. GPUs = x + y;
    $ per M output tokens = (x + y) × $2 / (20 × 256 × 3,600) × 10⁶."""
    rec = _rec(traffic="rps", rps=20.0)
    agg, pd_row = _mode(rec, True), _mode(rec, False)
    assert agg["max_requests"] == 40 and pd_row["max_requests"] == 39
    assert pd_row["in_flight_bound"] == (3210 - 39 * 80) // 64 == 1
    assert pd_row["batch"] == 39
    tpot = (WEIGHTS + 39 * 80 * BLOCK) / 1e12
    assert tpot == pytest.approx(0.022637191168, rel=1e-15)
    assert 39 * rc.decode_token_flops(LLAMA8, 1280) / 1e14 < tpot
    assert pd_row["tpot_ms"] == pytest.approx(tpot * 1e3, rel=1e-12)
    y = math.ceil(20 * 256 / (39 / tpot))
    assert y == 3 and pd_row["decode_instances"] == 3
    t_pf = rc.prefill_flops(LLAMA8, 1024) / 1e14
    assert t_pf > WEIGHTS / 1e12
    x = math.ceil(20 * t_pf)
    assert rc.prefill_flops(LLAMA8, 1024) == 14_569_848_176_640 and x == 3
    assert pd_row["prefill_instances"] == x and pd_row["mode"] == f"{x}P3D"
    assert pd_row["transfer_ms"] == pytest.approx(64 * BLOCK / 32e9 * 1e3, rel=1e-12)
    assert pd_row["transfer_ms"] == pytest.approx(4.194304, rel=1e-12)
    assert pd_row["ttft_ms"] == pytest.approx((t_pf + 64 * BLOCK / 32e9) * 1e3, rel=1e-12)
    assert pd_row["replicas"] == x + 3 and pd_row["total_gpus"] == x + 3
    assert pd_row["cost_per_hour"] == pytest.approx((x + 3) * 2.0, rel=1e-12)
    assert pd_row["cost_per_m_tokens"] == pytest.approx((x + 3) * 2.0 / (20 * 256 * 3600) * 1e6,
                                                        rel=1e-12)
    assert pd_row["feasible"] and pd_row["fails"] == ""
    # the run bound and estimate per instance are the layout's; the estimate's GPUs its own split
    assert pd_row["bound_tokens_per_s_per_replica"] == agg["bound_tokens_per_s_per_replica"]
    assert pd_row["estimate_total_gpus"] >= pd_row["total_gpus"]
    assert len(rec.ranked) == 2 and set(rec.ranked["mode"].astype(str)) == {"aggregated", f"{x}P3D"}


def test_users_traffic_sizes_decode_by_the_batch() -> None:
    """100 users: y = ceil(100 / 39) = 3 decode instances of ceil(100 / 3) = 34 requests."""
    rec = _rec(users=100)
    pd_row = _mode(rec, False)
    assert pd_row["decode_instances"] == 3 and pd_row["batch"] == 34 and pd_row["max_batch_tpot"] == 39
    tpot = (WEIGHTS + 34 * 80 * BLOCK) / 1e12
    assert pd_row["tpot_ms"] == pytest.approx(tpot * 1e3, rel=1e-12)
    t_pf = rc.prefill_flops(LLAMA8, 1024) / 1e14
    rate = 100 / (t_pf + 64 * BLOCK / 32e9 + 256 * tpot)
    assert pd_row["prefill_instances"] == math.ceil(rate * t_pf)
    assert pd_row["cost_per_m_tokens"] == pytest.approx(
        pd_row["total_gpus"] * 2.0 / (rate * 256 * 3600) * 1e6, rel=1e-12)


def test_a_decode_pool_without_room_for_a_prompt_is_refused() -> None:
    """30,000 + 1,000 tokens: a request at full length takes ceil(31,000 / 16) = 1,938 blocks and
    the prompt 1,875; the aggregated replica holds one request, the decode instance cannot hold one
    running request and pull one prompt (3,226 − 1,875 < 1,938): it fails memory, with the reason."""
    rec = _rec(prompt={"kind": "fixed", "value": 30_000}, output={"kind": "fixed", "value": 1000})
    agg, pd_row = _mode(rec, True), _mode(rec, False)
    assert agg["feasible"] and agg["max_requests"] == 1
    assert not pd_row["feasible"] and pd_row["fails"] == "memory"
    assert pd_row["total_gpus"] == 0 and math.isnan(pd_row["cost_per_m_tokens"])
    assert any("cannot hold one 31,000-token request and pull one 30,000-token prompt (1,938 + 1,875 "
               "blocks)" in n for n in rec.notes)
    assert rec.ranked["mode"].astype(str).tolist() == ["aggregated"]


def test_off_by_default_and_only_for_vllm() -> None:
    plan = make_plan(LLAMA8, None, FitQuery(engine=V033))
    plain = recommend(plan, RecommendQuery(**ONE))  # type: ignore[arg-type]
    assert plain.table["mode"].astype(str).tolist() == ["aggregated"]
    assert plain.table["decode_instances"].tolist() == [0]
    sglang = recommend(make_plan(LLAMA8, None, FitQuery(engine="sglang")),
                       RecommendQuery(**{**ONE, "disagg": True}))  # type: ignore[arg-type]
    assert sglang.table["mode"].astype(str).tolist() == ["aggregated"]
    assert any("modelled for vLLM's connectors; the decode instance runs sglang" in n for n in sglang.notes)
    assert not any(f.startswith("xPyD") for f in sglang.formulas)


def test_pd_candidates_are_limited_to_the_cheapest_layouts() -> None:
    """Two accelerators × two KV formats: 4 aggregated candidates, ``pd_layouts=2`` splits the two
    cheapest feasible ones (the xPyD rows name the same accelerator and formats)."""
    rec = _rec(gpus=(GPU, "h200"), kv_dtypes=("bf16", "fp8_e4m3"), prices={GPU: 2.0, "h200": 4.0},
               pd_layouts=2)
    table = rec.table
    agg = table[table["mode"] == "aggregated"]
    pd_rows = table[table["mode"] != "aggregated"]
    assert len(agg) == 4 and len(pd_rows) == 2
    cheapest = agg[agg["feasible"]].sort_values("cost_per_m_tokens").head(2)
    assert (list(zip(pd_rows["gpu"].astype(str), pd_rows["kv_dtype"].astype(str), strict=True))
            == list(zip(cheapest["gpu"].astype(str), cheapest["kv_dtype"].astype(str), strict=True)))


def test_cli_disagg_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["recommend", "--model", "llama-3.1-8b", "--rps", "20", "--gpus", GPU, "--tp", "1", "--pp",
            "1", "--kv-dtypes", "bf16", "--weight-dtypes", "auto", "--ttft-ms", "100000", "--tpot-ms",
            "1000", "--engine-version", "0.33", "--price", f"{GPU}=2", "--disagg"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    modes = {row["mode"]: row for row in out["table"]}
    assert set(modes) == {"aggregated", "3P3D"}
    pd_row = modes["3P3D"]
    assert (pd_row["decode_instances"], pd_row["in_flight_bound"], pd_row["max_requests"]) == (3, 1, 39)
    assert pd_row["transfer_ms"] == pytest.approx(4.194304)
    assert "&n=3&" in pd_row["link"] and "&u=39" in pd_row["link"]  # opens its 3 decode instances
    assert any(f.startswith("xPyD") for f in out["formulas"])
    assert [row["mode"] for row in out["xpyd_table"]] == ["3P3D"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"{pd_row['mode']} (transfer 4.194 ms, ≤ 1 prompts in flight per decode instance)" in text
    assert get_gpu(GPU).interconnect_gbps is None  # so the 32 GB/s fallback link is the one used
    assert main([*args, "--prompt-tokens", "30000", "--output-tokens", "1000"]) == 0
    text = capsys.readouterr().out
    assert "xPyD candidates (disaggregated prefill/decode, the cheapest first): none (the notes" in text
    assert "cannot hold one 31,000-token request and pull one 30,000-token prompt" in text


def test_export_headers_name_the_xpyd_columns() -> None:
    headers = rc.unit_headers("$")
    assert headers["mode"] == "mode [aggregated | xPyD]"
    assert headers["transfer_ms"] == "kv_transfer_bound [ms]"
    assert headers["in_flight_bound"] == "in_flight_bound [prompts per decode instance]"
