"""The estimate by phase (``recommend.estimate_throughput``) and its calibration
(``recommend.calibrate_phases``): hand-derived terms, and the acceptance of issue #31 on the
published results of ``tests/fixtures/published``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvplan.errors import KVPlanError
from kvplan.presets import PhaseEfficiency, efficiency_for, get_gpu, load_model
from kvplan.recommend import (
    Measured,
    calibrate_phases,
    comm_seconds_per_token,
    estimate_throughput,
    phase_row,
    throughput_bound,
)

PUBLISHED = json.loads((Path(__file__).resolve().parent / "fixtures" / "published"
                        / "trtllm_perf_overview.json").read_text())["rows"]
LLAMA8 = load_model("llama-3.1-8b")
#: The out-of-sample split of tools/published/fit_efficiency.py (FIT_SHAPES).
FIT_SHAPES = {(128, 128), (128, 4096), (1000, 1000), (2048, 128), (5000, 500)}


def _bound(row: dict[str, Any]):  # type: ignore[no-untyped-def]
    return throughput_bound(load_model(row["model"]), get_gpu(row["gpu"]), row["gpus"], row["tp"],
                            row["pp"], row["weight_dtype"], row["kv_dtype"], row["isl"], row["osl"])


BOUNDS = [(_bound(r), r) for r in PUBLISHED]


def test_comm_per_token_by_hand() -> None:
    """Llama-3.1-8B at TP 2 on H100 (450 GB/s per direction): 2 all-reduces × 32 layers × 2·(1/2) ×
    4,096 × 2 B = 524,288 B per token → 1.16508 µs; TP 1 × PP 2: one hand-off of 8,192 B."""
    assert comm_seconds_per_token(LLAMA8, 2, 1, 450e9) == 524_288 / 450e9
    assert comm_seconds_per_token(LLAMA8, 1, 2, 450e9) == 8_192 / 450e9
    b = throughput_bound(LLAMA8, get_gpu("h100-sxm"), 2, 2, 1, "fp8", "fp8_e4m3", 128, 128)
    assert b.comm_s_per_token == 524_288 / 450e9


def test_latency_rows_by_hand() -> None:
    """Llama-3.1-8B fp8, one H100, 128 + 128. TTFT: 1,792,085,590,016 / 1,979e12 = 0.90555 ms of
    prefill at peak; TPOT at 32 requests: 8,030,261,248 / 3.35e12 + 32 · (1,598,029,824 / 127 /
    3.35e12 + 1,918,967,480,320 / 127 / 1,979e12) = 2.39709 + 32 · (0.0037561 + 0.0076353) ms."""
    b = throughput_bound(LLAMA8, get_gpu("h100-sxm"), 1, 1, 1, "fp8", "fp8_e4m3", 128, 128)
    a, z, y = phase_row(Measured("ttft", 2.0, b))
    assert (a, z, y) == (1_792_085_590_016 / 1979e12, 0.0, 0.002)
    z, d, y = phase_row(Measured("tpot", 10.0, b, concurrency=32))
    step = 8_030_261_248 / 3.35e12 + 32 * (1_598_029_824 / 127 / 3.35e12
                                           + (3_711_053_070_336 - 1_792_085_590_016) / 127 / 1979e12)
    assert z == 0 and d == pytest.approx(step, rel=1e-12) and y == 0.01
    assert round(step * 1e3, 4) == 2.7616


def test_two_figures_calibrate_both_phases_exactly() -> None:
    """A TTFT and a TPOT of one run give each phase its own efficiency, and the calibrated estimate
    returns both figures: TTFT 1.5 ms → e_prefill = 0.90555 / 1.5 = 0.6037; TPOT 4 ms at 32 →
    e_decode = 2.7616 / 4 = 0.6904. A third, throughput figure enters the least squares."""
    b = throughput_bound(LLAMA8, get_gpu("h100-sxm"), 1, 1, 1, "fp8", "fp8_e4m3", 128, 128)
    runs = [Measured("ttft", 1.5, b), Measured("tpot", 4.0, b, concurrency=32)]
    cal = calibrate_phases(runs, efficiency_for("h100-sxm"))
    for m in runs:
        a, d, y = phase_row(m)
        assert a / cal.prefill + d / cal.decode == pytest.approx(y, rel=1e-12)
    assert round(cal.prefill, 4) == 0.6037 and round(cal.decode, 4) == 0.6904
    assert cal.fit_rows == 2 and "a measured ttft of 1.5" in cal.source
    three = calibrate_phases([*runs, Measured("tokens/s", 20_000.0, b)], efficiency_for("h100-sxm"))
    assert three.fit_rows == 3 and three != cal


def test_calibration_needs_figures_that_determine_the_phases() -> None:
    b = throughput_bound(LLAMA8, get_gpu("h100-sxm"), 1, 1, 1, "fp8", "fp8_e4m3", 128, 128)
    eff = efficiency_for("h100-sxm")
    with pytest.raises(KVPlanError, match="no measured figure"):
        calibrate_phases([], eff)
    with pytest.raises(KVPlanError, match="do not determine both phases"):
        calibrate_phases([Measured("ttft", 1.0, b), Measured("ttft", 3.0, b)], eff)
    with pytest.raises(KVPlanError, match="must be a positive number"):
        calibrate_phases([Measured("tpot", -1.0, b)], eff)


MLPERF = json.loads((Path(__file__).resolve().parent / "fixtures" / "published"
                     / "mlperf_v5_0.json").read_text())["rows"]
#: tools/published/fit_efficiency.py's BATCH_CAPS: the caps the fit chooses among.
BATCH_CAPS = (64, 128, 192, 256, 320, 384, 448, 512, 768, 1024, 2048, 4096)


def _within(b: Any, eff: PhaseEfficiency, value: float, tol: float, cap: int | None = None) -> bool:
    return abs(estimate_throughput(b, eff, cap) / value - 1) <= tol


def _one_point(pairs: list[list[tuple[Any, dict[str, Any]]]], eff_of: Any,
               cap: int | None = None) -> list[int]:
    """Per calibration shape (the pair's ``pick``-th point): the pair's other points within ±15 %
    after ``calibrate_phases`` on that one point, summed over the pairs; asserts the point exact."""
    by_pick = [0] * len(pairs[0])
    for sub in pairs:
        for pick, (b, r) in enumerate(sub):
            cal = calibrate_phases([Measured("tokens/s", r["value"], b, concurrency=cap)], eff_of(r["gpu"]))
            assert estimate_throughput(b, cal, cap) == pytest.approx(r["value"], rel=1e-12)
            by_pick[pick] += sum(_within(ob, cal, o["value"], 0.15, cap)
                                 for i, (ob, o) in enumerate(sub) if i != pick)
    return by_pick


def _fit(rows: list[tuple[Any, dict[str, Any]]], cap: int | None = None) -> dict[str, PhaseEfficiency]:
    """Per accelerator, the least squares of the fit (``calibrate_phases`` over every run of it)."""
    return {gpu: calibrate_phases([Measured("tokens/s", r["value"], b, concurrency=cap)
                                   for b, r in rows if r["gpu"] == gpu], PhaseEfficiency(prefill=1, decode=1))
            for gpu in sorted({r["gpu"] for _, r in rows})}


def test_issue_31_acceptance_on_the_published_fixture() -> None:
    """Issue #31's acceptance, every share computed and pinned (docs/efficiency.md):

    * the upper bound ≥ the published figure on 112 of 112 rows (100 TensorRT-LLM, 12 MLPerf v5.0);
    * the default estimate (presets/efficiency.json, per accelerator) within ±25 %: in sample 98 of
      100; out of sample, fitted per accelerator on the shapes ``FIT_SHAPES`` only, 48 of the other
      50 (each model held out in turn: docs, 98 of 100);
    * calibrated on one point per (model, accelerator) — each of a pair's 10 points taken in turn,
      its 9 others predicted: 10 pairs × 10 × 9 = 900 predictions, pooled — 733 within ±15 %
      (81.4 %), the point itself reproduced exactly (1e-12 relative) every time. Per shape
      calibrated on (90 predictions each), 6 of 10 reach 80 %; 128/128 (58), 128/4096 (67),
      1000/2000 (71) and 2048/128 (65) do not (why: docs/efficiency.md);
    * the batch cap out of sample: chosen with the efficiencies on the ``FIT_SHAPES`` rows alone,
      384 (320 on all rows); on the other 50 rows the default estimate puts 48 within ±25 % and the
      one-point calibration (each held-out point in turn, its pair's 4 other held-out points
      predicted) 194 of 200 within ±15 %."""
    bounds = [(_bound(r), r) for r in MLPERF]
    assert sum(r["value"] <= b.tokens_per_s for b, r in BOUNDS + bounds) == len(BOUNDS) + len(MLPERF) == 112

    assert sum(_within(b, efficiency_for(r["gpu"]), r["value"], 0.25) for b, r in BOUNDS) == 98
    train = [(b, r) for b, r in BOUNDS if (r["isl"], r["osl"]) in FIT_SHAPES]
    test = [(b, r) for b, r in BOUNDS if (r["isl"], r["osl"]) not in FIT_SHAPES]
    fitted = _fit(train)
    assert (sum(_within(b, fitted[r["gpu"]], r["value"], 0.25) for b, r in test), len(test)) == (48, 50)

    pairs: dict[tuple[str, str], list[tuple[Any, dict[str, Any]]]] = {}
    for b, r in BOUNDS:
        pairs.setdefault((r["model"], r["gpu"]), []).append((b, r))
    by_pick = _one_point(list(pairs.values()), efficiency_for)
    assert sum(by_pick) == 733 and sum(by_pick) >= 0.8 * 900
    assert by_pick == [58, 78, 67, 83, 78, 71, 65, 76, 77, 80]
    shapes = [f"{r['isl']}/{r['osl']}" for _, r in next(iter(pairs.values()))]
    assert [s for s, n in zip(shapes, by_pick, strict=True) if n < 0.8 * 90] == [
        "128/128", "128/4096", "1000/2000", "2048/128"]

    def score(cap: int) -> float:
        effs = _fit(train, cap)
        sub = [[(b, r) for b, r in p if (r["isl"], r["osl"]) in FIT_SHAPES] for p in pairs.values()]
        return sum(_one_point(sub, effs.__getitem__, cap))

    cap = max(BATCH_CAPS, key=lambda c: (score(c), c))
    effs = _fit(train, cap)
    held = [[(b, r) for b, r in p if (r["isl"], r["osl"]) not in FIT_SHAPES] for p in pairs.values()]
    assert cap == 384
    assert sum(_within(b, effs[r["gpu"]], r["value"], 0.25, cap) for b, r in test) == 48
    assert (sum(_one_point(held, effs.__getitem__, cap)), 10 * 5 * 4) == (194, 200)


def test_estimate_never_passes_the_bound() -> None:
    """On every published run, default and calibrated: the estimate ≤ the bound."""
    for b, r in BOUNDS:
        assert estimate_throughput(b, efficiency_for(r["gpu"])) <= b.tokens_per_s
        assert estimate_throughput(b, PhaseEfficiency(prefill=1, decode=1)) <= b.tokens_per_s


def test_cli_calibrates_both_phases_from_ttft_and_tpot(capsys: pytest.CaptureFixture[str]) -> None:
    """``kvplan throughput --measured-ttft-ms 1.5 --measured-tpot-ms 4 --concurrency 32``: the
    efficiencies of ``test_two_figures_calibrate_both_phases_exactly``, labelled as calibrated."""
    from kvplan.cli import main

    assert main(["throughput", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--weight-dtype", "fp8",
                 "--kv-dtype", "fp8_e4m3", "--isl", "128", "--osl", "128", "--measured-ttft-ms", "1.5",
                 "--measured-tpot-ms", "4", "--concurrency", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["estimate"]
    assert data["calibrated"] is True
    eff = data["efficiency"]
    assert (round(eff["prefill"], 4), round(eff["decode"], 4)) == (0.6037, 0.6904)
    assert eff["source"] == "calibrated on a measured 1.5 ms TTFT, 4.0 ms TPOT at 32 requests of this run"


def test_one_request_alone_by_hand() -> None:
    """One request, nothing else running (Llama-3.1-8B fp8, one H100, 128 + 128, e_prefill 0.5,
    e_decode 0.8): TTFT = one step reading the weights and prefilling 128 tokens =
    8,030,261,248 / 3.35e12 / 0.8 + 1,792,085,590,016 / 1,979e12 / 0.5 = 2.99636 + 1.81111 ms;
    TPOT = the batch-1 step (2.39709 + 0.0037561 + 0.0076353) / 0.8 = 3.01061 ms."""
    from kvplan.recommend import latency_at_rate

    b = throughput_bound(LLAMA8, get_gpu("h100-sxm"), 1, 1, 1, "fp8", "fp8_e4m3", 128, 128)
    r = latency_at_rate(b, PhaseEfficiency(prefill=0.5, decode=0.8), 1.0, requests=1)
    ttft = (8_030_261_248 / 3.35e12 / 0.8 + 1_792_085_590_016 / 1979e12 / 0.5) * 1e3
    tpot = (8_030_261_248 / 3.35e12 + 1_598_029_824 / 127 / 3.35e12
            + (3_711_053_070_336 - 1_792_085_590_016) / 127 / 1979e12) / 0.8 * 1e3
    assert r.ttft_p50_ms == pytest.approx(ttft, rel=1e-12) and r.ttft_p99_ms == pytest.approx(ttft, rel=1e-12)
    assert r.tpot_p50_ms == pytest.approx(tpot, rel=1e-9)
    assert (round(ttft, 5), round(tpot, 5)) == (4.80747, 3.01061)
    assert not r.saturated


def test_latency_grows_with_the_rate() -> None:
    """Queueing and prefill chunks in decode steps: p99 TTFT and TPOT rise with the rate, and past
    what the replica serves the simulation says so (saturated)."""
    from kvplan.recommend import latency_at_rate

    b = throughput_bound(load_model("llama-2-70b"), get_gpu("h200"), 1, 1, 1, "fp8", "fp8_e4m3", 300, 292)
    runs = [latency_at_rate(b, efficiency_for("h200"), rate) for rate in (1.0, 4.0, 8.3125, 16.0)]
    assert [r.ttft_p99_ms for r in runs] == sorted(r.ttft_p99_ms for r in runs)
    assert [r.tpot_p99_ms for r in runs] == sorted(r.tpot_p99_ms for r in runs)
    assert [r.saturated for r in runs] == [False, False, False, True]
    with pytest.raises(KVPlanError, match="request rate must be a positive number"):
        latency_at_rate(b, efficiency_for("h200"), 0.0)


def test_mlperf_interactive_h200_operating_point() -> None:
    """MLPerf Inference v5.0 H200 Llama-2-70B interactive (fixture mlperf_v5_0.json): 66.50
    samples/s on 8 GPUs = 8.3125 requests/s per GPU, 19,424.25 / 66.50 = 292 output tokens each,
    and the run met p99 TPOT ≤ 40 ms and TTFT ≤ 450 ms. The summary gives no prompt lengths or
    layout; at an assumed 300-token prompt, TP 1, fp8 weights and KV, the simulation estimates 91
    requests in flight per GPU (the old per-GPU bound claimed 570 fit), TTFT p99 194 ms and TPOT
    p99 45.9 ms: the TPOT estimate 15 % above what the run met."""
    from kvplan.recommend import latency_at_rate

    row = next(r for r in json.loads((Path(__file__).resolve().parent / "fixtures" / "published"
                                      / "mlperf_v5_0.json").read_text())["rows"]
               if r["gpu"] == "h200" and r["scenario"] == "Server interactive")
    per_gpu = row["samples_per_s"] / row["gpus"]
    assert (per_gpu, row["osl"]) == (8.3125, 292)
    b = throughput_bound(load_model("llama-2-70b"), get_gpu("h200"), 1, 1, 1, "fp8", "fp8_e4m3", 300,
                         row["osl"])
    r = latency_at_rate(b, efficiency_for("h200"), per_gpu)
    assert (round(r.concurrency), round(r.ttft_p99_ms), round(r.tpot_p99_ms, 1)) == (91, 194, 45.9)
    assert r.tpot_p99_ms / 40.0 - 1 == pytest.approx(0.148, abs=0.001)
    assert not r.saturated


def test_cli_rate_is_labelled_an_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    from kvplan.cli import main

    base = ["throughput", "--model", "llama-2-70b", "--gpu", "h200", "--gpus", "8", "--weight-dtype",
            "fp8", "--kv-dtype", "fp8_e4m3", "--isl", "300", "--osl", "292", "--rate", "66.5"]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "at 66.5 requests/s (8.312 per replica; estimates from a seeded simulation at the efficiencies " \
        "above, not bounds): TTFT p50 90.2 ms, p99 194.1 ms; TPOT p50 42.04 ms, p99 45.92 ms" in out
    assert main([*base, "--json"]) == 0
    at = json.loads(capsys.readouterr().out)["at_rate"]
    assert at["kind"] == "estimate" and at["per_replica"] == 8.3125 and at["saturated"] is False
