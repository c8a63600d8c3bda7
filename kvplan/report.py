"""Exports and reports for a scenario: CSV with units, scenario JSON, named scenarios, PNG report.

No Streamlit here: the CLI (``python -m kvplan report``) and the dashboard share these functions.

* ``to_csv(df, scenario, base)`` — the table with a unit in every numeric column header and the
  scenario's absolute link (``scenario_link``: the page's own address, else ``KVPLAN_BASE_URL``,
  else ``./dev app``'s address) in a last column named ``scenario_link`` (``pandas.read_csv`` and
  Excel read it without options: no comment lines).
* ``export_name(scenario, view)`` — download file names after the model, accelerator and view.
* ``scenario_to_json`` / ``scenario_from_json`` — the scenario file format of
  ``presets/scenarios/*.json``: ``{"id", "name", "description", "source", "query": {URL keys}}``.
* ``load_scenario(arg)`` — a scenario file path, a named scenario id, or a link / query string.
* ``scenario_tables`` / ``report_figure`` / ``write_report`` — the tables, the one-page figure and
  the files the CLI writes.
"""

from __future__ import annotations

import io
import json
import os
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvplan.colors import dtype_color
from kvplan.config_import import MAX_DEPTH, json_depth
from kvplan.errors import MESSAGES, KVPlanError, clip, csv_cell, plotly_text, short
from kvplan.files import output_dir, read_limited, write_file
from kvplan.png import TEMPLATE
from kvplan.scenario import Scenario, check_names, scenario_plan

GIB = 1 << 30
MAX_SCENARIO_BYTES = 1_000_000
REPORT_WIDTH, REPORT_HEIGHT = 1400, 1000

# ----------------------------------------------------------------------------------------- CSV

#: Units for bare column names; columns that already carry "(unit)" or "[unit]" are kept.
_UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_bytes", "B"), ("_gib", "GiB"), ("_gb", "GB"), ("_mib", "MiB"), ("_tokens", "tokens"),
    ("_tbps", "TB/s"), ("_tflops", "TFLOPS"), ("_pct", "%"), ("_requests", "requests"),
)
_UNIT_NAMES: dict[str, str] = {
    "tokens": "tokens", "users": "requests", "batch": "sequences", "max_requests": "requests",
    "max_concurrency": "requests", "layers": "layers", "tp": "GPUs", "pp": "GPUs",
    "num_gpus": "GPUs", "replicas": "replicas", "num_blocks": "blocks", "block_size": "tokens",
    "blocks_per_request": "blocks", "max_requests_all_replicas": "requests",
    "max_tokens_per_request": "tokens", "context_limit": "tokens", "kv_share": "fraction of budget",
    "fits": "true/false", "weights_fit": "true/false", "max_concurrency_x": "requests",
}
_STRIP = ("_gib", "_gb", "_mib", "_pct")


def unit_header(column: object) -> str:
    """``kv_bytes`` → ``kv_bytes [B]``; names that already show a unit are returned unchanged."""
    name = str(column)
    if "[" in name or "(" in name:
        return name
    low = name.lower()
    if low in _UNIT_NAMES:
        return f"{name} [{_UNIT_NAMES[low]}]"
    for suffix, unit in _UNIT_SUFFIXES:
        if low.endswith(suffix):
            return f"{name[: -len(suffix)] if suffix in _STRIP else name} [{unit}]"
    if "_bytes_per_" in low or low.startswith("bytes_per_"):  # kv_bytes_per_request: bytes
        return f"{name} [B]"
    return name


#: Where links point when neither the page's own address nor ``KVPLAN_BASE_URL`` says: the
#: address ``./dev app`` serves the dashboard at.
DEFAULT_BASE_URL = "http://localhost:8501/"
BASE_URL_ENV = "KVPLAN_BASE_URL"


