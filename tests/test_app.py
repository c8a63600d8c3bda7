"""The Streamlit app through AppTest: every preset and engine runs, shown numbers equal the core's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from md_text import unmd
from streamlit.testing.v1 import AppTest

from kvplan.capacity import fit
from kvplan.config_import import parse_config
from kvplan.engines import ENGINES
from kvplan.errors import MESSAGES, md
from kvplan.plan import make_plan
from kvplan.presets import load_model, model_presets
from kvplan.report import named_scenario
from kvplan.scenario import Scenario, scenario_fit_query, scenario_gpu, scenario_plan
from kvplan.ui.sidebar import VIEWS
from kvplan.ui.theme import fmt_bytes

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)

APP = Path(__file__).resolve().parent.parent / "app.py"
CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def make_app(**params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(params)
    at.run()
    return at


def drawn_charts(at: AppTest) -> int:
    """Charts on the page: Plotly charts and the static SVG images of a view's first chart
    (kvplan/ui/chart_slot.py; the dashboard draws no other image)."""
    images = [i for i in at.get("image") if i.proto.imgs[0].url.startswith("data:image/svg+xml;base64,")]
    assert len(images) == len(at.get("image"))
    return len(at.get("plotly_chart")) + len(images)


def open_boxes(at: AppTest, *keys: str) -> AppTest:
    """Open the lazy expanders ``keys`` (default: all of ``kvplan.ui.lazy.BOXES``) and rerun, as a
    click on each would: their content runs only while open."""
    from kvplan.ui.lazy import BOXES

    for key in keys or BOXES:
        at.session_state[key] = True
    return at.run()


def no_errors(at: AppTest) -> None:
    """No exception and no st.error anywhere (expected refusals are st.info)."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def metric(at: AppTest, prefix: str):
    found = [m for m in at.metric if m.label.startswith(prefix)]
    assert found, [m.label for m in at.metric]
    return found[0]


def exact(at: AppTest) -> dict[str, int]:
    """The 'Exact: kpi=value · …' first line of the caption the KPI view renders."""
    text = next(c.value for c in at.caption if c.value.startswith("Exact: ")).split("  \n")[0]
    pairs = (item.split("=") for item in text.removeprefix("Exact: ").split(" · "))
    return {k: int(v.replace(",", "")) for k, v in pairs}


def expected(scenario: Scenario, arch=None):
    arch = arch or load_model(scenario.model)
    return fit(make_plan(arch, scenario_gpu(scenario), scenario_fit_query(scenario)))


def assert_matches(at: AppTest, scenario: Scenario, arch=None) -> None:
    result = expected(scenario, arch)
    shown = exact(at)
    assert shown["kv_budget"] == result.kv_budget_bytes
    assert shown["weights_per_gpu"] == result.weights_bytes
    assert shown["kv_per_request"] == result.kv_bytes_per_request
    assert shown["max_requests"] == result.max_requests
    assert shown["max_context"] == result.max_tokens_per_request
    assert metric(at, "KV budget per GPU").value == fmt_bytes(result.kv_budget_bytes)
    assert f"{result.kv_budget_bytes:,} B" in metric(at, "KV budget per GPU").proto.help
    assert metric(at, "Max concurrent requests").value == f"{result.max_requests:,}"


@pytest.mark.parametrize("model_id", list(model_presets()))
def test_every_preset_runs(model_id):
    at = make_app(m=model_id)
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="w_model").value == model_id
    assert drawn_charts(at) == 1  # only the open view runs
    assert exact(at)["max_requests"] == expected(Scenario(model=model_id)).max_requests


def test_a_hub_id_link_selects_its_preset_labelled_by_hub_id():
    """``?m=<hub id>`` in any case opens that checkpoint; the model box labels every preset by its
    Hub id (and short id), which is what typing in the box filters on."""
    at = make_app(m="meta-llama/LLAMA-3.1-8B")
    assert not at.exception, [e.value for e in at.exception]
    # another name of the same preset is the same question: answered, not held as an unusable link
    assert not any("This link asks for" in m.value for m in at.markdown), [m.value for m in at.markdown]
    assert any("Fits" in m.value or "fit" in m.value for m in at.markdown)
    box = at.selectbox(key="w_model")
    assert box.value == "llama-3.1-8b"
    labels = box.options
    assert "meta-llama/Llama-3.1-8B (llama-3.1-8b)" in labels
    assert "Qwen/Qwen3-235B-A22B-FP8" in labels
    assert len(labels) == len(model_presets())


VIEW_CHARTS = {"context": 1, "users": 1, "memory": 1, "requests": 2, "designs": 1, "serving": 7,
               "recommend": 1, "offload": 1}


@pytest.mark.parametrize("view", list(VIEW_CHARTS))
@pytest.mark.parametrize("model_id", ["llama-3.1-8b", "gemma-3-27b", "deepseek-v3",
                                      "qwen3-next-80b-a3b", "llama-4-scout"])
def test_every_view_runs(view, model_id):
    """Each view (a lazy tab named by vw=) draws its charts for dense, 5:1 hybrid, MLA, recurrent
    and chunked models; the other views do not run."""
    at = make_app(m=model_id, vw=view)
    no_errors(at)
    charts = drawn_charts(at)
    assert charts >= VIEW_CHARTS[view] - (1 if view == "serving" else 0), charts
    assert at.session_state["w_view"] == VIEWS[view]


