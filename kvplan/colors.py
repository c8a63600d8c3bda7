"""One colour per KV dtype, shared by the dashboard's charts (``kvplan.ui.theme``) and the PNG
report (``kvplan.report``), so bf16 and fp8 look the same on every chart and in every export."""

from __future__ import annotations

from kvplan.dtypes import KV_DTYPE_CHOICES

#: The fallback cycle for dtypes without a fixed colour below.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939")
DTYPE_COLORS: dict[str, str] = {
    name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(KV_DTYPE_CHOICES)}
DTYPE_COLORS.update({"fp16": "#4c78a8", "bf16": "#1f77b4", "fp8_e4m3": "#ff7f0e",
                     "fp8_e5m2": "#f2b134", "fp32": "#7f7f7f"})


def dtype_color(name: str) -> str:
    """The colour of one KV dtype on every chart (grey for a name outside the table)."""
    return DTYPE_COLORS.get(name, "#333333")