def base_url(page: str | None = None) -> str:
    """The dashboard address links start with: ``page`` (the address the browser shows, query and
    fragment dropped) when it is an http(s) URL, else ``$KVPLAN_BASE_URL``, else
    ``DEFAULT_BASE_URL``; always ending in ``/`` before the query."""
    for candidate in (page, os.environ.get(BASE_URL_ENV)):
        if not candidate:
            continue
        parts = urlsplit(candidate.strip())
        if parts.scheme in {"http", "https"} and parts.netloc and len(candidate) <= 2048:
            path = parts.path if parts.path.endswith("/") else parts.path.rsplit("/", 1)[0] + "/"
            return f"{parts.scheme}://{parts.netloc}{path}"
    return DEFAULT_BASE_URL


def scenario_link(scenario: Scenario, base: str | None = None) -> str:
    """The scenario's absolute link (``base_url(base)?v=1&m=...``), the query the dashboard puts in
    its URL."""
    return base_url(base) + "?" + urlencode(scenario.to_query(), safe=",")


def absolute_link(query: str, base: str | None = None) -> str:
    """A relative ``?v=1&…`` link made absolute like ``scenario_link``."""
    return base_url(base) + query if query.startswith("?") else query


def _slug(text: str) -> str:
    """A file-name-safe part: letters, digits, ``.``, ``-`` (anything else a ``-``), ≤ 48 chars."""
    out = "".join(c if c.isascii() and (c.isalnum() or c in ".-") else "-" for c in text.strip())
    return out.strip(".-")[:48] or "x"


def export_name(scenario: Scenario, view: str) -> str:
    """``kvplan_<model>_<accelerator>_<view>`` (no extension): downloads of different scenarios
    and views do not overwrite each other. An uploaded config goes by its name."""
    model = scenario.model
    if model == "custom":
        name = (scenario.custom_config or {}).get("name")
        model = f"custom-{name}" if isinstance(name, str) and name else "custom"
    gpu = scenario.gpu
    if gpu == "custom":
        gpu = f"custom-{scenario.custom_gpu_gib:g}GiB"
    return f"kvplan_{_slug(model)}_{_slug(gpu)}_{_slug(view)}"


#: The last CSV column: the scenario's link query on every row (no comment line Excel would show).
LINK_COLUMN = "scenario_link"


def _csv_text(value: object) -> object:
    """``csv_cell``, then a bare CR (which the writer leaves unquoted, splitting the row in most
    readers) becomes a space."""
    value = csv_cell(value)
    return value.replace("\r", " ") if isinstance(value, str) else value


def to_csv(df: pd.DataFrame, scenario: Scenario, base: str | None = None) -> str:
    """CSV text: the table with units in the headers, the absolute link (``scenario_link``; ``base``
    the page's own address) in a last ``scenario_link`` column (on every row, so a filtered or
    sorted copy keeps it).

    Text cells that a spreadsheet would evaluate (``=HYPERLINK(…)``, ``+``, ``-``, ``@``, tab, CR)
    get a leading ``'`` (``kvplan.errors.csv_cell``); numbers stay numbers."""
    table = df.rename(columns={c: csv_cell(unit_header(c)) for c in df.columns})
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = table[column].map(_csv_text)
    table[LINK_COLUMN] = str(_csv_text(scenario_link(scenario, base)))
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


# ------------------------------------------------------------------------------ scenario files


