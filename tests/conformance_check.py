"""kvplan's ``hf`` engine and parameter counts against transformers' measured fixtures.

The fixtures (``tests/fixtures/conformance/<model_type>.json``) are written by the dev-time
generator ``tools/conformance/generate.py``: a small config, the bytes of every tensor of the cache
transformers returned after real forwards (batch 2, several lengths, float32), and the parameter
counts of the small model and of the full-size default config; one measurement is repeated with
the model in bfloat16 (compared with kvplan for a bf16 config). This module needs no torch; the
test (``test_conformance.py``) and the report (``tools/conformance/report.py``) share it.

States: ``exact`` (every measured cache size and the full-size parameter count equal),
``exact KV`` (cache exact, weights off by the given relative error), ``refused`` (kvplan raises a
KVPlanError), ``WRONG`` (kvplan prints a cache size transformers does not hold), ``not measured``
(the generator could not run the model; its error is kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from kvplan.config_import import parse_config
from kvplan.errors import KVPlanError
from kvplan.sizing import kv_cache
from tests.plans import kv_plan

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "conformance"
#: torch dtype names of the fixtures → kvplan format names.
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
#: Measured cache roles kvplan sizes (integer tensors are counters and positions).
SIZED_ROLES = ("k", "v", "indexer_k", "conv", "state", "other")


@dataclass
class Verdict:
    model_type: str
    state: str
    detail: str = ""
    kv: list[tuple[str, int, int, int | None]] = field(default_factory=list)
    params: tuple[int, int] | None = None
    params_small: tuple[int, int] | None = None

    @property
    def params_error(self) -> float | None:
        """Relative error of kvplan's full-size parameter count (None when not compared)."""
        if not self.params:
            return None
        measured, computed = self.params
        return abs(computed - measured) / measured if measured else None


@cache
def fixture_paths() -> tuple[Path, ...]:
    return tuple(sorted(FIXTURES.glob("*.json")))


@cache
def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _with_dtype(config: dict[str, Any], torch_dtype: str) -> dict[str, Any]:
    """The config as saved with the model in ``torch_dtype`` (``dtype`` at every level)."""
    out = {**config, "dtype": torch_dtype}
    if isinstance(config.get("text_config"), dict):
        out["text_config"] = {**config["text_config"], "dtype": torch_dtype}
    return out


def _kv_bytes(arch: Any, length: int, batch: int, dtype: str) -> int:
    return kv_cache(kv_plan(arch, length, batch, kv_dtype=dtype, engine="hf")).kv_bytes


def check(fixture: dict[str, Any]) -> Verdict:
    """The state of one model type; never raises for a KVPlanError (that is a refusal)."""
    model_type = fixture["model_type"]
    if fixture.get("status") != "measured":
        return Verdict(model_type, "not measured", str(fixture.get("error", ""))[:300])
    try:
        archs = {}
        rows = []
        for m in fixture["measurements"]:
            torch_dtype = m.get("dtype", fixture["dtype"])
            if torch_dtype not in archs:
                archs[torch_dtype] = parse_config(_with_dtype(fixture["config"], torch_dtype))
            measured = sum(m["bytes_by_role"].get(role, 0) for role in SIZED_ROLES)
            mode = m["mode"] if torch_dtype == fixture["dtype"] else f"{m['mode']} {torch_dtype}"
            rows.append((mode, m["length"], measured,
                         _kv_bytes(archs[torch_dtype], m["length"], m["batch"], DTYPES[torch_dtype])))
        arch = archs[fixture["dtype"]]
    except KVPlanError as exc:
        return Verdict(model_type, "refused", str(exc))
    verdict = Verdict(model_type, "exact", kv=rows,
                      params_small=(fixture["params_small"], arch.params_total))
    wrong = [r for r in rows if r[2] != r[3]]
    if wrong:
        mode, length, measured, computed = wrong[0]
        verdict.state = "WRONG"
        verdict.detail = (f"{mode} T={length}: transformers holds {measured:,} B, kvplan says "
                          f"{computed:,} B")
        return verdict
    default = fixture.get("default_config")
    if default is None:
        verdict.state = "exact KV"
        verdict.detail = "full-size parameters not measured: " + str(
            fixture.get("params_default_error", ""))[:200]
        return verdict
    try:
        full = parse_config(default)
    except KVPlanError as exc:
        verdict.state = "exact KV"
        verdict.detail = f"full-size default config refused: {exc}"
        return verdict
    verdict.params = (fixture["params_default"], full.params_total)
    if verdict.params[0] != verdict.params[1]:
        verdict.state = "exact KV"
        verdict.detail = (f"weights within {100 * verdict.params_error:.3g}% "
                          f"(kvplan {full.params_total:,}, transformers {fixture['params_default']:,})")
    return verdict


def verdicts() -> list[Verdict]:
    return [check(load(path)) for path in fixture_paths()]
