"""Fuzz every entry point that takes user text: link query strings, config.json text, CLI argv.

Invariants:

* ``Scenario.from_query`` never raises; every warning is a bounded, printable line.
* ``parse_config`` raises nothing but ``KVPlanError``; field errors name the field.
* ``kvplan.cli.main`` returns/exits with 0 or 2, never raises, and on 2 writes exactly one line
  to stderr.

``KVPLAN_PROFILE=long`` runs ≥ 10,000 generated cases per test; the default run is small.
The profiles are registered here (not in conftest.py) so that they only apply to these tests.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import string
import zlib
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import pandas as pd
import pytest
from cli_helpers import run_cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from md_text import outside_code, unmd

from kvplan.config_import import MAX_DEPTH, json_depth, parse_config
from kvplan.engines.settings import SETTINGS
from kvplan.errors import MESSAGES, KVPlanError, md, plotly_text
from kvplan.plan import make_plan
from kvplan.presets import gpus, model_presets
from kvplan.scenario import Scenario

settings.register_profile(
    "kvplan-fuzz-default", max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "kvplan-fuzz-long", max_examples=10_000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG = os.environ.get("KVPLAN_PROFILE", "").lower() == "long"
FUZZ = settings.get_profile("kvplan-fuzz-long" if LONG else "kvplan-fuzz-default")
#: The CLI does real work per case (fit + GPU search); keep the default run quick.
CLI_FUZZ = settings(FUZZ, max_examples=10_000 if LONG else 80)

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
#: Every link key: the scenario's own fields and each engine setting's key (``SETTINGS``, flattened
#: into the link since the engines refactor).
ALIASES = [info.alias or name for name, info in Scenario.model_fields.items() if name != "engine_settings"] \
    + [setting.key for setting in SETTINGS.values()] + ["v"]
PRESETS = sorted(model_presets())
GPUS = sorted(gpus())
DTYPES = ["bf16", "fp16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2", "nvfp4",
          "mxfp4", "avg6bit"]
MAX_WARNING_CHARS = 400

# --------------------------------------------------------------------------- value strategies

SPECIAL_TEXT = [
    "", " ", "0", "-1", "1", "-0", "1e308", "-1e308", "1e999", "nan", "NaN", "inf", "-inf",
    "Infinity", "+5", "0x10", "1_000", "٣", "１２", "3.5", "1e3", "9" * 40, "-" + "9" * 40,
    "<script>alert(1)</script>", "\"><img src=x onerror=alert(1)>", "javascript:alert(1)",
    "\x00", "\x1b[31mred", "\u202eevil", "\ud7ff", "a,b,,c", ",", "bf16,,fp8", "true", "false",
    "None", "null", "[]", "{}", "%00", "../../etc/passwd",
]
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=0, max_value=200_000_000).map(str),
)
texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
values = st.one_of(
    st.sampled_from(SPECIAL_TEXT),
    numbers,
    texts,
    st.sampled_from(PRESETS + GPUS + DTYPES),
    st.lists(st.sampled_from(DTYPES), min_size=0, max_size=14).map(",".join),
    st.integers(min_value=8_000, max_value=12_000).map(lambda n: "9" * n),   # near the length cap
    st.just("x" * 10_000),
)
keys = st.one_of(st.sampled_from(ALIASES), texts, st.sampled_from(["<script>", "\x00", "m " * 50]))
query_values = st.one_of(values, st.lists(values, max_size=4))   # repeated keys arrive as lists
queries = st.dictionaries(keys, query_values, max_size=12)


def _check_warnings(warnings: list[str]) -> None:
    assert isinstance(warnings, list)
    for warning in warnings:
        assert isinstance(warning, str)
        assert len(warning) <= MAX_WARNING_CHARS, warning[:200]
        assert warning.isprintable(), repr(warning[:200])


@FUZZ
@given(queries)
@example({"t": ["1", "2", ""]})
@example({"t": "nan", "u": "inf", "n": "-5", "kd": "", "c": "!!!", "v": "999"})
@example({"m": "<script>alert(1)</script>", "zz": "x" * 10_000})
@example({"c": "eJyrVsrJTEnNK1GyMjI0qQUAKfwE6w"})
def test_from_query_never_raises(query):
    scenario, warnings = Scenario.from_query(query)
    assert isinstance(scenario, Scenario)
    _check_warnings(warnings)
    for key in query:
        if key not in ALIASES:
            assert any("is not known" in w for w in warnings), (key, warnings)
    # whatever was accepted survives a round trip through a link unchanged and without warnings
    again, more = Scenario.from_query(scenario.to_query())
    assert more == []
    assert again == scenario


@FUZZ
@given(st.text(max_size=300), st.lists(st.tuples(keys, values), max_size=8))
def test_raw_query_string_never_raises(raw, pairs):
    """Query strings as a browser sends them (percent-encoding, repeats, blanks)."""
    for text in (raw, urlencode(pairs)):
        parsed = parse_qs(text, keep_blank_values=True)
        scenario, warnings = Scenario.from_query(parsed)
        assert isinstance(scenario, Scenario)
        _check_warnings(warnings)


@FUZZ
@given(st.sampled_from([a for a in ALIASES if a not in {"v", "c"}]), values)
def test_one_bad_parameter_keeps_the_others(alias, value):
    base = {"m": "llama-2-7b", "t": "1234", "u": "3"}
    query = {**base, alias: value}
    scenario, warnings = Scenario.from_query(query)
    _check_warnings(warnings)
    for key, expected in (("m", "llama-2-7b"), ("t", 1234), ("u", 3)):
        if key == alias:
            continue
        field = next(n for n, i in Scenario.model_fields.items() if i.alias == key)
        assert getattr(scenario, field) == expected
    if warnings:
        assert any(f"'{alias}'" in w or alias in w for w in warnings), warnings


# --------------------------------------------------------------------------- config.json

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False), texts,
)
json_any = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(texts, inner, max_size=5)), max_leaves=25)

CONFIG_INT_KEYS = [
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "v_head_dim", "intermediate_size", "vocab_size", "sliding_window", "max_window_layers",
    "sliding_window_pattern", "attention_chunk_size", "full_attention_interval", "kv_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "num_local_experts", "num_experts_per_tok",
    "n_routed_experts", "moe_intermediate_size", "linear_num_key_heads", "linear_num_value_heads",
    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "attn_layer_period",
    "attn_layer_offset", "mamba_d_state", "mamba_d_conv", "mamba_expand", "num_kv_heads",
    "n_layer", "n_head", "n_embd", "first_k_dense_replace", "n_shared_experts",
]
bad_numbers = st.one_of(
    st.integers(min_value=-10, max_value=300), st.sampled_from([0, -1, 10**12, 2**63, 1.5, True]),
    st.floats(), st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=3),
)
FIXTURES = {p.name: json.loads(p.read_text()) for p in sorted(CONFIGS.glob("*.json"))}


def _parse_ok_or_kvplan_error(raw) -> None:
    try:
        arch = parse_config(raw)
    except KVPlanError as err:
        assert err.code in MESSAGES
        message = str(err)
        assert message and "\n" not in message and len(message) <= 600, message[:300]
        if err.code in {"config.bad_value", "config.missing_key"}:
            assert err.field and err.field in message, (err.code, err.fields)
        return
    assert arch.n_layers >= 1
    assert arch.params_total >= 0


@FUZZ
@given(json_any)
def test_parse_config_random_json(data):
    _parse_ok_or_kvplan_error(json.dumps(data))
    if isinstance(data, dict):
        _parse_ok_or_kvplan_error(data)


@FUZZ
@given(st.sampled_from(sorted(FIXTURES)),
       st.dictionaries(st.sampled_from(CONFIG_INT_KEYS + ["model_type", "layer_types",
                                                          "no_rope_layers", "text_config",
                                                          "torch_dtype", "use_sliding_window",
                                                          "multi_query", "architectures"]),
                       st.one_of(bad_numbers, json_any), max_size=4),
       st.lists(st.sampled_from(CONFIG_INT_KEYS), max_size=3))
def test_parse_config_mutated_real_configs(name, changes, dropped):
    """Real configs with wrong types, 0/negative/huge sizes and missing keys."""
    data = {k: v for k, v in FIXTURES[name].items() if k not in dropped}
    data.update(changes)
    _parse_ok_or_kvplan_error(json.dumps(data))


@FUZZ
@given(st.binary(max_size=400))
@example(b"\xff\xfe{}")
@example(b'{"num_hidden_layers": 32, "x": "\xc3\x28"}')
@example(b"[" * 100_000)
@example(b"{" * 5000)
def test_parse_config_raw_bytes(raw):
    _parse_ok_or_kvplan_error(raw)


@FUZZ
@given(st.integers(min_value=MAX_DEPTH - 2, max_value=3000), st.sampled_from(["list", "dict"]))
def test_parse_config_deeply_nested(depth, kind):
    inner = "1"
    text = ("[" * depth + inner + "]" * depth if kind == "list"
            else '{"a":' * depth + inner + "}" * depth)
    text = '{"num_hidden_layers": 2, "deep": ' + text + "}"
    _parse_ok_or_kvplan_error(text)


# --------------------------------------------------------------------------- CLI

ARG_VALUES = st.one_of(st.sampled_from(SPECIAL_TEXT[:30]), numbers, texts,
                       st.sampled_from(PRESETS + GPUS + DTYPES + ["vllm", "sglang", "hf",
                                                                  "hf-static", "hf-legacy"]))
FLAGS = ["--model", "--config", "--tokens", "--kv-dtype", "--engine", "--block-size",
         "--max-num-batched-tokens", "--batch", "--max-cache-len", "--page-size", "--gpu",
         "--num-gpus", "--tp", "--pp", "--users", "--weight-dtype", "--gpu-util", "--reserve-gib",
         "--kv-cache-memory-bytes", "--hybrid-manager", "--prefix-caching", "--tensor-parallel-size",
         "--gpu-memory-utilization", "--kv-cache-dtype"]
BOOL_FLAGS = ["--json", "--no-async-scheduling", "--enable-prefix-caching", "--no-enable-prefix-caching",
              "--disable-hybrid-kv-cache-manager"]


@st.composite
def argvs(draw):
    command = draw(st.sampled_from(["kv", "fit", "models", "gpus", "kv", "fit", "bogus", ""]))
    argv = [command] if command else []
    if command in {"kv", "fit"}:
        # usually a valid core so the numbers get exercised, then random extra options
        if draw(st.booleans()):
            argv += ["--model", draw(st.sampled_from(PRESETS))]
        if draw(st.booleans()):
            argv += ["--tokens", draw(st.sampled_from(["1", "4096", "131072", "10000000", "10000001"]))]
        if command == "fit" and draw(st.booleans()):
            argv += ["--gpu", draw(st.sampled_from(GPUS))]
        for _ in range(draw(st.integers(min_value=0, max_value=5))):
            flag = draw(st.sampled_from(FLAGS + BOOL_FLAGS))
            argv.append(flag)
            if flag not in BOOL_FLAGS:
                value = draw(ARG_VALUES)
                if flag == "--config" and draw(st.booleans()):
                    value = str(CONFIGS / draw(st.sampled_from(sorted(FIXTURES))))
                argv.append(value)
    elif draw(st.booleans()):
        argv += draw(st.lists(ARG_VALUES, max_size=3))
    return argv




def check_cli(argv: list[str]) -> tuple[int, str, str]:
    code, out, err = run_cli(argv)
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert err.endswith("\n") and err.count("\n") == 1, (argv, err)
        assert err.startswith("kvplan: error: "), (argv, err)
    else:
        assert err == "", (argv, err)
        if "--json" in argv and "--help" not in argv and "-h" not in argv:
            json.loads(out)   # exactly one JSON object/array
    return code, out, err


@CLI_FUZZ
@given(argvs())
@example(["fit", "--model", "llama-3.1-405b", "--gpu", "h100-sxm", "--tokens", "10000000",
          "--users", "10000000", "--num-gpus", "4096", "--tp", "8", "--json"])
@example(["kv", "--model", "kimi-k2", "--tokens", "10000000", "--batch", "10000000",
          "--kv-dtype", "int2", "--json"])
@example(["fit", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--tokens", "4096", "--tp", "3"])
@example(["kv", "--config", "/nonexistent/config.json", "--tokens", "5"])
@example(["kv", "--config", "/", "--tokens", "5"])
def test_cli_exit_codes(argv):
    check_cli(argv)


@pytest.mark.parametrize("argv", [
    ["kv", "--model", "llama-2-7b", "--tokens", "4096", "--kv-dtype", "<script>"],
    ["kv", "--model", "nope", "--tokens", "1"],
    ["fit", "--model", "llama-2-7b", "--tokens", "1", "--gpu", "nope"],
    ["fit", "--model", "llama-2-7b", "--tokens", "1", "--gpu", "h100-sxm", "--num-gpus", "3",
     "--tp", "2"],
    ["kv", "--model", "llama-2-7b", "--tokens", "nan"],
    ["kv", "--model", "llama-2-7b", "--tokens", "-1"],
    ["kv", "--model", "llama-2-7b", "--tokens", "10000001"],
    ["fit", "--model", "llama-2-7b", "--tokens", "1", "--gpu", "h100-sxm", "--gpu-util", "inf"],
    [],
    ["--help"],
])
def test_cli_edge_cases(argv):
    code, _, err = check_cli(argv)
    if code == 2 and argv:
        assert len(err) <= 600


def test_cli_bad_config_file(tmp_path):
    path = tmp_path / "config.json"
    for raw in (b"\xff\xfe", b"[]", b"{", b'{"num_hidden_layers": 0}', b"{" * 4000,
                b'{"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": -2}'):
        path.write_bytes(raw)
        code, _, err = check_cli(["kv", "--config", str(path), "--tokens", "10"])
        assert code == 2, (raw, err)


def test_long_profile_is_at_least_10k():
    if LONG:
        assert FUZZ.max_examples >= 10_000 and CLI_FUZZ.max_examples >= 10_000
    else:
        assert FUZZ.max_examples <= 200


def test_control_chars_never_reach_messages():
    _, warnings = Scenario.from_query({"m\x00\x1b": "x", "t": "\x07\x08", "g": "a\u202eb"})
    _check_warnings(warnings)
    assert all(ch in string.printable or ord(ch) > 127 for w in warnings for ch in w)


# --------------------------------------------------------------------------- other uploads


@FUZZ
@given(queries)
def test_link_names_check_never_raises(query):
    """The second step the dashboard applies to a link: names checked against the presets."""
    from kvplan.scenario import check_names

    scenario, warnings = Scenario.from_query(query)
    scenario, more = check_names(scenario)
    assert isinstance(scenario, Scenario)
    _check_warnings(more)


scenario_files = st.one_of(
    st.binary(max_size=300),
    json_any.map(lambda d: json.dumps(d).encode()),
    st.dictionaries(st.sampled_from(["id", "name", "description", "source", "query"]),
                    st.one_of(json_any, queries), max_size=5).map(lambda d: json.dumps(d).encode()),
)


@FUZZ
@given(scenario_files)
@example(b'{"query":{"\\n":null}}')
def test_scenario_file_upload(raw):
    from kvplan.report import scenario_from_json

    try:
        scenario = scenario_from_json(raw)
    except KVPlanError as err:
        assert err.code in {"scenario.invalid"}, err.code
        assert "\n" not in str(err)
        return
    assert isinstance(scenario, Scenario)


csv_cells = st.one_of(st.integers(min_value=-5, max_value=2_000_000).map(str),
                      st.sampled_from(["", " ", "x", "1.5", "²", "٣", "9" * 5000, "nan", "-0"]),
                      texts)


@FUZZ
@given(st.one_of(
    st.binary(max_size=300),
    st.lists(st.lists(csv_cells, min_size=0, max_size=4), max_size=20).map(
        lambda rows: "\n".join(",".join(r) for r in rows)),
))
@example("prompt,output\n²,5\n")
@example("1," + "9" * 5000 + "\n")
def test_lengths_csv_upload(raw):
    from kvplan.serving import parse_lengths_csv

    try:
        workload = parse_lengths_csv(raw)
    except KVPlanError as err:
        assert err.code == "csv.invalid", err.code
        assert "\n" not in str(err)
        return
    assert (workload.prompt >= 0).all() and (workload.output >= 0).all()


# --------------------------------------------------------------------------- hostile classes (#17)
#: Markdown, HTML and spreadsheet-formula payloads; each goes into every string field below.
PAYLOADS = [
    "![x](https://evil.example/p.png)", "[click here to sign in](https://evil.example)",
    "**bold** _it_ `code`", "# heading", "> quote", "- item", ":red[alarm] :material/lock:",
    "$x^2$", "<span style=\"font-size:90px;color:red\">ALL GOOD</span>", "<a href=x>y</a>",
    "<img src=x onerror=alert(1)>", "=HYPERLINK(\"https://evil.example\",\"x\")", "+1+1", "-2+3",
    "@SUM(A1:A9)", "\tcmd", "\rcmd", "line\nbreak", "www.evil.example", "&lt;b&gt;",
    "https://evil.example/x", "HTTP://EVIL.EXAMPLE", "mail me@evil.example", "x`https://y`z",
]
payloads = st.one_of(st.sampled_from(PAYLOADS), st.lists(st.sampled_from(PAYLOADS), min_size=2,
                                                          max_size=3).map("".join), texts)
#: A Markdown link/image whose brackets are not backslash-escaped.
LIVE_MARKDOWN = re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\(")
NON_REGULAR = ["/dev/zero", "/dev/null", "/dev/urandom", "/", "/proc", "/proc/self/fd"]


def _check_shown(message: str) -> None:
    """A message as the dashboard shows it (``md``): no live Markdown outside code spans, no bare
    address GFM would link, and the visible text is the message (one line, printable)."""
    shown = md(message)
    assert "\n" not in shown and shown.isprintable()
    plain = outside_code(shown)
    assert not LIVE_MARKDOWN.search(plain), shown
    assert not re.search(r"(?<!\\)[*_`<>\[\]$~|:#]", plain.replace("\\\\", "")), shown
    assert not re.search(r"(?i)https?://[-.\w]|www\.[-.\w]|@[-\w]+(?:\.[-\w]+)+", unmd(plain)), shown
    one_line = " ".join(message.splitlines())
    assert unmd(shown) == "".join(ch if ch.isprintable() else "?" for ch in one_line)


def _packed(raw: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


@st.composite
def deep_json(draw) -> bytes:
    depth = draw(st.one_of(st.integers(min_value=MAX_DEPTH - 2, max_value=MAX_DEPTH + 2),
                           st.integers(min_value=MAX_DEPTH, max_value=200_000)))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('[{"b":', "}]")]))
    closed = draw(st.booleans())
    inner = draw(st.sampled_from(["1", '"["', '"]]]]"', "null", ""]))
    body = opener * depth + inner + (closer * depth if closed else "")
    return draw(st.sampled_from(["{}", '{"x": {}}', '{"query": {}}'])).replace("{}", body, 1).encode()


@FUZZ
@given(deep_json(), st.sampled_from(["t", "u"]))
@example(b"[" * 100_000, "t")
@example(b'{"a":' + b"[" * 500 + b"]" * 500 + b"}", "u")
def test_deeply_nested_link_config(raw, other):
    """``c=`` that decompresses to deep nesting: a warning naming ``c``, the rest kept."""
    scenario, warnings = Scenario.from_query({"c": _packed(raw), other: "77"})
    _check_warnings(warnings)
    assert getattr(scenario, {"t": "tokens", "u": "users"}[other]) == 77
    if json_depth(raw, MAX_DEPTH) > MAX_DEPTH:
        assert scenario.custom_config is None
        assert warnings and warnings[0].startswith("link parameter 'c'="), warnings
        assert warnings[0].endswith(MESSAGES["link.too_deep"].format(limit=MAX_DEPTH))
    if scenario.custom_config is not None:
        scenario.model_dump_json()   # the cache key of every view


@FUZZ
@given(deep_json())
@example(b"[" * 500_000)
@example(b'{"query":{"\\n":null}}')
def test_deeply_nested_scenario_file(raw):
    from kvplan.report import MAX_SCENARIO_BYTES, scenario_from_json

    try:
        scenario_from_json(raw)
    except KVPlanError as err:
        assert err.code == "scenario.invalid" and str(err).isprintable()
        if json_depth(raw, MAX_DEPTH) > MAX_DEPTH and len(raw) <= MAX_SCENARIO_BYTES:
            assert str(err).endswith(MESSAGES["link.too_deep"].format(limit=MAX_DEPTH))


huge_ints = st.one_of(st.integers(min_value=0, max_value=10**40),
                      st.integers(min_value=19, max_value=6000).map(lambda n: "9" * n),
                      st.integers(min_value=1, max_value=600).map(lambda n: "1" + ",000" * n))
huge_floats = st.one_of(huge_ints.map(str), st.tuples(huge_ints.map(str), st.integers(0, 400)).map(
    lambda p: f"{p[0]}.{'9' * p[1]}"), st.floats(min_value=0, allow_nan=False).map(lambda f: f"{f:.2f}"))


@st.composite
def vllm_logs(draw) -> str:
    lines = draw(st.lists(st.sampled_from([
        "Available KV cache memory: {f} GiB", "GPU KV cache size: {i} tokens",
        "Maximum concurrency for {i} tokens per request: {f}x", "# GPU blocks: {i}",
        "num_gpu_blocks is: {i}", "max_seq_len={i}", "INFO nothing",
    ]), min_size=1, max_size=6))
    return "\n".join(line.format(i=draw(huge_ints), f=draw(huge_floats)) for line in lines)


@FUZZ
@given(vllm_logs())
@example("GPU KV cache size: " + "9" * 5000 + " tokens")
@example("Available KV cache memory: " + "9" * 400 + " GiB")
@example("Maximum concurrency for 32,768 tokens per request: " + "9" * 400 + "x")
@example("Maximum concurrency for 0 tokens per request: 1.00x")
@example("Maximum concurrency for 1,000,000,000 tokens per request: 1.00x")
@example("GPU KV cache size: 2 tokens\nMaximum concurrency for 1 tokens per request: 0x\n"
         "GPU KV cache size: 2 tokens")  # two ranks with equal tokens, one without a concurrency
def test_vllm_log_with_huge_numbers(log):
    """Logs with numbers of thousands of digits: a named message or a calibration, nothing else."""
    from kvplan.calibrate import calibrate
    from kvplan.capacity import FitQuery
    from kvplan.presets import get_gpu, load_model

    try:
        calibrate(make_plan(load_model("llama-2-7b"), get_gpu("h100-sxm"), FitQuery(tokens=4096)), log)
    except KVPlanError as err:
        assert err.code.startswith("calibrate."), err.code
        assert str(err).isprintable() and len(str(err)) <= 300


@FUZZ
@given(st.sampled_from(sorted(FIXTURES)), st.sampled_from(CONFIG_INT_KEYS),
       st.one_of(st.integers(min_value=10**6, max_value=10**400).map(str),
                 st.integers(min_value=19, max_value=6000).map(lambda n: "9" * n),
                 st.sampled_from(["1e308", "1.7976931348623157e308", "1e400", "-1e400", "1e-400",
                                  "4" * 4301, "9" * 400 + ".5"])))
def test_config_with_huge_numbers(name, key, number):
    """Numbers of hundreds or thousands of digits in a config.json: a named message, no crash."""
    fixture = {k: v for k, v in FIXTURES[name].items() if k != key}
    text = json.dumps(fixture)[:-1] + f', "{key}": {number}}}'
    _parse_ok_or_kvplan_error(text)


STRING_FIELDS = ["m", "g", "e", "kd", "wd", "sv", "vw"]


@FUZZ
@given(st.dictionaries(st.sampled_from(STRING_FIELDS), payloads, min_size=1, max_size=4),
       st.one_of(st.none(), payloads))
@example({"m": "![a](https://evil.example)", "g": "[click](https://evil.example)"}, None)
def test_markup_payloads_in_link_fields(query, unknown_key):
    """Every string a link carries, echoed in a warning, is shown as typed (never as Markdown)."""
    from kvplan.scenario import check_names

    if unknown_key is not None:
        query = {**query, unknown_key: "1"}
    scenario, warnings = Scenario.from_query(query)
    scenario, more = check_names(scenario)
    for message in warnings + more:
        _check_shown(message)


CONFIG_STRING_KEYS = ["name", "model_type", "torch_dtype", "dtype", "architectures", "layer_types"]


@FUZZ
@given(st.sampled_from(sorted(FIXTURES)), st.sampled_from(CONFIG_STRING_KEYS), payloads)
@example("llama.json", "name", '<span style="font-size:90px;color:red">ALL GOOD – 0 GiB needed</span>')
@example("llama.json", "name", '=HYPERLINK("https://evil.example","x")')
def test_markup_payloads_in_config_fields(name, key, payload):
    """A config's strings: messages shown as text, names escaped in plotly, CSV cells inert."""
    from kvplan.report import to_csv

    value = [payload] if key in {"architectures"} else (
        [payload] * FIXTURES[name].get("num_hidden_layers", 1) if key == "layer_types" else payload)
    data = {**FIXTURES[name], key: value}
    try:
        arch = parse_config(data, name=payload if key == "name" else None)
    except KVPlanError as err:
        _check_shown(str(err))
        return
    _check_shown(arch.name)
    assert "<" not in plotly_text(arch.name) and ">" not in plotly_text(arch.name)
    frame = pd.DataFrame({"model": [arch.name], "value": [-1]})
    cells = list(csv.reader(io.StringIO(to_csv(frame, Scenario()))))  # header, then the row
    assert cells[0] == ["model", "value", "scenario_link"]
    assert cells[1][1] == "-1"
    assert not cells[1][0].startswith(("=", "+", "-", "@", "\t", "\r")), cells[1][0]


