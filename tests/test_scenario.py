"""Links: every input round-trips through the query string; bad links warn and fall back per field."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.dtypes import KV_DTYPE_CHOICES, WEIGHT_DTYPES
from kvplan.engines import ENGINES
from kvplan.errors import MESSAGES
from kvplan.presets import gpus, model_presets
from kvplan.scenario import SCHEMA_VERSION, Scenario, check_names, encode_config

MODELS = sorted(model_presets())
GPUS = sorted(gpus())


def _roundtrip(scenario: Scenario) -> Scenario:
    query = scenario.to_query()
    assert query["v"] == str(SCHEMA_VERSION)
    back, warnings = Scenario.from_query(query)
    assert warnings == []
    checked, more = check_names(back)
    assert more == []
    assert checked == back
    return back


@st.composite
def scenarios(draw) -> Scenario:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    return Scenario(
        model=draw(st.sampled_from(MODELS)),
        engine=draw(st.sampled_from(list(ENGINES))),
        kv_dtypes=draw(st.lists(st.sampled_from(KV_DTYPE_CHOICES), min_size=1, max_size=5, unique=True)),
        weight_dtype=draw(st.sampled_from(["auto", *WEIGHT_DTYPES])),
        gpu=draw(st.sampled_from(GPUS)),
        tp=tp, pp=pp, num_gpus=tp * pp * draw(st.integers(1, 8)),
        tokens=draw(st.integers(1, 100_000_000)),
        users=draw(st.integers(1, 10_000_000)),
        reserve_gib=draw(st.none() | st.sampled_from([0.0, 0.5, 1.25, 7.0, 100.0])),
        gpu_util=draw(st.none() | st.sampled_from([0.5, 0.9, 0.92, 0.95, 1.0])),
        block_size=draw(st.none() | st.integers(1, 1_000_000)),
        max_num_batched_tokens=draw(st.none() | st.integers(1, 100_000_000)),
        log_x=draw(st.booleans()), stack_kinds=draw(st.booleans()),
        prefix_tokens=draw(st.integers(0, 100_000_000)),
        output_tokens=draw(st.integers(1, 100_000_000)),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_scenarios_round_trip(scenario: Scenario) -> None:
    assert _roundtrip(scenario) == scenario


@pytest.mark.parametrize("model_id", MODELS)
def test_every_model_preset_round_trips(model_id: str) -> None:
    scenario = Scenario(model=model_id, kv_dtypes=["fp16", "int4"], gpu="h200", num_gpus=8, tp=8)
    assert _roundtrip(scenario) == scenario


@pytest.mark.parametrize("model_id", ["llama-2-7b", "deepseek-v3", "gemma-2-9b"])
def test_custom_config_round_trips(model_id: str) -> None:
    config = dict(model_presets()[model_id].config)
    scenario = Scenario(model="custom", custom_config={"name": "my model", **config})
    back = _roundtrip(Scenario(model="custom", custom_config=scenario.custom_config))
    assert back.custom_config["num_hidden_layers"] == config["num_hidden_layers"]
    assert encode_config(back.custom_config) == encode_config(scenario.custom_config)


BASE = {"m": "llama-2-13b", "g": "h200", "t": "8192", "u": "4", "e": "sglang", "kd": "fp16,int8"}


def _load(**changes: str) -> tuple[Scenario, list[str]]:
    query = {**BASE, **changes}
    scenario, warnings = Scenario.from_query(query)
    scenario, more = check_names(scenario)
    return scenario, warnings + more


def _assert_kept(scenario: Scenario, *skip: str) -> None:
    expected = {"model": "llama-2-13b", "gpu": "h200", "tokens": 8192, "users": 4,
                "engine": "sglang", "kv_dtypes": ["fp16", "int8"]}
    for field, value in expected.items():
        if field not in skip:
            assert getattr(scenario, field) == value, field


def test_clean_link_has_no_warnings() -> None:
    scenario, warnings = _load()
    assert warnings == []
    _assert_kept(scenario)


BAD_LINKS = [
    # (query change, field that falls back, default value, text the warning must contain)
    ({"zz": "1"}, None, None, "zz"),
    ({"t": "lots"}, "tokens", 32768, "'t'"),
    ({"t": "0"}, "tokens", 32768, "'t'"),
    ({"t": "999999999999"}, "tokens", 32768, "'t'"),
    ({"u": "-3"}, "users", 8, "'u'"),
    ({"gu": "1.5"}, "engine_settings.gpu_util", None, "'gu'"),
    ({"lx": "maybe"}, "log_x", True, "'lx'"),
    ({"m": "no-such-model"}, "model", "llama-3.1-8b", "no-such-model"),
    ({"g": "h900"}, "gpu", "h100-sxm", "h900"),
    ({"e": "tgi"}, "engine", "vllm", "tgi"),
    ({"wd": "fp3"}, "weight_dtype", "auto", "fp3"),
    ({"c": "not-a-config"}, "custom_config", None, "'c'"),
]


@pytest.mark.parametrize(("change", "field", "default", "needle"), BAD_LINKS,
                         ids=[next(iter(c)) + "=" + next(iter(c.values())) for c, *_ in BAD_LINKS])
def test_bad_link_warns_and_falls_back_for_that_field_only(change, field, default, needle) -> None:
    scenario, warnings = _load(**change)
    assert len(warnings) == 1, warnings
    assert needle in warnings[0]
    if field is not None:
        owner = scenario.engine_settings if field.startswith("engine_settings.") else scenario
        assert getattr(owner, field.removeprefix("engine_settings.")) == default
    _assert_kept(scenario, *(f for f in [field] if f))


def test_unknown_key_uses_its_message() -> None:
    _, warnings = _load(zz="1")
    assert warnings == [MESSAGES["link.unknown_key"].format(key="'zz'")]


def test_future_schema_version_warns_and_keeps_known_params() -> None:
    scenario, warnings = _load(v="99")
    assert warnings == [MESSAGES["link.future_version"].format(value="99")]
    _assert_kept(scenario)


def test_unknown_kv_dtype_drops_only_that_dtype() -> None:
    scenario, warnings = _load(kd="fp16,fp5,int8")
    assert len(warnings) == 1 and "'kd'" in warnings[0] and "fp5" in warnings[0]
    assert scenario.kv_dtypes == ["fp16", "int8"]
    _assert_kept(scenario, "kv_dtypes")


def test_all_kv_dtypes_unknown_falls_back_to_default() -> None:
    scenario, warnings = _load(kd="fp5")
    assert len(warnings) == 1
    assert scenario.kv_dtypes == Scenario().kv_dtypes
    _assert_kept(scenario, "kv_dtypes")


def test_kv_dtype_aliases_become_canonical_names() -> None:
    """Issue #32 item 11: each alias the link applies is shown (it was applied silently)."""
    scenario, warnings = _load(kd="fp8,bfloat16")
    assert warnings == ["link parameter 'kd'='fp8' was read as fp8_e4m3",
                        "link parameter 'kd'='bfloat16' was read as bf16"]
    assert scenario.kv_dtypes == ["fp8_e4m3", "bf16"]


