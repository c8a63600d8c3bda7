"""Scenario ⇄ URL ⇄ widgets: read the link (Back/Forward aware), build the sidebar, write the link."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import streamlit as st

from kvplan.arch import ModelArch
from kvplan.config_import import MAX_CONFIG_BYTES
from kvplan.dtypes import DTYPES, KV_DTYPE_CHOICES, WEIGHT_DTYPES
from kvplan.engines import (
    DEFAULT_ENGINE,
    MAX_JSON_CHARS,
    MAX_TEXT_CHARS,
    REGISTRY,
    SETTINGS,
    Engine,
    EngineSettings,
    Setting,
    engine_with_release,
    has_release_choice,
    release_choices,
)
from kvplan.errors import MESSAGES, KVPlanError, md, md_link_target, md_name
from kvplan.plan import resolve_engine
from kvplan.presets import GPU, gpus, model_presets
from kvplan.scenario import (
    BOUNDS,
    CUSTOM_GPU,
    CUSTOM_MODEL,
    MAX_CONTEXT_TOKENS,
    Scenario,
    closest_names,
    custom_arch,
    link_config,
    scenario_arch,
    scenario_gpu,
    unusable_names,
)
from kvplan.scenario import check_names as check_scenario_names
from kvplan.ui import lazy, serving_state, weights_view
from kvplan.ui.theme import fmt_tokens

MAX_UI_TOKENS = MAX_CONTEXT_TOKENS
#: Log-spaced context lengths for the slider (the current value is always added).
TOKEN_STEPS = sorted({1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, MAX_UI_TOKENS}
                     | {2**k for k in range(0, 24)})
#: Scenario field → widget key (session_state is the single source of truth for widgets).
WIDGETS: dict[str, str] = {
    "model": "w_model", "engine": "w_engine", "engine_version": "w_ev", "kv_dtypes": "w_kd",
    "weight_dtype": "w_wd",
    "gpu": "w_gpu", "num_gpus": "w_n", "tp": "w_tp", "pp": "w_pp", "tokens": "w_tokens",
    "users": "w_users", "reserve_gib": "w_reserve", "log_x": "w_lx", "stack_kinds": "w_sk",
    "prefix_tokens": "w_pf", "output_tokens": "w_o", "custom_gpu_gib": "w_gm",
    "custom_gpu_tbps": "w_gb", "custom_gpu_tflops": "w_gf", "view": "w_view", "instances": "w_in",
    "images": "w_im", "image_width": "w_iw", "image_height": "w_ih",
    "videos": "w_vn", "video_width": "w_vx", "video_height": "w_vy", "video_seconds": "w_vs",
    "video_fps": "w_vf",
}
#: The video widgets whose value must be more than 0 (``scenario.VIDEO_OPEN_LOW``): 0 is refused
#: under the widget and not applied.
_OPEN_LOW_WIDGETS = {"video_seconds": "Video length (s)", "video_fps": "Video frame rate (fps)"}
#: View id (link ``vw``) → tab label; the tabs widget keeps the label in ``w_view``.
VIEWS: dict[str, str] = {"context": "KV vs context", "users": "KV vs users",
                         "memory": "Memory per accelerator", "requests": "Requests that fit",
                         "designs": "Design comparison", "serving": "Serving trade-offs",
                         "recommend": "Recommend a deployment", "offload": "Offload tiers"}
#: Engine setting → widget key (``w_`` + its link key), from the one declaration of each setting.
SETTING_WIDGETS: dict[str, str] = {name: f"w_{setting.key}" for name, setting in SETTINGS.items()}
_TRISTATE = {"auto": None, "on": True, "off": False}


# ---------------------------------------------------------------- model resolution
def resolve_arch(scenario: Scenario) -> ModelArch:
    return scenario_arch(scenario)


def resolve_gpu(scenario: Scenario) -> GPU:
    return scenario_gpu(scenario)


# ---------------------------------------------------------------- link validation
def check_names(scenario: Scenario) -> tuple[Scenario, list[str]]:
    """The core's name checks (``kvplan.scenario.check_names``) plus the dashboard's token limit."""
    scenario, warnings = check_scenario_names(scenario)
    if scenario.tokens > MAX_UI_TOKENS:
        warnings.append(MESSAGES["link.bad_value"].format(
            key="t", value=f"{scenario.tokens:,}", why=f"above the dashboard's {MAX_UI_TOKENS:,}-token "
                                                       f"limit, so {MAX_UI_TOKENS:,} is used"))
        scenario = scenario.model_copy(update={"tokens": MAX_UI_TOKENS})
    return scenario, warnings


# ---------------------------------------------------------------- session state
def push_to_session(scenario: Scenario) -> list[str]:
    """Set every widget's state from a scenario (first load, Back/Forward, seed buttons);
    returns the warnings about serving-section values the link carried."""
    state = st.session_state
    for field, key in WIDGETS.items():
        value = getattr(scenario, field)
        state[key] = list(value) if isinstance(value, list) else value
    state["w_ev"] = scenario.engine_version or "latest"
    for name, key in SETTING_WIDGETS.items():
        value = getattr(scenario.engine_settings, name)
        kind = SETTINGS[name].kind
        if kind == "tristate":
            value = next(k for k, v in _TRISTATE.items() if v is value)
        elif kind in {"int_list", "json", "text"}:
            value = "" if value is None else SETTINGS[name].format(value)
        state[key] = value
    state["w_tokens_exact"] = scenario.tokens
    state["w_rt"] = format_reserve_terms(scenario.reserve_terms)
    state["w_view"] = VIEWS[scenario.view]
    state["custom_config"] = scenario.custom_config
    if scenario.weight_dtype == "auto":
        state["w_wd"] = "auto"
    return serving_state.push(scenario, state)


def apply_scenario(scenario: Scenario) -> None:
    """For button callbacks: load a scenario into the widgets (the URL follows on this run)."""
    push_to_session(scenario)
    st.session_state.pop("_config_error", None)


def sync_from_url() -> list[str]:
    """Read the link when it changed behind our back (first load, Back/Forward, edited URL)."""
    url_now: dict[str, str | list[str]] = {}
    for key in st.query_params:  # a repeated key keeps every value (from_query refuses it)
        values = st.query_params.get_all(key)
        url_now[key] = values[0] if len(values) == 1 else values
    state = st.session_state
    if url_now == state.get("_url_written"):
        return []
    blocked = state.get("_blocked_link")
    if blocked is not None and blocked["query"] == url_now:  # the typed link, still unanswered
        return list(blocked["warnings"])
    scenario, warnings = Scenario.from_query(url_now)
    scenario, more = check_names(scenario)
    warnings = warnings + more + push_to_session(scenario)
    if missing := unusable_names(url_now, scenario):
        # the model and accelerator problems are said by the blocked-link message instead (no CLI
        # hint); a config's own problem stays a warning, which the message points to
        keys = {"m" if key == "c" else key for key, _ in missing}
        warnings = [w for w in warnings if not any(w.startswith(f"link parameter '{k}'=") for k in keys)]
        state["_blocked_link"] = {"query": url_now, "missing": missing, "warnings": warnings,
                                  "widgets": None}
    else:
        state.pop("_blocked_link", None)
    return warnings


#: What each link key the blocked-link message can name asks for.
LINK_NOUNS = {"m": "model", "g": "accelerator", "c": "model"}


def blocked_link(scenario: Scenario) -> dict[str, Any] | None:
    """The link as typed while its model or accelerator cannot be used and the user has changed
    nothing since (``sync_from_url``): then no answer is shown for the stand-in defaults and the
    URL is not rewritten. The first change in the sidebar ends it."""
    state = st.session_state
    blocked = state.get("_blocked_link")
    if blocked is None:
        return None
    query = scenario.to_query()
    if blocked["widgets"] is None:  # the first run after the link: what the widgets then say
        blocked["widgets"] = query
    if blocked["widgets"] == query:
        return dict(blocked)
    del state["_blocked_link"]
    return None


def render_blocked_link(blocked: dict[str, Any]) -> None:
    """What the link asked, what is missing, the closest presets (each a link: the typed one with
    that value), and that nothing else is answered until the user picks one."""
    from urllib.parse import quote

    query: dict[str, Any] = blocked["query"]
    lines = []
    for key, value in blocked["missing"]:
        if key == "c":
            lines.append("The link's config.json (c=…) cannot be used (see the note below), so there "
                         "is no model to plan for.")
            continue
        kind: Literal["model", "gpu"] = "model" if key == "m" else "gpu"
        known = "a model preset" if kind == "model" else "an accelerator"
        text = f"This link asks for the {LINK_NOUNS[key]} **{md_name(value)}**, which is not {known} here."
        matches = closest_names(value, kind)
        if matches:
            links = []
            for match in matches:
                fixed = {**{k: v for k, v in query.items() if isinstance(v, str)}, key: match}
                target = "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe=',')}" for k, v in fixed.items())
                links.append(f"[{md_name(match)}]({md_link_target(target)})")
            text += " Closest: " + ", ".join(links) + "."
        else:
            text += (" No preset is close; choose one in the sidebar"
                     + (" or upload its config.json (Use your own config.json)." if kind == "model" else "."))
        lines.append(text)
    lines.append("No answer is shown for another model or accelerator: the sidebar shows the defaults "
                 "until you choose, and the link stays as typed until you change something.")
    st.error("\n\n".join(lines))


def write_url(scenario: Scenario) -> None:
    query = scenario.to_query()
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)
    st.session_state["_url_written"] = query


# ---------------------------------------------------------------- config upload / paste
def _use_config(raw: str | bytes, source: str) -> bool:
    """Parse an uploaded or pasted config; the session keeps only the keys a link carries
    (``link_config``), not the whole text. Returns whether it was used."""
    try:
        from kvplan.config_import import load_config_text

        config = link_config(load_config_text(raw))
        custom_arch(config)
    except KVPlanError as err:
        st.session_state["_config_error"] = f"{source}: {err}"
        return False
    st.session_state["custom_config"] = config
    st.session_state["w_model"] = CUSTOM_MODEL
    st.session_state.pop("_config_error", None)
    return True


def _on_upload() -> None:
    upload = st.session_state.get("w_upload")
    if upload is not None:
        _use_config(upload.getvalue(), f"uploaded file {upload.name!r}")


def _on_paste() -> None:
    text = st.session_state.get("w_paste") or ""
    if not text.strip() and st.session_state.get("_paste_used"):
        return  # Ctrl+Enter and the button in one rerun: the commit already used the text
    if not text.strip():
        st.session_state["_config_error"] = MESSAGES["config.empty"].format(source="pasted config.json")
        return
    if _use_config(text, "pasted config.json") or len(text) > MAX_CONFIG_BYTES:
        st.session_state["w_paste"] = ""  # the model keeps what it needs; free the text


def _on_paste_changed() -> None:
    """Ctrl+Enter (⌘+Enter) or leaving the box commits its text: use it as the button would; a
    cleared box is no request."""
    if (st.session_state.get("w_paste") or "").strip():
        _on_paste()
        st.session_state["_paste_used"] = True  # until this rerun's script runs (render_sidebar)


def _on_tokens_slider() -> None:
    st.session_state["w_tokens_exact"] = st.session_state["w_tokens"]


def _on_tokens_exact() -> None:
    st.session_state["w_tokens"] = int(st.session_state["w_tokens_exact"])


# ---------------------------------------------------------------- the sidebar
def _int_bounds(field: str) -> tuple[int, int]:
    """A whole-number widget's min and max: the schema's (``kvplan.scenario.BOUNDS``)."""
    low, high = BOUNDS[field]
    return int(low), int(high)


def _model_label(model_id: str) -> str:
    if model_id == CUSTOM_MODEL:
        config = st.session_state.get("custom_config") or {}
        name = config.get("name") if isinstance(config.get("name"), str) else None
        return f"Custom: {name or config.get('model_type', 'config.json')}"
    preset = model_presets().get(model_id)
    # the box filters on this label as typed: any part of the Hub id, the short id or the name
    return f"{preset.hf_repo} ({preset.id})" if preset and preset.id != preset.hf_repo \
        else preset.hf_repo if preset else model_id


def _engine_title(engine: Engine) -> str:
    """``vLLM — vLLM (v1 paged blocks) [vLLM v0.33]``: how the engine picker names an engine."""
    return f"{engine.short} — {engine.label} [{engine.release}]"


def render_sidebar() -> Scenario:
    """All inputs, in the order model, engine, precision, hardware, workload, charts; returns the
    Scenario the widgets describe. No headings (each label names its input) and rarely used inputs
    in lazy expanders: every element costs the browser ≈ 4–11 ms on a first render (bench/README.md).
    ``app.py`` draws the two parts apart: the workload part in the page's fragment."""
    render_model_and_hardware()
    return render_workload()


