"""How many LoRA adapters fit on the GPU beside the KV cache a workload needs.

Every GPU adapter slot (vLLM ``--max-loras``) costs the same bytes at the plan's ``max_lora_rank``
(``kvplan.engines.vllm.lora``), and the slots are held before the KV budget is taken, so more slots
mean fewer KV blocks. ``adapters_that_fit`` asks the plan's own question (``capacity.fit``: the
engine's budget, pool and requests that fit) for each candidate ``max_loras`` and returns the largest
with which ``users`` requests of ``tokens`` tokens still fit — exact, whole blocks included.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.capacity import fit
from kvplan.engines.settings import MAX_LORAS
from kvplan.plan import Plan


@dataclass(frozen=True)
class AdapterFit:
    """The answer: the largest ``max_loras`` that fits (0: not even one), the bytes its slots hold,
    the requests of the workload that then fit, and the largest the settings allow (searched)."""

    max_loras: int
    lora_bytes: int
    max_requests: int
    searched_up_to: int
    formula: str

    def as_json(self) -> dict[str, object]:
        return {"max_loras": self.max_loras, "lora_bytes": self.lora_bytes,
                "max_requests": self.max_requests, "searched_up_to": self.searched_up_to,
                "formula": self.formula}


def _with_loras(plan: Plan, n: int) -> Plan:
    settings = plan.query.settings.model_copy(update={
        "enable_lora": True, "max_loras": n,
        "max_cpu_loras": None if plan.query.settings.max_cpu_loras is None
        else max(n, plan.query.settings.max_cpu_loras)})
    return plan.vary(settings=settings)


#: The ledger terms of the adapter buffers: vLLM's slots, SGLang's pool (``--max-loras-per-batch``).
LORA_BUFFER_TERMS = frozenset({"reserve: lora_slots", "reserve: lora_pool"})


def _lora_bytes(plan: Plan) -> int:
    return sum(t.bytes for t in plan.ledger if t.name in LORA_BUFFER_TERMS)


def adapters_that_fit(plan: Plan, limit: int | None = None) -> AdapterFit:
    """The largest ``max_loras`` (1 … ``limit``, by default ``--max-loras``' upper bound) with which the
    plan's ``users`` requests of ``tokens`` tokens fit (``capacity.fit``), by bisection: the requests
    that fit only fall as slots grow. Bad LoRA settings raise their named error."""
    top = int(limit or MAX_LORAS.high or 1)

    def fits(n: int) -> bool:
        return fit(_with_loras(plan, n), search_gpus=False).fits

    low, high = 0, top
    if not fits(1):
        high = 0
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    best = _with_loras(plan, max(low, 1))
    result = fit(best, search_gpus=False)
    lora = _lora_bytes(best)
    q = plan.query
    if low:
        end = "max_loras + 1 does not fit" if low < top else f"searched up to {top:,}"
        formula = (f"largest max_loras with {q.users:,} requests of {q.tokens:,} tokens fitting: "
                   f"{low:,} (lora_slots {lora:,} B; {result.max_requests:,} requests then fit per "
                   f"replica; {end})")
    else:
        formula = (f"{q.users:,} requests of {q.tokens:,} tokens do not fit beside even one adapter "
                   f"slot (lora_slots {lora:,} B at max_loras 1)")
    return AdapterFit(low, lora if low else 0, result.max_requests if low else 0, top, formula)
