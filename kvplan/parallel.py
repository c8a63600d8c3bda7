"""How parallelism splits a model, shared by the weights (``kvplan.weights``) and the engines'
KV pools (``kvplan.engines``): below both, so neither imports the other for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.errors import KVPlanError

if TYPE_CHECKING:
    from kvplan.arch import ModelArch


def pp_partition(n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: vLLM ``get_pp_indices`` (remainder to the stages before the last)."""
    if pp > n_layers:
        raise KVPlanError("parallel.pp_layers", pp=pp, layers=n_layers)
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts


def layer_partition(arch: ModelArch, pp: int) -> list[int]:
    """Entries of ``arch.layers`` per pipeline stage: vLLM's ``get_pp_indices`` splits the decoder
    layers (``pp_partition`` of ``num_hidden_layers``), so a model with ``parallel_mixers`` (two
    entries per decoder layer: Falcon-H1) keeps each layer's attention and mixer on one stage."""
    if pp == 1:
        return [arch.n_layers]
    if not arch.parallel_mixers:
        return pp_partition(arch.n_layers, pp)
    return [2 * n for n in pp_partition(arch.n_layers // 2, pp)]