#: Widget state drawn by ``render_model_and_hardware`` (outside app.py's fragment): the scenario
#: fields of its widgets, the engine knobs and the inputs whose callbacks change them.
OUTER_FIELDS = ("model", "engine", "engine_version", "kv_dtypes", "weight_dtype", "gpu", "num_gpus",
                "tp", "pp", "reserve_gib", "custom_gpu_gib", "custom_gpu_tbps", "custom_gpu_tflops")
OUTER_KEYS = (*(WIDGETS[field] for field in OUTER_FIELDS), *SETTING_WIDGETS.values(), "w_rt",
              "custom_config", "_config_error", "_weights_error", "_checkpoint")


def outer_inputs() -> tuple[Any, ...]:
    """What the model-and-hardware part of the sidebar was drawn from (``OUTER_KEYS``' values):
    a rerun of app.py's fragment whose callbacks changed one (a named scenario, an uploaded scenario,
    the calibrated reserve) must redraw the whole page, or that part would show the old values."""
    state = st.session_state
    return tuple(state.get(key) for key in OUTER_KEYS)


def render_model_and_hardware() -> None:
    """The sidebar's inputs that do not follow the typed workload: model, engine and its settings,
    KV and weight dtypes, accelerator, GPUs / TP / PP (drawn on full reruns only, app.py)."""
    state = st.session_state
    sb = st.sidebar
    options = list(model_presets())
    if state.get("custom_config"):
        options.append(CUSTOM_MODEL)
    if state.get("w_model") not in options:
        state["w_model"] = Scenario().model
    sb.selectbox("Model preset", options, key="w_model", format_func=_model_label,
                 help="Each checkpoint as published, by its Hub repo id: its config.json and "
                      "quantization_config (see the preset's sources). Type any part of the id "
                      "to find it.")
    with lazy.box(sb, "w_config_box") as box:
        if box.open:
            box.file_uploader("Upload config.json (max 2 MB)", type=["json"], key="w_upload",
                              on_change=_on_upload, help="A Hugging Face config.json; the link "
                                                         "will carry its architecture keys.")
            box.text_area("…or paste config.json", key="w_paste", height=120,
                          max_chars=MAX_CONFIG_BYTES, on_change=_on_paste_changed,
                          help="Ctrl+Enter (⌘+Enter), clicking outside the box or the button uses it.",
                          placeholder='{"model_type": "llama", "num_hidden_layers": 32, ...}')
            box.button("Use pasted config", key="w_paste_go", on_click=_on_paste)
    state.pop("_paste_used", None)  # the callbacks of this rerun are done
    if state.get("_config_error"):
        sb.error(md(state.pop("_config_error") + " — keeping the previous model."))
    weights_view.render_inputs(sb)

    sb.selectbox("Serving engine", list(REGISTRY), key="w_engine",
                 format_func=lambda e: _engine_title(resolve_engine(e)),
                 help="How the KV cache is stored: HF DynamicCache grows per token, StaticCache "
                      "pre-allocates, vLLM reserves paged blocks, SGLang a token pool, "
                      "TensorRT-LLM 32-token blocks.")
    releases = release_choices(state["w_engine"])
    if state.get("w_ev") not in releases:
        state["w_ev"] = releases[0]
    engine = resolve_engine(engine_with_release(state["w_engine"], state["w_ev"]))
    changed = [f"release {engine.release}"] if engine is not resolve_engine(state["w_engine"]) else []
    changed += _changed_settings(engine.setting_labels)
    if state.get("w_reserve") is not None:
        changed.append(f"runtime reserve {state['w_reserve']:g} GiB")
    terms_text = str(state.get("w_rt") or "")
    if terms_text:
        changed.append(f"reserve terms {terms_text}")
    if changed:
        sb.caption("Engine settings changed: " + md(", ".join(changed)))
    with lazy.box(sb, "w_engine_box") as box:  # its widgets run only while it is open
        if box.open:
            if has_release_choice(state["w_engine"]):  # rarely changed: here (issue #16, speed)
                box.selectbox("Engine release", releases, key="w_ev", **lazy.KEEP,
                              help="The release whose rules kvplan applies (link key `ev`, CLI "
                                   "--engine-version): " + "; ".join(
                                       f"{r} = "
                                       f"{resolve_engine(engine_with_release(state['w_engine'], r)).release}"
                                       for r in releases) + ".")
            for name, (label, default) in engine.setting_labels.items():
                _setting_widget(box, SETTINGS[name], label, default)
            box.number_input("Runtime reserve per GPU (GiB)", *BOUNDS["reserve_gib"], step=0.5,
                             key="w_reserve", placeholder="default: the release's terms",
                             help="The total kept outside the KV cache besides the weights "
                                  "(1 GiB = 2^30 B); empty = the sum of the engine release's "
                                  "terms (see 'KV budget, term by term').", **lazy.KEEP)
            box.text_input("Reserve terms (name=GiB, …)", key="w_rt", max_chars=200,
                           placeholder=", ".join(f"{name}=…" for name in engine.reserve_term_names),
                           help="Replace single terms of the runtime reserve, e.g. "
                                "activation_peak=2.5; this engine's terms: "
                                f"{', '.join(engine.reserve_term_names)}.", **lazy.KEEP)
    try:
        parse_reserve_terms(terms_text, engine.reserve_term_names)
    except ValueError as exc:
        sb.error(md(f"Reserve terms: {exc}; not applied until corrected."))

    if not state.get("w_kd"):
        state["w_kd"] = ["bf16"]
    sb.multiselect("KV-cache dtype(s) — the first one drives the KPIs", list(KV_DTYPE_CHOICES),
                   key="w_kd", format_func=lambda d: DTYPES[d].label or d,
                   help="Pick several to compare them on the charts.")
    checkpoint, own = "Checkpoint format not read.", "the checkpoint's own format"
    with contextlib.suppress(KVPlanError):
        checkpoint, own = weights_view.format_texts(resolve_arch(scenario_from_widgets()))
    sb.selectbox("Weight dtype", ["auto", *WEIGHT_DTYPES], key="w_wd",
                 format_func=lambda d: f"auto ({own})" if d == "auto"
                 else (WEIGHT_DTYPES[d].label or d),
                 help=f"{md(checkpoint)} auto = what config.json's quantization_config says each part "
                      "is stored in; a choice here overrides it (a float dtype for every tensor, a "
                      "quantized format for linear layers and experts).")

    sb.selectbox("Accelerator", [*gpus(), CUSTOM_GPU], key="w_gpu",
                 format_func=lambda g: gpus()[g].name if g in gpus() else "Custom accelerator…",
                 help="Capacity is what the device reports (MiB/GiB) when known, else the marketed GB.")
    if state.get("w_gpu") == CUSTOM_GPU:
        row = sb.container(horizontal=True, wrap=False)
        row.number_input("Memory (GiB)", *BOUNDS["custom_gpu_gib"], key="w_gm",
                        help="As the device reports it, in GiB (2^30 B)")
        row.number_input("TB/s", *BOUNDS["custom_gpu_tbps"], key="w_gb",
                        help="HBM bandwidth, decimal TB/s")
        row.number_input("TFLOPS", *BOUNDS["custom_gpu_tflops"], key="w_gf",
                        help="Dense BF16 TFLOPS")
    row = sb.container(horizontal=True, wrap=False)  # one element, where columns(3) were four
    row.number_input("GPUs", *_int_bounds("num_gpus"), step=1, key="w_n",
                    help="Total accelerators; a multiple of TP × PP (the rest are replicas).")
    row.number_input("TP", *_int_bounds("tp"), step=1, key="w_tp", help="Tensor parallel")
    row.number_input("PP", *_int_bounds("pp"), step=1, key="w_pp", help="Pipeline parallel")