def test_switching_the_view_updates_the_link():
    at = make_app(m="llama-3.1-8b")
    assert "vw" not in at.query_params
    at.session_state["w_view"] = VIEWS["memory"]
    at.run()
    no_errors(at)
    assert at.query_params["vw"] in ("memory", ["memory"])


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_engine_runs(engine):
    """Gemma 2 (sliding + full layers) on every engine that serves it; TensorRT-LLM's PyTorch
    backend has no Gemma 2 model class, so it runs Gemma 3 (served) and names the refusal for 2."""
    model = "gemma-3-12b" if engine == "trtllm" else "gemma-2-9b"
    at = make_app(e=engine, m=model)
    no_errors(at)
    assert_matches(at, Scenario(engine=engine, model=model))
    if engine == "trtllm":
        refused = make_app(e=engine, m="gemma-2-9b")
        assert any("does not serve Gemma2ForCausalLM" in e.value for e in refused.error)
        assert not refused.exception


def test_inputs_change_the_numbers_to_the_core_values():
    at = make_app()
    no_errors(at)
    assert_matches(at, Scenario())
    at.selectbox(key="w_model").select("qwen3-8b").run()
    assert_matches(at, Scenario(model="qwen3-8b"))
    at.multiselect(key="w_kd").set_value(["fp8_e4m3", "bf16"]).run()
    scenario = Scenario(model="qwen3-8b", kv_dtypes=["fp8_e4m3", "bf16"])
    assert_matches(at, scenario)
    at.selectbox(key="w_gpu").select("a100-40gb-sxm").run()
    scenario = scenario.model_copy(update={"gpu": "a100-40gb-sxm"})
    assert_matches(at, scenario)
    at.number_input(key="w_tokens_exact").set_value(5000).run()
    scenario = scenario.model_copy(update={"tokens": 5000})
    assert at.select_slider(key="w_tokens").value == 5000
    assert_matches(at, scenario)
    at.number_input(key="w_users").set_value(3).run()
    scenario = scenario.model_copy(update={"users": 3})
    assert_matches(at, scenario)
    no_errors(at)
    query = at.query_params
    assert query["m"] == ["qwen3-8b"] or query["m"] == "qwen3-8b"
    assert Scenario.from_query(dict(query))[0] == scenario


def test_bytes_per_token_card_is_exact():
    at = make_app(m="llama-2-7b", kd="fp16")
    assert exact(at)["kv_per_token"] == 524_288
    assert metric(at, "KV bytes per token").value == "512.00 KiB"
    assert "524,288 B" in metric(at, "KV bytes per token").proto.help


def test_budget_section_shows_release_capacity_and_reserve_terms():
    """Issue #14 item 4: Llama-2-7B fp16 on an H100 at 4,096 tokens (tests/test_cli.py
    test_fit_json_numbers derives every number): the CUDA total with its source beside nvidia-smi's
    and the marketed figure, each reserve term with its formula, and the budget (pinned to v0.33:
    ``ev=0.33``; the budget 1,048,576 B below its value before vLLM's RoPE cos/sin cache, 4,096 × 128
    × 2 B, joined the weights)."""
    from kvplan.engines import get_engine

    at = make_app(m="llama-2-7b", kd="fp16", t="4096", u="1", ev="0.33")
    no_errors(at)
    assert not at.table  # the lazy box builds its table only when opened
    assert any("vLLM (v1 paged blocks) · vLLM v0\\.33" in c.value for c in at.caption)  # md-escaped
    at = open_boxes(at, "box_budget")
    table = next(t for t in at.table if "reserve: activation_peak" in t.value.index)
    rows = table.value
    assert rows.loc["capacity (CUDA total)", "bytes"] == "85,027,979,264"
    assert "cuda_total, measured" in rows.loc["capacity (CUDA total)", "formula"]
    assert rows.loc["nvidia-smi total", "bytes"] == "85,520,809,984"
    assert rows.loc["marketed", "bytes"] == "80,000,000,000"
    assert rows.loc["reserve: activation_peak", "bytes"] == "-742,391,808"
    assert rows.loc["reserve: non_torch", "bytes"] == "-143,129,785"
    assert rows.loc["reserve: cuda_graphs", "bytes"] == "-408,662,949"
    assert "gpu_model_runner.py" in rows.loc["reserve: activation_peak", "source"]
    assert rows.loc["KV budget", "bytes"] == "63,453,676,573"
    assert any(c.value == "Rules of vLLM v0\\.33\\." for c in at.caption)
    # one term replaced from the sidebar (inside the lazy "Engine settings" box) travels in the
    # link (rt=) and stays applied, and named above the box, once the box is closed
    open_boxes(at, "w_engine_box")
    at.text_input(key="w_rt").set_value("non_torch=1").run()
    no_errors(at)
    assert exact(at)["kv_budget"] == 63_453_676_573 + 143_129_785 - (1 << 30)
    assert at.query_params["rt"] in (["non_torch:1.0"], "non_torch:1.0")
    at.session_state["w_engine_box"] = False
    at.run()
    no_errors(at)
    assert exact(at)["kv_budget"] == 63_453_676_573 + 143_129_785 - (1 << 30)
    # an explicit release other than the newest is itself a changed setting, named first
    release = "" if get_engine("vllm@0.33") is get_engine("vllm") else "release vLLM v0\\.33, "
    assert any(c.value.startswith(f"Engine settings changed: {release}reserve terms non\\_torch\\=1")
               for c in at.caption), [c.value for c in at.caption]
    open_boxes(at, "w_engine_box")
    at.text_input(key="w_rt").set_value("bogus=1").run()
    assert any("Reserve terms" in e.value for e in at.error)


