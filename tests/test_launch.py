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
