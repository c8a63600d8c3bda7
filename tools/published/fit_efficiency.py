"""Fit the estimate's default phase efficiencies on the published results (dev-time; needs only kvplan).

The estimate (``recommend.ESTIMATE_FORMULA``) reads ``a / e_prefill + b / e_decode = y`` for a run
(``recommend.phase_row``: ``a``, ``b`` the prefill and decode seconds per request at peak, ``y`` the
measured seconds per request). For each accelerator of ``tests/fixtures/published/*.json`` (and once
over all rows, the ``default``) least squares on the relative error gives ``1/e_prefill``,
``1/e_decode``; the estimate's batch cap (one number for all accelerators) is the value of
``BATCH_CAPS`` whose fit, calibrated on one point per (model, accelerator), puts the most other points
within ±15 %. Writes ``presets/efficiency.json`` and ``docs/efficiency.md`` (in-sample and
out-of-sample residuals, one-point calibration by the shape calibrated on).

    python tools/published/fit_efficiency.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvplan.presets import PhaseEfficiency, estimate_batch_cap, get_gpu, load_model  # noqa: E402
from kvplan.recommend import (  # noqa: E402
    Measured,
    calibrate_run,
    estimate_throughput,
    phase_row,
    throughput_bound,
)

FIXTURES = sorted((ROOT / "tests/fixtures/published").glob("*.json"))
BATCH_CAPS = (64, 128, 192, 256, 320, 384, 448, 512, 768, 1024, 2048, 4096)
#: The out-of-sample split: fit on these shapes, score on the others.
FIT_SHAPES = {(128, 128), (128, 4096), (1000, 1000), (2048, 128), (5000, 500)}


def rows() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in FIXTURES:
        for row in json.loads(path.read_text())["rows"]:
            if not row.get("exact_shape", True):
                continue  # a bound-only row (its shape is a floor, not the run's): not fitted
            row["fixture"] = path.name
            row["bound"] = throughput_bound(load_model(row["model"]), get_gpu(row["gpu"]), row["gpus"],
                                            row["tp"], row["pp"], row["weight_dtype"], row["kv_dtype"],
                                            row["isl"], row["osl"])
            out.append(row)
    return out


def fit(sub: list[dict[str, Any]], cap: int) -> tuple[float, float]:
    """(e_prefill, e_decode) minimising ``Σ ((a/e_p + b/e_d) / y − 1)²`` at batch cap ``cap``."""
    x_arr = np.array([(a / y, b / y) for a, b, y in (
        phase_row(Measured("tokens/s", r["value"], r["bound"], concurrency=cap)) for r in sub)])
    (p, d), *_ = np.linalg.lstsq(x_arr, np.ones(len(sub)), rcond=None)
    return 1.0 / max(p, 1e-9), 1.0 / max(d, 1e-9)


def error(r: dict[str, Any], eff: PhaseEfficiency, cap: int | None = None) -> float:
    return estimate_throughput(r["bound"], eff, cap) / r["value"] - 1


def calibrated(pairs: dict[tuple[str, str], list[dict[str, Any]]], table: dict[str, PhaseEfficiency],
               pick: int, cap: int | None = None) -> tuple[int, int]:
    """Other points within ±15 % when each (model, accelerator) is calibrated on its point ``pick``."""
    hits = total = 0
    for sub in pairs.values():
        point = sub[pick]
        cal = calibrate_run(point["bound"], point["value"], table[point["gpu"]]) if cap is None else \
            _scaled(point, table[point["gpu"]], cap)
        for i, r in enumerate(sub):
            if i != pick:
                total += 1
                hits += abs(error(r, cal, cap)) <= 0.15
    return hits, total


def _scaled(point: dict[str, Any], eff: PhaseEfficiency, cap: int) -> PhaseEfficiency:
    k = estimate_throughput(point["bound"], eff, cap) / point["value"]
    return PhaseEfficiency(prefill=eff.prefill / k, decode=eff.decode / k)


def tables(groups: dict[str, list[dict[str, Any]]], cap: int, names: list[str]) -> dict[str, PhaseEfficiency]:
    out = {}
    for key, sub in groups.items():
        ep, ed = fit(sub, cap)
        what = "all accelerators" if key == "default" else key
        out[key] = PhaseEfficiency(
            prefill=round(ep, 4), decode=round(ed, 4), fit_rows=len(sub),
            source=f"least-squares fit on {len(sub)} published results ({what}) of {', '.join(names)} "
                   f"at batch cap {cap} (tools/published/fit_efficiency.py; docs/efficiency.md)")
    return out


def main() -> None:
    data = rows()
    names = sorted({r["fixture"] for r in data})
    groups: dict[str, list[dict[str, Any]]] = {"default": data}
    for r in data:
        groups.setdefault(r["gpu"], []).append(r)
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in data:
        pairs.setdefault((r["model"], r["gpu"]), []).append(r)
    shapes = [f"{r['isl']}/{r['osl']}" for r in next(iter(pairs.values()))]
    search = []
    for cap in BATCH_CAPS:
        table = tables(groups, cap, names)
        scores = [calibrated(pairs, table, i, cap) for i in range(len(shapes))]
        search.append((sum(h for h, _ in scores) / sum(t for _, t in scores), cap))
    best_share, cap = max(search)
    table = tables(groups, cap, names)
    (ROOT / "presets/efficiency.json").write_text(json.dumps({
        "about": "Default phase efficiencies per accelerator of recommend.estimate_throughput: estimate = "
                 "replicas·O / (t_prefill/prefill + t_decode/decode), t_prefill and t_decode a "
                 "request's seconds at peak per phase (recommend.ESTIMATE_FORMULA). Fitted by "
                 "tools/published/fit_efficiency.py; residuals in docs/efficiency.md.",
        "batch_cap": {"value": cap, "source": (
            f"fitted: of batch caps {', '.join(map(str, BATCH_CAPS))}, the one whose fit calibrated on "
            f"one point per (model, accelerator) puts the most other points within ±15 % "
            f"({best_share:.1%}) (tools/published/fit_efficiency.py)")},
        "efficiency": {k: v.model_dump() for k, v in table.items()}}, indent=1, ensure_ascii=False) + "\n")
    estimate_batch_cap.cache_clear()  # the preset's cap, as kvplan reads it from now on
    assert estimate_batch_cap()[0] == cap
    # out of sample: fit on FIT_SHAPES, score the other shapes; and each model held out in turn
    held: dict[str, list[float]] = {"shapes": [], "models": []}
    for key, sub in groups.items():
        if key == "default":
            continue
        train = [r for r in sub if (r["isl"], r["osl"]) in FIT_SHAPES]
        ep, ed = fit(train, cap)
        held["shapes"] += [error(r, PhaseEfficiency(prefill=ep, decode=ed), cap) for r in sub
                           if (r["isl"], r["osl"]) not in FIT_SHAPES]
        for model in sorted({r["model"] for r in sub}):
            train = [r for r in sub if r["model"] != model]
            if not train:
                continue
            ep, ed = fit(train, cap)
            held["models"] += [error(r, PhaseEfficiency(prefill=ep, decode=ed), cap) for r in sub
                               if r["model"] == model]
    lines = ["# Default efficiencies: the fit and its residuals", "",
             "Generated by `tools/published/fit_efficiency.py` from the published results in "
             "`tests/fixtures/published/` (" + ", ".join(f"`{n}`" for n in names) + "; the MLPerf rows "
             "are bound-only: their shapes are floors, not the runs'). The estimate "
             "(`recommend.ESTIMATE_FORMULA`) is `replicas·O / (t_prefill/e_prefill + t_decode/e_decode)`, "
             "`t_prefill` = a request's prefill FLOPs at the format's peak plus its TP all-reduce, "
             "`t_decode` = its share of each decode step's weight read at batch `B`, its KV read, its "
             "decode FLOPs and all-reduce; `B` = the requests whose final length fits in 95 % of the "
             "memory the weights leave (trtllm-bench's `calc_engine_setting`), at most the batch cap. "
             "`e_prefill`, `e_decode` per accelerator are a least-squares fit of the relative error; "
             f"the batch cap **{cap}** is fitted too (of {', '.join(map(str, BATCH_CAPS))}: the one "
             "whose one-point calibration scores best). The estimate never exceeds "
             "`recommend.throughput_bound`, which holds on every row.", "",
             "| accelerator | rows | e_prefill | e_decode | within ±25 % | worst |",
             "|---|---|---|---|---|---|"]
    for key, sub in groups.items():
        errs = [error(r, table[key], cap) for r in sub]
        ok = sum(abs(e) <= 0.25 for e in errs)
        lines.append(f"| {key} | {len(sub)} | {table[key].prefill:.4f} | {table[key].decode:.4f} "
                     f"| {ok} ({ok / len(sub):.0%}) | {max(errs, key=abs):+.1%} |")
    ok = sum(abs(error(r, table[r["gpu"]], cap)) <= 0.25 for r in data)
    default_ok = sum(abs(error(r, table["default"], cap)) <= 0.25 for r in data)
    out_shapes = sum(abs(e) <= 0.25 for e in held["shapes"])
    out_models = sum(abs(e) <= 0.25 for e in held["models"])
    lines += ["", f"In sample: per-accelerator defaults **{ok} of {len(data)}** within ±25 %; the one "
                  f"all-accelerator default **{default_ok} of {len(data)}**.", "",
              "Out of sample (per-accelerator fit on a subset, scored on the rest): fitted on the shapes "
              + ", ".join(f"{i}/{o}" for i, o in sorted(FIT_SHAPES)) + f", the other shapes **{out_shapes} "
              f"of {len(held['shapes'])}** ({out_shapes / len(held['shapes']):.0%}) within ±25 %; each "
              f"model held out in turn (fitted on the accelerator's other models), **{out_models} of "
              f"{len(held['models'])}** ({out_models / len(held['models']):.0%}).", ""]
    scores = [calibrated(pairs, table, i) for i in range(len(shapes))]
    hits, total = sum(h for h, _ in scores), sum(t for _, t in scores)
    lines += ["Calibrated on one point per (model, accelerator) (`recommend.calibrate_run`: the point "
              "reproduced exactly, both phases scaled by one factor), the other points within ±15 %: "
              f"**{hits} of {total}** ({hits / total:.1%}) over every choice of the point; by the shape "
              "calibrated on: "
              + ", ".join(f"{shape} {h} of {t} ({h / t:.0%})" for shape, (h, t) in zip(shapes, scores,
                                                                                      strict=True))
              + ".", "",
              "Batch caps tried (share within ±15 % after one-point calibration): "
              + ", ".join(f"{c}: {share:.1%}" for share, c in sorted(search, key=lambda t: t[1])) + ".", "",
              "| model | accelerator | TP×PP | weights | ISL/OSL | published | bound | limit | estimate "
              "| error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data:
        b = r["bound"]
        est = estimate_throughput(b, table[r["gpu"]], cap)
        lines.append(f"| {r['model']} | {r['gpu']} | {r['tp']}×{r['pp']} | {r['weight_dtype']} "
                     f"| {r['isl']}/{r['osl']} | {r['value']:,.0f} | {b.tokens_per_s:,.0f} | {b.limit} "
                     f"| {est:,.0f} | {est / r['value'] - 1:+.1%} |")
    (ROOT / "docs/efficiency.md").write_text("\n".join(lines) + "\n")
    print(f"{len(data)} rows; cap {cap}; per-accelerator within 25 %: {ok}; default {default_ok}; "
          f"out of sample {out_shapes}/{len(held['shapes'])}, {out_models}/{len(held['models'])}; "
          f"calibrated within 15 %: {hits}/{total}")


if __name__ == "__main__":
    main()