#: The sidebar's lazy boxes under the workload inputs, in order.
WORKLOAD_BOXES = ("w_serving_box", "w_charts_box")


def draw_workload_slots() -> tuple[Any, dict[str, Any]]:
    """The place of the workload inputs in the sidebar and the lazy boxes under it, for app.py's
    full runs (its fragment fills them: ``render_workload(place, boxes)``)."""
    return st.sidebar.container(), {key: lazy.box(st.sidebar, key) for key in WORKLOAD_BOXES}


def render_workload(place: Any = None, boxes: dict[str, Any] | None = None) -> Scenario:
    """The sidebar's workload and chart inputs (context length, users, serving workload, chart
    options), under ``render_model_and_hardware``'s, into ``place`` and ``boxes`` when given
    (``draw_workload_slots``); returns the Scenario all widgets describe."""
    state = st.session_state
    sb = st.sidebar if place is None else place
    tokens = int(state.get("w_tokens") or 1)
    steps = sorted(set(TOKEN_STEPS) | {tokens})
    sb.select_slider("Context length (tokens, log scale)", options=steps, key="w_tokens",
                     format_func=fmt_tokens, on_change=_on_tokens_slider,
                     help="Tokens per request (prompt + generated), 1 to 10M.")
    sb.number_input("Exact context length (tokens)", _int_bounds("tokens")[0], MAX_UI_TOKENS, step=1,
                    key="w_tokens_exact", on_change=_on_tokens_exact)
    sb.number_input("Concurrent users (requests)", *_int_bounds("users"), step=1,
                    key="w_users", help="Requests in flight at the chosen context length.")
    with lazy.box(st.sidebar, "w_serving_box") if boxes is None else boxes["w_serving_box"] as box:
        if box.open:
            box.number_input("Shared prefix (tokens)", *_int_bounds("prefix_tokens"), step=1,
                             key="w_pf", **lazy.KEEP)
            box.number_input("Output tokens per request", *_int_bounds("output_tokens"), step=1,
                             key="w_o", **lazy.KEEP)
            box.number_input("Images per request", *_int_bounds("images"), step=1, key="w_im",
                             help="Images each request brings beside its context length of text; "
                                  "their tokens (the checkpoint's processor) are added to it.",
                             **lazy.KEEP)
            row = box.columns(2)
            row[0].number_input("Image width (px)", *_int_bounds("image_width"), step=1, key="w_iw",
                                **lazy.KEEP)
            row[1].number_input("Image height (px)", *_int_bounds("image_height"), step=1, key="w_ih",
                                **lazy.KEEP)
            box.number_input("Videos per request", *_int_bounds("videos"), step=1, key="w_vn",
                             help="Videos each request brings (Qwen2-VL / Qwen2.5-VL processors): "
                                  "frames = length × frame rate, all kept as vLLM 0.33's opencv "
                                  "loader does; their tokens are added to the context length. CLI "
                                  "--videos, --video-size, --video-seconds, --video-fps.", **lazy.KEEP)
            row = box.columns(2)
            row[0].number_input("Video width (px)", *_int_bounds("video_width"), step=1, key="w_vx",
                                **lazy.KEEP)
            row[1].number_input("Video height (px)", *_int_bounds("video_height"), step=1, key="w_vy",
                                **lazy.KEEP)
            row = box.columns(2)
            for column, (field, label) in zip(row, _OPEN_LOW_WIDGETS.items(), strict=True):
                column.number_input(label, 0.0, float(BOUNDS[field][1]), step=0.5, format="%g",
                                    key=WIDGETS[field], **lazy.KEEP)
            for field, label in _OPEN_LOW_WIDGETS.items():
                if (value := state.get(WIDGETS[field])) is not None and value <= 0:
                    box.error(md(f"{label}: must be more than 0; not applied until corrected."))
    with lazy.box(st.sidebar, "w_charts_box") if boxes is None else boxes["w_charts_box"] as box:
        if box.open:
            box.toggle("Log axes", key="w_lx", help="Logarithmic x and y on the KV-vs-context chart.",
                       **lazy.KEEP)
            box.toggle("Stack by layer kind", key="w_sk", **lazy.KEEP,
                       help="Split the first dtype's curve by layer kind so windowed layers plateau.")
    return scenario_from_widgets()


