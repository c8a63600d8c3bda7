"""A dashboard scenario: every input, with short URL keys, a schema version and safe decoding.

``Scenario.from_query`` never raises: each bad parameter becomes a warning naming it and falls
back to its default while every other parameter is kept. An uploaded config.json travels in the
link as its architecture (``c``: the config keys the core reads, JSON, zlib, base64url), so the
link works for anyone.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvplan.config_import import ARCHITECTURE_KEYS, MAX_CONFIG_BYTES, MAX_DEPTH, json_depth
from kvplan.engines import DEFAULT_ENGINE
from kvplan.engines.settings import (
    LEGACY_MAX_PIXELS_KEY,
    LIMIT_MM_DATA_PER_REQUEST,
    MM_PROCESSOR_KWARGS,
    SETTINGS,
    EngineSettings,
    Setting,
)
from kvplan.errors import MESSAGES, clip, is_plain_int, short
from kvplan.multimodal import MAX_IMAGE_SIDE, MAX_IMAGES, MAX_VIDEO_FPS, MAX_VIDEO_SECONDS
from kvplan.presets import CUSTOM_GPU_LIMITS

if TYPE_CHECKING:
    from kvplan.arch import ModelArch
    from kvplan.multimodal import ImageRequest, Processor, VideoRequest
    from kvplan.plan import FitQuery, Plan
    from kvplan.presets import GPU

SCHEMA_VERSION = 1
CUSTOM_GPU = "custom"
CUSTOM_MODEL = "custom"
MAX_PARAM_CHARS = 8192
MAX_TOKENS = 100_000_000
#: The longest context a question asks for, one bound for the dashboard's slider and exact box
#: (a link's ``t`` above it is refused with a warning) and the CLI's ``--tokens``: the limit the
#: views are held to in CPU (``tests/test_cpu_bounds.py``).
MAX_CONTEXT_TOKENS = 10_000_000
MAX_USERS = 10_000_000
MAX_GPUS = 4096

#: The one set of bounds of every numeric input: the schema below and the dashboard's widgets
#: (``kvplan.ui.sidebar``) both read it, so a link value the widgets cannot show is refused with a
#: warning naming it instead of being silently clamped by the widget.
BOUNDS: dict[str, tuple[float, float]] = {
    "custom_gpu_gib": CUSTOM_GPU_LIMITS["memory"], "custom_gpu_tbps": CUSTOM_GPU_LIMITS["bandwidth"],
    "custom_gpu_tflops": CUSTOM_GPU_LIMITS["tflops"],
    "num_gpus": (1, MAX_GPUS), "tp": (1, MAX_GPUS), "pp": (1, MAX_GPUS), "tokens": (1, MAX_TOKENS),
    "users": (1, MAX_USERS), "reserve_gib": (0.0, 100_000.0),
    "prefix_tokens": (0, MAX_TOKENS),
    "output_tokens": (1, MAX_TOKENS),
    "images": (0, MAX_IMAGES), "image_width": (1, MAX_IMAGE_SIDE), "image_height": (1, MAX_IMAGE_SIDE),
    "videos": (0, MAX_IMAGES), "video_width": (1, MAX_IMAGE_SIDE), "video_height": (1, MAX_IMAGE_SIDE),
    # more than 0 (``VIDEO_OPEN_LOW``): ``multimodal.VideoRequest.parse``'s bounds
    "video_seconds": (0.0, MAX_VIDEO_SECONDS), "video_fps": (0.0, MAX_VIDEO_FPS),
}
#: Bounds whose low end is excluded (a video of 0 s or at 0 fps has no frame).
VIDEO_OPEN_LOW = frozenset({"video_seconds", "video_fps"})


def _bounded(name: str, default: Any, alias: str) -> Any:
    low, high = BOUNDS[name]
    if name in VIDEO_OPEN_LOW:
        return Field(default=default, alias=alias, gt=low, le=high)
    return Field(default=default, alias=alias, ge=low, le=high)


#: Config keys kept when an uploaded config.json is put in a link: every key the importer reads,
#: plus the name and parameter counts a user may add.
CONFIG_KEYS = (*ARCHITECTURE_KEYS, "params_total", "params_active", "name")
#: Link key → engine setting (declared once in ``kvplan.engines.settings``).
SETTING_KEYS: dict[str, Setting] = {setting.key: setting for setting in SETTINGS.values()}


class Scenario(BaseModel):
    """Every dashboard input. Field aliases are the URL keys."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", validate_assignment=True)

    model: str = Field(default="llama-3.1-8b", alias="m", max_length=128)
    custom_config: dict[str, Any] | None = Field(default=None, alias="c")
    engine: str = Field(default=DEFAULT_ENGINE, alias="e")
    #: The engine release modelled (``kvplan.engines.release_choices``); None = the newest.
    engine_version: str | None = Field(default=None, alias="ev", max_length=16)
    kv_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8_e4m3"], alias="kd",
                                 min_length=1, max_length=12)
    weight_dtype: str = Field(default="auto", alias="wd")
    gpu: str = Field(default="h100-sxm", alias="g", max_length=64)
    #: A user-defined accelerator (``g=custom``): memory in GiB, bandwidth TB/s, dense BF16 TFLOPS.
    custom_gpu_gib: float = _bounded("custom_gpu_gib", 80.0, "gm")
    custom_gpu_tbps: float = _bounded("custom_gpu_tbps", 3.35, "gb")
    custom_gpu_tflops: float = _bounded("custom_gpu_tflops", 989.0, "gf")
    num_gpus: int = _bounded("num_gpus", 1, "n")
    tp: int = _bounded("tp", 1, "tp")
    pp: int = _bounded("pp", 1, "pp")
    tokens: int = _bounded("tokens", 32768, "t")
    users: int = _bounded("users", 8, "u")
    reserve_gib: float | None = _bounded("reserve_gib", None, "r")
    #: Runtime-reserve terms replaced by the user, GiB by term name (``rt=activation_peak:2.5;…``;
    #: the names of the engine's counted terms, ``Engine.reserve_term_names``).
    reserve_terms: dict[str, float] = Field(default_factory=dict, alias="rt", max_length=8)
    #: Engine knobs; each travels under its own link key (``SETTING_KEYS``) with the bounds of its
    #: one declaration (``kvplan.engines.settings``), which the sidebar widgets use too.
    engine_settings: EngineSettings = Field(default_factory=EngineSettings)
    #: The dashboard view (tab) the link opens.
    view: Literal["context", "users", "memory", "requests", "designs", "serving", "recommend",
                  "offload"] = Field(
        default="context", alias="vw")
    log_x: bool = Field(default=True, alias="lx")
    stack_kinds: bool = Field(default=False, alias="sk")
    prefix_tokens: int = _bounded("prefix_tokens", 1024, "pf")
    output_tokens: int = _bounded("output_tokens", 512, "o")
    #: Images each request brings beside its ``tokens`` of text, and their size in pixels; their
    #: tokens (the checkpoint's processor, ``kvplan.multimodal``) are added to the request length.
    images: int = _bounded("images", 0, "im")
    image_width: int = _bounded("image_width", 1280, "iw")
    image_height: int = _bounded("image_height", 720, "ih")
    #: Videos each request brings (``vn``), each ``vx``×``vy`` pixels per frame, ``vs`` seconds at
    #: ``vf`` frames per second (CLI ``--videos``/``--video-size``/``--video-seconds``/``--video-fps``);
    #: their tokens (``kvplan.multimodal.video_prompt_tokens``) are added to the request length.
    videos: int = _bounded("videos", 0, "vn")
    video_width: int = _bounded("video_width", 1280, "vx")
    video_height: int = _bounded("video_height", 720, "vy")
    video_seconds: float = _bounded("video_seconds", 10.0, "vs")
    video_fps: float = _bounded("video_fps", 2.0, "vf")
    #: The serving section's own inputs (``sv=key:value;…``; typed and checked by the dashboard).
    serving: dict[str, str] = Field(default_factory=dict, alias="sv", max_length=64)
    #: Several engines on one GPU (``kvplan.instances``): one instance per line, in start order, each
    #: ``KEY=VALUE,…`` as ``kvplan share --instance`` takes it (checked when the section draws it).
    instances: str = Field(default="", alias="in", max_length=4000)

    @field_validator("instances", mode="before")
    @classmethod
    def _instance_lines(cls, value: Any) -> Any:
        """The dashboard's lines joined by ``;`` (a link carries no control character)."""
        if isinstance(value, str) and "\n" in value:
            return ";".join(line.strip() for line in value.splitlines() if line.strip())
        return value

    @model_validator(mode="before")
    @classmethod
    def _flat_settings(cls, data: Any) -> Any:
        """Engine settings given flat (by name or link key) move into ``engine_settings``."""
        if not isinstance(data, dict):
            return data
        flat = {k: v for k, v in data.items() if k in SETTINGS or k in SETTING_KEYS}
        if not flat:
            return data
        data = {k: v for k, v in data.items() if k not in flat}
        base = data.get("engine_settings")
        values = base.model_dump() if isinstance(base, EngineSettings) else dict(base or {})
        for key, value in flat.items():
            values[SETTING_KEYS[key].name if key in SETTING_KEYS else key] = value
        data["engine_settings"] = values
        return data

    def to_query(self) -> dict[str, str]:
        """Short, readable query parameters; defaults are left out to keep links short."""
        defaults = Scenario()
        out: dict[str, str] = {"v": str(SCHEMA_VERSION)}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name == "engine_settings":
                for setting in SETTINGS.values():
                    own = getattr(self.engine_settings, setting.name)
                    if own is not None and own != getattr(defaults.engine_settings, setting.name):
                        out[setting.key] = setting.format(own)
                continue
            if value == getattr(defaults, name) or value is None:
                continue
            out[info.alias or name] = _encode(name, value)
        return out

    @classmethod
    def from_query(cls, query: dict[str, Any]) -> tuple[Scenario, list[str]]:
        """Decode a query dict; returns the scenario and one warning per rejected parameter."""
        warnings: list[str] = []
        by_alias = {info.alias or name: name for name, info in cls.model_fields.items()}
        values: dict[str, Any] = {}
        raw_version = query.get("v")
        repeated = isinstance(raw_version, list | tuple) and len(raw_version) > 1
        version = None if repeated else _first(raw_version)
        if version is not None and version != str(SCHEMA_VERSION):
            if is_plain_int(version, 9) and int(version) > SCHEMA_VERSION:
                warnings.append(MESSAGES["link.future_version"].format(value=version[:12]))
            else:
                warnings.append(MESSAGES["link.bad_value"].format(
                    key="v", value=short(version), why=f"schema version is {SCHEMA_VERSION}"))
        settings: dict[str, Any] = {}
        query = _legacy_mm_data_count(_legacy_max_pixels(query, warnings), warnings)
        for key, raw in query.items():
            known = key == "v" or key in SETTING_KEYS or by_alias.get(key) not in (None, "engine_settings")
            if known and isinstance(raw, list | tuple) and len(raw) > 1:  # ?t=5&t=6: none is guessed
                warnings.append(MESSAGES["link.repeated"].format(key=clip(key, 40), count=len(raw)))
                continue
            if key == "v":
                continue
            if key in SETTING_KEYS:
                _decode_setting(SETTING_KEYS[key], _first(raw), settings, warnings)
                continue
            name = by_alias.get(key)
            if name is None or name == "engine_settings":
                warnings.append(MESSAGES["link.unknown_key"].format(key=short(key, 40)))
                continue
            text = _first(raw)
            if text is None or len(text) > MAX_PARAM_CHARS:
                warnings.append(MESSAGES["link.bad_value"].format(
                    key=key, value=short(text, 40), why="empty or too long"))
                continue
            try:
                candidate = _decode(name, text)
                cls.model_validate({**values, name: candidate})
            except (ValueError, ValidationError, TypeError) as exc:
                why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                warnings.append(MESSAGES["link.bad_value"].format(
                    key=key, value=short(text, 40), why=why[:80]))
                continue
            values[name] = candidate
        if settings:
            values["engine_settings"] = EngineSettings(**settings)
        return cls.model_validate(values), warnings


