"""Exports: CSV with units and the link, scenario JSON, named scenarios, the report files, PNG."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from urllib.parse import parse_qs

import pandas as pd
import pytest

from kvplan.errors import KVPlanError
from kvplan.presets import model_presets, scenario_files
from kvplan.report import (
    kv_table,
    load_scenario,
    named_scenario,
    named_scenarios,
    report_figure,
    scenario_from_json,
    scenario_tables,
    scenario_to_json,
    to_csv,
    unit_header,
    write_report,
)
from kvplan.scenario import Scenario

SCENARIO = Scenario(model="llama-3.1-70b", gpu="h100-sxm", num_gpus=8, tp=8, tokens=32768, users=16,
                    kv_dtypes=["bf16", "fp8_e4m3"])


def _read(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text))


def test_csv_has_units_and_the_link_in_a_last_column() -> None:
    """No comment line (Excel would show it as a data row): the header is the first line, and the
    scenario's link is the last column, on every row; ``pandas.read_csv`` needs no options."""
    df = pd.DataFrame({"tokens": [1, 2], "kv_bytes": [10, 20], "kv_gib": [0.5, 1.0],
                       "Weights (GiB)": [3.0, 3.0], "kv_dtype": ["bf16", "fp8_e4m3"]})
    text = to_csv(df, SCENARIO)
    assert text.splitlines()[0] == ("tokens [tokens],kv_bytes [B],kv [GiB],Weights (GiB),kv_dtype,"
                                    "scenario_link")
    assert not any(line.startswith("#") for line in text.splitlines())
    back = _read(text)
    assert list(back.columns) == ["tokens [tokens]", "kv_bytes [B]", "kv [GiB]", "Weights (GiB)",
                                  "kv_dtype", "scenario_link"]
    assert back["kv_bytes [B]"].tolist() == [10, 20]
    assert back["kv_dtype"].tolist() == ["bf16", "fp8_e4m3"]
    links = back["scenario_link"].tolist()
    assert links[0] == links[1] and links[0].startswith("http://localhost:8501/?v=1&")
    link = parse_qs(links[0].split("?", 1)[1])
    assert link["m"] == ["llama-3.1-70b"] and link["tp"] == ["8"]
    assert Scenario.from_query({k: v[-1] for k, v in link.items()}) == (SCENARIO, [])


def test_unit_header_rules() -> None:
    assert unit_header("kv_bytes_per_request") == "kv_bytes_per_request [B]"
    assert unit_header("kv_bytes_per_token") == "kv_bytes_per_token [B]"
    assert unit_header("max_requests") == "max_requests [requests]"
    assert unit_header("bf16_max_requests") == "bf16_max_requests [requests]"
    assert unit_header("gpu_memory_gib") == "gpu_memory [GiB]"
    assert unit_header("already [x]") == "already [x]"
    assert unit_header("gpu") == "gpu"


def test_scenario_tables_have_units_on_every_numeric_column() -> None:
    for name, df in scenario_tables(SCENARIO).items():
        back = _read(to_csv(df, SCENARIO))
        assert len(back) == len(df), name
        for column in back.columns:
            values = back[column].dropna()
            if len(values) and pd.api.types.is_numeric_dtype(values) and values.dtype != bool:
                assert "[" in column, (name, column)


def test_fit_table_numbers() -> None:
    fit = scenario_tables(SCENARIO)["fit"]
    assert fit["kv_dtype"].tolist() == ["bf16", "fp8_e4m3"]
    # fp8 halves the per-request KV and (about) doubles the requests that fit.
    bf16, fp8 = fit.iloc[0], fit.iloc[1]
    assert fp8["kv_per_request_gib"] == pytest.approx(bf16["kv_per_request_gib"] / 2)
    assert fp8["max_requests"] >= 2 * bf16["max_requests"]


