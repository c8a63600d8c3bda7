"""How parallelism splits a model, shared by the weights (``kvplan.weights``) and the engines'
KV pools (``kvplan.engines``): below both, so neither imports the other for it."""

from __future__ import annotations

from kvplan.errors import KVPlanError


def pp_partition(n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: vLLM ``get_pp_indices`` (remainder to the stages before the last)."""
    if pp > n_layers:
        raise KVPlanError("parallel.pp_layers", pp=pp, layers=n_layers)
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts
