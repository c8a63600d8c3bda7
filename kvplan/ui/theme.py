"""Colours, the plotly template and byte formatting shared by every view (no Streamlit)."""

from __future__ import annotations

from functools import cache
from typing import Any

from kvplan.arch import Kind
from kvplan.colors import DTYPE_COLORS, dtype_color  # re-exported: the views' one import of colours
from kvplan.png import TEMPLATE

GIB = 1 << 30
GB = 10**9
__all__ = ["DTYPE_COLORS", "GPU_PALETTE", "SIDE_LEGEND", "dtype_color", "gpu_color"]

#: One colour per accelerator (plotly's Dark24, dark enough on white, then 12 of Alphabet), by the
#: catalogue's sorted order: an accelerator keeps its colour on every chart whatever else is drawn beside it.
GPU_PALETTE = ("#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100",
               "#750D86", "#EB663B", "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D",
               "#6C7C32", "#778AAE", "#862A16", "#A777F1", "#620042", "#1616A7", "#DA60CA",
               "#6C4516", "#0D2A63", "#AF0038",
               # then plotly's Alphabet, its colours dark enough on white
               "#AA0DFE", "#3283FE", "#85660D", "#782AB6", "#565656", "#1C8356", "#C4451C",
               "#325A9B", "#B10DA1", "#B00068", "#90AD1C", "#C075A6")
DESIGN_COLORS: dict[str, str] = {"real": "#111111", "mha": "#d62728", "gqa": "#1f77b4",
                                 "swa": "#2ca02c", "mla": "#9467bd"}
KIND_COLORS: dict[Kind, str] = {Kind.FULL: "#1f77b4", Kind.SLIDING: "#2ca02c", Kind.CHUNKED: "#17becf",
                                Kind.MLA: "#9467bd", Kind.DSA_INDEXER: "#e377c2",
                                Kind.RECURRENT: "#8c564b"}
MEMORY_COLORS: dict[str, str] = {"weights": "#6b6b6b", "kv": "#1f77b4", "kv_over": "#d62728",
                                 "reserve": "#f2b134", "held_back": "#c7c7c7", "free": "#d9f0d3"}
BUDGET_COLOR = "#d62728"
#: Every chart's legend: a column right of the plot. Plotly widens the right margin to fit it
#: (``margin.autoexpand``), so at 1440 px and on a 390 px phone it never covers the title, an axis
#: title or the data — a row above the plot overlaps the title once it wraps, one below it the
#: x-axis title (``tests/browser/test_charts_layout.py`` checks the boxes at both widths).
SIDE_LEGEND: dict[str, Any] = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0,
                               "yanchor": "top"}


#: The parts of ``plotly_white`` a 2-D chart uses; 3-D, polar, geo and other trace defaults are
#: dropped so every figure carries (and every rerun copies) a quarter of the template.
_LAYOUT_KEYS = ("autotypenumbers", "colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor",
                "plot_bgcolor", "coloraxis", "colorscale", "xaxis", "yaxis", "shapedefaults",
                "annotationdefaults", "title")
_TRACE_KEYS = ("scatter", "bar", "heatmap")


@cache
def _template() -> Any:
    """The 2-D subset of ``plotly_white`` as a Template object, validated once per process."""
    import plotly.graph_objects as go
    import plotly.io as pio

    full = pio.templates[TEMPLATE].to_plotly_json()
    return go.layout.Template(
        layout={k: v for k, v in full["layout"].items() if k in _LAYOUT_KEYS},
        data={k: v for k, v in full["data"].items() if k in _TRACE_KEYS})


def apply_template(fig: Any) -> Any:
    """Set the explicit ``plotly_white`` (2-D subset) template on ``fig`` (it is in the figure's JSON, so the
    PNG export looks like the screen) without re-validating it: the Template object is validated
    once (``_template``) and copied in as JSON, exactly how plotly applies its own default
    template (``BaseFigure._initialize_layout_template``). ``update_layout(template=...)``
    re-validates and deep-copies the whole template per figure (≈ 10 ms each)."""
    layout = fig.layout
    previous = layout._validate
    layout._validate = False
    try:
        layout.template = _template()
    finally:
        layout._validate = previous
    return fig


def new_figure(data: Any = None) -> Any:
    """``go.Figure(data)`` carrying the explicit ``plotly_white`` template (see ``apply_template``)."""
    import plotly.graph_objects as go

    return apply_template(go.Figure(data))


def figure_from_dict(spec: dict[str, Any]) -> Any:
    """Rebuild a figure from ``fig.to_dict()`` of an already validated figure (a cached one)
    without validating it again — the same shortcut plotly takes for its default template."""
    import plotly.graph_objects as go

    return go.Figure(spec, _validate=False)


@cache
def chart_config() -> dict[str, Any]:
    """Plotly's ``config`` for every chart on screen (``st.plotly_chart(config=...)``): no mode bar.
    Plotly.js builds the bar's buttons and icons on every ``newPlot`` (each tab switch) and redraw;
    without them a tab switch took 282–316 ms instead of 435–448 ms and a keypress 185–207 ms
    instead of 267–280 ms (bench/README.md, issue #33). Hover, drag to zoom and double-click to
    reset stay (Plotly's defaults); each chart's "Download PNG" button exports it."""
    return {"displayModeBar": False}


def _gpu_order() -> dict[str, int]:
    from kvplan.presets import gpus

    return {gpu_id: i for i, gpu_id in enumerate(sorted(gpus()))}


def gpu_color(gpu_id: str) -> str:
    """The colour of one accelerator on every chart (``GPU_PALETTE`` by catalogue order; a custom
    accelerator is black). Distinct for the first ``len(GPU_PALETTE)`` accelerators."""
    index = _gpu_order().get(gpu_id)
    return "#000000" if index is None else GPU_PALETTE[index % len(GPU_PALETTE)]


def fmt_bytes(n: float | int | None) -> str:
    """Binary units, explicit: ``12.31 GiB`` (1 GiB = 2^30 B); small values in MiB/KiB/B."""
    if n is None:
        return "–"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{sign}{value / size:,.2f} {unit}"
    return f"{sign}{value:,.0f} B"


def exact_bytes(n: int | None) -> str:
    """Exact count with both unit systems: ``12,305,735,680 B = 11.46 GiB = 12.31 GB``."""
    if n is None:
        return "–"
    value = int(n)
    decimal = next((f"{value / size:,.2f} {unit}" for unit, size in
                    (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)) if abs(value) >= size),
                   f"{value:,} B")
    return f"{value:,} B = {fmt_bytes(value)} = {decimal}"


def fmt_tokens(n: int) -> str:
    """``2,048`` → ``2,048``; ``131072`` → ``131,072``; ``10000000`` → ``10M``."""
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1_000_000:g}M"
    return f"{n:,}"