def test_tp_pp_not_dividing_gpus_warns_and_fixes_gpu_count() -> None:
    scenario, warnings = _load(n="6", tp="4")
    assert len(warnings) == 1 and "'n'" in warnings[0]
    assert "tp × pp = 4" in warnings[0]
    assert (scenario.num_gpus, scenario.tp) == (4, 4)
    _assert_kept(scenario)


def test_custom_config_that_does_not_parse_falls_back() -> None:
    broken = encode_config({"model_type": "llama", "num_hidden_layers": 2})
    scenario, warnings = _load(c=broken, m="custom")
    # 'c' fails to parse and 'm'=custom is then not a preset: both named, both fall back.
    assert scenario.custom_config is None
    assert scenario.model == Scenario().model
    assert any("'c'" in w for w in warnings) and any("'m'" in w for w in warnings)
    _assert_kept(scenario, "model")


def test_every_bad_kind_at_once_keeps_the_good_params() -> None:
    scenario, warnings = _load(zz="1", g="h900", e="tgi", wd="fp3", u="x", m="nope")
    assert len(warnings) == 6
    assert (scenario.tokens, scenario.kv_dtypes) == (8192, ["fp16", "int8"])


def _all_configs():
    from pathlib import Path

    from kvplan.presets import model_presets

    root = Path(__file__).parent / "fixtures" / "configs"
    items = [(p.stem, json.loads(p.read_text())) for p in sorted(root.glob("*.json"))]
    items += [(pid, dict(p.config)) for pid, p in model_presets().items()]
    return items


@pytest.mark.parametrize(("name", "config"), _all_configs(), ids=[n for n, _ in _all_configs()])
def test_a_linked_config_rebuilds_the_same_architecture(name, config):
    """An uploaded config travels as its architecture keys (``c=``); whoever opens the link must
    get the same model: same layers, sizes and parameter estimate."""
    from kvplan.config_import import parse_config
    from kvplan.scenario import decode_config, encode_config

    original = parse_config(config, name="x")
    linked = parse_config(decode_config(encode_config(config)), name="x")
    assert linked == original


def test_architecture_keys_cover_every_key_the_importer_reads():
    """Guard against drift: every literal key config_import reads is in ARCHITECTURE_KEYS."""
    import re
    from pathlib import Path

    import kvplan.config_import as ci

    source = Path(ci.__file__).read_text()
    read = set()
    for call in re.finditer(r'cfg\.(?:get|int|has)\(([^)]*)\)', source):
        read |= set(re.findall(r'"([a-z_0-9]+)"', call.group(1)))
    read |= set(re.findall(r'data\.get\("([a-z_0-9]+)"', source)) - {"_name_or_path"}
    assert read <= set(ci.ARCHITECTURE_KEYS), sorted(read - set(ci.ARCHITECTURE_KEYS))


def test_an_unknown_model_in_a_link_is_one_short_warning_with_at_most_three_names():
    """A misspelt link model names three close presets in the dashboard's words; a one-character
    name is contained in almost every Hub id, so it gets no list (the fuzz found '0': 448 chars)."""
    from kvplan.scenario import Scenario, check_names

    fixed, warnings = check_names(Scenario(model="llama-3.1-70x"))
    assert fixed.model == Scenario().model
    assert warnings == ["link parameter 'm'='llama-3.1-70x' was not used: no preset is the checkpoint "
                        "'llama-3.1-70x'; did you mean meta-llama/Llama-3.1-70B, meta-llama/Llama-3.1-405B, "
                        "meta-llama/Llama-3.1-8B? Choose a model in the sidebar, or use your own config.json "
                        "there."]
    assert check_names(Scenario(model="0"))[1] == [
        "link parameter 'm'='0' was not used: no preset is the checkpoint '0'. Choose a model in the "
        "sidebar, or use your own config.json there."]