class ScenarioFile(BaseModel):
    """A named scenario (``presets/scenarios/*.json``) and the scenario download/upload format."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default="custom", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    name: str = Field(default="Custom scenario", max_length=200)
    description: str = Field(default="", max_length=4000)
    source: str = Field(default="", max_length=2000)
    query: dict[str, str | int | float | bool | list[str]]


def _query_text(value: str | int | float | bool | list[str]) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def scenario_from_query(query: dict[str, Any], strict: bool = True) -> tuple[Scenario, list[str]]:
    """Decode a link query, then check the names; ``strict`` turns any warning into an error."""
    scenario, warnings = Scenario.from_query(query)
    scenario, more = check_names(scenario)
    warnings += more
    if strict and warnings:
        raise KVPlanError("scenario.invalid", detail="; ".join(warnings))
    return scenario, warnings


def parse_scenario_file(raw: str | bytes) -> ScenarioFile:
    """Validate the JSON text of a scenario file (size, JSON syntax, shape)."""
    if len(raw) > MAX_SCENARIO_BYTES:
        raise KVPlanError("scenario.invalid", detail=f"{len(raw):,} bytes; the limit is "
                                                     f"{MAX_SCENARIO_BYTES:,}")
    if json_depth(raw, MAX_DEPTH) > MAX_DEPTH:
        raise KVPlanError("scenario.invalid", detail=MESSAGES["link.too_deep"].format(limit=MAX_DEPTH))
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise KVPlanError("scenario.invalid", detail=f"not valid JSON ({short(str(exc), 80)})") from None
    if not isinstance(data, dict):
        raise KVPlanError("scenario.invalid", detail=f"expected a JSON object, got {type(data).__name__}")
    try:
        return ScenarioFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = clip(".".join(str(p) for p in first.get("loc", ())) or "file", 60)
        raise KVPlanError("scenario.invalid", detail=f"{where}: {clip(first.get('msg', 'invalid'), 120)}") \
            from None


def scenario_to_json(scenario: Scenario, name: str = "Custom scenario", description: str = "",
                     scenario_id: str = "custom", source: str = "") -> str:
    """The scenario as a scenario file (the link query under ``query``), pretty-printed JSON."""
    payload = ScenarioFile(id=scenario_id, name=name, description=description, source=source,
                           query=dict(scenario.to_query()))
    return json.dumps(payload.model_dump(), indent=2, ensure_ascii=False) + "\n"


def scenario_from_json(raw: str | bytes) -> Scenario:
    """Read an uploaded/downloaded scenario file; every problem is ``KVPlanError("scenario.invalid")``."""
    file = parse_scenario_file(raw)
    query = {k: _query_text(v) for k, v in file.query.items()}
    return scenario_from_query(query, strict=True)[0]


@cache
def named_scenarios() -> dict[str, ScenarioFile]:
    """The scenarios in ``presets/scenarios/``, by id, in file-name order (read once)."""
    from kvplan.presets import scenario_files

    files = [parse_scenario_file(path.read_bytes()) for path in scenario_files()]
    return {file.id: file for file in files}


def named_scenario(scenario_id: str) -> Scenario:
    file = named_scenarios().get(scenario_id)
    if file is None:
        raise KVPlanError("unknown.scenario", value=scenario_id)
    return scenario_from_query({k: _query_text(v) for k, v in file.query.items()})[0]


def parse_link(text: str) -> dict[str, str | list[str]]:
    """The query of a full URL, ``?m=..&t=..`` or ``m=..&t=..`` as a dict; a repeated key keeps
    every value (``Scenario.from_query`` refuses it by name)."""
    text = text.strip()
    query = urlsplit(text).query if "://" in text else text.split("?", 1)[-1]
    query = query.split("#", 1)[0]
    return {k: v[0] if len(v) == 1 else v for k, v in parse_qs(query, keep_blank_values=True).items()}


def _is_file(text: str) -> bool:
    """True for an existing file; a name the OS refuses (over 255 bytes, a NUL) is not one."""
    try:
        return len(text) < 4096 and os.path.isfile(text)
    except (OSError, ValueError):
        return False


def load_scenario(arg: str | Path) -> Scenario:
    """A scenario from a scenario file path, a named scenario id, or a link / query string."""
    text = str(arg).strip()
    if text.endswith(".json") or _is_file(text):
        return scenario_from_json(read_limited(text, MAX_SCENARIO_BYTES, "scenario.too_large"))
    if text in named_scenarios():
        return named_scenario(text)
    if text.startswith("?") or "://" in text or "=" in text:
        return scenario_from_query(parse_link(text))[0]
    raise KVPlanError("unknown.scenario", value=short(text, 60)[1:-1])


# ------------------------------------------------------------------------------------- tables


def fit_table(scenario: Scenario) -> pd.DataFrame:
    """One row per KV dtype: the memory split per GPU and how many requests fit."""
    from kvplan.capacity import fit

    plan = scenario_plan(scenario)
    gpu = plan.device
    rows: list[dict[str, Any]] = []
    for dtype in scenario.kv_dtypes:
        try:
            r = fit(plan.vary(kv_dtype=dtype))
        except KVPlanError as exc:
            rows.append({"kv_dtype": dtype, "note": str(exc)})
            continue
        rows.append({
            "kv_dtype": dtype, "gpu": gpu.id, "engine": r.engine,
            "gpu_memory_gib": r.gpu_capacity_bytes / GIB,
            "memory_target_gib": r.memory_target_bytes / GIB,
            "weights_per_gpu_gib": r.weights_bytes / GIB, "reserve_gib": r.reserve_bytes / GIB,
            "kv_budget_gib": r.kv_budget_bytes / GIB,
            "kv_per_request_gib": r.kv_bytes_per_request / GIB,
            "kv_in_use_gib": r.kv_bytes_per_request * scenario.users / GIB,
            "kv_pool_tokens": r.kv_pool_tokens, "max_requests": r.max_requests,
            "max_requests_all_replicas": r.max_requests_all_replicas,
            "max_tokens_per_request": r.max_tokens_per_request,
            "context_limit": r.context_limit, "fits": r.fits,
            "reason": "" if r.fits else f"{r.reason}; smallest change: {r.suggestion}", "note": "",
        })
    return pd.DataFrame(rows)


def kv_table(scenario: Scenario) -> pd.DataFrame:
    """KV cache of ``users`` requests over a token range, per KV dtype (GiB): what the engine's pool
    reserves (``<dtype>_reserved_gib``, ``sizing.pool_reserved``: the figure the budget is compared
    with) and what the requests hold (``<dtype>_held_gib``)."""
    from kvplan.sizing import pool_reserved, sweep, token_grid

    plan = scenario_plan(scenario)
    grid = token_grid(scenario.tokens, 16, max(scenario.tokens, 16), 48)
    frame = pd.DataFrame({"tokens": grid})
    for dtype in scenario.kv_dtypes:
        try:
            swept = sweep(plan, grid, [scenario.users], [dtype])
            reserved = pool_reserved(plan.vary(kv_dtype=dtype), grid, scenario.users)
        except KVPlanError:
            continue
        frame[f"{dtype}_reserved_gib"] = np.asarray(reserved, dtype=float) / GIB
        frame[f"{dtype}_held_gib"] = swept["kv_bytes"].to_numpy(dtype=float) / GIB
    return frame


def gpu_table(scenario: Scenario) -> pd.DataFrame:
    """Requests of ``tokens`` tokens that fit per replica on every accelerator, per KV dtype
    (one ``capacity_sweep``; empty where the engine refuses the dtype)."""
    from kvplan.capacity import capacity_sweep
    from kvplan.presets import gpus

    catalogue = list(gpus().values())
    swept = capacity_sweep(scenario_plan(scenario), catalogue, scenario.kv_dtypes,
                           [scenario.tokens], [scenario.users])
    frame = pd.DataFrame({"gpu": [g.id for g in catalogue], "gpu_name": [g.name for g in catalogue],
                          "gpu_memory_gib": [g.capacity_bytes / GIB for g in catalogue]})
    for dtype in scenario.kv_dtypes:
        counts = swept[swept["kv_dtype"] == dtype].set_index("gpu")["max_requests"]
        frame[f"{dtype}_max_requests"] = frame["gpu"].map(counts)
    return frame


def scenario_tables(scenario: Scenario) -> dict[str, pd.DataFrame]:
    """The main tables, by file stem."""
    return {"fit": fit_table(scenario), "kv_vs_tokens": kv_table(scenario),
            "requests_per_gpu": gpu_table(scenario)}


# -------------------------------------------------------------------------------------- figure


def scenario_title(scenario: Scenario) -> str:
    """The report's title line; user text (a config's ``name``) is escaped for plotly, which
    renders HTML such as ``<span style=…>`` in titles."""
    model = (clip(scenario.custom_config.get("name") or "custom config", 120)
             if scenario.custom_config is not None else scenario.model)
    return plotly_text(f"{model} · {scenario.engine} · {scenario.num_gpus}× {scenario.gpu} "
                       f"(tp {scenario.tp}, pp {scenario.pp}) · {scenario.tokens:,} tokens × "
                       f"{scenario.users:,} users")


def report_figure(scenario: Scenario, tables: dict[str, pd.DataFrame] | None = None,
                  link_base: str | None = None) -> Any:
    """A one-page plotly figure: summary table, KV vs tokens, memory split, requests per GPU."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tables = tables or scenario_tables(scenario)
    fit_df, kv_df, gpu_df = tables["fit"], tables["kv_vs_tokens"], tables["requests_per_gpu"]
    fig = make_subplots(
        rows=2, cols=2, vertical_spacing=0.14, horizontal_spacing=0.09,
        specs=[[{"type": "table"}, {"type": "xy"}], [{"type": "xy"}, {"type": "xy"}]],
        subplot_titles=("Per GPU, per KV dtype", f"KV cache of {scenario.users:,} request(s): reserved, held",
                        "Memory per GPU", f"Requests of {scenario.tokens:,} tokens per replica"))
    ok = fit_df[fit_df["note"].fillna("") == ""] if "note" in fit_df else fit_df
    labels = ["KV dtype", "weights GiB", "KV budget GiB", "KV per request GiB",
              f"KV in use GiB ({scenario.users:,} req.)", "max requests", "fits"]
    cells = [ok.get("kv_dtype", pd.Series(dtype=str)).tolist()]
    for col in ("weights_per_gpu_gib", "kv_budget_gib", "kv_per_request_gib", "kv_in_use_gib"):
        cells.append([f"{v:,.2f}" for v in ok.get(col, [])])
    cells.append([f"{int(v):,}" for v in ok.get("max_requests", [])])
    cells.append(["yes" if v else "no" for v in ok.get("fits", [])])
    fig.add_trace(go.Table(header={"values": labels, "fill_color": "#e8eef7"},
                           cells={"values": cells, "height": 26}), row=1, col=1)
    for col in kv_df.columns[1:]:  # reserved solid (the budget's comparison), held dotted
        dtype, _, kind = col.removesuffix("_gib").rpartition("_")
        solid = kind == "reserved"
        fig.add_trace(go.Scatter(x=kv_df["tokens"], y=kv_df[col], mode="lines",
                                 name=f"KV {dtype} {kind}", legendgroup="kv",
                                 line={"color": dtype_color(dtype), "width": 2.5 if solid else 1.5,
                                       "dash": "solid" if solid else "dot"}),
                      row=1, col=2)
    limit = _context_limit(fit_df)
    if limit is not None and len(kv_df):
        top = float(kv_df.iloc[:, 1:].max().max()) if kv_df.shape[1] > 1 else 1.0
        fig.add_trace(go.Scatter(x=[limit, limit], y=[0, top], mode="lines", legendgroup="kv",
                                 name=f"model limit {limit:,} tokens", line={"dash": "dot", "color": "#111"}),
                      row=1, col=2)
    fig.update_xaxes(type="log" if scenario.log_x else "linear", title_text="tokens per request",
                     row=1, col=2)
    fig.update_yaxes(title_text="GiB", row=1, col=2)
    memory = _memory_parts(ok)
    base = np.zeros(len(ok))
    for label, values, color in memory:  # stacked by hand: barmode stays "group" for the GPU chart
        fig.add_trace(go.Bar(x=ok["kv_dtype"], y=values, base=base.copy(), name=label,
                             marker_color=color, offsetgroup="mem", legendgroup="mem"), row=2, col=1)
        base = base + values
    if "memory_target_gib" in ok and len(ok):
        target = float(ok["memory_target_gib"].iloc[0])
        fig.add_trace(go.Scatter(x=ok["kv_dtype"], y=[target] * len(ok), mode="lines+markers",
                                 name="memory target", line={"dash": "dash", "color": "#d62728"},
                                 legendgroup="mem"), row=2, col=1)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="GiB", row=2, col=1)
    for col in gpu_df.columns[3:]:
        dtype = col.removesuffix("_max_requests")
        fig.add_trace(go.Bar(x=gpu_df["gpu"], y=gpu_df[col], name=f"fit {dtype}", legendgroup="gpu",
                             marker_color=dtype_color(dtype)), row=2, col=2)
    fig.update_xaxes(tickangle=-60, row=2, col=2)
    fig.update_yaxes(title_text="requests", row=2, col=2)
    warning = ""
    if limit is not None and scenario.tokens > limit:
        warning = (f"<br><span style='color:#d62728'>{scenario.tokens:,} tokens exceed the model's "
                   f"context limit ({limit:,}): does not fit</span>")
    fig.update_layout(template=TEMPLATE, width=REPORT_WIDTH, height=REPORT_HEIGHT,
                      title={"text": f"kvplan report — {scenario_title(scenario)}<br>"
                                     f"<sup>{plotly_text(scenario_link(scenario, link_base))}</sup>{warning}",
                             "x": 0.01},
                      margin={"t": 110, "l": 60, "r": 30, "b": 90}, legend={"orientation": "v"})
    return fig


