"""kvplan benchmarks: ``.venv/bin/python -m bench [--quick] [--only NAME ...]``.

Prints one table and writes ``bench/results/bench.json`` and ``bench/results/bench.csv``. Every
measurement is repeated; each repetition measures the case and its baseline back to back, and the
table reports the median and the spread (min–max) over the repetitions.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from kvplan.plan import make_plan

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
PY = sys.executable
sys.path.insert(0, str(ROOT))

#: The heaviest link the dashboard accepts: every limit at its maximum and all 12 KV dtypes.
VIEWS = ("context", "users", "memory", "requests", "designs", "serving")
HEAVIEST = {"m": "llama-3.1-405b", "t": "100000000", "u": "10000000", "n": "4096", "tp": "8",
            "pp": "8", "g": "b300", "e": "vllm",
            "kd": "fp32,fp16,bf16,fp8_e4m3,fp8_e5m2,int8,int4,int2,nvfp4,mxfp4,avg6bit"}

ROWS: list[dict] = []


def record(name: str, samples: list[float], unit: str = "s", target: str = "", ok: bool | None = None,
           baseline: list[float] | None = None, baseline_name: str = "", note: str = "") -> None:
    med = statistics.median(samples)
    row = {"name": name, "unit": unit, "n": len(samples), "median": med, "min": min(samples),
           "max": max(samples), "target": target, "ok": ok, "note": note}
    if baseline:
        row.update(baseline_name=baseline_name, baseline_median=statistics.median(baseline),
                   baseline_min=min(baseline), baseline_max=max(baseline))
    ROWS.append(row)
    status = "" if ok is None else ("PASS" if ok else "MISS")
    print(f"  {name:44s} {fmt(med, unit):>12s}  [{fmt(min(samples), unit)} – {fmt(max(samples), unit)}]"
          f"  {target:18s} {status}", flush=True)


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:,.1f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "x":
        return f"{value:,.0f}×"
    if unit == "MiB":
        return f"{value:,.0f} MiB"
    return f"{value:,.3g} {unit}"


def timed(func: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- (1) sweep


def bench_sweep(reps: int) -> None:
    """10^6 scenarios: tokens × batch × KV dtype × GPU, vectorised vs a per-point Python loop."""
    import numpy as np

    from kvplan.capacity import FitQuery, fit
    from kvplan.presets import gpus, load_model
    from kvplan.sizing import kv_cache, sweep

    arch = load_model("llama-3.1-8b")
    tokens = np.unique(np.round(np.logspace(0, 7, 250)).astype(np.int64))
    tokens = np.concatenate([tokens, np.arange(1, 251 - tokens.size + 1) * 997])[:250]
    batch = np.arange(1, 51, dtype=np.int64)                      # 50
    dtypes = ["bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2", "nvfp4",
              "mxfp4"]                                            # 10
    gpu_list = sorted(gpus().values(), key=lambda g: g.id)[:8]    # 8
    n_points = tokens.size * batch.size * len(dtypes) * len(gpu_list)
    assert n_points == 1_000_000, n_points

    def budgets():
        return np.asarray([fit(make_plan(arch, g, FitQuery(tokens=4096, engine="hf")), search_gpus=False)
                           .kv_budget_bytes for g in gpu_list], dtype=np.int64)

    def vectorised():
        frame = sweep(make_plan(arch, None, FitQuery(tokens=int(tokens.max()), engine="hf")), tokens, batch,
                      dtypes)
        need = frame["reserved_bytes"].to_numpy()
        fits = need[:, None] <= budgets()[None, :]
        return int(fits.sum())

    rng = np.random.default_rng(0)
    sample = 2000
    picks = list(zip(rng.choice(tokens, sample), rng.choice(batch, sample),
                     rng.integers(0, len(dtypes), sample), rng.integers(0, len(gpu_list), sample),
                     strict=True))

    def loop():
        budget = budgets().tolist()
        count = 0
        for t, b, d, g in picks:
            asked = FitQuery(tokens=int(t), users=int(b), kv_dtype=dtypes[d], engine="hf")
            plan = make_plan(arch, None, asked)
            count += kv_cache(plan).reserved_bytes <= budget[g]
        return count

    vectorised()  # warm imports and caches
    fast, slow, ratio = [], [], []
    for _ in range(reps):
        v = timed(vectorised)
        per_point = timed(loop) / sample
        fast.append(v)
        slow.append(per_point * n_points)
        ratio.append(per_point * n_points / v)
    record("sweep 10^6 scenarios (vectorised)", fast, target="≤ 100 ms",
           ok=statistics.median(fast) <= 0.100)
    record("per-point loop, extrapolated to 10^6", slow, note=f"{sample} sampled points")
    record("sweep speed-up vs loop", ratio, unit="x", target="≥ 50×",
           ok=statistics.median(ratio) >= 50, baseline=slow, baseline_name="loop")


# ----------------------------------------------------------------------------- (2) AppTest reruns


def bench_reruns(reps: int) -> None:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    app = str(ROOT / "app.py")
    if not Path(app).exists():
        print("  (skipped: app.py missing)")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write("import streamlit as st\n")
        empty_path = handle.name

    def session(query: dict[str, str] | None):
        at = AppTest.from_file(app, default_timeout=300)
        for key, value in (query or {}).items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    empty = AppTest.from_file(empty_path, default_timeout=60)
    empty.run()
    default = session(None)
    # the heaviest link, in every view (only the open view runs): the slowest view counts
    heavy = [session({**HEAVIEST, "vw": view}) for view in VIEWS]
    base, warm_default, warm_heavy, cold_default, cold_heavy = [], [], [], [], []
    for _ in range(reps):
        default.run()  # re-warm: the previous repetition cleared the caches
        for at in heavy:
            at.run()
        base.append(timed(empty.run))
        warm_default.append(timed(default.run))
        warm_heavy.append(max(timed(at.run) for at in heavy))
        st.cache_data.clear()
        cold_default.append(timed(default.run))
        cold = []
        for at in heavy:
            st.cache_data.clear()
            cold.append(timed(at.run))
        cold_heavy.append(max(cold))
    heavy_all = heavy
    for at in (default, *heavy_all):
        assert not at.exception
    record("AppTest: empty Streamlit script (baseline)", base)
    record("rerun, default scenario (warm cache)", warm_default, target="≤ 60 ms",
           ok=statistics.median(warm_default) <= 0.060, baseline=base, baseline_name="empty script")
    record("rerun, default scenario (cache cleared)", cold_default, target="≤ 60 ms",
           ok=statistics.median(cold_default) <= 0.060, baseline=base, baseline_name="empty script")
    record("rerun, heaviest link, slowest view (warm cache)", warm_heavy, target="≤ 1 s",
           ok=statistics.median(warm_heavy) <= 1.0, baseline=base, baseline_name="empty script")
    record("rerun, heaviest link, slowest view (cache cleared)", cold_heavy, target="≤ 1 s",
           ok=statistics.median(cold_heavy) <= 1.0, baseline=base, baseline_name="empty script")
    os.unlink(empty_path)


def profile_rerun(query: dict[str, str] | None, top: int = 25) -> str:
    """cProfile of one cold rerun (for the notes on a missed target)."""
    import cProfile
    import io
    import pstats

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    st.cache_data.clear()
    profiler = cProfile.Profile()
    profiler.enable()
    at.run()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


# ----------------------------------------------------------------------------- (3) imports


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - start


def bench_imports(reps: int) -> None:
    base, pkg, core = [], [], []
    for _ in range(reps):
        base.append(_wall([PY, "-c", "pass"]))
        pkg.append(_wall([PY, "-c", "import kvplan"]))
        core.append(_wall([PY, "-c", "import kvplan.sizing, kvplan.capacity, kvplan.cli"]))
    record("python -c pass (baseline)", base)
    net = [p - b for p, b in zip(pkg, base, strict=True)]
    record("import kvplan (net of interpreter start)", net, target="≤ 0.3 s",
           ok=statistics.median(net) <= 0.3, baseline=base, baseline_name="python -c pass")
    net_core = [c - b for c, b in zip(core, base, strict=True)]
    record("import kvplan.sizing+capacity+cli (net)", net_core, target="≤ 0.3 s",
           ok=statistics.median(net_core) <= 0.3, baseline=base, baseline_name="python -c pass",
           note="numpy, pandas, pydantic")
    if not (ROOT / "app.py").exists():
        return
    script = textwrap.dedent("""
        import time; t0 = time.perf_counter()
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file("app.py", default_timeout=300); at.run()
        assert not at.exception
        print(time.perf_counter() - t0)
    """)
    empty = textwrap.dedent("""
        import time, tempfile; t0 = time.perf_counter()
        from streamlit.testing.v1 import AppTest
        f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
        f.write("import streamlit"); f.close()
        at = AppTest.from_file(f.name); at.run()
        print(time.perf_counter() - t0)
    """)
    first, first_empty = [], []
    for _ in range(reps):
        first_empty.append(_wall([PY, "-c", empty]))
        first.append(_wall([PY, "-c", script]))
    record("first run of an empty script (subprocess)", first_empty)
    record("first run of app.py incl. imports (subprocess)", first, baseline=first_empty,
           baseline_name="empty script, first run")


# ----------------------------------------------------------------------------- (4) PNG


def bench_png(reps: int) -> None:
    try:
        from kvplan.png import chromium_available, fig_to_png  # noqa: F401
    except ImportError:
        print("  (skipped: kvplan.png.fig_to_png not available)")
        return
    if not chromium_available():
        print("  (skipped: no Chromium/kaleido)")
        return
    script = textwrap.dedent("""
        import time, statistics
        import plotly.graph_objects as go
        from kvplan.png import fig_to_png
        fig = go.Figure(go.Scatter(x=list(range(200)), y=[i * i for i in range(200)]))
        fig.update_layout(template="plotly_white", title="bench")
        t0 = time.perf_counter(); png = fig_to_png(fig); first = time.perf_counter() - t0
        assert png[:4] == b"\\x89PNG"
        warm = []
        for i in range(5):
            fig.update_layout(title=f"bench {i}")
            t0 = time.perf_counter(); fig_to_png(fig); warm.append(time.perf_counter() - t0)
        print(first, statistics.median(warm))
    """)
    first, warm = [], []
    for _ in range(max(2, reps // 2)):
        out = subprocess.run([PY, "-c", script], cwd=ROOT, check=True, capture_output=True,
                             text=True, timeout=300).stdout.split()
        first.append(float(out[-2]))
        warm.append(float(out[-1]))
    record("PNG export, first (kaleido + Chromium start)", first)
    record("PNG export, warm", warm, target="≤ 0.3 s", ok=statistics.median(warm) <= 0.3)


# ----------------------------------------------------------------------------- (5) real browser

KEYPRESSES = 12
TAB_SWITCHES = 8


def bench_browser(reps: int) -> None:
    """Real browser, the app beside a minimal Streamlit app in each repetition (fresh servers):
    first render, slider keypress → idle, tab switch → idle, and the first PNG download."""
    import shutil

    from bench import browser

    reason = browser.skip_reason()
    if reason:
        print(f"  (skipped browser: {reason})")
        return
    minimal = browser.minimal_app()
    base_first, base_keys, first, drawn, charts, keys, tabs, pngs = [], [], [], [], [], [], [], []
    try:
        for _ in range(max(reps, 1)):
            with browser.serve(minimal) as server:
                one, pressed = browser.keypress_latencies(server.url, KEYPRESSES)
            base_first.append(one)
            base_keys.extend(pressed)
            with browser.serve(ROOT / "app.py") as server:
                run = browser.app_session(server.url, KEYPRESSES, TAB_SWITCHES)
            first.append(run["first"])
            drawn.append(run["drawn"])
            charts.append(run["chart"])
            pngs.append(run["png"])
            keys.extend(run["keys"])
            tabs.extend(run["tabs"])
    except RuntimeError as exc:
        print(f"  (browser failed: {exc})")
        return
    finally:
        shutil.rmtree(minimal.parent, ignore_errors=True)
    med = statistics.median
    record("browser: first render, minimal app (baseline)", base_first, note="cold server")
    record("browser: first render to idle, app.py", first, baseline=base_first,
           baseline_name="minimal app", target="≤ 1.3× minimal",
           ok=med(first) <= 1.3 * med(base_first), note="cold server (issue #33's bar)")
    record("browser: first render to every element drawn, app.py", drawn, baseline=base_first,
           baseline_name="minimal app",
           note="idle, then no skeleton left (each element type's renderer chunk loaded; "
                "informational)")
    record("browser: first byte to the chart drawn, app.py", charts, baseline=base_first,
           baseline_name="minimal app", target="≤ 1.5 s", ok=med(charts) <= 1.5,
           note="from the page's first byte (navigation responseStart) to the first chart drawn "
                "(its static image, or a Plotly chart's SVG: bench/browser.py CHART_DRAWN_JS); "
                "cold server; the minimal app has no chart")
    record("browser: keypress → idle, minimal (baseline)", base_keys,
           note=f"{KEYPRESSES} keypresses per repetition on the select_slider")
    record("browser: Context length keypress → idle", keys, baseline=base_keys,
           baseline_name="minimal app", target="≤ 1.5× minimal", ok=med(keys) <= 1.5 * med(base_keys),
           note=f"{KEYPRESSES} keypresses per repetition, ArrowRight/ArrowLeft")
    record("browser: tab switch → idle", tabs, baseline=keys, baseline_name="app keypress",
           target="≤ 1.5× keypress", ok=med(tabs) <= 1.5 * med(keys),
           note=f"{TAB_SWITCHES} switches per repetition, KV vs context ⇄ KV vs users")
    record("browser: first PNG download (click → file)", pngs, target="≤ 1 s", ok=med(pngs) <= 1.0,
           note="clicked as soon as a fresh server's first chart is drawn")


# ----------------------------------------------------------------------------- (6) server RSS

SESSIONS = 16
RSS_LIMIT_MIB = 2048  # tests/load/test_load.py: server RSS under 2 GiB with 16 sessions


def bench_rss(reps: int) -> None:
    """Server VmHWM / VmRSS before any session, with 1 session and with 16 concurrent sessions."""
    from bench import browser

    reason = browser.skip_reason()
    if reason:
        print(f"  (skipped rss: {reason})")
        return
    runs = []
    for _ in range(max(1, min(reps, 3))):  # a fresh server per phase and run: ~1 min each
        try:
            runs.append(browser.rss_profile(SESSIONS))
        except RuntimeError as exc:
            print(f"  (rss failed: {exc})")
            return

    def pick(phase: str, key: str) -> list[float]:
        return [run[phase][key] for run in runs]

    before = pick("before", "VmRSS")
    record("server RSS before any session (baseline)", before, unit="MiB",
           note="streamlit process VmRSS after /_stcore/health")
    record("server RSS, 1 session (VmRSS)", pick("one", "VmRSS"), unit="MiB", baseline=before,
           baseline_name="before any session")
    record("server peak RSS, 1 session (VmHWM)", pick("one", "VmHWM"), unit="MiB",
           baseline=before, baseline_name="before any session")
    record(f"server RSS, {SESSIONS} sessions (VmRSS)", pick("many", "VmRSS"), unit="MiB",
           baseline=before, baseline_name="before any session",
           note=f"{SESSIONS} pages, one Chromium, links ?m=<preset>&t=<n>")
    peak = pick("many", "VmHWM")
    record(f"server peak RSS, {SESSIONS} sessions (VmHWM)", peak, unit="MiB",
           target=f"< {RSS_LIMIT_MIB:,} MiB", ok=statistics.median(peak) < RSS_LIMIT_MIB,
           baseline=before, baseline_name="before any session")
    record(f"{SESSIONS} sessions: slowest to idle", [run["many_seconds"] for run in runs],
           note="all pages opened at once")


# ----------------------------------------------------------------------------- main

SECTIONS = {"sweep": bench_sweep, "reruns": bench_reruns, "imports": bench_imports, "png": bench_png,
            "browser": bench_browser, "rss": bench_rss}


def bench_recommend(reps: int) -> None:
    """The recommend search over ≥ 10,000 candidates: the catalogue × 12 TP/PP splits × 5 KV × 8
    weight formats for Llama-3.1-70B on vLLM. Cold: the engine's pool-layout, start-up-cap and FLOPs
    caches cleared before each repetition; warm: a new search (other traffic/targets) of the same model."""
    from kvplan.capacity import FitQuery
    from kvplan.engines.vllm.engine import _CAPS
    from kvplan.engines.vllm.pool import _pool_cached
    from kvplan.flops import layer_flops
    from kvplan.presets import load_model
    from kvplan.recommend import RecommendQuery, recommend

    arch = load_model("llama-3.1-70b")
    query = RecommendQuery(users=256, max_gpus=16, kv_dtypes=("bf16", "fp16", "fp8_e4m3", "fp8_e5m2",
                                                               "int8"),
                           weight_dtypes=("auto", "fp16", "fp8", "int8", "int4_g128", "nvfp4", "mxfp4",
                                          "fp32"))
    count = len(recommend(make_plan(arch, None, FitQuery()), query).table)

    def cold() -> None:
        _pool_cached.cache_clear()
        _CAPS.clear()
        layer_flops.cache_clear()
        recommend(make_plan(arch, None, FitQuery()), query)

    cpu: dict[str, list[float]] = {"cold caches": [], "warm": [], "warm, --disagg": []}

    def both(label: str, func: Callable[[], object]) -> float:
        """Wall seconds (the target's), the process CPU seconds kept aside: on the shared machine
        the wall median swings with the load, the CPU minimum much less."""
        start = time.process_time()
        wall = timed(func)
        cpu[label].append(time.process_time() - start)
        return wall

    cold_samples = [both("cold caches", cold) for _ in range(reps)]
    plan = make_plan(arch, None, FitQuery())
    warm_samples = [both("warm", lambda i=i: recommend(plan, query.model_copy(update={"users": 100 + i})))
                    for i in range(reps)]
    split = query.model_copy(update={"disagg": True})  # + xPyD splits of the 4 cheapest layouts
    pd_count = len(recommend(plan, split).table)
    pd_samples = [both("warm, --disagg",
                       lambda i=i: recommend(plan, split.model_copy(update={"users": 100 + i})))
                  for i in range(reps)]
    for label, samples, n in (("cold caches", cold_samples, count), ("warm", warm_samples, count),
                              ("warm, --disagg", pd_samples, pd_count)):
        record(f"recommend, {n:,} candidates ({label})", samples, target="≤ 200 ms",
               ok=n >= 10_000 and statistics.median(samples) <= 0.2)
    for label, samples in cpu.items():
        record(f"  same, process CPU ({label})", samples, note="process_time; no target")


SECTIONS["recommend"] = bench_recommend

#: Issue #33's CLI example: the answer for Llama-3.1-70B on two H100s.
CLI_FIT = ["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--num-gpus", "2", "--tp", "2",
           "--tokens", "8192", "--users", "32"]


def bench_cli(reps: int) -> None:
    """Wall time of ``python -m kvplan --help`` and of a ``fit`` (subprocesses, each with its
    interpreter start), beside ``python -c pass`` and an import of pandas + pydantic alone."""
    base, deps, helps, fits = [], [], [], []
    for _ in range(reps):
        base.append(_wall([PY, "-c", "pass"]))
        deps.append(_wall([PY, "-c", "import pandas, pydantic"]))
        helps.append(_wall([PY, "-m", "kvplan", "--help"]))
        fits.append(_wall([PY, "-m", "kvplan", *CLI_FIT]))
    record("python -c pass (baseline)", base)
    record("python -c 'import pandas, pydantic'", deps)
    record("kvplan --help (wall)", helps, target="≤ 0.5 s", ok=statistics.median(helps) <= 0.5,
           baseline=deps, baseline_name="import pandas, pydantic")
    record("kvplan fit (issue #33's 70B example, wall)", fits, target="≤ 1 s",
           ok=statistics.median(fits) <= 1.0, baseline=deps, baseline_name="import pandas, pydantic")


SECTIONS["cli"] = bench_cli


def _dense_header(size: int, prefix: str = "") -> bytes:
    """A safetensors header of about ``size`` bytes packed with one-element tensors (the most
    tensors, so the most CPU, per byte: the worst case of a header the limits accept)."""
    from kvplan.checkpoint import MAX_READ_HEADER_BYTES

    entries, used, i = [], 2, 0
    while True:
        entry = f'"{prefix}{i:x}":{{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}'
        if used + len(entry) + 1 > min(size, MAX_READ_HEADER_BYTES):
            break
        entries.append(entry)
        used += len(entry) + 1
        i += 1
    body = ("{" + ",".join(entries) + "}").encode()
    return len(body).to_bytes(8, "little") + body


def _upload_script(files: list[tuple[str, bytes]]) -> None:
    """The weights box's upload callback in one rerun (what a user's upload costs the server)."""
    import streamlit as st

    from kvplan.ui import weights_view

    class _Upload:
        def __init__(self, name: str, data: bytes) -> None:
            self.name, self.data = name, data

        def getvalue(self) -> bytes:
            return self.data

    st.session_state["w_headers"] = [_Upload(name, data) for name, data in files]
    weights_view.on_headers_upload()
    assert "_weights_error" not in st.session_state, st.session_state["_weights_error"]


def bench_uploads(reps: int) -> None:
    """Checkpoint headers at the limits (issue #32 item 10): the upload callback's rerun CPU with
    ``MAX_UPLOAD_FILES`` files holding ``MAX_UPLOAD_HEADER_BYTES`` of headers, and with the largest
    single file Streamlit accepts (``server.maxUploadSize`` 2 MB) — target ≤ 1 s of process CPU;
    the CLI's largest accepted header (``MAX_READ_HEADER_BYTES``, ``read_checkpoint_dir``), no
    target (it runs once per command)."""
    from streamlit.testing.v1 import AppTest

    from kvplan.checkpoint import MAX_READ_HEADER_BYTES, read_checkpoint_dir
    from kvplan.ui.weights_view import MAX_UPLOAD_FILES, MAX_UPLOAD_HEADER_BYTES

    per_file = MAX_UPLOAD_HEADER_BYTES // MAX_UPLOAD_FILES
    many = [(f"model-{i:05d}.safetensors", _dense_header(per_file, f"{i}.")) for i in range(MAX_UPLOAD_FILES)]
    one = [("model.safetensors", _dense_header(2_000_000))]
    assert sum(len(d) for _, d in many) <= MAX_UPLOAD_HEADER_BYTES

    def cpu(files: list[tuple[str, bytes]]) -> float:
        at = AppTest.from_function(_upload_script, args=(files,), default_timeout=60)
        gc.collect()
        start = time.process_time()
        at.run()
        spent = time.process_time() - start
        assert not at.exception, [e.value for e in at.exception]
        return spent

    for label, files in ((f"{MAX_UPLOAD_FILES} files, {MAX_UPLOAD_HEADER_BYTES / 1e6:g} MB of headers", many),
                         ("one 2 MB header (Streamlit's upload limit)", one)):
        samples = [cpu(files) for _ in range(reps)]
        record(f"rerun, header upload: {label} (CPU)", samples, target="≤ 1 s",
               ok=statistics.median(samples) <= 1.0)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "model.safetensors").write_bytes(_dense_header(MAX_READ_HEADER_BYTES))

        def read() -> float:
            gc.collect()
            start = time.process_time()
            read_checkpoint_dir(folder)
            return time.process_time() - start

        record(f"CLI --checkpoint, largest accepted header ({MAX_READ_HEADER_BYTES / 1e6:g} MB, CPU)",
               [read() for _ in range(reps)], note="once per command; no rerun target")


SECTIONS["uploads"] = bench_uploads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 repetitions")
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS))
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of a cold heaviest-link rerun")
    args = parser.parse_args(argv)
    reps = 3 if args.quick else args.reps
    print(f"kvplan bench · Python {platform.python_version()} · {platform.machine()} · "
          f"{os.cpu_count()} CPUs · {reps} repetitions")
    print(f"  {'case':44s} {'median':>12s}  [min – max]{'':14s}target")
    for name in args.only or list(SECTIONS):
        SECTIONS[name](reps)
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "reps": reps, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (RESULTS / "bench.json").write_text(json.dumps({"meta": meta, "rows": ROWS}, indent=2) + "\n")
    fields = sorted({k for row in ROWS for k in row}, key=lambda k: (k != "name", k))
    with (RESULTS / "bench.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(ROWS)
    missed = [r["name"] for r in ROWS if r["ok"] is False]
    print(f"wrote {RESULTS / 'bench.json'} and bench.csv; missed targets: {missed or 'none'}")
    if args.profile:
        print(profile_rerun(HEAVIEST))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
