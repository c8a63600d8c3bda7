"""Plotly figures built from the view DataFrames; explicit template, units and hover everywhere."""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvplan.arch import Kind
from kvplan.designs import DESIGNS
from kvplan.ui.theme import (
    BUDGET_COLOR,
    DESIGN_COLORS,
    GIB,
    KIND_COLORS,
    MEMORY_COLORS,
    SIDE_LEGEND,
    apply_template,
    dtype_color,
    exact_bytes,
)

_HEIGHT = 430


def wrap_title(title: str, width: int = 40) -> str:
    """``title`` in lines of at most ``width`` characters joined by ``<br>`` (plotly never wraps a
    title: on a 390 px phone a longer line is cut at the edge)."""
    lines: list[str] = []
    for word in title.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _layout(fig: go.Figure, title: str, **kwargs: Any) -> go.Figure:
    apply_template(fig)  # explicit plotly_white, validated once per process (not per figure)
    text = wrap_title(title)
    fig.update_layout(title=text, height=_HEIGHT, hovermode="closest", legend=SIDE_LEGEND,
                      margin={"t": 36 + 22 * text.count("<br>") + 22, "l": 70, "r": 20, "b": 60},
                      **kwargs)
    return fig


def marker_line(fig: go.Figure, axis: str, value: float, color: str, dash: str, text: str,
          log: bool = False) -> None:
    """A labelled horizontal (``axis="y"``) or vertical (``"x"``) line across the plot.

    Plain shape + annotation: ``add_hline``/``add_vline`` cost ≈ 15 ms each (they re-walk every
    axis). On a log axis an annotation is placed at log10 of the value, a shape at the value.
    """
    where = math.log10(value) if log and value > 0 else value
    if axis == "y":
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, yref="y", y0=value, y1=value,
                      line={"color": color, "dash": dash})
        fig.add_annotation(xref="paper", x=0, yref="y", y=where, text=text, showarrow=False,
                           xanchor="left", yanchor="bottom", font={"color": color})
    else:
        fig.add_shape(type="line", yref="paper", y0=0, y1=1, xref="x", x0=value, x1=value,
                      line={"color": color, "dash": dash})
        fig.add_annotation(yref="paper", y=0, xref="x", x=where, text=text, showarrow=False,
                           xanchor="left", yanchor="bottom", font={"color": color})


def _budget_line(fig: go.Figure, budget: int | None, label: str = "KV budget",
                 log: bool = False) -> None:
    if budget is None:
        return
    marker_line(fig, "y", budget / GIB, BUDGET_COLOR, "dash",
          f"{label}: {budget / GIB:,.2f} GiB ({budget:,} B)", log)


def _bytes_hover(frame: pd.DataFrame, column: str = "kv_bytes") -> list[str]:
    return [exact_bytes(int(v)) for v in frame[column]]


LIMIT_COLOR = "#111111"


def limit_line(fig: go.Figure, limit: int | None, log: bool = False, longest: int | None = None) -> None:
    """The model's context limit on the engine (``Engine.context_limit``) on a length axis (only when the axis
    reaches it, if ``longest`` — the axis' largest length — is given)."""
    if limit is not None and (longest is None or longest >= limit):
        marker_line(fig, "x", limit, LIMIT_COLOR, "dashdot", f"model limit {limit:,}", log)