def _context_limit(fit_df: pd.DataFrame) -> int | None:
    values = fit_df["context_limit"].dropna() if "context_limit" in fit_df else pd.Series(dtype=float)
    return int(values.iloc[0]) if len(values) else None


def _memory_parts(ok: pd.DataFrame) -> list[tuple[str, np.ndarray, str]]:
    """The memory-per-GPU bars of each KV dtype: weights, reserve, the KV the chosen requests use,
    then the rest of the KV budget (free) — or, past the budget, the KV over it in red."""
    if not len(ok):
        return []
    weights = ok["weights_per_gpu_gib"].to_numpy(dtype=float)
    reserve = ok["reserve_gib"].to_numpy(dtype=float)
    budget = ok["kv_budget_gib"].to_numpy(dtype=float).clip(min=0)
    used = ok["kv_in_use_gib"].to_numpy(dtype=float)
    return [("weights", weights, "#6b6b6b"), ("runtime reserve", reserve, "#f2b134"),
            ("KV in use", np.minimum(used, budget), "#1f77b4"),
            ("KV over the budget", np.maximum(used - budget, 0), "#d62728"),
            ("KV budget free", np.maximum(budget - used, 0), "#d9f0d3")]


# -------------------------------------------------------------------------------------- report


def write_report(scenario_arg: str, out: Path, png: bool = True, base: str | None = None) -> list[Path]:
    """Write the tables' CSVs, ``scenario.json`` and (when possible) ``report.png`` into ``out``;
    links start with ``base_url(base)``.

    Returns the written paths. Without chromium/kaleido the PNG is skipped and a line saying so
    (with the install command) is printed instead of failing.
    """
    scenario = load_scenario(scenario_arg)
    out = output_dir(out)
    tables = scenario_tables(scenario)
    written: list[Path] = []
    for stem, df in tables.items():
        written.append(write_file(out / f"{stem}.csv", to_csv(df, scenario, base)))
    named = next((f for f in named_scenarios().values() if f.id == str(scenario_arg).strip()), None)
    written.append(write_file(out / "scenario.json", scenario_to_json(scenario, **(
        {"name": named.name, "description": named.description, "scenario_id": named.id,
         "source": named.source} if named else {}))))
    if png:
        from kvplan.png import PNG_MISSING_HELP, chromium_available, fig_to_png

        if not chromium_available():
            print(f"PNG skipped: {PNG_MISSING_HELP}")
        else:
            png_bytes = fig_to_png(report_figure(scenario, tables, base), REPORT_WIDTH, REPORT_HEIGHT, 1.0)
            written.append(write_file(out / "report.png", png_bytes))
    return written