def test_release_selector_lists_v020_to_v025_and_applies_the_linked_one():
    """The release selector is generated from ``VLLM_RELEASES`` (``latest``, then every record's key,
    newest first): the link's ``ev=0.20`` selects
    vLLM v0.20.1–v0.20.2, whose sorting sampler warm-up gives the budget
    ``tests/test_cli.py`` ``test_fit_engine_version_0_20_sorts_in_the_sampler_warm_up`` derives
    (62,918,116,381 B; 62,919,164,957 before vLLM's 1,048,576 B RoPE cache joined the weights)."""
    at = open_boxes(make_app(m="llama-2-7b", kd="fp16", t="4096", u="1", ev="0.20"), "w_engine_box")
    no_errors(at)
    select = at.selectbox(key="w_ev")
    # 0.30 and 0.28 split off 0.32 and 0.29 (issue #26: capture sizes with draft tokens)
    listed = ["0.33", "0.32", "0.30", "0.29", "0.28", "0.27", "0.26", "0.25", "0.24", "0.20", "0.20.0",
              "0.19"]
    start = select.options.index("0.33")  # after "latest" and any newer release
    assert select.options[0] == "latest" and select.options[start:start + 12] == listed
    assert select.value == "0.20"
    assert exact(at)["kv_budget"] == 62_918_116_381
    assert any("vLLM v0\\.20\\.1–v0\\.20\\.2" in c.value for c in at.caption)


def _llama_config() -> dict:
    config = json.loads((CONFIGS / "llama.json").read_text())
    return {**config, "num_hidden_layers": 20, "name": "my-test-llama"}


def test_pasted_config_is_used_and_carried_in_the_link():
    config = _llama_config()
    at = open_boxes(make_app(), "w_config_box")
    at.text_area(key="w_paste").input(json.dumps(config))
    at.button(key="w_paste_go").click().run()
    no_errors(at)
    assert at.selectbox(key="w_model").value == "custom"
    arch = parse_config(config, name="my-test-llama")
    assert_matches(at, Scenario(model="custom", custom_config=config), arch)
    params = {k: at.query_params[k] for k in at.query_params}
    assert params["m"] in ("custom", ["custom"]) and "c" in params
    # the link alone rebuilds the same model
    again = make_app(**{k: v if isinstance(v, str) else v[-1] for k, v in params.items()})
    no_errors(again)
    assert exact(again) == exact(at)


def test_pasted_config_is_used_on_commit_without_the_button():
    """Issue #33 item 9: Ctrl+Enter (a committed text area, what AppTest's ``input`` + run sends)
    uses the config, and the box is emptied."""
    config = _llama_config()
    at = open_boxes(make_app(), "w_config_box")
    at.text_area(key="w_paste").input(json.dumps(config)).run()
    no_errors(at)
    assert at.selectbox(key="w_model").value == "custom"
    assert_matches(at, Scenario(model="custom", custom_config=config), parse_config(config, name="x"))
    assert at.text_area(key="w_paste").value == ""  # the model keeps what it needs


def test_unreadable_config_shows_error_and_keeps_model():
    at = open_boxes(make_app(m="qwen3-8b"), "w_config_box")
    before = exact(at)
    at.text_area(key="w_paste").input('{"model_type": "llama", ')
    at.button(key="w_paste_go").click().run()
    assert not at.exception
    assert any("not valid JSON" in unmd(e.value) and "keeping the previous model" in unmd(e.value)
               for e in at.error)
    assert at.selectbox(key="w_model").value == "qwen3-8b"
    assert exact(at) == before
    at.text_area(key="w_paste").input('{"model_type": "llama"}')
    at.button(key="w_paste_go").click().run()
    assert any("missing" in unmd(e.value) for e in at.error)
    assert at.selectbox(key="w_model").value == "qwen3-8b"


@pytest.mark.parametrize(("params", "name"), [
    ({"e": "tgi"}, "'e'"),
    ({"kd": "bf16,fp7"}, "'kd'"), ({"t": "lots"}, "'t'"), ({"zz": "1"}, "zz"),
])
def test_bad_link_param_warns_and_falls_back(params, name):
    at = make_app(**params)
    assert not at.exception
    assert any(name in unmd(w.value) for w in at.warning), [unmd(w.value) for w in at.warning]
    assert exact(at)  # the rest of the app still renders


BAD_LINK = {"v": "1", "m": "llama-3.1-70x", "t": "-5", "u": "abc", "g": "h100"}


def test_link_with_an_unusable_model_and_gpu_answers_nothing_and_keeps_the_link():
    """Issue #33 item 1: no "Fits" for the default model; what was asked, what is missing, the
    closest presets as links (the typed link with that value); the URL stays as typed over reruns
    until the user changes something, then the usual answer and link follow."""
    at = make_app(**BAD_LINK)
    assert not at.exception and not at.success and not at.metric
    (error,) = [unmd(e.value) for e in at.error]
    model, gpu, rest = error.split("\n\n")
    assert model == (
        "This link asks for the model **llama-3.1-70x**, which is not a model preset here. Closest: "
        "[llama-3.1-70b](?v=1&m=llama-3.1-70b&t=-5&u=abc&g=h100), "
        "[llama-3.1-405b](?v=1&m=llama-3.1-405b&t=-5&u=abc&g=h100), "
        "[llama-3.1-8b](?v=1&m=llama-3.1-8b&t=-5&u=abc&g=h100).")
    assert gpu == (
        "This link asks for the accelerator **h100**, which is not an accelerator here. Closest: "
        "[h100-nvl](?v=1&m=llama-3.1-70x&t=-5&u=abc&g=h100-nvl), "
        "[h100-pcie](?v=1&m=llama-3.1-70x&t=-5&u=abc&g=h100-pcie), "
        "[h100-sxm](?v=1&m=llama-3.1-70x&t=-5&u=abc&g=h100-sxm).")
    assert rest.startswith("No answer is shown for another model or accelerator")
    warnings = [unmd(w.value) for w in at.warning]
    assert [w.split(" was not used")[0] for w in warnings] == ["link parameter 't'='-5'",
                                                               "link parameter 'u'='abc'"]
    assert not any("python -m kvplan" in text for text in [error, *warnings])
    assert dict(at.query_params) == BAD_LINK
    at.run()
    assert dict(at.query_params) == BAD_LINK and len(at.error) == 1 and not at.metric
    at.selectbox(key="w_model").set_value("llama-3.1-70b").run()
    assert not at.error and at.metric
    assert dict(at.query_params) == {"v": "1", "m": "llama-3.1-70b"}


