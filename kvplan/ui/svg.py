"""A line chart's figure drawn as a static SVG on the server (no browser, no kaleido).

The first chart of a view is shown as this image until the user asks for the interactive chart
(``kvplan/ui/chart_slot.py``): Plotly's renderer is a 4.7 MB chunk whose evaluation in the browser
takes 0.9–1.4 s, and every element of a first page waited for it (bench/README.md, issue #33).
``figure_svg`` draws what ``fig.to_dict()`` holds — scatter lines (colour, width, dash), linear or
log axes (the layout's range, else the data's), shapes and annotations in paper or data
coordinates, the title, the axis titles and the legend column right of the plot — the way
plotly.js lays them out (``plots/cartesian``, ``components/legend``, ``components/drawing``
``dashStyle``). A figure using anything else (bars, fills, markers, subplots, arrows, markup
other than ``<br>``) gives ``None``, and the caller shows the Plotly chart. Every text is
XML-escaped; the SVG is shown as an ``<img>`` (``st.image``), so nothing in it runs.
"""

from __future__ import annotations

import base64
import math
from typing import Any
from xml.sax.saxutils import escape as _escape

import numpy as np

#: The drawing's width in SVG units; the image is scaled to the column's width.
WIDTH = 1000
FONT = "'Open Sans', verdana, arial, sans-serif"
FONT_SIZE = 12
TEXT = "#2a3f5f"
_DTYPES = {"f8": "<f8", "f4": "<f4", "i4": "<i4", "i2": "<i2", "i1": "i1", "u4": "<u4", "u2": "<u2",
           "u1": "u1", "i8": "<i8", "u8": "<u8"}
_TRACE_KEYS = {"type", "mode", "name", "x", "y", "line", "hovertemplate", "customdata", "legendgroup",
               "showlegend", "uid"}
_LAYOUT_KEYS = {"template", "shapes", "annotations", "legend", "margin", "title", "height",
                "hovermode", "xaxis", "yaxis", "showlegend"}
_AXIS_KEYS = {"title", "type", "range"}


def escape(text: str) -> str:
    """XML-escaped for a text node or a double-quoted attribute."""
    return _escape(text, {'"': "&quot;"})


def _values(data: Any) -> np.ndarray | None:
    """A trace's x or y as floats: a list, a numpy array or plotly's typed array
    ``{"dtype", "bdata"}``."""
    if isinstance(data, dict):
        kind = _DTYPES.get(str(data.get("dtype")))
        if kind is None or "shape" in data:
            return None
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=kind).astype(float)
    if isinstance(data, np.ndarray) and data.ndim == 1 and data.dtype.kind in "iuf":
        return data.astype(float)
    if isinstance(data, np.ndarray) and data.ndim == 1 and data.dtype.kind == "O":
        data = data.tolist()  # plotly keeps an object array of Python floats as it is
    if isinstance(data, list | tuple) and all(isinstance(v, int | float) for v in data):
        return np.asarray(data, dtype=float)
    return None


def _lines(text: Any) -> list[str] | None:
    """A title's or annotation's lines (``<br>`` splits them); None for any other markup."""
    if not isinstance(text, str):
        return [] if text is None else None
    parts = text.replace("<br />", "<br>").replace("<br/>", "<br>").split("<br>")
    return None if any("<" in p or ">" in p for p in parts) else parts


def _text_width(text: str, size: float = FONT_SIZE) -> float:
    return 0.58 * size * len(text)


