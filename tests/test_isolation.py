"""Isolation: no code execution from input, no raw HTML, a UI-free core, and sessions kept apart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from md_text import unmd

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
SOURCES = sorted((ROOT / "kvplan").rglob("*.py")) + ([APP] if APP.exists() else [])

FORBIDDEN = {
    "eval(": re.compile(r"(?<![\w.])eval\s*\("),
    "exec(": re.compile(r"(?<![\w.])exec\s*\("),
    "pickle": re.compile(r"\b(c?pickle|dill|marshal\.loads|shelve)\b"),
    "unsafe_allow_html=True": re.compile(r"unsafe_allow_html\s*=\s*True"),
    "__import__(": re.compile(r"\b__import__\s*\("),
    "subprocess shell=True": re.compile(r"shell\s*=\s*True"),
}
YAML_LOAD = re.compile(r"yaml\.(load|load_all)\s*\(([^)]*)\)")


def _code_lines(path: Path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.split("#", 1)[0]
        yield number, stripped


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dangerous_calls(path):
    problems = []
    for number, line in _code_lines(path):
        for name, pattern in FORBIDDEN.items():
            if pattern.search(line):
                problems.append(f"{path.name}:{number}: {name}: {line.strip()}")
        for match in YAML_LOAD.finditer(line):
            if "SafeLoader" not in match.group(2) and "CSafeLoader" not in match.group(2):
                problems.append(f"{path.name}:{number}: yaml.load without SafeLoader")
    assert not problems, "\n".join(problems)


def test_grep_patterns_catch_what_they_should():
    assert FORBIDDEN["eval("].search("x = eval(text)")
    assert not FORBIDDEN["eval("].search("model.eval()")
    assert not FORBIDDEN["eval("].search("literal_eval(x)")
    assert FORBIDDEN["unsafe_allow_html=True"].search("st.markdown(x, unsafe_allow_html = True)")
    assert FORBIDDEN["pickle"].search("import pickle")
    assert YAML_LOAD.search("yaml.load(f)")


def test_core_imports_no_ui_libraries():
    code = ("import kvplan, kvplan.sizing, kvplan.capacity, kvplan.cli, kvplan.config_import, "
            "kvplan.scenario, kvplan.presets, kvplan.engines, kvplan.report, kvplan.serving; "
            "import sys, json; "
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('streamlit', 'plotly', 'kaleido'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout) == []


def test_core_modules_do_not_name_ui_libraries():
    """Static check: no module outside kvplan/ui imports streamlit/plotly/kaleido at top level."""
    pattern = re.compile(r"^(import|from)\s+(streamlit|plotly|kaleido)\b")
    offenders = []
    for path in sorted((ROOT / "kvplan").glob("*.py")):
        for number, line in _code_lines(path):
            if pattern.match(line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


# --------------------------------------------------------------------------- app sessions

LLAMA_SMALL = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 7,
               "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8,
               "intermediate_size": 1376, "vocab_size": 1000, "name": "Tiny-Seven"}
QWEN_SMALL = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 11,
              "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 700, "vocab_size": 1000, "name": "Tiny-Eleven"}


def _text_of(at) -> str:
    parts = []
    for kind in ("markdown", "caption", "metric", "info", "warning", "success", "error", "text",
                 "title", "header", "subheader"):
        for element in getattr(at, kind, []):
            for attr in ("value", "body", "label"):
                value = getattr(element, attr, None)
                if isinstance(value, str):
                    parts.append(unmd(value))  # user text arrives escaped
    return "\n".join(parts)


def _session(config: dict):
    from streamlit.testing.v1 import AppTest

    from kvplan.scenario import encode_config

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["m"] = "custom"
    at.query_params["c"] = encode_config(config)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.skipif(not APP.exists(), reason="app.py not written yet")
def test_two_sessions_with_different_uploads_do_not_mix():
    """Interleaved AppTest sessions, each with its own config.json in its link (``c``).

    Each session is run once, in the order A, B, A' (a fresh session with A's config): B must not
    show A's model and A' must not show B's, whatever the process-wide caches hold. (A second
    ``at.run()`` of the same session is avoided: AppTest re-formats the model selectbox with
    its ``format_func`` outside the script run, where ``st.session_state`` is empty.)
    """
    first = _session(LLAMA_SMALL)
    second = _session(QWEN_SMALL)
    third = _session(LLAMA_SMALL)
    for at, own, other in ((first, "Tiny-Seven", "Tiny-Eleven"), (second, "Tiny-Eleven", "Tiny-Seven"),
                           (third, "Tiny-Seven", "Tiny-Eleven")):
        text = _text_of(at)
        assert own in text, f"{own} not shown in its own session"
        assert other not in text, f"{other} leaked into the session of {own}"
        assert at.session_state["custom_config"]["name"] == own
