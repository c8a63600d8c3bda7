"""Issue #17 "Hostile input, round two": one test per reported case (items 2–9).

Each asserts the named message, that the rest of the state is kept and that no traceback or
internal error reaches the user; CLI cases exit 2 with exactly one line on stderr.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import zlib
from pathlib import Path

import pandas as pd
import pytest
from cli_helpers import run_cli
from md_text import outside_code, unmd
from test_app import make_app, open_boxes

from kvplan.config_import import MAX_CONFIG_BYTES, MAX_DEPTH
from kvplan.engines import SETTINGS, get_engine
from kvplan.errors import MESSAGES, KVPlanError, csv_cell, md, plotly_text
from kvplan.plan import make_plan
from kvplan.presets import load_model
from kvplan.report import load_scenario, report_figure, scenario_from_json, scenario_link, to_csv
from kvplan.scenario import BOUNDS, Scenario, encode_config

ROOT = Path(__file__).resolve().parent.parent
LLAMA = json.loads((ROOT / "presets" / "models" / "llama-3.1-8b.json").read_text())["config"]
#: A Markdown link or image, not preceded by a backslash (what Streamlit would render as one).
LIVE_MARKDOWN = re.compile(r"(?<!\\)!?(?<!\\)\[[^\]]*(?<!\\)\]\(")
#: What GFM links without brackets (its autolink-literal patterns).
BARE_ADDRESS = re.compile(r"(?i)https?://[-.\w]|www\.[-.\w]|@[-\w]+(?:\.[-\w]+)+")


def assert_inert(text: str) -> None:
    """Markdown source that renders no link or image: no bracket construct, and no bare address
    (which GFM links by itself) outside code spans."""
    assert not LIVE_MARKDOWN.search(text), text
    assert not BARE_ADDRESS.search(unmd(outside_code(text))), text


def packed(raw: bytes) -> str:
    """A ``c=`` value that decompresses to ``raw`` (what a hostile link would carry)."""
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def cli_fails(argv: list[str]) -> str:
    """Exit 2, exactly one line on stderr, no traceback; returns that line."""
    code, _, err = run_cli(argv)
    assert code == 2, (argv, code, err)
    assert err.startswith("kvplan: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def all_text(at) -> list[str]:
    """The Markdown source of every text element the page shows (user text arrives escaped)."""
    return [e.value for kind in ("markdown", "caption", "warning", "error", "info", "success")
            for e in getattr(at, kind)]


def no_traceback(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    for text in all_text(at):
        assert "could not be drawn" not in unmd(text), text
        assert "Traceback" not in text


# ------------------------------------------------------------------ item 2: deep nesting


def test_link_config_nested_100000_deep_names_c_and_keeps_the_rest():
    at = make_app(c=packed(b"[" * 100_000), m="custom", t="5000", u="3")
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    expected = MESSAGES["link.too_deep"].format(limit=MAX_DEPTH)
    assert any(w.startswith("link parameter 'c'=") and w.endswith(expected) for w in warnings), warnings
    assert at.session_state["w_tokens"] == 5000 and at.session_state["w_users"] == 3
    assert at.session_state["w_model"] == Scenario().model   # m=custom falls back alone


@pytest.mark.parametrize("depth", [300, 999])
def test_link_config_nested_hundreds_deep_is_named_not_a_serialization_error(depth):
    raw = b'{"num_hidden_layers": 2, "x": ' + b"[" * depth + b"]" * depth + b"}"
    scenario, warnings = Scenario.from_query({"c": packed(raw), "t": "77"})
    assert warnings == [MESSAGES["link.bad_value"].format(
        key="c", value=f"'{packed(raw)[:38]}…", why=MESSAGES["link.too_deep"].format(limit=MAX_DEPTH))]
    assert scenario.custom_config is None and scenario.tokens == 77
    at = make_app(c=packed(raw), m="custom", t="77")
    no_traceback(at)
    assert not any("PydanticSerializationError" in e.value for e in at.error)


def test_scenario_json_nested_500000_deep():
    raw = b"[" * 500_000
    with pytest.raises(KVPlanError) as info:
        scenario_from_json(raw)
    assert info.value.code == "scenario.invalid"
    assert str(info.value) == "scenario file is invalid: nested deeper than 32 levels"


def test_report_scenario_file_nested_500000_deep(tmp_path):
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 500_000)
    err = cli_fails(["report", "--scenario", str(path), "--out", str(tmp_path / "out"), "--no-png"])
    assert err == "kvplan: error: scenario file is invalid: nested deeper than 32 levels\n"
    assert not (tmp_path / "out").exists()


def test_report_scenario_link_with_deep_config_names_c(tmp_path):
    err = cli_fails(["report", "--scenario", f"?m=custom&c={packed(b'[' * 100_000)}",
                     "--out", str(tmp_path), "--no-png"])
    assert "link parameter 'c'=" in err and "nested deeper than 32 levels" in err


# ------------------------------------------------------------------ item 3: Markdown injection

PHISH_NAME = ("![x](https://evil.example/pixel.png) [Session expired – click here to sign in]"
              "(https://evil.example/login)")


def test_config_name_in_the_link_is_shown_as_text():
    config = {**LLAMA, "name": PHISH_NAME}
    at = make_app(m="custom", c=encode_config(config), t="4096")
    no_traceback(at)
    header = next(m.value for m in at.markdown if " on **" in m.value)
    assert header.startswith(f"**{md(PHISH_NAME)}** on **1 GPU × ")
    assert unmd(header).startswith(f"**{PHISH_NAME}** on")
    assert_inert(header)
    for text in all_text(at):
        assert not LIVE_MARKDOWN.search(text), text
    assert at.session_state["w_tokens"] == 4096


def test_model_and_gpu_links_in_warnings_are_shown_as_text():
    """Issue #33: a link whose model or GPU cannot be used gets no answer, only the blocked-link
    message naming both values as typed (inert) — no closest preset is near either."""
    at = make_app(m="![a](https://evil.example/a.png)", g="[click](https://evil.example)", t="2048")
    no_traceback(at)
    assert [w.value for w in at.warning] == []
    (error,) = [e.value for e in at.error]
    paragraphs = unmd(error).split("\n\n")
    assert paragraphs[0] == ("This link asks for the model **![a](https://evil.example/a.png)**, which is "
                             "not a model preset here. No preset is close; choose one in the sidebar or "
                             "upload its config.json (Use your own config.json).")
    assert paragraphs[1].startswith("This link asks for the accelerator **[click](https://evil.example)**")
    assert_inert(error)
    for text in all_text(at):
        assert not LIVE_MARKDOWN.search(text), text
    assert at.session_state["w_model"] == Scenario().model
    assert at.session_state["w_gpu"] == Scenario().gpu
    assert at.session_state["w_tokens"] == 2048


def test_scenario_file_query_key_in_the_upload_warning_is_shown_as_text():
    raw = json.dumps({"query": {"[click](https://evil.example)": "1", "t": "512"}}).encode()
    at = open_boxes(make_app(t="9000"), "box_share")
    at.file_uploader(key="up_scenario_json").upload("s.json", raw, "application/json").run()
    no_traceback(at)
    warning = next(w.value for w in at.warning if "scenario file is invalid" in unmd(w.value))
    assert_inert(warning)
    assert "'[click](https://evil.example)'" in unmd(warning)
    assert at.session_state["w_tokens"] == 9000  # the open scenario is untouched


def test_md_escapes_every_markdown_construct():
    for payload in ("**bold**", "_it_", "`code`", "# head", "> quote", "- item", "1. item",
                    ":red[x]", "$x^2$", "<b>x</b>", "~~s~~", "a|b", "&lt;", "line\nbreak"):
        escaped = md(payload)
        assert "\n" not in escaped and "`" not in escaped.replace("\\`", "")
        assert unmd(escaped) == " ".join(payload.splitlines())
        assert not re.search(r"(?<!\\)[*_`#>\[\]$<~|:&]", escaped.replace("\\\\", "")), (payload, escaped)


def test_md_shows_bare_addresses_as_code():
    """GFM turns bare addresses into links after escapes are resolved: they become code spans."""
    assert md("see https://evil.example/a.png) now") == "see `https://evil.example/a.png`\\) now"
    assert md("www.evil.example") == "`www.evil.example`"
    assert md("mail a@evil.example") == "mail `a@evil.example`"
    assert md("HTTP://X.Y'") == "`HTTP://X.Y`'"
    assert md("llama-3.1-8b") == "llama\\-3\\.1\\-8b"
    for payload in ("https://a`b", "x https://a\\`b y", "`https://x`"):
        assert unmd(md(payload)) == payload


# ------------------------------------------------------------------ item 4: report and CSV injection

GIANT = '<span style="font-size:90px;color:red">ALL GOOD – 0 GiB needed</span>'


def test_report_png_title_escapes_a_config_name():
    scenario = Scenario(model="custom", custom_config={**LLAMA, "name": GIANT}, kv_dtypes=["bf16"])
    title = report_figure(scenario).layout.title.text
    assert "<span" not in title and plotly_text(GIANT) in title
    assert title.startswith("kvplan report — &lt;span style=\"font-size:90px;color:red\"&gt;ALL GOOD")
    assert title.count("<br>") == 1 and title.count("<sup>") == 1   # only kvplan's own markup


def test_designs_csv_neutralises_formula_cells():
    from kvplan.capacity import FitQuery
    from kvplan.designs import design_table
    from kvplan.presets import get_gpu

    name = '=HYPERLINK("https://evil.example","click")'
    arch = load_model("llama-3.1-8b").model_copy(update={"name": name})
    df = design_table(make_plan(arch, get_gpu("h100-sxm"), FitQuery(tokens=4096)))
    text = to_csv(df, Scenario())
    table = pd.read_csv(io.StringIO(text))
    assert all(cell.startswith("'=HYPERLINK(") for cell in table["model"]), table["model"].tolist()
    assert not any(line.split(",")[2].startswith("=") for line in text.splitlines()[1:])


def test_csv_keeps_negative_numbers_and_neutralises_text():
    df = pd.DataFrame({"free_bytes": [-5, 7], "note": ["-1+1", "@SUM(A1)"], "x": ["\tcmd", "ok"],
                       "y": ["+1", "\rz"]})
    lines = to_csv(df, Scenario()).splitlines()
    link = scenario_link(Scenario())  # the last column (issue #16: no leading comment line)
    assert lines[0] == "free_bytes [B],note,x,y,scenario_link"
    assert lines[1] == f"-5,'-1+1,'\tcmd,'+1,{link}"
    assert lines[2] == f"7,'@SUM(A1),ok,' z,{link}"
    assert csv_cell(-5) == -5 and csv_cell(-2.5) == -2.5 and csv_cell("=1") == "'=1"
    assert csv_cell("plain") == "plain"


# ------------------------------------------------------------------ item 5: bounded text inputs


def test_paste_box_is_bounded_and_freed_after_use():
    at = open_boxes(make_app(), "w_config_box")
    assert at.text_area(key="w_paste").proto.max_chars == MAX_CONFIG_BYTES
    padded = {**LLAMA, "name": "padded", "notes": "x" * (MAX_CONFIG_BYTES - 3000)}
    text = json.dumps(padded)
    assert MAX_CONFIG_BYTES - 3000 < len(text) <= MAX_CONFIG_BYTES
    at.text_area(key="w_paste").input(text)
    at.button(key="w_paste_go").click().run()  # the commit (Ctrl+Enter) and the button in one rerun
    no_traceback(at)
    assert not at.error  # the button found the box already used: no "empty" message
    assert at.session_state["w_model"] == "custom"
    assert at.session_state["w_paste"] == ""
    kept = at.session_state["custom_config"]
    assert "notes" not in kept and kept["name"] == "padded"
    assert len(json.dumps(kept)) < 2_000


def test_paste_over_the_limit_is_refused_by_the_server_too():
    at = open_boxes(make_app(t="3000"), "w_config_box")
    at.session_state["w_paste"] = " " * (MAX_CONFIG_BYTES + 10)
    at.run()
    at.button(key="w_paste_go").click().run()
    no_traceback(at)
    assert at.session_state["w_model"] == Scenario().model
    assert at.session_state["w_tokens"] == 3000


def test_calibration_box_is_bounded():
    from kvplan.calibrate import MAX_LOG_BYTES

    at = open_boxes(make_app(), "box_calibrate")
    assert at.text_area(key="w_vllm_log").proto.max_chars == MAX_LOG_BYTES


# ------------------------------------------------------------------ item 6: CLI tracebacks and hangs

CAL = ["calibrate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "32768", "--log"]


@pytest.mark.parametrize(("line", "field"), [
    ("GPU KV cache size: " + "9" * 5000 + " tokens", "GPU KV cache size (tokens)"),
    ("Available KV cache memory: " + "9" * 400 + " GiB", "available KV cache memory (GiB)"),
    ("Maximum concurrency for 32,768 tokens per request: " + "9" * 400 + "x", "maximum concurrency"),
])
def test_calibrate_log_with_huge_numbers(tmp_path, line, field):
    log = tmp_path / "vllm.log"
    log.write_text(f"INFO 11-29 10:00:00 [gpu_worker.py:1] {line}\n")
    err = cli_fails([*CAL, str(log)])
    assert err.startswith(f"kvplan: error: the vLLM log's {field} is 9999")
    assert "; kvplan accepts " in err and " to 1,000," in err


def test_dashboard_calibration_with_huge_numbers_is_named():
    at = open_boxes(make_app(t="32768", n="1"), "box_calibrate")
    at.text_area(key="w_vllm_log").input("GPU KV cache size: " + "9" * 5000 + " tokens").run()
    no_traceback(at)
    errors = [unmd(e.value) for e in at.error]
    assert errors == ["Calibration: the vLLM log's GPU KV cache size (tokens) is "
                      + "9" * 23 + "…; kvplan accepts 0 to 1,000,000,000,000,000"]
    assert at.session_state["w_tokens"] == 32768


def test_report_bare_query_over_255_bytes(tmp_path):
    config = {k: LLAMA[k] for k in ("model_type", "num_hidden_layers", "hidden_size",
                                    "num_attention_heads", "num_key_value_heads", "vocab_size",
                                    "intermediate_size", "torch_dtype")}
    name = "".join(hashlib.sha256(str(i).encode()).hexdigest()[:8] for i in range(12))  # incompressible
    query = f"?v=1&m=custom&c={encode_config({**config, 'name': name})}&t=4096&u=2"
    assert 255 < len(query.encode()) < 4096
    code, out, err = run_cli(["report", "--scenario", query, "--out", str(tmp_path), "--no-png"])
    assert (code, err) == (0, "")
    assert load_scenario(query).tokens == 4096
    assert json.loads((tmp_path / "scenario.json").read_text())["query"]["t"] == "4096"
    assert out.splitlines()[0] == str(tmp_path / "fit.csv")


def test_report_out_in_proc(tmp_path):
    err = cli_fails(["report", "--scenario", "opt-13b-vllm-paper", "--out", "/proc/x", "--no-png"])
    assert err.startswith("kvplan: error: cannot write to '/proc/x': ")


def test_fit_custom_gpu_1e18():
    err = cli_fails(["fit", "--model", "llama-3.1-8b", "--gpu", "custom:1e18", "--tokens", "4096"])
    assert err == ("kvplan: error: accelerator 'custom:1e18': memory must be between 0.1 and "
                   "1,000,000.0, got 1e18 (custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]])\n")


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/tmp"])
def test_config_that_is_not_a_regular_file(path):
    import time

    start = time.monotonic()
    err = cli_fails(["kv", "--config", path, "--tokens", "100"])
    assert time.monotonic() - start < 5
    kind = {"/dev/zero": "a character device", "/dev/null": "a character device",
            "/tmp": "a directory"}[path]
    assert err == f"kvplan: error: cannot read '{path}': it is {kind}, not a regular file\n"


def test_config_fifo_does_not_hang(tmp_path):
    import os

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    err = cli_fails(["kv", "--config", str(fifo), "--tokens", "100"])
    assert err.endswith("it is a pipe, not a regular file\n")
    err = cli_fails([*CAL, str(fifo)])
    assert err.endswith("it is a pipe, not a regular file\n")


def test_scenario_file_key_with_a_newline():
    with pytest.raises(KVPlanError) as info:
        scenario_from_json(b'{"query":{"\\n":null}}')
    message = str(info.value)
    assert message.isprintable() and message.startswith("scenario file is invalid: query.?")


# ------------------------------------------------------------------ item 7: internal errors


def test_every_gpu_failing_is_a_named_message():
    at = make_app(m="llama-3.1-8b", tp="3", n="3", vw="memory")
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    why = MESSAGES["parallel.tp_heads"].format(tp=3, heads=8)
    # the answer card first (issue #16), then the memory view's own message
    assert warnings == [f"Does not fit: {why}.", MESSAGES["view.no_gpu"].format(why=why)]
    assert not any("KeyError" in e.value for e in at.error)
    assert at.query_params["tp"] in ("3", ["3"]) and at.query_params["n"] in ("3", ["3"])
    assert at.query_params["vw"] in ("memory", ["memory"])


# ------------------------------------------------------------------ item 8: silent changes


@pytest.mark.parametrize(("key", "value", "widget", "low"), [
    ("gm", "0.05", "w_gm", 0.1), ("gu", "0.0005", "w_gu", 0.001), ("gb", "0.001", "w_gb", 0.01),
    ("gf", "0.01", "w_gf", 0.1),
])
def test_link_values_below_a_widget_minimum_are_named_not_clamped(key, value, widget, low):
    at = make_app(g="custom", e="vllm", t="3333", **{key: value})
    no_traceback(at)
    warnings = [unmd(w.value) for w in at.warning]
    assert warnings == [MESSAGES["link.bad_value"].format(
        key=key, value=f"'{value}'", why=f"Input should be greater than or equal to {low}")]
    assert key not in at.query_params                       # the default, not a clamped value
    field = {"gm": "custom_gpu_gib", "gu": "gpu_util", "gb": "custom_gpu_tbps",
             "gf": "custom_gpu_tflops"}[key]
    if field in SETTINGS:  # engine settings: the bounds of their one declaration
        assert at.session_state[widget] == getattr(Scenario().engine_settings, field)
        declared_low = SETTINGS[field].low
    else:
        assert at.session_state[widget] == getattr(Scenario(), field)
        declared_low = BOUNDS[field][0]
    assert at.session_state["w_tokens"] == 3333
    open_boxes(at)  # the engine knobs live in the lazy "Engine settings" expander
    assert at.number_input(key=widget).min == low == declared_low


def test_every_sidebar_number_widget_uses_the_schema_bounds():
    from kvplan.ui.sidebar import MAX_UI_TOKENS, SETTING_WIDGETS, WIDGETS

    at = open_boxes(make_app(g="custom", e="vllm"))
    widgets = {w.key: w for w in at.number_input}
    checked = 0
    for field, key in WIDGETS.items():
        if key in widgets and field in BOUNDS:
            low, high = BOUNDS[field]
            assert (widgets[key].min, widgets[key].max) == (low, high), field
            checked += 1
    for field, key in SETTING_WIDGETS.items():  # vLLM's numeric knobs: their declared bounds
        if key in widgets:
            assert (widgets[key].min, widgets[key].max) == (SETTINGS[field].low, SETTINGS[field].high)
            checked += 1
    assert checked == 28  # every numeric widget of the default vLLM sidebar: scenario fields and settings
    # (15 + data_parallel_size of issue #28 + the LoRA knobs max_loras, max_lora_rank, max_cpu_loras of #26
    # + issue #27's images, image width, image height and limit_mm_per_prompt; --mm-processor-kwargs
    # is a JSON text box; + issue #27's five video inputs: videos, frame width, frame height, seconds and
    # fps, the last two from 0 — more than 0 is checked under the widget, scenario.VIDEO_OPEN_LOW)
    # (max_num_seqs is the 15th: issue #14)
    assert (widgets["w_tokens_exact"].min, widgets["w_tokens_exact"].max) == (1, MAX_UI_TOKENS)


# ------------------------------------------------------------------ item 9: small


def test_report_out_is_an_existing_file():
    err = cli_fails(["report", "--scenario", "opt-13b-vllm-paper", "--out", "/etc/hostname", "--no-png"])
    assert err == ("kvplan: error: cannot write to '/etc/hostname': it is a file, not a directory "
                   "(give a directory for the report)\n")


@pytest.mark.parametrize(("logged", "shown"), [("0", "0"), ("1,000,000,000", "1,000,000,000"),
                                               ("4,294,967,296", "4,294,967,296")])
def test_calibration_log_max_model_len_out_of_range(tmp_path, logged, shown):
    log = tmp_path / "vllm.log"
    log.write_text("Available KV cache memory: 61.54 GiB\n"
                   f"Maximum concurrency for {logged} tokens per request: 3.00x\n")
    err = cli_fails([*CAL, str(log)])
    assert err == (f"kvplan: error: the vLLM log's max_model_len is {shown}; kvplan accepts 1 to "
                   "100,000,000\n")
    assert "max_cache_len" not in err


def test_custom_gpu_with_extra_fields_is_refused():
    err = cli_fails(["fit", "--model", "llama-3.1-8b", "--gpu", "custom:80:1:1:1:1:1", "--tokens", "1"])
    assert err == ("kvplan: error: accelerator 'custom:80:1:1:1:1:1': 6 numbers given, one to three "
                   "expected (custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]])\n")
    code, out, _ = run_cli(["fit", "--model", "llama-3.1-8b", "--gpu", "custom:80:1:100", "--tokens", "1"])
    assert code == 0 and "Custom accelerator (80 GiB, 1 TB/s)" in out


def test_serving_widgets_use_the_link_bounds():
    """The serving section's widgets read the bounds its ``sv`` link values are checked against."""
    from kvplan.ui.serving_state import INPUTS

    at = make_app(vw="serving", sv="source:uniform")
    no_traceback(at)
    widgets = {w.key: w for w in at.number_input if w.key and w.key.startswith("sv_")}
    assert len(widgets) >= 12, sorted(widgets)
    for key, widget in widgets.items():
        spec = INPUTS[key.removeprefix("sv_")]
        assert (widget.min, widget.max) == (spec.low, spec.high), key