class _Axis:
    """One axis: data value → pixel, and its ticks (plotly's auto ticks: 1-2-5 steps, log decades)."""

    def __init__(self, spec: dict[str, Any], values: list[np.ndarray], low: float, high: float,
                 pad: float) -> None:
        self.log = spec.get("type") == "log"
        self.low_px, self.high_px = low, high
        given = spec.get("range")
        if isinstance(given, list) and len(given) == 2 and all(isinstance(v, int | float) for v in given):
            self.lo, self.hi = float(given[0]), float(given[1])
        else:
            data = np.concatenate([v[np.isfinite(v) & ((v > 0) if self.log else True)] for v in values]) \
                if values else np.array([])
            if not len(data):
                data = np.array([1.0, 10.0] if self.log else [0.0, 1.0])
            lo, hi = float(data.min()), float(data.max())
            if self.log:
                lo, hi = math.log10(lo), math.log10(hi)
            if hi == lo:
                lo, hi = lo - 1, hi + 1
            span = hi - lo
            self.lo, self.hi = lo - pad * span, hi + pad * span

    def coord(self, value: float) -> float:
        return math.log10(value) if self.log else value

    def px(self, coord: float) -> float:
        return self.low_px + (coord - self.lo) / (self.hi - self.lo) * (self.high_px - self.low_px)

    def ticks(self) -> list[tuple[float, str, bool]]:
        """(coordinate, label, major) of each tick in range."""
        if self.log:
            first, last = math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9)
            out = [(float(d), _number(10.0 ** d), True) for d in range(first, last + 1)]
            if last - first <= 7:  # plotly labels 2 and 5 of each decade in small type ("D1")
                out += [(math.log10(m * 10.0 ** d), str(m) if len(out) > 2 else _number(m * 10.0 ** d),
                         len(out) <= 2)
                        for d in range(first - 1, last + 1) for m in (2, 5)
                        if self.lo <= math.log10(m * 10.0 ** d) <= self.hi]
            return sorted(out)
        span = self.hi - self.lo
        raw = span / max(2.0, abs(self.high_px - self.low_px) / 80)  # plotly: ≈ one tick per 80 px
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        start = math.ceil(self.lo / step - 1e-9)
        out = []
        value = start * step
        while value <= self.hi + 1e-9 * step:
            out.append((value, _number(round(value / step) * step), True))
            value += step
        return out


def _number(value: float) -> str:
    """Tick labels as plotly writes them (SI suffixes from 10k; no trailing zeros)."""
    if value == 0:
        return "0"
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= max(limit, 1e4):
            return f"{value / limit:.6g}{suffix}"
    return f"{value:.6g}"


def _dash(dash: Any, width: float) -> str:
    """``stroke-dasharray`` for plotly's named dashes (plotly.js ``drawing.dashStyle``)."""
    d = max(width, 3)
    pattern = {"dot": (d, d), "dash": (3 * d, 3 * d), "longdash": (5 * d, 5 * d),
               "dashdot": (3 * d, d, d, d), "longdashdot": (5 * d, 2 * d, d, 2 * d)}.get(str(dash))
    return "" if pattern is None else f' stroke-dasharray="{",".join(f"{p:g}" for p in pattern)}"'


def _text(x: float, y: float, lines: list[str], *, anchor: str = "start", color: str = TEXT,
          size: float = FONT_SIZE, rotate: bool = False, extra: str = "") -> str:
    spans = "".join(f'<tspan x="{x:.1f}" dy="{0 if i == 0 else 1.3 * size:.1f}">{escape(line)}</tspan>'
                    for i, line in enumerate(lines))
    transform = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{escape(color)}" '
            f'font-size="{size:g}"{transform}{extra}>{spans}</text>')


def figure_svg(figure: dict[str, Any]) -> str | None:
    """``figure`` (``fig.to_dict()``) as an SVG document, or None when it draws something this
    renderer does not, or holds a value it cannot place (the caller then shows the Plotly chart,
    which draws the same figure)."""
    try:
        return _figure_svg(figure)
    except (ArithmeticError, ValueError, TypeError, KeyError):
        return None