def kv_context_figure(df: pd.DataFrame, by_kind: pd.DataFrame | None, budget: int | None,
                      tokens: int, users: int, log_axes: bool, title_suffix: str = "",
                      limit: int | None = None) -> go.Figure:
    fig = go.Figure()
    if by_kind is not None and not by_kind.empty:
        for kind, part in by_kind.groupby("kind", sort=False):
            fig.add_trace(go.Scatter(
                x=part["tokens"], y=part["kv_bytes"] / GIB,
                name=f"{kind} layers ({part['kv_dtype'].iloc[0]})",
                stackgroup="kinds", mode="lines", line={"color": KIND_COLORS.get(Kind(str(kind)), "#999")},
                hovertemplate="%{x:,} tokens<br>%{y:,.3f} GiB<extra>" + str(kind) + " layers</extra>"))
    stacked = by_kind is not None and not by_kind.empty
    for dtype, part in df.groupby("kv_dtype", sort=False):
        # GiB on hover, no per-point exact-bytes strings: they were 60 % of the figure's JSON
        # (the CSV and the key numbers carry the exact bytes). The solid line is what the engine's
        # pool reserves — the figure the budget line is compared with; held bytes, when they
        # differ (blocks, windows, padding), a thinner dotted line of the same colour.
        color = dtype_color(str(dtype))
        reserved = part["reserved_bytes"] if "reserved_bytes" in part else part["kv_bytes"]
        fig.add_trace(go.Scatter(
            x=part["tokens"], y=reserved / GIB, name=f"{dtype} reserved", mode="lines",
            legendgroup=str(dtype),
            line={"color": color, "width": 2.5, "dash": "dash" if stacked else "solid"},
            hovertemplate="%{x:,} tokens<br>%{y:,.3f} GiB reserved<extra>" + str(dtype) + "</extra>"))
        if not reserved.equals(part["kv_bytes"]):
            fig.add_trace(go.Scatter(
                x=part["tokens"], y=part["kv_bytes"] / GIB, name=f"{dtype} held", mode="lines",
                legendgroup=str(dtype), line={"color": color, "width": 1.5, "dash": "dot"},
                hovertemplate="%{x:,} tokens<br>%{y:,.3f} GiB held<extra>" + str(dtype) + "</extra>"))
    _budget_line(fig, budget, log=log_axes)
    if not log_axes:  # the linear grid follows the chosen length anyway; the log chart does not
        marker_line(fig, "x", tokens, "#555", "dot", f"{tokens:,} tokens", log_axes)
    limit_line(fig, limit, log_axes)
    axis = "log" if log_axes else "linear"
    _layout(fig, f"KV cache of {users:,} request(s) vs context length{title_suffix}")
    fig.update_xaxes(title="context length (tokens)", type=axis)
    fig.update_yaxes(title="KV cache per GPU (GiB, 1 GiB = 2^30 B)", type=axis)
    if log_axes:  # stacked areas fill down to 0, which would stretch a log axis to 1e-300
        values = [v for frame, column in ((df, "kv_bytes"), (df, "reserved_bytes"), (by_kind, "kv_bytes"))
                  if frame is not None and not frame.empty and column in frame
                  for v in (frame[column] / GIB).tolist() if v > 0]
        if budget:
            values.append(budget / GIB)
        if values:
            low, high = min(values), max(values)
            fig.update_yaxes(range=[math.log10(low) - 0.3, math.log10(high) + 0.3])
    return fig


def kv_users_figure(df: pd.DataFrame, budget: int | None, tokens: int, users: int) -> go.Figure:
    fig = go.Figure()
    for dtype, part in df.groupby("kv_dtype", sort=False):
        fig.add_trace(go.Scatter(
            x=part["users"], y=part["kv_bytes"] / GIB, name=str(dtype), mode="lines",
            line={"color": dtype_color(str(dtype)), "width": 2.5}, customdata=_bytes_hover(part),
            hovertemplate="%{x:,} requests<br>%{customdata}<extra>" + str(dtype) + "</extra>"))
    _budget_line(fig, budget)
    marker_line(fig, "x", users, "#555", "dot", f"{users:,} users")
    _layout(fig, f"KV cache vs concurrent requests at {tokens:,} tokens each")
    fig.update_xaxes(title="concurrent requests")
    fig.update_yaxes(title="KV cache per GPU (GiB, 1 GiB = 2^30 B)")
    return fig


