"""The static SVG of a view's first chart (kvplan/ui/svg.py): exact positions, plotly's dashes
and ticks, escaping, and None for what it does not draw (the Plotly chart is shown instead)."""

from __future__ import annotations

import base64
import re

import numpy as np

from kvplan.ui.svg import WIDTH, figure_svg


def _figure(**layout: object) -> dict:
    return {"data": [{"type": "scatter", "mode": "lines", "name": "bf16", "x": [1, 10, 100],
                      "y": [1.0, 2.0, 3.0], "line": {"color": "#1f77b4", "width": 2.5, "dash": "dot"}}],
            "layout": {"height": 400, "margin": {"t": 80, "l": 70, "r": 20, "b": 60},
                       "xaxis": {"type": "log", "range": [0, 2]}, "yaxis": {"range": [0, 4]},
                       **layout}}


def test_points_land_where_plotly_puts_them() -> None:
    """Plot area: x 70 … 1000 − 20 − legend, y 80 … 340; log x [10^0, 10^2], linear y [0, 4]."""
    svg = figure_svg(_figure(showlegend=False))
    assert svg is not None
    assert svg.startswith(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} 400"')
    points = re.search(r'<polyline [^>]*points="([^"]+)"', svg)
    assert points is not None
    # x: 70 + (log10(x) − 0) / 2 × 910; y: 340 − y / 4 × 260
    assert points.group(1) == "70.0,275.0 525.0,210.0 980.0,145.0"
    assert 'stroke-dasharray="3,3"' in svg  # plotly dashStyle "dot": max(width, 3) on, off
    labels = re.findall(r'<tspan x="[^"]+" dy="0.0">([^<]+)</tspan>', svg)
    assert labels[:3] == ["1", "2", "5"] and "10" in labels and "100" in labels  # log: 1-2-5 per decade


def test_legend_and_text_are_escaped() -> None:
    figure = _figure(title={"text": 'a <b>x</b>'})
    assert figure_svg(figure) is None  # markup other than <br>: the Plotly chart draws it
    figure = _figure(title={"text": "model &quot;<br>line 2"})
    figure["data"][0]["name"] = 'x"><script>alert(1)</script>'
    figure["data"].append({**figure["data"][0], "name": "fp8 & more"})
    svg = figure_svg(figure)
    assert svg is not None and "<script" not in svg
    assert "x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in svg and "fp8 &amp; more" in svg
    assert ">model &amp;quot;</tspan>" in svg and ">line 2</tspan>" in svg


def test_what_it_does_not_draw_gives_none() -> None:
    for change in ({"type": "bar"}, {"mode": "markers"}, {"stackgroup": "one"}, {"fill": "tozeroy"}):
        figure = _figure()
        figure["data"][0].update(change)
        assert figure_svg(figure) is None, change
    assert figure_svg(_figure(barmode="stack")) is None
    assert figure_svg(_figure(annotations=[{"text": "a", "showarrow": True, "x": 1, "y": 1}])) is None
    assert figure_svg({"data": [], "layout": {}}) is None


def test_typed_arrays_and_log_values_off_the_axis() -> None:
    """plotly's ``{"dtype", "bdata"}`` arrays decode; a shape at y ≤ 0 on a log axis is not drawn
    (plotly cannot place it either)."""
    figure = _figure(showlegend=False, yaxis={"type": "log"},
                     shapes=[{"type": "line", "x0": 0, "x1": 1, "xref": "paper", "y0": 0, "y1": 0,
                              "yref": "y", "line": {"color": "#d62728", "dash": "dash"}}])
    packed = base64.b64encode(np.array([1, 10, 100], "<i4").tobytes()).decode()
    figure["data"][0]["x"] = {"dtype": "i4", "bdata": packed}
    svg = figure_svg(figure)
    assert svg is not None and svg.count("<polyline") == 1 and "#d62728" not in svg
    figure["data"][0]["y"] = np.array([1.0, 2.0, 3.0])  # to_dict() keeps some arrays as numpy
    assert figure_svg(figure) == svg
    figure["data"][0]["y"] = np.array([1.0, 2.0, 3.0], dtype=object)
    assert figure_svg(figure) == svg
    figure["data"][0]["y"] = np.array(["a", "b", "c"])
    assert figure_svg(figure) is None


def test_a_phone_gets_the_interactive_chart_by_default():
    """A phone's browser (``Mobi`` in its User-Agent) would show the static chart at a third of
    its size: the Plotly chart is its default (kvplan/ui/chart_slot.py ``is_phone``)."""
    from kvplan.ui.chart_slot import is_phone

    iphone = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
              "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1")
    android = ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
               "Chrome/126.0 Mobile Safari/537.36")
    desktop = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
               "HeadlessChrome/126.0 Safari/537.36")
    tablet = ("Mozilla/5.0 (Linux; Android 14; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/126.0 Safari/537.36")
    assert [is_phone(a) for a in (iphone, android, desktop, tablet, "")] == [True, True, False, False, False]