def test_link_with_an_unusable_config_names_it():
    at = make_app(m="custom", c="not-base64!", t="4096")
    (error,) = [unmd(e.value) for e in at.error]
    assert error.startswith("The link's config.json (c=…) cannot be used (see the note below)")
    assert any(unmd(w.value).startswith("link parameter 'c'=") for w in at.warning)
    assert not any("'m'=" in unmd(w.value) for w in at.warning) and not at.metric


def test_bad_param_falls_back_for_that_parameter_only():
    at = make_app(m="nope", g="a100-80gb-sxm", t="2048")
    assert at.selectbox(key="w_model").value == Scenario().model
    assert at.selectbox(key="w_gpu").value == "a100-80gb-sxm"
    assert at.select_slider(key="w_tokens").value == 2048


def test_back_button_link_change_wins_over_widget_state():
    at = make_app(t="2048")
    at.number_input(key="w_users").set_value(5).run()
    at.query_params["t"] = "8192"  # what Back / an edited URL does
    at.query_params["u"] = "2"
    at.run()
    assert at.select_slider(key="w_tokens").value == 8192
    assert at.number_input(key="w_users").value == 2


def test_seed_buttons_set_the_scenario():
    at = open_boxes(make_app(), "box_seeds")
    at.button(key="seed_opt-13b-vllm-paper").click().run()
    no_errors(at)
    assert at.selectbox(key="w_model").value == "opt-13b"
    assert at.selectbox(key="w_gpu").value == "a100-40gb-sxm"
    assert_matches(at, named_scenario("opt-13b-vllm-paper"))
    at.button(key="seed_llama-2-7b-fp16").click().run()
    assert exact(at)["kv_per_token"] == 524_288


def test_lazy_boxes_send_no_widget_while_closed_and_keep_their_values():
    """Issue #16 (speed): the engine knobs and the serving workload run only while their expander
    is open; closed, their values stay in the session and in the link, and a change made while
    open survives closing."""
    from kvplan.engines import SETTINGS, get_engine
    from kvplan.ui.sidebar import SETTING_WIDGETS

    at = make_app(gu="0.8", bs="32", pc="0", o="77", t="4096")
    knobs = {SETTING_WIDGETS[name] for name in get_engine("vllm").setting_labels} | {"w_pf", "w_o"}
    rendered = {w.key for kind in ("number_input", "toggle", "selectbox", "text_input")
                for w in at.get(kind)}
    assert not knobs & rendered
    assert [c.value for c in at.sidebar.caption if "changed" in c.value] == [
        "Engine settings changed: " + md("gpu_memory_utilization (fraction) 0.8, "
                                         "Block size (tokens) 32, Prefix caching off")]
    asked = Scenario(tokens=4096, engine_settings={"gpu_util": 0.8, "block_size": 32,
                                                   "enable_prefix_caching": False})
    assert exact(at)["kv_per_request"] == fit(scenario_plan(asked)).kv_bytes_per_request
    open_boxes(at)
    rendered = {w.key for kind in ("number_input", "toggle", "selectbox", "text_input")
                for w in at.get(kind)}
    assert knobs <= rendered
    assert at.number_input(key="w_gu").value == 0.8 and at.selectbox(key="w_pc").value == "off"
    at.number_input(key="w_bs").set_value(64).run()
    at.number_input(key="w_o").set_value(99).run()
    for key in ("w_engine_box", "w_serving_box"):
        at.session_state[key] = False
    at.run().run()
    assert {k: at.query_params[k] for k in ("gu", "bs", "pc", "o")} in (
        {"gu": "0.8", "bs": "64", "pc": "0", "o": "99"},
        {"gu": ["0.8"], "bs": ["64"], "pc": ["0"], "o": ["99"]})
    assert {SETTINGS[n].key for n in ("gpu_util", "block_size")} == {"gu", "bs"}


def test_engine_release_lives_in_the_engine_box_and_the_link():
    """Issue #16 (first render): the release picker is inside the lazy "Engine settings" box; a
    linked release is kept while the box is closed, named above it, and used by the numbers."""
    from kvplan.engines import engine_with_release, get_engine

    at = make_app(ev="0.19", t="4096")
    assert "w_ev" not in {w.key for w in at.selectbox}
    assert at.session_state["w_ev"] == "0.19"
    release = get_engine(engine_with_release("vllm", "0.19")).release
    assert release != get_engine("vllm").release
    assert [c.value for c in at.sidebar.caption if "changed" in c.value] == [
        "Engine settings changed: " + md(f"release {release}")]
    assert exact(at)["kv_budget"] == fit(make_plan(load_model("llama-3.1-8b"), scenario_gpu(Scenario()),
                                                   scenario_fit_query(Scenario(tokens=4096,
                                                                               engine_version="0.19")))).kv_budget_bytes
    open_boxes(at, "w_engine_box")
    assert at.selectbox(key="w_ev").value == "0.19"
    at.selectbox(key="w_ev").set_value("latest").run()
    at.session_state["w_engine_box"] = False
    at.run()
    assert "ev" not in at.query_params and at.session_state["w_ev"] == "latest"
    assert not [c.value for c in at.sidebar.caption if "changed" in c.value]