def _setting_widget(box: Any, setting: Setting, label: str, default: str) -> None:
    """One engine knob's widget, with the bounds and help of its declaration; it lives in the lazy
    "Engine settings" expander, so its value is kept while the expander is closed."""
    key = SETTING_WIDGETS[setting.name]
    help_text = f"{setting.help} Link key `{setting.key}`, CLI `{setting.flag}`."
    keep: dict[str, Any] = {"key": key, "help": help_text, **lazy.KEEP}
    if setting.kind == "tristate":
        box.selectbox(label, list(_TRISTATE), **keep)
    elif setting.kind in {"int_list", "json", "text"}:
        chars = {"json": MAX_JSON_CHARS, "text": MAX_TEXT_CHARS}.get(setting.kind,
                                                                    40 + 12 * setting.max_items)
        text = box.text_input(label, max_chars=chars,
                              placeholder=f"default: {default}", **keep)
        try:
            setting.parse(text) if text else None
        except ValueError as exc:
            box.error(md(f"{label}: {exc}; not applied until corrected."))
    elif setting.kind == "bool":
        box.toggle(label, **keep)
    elif setting.kind == "float":
        box.number_input(label, min_value=0.001 if setting.low_open else float(setting.low or 0),
                         max_value=float(setting.high or 0), step=0.01, format="%.3f",
                         placeholder=f"default: {default}", **keep)
    else:
        box.number_input(label, min_value=int(setting.low or 0), max_value=int(setting.high or 0),
                         step=1, placeholder=f"default: {default}", **keep)


