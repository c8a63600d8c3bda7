"""``kvplan.ui.launch`` (how ``./dev app`` serves the dashboard): what it does before listening."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, json
from kvplan.ui.launch import preload
preload()
print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
"""


def test_preload_freezes_what_it_loaded_out_of_the_collector():
    """Streamlit runs gc.collect(2) after every rerun (``runner.postScriptGC``), holding the GIL
    before the run's last deltas are sent; after ``preload`` the modules, presets and template are
    in the permanent generation, so that collection walks almost nothing of them."""
    env = {**os.environ, "KVPLAN_PNG_WARM_UP": "0"}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["frozen"] > 50_000            # pandas, Plotly, Streamlit, kvplan and the presets
    assert counts["tracked"] < counts["frozen"] // 20


WAIT_PROBE = """
import json, threading, time
import kvplan.png
from kvplan.ui.launch import preload

warm = threading.Thread(target=time.sleep, args=(3.0,), daemon=True)
kvplan.png.warm_up_in_background = lambda: (warm.start(), warm)[1]
preload()
print(json.dumps({"started": warm.ident is not None, "alive": warm.is_alive()}))
"""


def test_preload_waits_for_the_png_warm_up_before_the_server_listens():
    """Issue #16 (first render): the export browser's start overlapped the first visitor's render
    and slowed it; the launcher lets it finish (bounded by ``WARM_UP_WAIT``) before listening."""
    out = subprocess.run([sys.executable, "-c", WAIT_PROBE], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"started": True, "alive": False}


FIRST_RUN_PROBE = """
import json
import kvplan.capacity
from kvplan.ui import views
from kvplan.ui.launch import preload

preload()
calls = {"fit": 0, "figure_svg": 0}
fit, figure_svg = kvplan.capacity.fit, views.figure_svg


def counted(name, function):
    def call(*args, **kwargs):
        calls[name] += 1
        return function(*args, **kwargs)
    return call


kvplan.capacity.fit = counted("fit", fit)  # imported where it is called (kvplan.ui.cached.answers)
views.figure_svg = counted("figure_svg", figure_svg)
from streamlit.testing.v1 import AppTest

at = AppTest.from_file(APP, default_timeout=60).run()
exact = [c.value for c in at.caption if c.value.startswith("Exact:")]
print(json.dumps({**calls, "exceptions": len(at.exception), "exact": exact}))
"""


def test_preload_fills_the_default_pages_caches():
    """The first visitor of the plain address reads the default scenario's answer and static chart
    from the caches ``preload`` filled (one process, Streamlit's global data caches): its first
    run calls ``fit`` 0 times (2 without the warm-up: one per default KV dtype, bf16 and fp8_e4m3)
    and draws no SVG (1 without), and shows the same exact numbers as a run without the warm-up."""
    env = {**os.environ, "KVPLAN_PNG_WARM_UP": "0"}
    probe = f"APP = {str(ROOT / 'app.py')!r}\n" + FIRST_RUN_PROBE
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180, check=True)
    warm = json.loads(out.stdout.strip().splitlines()[-1])
    cold = subprocess.run([sys.executable, "-c", probe.replace("preload()\n", "")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180, check=True)
    cold_run = json.loads(cold.stdout.strip().splitlines()[-1])
    assert (warm["fit"], warm["figure_svg"], warm["exceptions"]) == (0, 0, 0), warm
    assert (cold_run["fit"], cold_run["figure_svg"]) == (2, 1), cold_run
    assert len(warm["exact"]) == 1 and warm["exact"] == cold_run["exact"]
