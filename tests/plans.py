"""Plans for the tests' KV-bytes questions: ``kv_plan`` builds the plan of ``batch`` sequences of
``tokens`` tokens under an engine id (at the boundary, ``kvplan.plan.make_plan``), moving a
``settings.tp`` / ``settings.pp`` into the query's layout as the CLI does."""

from __future__ import annotations

from kvplan.arch import ModelArch
from kvplan.engines import EngineSettings
from kvplan.plan import FitQuery, Plan, make_plan


def kv_plan(arch: ModelArch, tokens: int, batch: int = 1, kv_dtype: str = "bf16", engine: str = "hf",
            settings: EngineSettings | None = None) -> Plan:
    """The plan of ``batch`` sequences of ``tokens`` tokens of ``arch`` under ``engine`` (no GPU)."""
    settings = settings or EngineSettings()
    query = FitQuery(tokens=tokens, users=batch, kv_dtype=kv_dtype, engine=engine, tp=settings.tp,
                     pp=settings.pp, settings=settings)
    return make_plan(arch, None, query)
