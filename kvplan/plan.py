"""One plan per question: the engine resolved once, its settings, the layout and a memory ledger.

``make_plan(arch, gpu, query)`` is the one boundary where an engine id (``query.engine``: ``vllm``,
``vllm@0.19``) becomes an engine object (``kvplan.engines.get_engine``). Everything a question
needs is then read from the ``Plan``: the engine release, the settings as the engine resolves
them for this model, GPU and length (``Engine.own_settings`` → ``Engine.resolve_settings``), the
parallel layout, the weights per GPU as the engine loads them, the cache specs of the model's
layers (``Engine.view``), the memory budget (``memory_budget``), the KV pool and the ledger — every
term of one GPU's memory with its bytes, formula and source. The questions (``kvplan.capacity``,
``sizing``, ``serving``, ``nocache``, ``recommend``, ``calibrate``, ``designs``, ``report``, the CLI
and the dashboard) take a Plan; ``Plan.vary`` asks a neighbouring question (another KV dtype,
layout or accelerator) with the same engine object, without a second lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvplan.arch import ModelArch
from kvplan.engines import (
    DEFAULT_ENGINE,
    Budget,
    Engine,
    EngineSettings,
    EngineView,
    KVPool,
    StartupCheck,
    get_engine,
)
from kvplan.errors import KVPlanError
from kvplan.presets import GPU
from kvplan.weights import LoadingRules, WeightsLayout, read_quantization, weights_per_gpu

MAX_SEARCH_TOKENS = 100_000_000
_SETTING_FIELDS = frozenset(EngineSettings.model_fields) | {"page_size"}


class FitQuery(BaseModel):
    """The capacity question: everything the planner needs besides the model and the accelerator.

    Engine knobs travel in ``settings`` (one ``EngineSettings``); for convenience they may also be
    given flat (``FitQuery(block_size=32)``) and are moved into ``settings``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: int = Field(default=4096, ge=1, le=MAX_SEARCH_TOKENS)
    users: int = Field(default=1, ge=1, le=10_000_000)
    kv_dtype: str = "bf16"
    weight_dtype: str | None = None
    engine: str = DEFAULT_ENGINE
    num_gpus: int | None = Field(default=None, ge=1, le=4096)
    tp: int = Field(default=1, ge=1, le=4096)
    pp: int = Field(default=1, ge=1, le=4096)
    reserve_gib: float | None = Field(default=None, ge=0, le=100_000)
    #: Runtime-reserve terms replaced by the user: term name → GiB (``Engine.runtime_reserve``).
    reserve_terms: dict[str, float] | None = None
    kv_cache_memory_bytes: int | None = Field(default=None, ge=0)
    #: Bytes other processes (the instances started before this one, ``kvplan.instances``) hold on
    #: each GPU when this engine starts (``Engine.beside_others``).
    held_by_others: int = Field(default=0, ge=0, le=1 << 50)
    settings: EngineSettings = Field(default_factory=EngineSettings)

    @model_validator(mode="before")
    @classmethod
    def _flat_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not (_SETTING_FIELDS - {"tp", "pp"}) & data.keys():
            return data
        data = dict(data)
        base = data.get("settings")
        values = base.model_dump() if isinstance(base, EngineSettings) else dict(base or {})
        for key in list(data):
            if key in _SETTING_FIELDS - {"tp", "pp"}:
                values[key] = data.pop(key)
        data["settings"] = EngineSettings(**values)
        return data


@dataclass(frozen=True)
class Layout:
    """The parallel layout of one question: ``dp × tp × pp`` GPUs per replica (``dp`` data-parallel
    attention ranks of ``tp × pp``), ``replicas`` of them."""

    tp: int
    pp: int
    num_gpus: int
    dp: int = 1

    @property
    def replicas(self) -> int:
        return self.num_gpus // (self.tp * self.pp * self.dp)


@dataclass(frozen=True)
class LedgerTerm:
    """One term of one GPU's memory: what holds it, its bytes, the formula with this plan's values,
    and the source (engine file and function, or the catalogue entry)."""

    name: str
    group: str
    bytes: int
    formula: str
    source: str

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "group": self.group, "bytes": self.bytes, "formula": self.formula,
                "source": self.source}


