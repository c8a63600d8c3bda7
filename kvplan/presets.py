"""Load the data files in ``presets/``: models (config.json + sources), accelerators, scenarios."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvplan.arch import ModelArch
from kvplan.config_import import parse_config, with_hf_quant_config
from kvplan.errors import MESSAGES, KVPlanError, clip
from kvplan.multimodal import Processor

#: ``presets/`` of a source checkout, else the copy ``pip install .`` puts in the package
#: (``kvplan/_presets``, declared in pyproject.toml's ``[tool.setuptools.package-dir]``).
_CHECKOUT_PRESETS = Path(__file__).resolve().parent.parent / "presets"
PRESETS_DIR = _CHECKOUT_PRESETS if (_CHECKOUT_PRESETS / "models").is_dir() \
    else Path(__file__).resolve().parent / "_presets"
#: Bounds of a user-defined accelerator: memory GiB, bandwidth TB/s, dense BF16 TFLOPS (the
#: dashboard's link and widgets read them through ``kvplan.scenario.BOUNDS``).
CUSTOM_GPU_LIMITS: dict[str, tuple[float, float]] = {
    "memory": (0.1, 1_000_000.0), "bandwidth": (0.01, 10_000.0), "tflops": (0.1, 1_000_000.0)}


class ModelPreset(BaseModel):
    """One checkpoint as published: its config.json (``config``, with its ``quantization_config``
    or the ``hf_quant_config.json`` it ships), the safetensors index's ``metadata.total_size``
    (``index_total_size``, a cross-check of the weights) and the sources of both.

    ``hf_repo`` (the Hub repo id) is the preset's key; ``id`` is the name links and scenarios use
    (the short id of the presets that predate Hub ids, else the Hub id); ``aliases`` are further
    names that resolve to it."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    hf_repo: str = Field(min_length=3)
    aliases: tuple[str, ...] = ()
    family: str = ""
    #: ``metadata.total_size`` of the checkpoint's ``model.safetensors.index.json`` (bytes of every
    #: stored tensor); None where the index was not retrieved (its source then says so).
    index_total_size: int | None = Field(default=None, ge=1)
    index_source: str = ""
    #: ``hf_quant_config.json`` as published, where the checkpoint keeps its format there (ModelOpt
    #: ≤ 0.29) and config.json has no ``quantization_config``; ``load_model`` then reads it as
    #: the quantization_config, as vLLM does (``transformers_utils/config.py`` ``get_config``).
    hf_quant_config: dict[str, Any] | None = None
    hf_quant_config_source: str = ""

    @property
    def checkpoint_config(self) -> dict[str, Any]:
        """config.json with the format as the engine reads it (``hf_quant_config.json`` merged in
        when config.json has no ``quantization_config``)."""
        return with_hf_quant_config(self.config, self.hf_quant_config)
    params_total: int
    params_active: int | None = None
    params_source: str = ""
    config_source: str = ""
    notes: str = ""
    config: dict[str, Any]