@FUZZ
@given(st.dictionaries(st.sampled_from(["id", "name", "description", "source"]), payloads, max_size=4),
       st.dictionaries(payloads, payloads, max_size=3))
def test_markup_payloads_in_scenario_files(fields, query):
    from kvplan.report import scenario_from_json

    raw = json.dumps({**fields, "query": query}).encode()
    try:
        scenario_from_json(raw)
    except KVPlanError as err:
        assert err.code == "scenario.invalid"
        _check_shown(str(err))


@pytest.mark.parametrize("path", NON_REGULAR)
@pytest.mark.parametrize("flag", ["--config", "--log", "--scenario"])
def test_non_regular_files_are_refused_fast(path, flag, tmp_path):
    import time

    argv = {"--config": ["kv", "--config", path, "--tokens", "5"],
            "--log": ["calibrate", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--tokens", "64",
                      "--log", path],
            "--scenario": ["report", "--scenario", path + "/x.json" if path == "/" else path,
                           "--out", str(tmp_path), "--no-png"]}[flag]
    start = time.monotonic()
    code, _, err = check_cli(argv)
    assert code == 2 and time.monotonic() - start < 10, err
    assert "cannot read" in err or "unknown scenario" in err or "scenario" in err, err


@pytest.mark.parametrize("path", NON_REGULAR + ["fifo"])
@pytest.mark.parametrize("command", ["kv", "fit"])
def test_cli_config_from_special_files(path, command, tmp_path):
    if path == "fifo":
        path = str(tmp_path / "config.json")
        os.mkfifo(path)
    argv = [command, "--config", path, "--tokens", "5"] + (["--gpu", "h100-sxm"] if command == "fit" else [])
    code, _, err = check_cli(argv)
    assert code == 2 and err.endswith(", not a regular file\n"), err