def test_closed_engine_box_names_an_invalid_window_list():
    """TensorRT-LLM's per-layer window list is free text: typed wrong and the box closed, the
    caption above the box says it is not applied (the error under the widget is inside)."""
    at = open_boxes(make_app(e="trtllm"), "w_engine_box")
    at.text_input(key="w_aw").input("1024,x").run()
    assert any("max_attention_window" in unmd(e.value) for e in at.error)
    at.session_state["w_engine_box"] = False
    at.run()
    assert not at.error and "aw" not in at.query_params
    assert [unmd(c.value) for c in at.sidebar.caption if "changed" in c.value] == [
        "Engine settings changed: max_attention_window (tokens, per layer) '1024,x' "
        "(invalid, not applied)"]


def test_seed_button_sets_a_closed_engine_box():
    """A seed (or Back) sets knobs whose widgets are not rendered; opening the box shows them."""
    at = open_boxes(make_app(bs="64", o="77"), "box_seeds")
    assert at.query_params["bs"] in ("64", ["64"]) and not at.session_state["w_engine_box"]
    at.button(key="seed_opt-13b-vllm-paper").click().run()
    assert named_scenario("opt-13b-vllm-paper").engine_settings.block_size is None
    assert at.session_state["w_bs"] is None and "bs" not in at.query_params
    assert at.session_state["w_o"] == Scenario().output_tokens and "o" not in at.query_params
    open_boxes(at)
    assert at.number_input(key="w_bs").value is None
    assert at.number_input(key="w_o").value == Scenario().output_tokens


def test_charts_toggle_and_use_explicit_template():
    at = make_app(m="gemma-3-27b", sk="1", lx="0")
    no_errors(at)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert all(s["layout"]["template"]["layout"] for s in specs)
    kinds = {t.get("name", "") for t in specs[0]["data"]}
    assert any("sliding" in k for k in kinds) and any("full" in k for k in kinds)
    assert specs[0]["layout"]["xaxis"]["type"] == "linear"


def test_serving_inputs_round_trip_through_the_link():
    """Serving-section inputs travel as ``sv=key:value;…``: a link sets them, a change writes them."""
    at = make_app(m="llama-3.1-8b", vw="serving",
                  sv="ram:64.0;q_bits:2;source:fixed;prompt_fixed:300;bogus:1")
    no_errors(at)
    assert at.number_input(key="sv_ram").value == 64.0
    assert at.selectbox(key="sv_q_bits").value == 2
    assert at.selectbox(key="sv_source").value == "fixed"
    assert at.number_input(key="sv_prompt_fixed").value == 300
    assert any("'sv' entry 'bogus'" in unmd(w.value) for w in at.warning)
    at.number_input(key="sv_ram").set_value(128.0).run()
    sv = dict(item.split(":") for item in at.query_params["sv"].split(";"))
    assert sv["ram"] == "128.0" and sv["q_bits"] == "2" and sv["prompt_fixed"] == "300"
    assert "bogus" not in sv


def test_bad_serving_value_in_the_link_warns_and_keeps_the_rest():
    at = make_app(m="llama-3.1-8b", t="4096", vw="serving", sv="q_bits:3;ram:32.0")
    no_errors(at)
    assert any("sv:q_bits" in unmd(w.value) for w in at.warning)
    assert at.selectbox(key="sv_q_bits").value == 4
    assert at.number_input(key="sv_ram").value == 32.0
    assert at.select_slider(key="w_tokens").value == 4096


def test_custom_accelerator_from_the_link_and_the_sidebar():
    """g=custom with gm/gb/gf: a 48 GiB device = 51,539,607,552 B; the numbers follow its memory."""
    at = make_app(m="llama-3.1-8b", g="custom", gm="48.0", t="8192")
    no_errors(at)
    scenario = Scenario(model="llama-3.1-8b", gpu="custom", custom_gpu_gib=48.0, tokens=8192)
    assert scenario_gpu(scenario).capacity_bytes == 51_539_607_552
    assert_matches(at, scenario)
    at.number_input(key="w_gm").set_value(24.0).run()
    assert_matches(at, scenario.model_copy(update={"custom_gpu_gib": 24.0}))
    assert at.query_params["gm"] in ("24.0", ["24.0"])


def test_empty_paste_message():
    at = open_boxes(make_app(), "w_config_box")
    at.button(key="w_paste_go").click().run()
    prefix = MESSAGES["config.empty"].split("{source}")[1].strip()
    assert any(prefix in unmd(e.value) for e in at.error), [unmd(e.value) for e in at.error]
    assert at.selectbox(key="w_model").value == Scenario().model


def test_a_failing_view_is_reported_not_raised():
    def script():
        from kvplan.ui.views import guarded

        guarded("Broken view", lambda: 1 / 0)

    at = AppTest.from_function(script, default_timeout=30)
    at.run()
    assert not at.exception
    assert unmd(at.error[0].value).startswith("Broken view could not be drawn (ZeroDivisionError")


def test_serving_allocation_is_for_the_scenario_model_and_its_inputs():
    """Issue #16 item 6: the allocation chart uses the scenario's model and the link's block size
    and maximum length (not OPT-13B at 2,048 tokens, block 16)."""
    import json

    at = make_app(m="qwen3-8b", t="8192", vw="serving", sv="block:256;max_len:4096")
    no_errors(at)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    title = spec["layout"]["title"]["text"]
    assert "Qwen3-8B" in title and "block 256" in title and "max length 4,096" in title, title
    assert any("block 256 tokens" in c.value for c in at.caption)