def _legacy_max_pixels(query: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """The earlier ``mp=N`` (``--mm-processor-max-pixels``) read as ``mk={"max_pixels":N}``
    (``--mm-processor-kwargs``, as vLLM names the flag), said in a warning; ``mk`` wins when both
    are given."""
    if LEGACY_MAX_PIXELS_KEY not in query:
        return query
    query = dict(query)
    text = _first(query.pop(LEGACY_MAX_PIXELS_KEY))
    key = MM_PROCESSOR_KWARGS.key
    if key in query:
        warnings.append(MESSAGES["link.bad_value"].format(
            key=LEGACY_MAX_PIXELS_KEY, value=short(text, 40), why=f"'{key}' is given too"))
    elif text is None or not is_plain_int(text.strip(), 10) or int(text) < 1:
        warnings.append(MESSAGES["link.bad_value"].format(
            key=LEGACY_MAX_PIXELS_KEY, value=short(text, 40), why="expected a whole number of "
            "pixels (it is now max_pixels of --mm-processor-kwargs, link key mk)"))
    else:
        canonical = json.dumps({"max_pixels": int(text)}, separators=(",", ":"))
        query[key] = canonical
        warnings.append(MESSAGES["link.alias"].format(
            key=LEGACY_MAX_PIXELS_KEY, value=short(text, 40),
            canonical=f"{key}={canonical} (--mm-processor-kwargs)"))
    return query


def _legacy_mm_data_count(query: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """The earlier ``md=N`` (one count for images and videos) read as SGLang's JSON
    ``md={"image":N,"video":N}`` (``--limit-mm-data-per-request``, which takes only the JSON
    object), said in a warning; any other text is left to the setting's own parser."""
    key = LIMIT_MM_DATA_PER_REQUEST.key
    text = _first(query.get(key))
    if text is None or not is_plain_int(text.strip(), 5) or isinstance(query[key], list | tuple) \
            and len(query[key]) > 1:
        return query
    canonical = json.dumps({"image": int(text), "video": int(text)}, sort_keys=True, separators=(",", ":"))
    warnings.append(MESSAGES["link.alias"].format(
        key=key, value=short(text, 40), canonical=f"{key}={canonical} ({LIMIT_MM_DATA_PER_REQUEST.flag})"))
    return {**query, key: canonical}


def _first(raw: Any) -> str | None:
    if isinstance(raw, list | tuple):
        raw = raw[-1] if raw else None
    return None if raw is None else str(raw)


def _decode_setting(setting: Setting, text: str | None, settings: dict[str, Any],
                    warnings: list[str]) -> None:
    """Decode one engine setting from the link into ``settings``, or warn naming its key."""
    try:
        if text is None:
            raise ValueError("empty")
        value = setting.parse(text, check_bounds=False)
        EngineSettings(**{**settings, setting.name: value})  # the declared bounds, pydantic's words
    except (ValueError, ValidationError) as exc:
        why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        warnings.append(MESSAGES["link.bad_value"].format(
            key=setting.key, value=short(text, 40), why=why[:80]))
        return
    settings[setting.name] = value


def _encode(name: str, value: Any) -> str:
    if name == "custom_config":
        return encode_config(value)
    if name in {"serving", "reserve_terms"}:
        return ";".join(f"{k}:{v!r}" if isinstance(v, float) else f"{k}:{v}"
                        for k, v in sorted(value.items()))
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same float
    return str(value)


def _decode(name: str, text: str) -> Any:
    field = Scenario.model_fields[name]
    if name == "custom_config":
        return decode_config(text)
    if name == "serving":
        return _decode_pairs(text)
    if name == "reserve_terms":
        return {key: _decode("reserve_gib", value) for key, value in _decode_pairs(text).items()}
    if name == "kv_dtypes":
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise ValueError("no dtype given")
        return items
    annotation = str(field.annotation)
    if "bool" in annotation:
        if text not in {"0", "1", "true", "false"}:
            raise ValueError("expected 0 or 1")
        return text in {"1", "true"}
    if "int" in annotation:
        if not is_plain_int(text.strip(), signed=True):
            raise ValueError("expected a whole number of at most 18 digits")
        return int(text)
    if "float" in annotation:
        return plain_float(text)
    if not text.isprintable():
        raise ValueError("contains control characters")
    return text


_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def plain_float(text: str) -> float:
    """A finite number written in ASCII (``float()`` also takes ``'٣'``, ``'1_000'``, ``' 5'``,
    ``'inf'``: a link refuses them, as ``is_plain_int`` does for whole numbers)."""
    if len(text) > 40:
        raise ValueError("number too long")
    text = text.strip()  # as is_plain_int's callers do
    if not text.isascii() or not _FLOAT.fullmatch(text):
        raise ValueError("expected a number in ASCII digits (like 0.5 or 1e3)")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("expected a finite number")
    return value


def _decode_pairs(text: str) -> dict[str, str]:
    """``key:value;key:value`` with short lowercase keys and short printable values."""
    pairs: dict[str, str] = {}
    for item in filter(None, text.split(";")):
        key, sep, value = item.partition(":")
        if not sep or not key or len(key) > 24 or not all(c.isascii() and (c.isalnum() or c == "_")
                                                          for c in key):
            raise ValueError(f"entry {item[:30]!r} is not key:value")
        if len(value) > 64 or not value.isprintable():
            raise ValueError(f"value of {key!r} is too long or not printable")
        pairs[key] = value
    return pairs


def link_config(config: dict[str, Any]) -> dict[str, Any]:
    """The architecture keys of a config.json (``CONFIG_KEYS``, also inside ``text_config``):
    what a link carries and what a session keeps of an upload."""
    kept = {k: config[k] for k in CONFIG_KEYS if k in config}
    if isinstance(config.get("text_config"), dict):
        kept["text_config"] = {k: v for k, v in config["text_config"].items() if k in CONFIG_KEYS}
    return kept


def encode_config(config: dict[str, Any]) -> str:
    """Keep the architecture keys of a config.json and pack them for a URL."""
    raw = json.dumps(link_config(config), separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode_config(text: str) -> dict[str, Any]:
    """The config a link's ``c`` carries; its nesting is bounded before it is parsed."""
    padded = text + "=" * (-len(text) % 4)
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(base64.urlsafe_b64decode(padded), MAX_CONFIG_BYTES)
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"not a packed config ({type(exc).__name__})") from None
    if inflate.unconsumed_tail:
        raise ValueError(MESSAGES["link.config_too_large"].format(limit=MAX_CONFIG_BYTES))
    if json_depth(raw, MAX_DEPTH) > MAX_DEPTH:
        raise ValueError(MESSAGES["link.too_deep"].format(limit=MAX_DEPTH))
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not a packed config ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError("packed config is not an object")
    return data


def closest_names(value: str, kind: Literal["model", "gpu"], n: int = 3) -> list[str]:
    """The preset ids nearest to ``value`` — what a link with a misspelt model or accelerator most
    likely meant: for models the preset table's own ranking (``PresetTable.closest``, by Hub id,
    link id and alias), for accelerators ids ``value`` begins, then ``difflib`` on ids and names."""
    import difflib

    from kvplan.presets import gpus, model_presets

    if kind == "model":
        table = model_presets()
        return list(dict.fromkeys(table[hub_id].id for hub_id in table.closest(str(value), n)))[:n]
    names = {key: key for key in gpus()}
    names.update({str(p.name).lower(): key for key, p in gpus().items()})
    typed = str(value).strip().lower()
    hits = [key for key in sorted(names) if typed and key.startswith(typed)]
    hits += difflib.get_close_matches(typed, list(names), n=n * 2, cutoff=0.5)
    return list(dict.fromkeys(names[h] for h in hits))[:n]


def unusable_names(query: dict[str, Any], scenario: Scenario) -> list[tuple[str, str]]:
    """``(link key, value as typed)`` for the model (``m``, or ``c``) and accelerator (``g``) a
    link asks for that the checked ``scenario`` does not use: a question about another model or
    GPU would be answered instead, so the dashboard answers none (``check_names`` repairs the rest)."""
    out: list[tuple[str, str]] = []
    config_lost = query.get("c") is not None and scenario.custom_config is None
    for key, used in (("m", scenario.model), ("g", scenario.gpu)):
        asked = query.get(key)
        if isinstance(asked, list):
            asked = ",".join(map(str, asked))
        if key == "m" and config_lost and asked in {None, CUSTOM_MODEL}:
            out.append(("c", "<config>"))
        elif asked is not None and str(asked) != used and not _names_preset(key, str(asked), used):
            out.append((key, str(asked)))
    return out


def _names_preset(key: str, asked: str, used: str) -> bool:
    """Whether ``asked`` is another name of the model preset ``used`` (its Hub id or an alias, any
    case): ``check_names`` answers with the link id, which is the same question."""
    from kvplan.presets import model_presets

    table = model_presets()
    return key == "m" and asked in table and table[asked].id == used


def check_names(scenario: Scenario) -> tuple[Scenario, list[str]]:
    """Check the names a link carries against the presets; each unknown one falls back alone.

    ``from_query`` checks syntax and ranges; this checks meaning: the model preset (only when no
    custom config is given), an uploaded config that must parse, the accelerator, the engine, the
    KV and weight formats and ``tp × pp`` dividing the GPU count. Known dtype aliases are
    replaced by their canonical names. Returns the repaired scenario and one warning per fix.
    """
    from kvplan.dtypes import KV_DTYPE_CHOICES, WEIGHT_DTYPES, get_dtype, get_weight_dtype
    from kvplan.engines import REGISTRY, release_choices
    from kvplan.errors import KVPlanError
    from kvplan.plan import resolve_engine
    from kvplan.presets import did_you_mean, gpus, model_presets

    defaults = Scenario()
    fields = Scenario.model_fields
    update: dict[str, Any] = {}
    warnings: list[str] = []

    def warn(name: str, value: object, why: str) -> None:
        warnings.append(MESSAGES["link.bad_value"].format(
            key=fields[name].alias or name, value=short(value, 40), why=why))

    config = scenario.custom_config
    if config is not None:
        try:
            custom_arch(config)
        except KVPlanError as exc:
            warn("custom_config", "<config>", str(exc))
            update["custom_config"] = config = None
        except (ValueError, TypeError, KeyError) as exc:  # defensive: malformed numbers
            warn("custom_config", "<config>", f"config.json could not be read ({type(exc).__name__})")
            update["custom_config"] = config = None
    table = model_presets()
    if config is None and scenario.model not in table:
        # the dashboard's words (no CLI flags), at most three names: a warning stays one short line
        hint = did_you_mean(table.closest(scenario.model, 3)) or "."
        warn("model", scenario.model, f"no preset is the checkpoint '{clip(scenario.model)}'{hint} "
                                      "Choose a model in the sidebar, or use your own config.json there.")
        update["model"] = defaults.model
    elif scenario.model in table and table[scenario.model].id != scenario.model:
        update["model"] = table[scenario.model].id  # a Hub id or alias: the preset's link id
    if scenario.gpu != CUSTOM_GPU and scenario.gpu not in gpus():
        warn("gpu", scenario.gpu, str(KVPlanError("unknown.gpu", value=clip(scenario.gpu))))
        update["gpu"] = defaults.gpu
    if scenario.engine not in REGISTRY:
        warn("engine", scenario.engine, str(KVPlanError(
            "unknown.engine", value=clip(scenario.engine), choices=", ".join(REGISTRY))))
        update["engine"] = defaults.engine
    version = scenario.engine_version
    choices = release_choices(update.get("engine", scenario.engine))
    if version is not None and version not in choices:
        warn("engine_version", version, str(KVPlanError(
            "unknown.release", engine=update.get("engine", scenario.engine), value=clip(version),
            choices=", ".join(choices))))
        update["engine_version"] = None
    kept: list[str] = []
    for name in scenario.kv_dtypes:
        try:
            canonical = get_dtype(name).name
        except KeyError:
            warn("kv_dtypes", name, str(KVPlanError(
                "unknown.dtype", value=clip(name), choices=", ".join(KV_DTYPE_CHOICES))))
            continue
        if canonical != name:
            warnings.append(MESSAGES["link.alias"].format(key=fields["kv_dtypes"].alias, value=short(
                name, 40), canonical=canonical))
        if canonical in kept:  # kd=bf16,bf16 or kd=fp8,fp8_e4m3: the repeat is dropped, by name
            warn("kv_dtypes", name, f"{canonical} is already listed")
        else:
            kept.append(canonical)
    if kept != scenario.kv_dtypes:
        update["kv_dtypes"] = kept or defaults.kv_dtypes
    if scenario.weight_dtype != "auto":
        weight = scenario.weight_dtype
        try:
            canonical = next(k for k, v in WEIGHT_DTYPES.items() if v == get_weight_dtype(weight))
        except KeyError:
            warn("weight_dtype", weight, str(KVPlanError(
                "unknown.dtype", value=clip(weight), choices=", ".join(["auto", *WEIGHT_DTYPES]))))
            canonical = defaults.weight_dtype
        else:  # a known alias (wd=int4 → int4_g128, awq, gptq) is applied, and said
            if canonical != weight:
                warnings.append(MESSAGES["link.alias"].format(
                    key=fields["weight_dtype"].alias, value=short(weight, 40), canonical=canonical))
        if canonical != weight:
            update["weight_dtype"] = canonical
    engine = resolve_engine(update.get("engine", scenario.engine))
    known = {k: v for k, v in scenario.reserve_terms.items() if k in engine.reserve_term_names
             and BOUNDS["reserve_gib"][0] <= v <= BOUNDS["reserve_gib"][1]}
    if known != scenario.reserve_terms:
        bad = ", ".join(k for k in scenario.reserve_terms if k not in known)
        warn("reserve_terms", bad, str(KVPlanError("reserve.term", value=clip(bad), choices=", ".join(
            engine.reserve_term_names))) + " (or a value outside the reserve's bounds)")
        update["reserve_terms"] = known
    tpp = scenario.tp * scenario.pp
    if tpp > MAX_GPUS:
        warn("tp", f"{scenario.tp}×{scenario.pp}", MESSAGES["value.range"].format(
            field="tp × pp", low=1, high=MAX_GPUS, value=tpp))
        update.update(tp=defaults.tp, pp=defaults.pp)
        tpp = 1
    if scenario.num_gpus % tpp:
        given = scenario.model_fields_set
        if "num_gpus" in given:
            warn("num_gpus", str(scenario.num_gpus),
                 str(KVPlanError("parallel.gpus", gpus=scenario.num_gpus, tpp=tpp,
                                 need=-(-scenario.num_gpus // tpp) * tpp)))
        else:  # the link gave tp/pp, not n: name what it gave
            name = "pp" if "pp" in given and scenario.pp > 1 else "tp"
            warnings.append(MESSAGES["link.gpus_raised"].format(
                key=fields[name].alias or name, value=short(str(getattr(scenario, name)), 40), need=tpp))
        update["num_gpus"] = tpp
    if scenario.engine_settings.mm_processor_kwargs is not None:
        try:  # keys the model's processor does not take are dropped, by name
            scenario_processor(scenario.model_copy(update=update))
        except KVPlanError as exc:
            warnings.append(MESSAGES["link.bad_value"].format(
                key=MM_PROCESSOR_KWARGS.key, value=short(scenario.engine_settings.mm_processor_kwargs, 40),
                why=str(exc)))
            update["engine_settings"] = scenario.engine_settings.model_copy(
                update={"mm_processor_kwargs": None})
    added = 0
    if scenario.images:
        asked = f"{scenario.images}×{scenario.image_width}x{scenario.image_height}"
        try:  # images the model cannot take (no processor, above the limit, refused sizes) go
            added = scenario_image_tokens(scenario.model_copy(update=update))
        except KVPlanError as exc:
            warn("images", asked, str(exc))
            update["images"] = 0
        else:
            if scenario.tokens + added > MAX_TOKENS:
                warn("images", asked, f"{scenario.tokens:,} text + {added:,} image tokens is above "
                                      f"{MAX_TOKENS:,} tokens per request")
                update["images"] = 0
                added = 0
    if scenario.videos:
        asked = video_shape(scenario)
        try:  # videos the model cannot take (no video rule, Qwen3-VL's, above the limit) go
            videos = scenario_video_tokens(scenario.model_copy(update=update))
        except KVPlanError as exc:
            warn("videos", asked, str(exc))
            update["videos"] = 0
        else:
            if scenario.tokens + added + videos > MAX_TOKENS:
                warn("videos", asked, f"{scenario.tokens:,} text + {added:,} image + {videos:,} video "
                                      f"tokens is above {MAX_TOKENS:,} tokens per request")
                update["videos"] = 0
    return (scenario.model_copy(update=update) if update else scenario), warnings


@lru_cache(maxsize=64)
def _custom_arch(key: str) -> ModelArch:
    from kvplan.config_import import parse_config

    config = json.loads(key)
    name = config.get("name") if isinstance(config.get("name"), str) else None
    return parse_config(config, name=name or "Custom model (config.json)",
                        source="uploaded config.json (carried in the link)")


def custom_arch(config: dict[str, Any]) -> ModelArch:
    """The ModelArch of an uploaded config, parsed once per distinct content."""
    return _custom_arch(json.dumps(config, sort_keys=True, separators=(",", ":"), default=str))


def scenario_arch(scenario: Scenario) -> ModelArch:
    """The scenario's model: the uploaded config for ``m=custom``, else the preset."""
    from kvplan.errors import KVPlanError
    from kvplan.presets import load_model

    if scenario.model == CUSTOM_MODEL:
        if not scenario.custom_config:
            raise KVPlanError("unknown.model", value=CUSTOM_MODEL, hint="")
        return custom_arch(scenario.custom_config)
    return load_model(scenario.model)


def scenario_gpu(scenario: Scenario) -> GPU:
    """The scenario's accelerator: a catalogue entry, or the user-defined one for ``g=custom``."""
    from kvplan.presets import custom_gpu, get_gpu

    if scenario.gpu == CUSTOM_GPU:
        return custom_gpu(scenario.custom_gpu_gib, scenario.custom_gpu_tbps, scenario.custom_gpu_tflops)
    return get_gpu(scenario.gpu)


def scenario_fit_query(scenario: Scenario, kv_dtype: str | None = None) -> FitQuery:
    """The capacity question a scenario asks for one KV dtype — the one mapping from URL state to a
    question, for the dashboard, the report, the CLI and the serving view. The engine settings
    travel as one object; the engine keeps only its own knobs (``Engine.own_settings``)."""
    from kvplan.engines import engine_with_release
    from kvplan.plan import FitQuery

    return FitQuery(
        tokens=scenario_request_tokens(scenario), users=scenario.users,
        kv_dtype=kv_dtype or scenario.kv_dtypes[0],
        weight_dtype=None if scenario.weight_dtype == "auto" else scenario.weight_dtype,
        engine=engine_with_release(scenario.engine, scenario.engine_version),
        num_gpus=scenario.num_gpus, tp=scenario.tp, pp=scenario.pp,
        reserve_gib=scenario.reserve_gib, settings=scenario.engine_settings,
        reserve_terms=scenario.reserve_terms or None,
    )


def scenario_images(scenario: Scenario) -> ImageRequest:
    """The images each request of the scenario brings (``im`` × ``iw``×``ih``)."""
    from kvplan.multimodal import ImageRequest

    return ImageRequest(count=scenario.images, width=scenario.image_width, height=scenario.image_height)


def scenario_image_tokens(scenario: Scenario) -> int:
    """Prompt tokens of the scenario's images per request (``kvplan.multimodal.image_prompt_tokens``;
    0 without images). ``check_names`` has already dropped images the model cannot take."""
    if not scenario.images:
        return 0
    from kvplan.multimodal import image_prompt_tokens

    arch = scenario_arch(scenario)
    settings = scenario.engine_settings
    from kvplan.engines import engine_with_release
    from kvplan.plan import resolve_engine

    engine = resolve_engine(engine_with_release(scenario.engine, scenario.engine_version))
    engine.check_media(arch, images=scenario.images)  # TensorRT-LLM: refused by name
    # the engine's own knobs only, as its plan reads them (a link's vLLM --limit-mm-per-prompt is
    # not SGLang's: ignored there, like every knob an engine does not have)
    return image_prompt_tokens(arch.name, scenario_processor(scenario), scenario_images(scenario),
                               engine.image_limit(engine.own_settings(settings)),
                               flag=engine.image_limit_flag, refusal=engine.image_limit_refusal)


def scenario_processor(scenario: Scenario) -> Processor | None:
    """The model's image processor with the scenario's ``--mm-processor-kwargs`` applied
    (``kvplan.multimodal.with_processor_kwargs``: a key it does not take is a named error)."""
    from kvplan.multimodal import with_processor_kwargs

    arch = scenario_arch(scenario)
    return with_processor_kwargs(arch.name, arch.processor, scenario.engine_settings.mm_processor_kwargs)


def video_shape(scenario: Scenario) -> str:
    """The videos of a request as the link names them: ``count×WxH×seconds s×fps fps``."""
    return (f"{scenario.videos}×{scenario.video_width}x{scenario.video_height}×"
            f"{scenario.video_seconds:g} s×{scenario.video_fps:g} fps")


def scenario_videos(scenario: Scenario) -> VideoRequest:
    """The videos each request of the scenario brings (``vn`` × ``vx``×``vy``, ``vs`` s at ``vf`` fps;
    ``VideoRequest.parse``: less than one frame is a named error)."""
    from kvplan.multimodal import VideoRequest

    return VideoRequest.parse(scenario.videos, f"{scenario.video_width}x{scenario.video_height}",
                              scenario.video_seconds, scenario.video_fps)


def scenario_video_tokens(scenario: Scenario) -> int:
    """Prompt tokens of the scenario's videos per request (``kvplan.multimodal.video_prompt_tokens``:
    refused by name where the processor has no video rule, for Qwen3-VL's timestamped prompt and
    above the engine's limit for videos, ``Engine.image_limit(settings, "video")``; 0 without)."""
    if not scenario.videos:
        return 0
    from kvplan.engines import engine_with_release
    from kvplan.multimodal import video_prompt_tokens
    from kvplan.plan import resolve_engine

    engine = resolve_engine(engine_with_release(scenario.engine, scenario.engine_version))
    engine.check_media(scenario_arch(scenario), videos=scenario.videos)  # TensorRT-LLM: refused by name
    return video_prompt_tokens(scenario_arch(scenario).name, scenario_processor(scenario),
                               scenario_videos(scenario),
                               engine.image_limit(engine.own_settings(scenario.engine_settings), "video"),
                               flag=engine.image_limit_flag, refusal=engine.image_limit_refusal)


def scenario_media_tokens(scenario: Scenario) -> int:
    """Prompt tokens of the scenario's images and videos per request (what the serving view and the
    recommender add to every prompt: ``serving.with_image_tokens``)."""
    return scenario_image_tokens(scenario) + scenario_video_tokens(scenario)


def scenario_request_tokens(scenario: Scenario) -> int:
    """Tokens of one request: its ``tokens`` of text plus its images' and videos'
    (``scenario_media_tokens``)."""
    return scenario.tokens + scenario_media_tokens(scenario)


def scenario_request_shape(scenario: Scenario) -> str | None:
    """The request's shape as plain text, with each image's and video's rule (None without
    either)."""
    if not scenario.images and not scenario.videos:
        return None
    processor = scenario_processor(scenario)
    if processor is None:
        return None
    images, videos = scenario_image_tokens(scenario), scenario_video_tokens(scenario)
    parts = [f"{scenario.tokens:,} text tokens"]
    rules = []
    if scenario.images:
        parts.append(f"{scenario.images} image(s) at {scenario.image_width}×{scenario.image_height} × "
                     f"{images // scenario.images:,} tokens")
        rules.append(f"per image: {processor.describe(scenario.image_width, scenario.image_height)}")
    if scenario.videos:
        request = scenario_videos(scenario)
        parts.append(f"{scenario.videos} video(s) of {request.frames:,} frames at "
                     f"{scenario.video_width}×{scenario.video_height} × {videos // scenario.videos:,} tokens")
        describe = getattr(processor, "describe_video", None)
        if describe is not None:
            rules.append(f"per video: {describe(request)}")
    return (" + ".join(parts) + f" = {scenario.tokens + images + videos:,} tokens per request; "
            + "; ".join(rules))


def scenario_plan(scenario: Scenario, kv_dtype: str | None = None) -> Plan:
    """The plan of a scenario's question (``kvplan.plan.make_plan``: the engine resolved once)."""
    from kvplan.plan import make_plan

    return make_plan(scenario_arch(scenario), scenario_gpu(scenario), scenario_fit_query(scenario, kv_dtype))