# --------------------------------------------------------------------------- hostile classes (#32)
#: Numbers a hostile header or index carries: huge, negative, fractional, booleans, non-finite.
hostile_numbers = st.one_of(
    st.integers(-5, 1 << 20), st.integers(-(1 << 70), 1 << 70), st.sampled_from([10 ** 400, 1 << 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(), st.text(max_size=5))
tensor_entries = st.fixed_dictionaries({}, optional={
    "dtype": st.one_of(st.sampled_from(["F16", "BF16", "U8", "F8_E4M3", "F4", "F64", "X"]),
                       st.lists(st.sampled_from(["F16", "BF16"]), max_size=2),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), hostile_numbers),
    "shape": st.one_of(st.lists(hostile_numbers, max_size=6), st.lists(st.integers(0, 1 << 40), max_size=4),
                       hostile_numbers),
    "data_offsets": st.one_of(st.lists(hostile_numbers, max_size=3),
                              st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20)).map(list),
                              hostile_numbers)})
hostile_headers = st.dictionaries(st.one_of(st.sampled_from(PAYLOADS), texts),
                                  st.one_of(tensor_entries, hostile_numbers), max_size=6)


def _as_safetensors(header: object, declared: int | None) -> bytes:
    """A header as a file's first bytes; ``declared`` overrides the 8-byte length (a lie)."""
    body = json.dumps(header).encode()
    return (len(body) if declared is None else declared).to_bytes(8, "little") + body


