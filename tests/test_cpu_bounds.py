"""CPU bound of one dashboard rerun (issue #17 item 1): the worst inputs the limits allow, every view.

Each case is a link at the limits: 10,000 layers (one kind, mixed kinds, huge dimensions), the
longest context the dashboard takes (10M tokens), 10M users, 4,096 GPUs, every KV dtype, stacked
by kind. For every view the app is rerun from a cold cache (``st.cache_data`` and the parsed-config
cache cleared) through Streamlit's AppTest, three times; the median process CPU time
(``time.process_time``, every thread of the process) must stay within ``LIMIT_S``.

``LIMIT_S`` is a ceiling, not the target: the 1 s target lives in ``bench/`` (``python -m bench
--only reruns uploads``, rows "rerun, heaviest link" and "rerun, header upload"), measured on a
quiet machine. Here, on a loaded 2-core CI machine, process CPU time grows with contention (cache
and frequency effects, other processes' interrupts): a 0.9 s rerun once measured 1.03 s and failed
a 1.0 s bound, which blocked every submission for noise (issue #32). ``LIMIT_S`` = 2.5 s stays
clear of that noise and still catches what this test exists for — work proportional to the layer
count or the input size (seconds to a minute per rerun, ``ABORT_S`` ends those early).

The measurement runs in a child process per case (``python tests/test_cpu_bounds.py CASE VIEW…``)
with a CPU timer that stops a run past ``ABORT_S`` (``_child``), so a slow case costs about
``ABORT_S`` of CPU here instead of the minute it would take. (The 10,000-layer cases were
``xfail`` until the engines grouped identical layers, vLLM's pool counted identical groups once and
parsed configs shared their layer specs; every case is now expected within the bound.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The ceiling a loaded CI machine cannot cross by noise (the 1 s target: bench/, see above).
LIMIT_S = 2.5
ABORT_S = 5.0
RUNS = 3
VIEWS = ["context", "users", "memory", "requests", "designs", "serving"]
ALL_DTYPES = "bf16,fp16,fp32,fp8_e4m3,fp8_e5m2,int8,int4,int2,nvfp4,mxfp4,avg6bit"
#: The heaviest workload a link can ask of the dashboard (tokens: its 10M limit).
HEAVY = {"t": "10000000", "u": "10000000", "n": "4096", "tp": "8", "kd": ALL_DTYPES, "sk": "1",
         "lx": "1"}
N = 10_000
_BASE = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
         "torch_dtype": "bfloat16"}
_KINDS = ["full_attention", "sliding_attention", "chunked_attention", "linear_attention", "mlp"]
CONFIGS = {
    # the link: 1 full and 9,999 sliding-window layers
    "sliding-10k": {**_BASE, "num_hidden_layers": N, "sliding_window": 4096,
                    "layer_types": ["full_attention"] + ["sliding_attention"] * (N - 1)},
    # every cache kind interleaved (full, sliding, chunked, Gated DeltaNet state, no cache)
    "mixed-10k": {**_BASE, "num_hidden_layers": N, "sliding_window": 4096,
                  "attention_chunk_size": 8192, "linear_num_key_heads": 16,
                  "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                  "linear_value_head_dim": 128, "layer_types": [_KINDS[i % 5] for i in range(N)]},
    # every dimension at its limit
    "huge-dims-10k": {**_BASE, "num_hidden_layers": N, "hidden_size": 1_000_000,
                      "num_attention_heads": 1_000_000, "num_key_value_heads": 1_000_000,
                      "head_dim": 1_000_000, "intermediate_size": 1_000_000, "vocab_size": 10_000_000},
    "dense-10k": {**_BASE, "num_hidden_layers": N},
    # huge dimensions on a realistic depth: the cost that does not come from the layer count
    "huge-dims-128": {**_BASE, "num_hidden_layers": 128, "hidden_size": 1_000_000,
                      "num_attention_heads": 1_000_000, "num_key_value_heads": 1_000_000,
                      "head_dim": 1_000_000, "intermediate_size": 1_000_000, "vocab_size": 10_000_000,
                      "sliding_window": 1_000_000, "layer_types": [_KINDS[i % 2] for i in range(128)]},
}
#: case → the link (every case at the heaviest workload; pp so that tp × pp = 4,096 GPUs).
CASES: dict[str, dict[str, str]] = {
    **{name: {"m": "custom", "pp": "512" if name.endswith("-10k") else "128", **HEAVY}
       for name in CONFIGS},
    "llama-3.1-405b": {"m": "llama-3.1-405b", "pp": "2", **HEAVY},
    "deepseek-v3": {"m": "deepseek-v3", "pp": "61", "n": "488", **{k: v for k, v in HEAVY.items()
                                                                    if k != "n"}},
}
#: Work proportional to the layer count (item 1, the engine refactor): on this branch a cold rerun
#: of the 10,000-layer cases takes from 1 to 55 s of CPU depending on the view.
def _query(case: str) -> dict[str, str]:
    query = dict(CASES[case])
    if case in CONFIGS:
        from kvplan.scenario import encode_config

        query["c"] = encode_config(CONFIGS[case])
    return query


class _Aborted(Exception):
    """Raised inside the app's script thread when a rerun passes ``ABORT_S`` of CPU."""