def test_prefix_caching_bytes_of_a_huge_model_are_exact():
    """Found by the CPU-bound cases: 128 layers with 10^6 KV heads × head_dim 10^6 wrapped int64.

    Per token: 128 layers × 2 (K, V) × 10^6 heads × 10^6 × 2 B = 5.12·10^14 B. 10M requests of
    9,999,488 + 512 = 10,000,000 tokens (625,000 blocks of 16): 10^7 × 10^7 × 5.12·10^14 =
    5.12·10^28 B without sharing; sharing the 1,024-token prefix (64 whole blocks) saves
    (10^7 − 1) × 1,024 × 5.12·10^14 B."""
    from kvplan.config_import import parse_config
    from kvplan.serving import prefix_caching

    arch = parse_config({"model_type": "llama", "num_hidden_layers": 128, "hidden_size": 1_000_000,
                         "num_attention_heads": 1_000_000, "num_key_value_heads": 1_000_000,
                         "head_dim": 1_000_000, "vocab_size": 32000})
    result = prefix_caching(arch, 10_000_000, 1024, 9_999_488, 512, get_engine("vllm"), "bf16")
    assert result.bytes_per_token == 512_000_000_000_000
    assert result.without_sharing_bytes == 51_200_000_000_000_000_000_000_000_000
    assert result.saved_bytes == 9_999_999 * 1024 * 512_000_000_000_000
    assert result.with_sharing_bytes == result.without_sharing_bytes - result.saved_bytes
    assert int(result.curve["without_sharing_bytes"].iloc[-1]) == result.without_sharing_bytes