safetensors_bytes = st.one_of(
    st.binary(max_size=64),
    st.builds(_as_safetensors, hostile_headers,
              st.one_of(st.none(), st.integers(0, 1 << 64 - 1), st.sampled_from([0, 7, 10 ** 8 + 1]))))


def _check_checkpoint_error(err: KVPlanError) -> None:
    assert err.code.startswith(("checkpoint.", "hub.")), err.code
    _check_shown(str(err))


@FUZZ
@given(safetensors_bytes)
@example(_as_safetensors({"w": {"dtype": ["F16"], "shape": [2]}}, None))
@example(_as_safetensors({"w": {"dtype": "F16", "shape": [10 ** 3999]}}, None))
@example(_as_safetensors({"w": {"dtype": "F16", "shape": [1 << 62] * 1000}}, None))
@example(_as_safetensors({"w": {"dtype": "F16", "shape": [2], "data_offsets": [-4, 0]}}, None))
def test_safetensors_headers_parse_or_refuse(raw):
    """Any header bytes: tensors whose bytes are exact int64 values within the bound, or one
    checkpoint.* message the dashboard can show."""
    from kvplan.checkpoint import MAX_TENSOR_BYTES, parse_header, summarize

    try:
        tensors = parse_header(raw, "fuzz.safetensors")
        summary = summarize({"fuzz.safetensors": tensors})
    except KVPlanError as err:
        _check_checkpoint_error(err)
        return
    assert all(0 <= t.nbytes <= MAX_TENSOR_BYTES and isinstance(t.dtype, str) for t in tensors)
    assert 0 <= summary.total_bytes <= MAX_TENSOR_BYTES
    assert pd.DataFrame([summary.bytes_by_part]).dtypes.map(lambda d: d.kind == "i").all()


