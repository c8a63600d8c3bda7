"""Several engines on one GPU: instances started one after another on the same accelerator.

Each instance is a ``Plan`` (its model, engine, release, memory setting, length and users). They
start in the order given; when instance ``i`` starts, the ones before it that started hold their
memory, and each engine treats that memory by its own rule (``Engine.beside_others``, read from the
engine's code, through ``FitQuery.held_by_others``):

* vLLM v0.9.1+ (``v1/worker/gpu_worker.py`` ``init_device``, ``v1/worker/utils.py``
  ``request_memory``): ``gpu_memory_utilization`` is a share of the *whole* device; it refuses to
  start when the free memory is below ``total × util``, and its budget counts only its own use;
* vLLM v0.8–v0.9.0 (``determine_available_memory``): the budget is ``total × util`` minus every
  byte in use on the device, the others' included — the second engine needs a larger share;
* vLLM V0 v0.6: its own use only, and no check (beyond the free memory: out of memory);
* SGLang (``kv_cache_configurator.py`` ``_profile_available_bytes``): ``mem_fraction_static`` of
  the memory *free* before its weights load;
* TensorRT-LLM (``_util.py`` ``KvCacheCreator``): ``free_gpu_memory_fraction`` of what is free
  after loading and profiling (the others' bytes are part of the peak it subtracts);
* HF transformers: whatever is free.

What a started instance holds for the ones after it is its ledger's weights, runtime-reserve terms
(counted or not: the activation peak and CUDA graphs stay in its allocator) and KV pool; an instance
that does not start holds nothing. The CUDA context of each process (a few hundred MiB, outside
every engine's budget) is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.capacity import fit
from kvplan.engines import DEFAULT_ENGINE, SETTINGS, EngineSettings
from kvplan.errors import KVPlanError, short
from kvplan.plan import FitQuery, LedgerTerm, Plan, make_plan
from kvplan.presets import GPU, load_model

#: The most instances one question takes (one accelerator).
MAX_INSTANCES = 16
#: The keys of one instance besides the engine settings' link keys (``gu``, ``bs``, … declared in
#: ``kvplan.engines.settings``): name, model, engine (``id`` or ``id@release``), length, users, KV dtype.
INSTANCE_KEYS = ("name", "model", "engine", "tokens", "users", "kd")
#: Ledger groups an instance holds on the GPU once started.
HELD_GROUPS = frozenset({"weights", "reserve", "outside", "kv"})


@dataclass(frozen=True)
class InstanceAnswer:
    """One instance, in start order: the memory the instances before it held when it started, its
    memory setting, whether it starts (else the engine's message), what it then holds (ledger terms),
    its KV pool and the requests that fit, and the smallest change that makes it start and fit."""

    name: str
    engine: str
    engine_label: str
    release: str
    setting: str
    setting_value: float | None
    others: int
    starts: bool
    message: str
    holds: tuple[LedgerTerm, ...]
    kv_budget: int
    kv_pool_tokens: int
    max_requests: int
    users: int
    tokens: int
    fits: bool
    fix: str
    ledger: tuple[LedgerTerm, ...]

    @property
    def held_bytes(self) -> int:
        """What the instance holds once started (0 when it does not start)."""
        return sum(t.bytes for t in self.holds)

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "engine": self.engine, "engine_label": self.engine_label,
                "release": self.release, "setting": self.setting, "setting_value": self.setting_value,
                "held_by_others_at_start": self.others, "starts": self.starts, "message": self.message,
                "holds_bytes": self.held_bytes, "holds": [t.as_json() for t in self.holds],
                "kv_budget_bytes": self.kv_budget, "kv_pool_tokens": self.kv_pool_tokens,
                "max_requests": self.max_requests, "users": self.users, "tokens": self.tokens,
                "fits": self.fits, "fix": self.fix, "ledger": [t.as_json() for t in self.ledger]}


@dataclass(frozen=True)
class ShareAnswer:
    """Every instance on one GPU, in start order, and the memory left free after the last."""

    gpu: str
    capacity: int
    instances: tuple[InstanceAnswer, ...]

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.instances)

    @property
    def free_after(self) -> int:
        return self.capacity - sum(i.held_bytes for i in self.instances)

    @property
    def all_fit(self) -> bool:
        return all(i.starts and i.fits for i in self.instances)

    def as_json(self) -> dict[str, object]:
        return {"gpu": self.gpu, "capacity_bytes": self.capacity, "start_order": list(self.order),
                "free_after_bytes": self.free_after, "all_fit": self.all_fit,
                "instances": [i.as_json() for i in self.instances]}


def check_instances(named: list[tuple[str, Plan]]) -> None:
    """Named errors: no instance or more than ``MAX_INSTANCES``, a name given twice, instances on
    different accelerators or layouts, and device shares (``Engine.device_share``: vLLM's
    ``gpu_memory_utilization`` where it is a share of the whole device) that sum past 1."""
    if not named:
        raise KVPlanError("instances.none")
    if len(named) > MAX_INSTANCES:
        raise KVPlanError("instances.too_many", count=len(named), limit=MAX_INSTANCES)
    names = [n for n, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise KVPlanError("instances.duplicate", name=twice[0])
    first_name, first = named[0]
    for name, plan in named[1:]:
        if plan.device.id != first.device.id:
            raise KVPlanError("instances.gpu", name=name, gpu=plan.device.id, first=first_name,
                              first_gpu=first.device.id)
        if (plan.layout.tp, plan.layout.pp, plan.layout.num_gpus) != \
                (first.layout.tp, first.layout.pp, first.layout.num_gpus):
            raise KVPlanError("instances.layout", name=name, first=first_name)
    capacity = first.engine.capacity(first.device).bytes
    shares = [(name, plan.engine.device_share(capacity, plan.settings)) for name, plan in named]
    claimed = [(name, s) for name, s in shares if s is not None]
    total = sum(s for _, s in claimed)
    if len(claimed) > 1 and total > 1 + 1e-9:
        raise KVPlanError("instances.shares", total=f"{total:.3g}",
                          shares=", ".join(f"{n} {s:g}" for n, s in claimed))


def _answer(plan: Plan, others: int) -> tuple[Plan, bool, str, int, int, int, bool]:
    """The plan started beside ``others`` bytes: (plan, starts, message, KV budget, pool tokens,
    requests that fit, fits)."""
    plan = plan.vary(held_by_others=others)
    budget = plan.budget
    result = fit(plan, search_gpus=False)
    refusal = budget.refusal
    starts = refusal is None and result.starts
    message = refusal or ("" if result.starts else result.start_reason)
    return (plan, starts, message, budget.kv_budget, result.kv_pool_tokens if starts else 0,
            result.max_requests if starts else 0, starts and result.fits)


def _with_fraction(plan: Plan, value: float) -> Plan:
    return plan.vary(settings=plan.query.settings.model_copy(update={"gpu_util": value}))


def smallest_fix(plan: Plan, others: int) -> str:
    """The smallest memory setting (in the engine's ``fraction_steps``: 0.01; SGLang 0.001) with which
    the instance starts beside ``others`` bytes and its ``users`` requests of ``tokens`` fit —
    budgets grow with the setting, so the smallest is found by bisection; where vLLM's free-memory
    check refuses it, or no setting works, what to change in the order or the others instead."""
    capacity = plan.engine.capacity(plan.device).bytes
    label = plan.engine.setting_labels.get("gpu_util", ("memory fraction", ""))[0].split(" (")[0]
    current = plan.engine.memory_fraction(capacity, plan.settings)
    if current is None:
        return ("none by a memory setting: the engine takes what is free; start it first or give "
                "the instances before it less memory")
    steps = plan.engine.fraction_steps

    def fits(k: int) -> bool:
        return _answer(_with_fraction(plan, k / steps), others)[6]

    def lifts(k: int) -> bool:  # the budget at k, ignoring a start-up refusal
        trial = _with_fraction(plan, k / steps).vary(held_by_others=others)
        return fit(trial, search_gpus=False).fits and trial.budget.kv_budget > 0

    if not lifts(steps):
        alone = _answer(plan, 0)[6]
        return (f"none by {label}: even at 1.0 the requests do not fit beside the {others:,} B held "
                "by the instances started before" + ("; started first (alone on the GPU) it fits"
                                                    if alone and others else ""))
    low, high = 1, steps
    while low < high:
        mid = (low + high) // 2
        if lifts(mid):
            high = mid
        else:
            low = mid + 1
    value = low / steps
    if fits(low):
        default = plan.engine.memory_fraction(
            capacity, plan.settings.model_copy(update={"gpu_util": None})) or 0.0
        caveat = (f"; above the engine's default {default:g}, so less than it plans stays free for "
                  "activations and CUDA graphs" if value > default > 0 else "")
        return (f"{label} {value:g} (the smallest in steps of {1 / steps:g} with which it starts and "
                f"fits{caveat})")
    return (f"none by {label}: {value:g} is the smallest that holds the requests, but the engine then "
            f"refuses to start beside the {others:,} B held by the instances started before — give "
            "those a smaller share or start this one first")


def share(named: list[tuple[str, Plan]]) -> ShareAnswer:
    """Start every instance in order on one GPU (``check_instances`` first): each beside what the
    started ones before it hold (``HELD_GROUPS`` of their ledgers), per instance its memory, pool,
    requests that fit, the engine's message when it does not start, and the smallest fix."""
    check_instances(named)
    first = named[0][1]
    capacity = first.engine.capacity(first.device).bytes
    answers: list[InstanceAnswer] = []
    others = 0
    for name, plan in named:
        started, starts, message, kv_budget, tokens, requests, fits = _answer(plan, others)
        ledger = started.ledger
        holds = tuple(t for t in ledger if t.group in HELD_GROUPS) if starts else ()
        fix = "" if fits else smallest_fix(plan, others)
        value = started.engine.memory_fraction(capacity, started.settings)
        setting = started.engine.setting_labels.get("gpu_util", ("(none)", ""))[0].split(" (")[0]
        answers.append(InstanceAnswer(
            name, started.query.engine, started.engine.label, started.engine.release, setting, value,
            others, starts, message, holds, kv_budget, tokens, requests, plan.query.users,
            plan.query.tokens, fits, fix, ledger))
        others += sum(t.bytes for t in holds)
    return ShareAnswer(first.device.id, capacity, tuple(answers))


def parse_instance(text: str, gpu: GPU, *, index: int = 1, tp: int = 1, pp: int = 1,
                   num_gpus: int | None = None) -> tuple[str, Plan]:
    """One instance from ``KEY=VALUE,…`` (``INSTANCE_KEYS`` and the settings' link keys, e.g.
    ``name=chat,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8``): its name (default
    ``instance N``) and plan on ``gpu``; a named error for a bad key or value."""
    fields: dict[str, str] = {}
    by_key = {setting.key: (name, setting) for name, setting in SETTINGS.items()}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not value.strip():
            raise KVPlanError("instances.bad", text=short(text), why=f"{short(part)} is not KEY=VALUE")
        if key not in INSTANCE_KEYS and key not in by_key:
            raise KVPlanError("instances.bad", text=short(text), why=f"unknown key {short(key)}")
        if key in fields:
            raise KVPlanError("instances.bad", text=short(text), why=f"{short(key)} given twice")
        fields[key] = value.strip()
    if "model" not in fields:
        raise KVPlanError("instances.bad", text=short(text), why="no model=")
    settings: dict[str, Any] = {}
    for key, value in fields.items():
        if key in by_key:
            name, setting = by_key[key]
            try:
                settings[name] = setting.parse(value)
            except ValueError as exc:
                raise KVPlanError("instances.bad", text=short(text),
                                  why=f"{key} ({setting.flag}) {short(value)}: {exc}") from None
    numbers: dict[str, int] = {}
    for key, default in (("tokens", 4096), ("users", 1)):
        raw = fields.get(key, str(default))
        if not raw.isdigit() or int(raw) < 1:
            raise KVPlanError("instances.bad", text=short(text),
                              why=f"{key} must be a positive whole number, got {short(raw)}")
        numbers[key] = int(raw)
    arch = load_model(fields["model"])
    query = FitQuery(tokens=numbers["tokens"], users=numbers["users"], kv_dtype=fields.get("kd", "auto"),
                     engine=fields.get("engine", DEFAULT_ENGINE), tp=tp, pp=pp, num_gpus=num_gpus,
                     settings=EngineSettings(tp=tp, pp=pp, **settings))
    return fields.get("name", f"instance {index}"), make_plan(arch, gpu, query)
