"""Shared checks of the engine start-up log fixtures (``tests/fixtures/{sglang,trtllm}_logs``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvplan.config_import import parse_config
from kvplan.presets import load_model

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def values(value: object) -> list:
    """A logged value, or the per-rank list of them."""
    return list(value) if isinstance(value, list) else [value]


def check_schema(doc: dict, path: Path, required: dict[str, Any], settings: dict[str, Any],
                 logged: dict[str, Any]) -> None:
    """Keys in order and typed; the file named by its id; a GitHub source pinned to a commit when it
    is a file; settings typed (None: not established); logged values typed; a short verbatim
    excerpt. ``logged`` maps a key to its type (or to a tuple whose first item is the type)."""
    assert list(doc) == list(required)
    for key, kind in required.items():
        assert isinstance(doc[key], kind), (key, doc[key])
    assert path.name.startswith(doc["id"] + "-")
    assert doc["source"].startswith("https://github.com/")
    assert "/blob/" not in doc["source"] or re.search(r"/blob/[0-9a-f]{40}/", doc["source"])
    assert doc["retrieved"] == "2026-11-30"
    assert doc["model_preset"] or doc["config"], "kvplan needs a preset or a vendored config"
    assert list(doc["settings"]) == list(settings)
    for key, kind in settings.items():
        value = doc["settings"][key]
        assert value is None or (isinstance(value, kind) and not isinstance(value, bool)), key
    assert set(doc["logged"]) <= set(logged), set(doc["logged"]) - set(logged)
    for key, value in doc["logged"].items():
        kind = logged[key][0] if isinstance(logged[key], tuple) else logged[key]
        for one in values(value):
            assert isinstance(one, kind) and not isinstance(one, bool), (key, one)
    assert doc["log_excerpt"].endswith("\n") and doc["log_excerpt"].count("\n") <= 25


def check_numbers_written(doc: dict) -> None:
    """Every number in ``logged`` is written in the verbatim excerpt."""
    written = {float(m.group().replace(",", "")) for m in _NUMBER.finditer(doc["log_excerpt"])}
    for key, value in doc["logged"].items():
        for one in values(value):
            assert float(one) in written, (key, one)


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def fixture_arch(doc: dict, directory: Path):
    """The model a log ran: its vendored config (``configs/`` beside the logs) or kvplan's preset."""
    if doc["config"]:
        return parse_config(json.loads((directory / doc["config"]).read_text()))
    return load_model(doc["model_preset"])