index_texts = st.one_of(
    st.builds(lambda total, shards: json.dumps({"metadata": {"total_size": total},
                                                "weight_map": {f"t{i}": s for i, s in enumerate(shards)}}),
              hostile_numbers, st.lists(st.one_of(
                  st.sampled_from(["model.safetensors", "../x.safetensors", "/abs.safetensors",
                                   "a/b.safetensors", "..safetensors", "x.bin", "%2e%2e.safetensors"]),
                  st.sampled_from(PAYLOADS), texts, hostile_numbers), max_size=6)),
    st.sampled_from(['{"metadata": {"total_size": Infinity}, "weight_map": {}}',
                     '{"metadata": {"total_size": NaN}, "weight_map": {}}',
                     '{"metadata": {"total_size": 1e400}, "weight_map": {}}',
                     '{"metadata": [], "weight_map": {"a": "b.safetensors"}}']),
    texts)


@FUZZ
@given(index_texts)
def test_safetensors_index_parse_or_refuse(text):
    """Any index: a total in [0, 8 PiB] and plain shard file names, or one checkpoint.* message."""
    from kvplan.checkpoint import MAX_TENSOR_BYTES, read_index

    try:
        total, files = read_index(text.encode("utf-8", "surrogatepass"))
    except KVPlanError as err:
        _check_checkpoint_error(err)
        return
    assert total is None or (type(total) is int and 0 <= total <= MAX_TENSOR_BYTES)
    for name in files:
        assert "/" not in name and "\\" not in name and ".." not in name and not name.startswith(".")
        assert name.endswith(".safetensors") and name.isprintable()