def resolve_engine(engine_id: str) -> Engine:
    """The engine object of ``engine_id`` (``id`` or ``id@release``; a named error listing the
    choices): the one place outside ``kvplan.engines`` where an engine id becomes an engine. Only
    the boundaries call it — ``make_plan``, the CLI's parser, the link check and the sidebar."""
    return get_engine(engine_id)


def make_plan(arch: ModelArch, gpu: GPU | None, query: FitQuery) -> Plan:
    """The plan of ``query`` for ``arch`` on ``gpu`` (None: a question without an accelerator, such
    as KV bytes per token); its engine is resolved here, once."""
    return Plan(arch, gpu, query, resolve_engine(query.engine))


@dataclass(frozen=True)
class Plan:
    """One question, resolved: model, accelerator, the engine release, settings, layout, cache specs,
    budget, pool and memory ledger (each computed once, on first use)."""

    arch: ModelArch
    gpu: GPU | None
    query: FitQuery
    engine: Engine

    # ------------------------------------------------------------ neighbouring questions
    def vary(self, *, arch: ModelArch | None = None, gpu: GPU | None = None, **update: Any) -> Plan:
        """The same question with ``update`` applied to the query (and another model or GPU); a new
        engine id goes back through ``make_plan``, anything else keeps this engine object."""
        query = self.query.model_copy(update=update) if update else self.query
        arch = arch or self.arch
        gpu = gpu or self.gpu
        if query.engine != self.query.engine:
            return make_plan(arch, gpu, query)
        return Plan(arch, gpu, query, self.engine)

    def with_weight_dtype(self, weight_dtype: str | None) -> Plan:
        """``vary(weight_dtype=…)`` sharing this plan's resolved ``settings``, which read the query's
        settings, TP/PP, length, GPU and model but not the weight format (a sweep over formats
        resolves them once: ``recommend``)."""
        other = self.vary(weight_dtype=weight_dtype)
        other.__dict__["settings"] = self.settings  # the cached_property's slot (frozen dataclass)
        return other

    def model_only(self, arch: ModelArch | None = None, tokens: int | None = None, users: int = 1) -> Plan:
        """The model's own KV question under this engine object: its KV dtype, the engine's default
        settings and no accelerator (KV bytes of ``users`` sequences, as ``kvplan kv`` asks)."""
        query = FitQuery(tokens=tokens or self.query.tokens, users=users, kv_dtype=self.query.kv_dtype,
                         engine=self.query.engine)
        return Plan(arch or self.arch, None, query, self.engine)

    def for_engine(self, engine_id: str, **update: Any) -> Plan:
        """The same model and GPU under another engine (the analyses that model one engine, such as
        transformers' offloaded or static caches)."""
        return make_plan(self.arch, self.gpu, self.query.model_copy(update={"engine": engine_id, **update}))

    # ------------------------------------------------------------ the engine and its settings
    @property
    def release_key(self) -> str:
        """The release as ``--engine-version`` takes it (``latest``, ``0.19`` …)."""
        return self.query.engine.partition("@")[2] or "latest"

    @cached_property
    def settings(self) -> EngineSettings:
        """The query's engine settings as the engine uses them: the parallel layout, only the engine's
        own knobs (``Engine.own_settings``), and its defaults that depend on the GPU, the model or
        the length (``Engine.resolve_settings``)."""
        own = self.engine.own_settings(self.query.settings, tp=self.query.tp, pp=self.query.pp)
        return self.engine.resolve_settings(own, self.query.tokens, self.gpu, self.arch)

    @cached_property
    def layout(self) -> Layout:
        """``tp × pp`` must divide the GPU count (named error with the next count that works)."""
        tp, pp, dp = self.query.tp, self.query.pp, self.settings.dp
        gpus = self.query.num_gpus or tp * pp * dp
        per = tp * pp * dp
        if gpus % per:
            raise KVPlanError("parallel.gpus", gpus=gpus, tpp=per, need=-(-gpus // per) * per)
        return Layout(tp, pp, gpus, dp)

    @cached_property
    def kv_dtype(self) -> str:
        """The KV element format's name (``auto`` resolved to the dtype the engine runs the model in)."""
        return self.engine.kv_dtype(self.arch, self.query.kv_dtype).name

    @cached_property
    def context_limit(self) -> int | None:
        """The longest request the engine serves for this model (``Engine.context_limit``)."""
        limit = self.engine.context_limit(self.arch)
        return limit.tokens if limit else None

    @property
    def length_limit(self) -> int:
        """Longest context the engine accepts for the model, else the search bound."""
        limit = self.context_limit
        return limit if limit is not None and 0 < limit < MAX_SEARCH_TOKENS else MAX_SEARCH_TOKENS

    # ------------------------------------------------------------ weights
    @cached_property
    def weight_format(self) -> str:
        """The weight format the engine loads with ``weight_dtype`` unset: the checkpoint's own, except
        an unquantized float32 checkpoint, which the engine's auto dtype may downcast
        (``Engine.model_dtype``: vLLM bf16, SGLang bf16/fp16)."""
        own = checkpoint_format_name(self.arch)
        return self.engine.model_dtype(self.arch) if own == self.arch.model_dtype else own

    @cached_property
    def weights(self) -> WeightsLayout:
        """Weights per GPU by part and pipeline stage (TP, PP, the engine's EP/MTP, and what the engine
        release holds after loading on the GPU, ``Engine.loading_rules``)."""
        dtype = self.query.weight_dtype
        if dtype is None and self.weight_format != checkpoint_format_name(self.arch):
            dtype = self.weight_format
        rules = self.engine.loading_rules(self.gpu)
        settings = self.settings
        arch = self.arch
        if arch.weights.towers and self.engine.drops_towers(settings, arch):  # text only: no towers
            arch = arch.model_copy(update={"weights": arch.weights.model_copy(update={"towers": ()})})
        if settings.dp > 1 and arch.moe is not None:
            return _dp_weights(arch, dtype, self.query.tp, self.query.pp, settings.dp,
                               settings.mtp, rules)
        return _weights_cached(arch, dtype, self.query.tp, self.query.pp, settings.ep,
                               settings.mtp, rules)

    # ------------------------------------------------------------ cache specs, budget, pool
    @cached_property
    def specs(self) -> EngineView:
        """The cache specs of the whole model on one rank (``Engine.view``)."""
        return self.engine.view(self.arch, self.query.kv_dtype, self.settings)

    @cached_property
    def budget(self) -> Budget:
        """Memory per GPU: the device total, the engine's memory target, weights per stage, the
        runtime reserve term by term and the KV budget of every pipeline stage."""
        return memory_budget(self)

    @cached_property
    def _pool_with_notes(self) -> tuple[KVPool, tuple[str, ...]]:
        notes: list[str] = []
        return self.make_pool(self.budget.stage_budgets, notes), tuple(notes)

    @property
    def pool(self) -> KVPool:
        """The engine's KV pool for this plan's budget (``Engine.make_pool``)."""
        return self._pool_with_notes[0]

    @property
    def pool_notes(self) -> tuple[str, ...]:
        """What the engine remarked while building the pool (groups, padding, page sizes)."""
        return self._pool_with_notes[1]

    def make_pool(self, budgets: list[int], notes: list[str]) -> KVPool:
        """The engine's pool for other per-stage budgets (``Engine.make_pool``; remarks to ``notes``)."""
        return self.engine.make_pool(self.arch, self.device, self.query.kv_dtype, self.settings, budgets,
                                     notes, reserve=self.budget.reserve_detail)

    @cached_property
    def startup(self) -> StartupCheck:
        """What the engine decides at start-up about the request cap: ``max_num_seqs`` /
        ``max_running_requests``, the recurrent-state blocks, CUDA-graph capture sizes, and whether
        it starts (``Engine.startup_check``)."""
        return self.engine.startup_check(self.arch, self.device, self.settings, self.pool,
                                         self.query.tokens)

    @property
    def device(self) -> GPU:
        """The accelerator (a named error for a question asked without one)."""
        if self.gpu is None:
            raise KVPlanError("unknown.gpu", value="(none given)")
        return self.gpu

    @cached_property
    def ledger(self) -> tuple[LedgerTerm, ...]:
        """Every term of one GPU's memory (the heaviest pipeline stage): the device total, what the
        memory target holds back, the weights by part, each runtime-reserve term, the KV pool and
        what is left — each with bytes, formula and source."""
        return memory_ledger(self)


@lru_cache(maxsize=256)
def _weights_cached(arch: ModelArch, dtype: str | None, tp: int, pp: int, ep: int,
                    mtp: bool, rules: LoadingRules) -> WeightsLayout:
    """``weights_per_gpu`` once per model and layout (it walks every tensor; the dtypes and lengths
    a view sweeps do not change it)."""
    return weights_per_gpu(arch, dtype, tp, pp, ep, mtp, rules)


@lru_cache(maxsize=64)
def _dp_weights(arch: ModelArch, dtype: str | None, tp: int, pp: int, dp: int, mtp: bool,
                rules: LoadingRules) -> WeightsLayout:
    """Weights per GPU under data-parallel attention with expert parallelism: every part as a rank
    of ``tp`` GPUs holds it (attention, embeddings, router — replicated across the ``dp`` ranks), the
    routed experts split over all ``dp × tp`` GPUs (vLLM ``--enable-expert-parallel``: EP size =
    ``dp × tp``, ``FusedMoEParallelConfig.make``; SGLang ``--enable-dp-attention`` with ``--ep``)."""
    rank = _weights_cached(arch, dtype, tp, pp, 1, mtp, rules)
    wide = _weights_cached(arch, dtype, tp * dp, pp, tp * dp, mtp, rules)
    stages = tuple({**own, "experts": split.get("experts", 0)} if "experts" in own else own
                   for own, split in zip(rank.stages, wide.stages, strict=True))
    return replace(rank, stages=stages, ep=tp * dp)


def checkpoint_format_name(arch: ModelArch) -> str:
    """The checkpoint's own weight format in one word: the model dtype, or the quant method."""
    scheme = read_quantization(arch.weights.quantization, arch.model_dtype)
    return arch.model_dtype if scheme.method == "none" else scheme.method


def memory_budget(plan: Plan) -> Budget:
    """Validate the parallel layout and size the KV budget of every pipeline stage: the engine's
    ``capacity`` (CUDA's total), ``runtime_reserve`` (with the user's overrides), ``memory_target``
    and ``kv_budgets``; ``--kv-cache-memory-bytes`` replaces the budget (vLLM's flag)."""
    engine, query, gpu = plan.engine, plan.query, plan.device
    pp = query.pp
    plan.layout  # noqa: B018 — validates tp × pp against the GPU count first
    engine.check_parallel(plan.arch, query.tp)
    settings = plan.settings
    layout = plan.weights
    weights_total, stages = layout.total_bytes, layout.stage_bytes
    notes: list[str] = []
    formulas: dict[str, str] = {}
    capacity = engine.capacity(gpu)
    detail = engine.runtime_reserve(plan.arch, gpu, settings, query.tokens).with_overrides(
        query.reserve_terms, query.reserve_gib)
    reserve = detail.total
    formulas["capacity"] = f"{capacity.bytes:,} B ({capacity.note})"
    formulas["reserve"] = detail.formula()
    target, formulas["memory_target"] = engine.memory_target(capacity.bytes, settings, plan.arch, notes)
    target = engine.target_after_reserve(target, capacity.bytes, settings, detail, formulas)
    budgets = engine.kv_budgets(target, stages, reserve, settings, formulas, capacity.bytes, detail=detail)
    refusal = None
    if query.held_by_others:
        budgets, refusal = engine.beside_others(query.held_by_others, capacity.bytes, target, stages,
                                                reserve, settings, budgets, formulas, detail=detail)
    given = query.kv_cache_memory_bytes is not None
    if query.kv_cache_memory_bytes is not None:
        budgets = [query.kv_cache_memory_bytes] * pp
        notes.append("KV memory given directly (--kv-cache-memory-bytes); utilization ignored")
    weights_fit = max(stages) + reserve <= target or given
    formulas["kv_budget"] = (f"{target:,} − weights {max(stages):,} − reserve {reserve:,} = "
                             f"{min(budgets):,} B" if not given else f"{max(min(budgets), 0):,} B (given)")
    return Budget(target, weights_total, stages, reserve, budgets, weights_fit, formulas, notes,
                  capacity, detail, query.held_by_others, refusal)


#: Ledger groups: what a term is. ``outside`` terms are memory the engine uses that its budget does not
#: subtract (a release that profiles CUDA graphs but does not count them): listed, not summed;
#: ``others`` is what other processes held at start-up (``kvplan.instances``), also not summed: it
#: lies in what the memory target holds back or in the unallocated remainder.
LEDGER_GROUPS = ("capacity", "held back", "weights", "reserve", "outside", "kv", "free", "others")


def memory_ledger(plan: Plan) -> tuple[LedgerTerm, ...]:
    """The ledger of ``plan``'s heaviest GPU: ``device total = held back + weights + reserve + KV pool +
    unallocated``, each term with bytes, formula and source. The KV pool is what the engine allocates
    (whole blocks for paged pools: ``num_blocks × bytes per block``, ``Engine.make_pool``); the
    unallocated remainder is what is left of the device total once every other term is counted."""
    budget, engine = plan.budget, plan.engine
    release = engine.release
    capacity, reserve = budget.capacity, budget.reserve_detail
    assert capacity is not None and reserve is not None
    terms = [LedgerTerm("device total", "capacity", capacity.bytes, budget.formulas["capacity"],
                        f"catalogue {capacity.source} ({capacity.status})")]
    terms.append(LedgerTerm("held back by the memory target", "held back", capacity.bytes - budget.target,
                            f"{capacity.bytes:,} − memory target {budget.target:,} "
                            f"({budget.formulas['memory_target']})", f"{release} memory target"))
    heaviest = plan.weights
    for part, size in heaviest.heaviest.items():
        terms.append(LedgerTerm(f"weights: {part}", "weights", size,
                                f"{part} of the heaviest pipeline stage, per GPU ({heaviest.format_label})",
                                heaviest.format_source))
    overridden = reserve.total_override is not None
    for term in reserve.terms:
        group = "reserve" if term.counted and not overridden else "outside"
        terms.append(LedgerTerm(f"reserve: {term.name}", group, term.bytes,
                                f"{term.formula} [{term.basis}]" + ("" if group == "reserve" else
                                                                   " — not subtracted from the budget"),
                                term.source))
    if overridden:
        terms.append(LedgerTerm("reserve: given total", "reserve", budget.reserve,
                                f"{budget.reserve:,} B (the runtime reserve given)", "user"))
    pool = plan.pool
    if pool.num_blocks is not None and pool.bytes_per_block is not None:
        kv = pool.num_blocks * pool.bytes_per_block
        formula = (f"{pool.num_blocks:,} blocks × {pool.bytes_per_block:,} B per block "
                   f"(of the {budget.kv_budget:,} B KV budget)")
    else:
        kv = budget.kv_budget
        formula = f"the KV budget: {budget.formulas['kv_budget']}"
    terms.append(LedgerTerm("KV cache pool", "kv", kv, formula, f"{release} pool ({type(pool).__name__})"))
    counted = sum(t.bytes for t in terms if t.group in {"held back", "weights", "reserve", "kv"})
    terms.append(LedgerTerm("unallocated", "free", capacity.bytes - counted,
                            f"{capacity.bytes:,} − {counted:,} (the terms above but the device total)",
                            "remainder"))
    if budget.others:
        terms.append(LedgerTerm("held by other processes", "others", budget.others,
                                f"{budget.formulas.get('others', '')} — not summed: inside the memory "
                                "held back or the unallocated remainder",
                                f"{release} start-up beside other processes (Engine.beside_others)"))
    return tuple(terms)