def _changed_settings(labels: dict[str, tuple[str, str]]) -> list[str]:
    """``label value`` of each of the engine's knobs that is not at its default (shown above the
    closed "Engine settings" expander, so a linked setting is visible without opening it)."""
    try:
        settings = _settings_from_widgets()
    except ValueError:  # scenario_from_widgets falls back to the defaults and says nothing either
        return []
    out = []
    for name, (label, _) in labels.items():
        value = getattr(settings, name)
        text = st.session_state.get(SETTING_WIDGETS[name])
        if SETTINGS[name].kind in {"int_list", "json", "text"} and text and value is None:
            out.append(f"{label} {text!r} (invalid, not applied)")
            continue
        if value != EngineSettings.model_fields[name].default:
            shown = {None: "auto", True: "on", False: "off"}.get(value, value) \
                if SETTINGS[name].kind in {"bool", "tristate"} else SETTINGS[name].format(value)
            out.append(f"{label} {shown}")
    return out


def format_reserve_terms(terms: dict[str, float]) -> str:
    """``{'activation_peak': 2.5}`` → ``activation_peak=2.5`` (the widget's text)."""
    return ", ".join(f"{name}={value:g}" for name, value in terms.items())


def parse_reserve_terms(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The widget's ``name=GiB, …`` as a dict; ``ValueError`` names the first bad entry."""
    low, high = BOUNDS["reserve_gib"]
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in names:
            raise ValueError(f"'{item[:40]}' is not one of {', '.join(names)} = GiB")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"'{item[:40]}': not a number") from None
        if not low <= number <= high:
            raise ValueError(f"'{item[:40]}': must be between {low:g} and {high:g} GiB")
        out[name] = number
    return out