def memory_figure(df: pd.DataFrame, chosen_gpu: str) -> go.Figure:
    ok = df[df["error"] == ""] if "error" in df else df
    names = [f"<b>{n}</b>" if g == chosen_gpu else n for g, n in zip(ok["gpu"], ok["gpu_name"], strict=True)]
    weight_columns = [c for c in ok.columns if c.startswith("weights_") and c != "weights_bytes"]
    greys = ["#4d4d4d", "#6b6b6b", "#858585", "#9e9e9e", "#b3b3b3", "#5c5c5c", "#7a7a7a", "#949494",
             "#a8a8a8", "#bdbdbd", "#454545", "#666666"]
    parts: list[tuple[str, str, str | None]] = [
        (c, "weights: " + c[len("weights_"):-len("_bytes")].replace("_", " "), greys[i % len(greys)])
        for i, c in enumerate(weight_columns)] or [("weights_bytes", "weights", MEMORY_COLORS["weights"])]
    parts += [("reserve_bytes", "runtime reserve", MEMORY_COLORS["reserve"]),
             ("kv_at_load_bytes", "KV at the chosen load", None),
             ("held_back_bytes", "held back by the engine (1 − utilization)", MEMORY_COLORS["held_back"]),
             ("free_bytes", "free", MEMORY_COLORS["free"])]
    fig = go.Figure()
    for column, label, color in parts:
        values = ok[column].clip(lower=0) if column == "free_bytes" else ok[column]
        values = values.fillna(0)
        colors = color or [MEMORY_COLORS["kv"] if f else MEMORY_COLORS["kv_over"] for f in ok["fits"]]
        fig.add_trace(go.Bar(
            x=names, y=values / GIB, name=label, marker_color=colors,
            customdata=[exact_bytes(int(v)) for v in values],
            hovertemplate="%{x}<br>" + label + ": %{customdata}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=names, y=ok["capacity_bytes"] / GIB, mode="markers", name="device capacity",
        marker={"symbol": "line-ew-open", "size": 18, "color": "#000"},
        customdata=[exact_bytes(int(v)) for v in ok["capacity_bytes"]],
        hovertemplate="%{x}<br>capacity: %{customdata}<extra></extra>"))
    for name, fits in zip(names, ok["fits"], strict=True):
        if not fits:
            fig.add_annotation(x=name, y=0, text="✗", showarrow=False, yshift=-8,
                               font={"color": MEMORY_COLORS["kv_over"], "size": 14})
    _layout(fig, "Memory per accelerator (per GPU) — red KV = does not fit", barmode="stack")
    # 600 px: the rotated names of 32 accelerators widen the bottom margin, and the y title (247 px
    # at 1440 wide) is centred on the plot that is left — at 520 it reached into the chart's title
    fig.update_layout(height=600)
    fig.update_xaxes(title="accelerator (sorted by memory)", tickangle=-40)
    fig.update_yaxes(title="memory per GPU (GiB, 1 GiB = 2^30 B)")
    return fig


def requests_heatmap(df: pd.DataFrame) -> go.Figure:
    table = df.pivot_table(index="gpu_name", columns="kv_dtype", values="max_requests",
                           aggfunc="first", sort=False)
    order = list(dict.fromkeys(df["gpu_name"]))
    table = table.reindex(order)
    fig = go.Figure(go.Heatmap(
        z=table.values, x=list(table.columns), y=list(table.index), colorscale="Blues",
        text=table.values, texttemplate="%{text:,}",
        hovertemplate="%{y}<br>%{x}: %{z:,} requests<extra></extra>",
        colorbar={"title": "requests"}))
    _layout(fig, "Requests that fit per replica (accelerator × KV dtype)")
    fig.update_layout(height=max(_HEIGHT, 24 * len(order) + 140))
    fig.update_xaxes(title="KV dtype")
    fig.update_yaxes(title="accelerator")
    return fig


