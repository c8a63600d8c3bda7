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