def test_recommend_tab_shows_chart_table_and_links_with_the_core_memory():
    """vw=recommend: the Pareto chart and the ranked table; the first candidate's link opens a
    scenario whose KPI cards hold the same weights, KV budget and max requests as the table."""
    from kvplan.recommend import RecommendQuery, recommend

    at = make_app(m="llama-3.1-8b", vw="recommend")
    no_errors(at)
    assert at.session_state["w_view"] == VIEWS["recommend"]
    assert len(at.get("plotly_chart")) == 1
    table = next(d.value for d in at.dataframe if "link" in d.value.columns)
    scenario = Scenario(model="llama-3.1-8b")
    want = recommend(make_plan(load_model("llama-3.1-8b"), None, scenario_fit_query(scenario)),
                     RecommendQuery(
        users=8, prompt={"kind": "fixed", "value": 1024}, output={"kind": "fixed", "value": 512},
        kv_dtypes=("bf16", "fp8_e4m3"))).ranked
    first = table.iloc[0]
    assert (first["gpu"], first["max_requests"]) == (want.iloc[0]["gpu"], want.iloc[0]["max_requests"])
    params = dict(item.split("=", 1) for item in first["link"].lstrip("?").split("&"))
    opened = make_app(**params)
    no_errors(opened)
    shown = exact(opened)
    assert shown["weights_per_gpu"] == first["weights_per_gpu_bytes"]
    assert shown["kv_budget"] == first["kv_budget_bytes"]
    assert shown["max_requests"] == first["max_requests"]
    assert shown["kv_per_request"] == first["kv_bytes_per_request"]


def test_recommend_tab_proposes_xpyd_candidates():
    """The "Disaggregated prefill/decode (xPyD)" box adds xPyD rows beside the aggregated ones: the
    table's mode column names each, and an xPyD row's figures are the core's (recommend.pd_rows)."""
    from kvplan.recommend import RecommendQuery, recommend

    at = make_app(m="llama-3.1-8b", vw="recommend")
    at.checkbox(key="rc_disagg").check().run()
    no_errors(at)
    ranked = next(d.value for d in at.dataframe if "link" in d.value.columns)
    assert "mode" in ranked.columns
    split = [d.value for d in at.dataframe if "link" in d.value.columns and len(d.value)
             and (d.value["mode"] != "aggregated").all()]
    assert len(split) == 1  # the xPyD table beside the ranked one
    table = split[0]
    assert all(m.endswith("D") and "P" in m for m in table["mode"])
    assert any("xPyD candidates (x prefill + y decode" in c.value for c in at.caption)
    scenario = Scenario(model="llama-3.1-8b")
    want = recommend(make_plan(load_model("llama-3.1-8b"), None, scenario_fit_query(scenario)),
                     RecommendQuery(
        users=8, prompt={"kind": "fixed", "value": 1024}, output={"kind": "fixed", "value": 512},
        kv_dtypes=("bf16", "fp8_e4m3"), disagg=True)).ranked
    shown = table[table["mode"] != "aggregated"].iloc[0]
    core = want[want["mode"] != "aggregated"].iloc[0]
    assert (shown["mode"], shown["gpu"], shown["total_gpus"], shown["in_flight_bound"]) == (
        core["mode"], core["gpu"], core["total_gpus"], core["in_flight_bound"])


def test_recommend_tab_names_impossible_targets():
    at = make_app(m="llama-3.1-8b", vw="recommend")
    at.selectbox(key="sv_rc_preset").set_value("custom").run()
    at.number_input(key="sv_rc_tpot").set_value(0.001).run()
    assert not at.exception
    assert any("no candidate meets every constraint; the tightest is TPOT" in w.value for w in at.warning)
    sv = dict(item.split(":") for item in at.query_params["sv"].split(";"))
    assert sv == {"rc_preset": "custom", "rc_tpot": "0.001"}


def test_recommend_inputs_come_from_the_link():
    """sv=rc_… sets traffic and targets: 32 users, the MLPerf standard targets, p50."""
    at = make_app(m="llama-3.1-8b", vw="recommend", sv="rc_users:32;rc_preset:mlperf-llama2-70b;rc_pct:p50")
    no_errors(at)
    assert at.number_input(key="sv_rc_users").value == 32
    assert any("TTFT ≤ 2000 ms, TPOT ≤ 200 ms" in c.value for c in at.caption)
    assert any("Lengths at p50" in c.value for c in at.caption)


def test_architecture_support_status_is_shown():
    """Issue #15: the dashboard says whether the loaded config's model_type was checked against
    transformers (exact) or is sized by generic rules, next to the model."""
    from kvplan.scenario import encode_config

    at = make_app(m="llama-3.1-8b")
    assert any(":small[:gray[Architecture support: exact — model_type 'llama'" in unmd(m.value)
               for m in at.markdown if " on **" in m.value)
    config = {"model_type": "my_new_lm", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
              "intermediate_size": 128}
    custom = make_app(m="custom", c=encode_config(config))
    assert any(":small[:gray[Architecture support: generic rules — model_type 'my_new_lm' has not "
               "been checked" in unmd(m.value) for m in custom.markdown if " on **" in m.value)


