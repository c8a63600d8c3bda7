"""The memory an engine keeps outside the KV cache besides the weights, split into named terms,
and the device capacity its budget starts from.

``Capacity``: the total the engine's allocator sees — CUDA's ``cudaMemGetInfo`` total (vLLM
``torch.cuda.mem_get_info()[1]`` in ``vllm/utils/mem_utils.py`` ``MemorySnapshot.measure``; SGLang
``get_available_gpu_memory``; TensorRT-LLM ``torch.cuda.mem_get_info`` in ``_util.py``), from the
catalogue's ``cuda_total_mib`` when it has it, else an explicit, labelled estimate.

``Reserve``: the runtime reserve as a list of ``ReserveTerm`` (name, bytes, formula with its
values, the engine source it follows, how it was obtained). Each engine builds its own terms
(``Engine.runtime_reserve``); a user override replaces one term (``--reserve-term NAME=GiB``) or the
total (``--reserve-gib``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kvplan.presets import GPU

GIB = 1 << 30
MIB = 1 << 20
#: nvidia-smi total − CUDA total seen in public runs that print both, MiB: H100 80GB 81,559 MiB vs
#: vLLM's ``total_gpu_memory`` 79.18–79.22 GiB (438–479), A100 40GB 40,960 vs 39.38–39.50 GiB
#: (512–635), L40S 46,068 vs "44.42 GiB" (582) (``/work/shared/reference/catalog.md`` §1b and
#: ``tests/fixtures/vllm_logs`` 09, 27–30). Used only when the catalogue lacks ``cuda_total_mib``.
CUDA_ESTIMATE_GAP_MIB = 512

Basis = Literal["source", "fit", "flat", "override", "derived"]


@dataclass(frozen=True)
class Capacity:
    """The device total an engine's budget starts from, with where it comes from."""

    bytes: int
    #: ``cuda_total`` (catalogue), ``estimate`` (derived from nvidia-smi or the marketed size),
    #: ``user`` (a custom accelerator: the GiB typed is the CUDA total).
    source: str
    #: The catalogue's status of the value (``logged``/``measured``/``estimate``…) or ``estimate``.
    status: str
    #: How the value was obtained, in words (shown beside it).
    note: str
    marketed: int
    nvidia_smi: int | None

    def as_json(self) -> dict[str, object]:
        return {"bytes": self.bytes, "source": self.source, "status": self.status, "note": self.note,
                "marketed": self.marketed, "nvidia_smi": self.nvidia_smi}


def cuda_capacity(gpu: GPU) -> Capacity:
    """What ``cudaMemGetInfo`` reports as total on ``gpu``: the catalogue's ``cuda_total_mib``; for a
    custom accelerator the GiB the user typed; else nvidia-smi's total − ``CUDA_ESTIMATE_GAP_MIB``
    (or the marketed bytes when nvidia-smi's figure is unknown too), labelled an estimate."""
    smi = gpu.reported_bytes
    if gpu.custom:
        return Capacity(gpu.capacity_bytes, "user", "user", "custom accelerator: the GiB given is the "
                        "CUDA total", gpu.marketed_bytes, smi)
    if gpu.cuda_total_bytes:
        status = gpu.status.get("cuda_total", "sourced")
        note = gpu.sources.get("cuda_total", "catalogue cuda_total_mib")
        return Capacity(gpu.cuda_total_bytes, "cuda_total", status, note, gpu.marketed_bytes, smi)
    if smi:
        value = smi - CUDA_ESTIMATE_GAP_MIB * MIB
        return Capacity(value, "estimate", "estimate",
                        f"estimate: nvidia-smi {smi // MIB:,} MiB − {CUDA_ESTIMATE_GAP_MIB} MiB (the gap "
                        "between nvidia-smi and the CUDA total in public runs)", gpu.marketed_bytes, smi)
    return Capacity(gpu.marketed_bytes, "estimate", "estimate",
                    f"estimate: marketed {gpu.marketed_memory or gpu.marketed_bytes} (no device-reported "
                    "total known)", gpu.marketed_bytes, None)


@dataclass(frozen=True)
class ReserveTerm:
    """One part of the runtime reserve."""

    name: str
    bytes: int
    formula: str
    source: str
    basis: Basis = "source"
    #: False for terms shown for information that the budget does not subtract (e.g. vLLM v0.19's
    #: CUDA-graph estimate, SGLang's ``reserved_mem`` already inside ``mem_fraction_static``).
    counted: bool = True

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "bytes": self.bytes, "formula": self.formula,
                "source": self.source, "basis": self.basis, "counted": self.counted}


@dataclass(frozen=True)
class Reserve:
    """The runtime reserve: its terms and the total the budget subtracts."""

    terms: tuple[ReserveTerm, ...]
    #: Set when the user gave the total (``--reserve-gib``): it replaces the sum of the terms.
    total_override: int | None = None

    @property
    def total(self) -> int:
        if self.total_override is not None:
            return self.total_override
        return sum(t.bytes for t in self.terms if t.counted)

    def with_overrides(self, terms: dict[str, float] | None, total_gib: float | None) -> Reserve:
        """Terms replaced by ``terms`` (name → GiB; a name the engine does not have is an error) and
        the total by ``total_gib``."""
        from kvplan.errors import KVPlanError

        out = self
        if terms:
            known = {t.name for t in self.terms if t.counted}
            for name in terms:
                if name not in known:
                    raise KVPlanError("reserve.term", value=name, choices=", ".join(sorted(known)) or "none")
            out = Reserve(tuple(
                replace(t, bytes=int(terms[t.name] * GIB), basis="override",
                        formula=f"{terms[t.name]:g} GiB (override; model: {t.bytes:,} B)")
                if t.name in terms else t for t in self.terms))
        if total_gib is not None:
            out = Reserve(out.terms, int(total_gib * GIB))
        return out

    def formula(self) -> str:
        if self.total_override is not None:
            return f"{self.total_override:,} B (given)"
        counted = [t for t in self.terms if t.counted]
        if not counted:
            return "0 B"
        return " + ".join(f"{t.name} {t.bytes:,}" for t in counted) + f" = {self.total:,} B"

    def as_json(self) -> dict[str, object]:
        return {"terms": [t.as_json() for t in self.terms], "total": self.total,
                "total_overridden": self.total_override is not None}


def flat_reserve(gib: float, why: str, source: str) -> Reserve:
    """One flat term (engines whose reserve kvplan does not model term by term)."""
    return Reserve((ReserveTerm("flat", int(gib * GIB),
                                f"{gib:g} GiB — {why}", source, basis="flat"),))