def _settings_from_widgets() -> EngineSettings:
    """The engine settings the widgets hold (every declared knob, kept across engine switches)."""
    state = st.session_state
    values: dict[str, Any] = {}
    for name, key in SETTING_WIDGETS.items():
        value = state.get(key)
        kind = SETTINGS[name].kind
        if kind == "tristate":
            values[name] = _TRISTATE.get(str(value))
        elif kind in {"int_list", "json", "text"}:
            try:
                values[name] = SETTINGS[name].parse(str(value)) if value else None
            except ValueError:  # shown under its widget (_setting_widget) until corrected
                values[name] = None
        elif kind == "bool":
            values[name] = bool(value) if value is not None else EngineSettings.model_fields[name].default
        elif value is not None:
            values[name] = int(value) if kind == "int" else float(value)
        elif EngineSettings.model_fields[name].default is not None:
            values[name] = EngineSettings.model_fields[name].default
    return EngineSettings(**values)


def scenario_from_widgets() -> Scenario:
    state = st.session_state
    values: dict[str, Any] = {field: state.get(key) for field, key in WIDGETS.items()}
    values["kv_dtypes"] = list(values["kv_dtypes"] or ["bf16"])
    values["view"] = next((k for k, v in VIEWS.items() if v == values["view"]), "context")
    if values.get("engine_version") in (None, "latest"):
        values["engine_version"] = None
    values["custom_config"] = state.get("custom_config")
    try:
        engine = resolve_engine(engine_with_release(values["engine"] or DEFAULT_ENGINE,
                                               values.get("engine_version")))
        values["reserve_terms"] = parse_reserve_terms(str(state.get("w_rt") or ""),
                                                      engine.reserve_term_names)
    except (ValueError, KVPlanError):  # shown under the widget until corrected
        values["reserve_terms"] = {}
    for field in ("num_gpus", "tp", "pp", "tokens", "users", "prefix_tokens", "output_tokens",
                  "images", "image_width", "image_height", "videos", "video_width", "video_height"):
        if values[field] is not None:
            values[field] = int(values[field])
    for field in _OPEN_LOW_WIDGETS:  # 0 is said under its widget (render_workload), not applied
        if values[field] is not None:
            values[field] = float(values[field]) if values[field] > 0 else None
    cleaned = {k: v for k, v in values.items() if v is not None or k in {"reserve_gib", "custom_config"}}
    try:
        cleaned["engine_settings"] = _settings_from_widgets()
        scenario = Scenario(**cleaned)
    except ValueError:
        return Scenario()
    return scenario.model_copy(update={"serving": serving_state.collect(scenario, state)})
