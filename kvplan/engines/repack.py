"""How an engine release holds MoE experts after loading, when it re-lays them out (the MXFP4
backends' padding, swizzled scales and biases): a value the engine computes
(``Engine.mxfp4_moe_repack``) and ``kvplan.weights`` applies to the experts' bytes per GPU."""

from __future__ import annotations

from dataclasses import dataclass


def round_up(x: int, multiple: int) -> int:
    """vLLM ``round_up``: the smallest multiple of ``multiple`` ≥ ``x``."""
    return -(-x // multiple) * multiple


@dataclass(frozen=True)
class ExpertRepack:
    """How an engine's MXFP4 MoE backend holds the experts of one rank after loading.

    vLLM ``Mxfp4MoEMethod.create_weights`` (``mxfp4_round_up_hidden_size_and_intermediate_size``)
    allocates ``w13``/``w2`` with the hidden size rounded up to ``hidden`` and the per-rank
    intermediate size to ``inter``; ``process_weights_after_loading`` may then pad the packed
    values (rows to ``value_rows``, columns to ``value_cols``), hold a swizzled copy of the e8m0
    scales with rows padded to ``scale_rows`` (columns to even; 0 = no copy), keep the
    checkpoint's scales beside it (``keeps_scales``) and cast the biases to fp32.
    """

    backend: str
    hidden: int = 1
    inter: int = 1
    value_rows: int = 1
    value_cols: int = 1
    scale_rows: int = 0
    keeps_scales: bool = False
    fp32_bias: bool = False
    source: str = ""

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of one expert's ``rows × cols`` MXFP4 matrix (already padded to the backend's
        sizes): packed values, the scales the backend keeps, and its swizzled scale copy."""
        values = round_up(rows, self.value_rows) * round_up(cols, self.value_cols) // 2
        scales = rows * -(-cols // 32)
        if not self.scale_rows:
            return values + scales
        swizzled = round_up(rows, self.scale_rows) * round_up(-(-cols // 32), 2)
        return values + swizzled + (scales if self.keeps_scales else 0)

    def describe(self, hidden: int) -> str:
        """One line naming the backend and its padding (shown with the weight format's source)."""
        kept = ", checkpoint scales kept beside a swizzled copy" if self.keeps_scales else ""
        return (f"vLLM {self.backend} MXFP4 MoE backend: hidden {hidden:,} → "
                f"{round_up(hidden, self.hidden):,}, intermediate per rank rounded up to "
                f"{self.inter}{kept}{', fp32 biases' if self.fp32_bias else ''} ({self.source})")
