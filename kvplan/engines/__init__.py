"""Serving engines, one class per engine plus a table of release records, found through one
registry.

``get_engine(id)`` gives the engine object; every engine-specific rule (storage per cache kind,
settings and their labels, memory target, pool, default reserve) lives in its class, and what
differs between releases in its frozen release records (``Engine.releases``, oldest first):
``hf/`` (transformers ``DynamicCache``/``StaticCache``), ``vllm/`` (records in
``vllm/releases.py``), ``sglang/``, ``trtllm/``. Cache kinds are in ``kinds.py``, settings in
``settings.py``. Code outside this package asks the engine object and never compares engine names.
"""

from __future__ import annotations

from kvplan.arch import ModelArch, Recurrent
from kvplan.dtypes import KVDType
from kvplan.engines.base import (
    MLA_ONLY_DTYPES,
    Budget,
    Engine,
    EngineView,
    KVPool,
    Release,
    StartupCheck,
    kv_heads_per_rank,
    layer_kind,
    pp_partition,
    resolve_dtype,
)
from kvplan.engines.hf import HFDynamic, HFLegacy, HFStatic, QuantizedCacheModel, quantized_cache_allowed
from kvplan.engines.kinds import (
    VLLM_DEFAULT_BLOCK_SIZE,
    CacheRule,
    PagedRule,
    StateRule,
    StaticRule,
    TokenRule,
)
from kvplan.engines.settings import MAX_JSON_CHARS, MAX_TEXT_CHARS, SETTINGS, EngineSettings, Setting
from kvplan.engines.sglang import SGLang
from kvplan.engines.trtllm import TrtLlm
from kvplan.engines.vllm import Vllm, default_max_num_batched_tokens
from kvplan.errors import KVPlanError

#: The engine classes, in the order the UI lists them; each holds its table of release records.
ENGINE_CLASSES: tuple[type[Engine], ...] = (HFDynamic, HFLegacy, HFStatic, Vllm, SGLang, TrtLlm)


def _release_engines(cls: type[Engine]) -> dict[str, Engine]:
    """``latest`` (the newest record) then every record by its key, newest first: one engine
    object per record."""
    engines = [cls(record) for record in reversed(cls.releases)]
    return {"latest": engines[0], **{engine.record.key: engine for engine in engines}}


#: Every modelled release: engine id → {release key → engine object}, ``latest`` first, then newest
#: to oldest. An engine spelled ``id@release`` (``vllm@0.19``, ``vllm@0.33``) is that release; a
#: bare id is ``latest``, an alias of the newest record's engine (whose ``id`` is the bare id).
RELEASES: dict[str, dict[str, Engine]] = {cls.engine_id: _release_engines(cls) for cls in ENGINE_CLASSES}
#: The registry: engine id → the newest modelled release's engine object, in the order the UI
#: lists them.
REGISTRY: dict[str, Engine] = {engine_id: releases["latest"] for engine_id, releases in RELEASES.items()}
#: Engine id → label (what every number says it is for).
ENGINES: dict[str, str] = {engine_id: engine.label for engine_id, engine in REGISTRY.items()}
#: The engine the dashboard, ``fit`` and ``kv`` use when none is given.
DEFAULT_ENGINE = "vllm"
#: The HF engine the analyses that model transformers itself use (offloading, quantized caches).
HF_ENGINE = "hf"
#: The pre-allocating HF engine (``StaticCache``) the static-cache analyses use.
STATIC_ENGINE = "hf-static"
#: Those two engines as objects, for the analyses that model transformers itself (``kvplan.serving``,
#: ``kvplan.nocache``): they name the engine they model, not one the user chose.
HF_DYNAMIC: Engine = REGISTRY[HF_ENGINE]
HF_STATIC: Engine = REGISTRY[STATIC_ENGINE]


def get_engine(engine_id: str) -> Engine:
    """The engine registered as ``engine_id`` (``id`` or ``id@release``), or a named error listing
    the choices."""
    base, _, release = engine_id.partition("@")
    releases = RELEASES.get(base)
    if releases is None:
        raise KVPlanError("unknown.engine", value=engine_id, choices=", ".join(REGISTRY))
    engine = releases.get(release or "latest")
    if engine is None:
        raise KVPlanError("unknown.release", engine=base, value=release,
                          choices=", ".join(release_choices(base)))
    return engine


def release_choices(engine_id: str) -> list[str]:
    """The releases of ``engine_id`` kvplan models: ``latest`` (= the newest), then every release
    key, newest first (the newest's own key included)."""
    return list(RELEASES.get(engine_id.partition("@")[0], {}))


def has_release_choice(engine_id: str) -> bool:
    """Whether kvplan models more than one release of ``engine_id`` (the CLI's ``--engine-version``
    help and the sidebar's release picker list only those engines)."""
    engines = RELEASES.get(engine_id.partition("@")[0], {}).values()
    return len({id(engine) for engine in engines}) > 1


def engine_with_release(engine_id: str, release: str | None) -> str:
    """``engine_id`` pinned to ``release`` (``vllm``, ``0.19`` → ``vllm@0.19``; None or ``latest``:
    the newest)."""
    base = engine_id.partition("@")[0]
    return base if release in (None, "", "latest") else f"{base}@{release}"


def log_engine() -> str:
    """The engine whose start-up log ``calibrate`` compares with a plan (the first whose log record
    is ``compared``: vLLM's "GPU KV cache size" lines)."""
    return next(engine_id for engine_id, engine in REGISTRY.items()
                if engine.log_format is not None and engine.log_format.compared)


def prefix_engines() -> dict[str, Engine]:
    """Engines with a cross-request prefix cache, then HF (which shares nothing), for comparison:
    engine id → engine object."""
    return {**{e: engine for e, engine in REGISTRY.items() if engine.prefix_unit is not None},
            HF_ENGINE: REGISTRY[HF_ENGINE]}


def engine_view(arch: ModelArch, engine: str, kv_dtype: str = "bf16",
                settings: EngineSettings | None = None, stage_layers: tuple[int, int] | None = None,
                mla_block_size: int | None = None) -> EngineView:
    """The rules of ``arch`` under ``engine`` for one rank (layers ``stage_layers`` = [start, stop))."""
    return get_engine(engine).view(arch, kv_dtype, settings, stage_layers, mla_block_size)


def recurrent_state_bytes(layer: Recurrent, engine: str, model_dtype: KVDType, tp: int) -> int:
    """Per-sequence state of one recurrent layer under ``engine`` on one rank."""
    return get_engine(engine).state_bytes(layer, model_dtype, tp)


__all__ = [
    "DEFAULT_ENGINE", "ENGINES", "HF_DYNAMIC", "HF_ENGINE", "HF_STATIC", "STATIC_ENGINE",
    "MAX_JSON_CHARS", "MAX_TEXT_CHARS", "MLA_ONLY_DTYPES", "REGISTRY", "SETTINGS",
    "VLLM_DEFAULT_BLOCK_SIZE", "Budget", "CacheRule", "Engine", "EngineSettings", "EngineView",
    "KVPool", "PagedRule", "QuantizedCacheModel", "Release", "Setting", "StartupCheck", "StateRule",
    "StaticRule",
    "TokenRule", "ENGINE_CLASSES", "RELEASES", "default_max_num_batched_tokens", "engine_with_release",
    "has_release_choice",
    "release_choices", "engine_view", "get_engine", "kv_heads_per_rank",
    "layer_kind", "log_engine", "pp_partition", "prefix_engines",
    "quantized_cache_allowed", "recurrent_state_bytes", "resolve_dtype",
]