class GPU(BaseModel):
    """One accelerator; ``capacity_bytes`` is what the device reports when known."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    vendor: str = ""
    marketed_memory: str = ""
    marketed_bytes: int = Field(ge=1)
    reported_bytes: int | None = None
    reported_mib: int | None = None
    #: Whether NVML (``nvmlDeviceGetMemoryInfo``, nvidia-smi's memory column) reports the device's
    #: memory; False where it answers "Not Supported" (the GB10's unified memory): engines that
    #: read their defaults from NVML's total then fall back (vLLM ``get_batch_defaults``).
    nvml_memory: bool = True
    #: Total memory as CUDA reports it to the engine (``torch.cuda.mem_get_info()[1]`` /
    #: ``cudaDeviceProp.totalGlobalMem``), MiB; below ``nvidia-smi``'s figure by what the driver
    #: keeps. Its evidence is ``sources["cuda_total"]`` and its status ``status["cuda_total"]``
    #: (``logged``/``measured`` from a public run, ``estimate`` when derived).
    cuda_total_mib: int | None = Field(default=None, ge=1)
    memory_type: str = ""
    bandwidth_tbps: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = None
    #: Dense FP4 and INT8 tensor-core rates (``sources["low_precision_tflops"]``); None = none listed.
    fp4_tflops: float | None = Field(default=None, gt=0)
    int8_tops: float | None = Field(default=None, gt=0)
    interconnect: str = ""
    #: Scale-up link per GPU per direction (GB/s) for TP/EP communication; PCIe-only cards: their bus.
    interconnect_gbps: float | None = Field(default=None, gt=0)
    host_link_gbps: float | None = None
    host_link: str = ""
    device_name: str = ""
    compute_capability: str | None = None
    #: A user-defined accelerator (``custom:<GiB>…``): its GiB is the total CUDA reports.
    custom: bool = False
    status: dict[str, str] = {}
    sources: dict[str, str] = {}

    @property
    def sm_major(self) -> int:
        """The compute capability's major version (``"9.0"`` → 9, as the engines read
        ``torch.cuda.get_device_capability()[0]``); 0 where none is known (AMD, TPU, custom)."""
        return int(float(self.compute_capability)) if self.compute_capability else 0

    @property
    def capacity_bytes(self) -> int:
        return self.reported_bytes or self.marketed_bytes

    def peak_tflops(self, weight_format: str) -> float:
        """Dense tensor-core rate for matmuls in a weight format: FP4 formats (nvfp4, mxfp4) at
        ``fp4_tflops``, fp8 at ``fp8_tflops``, int8 at ``int8_tops``, each falling back to the next
        wider rate the accelerator lists (FP4 → FP8 → BF16); anything else at ``bf16_tflops``."""
        fp8 = self.fp8_tflops or self.bf16_tflops
        if weight_format in {"nvfp4", "mxfp4"}:
            return self.fp4_tflops or fp8
        if weight_format == "fp8":
            return fp8
        if weight_format == "int8":
            return self.int8_tops or self.bf16_tflops
        return self.bf16_tflops

    def supports_weight_format(self, weight_format: str) -> bool:
        """Whether the accelerator has tensor cores for a low-precision weight format the recommender
        searches by default: fp8 where ``fp8_tflops`` is listed, the FP4 formats where ``fp4_tflops``
        is (nvfp4 on NVIDIA only, its block-scaled format); any other format runs everywhere."""
        if weight_format == "fp8":
            return self.fp8_tflops is not None
        if weight_format == "nvfp4":
            return self.fp4_tflops is not None and self.vendor == "NVIDIA"
        if weight_format == "mxfp4":
            return self.fp4_tflops is not None
        return True

    @property
    def cuda_total_bytes(self) -> int | None:
        """Total device memory as CUDA reports it, bytes (None when the catalogue lacks it)."""
        return self.cuda_total_mib * 2**20 if self.cuda_total_mib else None

    @property
    def capacity_basis(self) -> str:
        if self.reported_bytes:
            return f"{self.reported_mib or self.reported_bytes // 2**20:,} MiB as the device reports"
        return f"marketed {self.marketed_memory} (device-reported value unknown)"


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


class PresetTable(Mapping[str, ModelPreset]):
    """The model presets: a lookup takes a preset's Hub repo id, its link ``id`` or an alias, all
    case-insensitive (the Hub resolves repo ids without regard to case), so ``"Qwen/Qwen3-8B"``,
    ``"qwen/qwen3-8b"`` and ``"qwen3-8b"`` find the same checkpoint. Iteration yields the link
    ids (what scenarios, links and fixtures name; a preset added with its Hub id has it as its
    link id), in the order of their Hub ids, case-insensitively."""

    def __init__(self, presets: list[ModelPreset]) -> None:
        self._by_id = {p.id: p for p in sorted(presets, key=lambda p: p.hf_repo.lower())}
        self._names: dict[str, ModelPreset] = {}
        for preset in presets:
            for name in (preset.hf_repo, preset.id, *preset.aliases):
                other = self._names.setdefault(name.lower(), preset)
                if other is not preset:
                    raise ValueError(f"preset name '{name}' is used by {other.hf_repo} and {preset.hf_repo}")
        if len(self._by_id) != len(presets):
            raise ValueError("two presets have the same id")

    def __getitem__(self, name: str) -> ModelPreset:
        found = self._names.get(name.lower()) if isinstance(name, str) else None
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._names

    def names(self) -> list[str]:
        """Every name a lookup accepts (Hub ids, link ids and aliases), as the files spell them."""
        return sorted({n for p in self._by_id.values() for n in (p.hf_repo, p.id, *p.aliases)},
                      key=str.lower)

    def search(self, text: str) -> list[ModelPreset]:
        """Presets any of whose names contains ``text`` (case-insensitive), in table order."""
        needle = text.strip().lower()
        return [p for p in self._by_id.values()
                if any(needle in n.lower() for n in (p.hf_repo, p.id, p.name, *p.aliases))]

    def closest(self, name: str, n: int = 5) -> list[str]:
        """The Hub ids of up to ``n`` presets nearest to ``name``: those whose names contain it,
        then those whose name it starts with, then ``difflib`` matches of the whole name and of
        its part after the ``/``."""
        query = name.strip().lower()
        # a name containing the query only when the query is a word (≥ 3 characters), not "0" or "a"
        out: list[str] = [p.hf_repo for p in self.search(name)] if len(query) >= 3 else []
        # a name the query starts with (a suffix added or mistyped after it), longest first
        prefixes = sorted((n for n in self._names if query.startswith(n) and len(n) >= 4), key=len,
                          reverse=True)
        out += [self._names[n].hf_repo for n in prefixes]
        lowered = {n.lower(): n for n in self._names}
        for query in (name.lower(), name.lower().rsplit("/", 1)[-1]):
            for hit in difflib.get_close_matches(query, list(lowered), n=n, cutoff=0.5):
                out.append(self._names[hit].hf_repo)
            tails = {k.rsplit("/", 1)[-1]: k for k in lowered}
            for hit in difflib.get_close_matches(query, list(tails), n=n, cutoff=0.5):
                out.append(self._names[tails[hit]].hf_repo)
        return list(dict.fromkeys(out))[:n]


@cache
def model_presets() -> PresetTable:
    return PresetTable([ModelPreset(**_read_json(p))
                        for p in sorted((PRESETS_DIR / "models").glob("*.json"))])


def find_preset(name: str) -> ModelPreset:
    """The preset of exactly the checkpoint ``name`` names (its Hub repo id, link id or an alias,
    case-insensitive), offline; anything else is refused with the closest presets and the ways to
    supply a model — never another model in its place."""
    table = model_presets()
    if name in table:
        return table[name]
    closest = table.closest(name)
    raise KVPlanError("unknown.model", value=clip(name, 80), hint=did_you_mean(closest))


def did_you_mean(names: list[str]) -> str:
    """``"; did you mean A, B?"`` (empty when nothing is close), for ``unknown.model``."""
    return ("; did you mean " + ", ".join(names) + "?") if names else ""


def load_model(preset_id: str) -> ModelArch:
    """The ModelArch of a preset named by Hub id, link id or alias (its config.json through the
    same importer as uploads; one object per preset)."""
    return _load_model(find_preset(preset_id).id)


@cache
def _load_model(preset_id: str) -> ModelArch:
    preset = model_presets()[preset_id]
    arch = parse_config(preset.checkpoint_config, name=preset.name, params_total=preset.params_total,
                        params_active=preset.params_active, params_source=preset.params_source,
                        source=preset.config_source)
    processor = processor_presets().get(preset.hf_repo.lower())
    return arch if processor is None else arch.model_copy(update={"processor": processor})


class ProcessorPreset(BaseModel):
    """The image processor of one checkpoint (``presets/processors/<org>--<name>.json``): the
    values of its ``preprocessor_config.json`` / config.json that decide the tokens per image,
    with their source (``kvplan.multimodal``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hf_repo: str = Field(min_length=3)
    processor: Processor


@cache
def processor_presets() -> dict[str, Processor]:
    """Processor of each checkpoint that has one in ``presets/processors/``, by lower-cased Hub id."""
    items = [ProcessorPreset(**_read_json(p)) for p in sorted((PRESETS_DIR / "processors").glob("*.json"))]
    return {item.hf_repo.lower(): item.processor for item in items}


class PhaseEfficiency(BaseModel):
    """Phase efficiencies of one accelerator in the estimate (``presets/efficiency.json``;
    ``recommend.estimate_throughput``): ``prefill`` divides the prefill time at peak, ``decode`` the
    decode time at peak; ``source`` says where they came from (a fit on published results, or a
    calibration on measured runs, ``recommend.calibrate_phases``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill: float = Field(gt=0)
    decode: float = Field(gt=0)
    source: str = ""
    fit_rows: int = 0


@cache
def efficiencies() -> dict[str, PhaseEfficiency]:
    """Per-accelerator default efficiencies, ``"default"`` for accelerators without a fit."""
    data = _read_json(PRESETS_DIR / "efficiency.json")
    return {key: PhaseEfficiency(**value) for key, value in data["efficiency"].items()}


PriceKind = Literal["on-demand", "reserved", "spot"]
PRICE_KINDS: tuple[str, ...] = ("on-demand", "reserved", "spot", "any")
PRICE_COLUMNS = ("gpu", "provider", "kind", "usd_per_gpu_hour", "as_of", "source")


class PriceQuote(BaseModel):
    """One public price of one accelerator (``presets/prices.json``, or a row of ``--prices-csv``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str
    provider: str
    kind: PriceKind
    usd_per_gpu_hour: float = Field(gt=0, le=1e6)
    as_of: str
    source: str
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.provider} {self.kind} as of {self.as_of} — {self.source}"


@cache
def price_quotes() -> tuple[PriceQuote, ...]:
    """The catalogue's price table (``presets/prices.json``), every quote with its source and date."""
    return tuple(PriceQuote(**q) for q in _read_json(PRESETS_DIR / "prices.json")["quotes"])


def read_price_csv(text: str) -> tuple[PriceQuote, ...]:
    """A price table from CSV text with the header ``PRICE_COLUMNS`` (``note`` optional); a bad row
    gets a message naming its line and field."""
    import csv
    import io

    from pydantic import ValidationError

    rows = list(csv.DictReader(io.StringIO(text)))
    header = set(rows[0]) if rows else set()
    missing = [c for c in PRICE_COLUMNS if c not in header]
    if missing:
        raise KVPlanError("prices.csv", detail=f"the header lacks {', '.join(missing)} (columns: "
                                               f"{', '.join(PRICE_COLUMNS)}, note)")
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            fields: dict[str, Any] = {k: (row.get(k) or "").strip() for k in (*PRICE_COLUMNS, "note")}
            out.append(PriceQuote.model_validate(fields))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise KVPlanError("prices.csv", detail=f"line {line}, {'.'.join(map(str, err['loc']))}: "
                                                   f"{clip(str(err['msg']))}") from None
    return tuple(out)


def pick_price(quotes: tuple[PriceQuote, ...], gpu_id: str, kind: str = "on-demand") -> PriceQuote | None:
    """The lowest quote of ``kind`` (``any``: of every kind) for an accelerator, None if it has none."""
    mine = [q for q in quotes if q.gpu == gpu_id and (kind == "any" or q.kind == kind)]
    return min(mine, key=lambda q: (q.usd_per_gpu_hour, q.provider)) if mine else None


@cache
def estimate_batch_cap() -> tuple[int, str]:
    """(the decode batch the estimate assumes at most, its source): fitted with the efficiencies
    (``presets/efficiency.json`` ``batch_cap``)."""
    data = _read_json(PRESETS_DIR / "efficiency.json")
    return int(data["batch_cap"]["value"]), str(data["batch_cap"]["source"])


def efficiency_for(gpu_id: str) -> PhaseEfficiency:
    table = efficiencies()
    return table.get(gpu_id) or table["default"]


@cache
def gpus() -> dict[str, GPU]:
    items = [GPU(**_read_json(p)) for p in sorted((PRESETS_DIR / "gpus").glob("*.json"))]
    return {g.id: g for g in items}


def get_gpu(gpu_id: str) -> GPU:
    """A catalogue accelerator, or ``custom:<GiB>[:<TB/s>[:<TFLOPS>]]`` for a user-defined one."""
    found = gpus().get(gpu_id)
    if found is not None:
        return found
    if gpu_id.startswith("custom:"):
        return custom_gpu(*_custom_numbers(gpu_id))
    raise KVPlanError("unknown.gpu", value=clip(gpu_id))


def _custom_numbers(gpu_id: str) -> list[float]:
    """``custom:<GiB>[:<TB/s>[:<TFLOPS>]]``: one to three finite numbers within ``CUSTOM_GPU_LIMITS``."""
    parts = gpu_id.split(":")[1:]
    if not 1 <= len(parts) <= 3:
        raise KVPlanError("gpu.custom_fields", value=clip(gpu_id), count=len(parts))
    numbers = []
    for part, (field, (low, high)) in zip(parts, CUSTOM_GPU_LIMITS.items(), strict=False):
        text = part.strip()
        try:
            value = float(text) if len(text) <= 40 else float("nan")
        except ValueError:
            raise KVPlanError("gpu.custom", value=clip(gpu_id), why=MESSAGES["value.not_number"].format(
                field=field, value=clip(text, 20))) from None
        if not low <= value <= high:
            raise KVPlanError("gpu.custom", value=clip(gpu_id), why=MESSAGES["value.range"].format(
                field=field, low=low, high=high, value=clip(text, 20)))
        numbers.append(value)
    return numbers


def custom_gpu(capacity_gib: float, bandwidth_tbps: float = 1.0, bf16_tflops: float = 100.0,
               *, name: str | None = None) -> GPU:
    """A user-defined accelerator (capacity in GiB = 2^30 B, as the device would report it)."""
    capacity = int(capacity_gib * 2**30)
    name = name or f"Custom accelerator ({capacity_gib:g} GiB, {bandwidth_tbps:g} TB/s)"
    return GPU(id="custom", name=name, marketed_memory=f"{capacity_gib:g} GiB",
               marketed_bytes=capacity, reported_bytes=capacity,
               bandwidth_tbps=bandwidth_tbps, bf16_tflops=bf16_tflops, custom=True,
               sources={"memory": "user input"})


def scenario_files() -> list[Path]:
    return sorted((PRESETS_DIR / "scenarios").glob("*.json"))


def preset_family(preset: ModelPreset) -> str:
    """The preset's family: as the file names it, else its config's (text) ``model_type``."""
    if preset.family:
        return preset.family
    text = preset.config.get("text_config")
    inner = text if isinstance(text, dict) and text.get("model_type") else preset.config
    return str(inner.get("model_type") or "")
