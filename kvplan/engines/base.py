"""The engine base class: what every engine (and release) declares and computes.

An engine is one class plus a table of frozen release records (``Release``, oldest first, each the
previous one with what changed): the class owns its label, the settings it honours (declared in
``kvplan.engines.settings``), its default runtime reserve, its storage (``specs``: cache kind → spec
class of ``kvplan.engines.kinds``, and ``layout``: the parameters of the byte formulas), its memory
target and KV budget and its pool arithmetic (``KVPool``), and branches on its record's traits where
releases differ. ``Engine.build_view`` is the one build loop: each engine adds only what is its own
(``view_shape``: block size, in-flight tokens, hybrid manager, notes; ``spec_params``: the kind it
stores a cache as and that spec's parameters). Concrete engines live in ``hf/``, ``vllm/``,
``sglang/`` and ``trtllm/`` and register in ``kvplan.engines`` (one engine object per record).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kvplan.arch import MLA, Attention, Kind, LayerSpec, ModelArch, Recurrent
from kvplan.dtypes import KVDType, get_dtype
from kvplan.engines.kinds import (
    TOKEN_KINDS,
    CacheRule,
    TokenLayout,
    cache_kinds,
    kv_heads_per_rank,
    layer_state_bytes,
    layer_token_bytes,
    sum_token_bytes,
)
from kvplan.engines.reserve import Capacity, Reserve, cuda_capacity, flat_reserve
from kvplan.engines.settings import EngineSettings
from kvplan.errors import KVPlanError
from kvplan.parallel import layer_partition, pp_partition  # noqa: F401 (re-exported by kvplan.engines)

if TYPE_CHECKING:
    from kvplan.engines.logs import PoolAnswer, StartupLog
    from kvplan.presets import GPU
    from kvplan.weights import ExpertRepack, LoadingRules

MLA_ONLY_DTYPES = frozenset({"fp8_ds_mla"})
GIB = 1 << 30


def resolve_dtype(name: str) -> KVDType:
    """A KV element format by name, or a named error listing the choices."""
    try:
        return get_dtype(name)
    except KeyError:
        from kvplan.dtypes import KV_DTYPE_CHOICES

        raise KVPlanError("unknown.dtype", value=name, choices=", ".join(KV_DTYPE_CHOICES)) from None


def layer_kind(layer: Attention | MLA) -> Kind:
    """Retention kind of an attention-like layer: full/sliding/chunked, or mla (sliding MLA → sliding)."""
    return layer.kind if isinstance(layer, Attention) else layer.cache_kind


@dataclass(frozen=True)
class ContextLimit:
    """The longest request an engine serves for a model, and how it derived it from the config."""

    tokens: int
    rule: str


@dataclass(frozen=True)
class EngineView:
    """All rules of one model on one rank for one engine, with the settings that shaped them."""

    engine: str
    dtype: KVDType
    rules: tuple[CacheRule, ...]
    block_size: int | None = None
    in_flight_tokens: int | None = None
    hybrid_manager: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def token_bytes(self) -> int:
        """Bytes one token adds while no window caps any layer (``Σ layers × bytes/token``)."""
        return sum_token_bytes(self.rules)

    @property
    def state_bytes(self) -> int:
        """Constant per-sequence state of every layer (recurrent states)."""
        return sum(rule.layers * rule.state_bytes for rule in self.rules)

    def held_bytes(self, tokens: np.ndarray) -> np.ndarray:
        total = np.zeros(np.shape(tokens), dtype=np.int64)
        for rule in self.rules:
            total = total + rule.held_bytes(tokens)
        return total

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        total = np.zeros(np.shape(tokens), dtype=np.int64)
        for rule in self.rules:
            total = total + rule.reserved_bytes(tokens)
        return total


class KVPool:
    """A KV pool sized for one GPU's budget, vectorised over the request length ``L``."""

    num_blocks: int | None = None
    block_size: int | None = None
    bytes_per_block: int | None = None
    #: What a request's cost (``users_cost``) is compared against.
    capacity: int = 0
    #: Whether ``blocks`` gives blocks per request (paged pools).
    paged: bool = False

    def per_request_bytes(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def max_requests(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def concurrency(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def pool_tokens(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def users_cost(self, L: np.ndarray, users: int) -> np.ndarray:
        """What ``users`` requests of length ``L`` need, in the unit of ``capacity``."""
        raise NotImplementedError

    def blocks(self, L: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def max_requests_for(self, L: int, budgets: np.ndarray) -> np.ndarray:
        """``max_requests(L)`` of this pool's layout for each row of per-stage ``budgets``
        (shape ``(n, pp)``, int64), with the arithmetic of the constructor vectorised over rows."""
        raise NotImplementedError

    def blocks_logging_tokens(self, tokens: int, L: int) -> tuple[int, int, str]:
        """The block counts for which the engine logs this KV-cache size in tokens (``low >
        high``: none), and how — for engines whose log ``calibrate`` compares (``Engine.log_format``)."""
        raise NotImplementedError

    def blocks_logging_concurrency(self, conc: float, decimals: int, L: int) -> tuple[int, int, str]:
        """The block counts whose logged maximum concurrency rounds to ``conc``, and how."""
        raise NotImplementedError

    def formulas(self, L: int) -> dict[str, str]:
        return {}


@dataclass
class Budget:
    """Memory per GPU for one engine: target, weights per pipeline stage, reserve, KV left."""

    target: int
    weights_total: int
    stage_weights: list[int]
    reserve: int
    stage_budgets: list[int]
    weights_fit: bool
    formulas: dict[str, str]
    notes: list[str]
    #: The device total the target started from, and the reserve's terms.
    capacity: Capacity | None = None
    reserve_detail: Reserve | None = None
    #: Memory other processes held on the GPU when this engine started (``FitQuery.held_by_others``),
    #: and what the engine then does (``Engine.beside_others``): its message when it does not start.
    others: int = 0
    refusal: str | None = None

    @property
    def kv_budget(self) -> int:
        return max(min(self.stage_budgets), 0)


@dataclass(frozen=True)
class StartupCheck:
    """What the engine decides at start-up about the request cap, before any request: the cap it
    runs with (``max_num_seqs`` — vLLM's flag, SGLang's ``max_running_requests``), the recurrent-state
    blocks or slots its pool holds (None without recurrent layers), the CUDA-graph capture sizes,
    what it does when the cap exceeds the state blocks (``action``: ``ok``, ``refuses``, ``clamps``,
    ``warns``), why (``reason``, with the engine source) and the condition that makes it start
    (``need``: the largest ``max_num_seqs`` the state blocks allow)."""

    starts: bool = True
    max_num_seqs: int | None = None
    state_blocks: int | None = None
    capture_sizes: tuple[int, ...] = ()
    action: str = "ok"
    reason: str = ""
    need: int | None = None
    #: Where the cap comes from (the default's rule or "set").
    cap_source: str = ""


@dataclass
class ViewShape:
    """What an engine decides once per view before the build loop (``Engine.view_shape``): the
    settings, and what the view reports (block size, in-flight tokens, hybrid manager, notes)."""

    settings: EngineSettings
    block_size: int | None = None
    in_flight_tokens: int | None = None
    hybrid_manager: bool | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Release:
    """One modelled release of an engine: the key ``--engine-version`` / the link's ``ev`` take
    (``0.33``), the name shown with every number (``vLLM v0.33``) and what changed from the previous
    record, with where it was read (file:line function). Engines subclass it with the traits that
    vary between their releases; a table is written oldest first, each record
    ``dataclasses.replace(previous, …)`` with only what changed."""

    key: str
    name: str
    changes: str = ""
    #: The first engine version this record covers (``0.10.0``; a log printing a version from here
    #: up to the next record's ``since`` is read with it: ``Engine.release_for_version``).
    since: str = "0"


class Engine:
    """One engine release: the engine's class (settings, storage rules, memory target, pool) with
    one of its release records (``record``; ``releases`` is the table, oldest first)."""

    #: The bare engine id (``vllm``): the newest record's id; older ones are ``id@key``.
    engine_id: ClassVar[str]
    label: ClassVar[str]
    short: ClassVar[str]
    #: The modelled releases, oldest first; the last one is ``latest``.
    releases: ClassVar[tuple[Release, ...]]
    #: The release this engine object follows.
    record: Release
    #: The flat reserve of engines whose reserve is not modelled term by term (``runtime_reserve``).
    default_reserve_gib: ClassVar[float] = 1.0

    def __init__(self, record: Release | None = None) -> None:
        self.record = self.releases[-1] if record is None else record

    @property
    def id(self) -> str:
        """``engine_id`` for the newest record, ``engine_id@key`` for an older one."""
        if self.record == self.releases[-1]:
            return self.engine_id
        return f"{self.engine_id}@{self.record.key}"

    @property
    def release(self) -> str:
        """The release whose source the rules follow (shown with every number)."""
        return self.record.name

    @classmethod
    def release_for_version(cls, version: str) -> tuple[Release, str]:
        """The record covering a printed engine version (the last whose ``since`` it reaches) and
        how it was chosen; a version before every record's, or past the newest's, is read with
        the nearest record, and the reason says so."""
        from kvplan.engines.logs import version_number

        number = version_number(version)
        covering = [r for r in cls.releases if version_number(r.since) <= number]
        record = covering[-1] if covering else cls.releases[0]
        how = f"{cls.short} {version} → {record.name}"
        if not covering:
            how += f" (older than every modelled release; read with the oldest, {record.name})"
        elif number[:2] > version_number(cls.releases[-1].since)[:2] and record is cls.releases[-1]:
            how += " (newer than every modelled release; read with the newest)"
        if re.search(r"(rc|dev|a|b)\d|\+", version):
            how += "; a pre-release or development build, read as the release it leads to"
        return record, how

    def release_for_log(self, log: StartupLog) -> tuple[Release, str] | None:
        """The record the log's own version line places it in (``release_for_version``) and how;
        None: the log prints no version."""
        return None if log.version is None else self.release_for_version(log.version)

    @property
    def setting_labels(self) -> dict[str, tuple[str, str]]:
        """Settings this engine honours → (label in this engine's vocabulary, default shown to
        users)."""
        return {}

    @property
    def reserve_term_names(self) -> tuple[str, ...]:
        """The runtime-reserve terms a user may replace (``runtime_reserve``'s counted terms)."""
        return ("flat",)
    #: Whether a request's KV is whole block ids across the engine's groups (shown as blocks × bytes).
    per_request_in_blocks: ClassVar[bool] = False
    #: The record of this engine's start-up log (``kvplan/engines/<engine>/log.py``), whose
    #: ``parse`` reads one (``parse_log``); None: kvplan reads no start-up log of this engine.
    log_format: ClassVar[type[StartupLog] | None] = None
    #: Prefix sharing unit: None = no cross-request prefix cache; else the default unit in tokens.
    prefix_unit: ClassVar[int | None] = None
    #: Whether K/V heads must divide (or be divided by) TP for this engine's layout.
    checks_tp_heads: ClassVar[bool] = False
    #: What this engine does with a length above the model's ``max_position_embeddings``, and the
    #: override that lets it run anyway (shown with every "beyond the model's limit" answer).
    long_context_rule: ClassVar[str] = ("runs past max_position_embeddings without refusing, but "
                                        "the model was not trained for it (positions beyond are "
                                        "extrapolated)")
    #: Whether the engine serves MoE models with data-parallel attention and experts split over the
    #: ranks (expert parallelism), so the recommender may offer EP layouts.
    expert_parallel: ClassVar[bool] = False
    #: The spec class each cache kind is stored in (``kvplan.engines.kinds``; vLLM: ``PAGED_KINDS``).
    specs: ClassVar[dict[Kind, type[CacheRule]]] = TOKEN_KINDS
    #: The parameters of the byte formulas (heads per rank, MLA/indexer/state layout).
    layout: ClassVar[TokenLayout] = TokenLayout()
    #: Whether the view lists the recurrent states before the attention-like caches.
    states_first: ClassVar[bool] = True

    def context_limit(self, arch: ModelArch) -> ContextLimit | None:
        """HF transformers enforces no limit (positions past it are extrapolated); the model's
        ``max_position_embeddings`` is the length it was built for, so kvplan flags beyond it."""
        limit = arch.max_position_embeddings
        if not limit:
            return None
        return ContextLimit(limit, f"max_position_embeddings {limit:,}; transformers does not enforce it")

    #: The flag that caps a request's images (``image_limit``) and what the engine does with a
    #: request above it (the refusal ``kvplan.multimodal.image_prompt_tokens`` names); empty where
    #: kvplan knows no such flag of the engine.
    image_limit_flag: ClassVar[str] = ""
    image_limit_refusal: ClassVar[str] = ""
    #: Each engine's flag that caps a request's items: (flag, setting, the engine it belongs to).
    _FOREIGN_LIMITS: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("--limit-mm-per-prompt", "limit_mm_per_prompt", "vLLM"),
        ("--limit-mm-data-per-request", "limit_mm_data_per_request", "SGLang"))

    def image_limit(self, settings: EngineSettings, modality: str = "image") -> int | None:
        """The most items of ``modality`` (image, video) one request may bring, or None: no
        limit. By default None: kvplan knows no flag of this engine that caps a request's images
        (TensorRT-LLM's PyTorch backend sizes its encoder by ``encoder_max_num_tokens`` and
        ``encoder_batch_size``, not a per-request count; transformers has none); vLLM
        (``Vllm.image_limit``) and SGLang (``SGLang.image_limit``) override it with their own.
        vLLM's ``--limit-mm-per-prompt`` and SGLang's ``--limit-mm-data-per-request`` are refused
        by name: not this engine's flags."""
        for flag, name, owner in self._FOREIGN_LIMITS:
            if getattr(settings, name) is not None:
                raise KVPlanError("mm.limit_flag", flag=flag, engine=self.label,
                                  detail=f"it is {owner}'s flag; kvplan knows no {self.short} flag "
                                         "that caps a request's images or videos")
        return None

    def media_refusal(self, arch: ModelArch) -> str | None:
        """Why this release sizes no request that brings images or videos of ``arch``, or None: it
        does (every engine but TensorRT-LLM, ``TrtLlm.media_refusal``). Raised by ``check_media``."""
        return None

    def check_media(self, arch: ModelArch, images: int = 0, videos: int = 0) -> None:
        """A request of ``images`` images and ``videos`` videos refused by name where
        ``media_refusal`` gives a reason (the CLI's ``_image_request``, the scenario's
        ``scenario_image_tokens`` / ``scenario_video_tokens``); nothing for a text-only request."""
        if not images and not videos:
            return
        refusal = self.media_refusal(arch)
        if refusal is None:
            return
        if images:
            raise KVPlanError("mm.images", count=images, key="images", detail=refusal)
        raise KVPlanError("mm.videos", count=videos, key="videos", detail=refusal)

    # ------------------------------------------------------------ settings
    def own_settings(self, settings: EngineSettings, **update: object) -> EngineSettings:
        """``settings`` (with ``update``) and every knob this engine does not have reset to its
        default — one copy at most."""
        from kvplan.engines.settings import SETTING_DEFAULTS

        own = self.setting_labels  # a property (vLLM builds it per call): read once
        changes = {k: v for k, v in update.items() if getattr(settings, k) != v}
        changes.update({k: v for k, v in SETTING_DEFAULTS.items() if k not in own
                        and getattr(settings, k) != v})
        return settings.model_copy(update=changes) if changes else settings

    def resolve_settings(self, settings: EngineSettings, tokens: int, gpu: GPU | None = None,
                         arch: ModelArch | None = None) -> EngineSettings:
        """Fill the engine's own defaults that depend on the request, the GPU or the model."""
        return settings

    # ------------------------------------------------------------ storage
    def model_dtype(self, arch: ModelArch) -> str:
        """The dtype the engine runs the model in with ``dtype=auto`` (the config's, unless the
        engine downcasts it)."""
        return arch.model_dtype

    def kv_dtype(self, arch: ModelArch, name: str) -> KVDType:
        """The KV element format for ``name``; ``auto`` = the dtype the engine runs the model in."""
        return resolve_dtype(self.model_dtype(arch) if name == "auto" else name)

    #: Where the engine reads a checkpoint's KV format for ``auto`` (named in the pool's notes).
    auto_kv_source: ClassVar[str] = ""

    def auto_kv_note(self, arch: ModelArch, name: str) -> list[str]:
        """A note when ``auto`` is not the model dtype: the checkpoint's quantization config declares
        the KV format and the engine takes it (``kv_dtype``; ``auto_kv_source``)."""
        if name != "auto":
            return []
        resolved = self.kv_dtype(arch, "auto").name
        if resolved == resolve_dtype(self.model_dtype(arch)).name:
            return []
        return [f"KV dtype auto = {resolved}: the checkpoint's quantization config declares its KV "
                f"format ({self.auto_kv_source})"]

    def check_dtype(self, arch: ModelArch, dtype: KVDType) -> None:
        """Refuse formats this engine cannot store for ``arch`` (named error)."""

    def check_layer_dtype(self, layer: LayerSpec, dtype: KVDType) -> None:
        """Refuse an MLA-only format (``fp8_ds_mla``) for a standard attention layer."""
        if isinstance(layer, Attention) and dtype.name in MLA_ONLY_DTYPES:
            raise KVPlanError("engine.dtype", engine=self.id, dtype=dtype.name,
                              why="this layout exists only for MLA layers")

    def speculative(self, arch: ModelArch, settings: EngineSettings,
                    gpu: GPU | None = None) -> object | None:
        """The speculative-decoding settings as this release resolves them for ``arch`` (each
        engine's ``spec_decode.py``); None for an engine or run without it."""
        return None

    def speculative_summary(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                            kv_dtype: str) -> dict[str, object] | None:
        """Speculative decoding as the engine resolves it (``FitResult.speculative``, ``fit
        --json``'s ``speculative``): the resolved spec (``speculative``) summed up over the largest
        pipeline stage's view by the engine's ``summarize_speculative``; None without it."""
        spec = self.speculative(arch, settings, gpu)
        if spec is None:
            return None
        return self.summarize_speculative(spec, self.stage_view(arch, kv_dtype, settings, []),
                                          settings)

    def summarize_speculative(self, spec: Any, view: EngineView,
                              settings: EngineSettings) -> dict[str, object]:
        """The engine's summary of its resolved ``spec`` (the hook of ``speculative_summary``; an
        engine whose ``speculative`` resolves one overrides it)."""
        raise NotImplementedError(f"{self.id}: speculative decoding has no summary")

    def token_bytes(self, layer: LayerSpec, dtype: KVDType, tp: int) -> int:
        """Bytes per token per layer per rank across the layer's caches (``kinds.layer_token_bytes``
        with this engine's ``layout``; 0 for states and layers without a cache)."""
        self.check_layer_dtype(layer, dtype)
        return layer_token_bytes(layer, dtype, tp, self.layout)

    def state_bytes(self, layer: Recurrent, model_dtype: KVDType, tp: int) -> int:
        """Per-sequence state of one recurrent layer on one rank (``kinds.layer_state_bytes``)."""
        return layer_state_bytes(layer, model_dtype, tp, self.layout)

    def unserved_reason(self, arch: ModelArch) -> str | None:
        """Why this engine release cannot serve ``arch`` at all (None: it can)."""
        return None

    def check_served(self, arch: ModelArch) -> None:
        """Refuse a model the engine release has no implementation for (named error)."""
        why = self.unserved_reason(arch)
        if why is not None:
            raise KVPlanError("engine.unserved", engine=self.short, release=self.release,
                              architecture=arch.architecture or arch.model_type, why=why)

    def view(self, arch: ModelArch, kv_dtype: str = "bf16", settings: EngineSettings | None = None,
             stage_layers: tuple[int, int] | None = None,
             mla_block_size: int | None = None) -> EngineView:
        """The rules of ``arch`` on one rank (layers ``stage_layers`` = [start, stop)).

        Identical layers are grouped first (``Counter`` over frozen specs), so the work grows with
        the distinct layer kinds, not the layers.
        """
        settings = settings or EngineSettings()
        self.check_served(arch)
        dtype = self.kv_dtype(arch, kv_dtype)
        self.check_dtype(arch, dtype)
        start, stop = stage_layers or (0, arch.n_layers)
        counts = arch.layer_counts(start, stop)
        for layer in counts:
            self.check_layer_dtype(layer, dtype)
        return self.build_view(arch, dtype, resolve_dtype(self.model_dtype(arch)), settings, counts,
                               mla_block_size)

    def build_view(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> EngineView:
        """The generic build loop: every cache of every distinct layer (``kinds.cache_kinds``) →
        the kind the engine stores it as and that spec's parameters (``spec_params``) → the spec
        class of ``specs``, built by its ``for_layer`` (states in the model dtype)."""
        shape = self.view_shape(arch, dtype, model_dtype, settings, counts, mla_block_size)
        rules: list[CacheRule] = []
        for layer, n in counts.items():
            for kind in cache_kinds(layer):
                stored, params = self.spec_params(kind, layer, shape)
                rules.append(self.specs[stored].for_layer(
                    stored, layer, n, model_dtype if stored.holds_state else dtype, settings.tp,
                    self.layout, **params))
        if self.states_first:
            rules.sort(key=lambda rule: not rule.kind.holds_state)
        return EngineView(self.id, dtype, tuple(rules), block_size=shape.block_size,
                          in_flight_tokens=shape.in_flight_tokens, hybrid_manager=shape.hybrid_manager,
                          notes=tuple(dict.fromkeys(shape.notes)))

    def view_shape(self, arch: ModelArch, dtype: KVDType, model_dtype: KVDType,
                   settings: EngineSettings, counts: dict[LayerSpec, int],
                   mla_block_size: int | None) -> ViewShape:
        """What this engine decides once per view (default: nothing but the settings)."""
        return ViewShape(settings)

    def spec_params(self, kind: Kind, layer: LayerSpec,
                    shape: ViewShape) -> tuple[Kind, dict[str, Any]]:
        """The kind this engine stores ``layer``'s cache of ``kind`` as, and that spec's parameters
        (default: as it is, no parameters)."""
        return kind, {}

    def per_request_reserved_bytes(self, arch: ModelArch, view: EngineView, kv_dtype: str,
                                   settings: EngineSettings, tokens: int,
                                   mla_block_size: int | None) -> tuple[int, list[str]] | None:
        """Bytes one request reserves when the engine's pool counts more than its rules (vLLM's
        block ids across groups); None = the rules' own reservation."""
        return None

    # ------------------------------------------------------------ memory
    def startup_check(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, pool: KVPool,
                      tokens: int) -> StartupCheck:
        """The start-up decision about the request cap (``StartupCheck``); engines without one
        start with no cap."""
        return StartupCheck()

    def dp_flags(self, dp: int, tp: int) -> str:
        """How this engine is launched with ``dp`` data-parallel attention ranks of ``tp`` GPUs."""
        return f"dp {dp} × tp {tp}"

    def request_caps(self, arch: ModelArch, gpu: GPU, settings: EngineSettings, pool: KVPool,
                     tokens: int, budgets: np.ndarray) -> np.ndarray | None:
        """``startup_check``'s cap for each row of per-stage ``budgets`` (``(n, pp)``), 0 where the
        engine does not start; None: no cap (the recommender's vectorised ``max_requests_for``)."""
        return None

    def capacity(self, gpu: GPU) -> Capacity:
        """The device total the budget starts from: what CUDA reports (``torch.cuda.mem_get_info``
        total — every engine kvplan models allocates through PyTorch), or a labelled estimate."""
        return cuda_capacity(gpu)

    def runtime_reserve(self, arch: ModelArch, gpu: GPU, settings: EngineSettings,
                        tokens: int) -> Reserve:
        """Memory besides the weights that the engine keeps outside the KV cache, term by term
        (default: one flat ``default_reserve_gib`` term)."""
        return flat_reserve(self.default_reserve_gib, "activations and buffers are not modelled for "
                            f"{self.short} (it has no profile run to follow)", f"{self.release}")

    def check_parallel(self, arch: ModelArch, tp: int) -> None:
        """Refuse tensor-parallel sizes the engine's KV layout cannot split (named error)."""
        if self.checks_tp_heads and arch.kv_heads and not arch.is_mla:
            kv_heads_per_rank(arch.kv_heads, tp)

    def memory_target(self, capacity: int, settings: EngineSettings, arch: ModelArch,
                      notes: list[str]) -> tuple[int, str]:
        """Bytes per GPU the engine may use, and the formula with its values."""
        return capacity, f"all device memory = {capacity:,} B"

    def target_after_reserve(self, target: int, capacity: int, settings: EngineSettings,
                             detail: Reserve, formulas: dict[str, str]) -> int:
        """The memory target once the reserve's terms are known (default: unchanged; SGLang's
        fraction applies to what is free before loading)."""
        return target

    def kv_budgets(self, target: int, stage_weights: list[int], reserve: int,
                   settings: EngineSettings, formulas: dict[str, str], capacity: int = 0,
                   detail: Reserve | None = None) -> list[int]:
        """KV bytes per pipeline stage: ``target − weights − reserve`` (``detail``: the reserve's terms,
        for an engine that treats them differently)."""
        return [target - w - reserve for w in stage_weights]

    def make_pool(self, arch: ModelArch, gpu: GPU, kv_dtype: str, settings: EngineSettings,
                  budgets: list[int], notes: list[str], reserve: Reserve | None = None) -> KVPool:
        """The pool cut from the per-stage KV ``budgets`` (remarks to ``notes``). ``reserve`` is the
        plan's runtime reserve (its terms, the user's overrides), for an engine whose pool reads a term
        besides the budget (TensorRT-LLM: the activation peak freed before the manager is built)."""
        raise NotImplementedError

    # ------------------------------------------------------------ several engines on one GPU
    #: The memory setting's grid when kvplan searches it (1 / steps: 0.01).
    fraction_steps: ClassVar[int] = 100

    def memory_fraction(self, capacity: int, settings: EngineSettings) -> float | None:
        """The memory setting in force (``gpu_util``: the flag or the release's default); None for an
        engine without one (HF transformers takes what is free)."""
        return None

    def device_share(self, capacity: int, settings: EngineSettings) -> float | None:
        """The share of the whole device this instance claims whatever else runs there (vLLM's
        ``gpu_memory_utilization`` where the release sizes its own memory only), else None: such
        shares of the instances on one GPU may not sum past 1."""
        return None

    def beside_others(self, others: int, capacity: int, target: int, stage_weights: list[int],
                      reserve: int, settings: EngineSettings, budgets: list[int],
                      formulas: dict[str, str], detail: Reserve | None = None,
                      ) -> tuple[list[int], str | None]:
        """The KV budgets when other processes already hold ``others`` bytes of the GPU at start-up,
        and the engine's message when it does not start (None: it starts). Default (an engine that
        grows into free memory, HF transformers): what others hold comes off every budget."""
        formulas["others"] = (f"{others:,} B held by other processes come off the budget: "
                              f"{min(budgets):,} − {others:,}")
        return [b - others for b in budgets], weights_oom(others, capacity, stage_weights)

    def pool_gpu_key(self, gpu: GPU, arch: ModelArch, kv_dtype: str) -> object:
        """What ``make_pool`` reads from the GPU besides the resolved settings: GPUs with equal keys
        and settings get the same pool layout (only the budget differs). Default: nothing."""
        return None

    def pool_settings_key(self, settings: EngineSettings, arch: ModelArch) -> object:
        """The part of the resolved settings ``make_pool`` depends on for ``arch`` (default: all)."""
        return settings

    def stage_view(self, arch: ModelArch, kv_dtype: str, settings: EngineSettings,
                   notes: list[str]) -> EngineView:
        """The rules of the pipeline stage with the most layers (what decides a pool's size), its
        notes added to ``notes``."""
        view = self.view(arch, kv_dtype, settings, stage_layers=self.largest_stage(arch, settings.pp))
        notes.extend(view.notes)
        return view

    def largest_stage(self, arch: ModelArch, pp: int) -> tuple[int, int]:
        parts = layer_partition(arch, pp)
        index = int(np.argmax(parts))
        start = sum(parts[:index])
        return start, start + parts[index]

    # ------------------------------------------------------------ serving views
    def shared_prefix_unit(self, block_size: int | None) -> int | None:
        """Granularity of the prefix cache in tokens, or None without one."""
        if self.prefix_unit is None:
            return None
        return block_size or self.prefix_unit

    # ------------------------------------------------------------ start-up log
    def parse_log(self, log: str | bytes) -> StartupLog | None:
        """This engine's start-up log read into its record (``log_format.parse``; named
        ``calibrate.*`` errors for a log it cannot read); None: the engine has no parser."""
        return None if self.log_format is None else self.log_format.parse(log)

    def log_lines(self, result: PoolAnswer) -> tuple[str, ...]:
        """The capacity lines this engine's start-up log would print for a planned pool, as the
        engine prints them (empty: kvplan models none)."""
        return ()

    # ------------------------------------------------------------ weights as loaded
    def mxfp4_moe_repack(self, gpu: GPU | None) -> ExpertRepack | None:
        """How this release re-lays out MXFP4 MoE experts on ``gpu`` when loading (None: held as
        the checkpoint stores them)."""
        return None

    def drops_towers(self, settings: EngineSettings, arch: ModelArch | None = None) -> bool:
        """Whether this release, with ``settings``, loads no vision/audio tower of ``arch`` (a
        text-only deployment of a multimodal checkpoint); default: the towers are loaded."""
        return False

    def loading_rules(self, gpu: GPU | None) -> LoadingRules:
        """What this release holds of the stored weights after loading on ``gpu`` (which scales
        survive, how MXFP4 experts are re-laid out), applied by ``kvplan.weights.weights_per_gpu``;
        each engine's come from ``kvplan/engines/<engine>/weights.py``. Default: the scale rules
        of ``kvplan.weights.LoadingRules`` with this release's ``mxfp4_moe_repack``."""
        from dataclasses import replace

        from kvplan.weights import DEFAULT_RULES

        return replace(DEFAULT_RULES, mxfp4_experts=self.mxfp4_moe_repack(gpu))


def weights_oom(others: int, capacity: int, stage_weights: list[int]) -> str | None:
    """Weights larger than what the other processes leave free cannot load: PyTorch's caching
    allocator raises ``torch.OutOfMemoryError`` ("CUDA out of memory") in every engine kvplan models."""
    free, heaviest = capacity - others, max(stage_weights)
    if heaviest > free:
        return (f"CUDA out of memory while loading the weights: {heaviest:,} B per GPU, {free:,} B "
                f"free ({capacity:,} − {others:,} held by the instances started before)")
    return None


def raised_block(state: int, per_token: int, align: int, chunk: int | None) -> int:
    """Smallest attention block (tokens) whose page holds ``state`` bytes: a multiple of ``align``,
    or of ``lcm(chunk, align)`` in vLLM's "all" Mamba cache mode (``Platform._align_hybrid_block_size``)."""
    if chunk is not None:
        step = math.lcm(chunk, align)
        tokens_per_state = -(-state // per_token)
        return step * -(-tokens_per_state // step)
    return align * -(-state // (align * per_token))