def test_tables_past_int64_are_shown_not_refused():
    """Bytes of 10M requests of a huge model pass int64 (object columns of exact Python ints):
    Arrow cannot take them, so the table shows them as floats; ordinary columns stay as they are."""
    import pandas as pd

    from kvplan.ui.views import arrow_safe

    frame = pd.DataFrame({"kv_bytes": pd.Series([1, 1 << 70], dtype=object), "gpu": ["a", "b"],
                          "n": [1, 2]})
    shown = arrow_safe(frame)
    assert shown["kv_bytes"].tolist() == [1.0, float(1 << 70)] and shown["kv_bytes"].dtype == float
    assert shown["gpu"].tolist() == ["a", "b"] and shown["n"].dtype == frame["n"].dtype
    small = pd.DataFrame({"x": pd.Series([1, 2], dtype=object)})
    assert arrow_safe(small) is small


def test_serving_max_len_follows_the_context_and_stays_out_of_the_link():
    """Issue #33 item 5: after the exact context goes 8,192 → 65,536, opening Serving, then
    Recommend, then KV vs context neither brings 8,192 back nor puts ``sv=`` in the link; a value
    the user sets stays (and is carried)."""
    at = make_app(v="1", m="llama-3.1-70b", n="2", tp="2", t="8192", u="32")
    at.number_input(key="w_tokens_exact").set_value(65536).run()
    for view in ("serving", "recommend", "context"):
        at.session_state["w_view"] = VIEWS[view]
        at.run()
        assert not at.exception
        assert "sv" not in at.query_params, dict(at.query_params)
        if view == "serving":
            assert at.number_input(key="sv_max_len").value == 65536
            assert at.number_input(key="sv_static_len").value == 65536
    at.session_state["w_view"] = VIEWS["serving"]
    at.run()
    at.number_input(key="sv_max_len").set_value(5000).run()
    at.number_input(key="w_tokens_exact").set_value(16384).run()
    for view in ("recommend", "context", "serving"):
        at.session_state["w_view"] = VIEWS[view]
        at.run()
        assert at.query_params["sv"] == "max_len:5000", (view, dict(at.query_params))
    assert at.number_input(key="sv_max_len").value == 5000
    assert at.number_input(key="sv_static_len").value == 16384


def test_design_view_says_why_sliding_window_equals_gqa_per_token():
    """Issue #33 item 9: Llama-3.1-8B — GQA and the sliding-window variant both store 131,072 B per
    token; the caption says the window saves by holding fewer tokens, not bytes per token."""
    at = make_app(vw="designs")
    no_errors(at)
    caption = next(unmd(c.value) for c in at.caption if c.value.startswith("KV bytes per token"))
    assert "GQA 131,072 B · Sliding window 131,072 B" in caption
    assert caption.endswith(" A sliding window stores a token in as many bytes as GQA (the same KV "
                            "heads and head size); it saves by keeping only the window's last tokens "
                            "per layer, so its KV per request and requests that fit differ, not its "
                            "bytes per token.")
def test_lora_slots_are_a_row_of_the_budget_box():
    """Issue #26: ``lo=1&ml=4&lr=64`` (vLLM --enable-lora --max-loras 4 --max-lora-rank 64) puts the
    adapter slots in the KV-budget box, bytes as ``tests/test_vllm_lora.py`` derives them."""
    at = make_app(m="llama-3.1-8b", t="8192", u="1", ev="0.33", lo="1", ml="4", lr="64")
    no_errors(at)
    at = open_boxes(at, "box_budget")
    table = next(t for t in at.table if "reserve: lora_slots" in t.value.index)
    assert table.value.loc["reserve: lora_slots", "bytes"] == "-1,478,123,648"
    assert "rank 64" in table.value.loc["reserve: lora_slots", "formula"]


def test_speculative_decoding_is_a_row_of_the_budget_box():
    """Issue #26: ``sd=`` (vLLM --speculative-config, a draft model) puts the draft's weights and its
    capture sizes in the KV-budget box, bytes as ``tests/test_vllm_spec_decode.py`` derives them."""
    spec = '{"method":"draft_model","model":"llama-3.2-1b","num_speculative_tokens":4}'
    at = make_app(m="llama-3.1-8b", g="h100-sxm", t="8192", u="1", ev="0.33", sd=spec)
    no_errors(at)
    assert at.session_state["w_sd"] == spec
    at = open_boxes(at, "box_budget")
    table = next(t for t in at.table if "reserve: spec_draft_weights" in t.value.index)
    assert table.value.loc["reserve: spec_draft_weights", "bytes"] == "-2,488,406,016"  # + RoPE 16 MiB
    assert table.value.loc["reserve: spec_cuda_graphs", "bytes"] == "-48,077,994"


def test_speculative_config_of_the_wrong_draft_is_a_named_message():
    at = make_app(m="llama-3.1-8b", t="4096", ev="0.33",
                  sd='{"model":"Qwen/Qwen3-0.6B","num_speculative_tokens":3}')
    assert not at.exception
    assert any("vocabulary of 151,936 tokens" in unmd(e.value) for e in at.error)


def test_sglang_speculative_algorithm_from_the_link():
    """Issue #26 (SGLang): ``qa=``/``qp=`` (--speculative-algorithm / --speculative-draft-model-path)
    put the STANDALONE draft's weights in the KV-budget box (``tests/test_sglang_spec_decode.py``:
    2,520,776,704 B: 2,471,628,800 of tensors + the RoPE cache and allocator segments SGLang's
    loading holds); an unknown algorithm is a named message, not a traceback."""
    at = make_app(m="llama-3.1-8b", g="h100-sxm", t="8192", u="1", e="sglang", qa="STANDALONE",
                  qp="llama-3.2-1b")
    no_errors(at)
    assert at.session_state["w_qa"] == "STANDALONE"
    at = open_boxes(at, "box_budget")
    table = next(t for t in at.table if "reserve: spec_draft_weights" in t.value.index)
    assert table.value.loc["reserve: spec_draft_weights", "bytes"] == "-2,520,776,704"
    bad = make_app(m="llama-3.1-8b", t="4096", e="sglang", qa="MEDUSA")
    assert not bad.exception
    assert any("Unknown speculative algorithm name" in unmd(e.value) for e in bad.error)


