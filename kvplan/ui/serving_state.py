"""The serving section's own inputs, carried in the link as ``sv=key:value;…``.

Each input has a type, a default derived from the scenario, and bounds or choices; the widgets
(``sv_<key>``) are created without ``value=`` and read their state from here, so a link, the Back
button and a seed button restore them exactly like the sidebar.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kvplan.engines import DEFAULT_ENGINE, VLLM_DEFAULT_BLOCK_SIZE, Engine, prefix_engines
from kvplan.engines.tiers import BACKEND_ENGINE, backends_for
from kvplan.errors import MESSAGES, KVPlanError, clip, is_plain_int
from kvplan.presets import gpus
from kvplan.recommend import TARGET_PRESETS
from kvplan.scenario import Scenario, plain_float, scenario_request_tokens
from kvplan.serving import SNAPSHOTS

SOURCES = {"paper": "ShareGPT-like (vLLM paper lengths)", "lognormal": "log-normal",
           "uniform": "uniform", "fixed": "fixed", "csv": "upload CSV"}
#: The prefix-sharing engines offered (id → engine object).
PREFIX_ENGINES = prefix_engines()
NOCACHE_METRICS = ("time_s", "flops", "peak_memory_bytes")


class WidgetState(Protocol):
    """What these helpers use of ``st.session_state`` (keyed by ``str | int``, so not a
    ``MutableMapping[str, Any]``); a plain ``dict[str, Any]`` fits too."""

    def __contains__(self, key: str, /) -> bool: ...
    def __getitem__(self, key: str, /) -> Any: ...
    def __setitem__(self, key: str, value: Any, /) -> None: ...
    def __delitem__(self, key: str, /) -> None: ...
    def get(self, key: str, default: Any, /) -> Any: ...


@dataclass(frozen=True)
class Input:
    kind: type
    default: Callable[[Scenario, WidgetState], Any]
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()

    def parse(self, text: str) -> Any:
        """The typed value of an ``sv`` entry; numbers as the top-level keys take them (ASCII digits
        only: ``'٣'`` and ``'1_000'`` are refused, ``is_plain_int`` / ``scenario.plain_float``)."""
        if self.kind is int:
            if not is_plain_int(text.strip(), signed=True):
                raise ValueError("expected a whole number of at most 18 digits")
            value: Any = int(text)
        elif self.kind is float:
            value = plain_float(text)
        else:
            value = self.kind(text)
        if self.choices and value not in self.choices:
            raise ValueError(f"choose one of {', '.join(map(str, self.choices))}")
        if self.low is not None and not self.low <= value <= self.high:
            raise ValueError(f"must be between {self.low:g} and {self.high:g}")
        if isinstance(value, float) and value != value:
            raise ValueError("not a number")
        return value


def _const(value: Any) -> Callable[[Scenario, WidgetState], Any]:
    return lambda _s, _state: value


def _prompt(s: Scenario) -> int:
    return max(s.prefix_tokens or 256, 1)


def _request(s: Scenario) -> int:
    """Tokens of one of the scenario's requests: its text plus its images' (``im``/``iw``/``ih``,
    ``scenario.scenario_request_tokens``); the text alone when the model cannot take them (the
    link's check has already said why)."""
    try:
        return scenario_request_tokens(s)
    except KVPlanError:
        return s.tokens


def _host_link(s: Scenario) -> float:
    gpu = gpus().get(s.gpu)
    return float(gpu.host_link_gbps or 32.0) if gpu else 32.0


def _pf_engine(s: Scenario) -> str:
    return s.engine if s.engine in PREFIX_ENGINES else DEFAULT_ENGINE


def _prefix_engine(s: Scenario, state: WidgetState) -> Engine:
    """The prefix-sharing engine the serving view compares (its widget's value, else the scenario's)."""
    return PREFIX_ENGINES.get(state.get("sv_pf_engine", ""), PREFIX_ENGINES[_pf_engine(s)])


def _of_backend(s: Scenario, state: WidgetState) -> str:
    """The offload tab's backend: the widget's when the scenario's engine has it, else its first."""
    own = backends_for(s.engine) or ("lmcache",)
    chosen = state.get("sv_of_backend", "")
    return chosen if chosen in own else own[0]


#: The offload tab's default size per backend: vLLM has none (an unset --kv-offloading-size turns the
#: tier off), so 100 GiB to start from; LMCache's max_local_cpu_size default 5.0; HiCache 0 = ratio.
_OF_SIZE = {"native": 100.0, "lmcache": 5.0, "hicache": 0.0}


INPUTS: dict[str, Input] = {
    "source": Input(str, _const("paper"), choices=tuple(SOURCES)),
    "max_len": Input(int, lambda s, _: min(max(_request(s), 2), 10_000_000), 2, 10_000_000),
    "n": Input(int, _const(2000), 1, 100_000),
    "seed": Input(int, _const(0), 0, 2**31 - 1),
    "prompt_fixed": Input(int, lambda s, _: _prompt(s), 1, 10_000_000),
    "output_fixed": Input(int, lambda s, _: max(s.output_tokens, 1), 1, 10_000_000),
    "prompt_low": Input(int, _const(1), 1, 10_000_000),
    "output_low": Input(int, _const(1), 1, 10_000_000),
    "prompt_high": Input(int, lambda s, _: _prompt(s) * 2, 1, 10_000_000),
    "output_high": Input(int, lambda s, _: max(s.output_tokens, 1) * 2, 1, 10_000_000),
    "prompt_mean": Input(float, lambda s, _: float(_prompt(s)), 1.0, 1e7),
    "output_mean": Input(float, lambda s, _: float(max(s.output_tokens, 1)), 1.0, 1e7),
    "prompt_sigma": Input(float, _const(1.0), 0.0, 5.0),
    "output_sigma": Input(float, _const(1.0), 0.0, 5.0),
    "block": Input(int, lambda s, _: min(s.engine_settings.block_size or VLLM_DEFAULT_BLOCK_SIZE, 4096),
                   1, 4096),
    "snapshot": Input(str, _const("in_flight"), choices=SNAPSHOTS),
    "pf_engine": Input(str, lambda s, _: _pf_engine(s), choices=tuple(PREFIX_ENGINES)),
    "pf_unit": Input(int, lambda s, state: min(_prefix_engine(s, state)
                                               .shared_prefix_unit(s.engine_settings.block_size) or 1,
                                               4096), 1, 4096),
    "ram": Input(float, _const(512.0), 1.0, 1e6),
    "link": Input(float, lambda s, _: _host_link(s), 0.1, 10_000.0),
    "q_bits": Input(int, _const(4), choices=(4, 2)),
    "q_group": Input(int, _const(64), 8, 1024),
    "q_resid": Input(int, _const(128), 1, 100_000),
    "static_len": Input(int, lambda s, _: _request(s), 1, 100_000_000),
    "nc_new": Input(int, lambda s, _: min(s.output_tokens, 100_000), 1, 100_000),
    "nc_metric": Input(str, _const("time_s"), choices=NOCACHE_METRICS),
    # the recommend tab (vw=recommend): traffic, lengths and targets
    "rc_traffic": Input(str, _const("users"), choices=("users", "rps")),
    "rc_users": Input(int, lambda s, _: s.users, 0, 10_000_000),
    "rc_rps": Input(float, _const(10.0), 0.0, 1e7),
    "rc_prompt_kind": Input(str, _const("fixed"), choices=("fixed", "lognormal", "csv")),
    "rc_prompt_tokens": Input(int, lambda s, _: max(min(s.prefix_tokens, s.tokens), 1), 1, 10_000_000),
    "rc_prompt_mean": Input(float, lambda s, _: float(max(min(s.prefix_tokens, s.tokens), 1)), 1.0, 1e7),
    "rc_prompt_sigma": Input(float, _const(1.0), 0.0, 5.0),
    "rc_output_kind": Input(str, _const("fixed"), choices=("fixed", "lognormal", "csv")),
    "rc_output_tokens": Input(int, lambda s, _: s.output_tokens, 1, 10_000_000),
    "rc_output_mean": Input(float, lambda s, _: float(s.output_tokens), 1.0, 1e7),
    "rc_output_sigma": Input(float, _const(1.0), 0.0, 5.0),
    "rc_preset": Input(str, _const("mlperf-llama2-70b-interactive"), choices=(*TARGET_PRESETS, "custom")),
    "rc_ttft": Input(float, _const(450.0), 0.0, 1e7),
    "rc_tpot": Input(float, _const(40.0), 0.0, 1e6),
    "rc_pct": Input(str, _const("p99"), choices=("p99", "p50")),
    "rc_maxctx": Input(int, _const(0), 0, 100_000_000),
    "rc_eff": Input(float, _const(1.0), 0.05, 1.0),
    "rc_maxgpus": Input(int, _const(8), choices=(1, 2, 4, 8, 16, 32, 64)),
    # the offload tab (vw=offload): the tier, its size, the node's RAM, the conversations sharing it
    "of_backend": Input(str, _of_backend, choices=tuple(BACKEND_ENGINE)),
    "of_size": Input(float, lambda s, state: _OF_SIZE[_of_backend(s, state)], 0.0, 1e6),
    "of_ram": Input(float, _const(0.0), 0.0, 1e6),
    "of_sessions": Input(int, _const(0), 0, 1_000_000_000),
}


def bounds(key: str) -> tuple[Any, Any]:
    """A widget's min and max: the bounds the link's ``sv`` values are checked against."""
    spec = INPUTS[key]
    return spec.kind(spec.low), spec.kind(spec.high)


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _defaults(state: WidgetState) -> dict[str, Any]:
    """The default each ``sv_*`` widget started from (one state entry, not one per widget)."""
    if "_sv_defaults" not in state:
        state["_sv_defaults"] = {}
    return state["_sv_defaults"]


def _values(state: WidgetState) -> dict[str, Any]:
    """The last value of every ``sv_*`` widget, kept while its tab is closed."""
    if "_sv_values" not in state:
        state["_sv_values"] = {}
    return state["_sv_values"]


def push(scenario: Scenario, state: WidgetState) -> list[str]:
    """Set every ``sv_*`` input from the link (or its default); one warning per rejected value.

    Only the remembered values change here; the widget keys are dropped, and ``ensure`` sets each
    from them when its widget is next drawn. A key set here while its widget is not drawn would
    outlive the widget: Streamlit brings that value back after the tab that drew it closes (a
    length of 8,192 from the first link returning in ``sv=`` after the context became 65,536)."""
    warnings: list[str] = []
    for key in scenario.serving:
        if key not in INPUTS:
            warnings.append(MESSAGES["link.unknown_key"].format(key=f"'sv' entry {clip(key)!r}"))
    for key, spec in INPUTS.items():
        text = scenario.serving.get(key)
        value = spec.default(scenario, state)
        if text is not None:
            try:
                value = spec.parse(text)
            except (ValueError, TypeError) as exc:
                warnings.append(MESSAGES["link.bad_value"].format(
                    key=f"sv:{key}", value=clip(text), why=str(exc)[:80]))
        if f"sv_{key}" in state:
            del state[f"sv_{key}"]
        _values(state)[key] = value
        _defaults(state)[key] = spec.default(scenario, state)
    return warnings


def ensure(key: str, scenario: Scenario, state: WidgetState) -> str:
    """The widget key for ``key``. Its state starts at the default and follows the default while
    the user has not changed it (e.g. a length that tracks the scenario's context)."""
    widget, remembered, values = f"sv_{key}", _defaults(state), _values(state)
    default = INPUTS[key].default(scenario, state)
    if widget not in state:  # first use, or the serving tab was closed (Streamlit drops its state)
        state[widget] = values.get(key, default)
    if state[widget] == remembered.get(key) and default != state[widget]:
        state[widget] = default
    remembered[key] = default
    values[key] = state[widget]
    return widget


def collect(scenario: Scenario, state: WidgetState) -> dict[str, str]:
    """The ``sv`` values the user chose (different from the default they started from)."""
    out: dict[str, str] = {}
    values, defaults = _values(state), _defaults(state)  # read once: each read takes the state's lock
    for key, spec in INPUTS.items():
        value = state.get(f"sv_{key}", values.get(key))
        if value is None:
            continue
        default = defaults[key] if key in defaults else spec.default(scenario, state)
        if value != default:
            out[key] = _text(value)
    return out