def test_report_memory_panel_shows_the_kv_in_use_per_dtype() -> None:
    """Llama-3.1-70B, TP 8, 16 requests of 32,768 tokens: one of the 8 KV heads per rank, so bf16 KV
    per request per GPU is 80 layers × 1 × 128 × 2 (K, V) × 2 B × 32,768 = 1,342,177,280 B
    (1.25 GiB) and 16 use 20 GiB; fp8 halves it to 10 GiB. The bars show that, not the budget."""
    tables = scenario_tables(SCENARIO)
    fit = tables["fit"]
    assert fit["kv_in_use_gib"].tolist() == [20.0, 10.0]
    figure = report_figure(SCENARIO, tables)
    in_use = next(t for t in figure.data if t.name == "KV in use")
    assert list(in_use.y) == [20.0, 10.0]
    free = next(t for t in figure.data if t.name == "KV budget free")
    budget = fit["kv_budget_gib"].tolist()
    assert list(free.y) == pytest.approx([budget[0] - 20.0, budget[1] - 10.0])
    assert fit["context_limit"].tolist() == [131072, 131072]
    assert fit["reason"].tolist() == ["", ""]


def test_scenario_json_round_trip() -> None:
    text = scenario_to_json(SCENARIO, name="70B", description="d")
    data = json.loads(text)
    assert set(data) == {"id", "name", "description", "source", "query"}
    assert data["query"] == SCENARIO.to_query()
    assert scenario_from_json(text) == SCENARIO
    assert scenario_from_json(text.encode()) == SCENARIO


def test_scenario_json_with_custom_config_round_trips() -> None:
    full = Scenario(model="custom", custom_config=dict(model_presets()["qwen3-8b"].config))
    scenario = Scenario.from_query(full.to_query())[0]  # links keep only the architecture keys
    assert scenario.custom_config["num_hidden_layers"] == 36
    assert scenario_from_json(scenario_to_json(scenario)) == scenario


@pytest.mark.parametrize("raw", [
    "not json", "[1, 2]", '{"query": {"m": "x"}, "extra": 1}', '{"name": "no query"}',
    '{"query": {"m": "no-such-model"}}', '{"query": {"t": "-1"}}', '{"query": {"zz": "1"}}',
    '{"id": "bad id!", "query": {}}', "x" * 1_000_001,
])
def test_invalid_scenario_json_raises_scenario_invalid(raw: str) -> None:
    with pytest.raises(KVPlanError) as err:
        scenario_from_json(raw)
    assert err.value.code == "scenario.invalid"


def test_json_accepts_numbers_and_bools_in_query() -> None:
    scenario = scenario_from_json('{"query": {"t": 2048, "lx": false, "gu": 0.9}}')
    assert (scenario.tokens, scenario.log_x, scenario.engine_settings.gpu_util) == (2048, False, 0.9)


def test_named_scenarios_load_and_compute() -> None:
    ids = {path.stem for path in scenario_files()}
    assert ids == set(named_scenarios())
    for needed in ("llama-2-7b-fp16", "opt-13b-vllm-paper", "deepseek-v2-mla-vs-67b",
                   "llama-3.1-70b-8xh100", "deepseek-v3-8xh200", "gemma-3-27b-long-context"):
        assert needed in ids
    for scenario_id in ids:
        scenario = named_scenario(scenario_id)
        fit = scenario_tables(scenario)["fit"]
        assert (fit["note"] == "").all(), (scenario_id, fit["note"].tolist())


def test_seed_numbers() -> None:
    fit = scenario_tables(named_scenario("llama-2-7b-fp16"))["fit"]
    assert fit["kv_per_request_gib"].tolist() == [2.0]  # 0.5 MiB/token × 4096 tokens
    v2 = scenario_tables(named_scenario("deepseek-v2-mla-vs-67b"))["fit"]
    base = scenario_tables(named_scenario("deepseek-llm-67b-baseline"))["fit"]
    reduction = 1 - v2["kv_per_request_gib"].iloc[0] / base["kv_per_request_gib"].iloc[0]
    assert reduction > 0.8


