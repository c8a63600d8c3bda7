"""Engine settings, each declared once: its bounds, link key, CLI flag and sidebar label.

``EngineSettings`` is the one pydantic model of every engine knob; each user-facing field carries a
``Setting`` (in ``json_schema_extra``) that the link codec (``kvplan.scenario``), the CLI
(``kvplan.cli``), the sidebar (``kvplan.ui.sidebar``) and the report read. An engine class lists the
settings it honours and may relabel them (``Engine.setting_labels``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_TOKENS = 100_000_000


@dataclass(frozen=True)
class Setting:
    """One user-facing engine knob: where it lives in the link, the CLI and the sidebar."""

    name: str
    key: str
    flag: str
    kind: Literal["int", "float", "bool", "tristate"]
    label: str
    help: str
    low: float | None = None
    high: float | None = None
    #: ``gt`` rather than ``ge`` for the lower bound (fractions).
    low_open: bool = False
    #: Other CLI spellings of the flag (an engine's own name for the same knob).
    aliases: tuple[str, ...] = ()


def _setting(default: Any, setting: Setting) -> Any:
    bounds: dict[str, float] = {}
    if setting.low is not None:
        bounds["gt" if setting.low_open else "ge"] = setting.low
    if setting.high is not None:
        bounds["le"] = setting.high
    return Field(default=default, json_schema_extra={"setting": dict(setting.__dict__)}, **bounds)


GPU_UTIL = Setting("gpu_util", "gu", "--gpu-util", "float", "Memory fraction",
                   "Share of memory the engine may use; empty = the engine default.",
                   low=0, high=1, low_open=True)
BLOCK_SIZE = Setting("block_size", "bs", "--block-size", "int", "Block size (tokens)",
                     "Tokens per KV block or page; empty = the engine/backend default.",
                     low=1, high=1_000_000, aliases=("--page-size",))
MAX_NUM_BATCHED_TOKENS = Setting(
    "max_num_batched_tokens", "mb", "--max-num-batched-tokens", "int",
    "max_num_batched_tokens (tokens)",
    "Tokens scheduled per step; sliding-window reservations grow with it.", low=1, high=MAX_TOKENS)
ASYNC_SCHEDULING = Setting(
    "async_scheduling", "as", "--async-scheduling", "bool", "Async scheduling",
    "vLLM ≥ 0.26: in-flight tokens = (pp + 1) × max_num_batched_tokens; off = releases before.")
HYBRID_MANAGER = Setting(
    "hybrid_manager", "hm", "--hybrid-manager", "tristate", "Hybrid KV-cache manager",
    "auto = the engine default; off sizes windowed layers as full attention.")
PREFIX_CACHING = Setting(
    "enable_prefix_caching", "pc", "--prefix-caching", "bool", "Prefix caching",
    "Mamba hybrids: prefix caching decides how many state pages a request reserves.")
MAX_CACHE_LEN = Setting("max_cache_len", "mc", "--max-cache-len", "int", "max_cache_len (tokens)",
                        "StaticCache pre-allocation; empty = the context length.",
                        low=1, high=1_000_000_000)
SWA_EVICTION_INTERVAL = Setting(
    "swa_eviction_interval", "se", "--swa-eviction-interval", "int", "SWA eviction interval (tokens)",
    "SGLang keeps up to window + this many tokens on sliding layers.", low=0, high=MAX_TOKENS)
EXPERT_PARALLEL = Setting(
    "ep", "ep", "--ep", "int", "Expert parallel size",
    "MoE experts split over this many ranks (their intermediate size over tp / ep); must divide "
    "tp. vLLM --enable-expert-parallel uses ep = tp; SGLang --ep-size.", low=1, high=4096,
    aliases=("--ep-size",))
MTP_LAYERS = Setting(
    "mtp", "mt", "--mtp", "bool", "Load MTP (next-n) layers",
    "Multi-token-prediction layers are loaded only when speculative decoding uses them.")


class EngineSettings(BaseModel):
    """Every engine knob; ``None`` means the engine's own default. ``tp``/``pp`` come from the query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, ge=1, le=4096)
    pp: int = Field(default=1, ge=1, le=4096)
    gpu_util: float | None = _setting(None, GPU_UTIL)
    block_size: int | None = _setting(None, BLOCK_SIZE)
    max_num_batched_tokens: int | None = _setting(None, MAX_NUM_BATCHED_TOKENS)
    async_scheduling: bool = _setting(True, ASYNC_SCHEDULING)
    hybrid_manager: bool | None = _setting(None, HYBRID_MANAGER)
    enable_prefix_caching: bool = _setting(True, PREFIX_CACHING)
    max_cache_len: int | None = _setting(None, MAX_CACHE_LEN)
    swa_eviction_interval: int = _setting(128, SWA_EVICTION_INTERVAL)
    ep: int = _setting(1, EXPERT_PARALLEL)
    mtp: bool = _setting(False, MTP_LAYERS)

    @model_validator(mode="before")
    @classmethod
    def _page_size_is_block_size(cls, data: Any) -> Any:
        """SGLang's ``page_size`` is this model's ``block_size`` (one knob, one name)."""
        if isinstance(data, dict) and "page_size" in data:
            data = dict(data)
            page = data.pop("page_size")
            if data.get("block_size") is None:
                data["block_size"] = page
        return data


def declared_settings() -> dict[str, Setting]:
    """Every user-facing setting by field name, read from ``EngineSettings``' declarations."""
    out: dict[str, Setting] = {}
    for name, info in EngineSettings.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get("setting"), dict):
            fields = dict(extra["setting"])  # type: ignore[arg-type]
            fields["aliases"] = tuple(fields.get("aliases", ()))
            out[name] = Setting(**fields)
    return out


SETTINGS: dict[str, Setting] = declared_settings()
SETTING_DEFAULTS: dict[str, Any] = {name: EngineSettings.model_fields[name].default for name in SETTINGS}
