"""Copy each checkpoint's safetensors index ``metadata.total_size`` into its preset.

Dev-time only. The totals, their sources and what the index holds that the engines do not load
are recorded once, in ``tests/fixtures/checkpoint_index/totals.json`` (found with the search
tools; the Hub is not reachable from here). This script writes ``index_total_size`` and
``index_source`` of every preset in ``presets/models/`` from that file (and clears them where
the fixture has no total); ``build.py`` reads the same totals. Run after editing the fixture:

    .venv/bin/python tools/presets_import/index_totals.py

then regenerate the models table of ``presets/README.md`` (``kvplan.catalogue.markdown_table``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "checkpoint_index" / "totals.json"
MODELS = ROOT / "presets" / "models"

_STATUS = {"C": "the index itself in a public copy", "S": "secondary — the index not read; quoted"}


def index_url(repo: str, entry: dict[str, Any]) -> str:
    """The Hub URL of the checkpoint's index file."""
    name = entry.get("index_file", "model.safetensors.index.json")
    return f"https://huggingface.co/{repo}/blob/main/{name}"


def index_totals() -> dict[str, tuple[int, str]]:
    """Hub repo id → (``metadata.total_size``, its source sentence) from the fixture."""
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    out: dict[str, tuple[int, str]] = {}
    for repo, entry in data["checkpoints"].items():
        skipped = entry["not_counted"]
        extra = (f"; the index also holds {', '.join(skipped)}, which the engines do not load "
                 f"(tests/test_checkpoint_index.py)") if skipped else ""
        source = (f"{index_url(repo, entry)}: {_STATUS[entry['status']]} — {entry['copy']} "
                  f"(read with the search tools, {data['read']}){extra}")
        out[repo.lower()] = (int(entry["total_size"]), source)
    return out


def main() -> None:
    totals = index_totals()
    changed = 0
    for path in sorted(MODELS.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        preset = json.loads(text)
        found = totals.get(str(preset["hf_repo"]).lower())
        before = (preset.get("index_total_size"), preset.get("index_source"))
        if found is None:
            preset.pop("index_total_size", None)
        else:
            preset["index_total_size"], preset["index_source"] = found
        if "config" in preset:  # the config stays the last key, as build.py writes it
            preset["config"] = preset.pop("config")
        if (preset.get("index_total_size"), preset.get("index_source")) != before:
            path.write_text(json.dumps(preset, indent=2, ensure_ascii=False) + "\n",
                            encoding="utf-8")
            changed += 1
    print(f"{changed} presets updated, {len(totals)} index totals")


if __name__ == "__main__":
    main()