def _figure_svg(figure: dict[str, Any]) -> str | None:
    layout = figure.get("layout", {})
    traces = figure.get("data", [])
    if set(layout) - _LAYOUT_KEYS or not traces:
        return None
    xspec, yspec = layout.get("xaxis", {}), layout.get("yaxis", {})
    if set(xspec) - _AXIS_KEYS or set(yspec) - _AXIS_KEYS:
        return None
    series = []
    for trace in traces:
        if (set(trace) - _TRACE_KEYS or trace.get("type", "scatter") != "scatter"
                or trace.get("mode") != "lines"):
            return None
        x, y = _values(trace.get("x")), _values(trace.get("y"))
        if x is None or y is None or len(x) != len(y):
            return None
        series.append((trace, x, y))
    title = _lines((layout.get("title") or {}).get("text"))
    xtitle = _lines((xspec.get("title") or {}).get("text"))
    ytitle = _lines((yspec.get("title") or {}).get("text"))
    notes = []
    for note in layout.get("annotations", []):
        lines = _lines(note.get("text"))
        if lines is None or note.get("showarrow", True) or set(note) - {
                "font", "showarrow", "text", "x", "xanchor", "xref", "y", "yanchor", "yref"}:
            return None
        notes.append((note, lines))
    shapes = layout.get("shapes", [])
    if any(s.get("type") != "line" or set(s) - {"line", "type", "x0", "x1", "xref", "y0", "y1", "yref"}
           for s in shapes):
        return None
    if title is None or xtitle is None or ytitle is None:
        return None

    height = float(layout.get("height", 450))
    margin = {"t": 100, "l": 80, "r": 80, "b": 80, **layout.get("margin", {})}
    shown = [t for t, _, _ in series if t.get("showlegend", True) and t.get("name")]
    legend_on = layout.get("showlegend", len(shown) > 1) and shown
    legend_w = (40 + max(_text_width(str(t["name"])) for t in shown) + 10) if legend_on else 0
    left = float(margin["l"])
    right = WIDTH - float(margin["r"]) - legend_w
    top, bottom = float(margin["t"]), height - float(margin["b"])
    if right - left < 100 or bottom - top < 60:
        return None
    xs = [x for _, x, _ in series] + [np.asarray([s[k]], float) for s in shapes if s.get("xref") != "paper"
                                      for k in ("x0", "x1") if isinstance(s.get(k), int | float)]
    ys = [y for _, _, y in series]
    xaxis = _Axis(xspec, xs, left, right, 0.0)
    yaxis = _Axis(yspec, ys, bottom, top, 0.05)

    def at(axis: _Axis, value: Any, ref: Any, paper_low: float, paper_high: float) -> float | None:
        """A shape's end in pixels; None off a log axis (≤ 0: plotly draws nothing there)."""
        if ref == "paper":
            return paper_low + float(value) * (paper_high - paper_low)
        if axis.log and float(value) <= 0:
            return None
        return axis.px(axis.coord(float(value)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:g}" '
           f'width="{WIDTH}" height="{height:g}" font-family="{escape(FONT)}">',
           f'<rect width="{WIDTH}" height="{height:g}" fill="white"/>',
           f'<defs><clipPath id="plot"><rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" '
           f'height="{bottom - top:.1f}"/></clipPath></defs>']
    for coord, label, major in xaxis.ticks():
        px = xaxis.px(coord)
        out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top:.1f}" y2="{bottom:.1f}" '
                   f'stroke="#EBF0F8"/>')
        out.append(_text(px, bottom + 17, [label], anchor="middle", size=FONT_SIZE if major else 8))
    label_w = 0.0
    for coord, label, major in yaxis.ticks():
        py = yaxis.px(coord)
        out.append(f'<line x1="{left:.1f}" x2="{right:.1f}" y1="{py:.1f}" y2="{py:.1f}" '
                   f'stroke="#EBF0F8"/>')
        size = FONT_SIZE if major else 8
        out.append(_text(left - 6, py + size / 3, [label], anchor="end", size=size))
        label_w = max(label_w, _text_width(label, size))
    for trace, x, y in series:
        keep = np.isfinite(x) & np.isfinite(y)
        if xaxis.log:
            keep &= x > 0
        if yaxis.log:
            keep &= y > 0
        if not keep.any():
            continue
        cx = np.log10(x[keep]) if xaxis.log else x[keep]
        cy = np.log10(y[keep]) if yaxis.log else y[keep]
        px = xaxis.low_px + (cx - xaxis.lo) / (xaxis.hi - xaxis.lo) * (xaxis.high_px - xaxis.low_px)
        py = yaxis.low_px + (cy - yaxis.lo) / (yaxis.hi - yaxis.lo) * (yaxis.high_px - yaxis.low_px)
        line = trace.get("line", {})
        width = float(line.get("width", 2))
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py, strict=True))
        color = escape(str(line.get("color", TEXT)))
        out.append(f'<polyline clip-path="url(#plot)" fill="none" stroke="{color}" '
                   f'stroke-width="{width:g}"{_dash(line.get("dash"), width)} points="{points}"/>')
    for shape in shapes:
        line = shape.get("line", {})
        width = float(line.get("width", 2))
        x0 = at(xaxis, shape["x0"], shape.get("xref"), left, right)
        x1 = at(xaxis, shape["x1"], shape.get("xref"), left, right)
        y0 = at(yaxis, shape["y0"], shape.get("yref"), bottom, top)
        y1 = at(yaxis, shape["y1"], shape.get("yref"), bottom, top)
        if x0 is None or x1 is None or y0 is None or y1 is None:
            continue
        out.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y0:.1f}" y2="{y1:.1f}" '
                   f'stroke="{escape(str(line.get("color", TEXT)))}" stroke-width="{width:g}"'
                   f'{_dash(line.get("dash"), width)}/>')
    for note, lines in notes:
        color = str((note.get("font") or {}).get("color", TEXT))
        # plotly: an annotation's x or y on a log axis is already its log10
        nx = left + float(note.get("x", 0.5)) * (right - left) if note.get("xref") == "paper" \
            else xaxis.px(float(note.get("x", 0)))
        ny = bottom + float(note.get("y", 0.5)) * (top - bottom) if note.get("yref") == "paper" \
            else yaxis.px(float(note.get("y", 0)))
        if not (math.isfinite(nx) and math.isfinite(ny)):
            continue
        anchor = {"left": "start", "right": "end"}.get(str(note.get("xanchor")), "middle")
        block = 1.3 * FONT_SIZE * len(lines)
        base = {"bottom": ny - block + FONT_SIZE, "top": ny + FONT_SIZE}.get(str(note.get("yanchor")),
                                                                            ny - block / 2 + FONT_SIZE)
        out.append(_text(nx + (3 if anchor == "start" else -3 if anchor == "end" else 0), base - 2,
                         lines, anchor=anchor, color=color))
    if xtitle:
        out.append(_text((left + right) / 2, bottom + 17 + 15 + 16, xtitle, anchor="middle", size=14))
    if ytitle:
        ty = (top + bottom) / 2
        out.append(_text(left - 6 - label_w - 15 - 6, ty, ytitle, anchor="middle", size=14, rotate=True))
    if title:
        out.append(_text(WIDTH * float((layout.get("title") or {}).get("x", 0.05)),
                         max(top / 2 - 1.3 * 17 * (len(title) - 1) / 2, 17) + 6, title, size=17))
    if legend_on:
        lx = right + 0.02 * (right - left) + 4
        ly = top + 12
        for i, trace in enumerate(shown):
            line = trace.get("line", {})
            width = min(float(line.get("width", 2)), 5)
            out.append(f'<line x1="{lx + 5:.1f}" x2="{lx + 35:.1f}" y1="{ly - 4:.1f}" y2="{ly - 4:.1f}" '
                       f'stroke="{escape(str(line.get("color", TEXT)))}" stroke-width="{width:g}"'
                       f'{_dash(line.get("dash"), width)}/>')
            out.append(_text(lx + 40, ly, [str(trace["name"])]))
            group = trace.get("legendgroup")  # plotly: tracegroupgap 10 px between groups
            last = i + 1 == len(shown)
            ly += 19 + (10 if group and not last and shown[i + 1].get("legendgroup") != group else 0)
    out.append("</svg>")
    return "".join(out)