def context_users_heatmap(df: pd.DataFrame, gpu_name: str, dtype: str,
                          limit: int | None = None) -> go.Figure:
    share = df.pivot_table(index="users", columns="tokens", values="kv_share", aggfunc="first")
    fits = df.pivot_table(index="users", columns="tokens", values="fits", aggfunc="first")
    beyond = [limit is not None and int(t) > limit for t in share.columns]
    text = [["⛔" if over else ("✓" if f else "✗") for f, over in zip(row, beyond, strict=True)]
            for row in fits.values]
    fig = go.Figure(go.Heatmap(
        z=share.values.clip(max=2.0) * 100, x=[f"{t:,}" for t in share.columns],
        y=[f"{u:,}" for u in share.index], text=text, texttemplate="%{text}",
        colorscale=[[0, "#e5f5e0"], [0.499, "#74c476"], [0.5, "#fcbba1"], [1, "#a50f15"]],
        zmin=0, zmax=200, colorbar={"title": "% of KV budget"},
        hovertemplate="%{y} users × %{x} tokens<br>%{z:.1f}% of the KV budget<extra></extra>"))
    _layout(fig, f"Does it fit? {gpu_name}, {dtype} (✓ fits, ✗ does not"
                 + (", ⛔ beyond the model's limit)" if any(beyond) else ")"))
    if any(beyond):  # category axis: the line sits between the last allowed and the first beyond
        first = beyond.index(True) - 0.5
        fig.add_shape(type="line", yref="paper", y0=0, y1=1, xref="x", x0=first, x1=first,
                      line={"color": LIMIT_COLOR, "dash": "dashdot", "width": 2})
        fig.add_annotation(yref="paper", y=1, xref="x", x=first, text=f"model limit {limit:,}",
                           showarrow=False, xanchor="left", yanchor="bottom")
    fig.update_xaxes(title="context length (tokens)", type="category")
    fig.update_yaxes(title="concurrent users", type="category")
    return fig


def designs_figure(df: pd.DataFrame) -> go.Figure:
    ok = df[df["error"] == ""] if "error" in df else df
    labels = [DESIGNS.get(d, d) for d in ok["design"]]
    colors = [DESIGN_COLORS.get(d, "#999") for d in ok["design"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "KV bytes per token (full length, whole model)", "Requests that fit per replica"))
    fig.add_trace(go.Bar(x=labels, y=ok["kv_bytes_per_token"] / 1024, marker_color=colors,
                         customdata=[f"{int(v):,} B" for v in ok["kv_bytes_per_token"]],
                         hovertemplate="%{x}: %{customdata} per token<extra></extra>",
                         showlegend=False), row=1, col=1)
    fig.add_trace(go.Bar(x=labels, y=ok["max_requests"], marker_color=colors,
                         text=[f"{int(v):,}" for v in ok["max_requests"]], textposition="outside",
                         hovertemplate="%{x}: %{y:,} requests<extra></extra>", showlegend=False),
                  row=1, col=2)
    _layout(fig, "Attention designs compared (same layers and weights)")
    fig.update_yaxes(title_text="KiB per token (1 KiB = 1,024 B)", row=1, col=1)
    fig.update_yaxes(title_text="concurrent requests", row=1, col=2)
    return fig


def instances_figure(df: pd.DataFrame, capacity: int) -> go.Figure:
    """Several engines on one GPU (``kvplan.instances``): one stacked bar per instance in start order —
    what the instances before it held when it started (light), then its weights, runtime reserve and
    KV pool — climbing to the device capacity (black line). Names are escaped (Plotly renders HTML)."""
    names = [f"{i}. {html.escape(str(n))}" for i, n in enumerate(df["instance"], 1)]
    parts = [("held_by_others_bytes", "held by the instances before it", MEMORY_COLORS["held_back"]),
             ("weights_bytes", "weights", MEMORY_COLORS["weights"]),
             ("reserve_bytes", "runtime reserve", MEMORY_COLORS["reserve"]),
             ("kv_pool_bytes", "KV cache pool", MEMORY_COLORS["kv"])]
    fig = go.Figure()
    for column, label, color in parts:
        values = df[column].fillna(0)
        fig.add_trace(go.Bar(
            x=names, y=values / GIB, name=label, marker_color=color,
            customdata=[exact_bytes(int(v)) for v in values],
            hovertemplate="%{x}<br>" + label + ": %{customdata}<extra></extra>"))
    marker_line(fig, "y", capacity / GIB, "#000", "solid", f"device capacity {capacity / GIB:,.2f} GiB")
    for name, starts in zip(names, df["starts"], strict=True):
        if not starts:
            fig.add_annotation(x=name, y=0, text="does not start", showarrow=False, yshift=10,
                               font={"color": MEMORY_COLORS["kv_over"], "size": 12})
    _layout(fig, "Several engines on one GPU, in start order (per GPU)", barmode="stack")
    fig.update_xaxes(title="instance (start order)")
    fig.update_yaxes(title="memory per GPU (GiB, 1 GiB = 2^30 B)")
    return fig