def test_lora_on_a_model_it_cannot_size_is_a_named_message():
    at = make_app(m="mixtral-8x7b", t="4096", ev="0.33", lo="1")
    assert not at.exception
    assert any("has MoE experts" in unmd(e.value) for e in at.error)


@pytest.mark.parametrize("view", ["context", "users", "memory", "requests", "designs", "recommend"])
def test_charts_are_sent_without_the_mode_bar(view):
    """Plotly's mode bar is rebuilt on every draw (bench/README.md, issue #33): each chart of each
    view goes out with ``config={"displayModeBar": false}`` and nothing else."""
    at = make_app(vw=view)
    no_errors(at)
    if view in ("context", "users"):  # first drawn as a static image: the interactive chart
        at.toggle(key="w_interactive").set_value(True).run()
        no_errors(at)
    charts = at.get("plotly_chart")
    assert charts
    assert [json.loads(c.proto.config) for c in charts] == [{"displayModeBar": False}] * len(charts)


def test_every_plotly_chart_call_passes_the_chart_config():
    """Every ``st.plotly_chart`` call of the dashboard (those behind inputs included) passes
    ``config=chart_config()``."""
    calls = [line for path in sorted((Path(__file__).parents[1] / "kvplan" / "ui").glob("*.py"))
             for line in path.read_text().splitlines() if line.lstrip().startswith("st.plotly_chart(")]
    # 12 + the instances chart (ui/instances_view.py) + offload_view.py's two + chart_slot.py's one
    # (the context and users charts, behind "Interactive chart")
    assert len(calls) == 16
    assert all("config=chart_config()" in line for line in calls)


def test_offload_tab_inputs_live_in_the_link():
    """The offload tab's inputs are ``sv`` entries (``of_*``): a link opens them, a changed one goes
    back into the link, and a backend of another engine falls back to this engine's first."""
    at = make_app(m="llama-3.1-70b", g="h100-sxm", n="8", tp="8", t="131072", vw="offload",
                  sv="of_backend:lmcache;of_size:50.0;of_sessions:40")
    no_errors(at)
    assert at.session_state["sv_of_backend"] == "lmcache" and at.session_state["sv_of_size"] == 50.0
    assert any("10 sessions of 131,072 tokens" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) == 2  # sessions per tier; prefill:decode vs traffic
    at.session_state["sv_of_size"] = 100.0
    at.run()
    assert "of_size:100.0" in at.query_params["sv"]
    other = make_app(m="llama-3.1-8b", e="sglang", vw="offload", sv="of_backend:native")
    no_errors(other)
    assert other.session_state["sv_of_backend"] == "hicache"


def test_the_answer_names_the_request_cap_state_blocks_and_the_refusal() -> None:
    """Issue #28: the dashboard says, under the answer, the max_num_seqs cap and its source, the
    recurrent-state blocks and whether vLLM starts — here Qwen3.5-27B at 132,000 tokens on an
    H100-SXM (v0.33, memory fraction 0.92): 411 state blocks (the encoder cache of its vision tower
    counted; 413 before vLLM's MRoPE cos/sin cache, 4 × 262,144 × 64 × 2 = 134,217,728 B, joined the
    weights) < the default 1,024, with vLLM's own refusal text."""
    at = make_app(m="Qwen/Qwen3.5-27B", g="h100-sxm", t="132000", u="1", ev="0.33")
    plan = scenario_plan(Scenario(model="Qwen/Qwen3.5-27B", gpu="h100-sxm", tokens=132000, users=1,
                                  engine_version="0.33"))
    result = fit(plan)
    assert (result.state_blocks, result.max_num_seqs, result.starts) == (411, 1024, False)
    captions = [unmd(c.value) for c in at.caption if "Request cap" in c.value]
    assert len(captions) == 1
    assert captions[0].startswith("Request cap: max_num_seqs 1,024 (")
    assert " · 411 recurrent-state blocks · " in captions[0]
    assert "max_num_seqs (1024) exceeds available Mamba cache blocks (411)" in captions[0]


def test_first_chart_static_then_interactive_for_the_session():
    """The context view's first chart is its static SVG (the same lines, budget and limit as the
    Plotly figure, kvplan/ui/svg.py) until "Interactive chart" is on; then the Plotly chart with the
    figure's traces, and the users view too; off again, the images come back."""
    import base64

    at = make_app(m="llama-3.1-70b", n="2", tp="2", t="8192", u="32", kd="bf16,fp8_e4m3")
    no_errors(at)
    assert not at.get("plotly_chart") and len(at.get("image")) == 1
    svg = base64.b64decode(at.get("image")[0].proto.imgs[0].url.split(",", 1)[1]).decode()
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 430"')
    assert svg.count("<polyline") == 2 and "bf16 reserved" in svg and "fp8_e4m3 reserved" in svg
    assert "KV budget: " in svg and "model limit 131,072" in svg and "<script" not in svg
    assert at.toggle(key="w_interactive").value is False
    at.toggle(key="w_interactive").set_value(True).run()
    no_errors(at)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["name"] for t in spec["data"]] == ["bf16 reserved", "fp8_e4m3 reserved"]
    assert not at.get("image")
    at.session_state["w_view"] = VIEWS["users"]
    at.run()
    no_errors(at)
    assert len(at.get("plotly_chart")) == 1 and not at.get("image")
    at.toggle(key="w_interactive").set_value(False).run()
    assert not at.get("plotly_chart") and len(at.get("image")) == 1