def test_load_scenario_accepts_file_id_and_links(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(scenario_to_json(SCENARIO))
    assert load_scenario(str(path)) == SCENARIO
    assert load_scenario(path) == SCENARIO
    query = "&".join(f"{k}={v}" for k, v in SCENARIO.to_query().items())
    assert load_scenario("?" + query) == SCENARIO
    assert load_scenario("http://127.0.0.1:8501/?" + query + "#frag") == SCENARIO
    assert load_scenario(query) == SCENARIO
    assert load_scenario("opt-13b-vllm-paper").gpu == "a100-40gb-sxm"
    with pytest.raises(KVPlanError) as err:
        load_scenario("no-such-scenario")
    assert err.value.code == "unknown.scenario"
    with pytest.raises(KVPlanError) as err:
        load_scenario(str(tmp_path / "missing.json"))
    assert err.value.code == "file.missing"
    with pytest.raises(KVPlanError) as err:
        load_scenario("?m=nope&t=5")
    assert err.value.code == "scenario.invalid" and "'m'" in str(err.value)


def test_write_report_without_png(tmp_path: Path, capsys) -> None:
    paths = write_report("llama-3.1-70b-8xh100", tmp_path / "out", png=False)
    names = sorted(p.name for p in paths)
    assert names == ["fit.csv", "kv_vs_tokens.csv", "requests_per_gpu.csv", "scenario.json"]
    for path in paths:
        assert path.exists() and path.stat().st_size > 0
    fit = pd.read_csv(tmp_path / "out" / "fit.csv")
    assert "max_requests [requests]" in fit.columns
    assert json.loads((tmp_path / "out" / "scenario.json").read_text())["id"] == "llama-3.1-70b-8xh100"
    assert load_scenario(str(tmp_path / "out" / "scenario.json")) == named_scenario("llama-3.1-70b-8xh100")


def test_cli_report(tmp_path: Path, capsys) -> None:
    from kvplan.cli import main

    assert main(["report", "--scenario", "llama-2-7b-fp16", "--out", str(tmp_path), "--no-png"]) == 0
    assert "fit.csv" in capsys.readouterr().out
    assert main(["report", "--scenario", "?m=nope", "--out", str(tmp_path), "--no-png"]) == 2
    assert "'m'" in capsys.readouterr().err


def test_report_figure_has_explicit_template_and_size() -> None:
    fig = report_figure(SCENARIO)
    assert fig.layout.template.layout.plot_bgcolor == "white"  # plotly_white (plotly: #E5ECF6)
    assert (fig.layout.width, fig.layout.height) == (1400, 1000)
    assert len(fig.data) >= 6


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.mark.png
def test_png_export(tmp_path: Path) -> None:
    from kvplan.png import chromium_available, fig_to_png

    if not chromium_available():
        pytest.skip("chromium/kaleido missing: apt-get install -y chromium fonts-liberation")
    fig = report_figure(SCENARIO)
    assert _png_size(fig_to_png(fig, 700, 400, 2.0)) == (1400, 800)
    paths = write_report("deepseek-v3-8xh200", tmp_path, png=True)
    png = [p for p in paths if p.suffix == ".png"]
    assert len(png) == 1 and _png_size(png[0].read_bytes()) == (1400, 1000)


def test_every_dashboard_table_has_a_unit_in_each_numeric_header() -> None:
    """The CSV of every view (issue #16 item 8: kv_bytes_per_request had none)."""
    from kvplan import designs
    from kvplan.scenario import scenario_plan
    from kvplan.ui import data

    scenario = Scenario(kv_dtypes=["bf16", "fp8_e4m3"])
    plan = scenario_plan(scenario)
    frames = {
        "requests_fit": data.requests_grid(plan, scenario.kv_dtypes),
        "context_users": data.context_users_grid(plan),
        "memory_per_gpu": data.memory_per_gpu(plan),
        "kv_vs_context": data.kv_vs_context(plan, scenario.kv_dtypes, True)[0],
        "designs": designs.design_table(plan),
    }
    for name, df in frames.items():
        back = _read(to_csv(df, scenario))
        for column in back.columns:
            values = back[column].dropna()
            if len(values) and pd.api.types.is_numeric_dtype(values) and values.dtype != bool:
                assert "[" in column, (name, column)


# ------------------------------------------------------------------ issue #33 item 7: exports


def test_links_are_absolute_from_the_page_or_the_configured_base(monkeypatch) -> None:
    from kvplan.report import absolute_link, base_url, scenario_link

    monkeypatch.delenv("KVPLAN_BASE_URL", raising=False)
    query = "?v=1&m=llama-3.1-70b&n=8&tp=8&u=16"
    assert scenario_link(SCENARIO) == "http://localhost:8501/" + query
    page = "https://plan.example.org/kvplan/?v=1&m=other#x"
    assert scenario_link(SCENARIO, page) == "https://plan.example.org/kvplan/" + query
    assert base_url("https://plan.example.org/kvplan/app") == "https://plan.example.org/kvplan/"
    monkeypatch.setenv("KVPLAN_BASE_URL", "https://kv.example.com")
    assert scenario_link(SCENARIO) == "https://kv.example.com/" + query
    for bad in ("javascript:alert(1)", "ftp://x/", "/relative", ""):
        assert base_url(bad) == "https://kv.example.com/", bad
    assert absolute_link("?v=1&m=x", page) == "https://plan.example.org/kvplan/?v=1&m=x"
    text = to_csv(pd.DataFrame({"tokens": [1]}), SCENARIO, page)
    assert text.splitlines()[1] == f"1,https://plan.example.org/kvplan/{query}"


def test_export_names_follow_model_gpu_and_view() -> None:
    from kvplan.report import export_name

    assert export_name(SCENARIO, "context") == "kvplan_llama-3.1-70b_h100-sxm_context"
    assert export_name(Scenario(), "memory") == "kvplan_llama-3.1-8b_h100-sxm_memory"
    custom = Scenario(model="custom", custom_config={"name": "../My Model <x>", "num_hidden_layers": 2},
                      gpu="custom", custom_gpu_gib=96.0)
    assert export_name(custom, "recommend") == "kvplan_custom-..-My-Model--x_custom-96GiB_recommend"


def test_cli_report_base_url(tmp_path: Path, capsys, monkeypatch) -> None:
    from cli_helpers import run_cli

    monkeypatch.delenv("KVPLAN_BASE_URL", raising=False)
    code, _, _ = run_cli(["report", "--scenario", "?v=1&m=llama-3.1-8b&t=4096", "--out", str(tmp_path),
                          "--no-png", "--base-url", "https://kv.example.com/app/"])
    assert code == 0
    back = pd.read_csv(tmp_path / "fit.csv")
    assert back["scenario_link"].iloc[0] == "https://kv.example.com/app/?v=1&t=4096"
    code, _, err = run_cli(["report", "--scenario", "x", "--out", str(tmp_path), "--base-url", "file:///etc"])
    assert code == 2 and err == ("kvplan: error: argument --base-url: --base-url must be an http(s) "
                                 "address with a host, got 'file:///etc'\n")


def test_recommend_export_headers_name_the_cost_unit() -> None:
    from kvplan.recommend import unit_headers

    unpriced = unit_headers("GPU-hours")
    assert unpriced["cost_per_hour"] == "cost_per_hour [GPU-hours per hour = GPUs]"
    assert unpriced["cost_per_m_tokens"] == "cost_per_m_output_tokens [GPU-hours per 10^6 output tokens]"
    assert unit_headers("$")["cost_per_hour"] == "cost_per_hour [$ per hour]"
    df = pd.DataFrame({"cost_per_m_tokens": [1.5], "cost_per_hour": [8.0], "tpot_ms": [20.0]})
    header = to_csv(df.rename(columns=unpriced), SCENARIO).splitlines()[0]
    assert header == ("cost_per_m_output_tokens [GPU-hours per 10^6 output tokens],"
                      "cost_per_hour [GPU-hours per hour = GPUs],tpot_bound [ms],scenario_link")


# ------------------------------------------------------------------ issue #33 item 2: reserved vs held


def test_context_chart_and_report_compare_the_budget_with_what_the_engine_reserves() -> None:
    """Gemma-3-27B, 131,072 tokens, 1 request, vLLM v0.33 on an H100: the pool reserves
    19,301,662,720 B (17.98 GiB, the card's figure) while the requests hold far less (sliding
    layers keep a window); the chart's solid line and the report's reserved column are the former."""
    from kvplan.capacity import fit
    from kvplan.scenario import scenario_plan
    from kvplan.sizing import pool_reserved
    from kvplan.ui import charts, data

    scenario = Scenario.from_query({"v": "1", "m": "gemma-3-27b", "t": "131072", "u": "1", "sk": "1",
                                    "ev": "0.33"})[0]
    plan = scenario_plan(scenario)
    assert fit(plan).kv_bytes_per_request == 19_301_662_720
    assert pool_reserved(plan, [131072], 1).tolist() == [19_301_662_720]
    df, errors = data.kv_vs_context(plan, scenario.kv_dtypes, scenario.log_x)
    assert errors == [] and df["tokens"].max() == 1_000_000  # the axis ends past the 131,072 limit
    row = df[(df["kv_dtype"] == "bf16") & (df["tokens"] == 125893)].iloc[0]
    assert (row["kv_bytes"], row["reserved_bytes"]) == (10_757_079_040, 18_878_300_160)
    fig = charts.kv_context_figure(df, None, 10**10, 131072, 1, True)
    assert [t.name for t in fig.data] == ["bf16 reserved", "bf16 held", "fp8_e4m3 reserved", "fp8_e4m3 held"]
    assert fig.data[0].line.dash == "solid" and fig.data[1].line.dash == "dot"
    table = kv_table(scenario)
    at = table[table["tokens"] == 131072].iloc[0]
    assert at["bf16_reserved_gib"] == 19_301_662_720 / 2**30
    assert at["bf16_held_gib"] < at["bf16_reserved_gib"]


def test_report_colours_each_dtype_as_the_dashboard_does() -> None:
    from kvplan.colors import dtype_color

    fig = report_figure(SCENARIO)
    by_name = {t.name: (t.line.color if t.type == "scatter" else t.marker.color) for t in fig.data
               if t.name and ("bf16" in t.name or "fp8_e4m3" in t.name)}
    assert by_name == {"KV bf16 reserved": dtype_color("bf16"), "KV bf16 held": dtype_color("bf16"),
                       "KV fp8_e4m3 reserved": dtype_color("fp8_e4m3"),
                       "KV fp8_e4m3 held": dtype_color("fp8_e4m3"),
                       "fit bf16": dtype_color("bf16"), "fit fp8_e4m3": dtype_color("fp8_e4m3")}
    assert dtype_color("bf16") != dtype_color("fp8_e4m3")


def test_pareto_colours_one_per_accelerator_and_a_log_axis_past_a_30x_spread() -> None:
    """Issue #33 item 6: H100-SXM and A100-40GB-PCIe no longer share a blue; every accelerator of
    the catalogue has its own colour; one 100× outlier turns the cost axis logarithmic."""
    from kvplan.presets import gpus
    from kvplan.ui.recommend_view import pareto_figure
    from kvplan.ui.theme import gpu_color

    assert len({gpu_color(g) for g in gpus()}) == len(gpus())
    assert gpu_color("h100-sxm") != gpu_color("a100-40gb-pcie")
    ranked = pd.DataFrame({"gpu": ["h100-sxm", "a100-40gb-pcie", "h200"], "tpot_ms": [10.0, 20.0, 30.0],
                           "cost_per_m_tokens": [1.0, 2.0, 100.0], "tp": [1, 1, 1], "pp": [1, 1, 1],
                           "ep": [1, 1, 1], "kv_dtype": ["bf16"] * 3, "weight_dtype": ["auto"] * 3,
                           "total_gpus": [1, 1, 1]})
    fig = pareto_figure(ranked, "$")
    colors = {t.name: t.marker.color for t in fig.data if t.mode == "markers"}
    assert colors == {g: gpu_color(g) for g in ("a100-40gb-pcie", "h100-sxm", "h200")}
    assert fig.layout.yaxis.type == "log"
    assert pareto_figure(ranked.iloc[:2], "$").layout.yaxis.type == "linear"
    assert fig.layout.legend.orientation == "v" and fig.layout.legend.x == 1.02
