"""The configs whose context limit the dev-time generators ask the engines for (shared by
``tools/vllm_truth/context_limits.py`` and ``tools/sglang_truth/context_limits.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def configs() -> dict[str, dict]:
    """Every preset's config.json, every vendored Hub config, and the RoPE / length-key variants
    of ``tests/test_context_limit.py`` (its ``CASES`` written out by that test's module)."""
    out = {}
    for path in sorted((ROOT / "presets" / "models").glob("*.json")):
        preset = json.loads(path.read_text())
        out[f"preset:{preset['id']}"] = preset["config"]  # the link id (file stem or Hub id)
    for path in sorted((ROOT / "tests" / "fixtures" / "configs").glob("*.json")):
        out[f"config:{path.stem}"] = json.loads(path.read_text())
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    from test_context_limit import CASES

    for name, (config, _) in CASES.items():
        out[f"case:{name}"] = config
    return out