@FUZZ
@given(st.lists(st.tuples(st.one_of(st.sampled_from(PAYLOADS), texts).map(lambda n: n + ".safetensors"),
                          safetensors_bytes), max_size=4))
def test_header_uploads_parse_or_refuse(files):
    """The dashboard's upload callback (``weights_view.read_uploads``): parsed, or one message."""
    from kvplan.ui.weights_view import read_uploads

    class Upload:
        def __init__(self, name: str, data: bytes) -> None:
            self.name, self.data = name, data

        def getvalue(self) -> bytes:
            return self.data

    try:
        read_uploads([Upload(name, data) for name, data in files])
    except KVPlanError as err:
        _check_checkpoint_error(err)


class _FuzzHub:
    """A Hub-like server on 127.0.0.1 whose answers each example sets (``answers``: file name →
    (status, headers, body)); it records whether any request after a redirect carried a token."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hub = self
        self.answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.leaked: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                name = self.path.split("/resolve/main/", 1)[-1]
                if self.path.startswith("/redirected/") and self.headers.get("authorization"):
                    hub.leaked.append(self.path)
                status, headers, body = hub.answers.get(name, (404, {}, b""))
                rng = self.headers.get("range")
                if status == 200 and rng and rng.startswith("bytes="):
                    start, _, end = rng[6:].partition("-")
                    body, status = body[int(start): int(end) + 1], 206
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fuzz_hub():
    """One local Hub for every example (one server thread, shut down after the module); a server
    per example would leave a polling ``serve_forever`` thread behind each one."""
    server = _FuzzHub()
    yield server
    server.close()


_TINY_LLAMA = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "vocab_size": 100}).encode()
hub_bodies = st.one_of(safetensors_bytes, index_texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
                       st.just(_TINY_LLAMA), st.binary(max_size=64))
hub_answers = st.one_of(
    st.tuples(st.sampled_from([200, 200, 200, 401, 403, 404, 500]), st.just({}), hub_bodies),
    st.tuples(st.sampled_from([301, 302, 307]), st.sampled_from([
        {"Location": "/redirected/org/x/resolve/main/model.safetensors"},
        {"Location": "/org/x/resolve/main/model.safetensors"}, {"Location": "file:///etc/passwd"},
        {"Location": "ftp://127.0.0.1/x"}, {}]), st.just(b"")))


@settings(FUZZ, max_examples=10_000 if LONG else 40)
@given(st.dictionaries(st.sampled_from(["config.json", "model.safetensors.index.json", "model.safetensors",
                                        "model-1.safetensors", "x.safetensors"]), hub_answers, max_size=5),
       st.booleans())
@example({"config.json": (200, {}, _TINY_LLAMA), "model.safetensors.index.json": (
    200, {}, b'{"weight_map": {"a": "../../../other/repo/resolve/main/x.safetensors"}}')}, True)
def test_hub_responses_from_a_local_server(fuzz_hub, answers, with_token):
    """Any answers of a hostile Hub (status, redirects, bodies): ``hub.fetch`` returns the config
    and a summary or a reason, or raises one named message; a redirected request never carries
    the token; the server is on 127.0.0.1 only."""
    from unittest import mock

    from kvplan import hub

    server = fuzz_hub
    server.answers = dict(answers)
    server.leaked.clear()
    env = {"HF_ENDPOINT": server.endpoint, "HF_TOKEN": "fuzz-token" if with_token else ""}
    with mock.patch.dict(os.environ, env), mock.patch.object(hub, "DEADLINE_S", 10.0), \
            mock.patch.object(hub, "TIMEOUT_S", 5.0):
        try:
            config, summary, problem = hub.fetch("org/x")
        except KVPlanError as err:
            assert err.code.startswith(("hub.", "config.", "checkpoint.", "weights.")), err.code
            _check_shown(str(err))
        else:
            assert isinstance(config, dict) and (summary is None) == (problem is not None)
            if problem is not None:
                _check_shown(problem)
    assert server.leaked == []