def _child(case: str, views: list[str]) -> None:
    """Measure ``views`` of ``case``; one JSON line per view.

    A CPU timer (``ITIMER_PROF``) fires once a run passes ``ABORT_S`` and then every 50 ms of CPU;
    each time it raises ``_Aborted`` inside Streamlit's script thread
    (``PyThreadState_SetAsyncExc``), so the run ends (the app's guards catch it and move on) and
    the next view is measured in the same process.
    """
    import ctypes
    import logging
    import signal
    import statistics
    import threading
    import time

    sys.path.insert(0, str(ROOT))
    logging.disable(logging.WARNING)
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from kvplan.scenario import _custom_arch

    aborted = {"now": False}

    def stop_script(*_) -> None:
        aborted["now"] = True
        for thread in threading.enumerate():
            if thread.name == "ScriptRunner.scriptThread" and thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                           ctypes.py_object(_Aborted))

    signal.signal(signal.SIGPROF, stop_script)

    def run(query: dict[str, str]) -> tuple[float, list[str]]:
        st.cache_data.clear()
        _custom_arch.cache_clear()
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        at.query_params.update(query)
        aborted["now"] = False
        start = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, ABORT_S, 0.05)
        try:
            at.run()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        spent = time.process_time() - start
        return spent, [e.value[:200] for e in [*at.exception, *at.error]]

    run({})  # imports and plotly's first figure are not part of any rerun
    query = _query(case)
    for view in views:
        times, errors, stopped = [], [], 0
        for _ in range(RUNS):
            spent, errors = run({**query, "vw": view})
            stopped += aborted["now"]
            times.append(ABORT_S if aborted["now"] else spent)  # a stopped run counts as ABORT_S
            if stopped > RUNS // 2:  # the median is past ABORT_S whatever the other runs give
                break
        line = ({"view": view, "cpu_s": None, "aborted_after_s": ABORT_S} if stopped > RUNS // 2 else
                {"view": view, "cpu_s": statistics.median(times), "runs": times, "errors": errors})
        print(json.dumps(line), flush=True)


_RESULTS: dict[str, dict[str, dict]] = {}


def measure(case: str) -> dict[str, dict]:
    """Every view of ``case``, measured in one child process."""
    if case not in _RESULTS:
        proc = subprocess.run([sys.executable, __file__, case, *VIEWS], cwd=ROOT, text=True,
                              capture_output=True, timeout=1800)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or len(lines) != len(VIEWS):
            raise AssertionError(f"measurement of {case} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        _RESULTS[case] = {line["view"]: line for line in lines}
    return _RESULTS[case]


def _params():
    for case in CASES:
        for view in VIEWS:
            yield pytest.param(case, view, id=f"{case}-{view}")


@pytest.mark.parametrize(("case", "view"), _params())
def test_rerun_cpu_within_one_second(case, view):
    result = measure(case)[view]
    assert result["cpu_s"] is not None, f"{case}/{view}: a rerun passed {ABORT_S} s of CPU (aborted)"
    assert not [e for e in result["errors"] if "could not be drawn" in e], result["errors"]
    assert result["cpu_s"] <= LIMIT_S, f"{case}/{view}: median {result['cpu_s']:.2f} s CPU {result['runs']}"


@pytest.mark.parametrize("case", ["many-files", "one-2MB-file"])
def test_header_upload_cpu_within_the_ceiling(case):
    """The header upload at its limits (issue #32 item 10): ``MAX_UPLOAD_FILES`` files holding
    ``MAX_UPLOAD_HEADER_BYTES`` of one-element tensors, or one 2 MB header (Streamlit's upload
    limit): the rerun that parses them, median of ``RUNS``, within ``LIMIT_S``."""
    import statistics
    import time

    from streamlit.testing.v1 import AppTest

    sys.path.insert(0, str(ROOT))
    from bench.__main__ import _dense_header, _upload_script
    from kvplan.ui.weights_view import MAX_UPLOAD_FILES, MAX_UPLOAD_HEADER_BYTES

    files = ([(f"m{i}.safetensors", _dense_header(MAX_UPLOAD_HEADER_BYTES // MAX_UPLOAD_FILES, f"{i}."))
              for i in range(MAX_UPLOAD_FILES)] if case == "many-files"
             else [("model.safetensors", _dense_header(2_000_000))])
    times = []
    for _ in range(RUNS):
        at = AppTest.from_function(_upload_script, args=(files,), default_timeout=60)
        start = time.process_time()
        at.run()
        times.append(time.process_time() - start)
        assert not at.exception, [e.value for e in at.exception]
    assert statistics.median(times) <= LIMIT_S, times


def test_cases_are_within_the_input_limits():
    """Each case is accepted as it stands: no link warning, so the bound covers a real link."""
    from kvplan.scenario import Scenario, check_names

    for case in CASES:
        query = _query(case)
        assert len(query.get("c", "")) <= 8192
        scenario, warnings = Scenario.from_query(query)
        scenario, more = check_names(scenario)
        assert warnings + more == [], (case, warnings + more)
        assert scenario.num_gpus == int(query["n"]) and scenario.tokens == 10_000_000


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2:])
