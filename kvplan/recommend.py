"""Recommend a deployment: the cheapest accelerators, splits and formats that hold the traffic and
meet the latency targets. Memory is exact (the engine's own budget and pool); time is a stated bound.

A candidate is one replica layout — accelerator × (TP, PP) or expert-parallel size EP (MoE models on
engines with ``Engine.expert_parallel``: attention data-parallel over EP GPUs, each with its own
requests and KV, experts split over them — vLLM docs "Data Parallel Deployment" and "Expert Parallel
Deployment", ``--data-parallel-size N --enable-expert-parallel``; also ``dp`` ranks of TP > 1, experts
over ``ep = tp·dp``, SGLang ``--enable-dp-attention``; memory from the Plan with the ``dp`` setting)
× KV format × weight format — plus as many replicas as the traffic needs.

Memory (exact, per GPU of the largest pipeline stage):
  weights per stage from ``capacity.memory_budget`` (EP: its non-expert share whole on every GPU plus
  ``1/EP`` of the experts), memory target and KV budget from the engine (``Engine.memory_target``,
  ``Engine.kv_budgets``), requests of ``L`` tokens from the engine's pool (``KVPool.max_requests_for``,
  the pool arithmetic vectorised over budgets). Where the plan states other instances on the GPU
  (``FitQuery.held_by_others``, ``kvplan.instances``), each candidate's budget is the engine's beside
  them (``Engine.beside_others``, as ``plan.memory_budget``), and a candidate whose engine refuses
  to start there (vLLM's free-memory check) fits no request.

Time (bounds, with ``e`` the accelerator's efficiency factor, 1 = peak):
  decode step ``TPOT(B) = pp · max(bytes_stage(B) / BW, B_gpu · F_dec / (pp · tp · FLOPS)) / e + comm(B)``
  with ``bytes_stage = W_dense + W_expert · (1 − (1 − k/E)^B) + B_gpu · KV(L)`` (uniform routing:
  experts touched by ``B`` tokens), ``F_dec`` the FLOPs of one token at position ``L``
  (``flops.prefill_decode_flops``); prefill
  ``TTFT(P) = max(F_pf(P) / (tp · FLOPS), pp · W / BW) / e + comm(P)`` (same function);
  ``comm`` = TP ring all-reduce ``2 · layers · 2(tp − 1)/tp · n · h · 2 B``,
  EP all-to-all ``2 · moe_layers · n · k · h · 2 B · (ep − 1)/ep``, PP hand-off ``(pp − 1) · n · h ·
  2 B``, each over the accelerator's ``interconnect_gbps`` (per direction), not overlapped.
  Throughput at batch ``B`` with mean output ``O`` and mean-prompt prefill ``t_pf`` interleaved:
  ``tokens/s = O · B / (O · TPOT(B) + B · t_pf / ep)`` (EP ranks prefill in parallel). Replicas:
  users ``ceil(U / B_max)``; requests/s ``ceil(rps · O / tokens/s(B_max))``, ``B_max`` the largest
  batch that fits and meets TPOT.
  Cost per million output tokens = GPUs × price per GPU-hour / (served tokens/s × 3600) × 10⁶.

Disaggregated prefill/decode (``RecommendQuery.disagg``, CLI ``--disagg``; ``pd_rows``,
``PD_FORMULAS``): the ``pd_layouts`` cheapest feasible aggregated layouts (no attention DP) are also
split into x prefill + y decode instances of that layout, each side its own Plan, the decode pool's
in-flight bound and the KV transfer from ``kvplan.disagg.disagg``; same bounds, estimate and cost
columns, ``mode`` = ``aggregated`` or ``xPyD``. Only those rows are computed (a constant per search).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from kvplan.arch import MLA, Attention, Kind, ModelArch
from kvplan.disagg import DisaggQuery, disagg
from kvplan.dtypes import KV_DTYPE_CHOICES, WEIGHT_DTYPES, get_dtype, get_weight_dtype
from kvplan.engines import EngineSettings, KVPool
from kvplan.engines.reserve import Reserve
from kvplan.engines.vllm.transfer import check_engine
from kvplan.errors import KVPlanError
from kvplan.flops import layer_flops, prefill_decode_flops, request_flops
from kvplan.plan import FitQuery, Plan
from kvplan.presets import (
    GPU,
    PhaseEfficiency,
    PriceQuote,
    efficiency_for,
    estimate_batch_cap,
    get_gpu,
    gpus,
    pick_price,
    price_quotes,
)
from kvplan.serving import MLPERF_BOUNDS, LengthDist, Workload, sample_workload, with_image_tokens

#: Target presets: (TTFT ms, TPOT ms, percentile) from MLPerf ``loadgen/mlperf.conf`` (Server, p99).
TARGET_PRESETS: dict[str, tuple[float, float, str]] = {
    "mlperf-llama2-70b-interactive": (*MLPERF_BOUNDS["llama2-70b interactive"], "p99"),
    "mlperf-llama2-70b": (*MLPERF_BOUNDS["llama2-70b standard"], "p99"),
}
MAX_CANDIDATES = 100_000
MAX_GPUS_PER_REPLICA = 1024
ACT_BYTES = 2  # bf16 activations exchanged between ranks
FAILS = ("memory", "TTFT", "TPOT", "GPU limit", "format")
#: Weight formats searched when none are given: the checkpoint's own, plus fp8 and the FP4 formats
#: for an unquantized checkpoint, each only where the accelerator has its tensor cores
#: (``GPU.supports_weight_format``; elsewhere the candidate fails "format"). Formats given
#: explicitly are searched on every accelerator.
DEFAULT_WEIGHT_SEARCH = ("auto", "fp8", "nvfp4", "mxfp4")


class RecommendQuery(BaseModel):
    """Traffic, targets and the candidate grid (the model, engine and its settings come from the
    scenario's ``FitQuery``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    traffic: Literal["users", "rps"] = "users"
    users: int = Field(default=64, ge=0, le=10_000_000)
    rps: float = Field(default=1.0, ge=0, le=1e7)
    prompt: LengthDist = LengthDist(kind="fixed", value=1024)
    output: LengthDist = LengthDist(kind="fixed", value=256)
    samples: int = Field(default=2000, ge=1, le=100_000)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    percentile: Literal["p50", "p99"] = "p99"
    ttft_ms: float = 450.0
    tpot_ms: float = 40.0
    max_context: int | None = Field(default=None, ge=2, le=100_000_000)
    gpus: tuple[str, ...] | None = None
    max_gpus: int = Field(default=8, ge=1, le=MAX_GPUS_PER_REPLICA)
    max_total_gpus: int = Field(default=4096, ge=1, le=1_000_000)
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] = (1, 2, 4)
    expert_parallel: bool = True
    kv_dtypes: tuple[str, ...] = ("bf16", "fp8_e4m3")
    #: None: ``DEFAULT_WEIGHT_SEARCH`` (only ``auto`` for an already quantized checkpoint).
    weight_dtypes: tuple[str, ...] | None = None
    prices: dict[str, float] = {}
    #: Which public quotes cost an accelerator (the lowest of this kind, ``presets.pick_price``), and
    #: the table they come from (None: ``presets/prices.json``; a ``--prices-csv`` replaces it).
    price_kind: Literal["on-demand", "reserved", "spot", "any"] = "on-demand"
    price_table: tuple[PriceQuote, ...] | None = None
    efficiency: dict[str, float] = {}
    default_efficiency: float = Field(default=1.0, gt=0, le=1)
    #: Calibrated (prefill, decode) efficiencies of the estimate per accelerator (``calibrate_phases``);
    #: the others use ``presets/efficiency.json``.
    phase_efficiency: dict[str, tuple[float, float]] = {}
    #: Disaggregated prefill/decode (xPyD) candidates beside the aggregated ones (``pd_rows``): off by
    #: default (each needs two Plans, ~10 ms); ``pd_layouts`` cheapest feasible layouts are split.
    disagg: bool = False
    pd_layouts: int = Field(default=4, ge=1, le=64)
    #: Prompt tokens the images of every request add beside its text prompt (``prompt`` and a CSV's
    #: prompt column count the text alone): ``images`` × each image's prompt tokens by the
    #: checkpoint's processor (``kvplan.multimodal.image_prompt_tokens``; the scenario's ``im`` ×
    #: ``iw``×``ih``, CLI ``--images N --image-size WxH``). ``serving.with_image_tokens``.
    image_tokens: int = Field(default=0, ge=0, le=100_000_000)
    images: int = Field(default=0, ge=0)
    #: Videos of every request whose prompt tokens ``image_tokens`` also holds (CLI ``--videos``,
    #: ``kvplan.multimodal.video_prompt_tokens``); only the labels read it.
    videos: int = Field(default=0, ge=0)


@dataclass(frozen=True)
class Lengths:
    """Request lengths the bounds use (tokens), from the workload at the target percentile."""

    prompt: int
    context: int
    prompt_mean: float
    output_mean: float
    requests: int
    source: str
    #: Of ``prompt`` and ``context``: the image tokens every request brings (0: text only).
    image_tokens: int = 0


@dataclass
class Recommendation:
    """Every candidate (``table``), the feasible ones ranked by cost (``ranked``), and the words."""

    table: pd.DataFrame
    lengths: Lengths
    cost_unit: str
    formulas: list[str]
    assumptions: list[str]
    message: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ranked(self) -> pd.DataFrame:
        """Feasible candidates by cost per million output tokens: in money those with a price (the
        unpriced ones are ``unpriced_ranked``); in GPU-hours when no accelerator has one."""
        feasible = self.table[self.table["feasible"] & (self.table["priced"] | (self.cost_unit != "$"))]
        return feasible.sort_values(["cost_per_m_tokens", "tpot_ms", "total_gpus"],
                                    kind="stable").reset_index(drop=True)

    @property
    def unpriced_ranked(self) -> pd.DataFrame:
        """Feasible candidates on accelerators without a price, listed apart by GPU-hours per million
        output tokens (empty when the costs are all in GPU-hours)."""
        if self.cost_unit != "$":
            return self.table.iloc[:0]
        rows = self.table[self.table["feasible"] & ~self.table["priced"]]
        return rows.sort_values(["gpu_hours_per_m_tokens", "tpot_ms", "total_gpus"],
                                kind="stable").reset_index(drop=True)


@dataclass
class _Terms:
    """Per-candidate arrays the time bounds need (shape ``(n,)``)."""

    bw: np.ndarray
    flops: np.ndarray
    link: np.ndarray
    eff: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    w_dense: np.ndarray
    w_expert: np.ndarray
    kv_request: np.ndarray
    route: float  # k / E (0 for dense models)
    layers: int
    moe_layers: int
    hidden: int
    top_k: int


# ------------------------------------------------------------------------------- inputs
def resolve_targets(preset: str | None, ttft_ms: float | None, tpot_ms: float | None,
                    percentile: str | None) -> tuple[float, float, str]:
    """A target preset (``TARGET_PRESETS``) with any value given explicitly taking precedence."""
    if preset is not None and preset not in TARGET_PRESETS:
        raise KVPlanError("recommend.preset", value=preset, choices=", ".join(TARGET_PRESETS))
    base = TARGET_PRESETS[preset] if preset else TARGET_PRESETS["mlperf-llama2-70b-interactive"]
    return (ttft_ms if ttft_ms is not None else base[0], tpot_ms if tpot_ms is not None else base[1],
            percentile or base[2])


def _clipped(query: RecommendQuery, workload: Workload | None) -> tuple[Workload, np.ndarray, np.ndarray]:
    """The workload (sampled from the query if none) with each prompt's image tokens added
    (``serving.with_image_tokens``) and its prompt and output lengths clipped to ``max_context``
    (the text, not the images)."""
    if workload is None:
        workload = sample_workload(query.samples, query.prompt, query.output, query.seed,
                                   query.max_context)
    workload = with_image_tokens(workload, query.image_tokens, query.images, query.max_context,
                                 videos=query.videos)
    prompt, output = workload.prompt, workload.output
    if query.max_context is not None:
        prompt = np.minimum(prompt, query.max_context - 1)
        output = np.minimum(output, query.max_context - prompt)
    return workload, prompt, output


def workload_lengths(query: RecommendQuery, workload: Workload | None = None) -> Lengths:
    """Prompt and final lengths at the target percentile (``numpy.percentile``, method "higher"),
    clipped to ``max_context``; the mean output and prompt drive throughput."""
    return _lengths(query, *_clipped(query, workload))


def _lengths(query: RecommendQuery, workload: Workload, prompt: np.ndarray, output: np.ndarray) -> Lengths:
    """``workload_lengths`` of the clipped lengths (``_clipped``, images added once)."""
    q = 50 if query.percentile == "p50" else 99
    p_q = max(int(np.percentile(prompt, q, method="higher")), 1)
    final_q = max(int(np.percentile(prompt + output, q, method="higher")), 2)
    out_mean = float(output.mean())
    if out_mean <= 0:
        raise KVPlanError("recommend.traffic", detail="the requests generate no output tokens")
    return Lengths(p_q, final_q, float(max(prompt.mean(), 1.0)), out_mean, int(prompt.size),
                   workload.source, query.image_tokens)


def _check(query: RecommendQuery) -> None:
    for name, value in (("TTFT", query.ttft_ms), ("TPOT", query.tpot_ms)):
        if not (value > 0 and math.isfinite(value)):
            raise KVPlanError("recommend.targets", detail=f"{name} target must be a positive number of "
                                                          f"milliseconds, got {value}")
    if (query.users if query.traffic == "users" else query.rps) <= 0:
        raise KVPlanError("recommend.traffic", detail=f"{query.traffic} must be above 0")
    for name, values in (("prices", query.prices), ("efficiency", query.efficiency)):
        for gpu_id, value in values.items():
            top = 1.0 if name == "efficiency" else 1e6
            if not (0 < value <= top and math.isfinite(value)):
                raise KVPlanError("value.range", field=f"{name} of {gpu_id}", low=0, high=top, value=value)


def _layouts(plan: Plan, query: RecommendQuery) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(tp, pp, ep) replica layouts the engine allows within ``max_gpus`` GPUs per replica."""
    arch, engine = plan.arch, plan.engine
    powers = [1 << i for i in range(11) if 1 << i <= query.max_gpus]
    tps = sorted({t for t in (query.tp or tuple(powers)) if 1 <= t <= query.max_gpus})
    out: list[tuple[int, int, int]] = []
    notes: list[str] = []
    for tp in tps:
        try:
            engine.check_parallel(arch, tp)
        except KVPlanError as exc:
            notes.append(f"TP {tp} left out: {exc}")
            continue
        out.extend((tp, pp, 1) for pp in sorted(set(query.pp))
                   if 1 <= pp <= arch.n_layers and tp * pp <= query.max_gpus)
    if arch.moe is not None and query.expert_parallel and engine.expert_parallel:
        # attention data-parallel over dp ranks of tp GPUs each, experts over all tp·dp (#28's dp)
        ranked_tps = [1] + [t for t in tps if t > 1 and t * 2 <= query.max_gpus
                            and not any(n.startswith(f"TP {t} ") for n in notes)]
        out.extend((tp, 1, dp) for tp in ranked_tps for dp in powers if dp >= 2 and tp * dp <= query.max_gpus)
    return out, notes


def expert_share(arch: ModelArch) -> tuple[int, int]:
    """(expert parameters, all parameters): routed experts of the MoE layers
    (``(3 | 2) · h · I_e`` each, ``config_import`` counting), for splitting the core's weight bytes."""
    moe = arch.moe
    if moe is None or not arch.params_total:
        return 0, max(arch.params_total, 1)
    per = (3 if arch.gated_mlp else 2) * arch.hidden_size * moe.expert_intermediate
    experts = (arch.n_layers - moe.n_dense_layers) * moe.n_experts * per
    return min(experts, arch.params_total), arch.params_total


# ------------------------------------------------------------------------------- time bounds
def _touched(route: float, tokens: np.ndarray) -> np.ndarray:
    """Expected share of experts ``B`` tokens route to (uniform top-k): ``1 − (1 − k/E)^B``."""
    if route <= 0:
        return np.zeros(np.shape(tokens))
    return 1.0 - np.power(1.0 - route, np.asarray(tokens, dtype=np.float64))


def _comm(t: _Terms, tokens: np.ndarray) -> np.ndarray:
    """Seconds of TP all-reduce, EP all-to-all and PP hand-off for ``tokens`` per GPU (module doc)."""
    n = np.asarray(tokens, dtype=np.float64)
    msg = n * t.hidden * ACT_BYTES
    tp_bytes = 2 * t.layers * 2 * (t.tp - 1) / t.tp * msg
    ep_bytes = 2 * t.moe_layers * t.top_k * msg * (t.ep - 1) / t.ep
    pp_bytes = (t.pp - 1) * msg
    return (tp_bytes + ep_bytes + pp_bytes) / t.link


def decode_time(t: _Terms, batch: np.ndarray, flops_token: float) -> tuple[np.ndarray, np.ndarray]:
    """(TPOT seconds, the roofline part before efficiency) at replica batch ``batch``."""
    b = np.asarray(batch, dtype=np.float64)
    per_gpu = np.ceil(b / t.ep)
    stage_bytes = t.w_dense + t.w_expert * _touched(t.route, b) + per_gpu * t.kv_request
    roof = t.pp * np.maximum(stage_bytes / t.bw, per_gpu * flops_token / (t.pp * t.tp * t.flops))
    return roof / t.eff + _comm(t, per_gpu), roof


def prefill_time(t: _Terms, prompt: float, flops_prompt: float) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT seconds, the roofline part before efficiency) for one prompt of ``prompt`` tokens."""
    p = np.full(t.bw.shape, float(prompt))
    weights = t.w_dense + t.w_expert * _touched(t.route, p)
    roof = np.maximum(flops_prompt / (t.tp * t.flops), t.pp * weights / t.bw)
    return roof / t.eff + _comm(t, p), roof


def _largest_batch(t: _Terms, limit: np.ndarray, target_s: float, flops_token: float) -> np.ndarray:
    """Largest integer ``B ≤ limit`` with ``TPOT(B) ≤ target`` (0 if none): vectorised bisection
    (TPOT grows with ``B``), at most ``log2(max limit)`` steps."""
    lo = np.zeros(limit.shape, dtype=np.int64)
    hi = np.maximum(limit.astype(np.int64), 0)
    ok1 = decode_time(t, np.ones(limit.shape), flops_token)[0] <= target_s
    lo = np.where(ok1 & (hi >= 1), 1, 0)
    hi = np.where(lo == 0, 0, hi)
    while np.any(hi > lo):
        mid = (lo + hi + 1) // 2
        good = decode_time(t, mid, flops_token)[0] <= target_s
        lo = np.where(good & (hi > lo), mid, lo)
        hi = np.where(~good & (hi > lo), mid - 1, hi)
    return lo


def rate_format(arch: ModelArch, weight_dtype: str | None) -> str:
    """The format whose dense tensor-core rate (``GPU.peak_tflops``) every time bound uses: the one
    given; for ``auto`` (None) the model dtype, or for a quantized checkpoint ``nvfp4`` — the
    fastest rate the accelerator lists (FP4, else FP8, else BF16), so the times stay bounds."""
    if weight_dtype not in (None, "auto"):
        return weight_dtype
    return arch.model_dtype if arch.weights.quantization is None else "nvfp4"


def decode_token_flops(arch: ModelArch, position: int) -> float:
    """FLOPs of one decode token at position ``position`` (``flops.prefill_decode_flops``)."""
    return prefill_decode_flops(arch, 1, position)[1]


def prefill_flops(arch: ModelArch, prompt_tokens: int) -> float:
    """FLOPs of one prefill of ``prompt_tokens`` (``flops.prefill_decode_flops``)."""
    return prefill_decode_flops(arch, prompt_tokens, 1)[0]


# ------------------------------------------------------------------------------- the search
def _gpu_list(query: RecommendQuery) -> list[GPU]:
    """The chosen accelerators (default: the catalogue); ``custom:GiB:TB/s:TFLOPS`` keeps its spec as id."""
    catalogue = gpus()
    if query.gpus is None:
        return list(catalogue.values())
    chosen = [catalogue.get(gpu_id) or get_gpu(gpu_id).model_copy(update={"id": gpu_id})
              for gpu_id in dict.fromkeys(query.gpus)]
    return chosen


def _price(gpu: GPU, query: RecommendQuery) -> tuple[float | None, str]:
    """(US$ per GPU-hour, where it came from): ``--price`` for this accelerator, else the lowest
    quote of ``query.price_kind`` in the price table (``presets.pick_price``), else (None, "")."""
    if gpu.id in query.prices:
        return query.prices[gpu.id], "given (--price)"
    quote = pick_price(query.price_table if query.price_table is not None else price_quotes(), gpu.id,
                       query.price_kind)
    return (quote.usd_per_gpu_hour, quote.label) if quote else (None, "")


def recommend(plan: Plan, query: RecommendQuery, workload: Workload | None = None) -> Recommendation:
    """Every candidate's memory, bounds, replicas and cost; see the module docstring."""
    _check(query)
    workload, prompt_arr, output_arr = _clipped(query, workload)
    lengths = _lengths(query, workload, prompt_arr, output_arr)
    gpu_list = _gpu_list(query)
    arch, base = plan.arch, plan.query
    layouts, notes = _layouts(plan, query)
    kv_dtypes = list(dict.fromkeys(query.kv_dtypes))
    wds = list(dict.fromkeys(query.weight_dtypes if query.weight_dtypes is not None
                             else ("auto",) if plan.arch.weights.quantization is not None
                             else DEFAULT_WEIGHT_SEARCH))
    n_total = len(gpu_list) * len(layouts) * len(kv_dtypes) * len(wds)
    if n_total == 0:
        raise KVPlanError("recommend.empty", detail=_empty_detail(gpu_list, layouts, kv_dtypes, wds, notes))
    if n_total > MAX_CANDIDATES:
        raise KVPlanError("recommend.too_many", count=f"{n_total:,}", limit=MAX_CANDIDATES)
    engine = plan.engine
    G, Y, K, W = len(gpu_list), len(layouts), len(kv_dtypes), len(wds)
    L = lengths.context
    ep_arr = np.array([ep for _, _, ep in layouts])
    tp_arr = np.array([tp for tp, _, _ in layouts])
    pp_arr = np.array([pp for _, pp, _ in layouts])
    stages_max = int(pp_arr.max())
    expert_params, all_params = expert_share(arch)

    # weights per GPU of every stage, per (GPU, layout, weight format): the Plan's (memory_budget's),
    # once per distinct loading rule (Engine.loading_rules: what the release holds after loading on
    # that GPU, e.g. vLLM's MXFP4 expert layout per SM), shared by the GPUs with that rule
    stage_w = np.zeros((G, Y, W, stages_max), dtype=np.int64)
    w_dense = np.zeros((G, Y, W))
    w_expert = np.zeros((G, Y, W))
    w_total = np.zeros((G, Y, W))
    layout_queries: list[FitQuery] = []
    by_rules: dict[object, list[int]] = {}
    for g, gpu in enumerate(gpu_list):
        by_rules.setdefault(engine.loading_rules(gpu), []).append(g)
    for members in by_rules.values():
        ref = gpu_list[members[0]]
        for y, (tp, pp, ep) in enumerate(layouts):
            layout_plan = plan.vary(gpu=ref, tp=tp, pp=pp, num_gpus=tp * pp, users=1, tokens=L)
            # EP candidates: attention data-parallel over ep ranks (the engines' dp setting), experts
            # split over them; one GPU's weights are the Plan's own (plan._dp_weights), its pool a rank's
            dp_plan = layout_plan.vary(num_gpus=tp * pp * ep, settings=layout_plan.query.settings.model_copy(
                update={"dp": ep})) if ep > 1 else None
            if len(layout_queries) < Y:
                layout_queries.append(dp_plan.query if dp_plan is not None else layout_plan.query)
            for w, wd in enumerate(wds):
                fmt = None if wd == "auto" else wd
                # the weights memory_budget reads (Plan.weights), without its reserve and KV budget
                layout_w = layout_plan.with_weight_dtype(fmt).weights
                w_total[members, y, w] = layout_w.total_bytes
                stages = list(layout_w.stage_bytes)
                if dp_plan is not None:
                    stages = list(dp_plan.with_weight_dtype(fmt).weights.stage_bytes)
                stage_w[members, y, w, :len(stages)] = stages
                top = max(stages)
                share = 0 if ep > 1 else top * expert_params // all_params
                expert = -(-(layout_w.total_bytes * expert_params // all_params) // (ep * tp)) \
                    if ep > 1 else share
                w_expert[members, y, w] = expert
                w_dense[members, y, w] = top - expert

    # memory target and KV budget per (GPU, layout, weight format): the engine's own arithmetic,
    # one call per (GPU, layout) over every format's stages (each stage's budget is independent)
    pad = np.iinfo(np.int64).max
    budgets = np.full((G, Y, W, stages_max), pad, dtype=np.int64)
    targets = np.zeros((G, Y), dtype=np.int64)
    reserves = np.zeros((G, Y), dtype=np.int64)
    settings_of: dict[tuple[int, int], EngineSettings] = {}
    details: dict[tuple[int, int], Reserve] = {}
    own = [engine.own_settings(q.settings, tp=q.tp, pp=q.pp) for q in layout_queries]
    given = base.kv_cache_memory_bytes
    # other instances already on each GPU when this one starts (kvplan.instances, FitQuery.held_by_others)
    others = base.held_by_others
    refusals: dict[str, str] = {}
    for g, gpu in enumerate(gpu_list):
        for y, (_, pp, _) in enumerate(layouts):
            settings = engine.resolve_settings(own[y], L, gpu, arch)  # = Plan.settings
            settings_of[g, y] = settings
            total = engine.capacity(gpu).bytes  # = plan.memory_budget
            detail = engine.runtime_reserve(arch, gpu, settings, L).with_overrides(
                base.reserve_terms, base.reserve_gib)
            details[g, y] = detail
            reserve = detail.total
            reserves[g, y] = reserve
            target, _ = engine.memory_target(total, settings, arch, [])
            target = engine.target_after_reserve(target, total, settings, detail, {"memory_target": ""})
            targets[g, y] = target
            if given is not None and not others:
                budgets[g, y, :, :pp] = given
                continue
            flat = [int(v) for v in stage_w[g, y, :, :pp].ravel()]
            kv = engine.kv_budgets(target, flat, reserve, settings, {"memory_target": ""}, total,
                                   detail=detail)
            for w in range(W if others else 0):  # = plan.memory_budget beside the other instances
                part = slice(w * pp, (w + 1) * pp)
                kv[part], refusal = engine.beside_others(others, total, target, flat[part], reserve,
                                                         settings, kv[part], {}, detail=detail)
                if given is not None:  # --kv-cache-memory-bytes replaces the budget, not the check
                    kv[part] = [given] * pp
                if refusal is not None:  # the engine does not start (instances.share): none fit
                    kv[part] = [0] * pp
                    refusals.setdefault(refusal, gpu.id)
            budgets[g, y, :, :pp] = np.asarray(kv, dtype=np.int64).reshape(W, pp)
    if others:
        notes.append(f"{others:,} B held by other instances on each GPU when this one starts "
                     "(FitQuery.held_by_others): each candidate's budget by the engine's rule "
                     "(Engine.beside_others, as kvplan share)")
        notes.extend(f"does not start on {gpu_id} (no request fits): {why}"
                     for why, gpu_id in refusals.items())
    weights_fit = (stage_w.max(axis=3) + reserves[:, :, None] <= targets[:, :, None]) \
        | (given is not None)

    # pools: one per (layout, KV format, GPU signature); requests per budget row, vectorised
    max_req = np.zeros((G, Y, K, W), dtype=np.int64)
    max_ctx_ok = np.ones((G, Y, K, W), dtype=bool)
    kv_req = np.zeros((G, Y, K), dtype=np.float64)
    refused = np.zeros((G, Y, K), dtype=bool)
    gpu_keys = [[engine.pool_gpu_key(gpu, arch, kv_dtype) for gpu in gpu_list] for kv_dtype in kv_dtypes]
    for y, (_, pp, ep) in enumerate(layouts):
        distinct: dict[EngineSettings, int] = {}
        sig = [distinct.setdefault(settings_of[g, y], len(distinct)) for g in range(G)]
        pool_keys: dict[object, int] = {}
        by_settings = [pool_keys.setdefault(engine.pool_settings_key(s, arch), len(pool_keys))
                       for s in distinct]
        sig = [by_settings[i] for i in sig]
        for k, kv_dtype in enumerate(kv_dtypes):
            groups: dict[tuple[Any, ...], list[int]] = {}
            for g in range(G):
                groups.setdefault((sig[g], gpu_keys[k][g]), []).append(g)
            for members in groups.values():
                gpu = gpu_list[members[0]]
                try:
                    pool = engine.make_pool(arch, gpu, kv_dtype, settings_of[members[0], y],
                                            [1 << 40] * pp, [], reserve=details[members[0], y])
                except KVPlanError as exc:
                    refused[members, y, k] = True
                    notes.append(f"KV {kv_dtype}: {exc}")
                    continue
                rows = budgets[members, y][:, :, :pp].reshape(-1, pp)
                fitting = _pool_requests(pool, L, rows).reshape(len(members), W)
                for i, m in enumerate(members):  # the engine's request cap (capacity.cap_requests)
                    caps = engine.request_caps(arch, gpu_list[m], settings_of[m, y], pool, L,
                                               budgets[m, y][:, :pp])
                    if caps is not None:
                        fitting[i] = np.minimum(fitting[i], caps)
                max_req[members, y, k, :] = fitting * ep
                if query.max_context is not None:
                    fit_max = _pool_requests(pool, query.max_context, rows).reshape(len(members), W)
                    max_ctx_ok[members, y, k, :] = fit_max >= 1
                kv_req[members, y, k] = float(pool.per_request_bytes(np.asarray([L]))[0])
    max_req = np.where(weights_fit[:, :, None, :], max_req, 0)

    # broadcast everything to the candidate grid (G, Y, K, W) and flatten
    shape = (G, Y, K, W)

    def grid(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        full = np.expand_dims(a, [i for i in range(4) if i not in axes])
        return np.broadcast_to(full, shape).ravel()

    # the format's tensor-core rate (GPU.peak_tflops of rate_format)
    flops_gw = np.array([[g.peak_tflops(rate_format(arch, wd)) for wd in wds] for g in gpu_list]) * 1e12
    # formats the default search added run only where their tensor cores are; asked-for ones anywhere
    # (e.g. vLLM runs FP4 checkpoints weight-only on Hopper)
    searched = query.weight_dtypes is None
    format_ok = grid(np.array([[not searched or g.supports_weight_format(wd) for wd in wds]
                               for g in gpu_list]), (0, 3))
    link = np.array([(g.interconnect_gbps or g.host_link_gbps or 32.0) * 1e9 for g in gpu_list])
    eff = np.array([query.efficiency.get(g.id, query.default_efficiency) for g in gpu_list])
    price_list = [_price(g, query)[0] for g in gpu_list]
    priced = any(p is not None for p in price_list)  # money for those priced, the rest listed apart
    price = np.array([p if p is not None else (np.nan if priced else 1.0) for p in price_list])
    moe = arch.moe
    terms = _Terms(
        bw=grid(np.array([g.bandwidth_tbps * 1e12 for g in gpu_list]), (0,)),
        flops=grid(flops_gw, (0, 3)), link=grid(link, (0,)), eff=grid(eff, (0,)),
        tp=grid(tp_arr, (1,)).astype(np.float64), pp=grid(pp_arr, (1,)).astype(np.float64),
        ep=grid(ep_arr, (1,)).astype(np.float64), w_dense=grid(w_dense, (0, 1, 3)),
        w_expert=grid(w_expert, (0, 1, 3)), kv_request=grid(kv_req, (0, 1, 2)),
        route=(moe.n_active / moe.n_experts) if moe else 0.0, layers=arch.n_layers,
        moe_layers=(arch.n_layers - moe.n_dense_layers) if moe else 0, hidden=arch.hidden_size,
        top_k=moe.n_active if moe else 0)
    mreq = max_req.ravel()
    memory_ok = (mreq >= 1) & max_ctx_ok.ravel() & ~grid(refused, (0, 1, 2))
    f_tok = decode_token_flops(arch, L)
    tpot1 = decode_time(terms, np.ones(mreq.shape), f_tok)[0]
    ttft, _ = prefill_time(terms, lengths.prompt, prefill_flops(arch, lengths.prompt))
    mean_prompt = max(round(lengths.prompt_mean), 1)
    t_pf, _ = prefill_time(terms, lengths.prompt_mean, prefill_flops(arch, mean_prompt))
    target_s = query.tpot_ms / 1e3
    batch_max = _largest_batch(terms, np.where(memory_ok, mreq, 0), target_s, f_tok)
    out_mean = lengths.output_mean

    def tokens_per_s(b: np.ndarray) -> np.ndarray:
        tp_s = decode_time(terms, np.maximum(b, 1), f_tok)[0]
        return out_mean * b / (out_mean * tp_s + b * t_pf / terms.ep)

    safe = np.maximum(batch_max, 1)
    if query.traffic == "users":
        replicas = -(-query.users // safe)
        batch = -(-query.users // replicas)
        served = replicas * tokens_per_s(batch)
    else:
        capacity = tokens_per_s(safe)
        replicas = np.ceil(query.rps * out_mean / capacity).astype(np.int64)
        batch = safe
        served = np.full(safe.shape, query.rps * out_mean)
    tpot = decode_time(terms, batch, f_tok)[0]
    est_total, est_tpot, est_ttft = _estimated_gpus(
        query, gpu_list, terms, grid, np.where(memory_ok & format_ok, mreq, 0), f_tok,
        prefill_flops(arch, lengths.prompt), prefill_flops(arch, mean_prompt), lengths)
    run_bound, run_estimate = _run_columns(arch, gpu_list, layouts, kv_dtypes, wds, w_total,
                                           prompt_arr, output_arr, grid, query.phase_efficiency)
    gpr = (terms.tp * terms.pp * terms.ep).astype(np.int64)
    total = replicas * gpr
    cost_h = total * grid(price, (0,))
    ttft_ok = ttft * 1e3 <= query.ttft_ms
    tpot_ok = batch_max >= 1
    gpu_ok = total <= query.max_total_gpus
    feasible = memory_ok & ttft_ok & tpot_ok & gpu_ok & format_ok
    code = np.zeros(mreq.shape, dtype=np.int64)
    for bit, ok in enumerate((memory_ok, ttft_ok, tpot_ok | ~memory_ok, gpu_ok | ~tpot_ok, format_ok)):
        code |= (~ok).astype(np.int64) << bit
    labels = [", ".join(name for bit, name in enumerate(FAILS) if c >> bit & 1) for c in range(32)]

    def category(values: list[str], axis: int) -> pd.Categorical:
        codes = grid(np.arange(len(values)), (axis,))
        return pd.Categorical.from_codes(codes, categories=pd.Index(values, dtype=object))

    table = pd.DataFrame({
        "gpu": category([g.id for g in gpu_list], 0),
        "gpu_name": category([g.name for g in gpu_list], 0),
        "tp": grid(tp_arr, (1,)), "pp": grid(pp_arr, (1,)),
        "ep": grid(np.where(ep_arr > 1, ep_arr * tp_arr, 1), (1,)), "dp": grid(ep_arr, (1,)),
        "kv_dtype": category(kv_dtypes, 2),
        "weight_dtype": category(wds, 3),
        "gpus_per_replica": gpr,
        "weights_per_gpu_bytes": grid(stage_w.max(axis=3), (0, 1, 3)),
        "kv_budget_bytes": grid(np.maximum(_min_budget(budgets), 0), (0, 1, 3)),
        "kv_bytes_per_request": grid(kv_req, (0, 1, 2)).astype(np.int64),
        "max_requests": mreq,
        "batch": np.where(feasible, batch, 0),
        "max_batch_tpot": batch_max,
        "tpot_ms": np.where(batch_max >= 1, tpot, tpot1) * 1e3,
        "ttft_ms": ttft * 1e3,
        "tokens_per_s_per_replica": np.where(batch_max >= 1, tokens_per_s(safe), 0.0),
        "bound_tokens_per_s_per_replica": np.where(memory_ok, run_bound, 0.0),
        "estimate_tokens_per_s_per_replica": np.where(memory_ok, run_estimate, 0.0),
        "replicas": np.where(feasible, replicas, 0),
        "estimate_total_gpus": est_total, "estimate_tpot_ms": est_tpot * 1e3,
        "estimate_ttft_ms": est_ttft * 1e3,
        "total_gpus": np.where(feasible, total, 0),
        "cost_per_hour": np.where(feasible, cost_h, np.nan),
        "cost_per_m_tokens": np.where(feasible, cost_h / (served * 3600) * 1e6, np.nan),
        "gpu_hours_per_m_tokens": np.where(feasible, total / (served * 3600) * 1e6, np.nan),
        "priced": grid(np.array([p is not None for p in price_list]), (0,)),
        "feasible": feasible,
        "fails": pd.Categorical.from_codes(code, categories=pd.Index(labels, dtype=object)),
    })
    unit = "$" if priced else "GPU-hours"
    n_rows = len(table)
    table.insert(0, "mode", pd.Series(pd.Categorical.from_codes(
        np.zeros(n_rows, dtype=np.int8), categories=pd.Index(["aggregated"], dtype=object))))
    for name in PD_COLUMNS:
        table[name] = np.zeros(n_rows) if name == "transfer_ms" else np.zeros(n_rows, dtype=np.int64)
    formulas = _formulas(query, lengths, unit)
    if query.disagg:
        pd_table, pd_notes = pd_rows(plan, query, lengths, table, terms, gpu_list, wds, f_tok)
        notes.extend(pd_notes)
        if pd_table is not None:
            table = pd.concat([table, pd_table.assign(mode="aggregated")], ignore_index=True)
            modes = ["aggregated", *dict.fromkeys(pd_table["mode"].astype(str))]
            codes = np.zeros(len(table), dtype=np.int64)
            codes[n_rows:] = [modes.index(m) for m in pd_table["mode"].astype(str)]
            table["mode"] = pd.Categorical.from_codes(codes, categories=pd.Index(modes, dtype=object))
            feasible = table["feasible"].to_numpy()
            formulas.extend(PD_FORMULAS)
    rec = Recommendation(table, lengths, unit, formulas, _assumptions(arch, query),
                         notes=list(dict.fromkeys(notes)))
    if not feasible.any():
        rec.message = no_feasible_message(table, query)
    return rec


#: Columns only xPyD candidates fill (0 on aggregated rows).
PD_COLUMNS = ("prefill_instances", "decode_instances", "transfer_ms", "in_flight_bound")

PD_FORMULAS = [
    "xPyD (disaggregated prefill/decode, vLLM NIXL): prefill and decode instances of the candidate's "
    "layout and formats, each its own Plan (prefill at the prompt, decode at the context); the decode "
    "batch B ≤ min(requests that fit, max_num_seqs, (C − blocks(P)) // blocks(P+O)) so one prompt can "
    "always be pulled (kvplan.disagg: the pull allocates the whole prompt first); B_max the largest such "
    "batch meeting TPOT(B) (no prefill interleaved)",
    "xPyD: TTFT = TTFT(P) + KV transfer (prompt blocks × bytes per block per rank / link, the link "
    "as comm's: interconnect, else host link, else 32 GB/s; disagg.transfer_seconds); "
    "y = ceil(rps · O / (B_max / TPOT(B_max))) or ceil(users / B_max); "
    "x = ceil(λ · t_pf) prefill instances, λ = rps or users / (t_pf + transfer + O · TPOT(B)); "
    "GPUs = (x + y) · tp · pp; cost per M output tokens as the aggregated ones",
]


def _subset(t: _Terms, idx: np.ndarray) -> _Terms:
    """The terms of candidates ``idx`` only."""
    return replace(t, **{name: getattr(t, name)[idx] for name in
                         ("bw", "flops", "link", "eff", "tp", "pp", "ep", "w_dense", "w_expert",
                          "kv_request")})


def _pd_split(query: RecommendQuery, lengths: Lengths, terms: _Terms, pre: _Terms, limit: np.ndarray,
              transfer: np.ndarray, f_tok: float, f_prompt: float,
              f_mean: float) -> tuple[np.ndarray, ...]:
    """(x, y, decode batch, TPOT s, TTFT s, served output tokens/s, B_max) of xPyD splits, decode at
    ``terms``' efficiencies and prefill at ``pre``'s (``PD_FORMULAS``), vectorised over the rows;
    y = 0 where no batch within ``limit`` meets TPOT."""
    target_s = query.tpot_ms / 1e3
    b_max = _largest_batch(terms, limit, target_s, f_tok)
    safe = np.maximum(b_max, 1)
    ttft = prefill_time(pre, lengths.prompt, f_prompt)[0] + transfer
    t_pf = prefill_time(pre, lengths.prompt_mean, f_mean)[0]
    out = lengths.output_mean
    if query.traffic == "users":
        y = -(-query.users // safe)
        batch = -(-query.users // y)
        tpot = decode_time(terms, batch, f_tok)[0]
        rate = query.users / (t_pf + transfer + out * tpot)
    else:
        tpot_max = decode_time(terms, safe, f_tok)[0]
        y = np.ceil(query.rps * out / (safe / tpot_max)).astype(np.int64)
        batch = safe
        tpot = tpot_max
        rate = np.full(safe.shape, query.rps)
    x = np.maximum(np.ceil(rate * t_pf), 1).astype(np.int64)
    return x, np.where(b_max >= 1, y, 0), batch, tpot, ttft, rate * out, b_max


def pd_rows(plan: Plan, query: RecommendQuery, lengths: Lengths, table: pd.DataFrame, terms: _Terms,
            gpu_list: list[GPU], wds: list[str], f_tok: float) -> tuple[pd.DataFrame | None, list[str]]:
    """xPyD candidates of the ``query.pd_layouts`` cheapest feasible aggregated candidates without
    attention data-parallelism (``PD_FORMULAS``): each gets a prefill Plan (the prompt) and a decode
    Plan (the context) and ``disagg.disagg``'s decode pool, in-flight bound and transfer time; the
    bound and estimate tokens/s per instance are the layout's (the run bound holds for any schedule).
    A decode pool that cannot hold one prompt next to one running request fails "memory" with the
    reason in the notes. Only the chosen rows are computed, so the search's work grows by a constant."""
    try:
        check_engine("decode", plan.engine.engine_id)
    except KVPlanError as exc:
        return None, [f"xPyD candidates left out: {exc}"]
    ok = table["feasible"].to_numpy() & (table["dp"].to_numpy() == 1)
    if not ok.any():
        return None, ["xPyD candidates left out: no feasible aggregated layout without data parallelism "
                      "to split"]
    order = table[ok].sort_values(["cost_per_m_tokens", "gpu_hours_per_m_tokens", "tpot_ms"],
                                  kind="stable")
    idx = order.index.to_numpy()[:query.pd_layouts]
    gpu_of = {g.id: g for g in gpu_list}
    notes: list[str] = []
    prompt, context = lengths.prompt, lengths.context
    dq = DisaggQuery(prompt_tokens=prompt, output_tokens=max(context - prompt, 0))
    link = terms.link[idx] / 1e9  # the recommender's link: interconnect, else host link, else 32 GB/s
    limit = np.zeros(idx.size, dtype=np.int64)
    transfer = np.zeros(idx.size)
    need = np.zeros(idx.size, dtype=np.int64)
    full = np.ones(idx.size, dtype=np.int64)
    capacity = np.zeros(idx.size, dtype=np.int64)
    refused = np.zeros(idx.size, dtype=bool)
    for i, j in enumerate(idx):
        row = table.loc[j]
        wd = str(row["weight_dtype"])
        decode = plan.vary(gpu=gpu_of[str(row["gpu"])], tp=int(row["tp"]), pp=int(row["pp"]),
                           num_gpus=int(row["tp"]) * int(row["pp"]), users=1, tokens=context,
                           kv_dtype=str(row["kv_dtype"]), weight_dtype=None if wd == "auto" else wd)
        prefill = decode.vary(tokens=prompt)
        label = f"xPyD {row['gpu']} TP {row['tp']} × PP {row['pp']} KV {row['kv_dtype']} W {wd}"
        try:
            answer = disagg(prefill, decode, dq.model_copy(update={"link_gbps": float(link[i])}))
        except KVPlanError as exc:
            refused[i] = True
            notes.append(f"{label}: {exc}")
            continue
        capacity[i], need[i], full[i] = (answer.decode_capacity_blocks, answer.prompt_blocks,
                                         answer.request_blocks)
        room = (capacity[i] - need[i]) // full[i]  # running requests that leave one prompt's blocks
        limit[i] = min(int(row["max_requests"]), answer.max_num_seqs, room)
        if limit[i] < 1:
            refused[i] = True
            notes.append(f"{label}: the decode pool ({capacity[i]:,} blocks) cannot hold one "
                         f"{context:,}-token request and pull one {prompt:,}-token prompt "
                         f"({full[i]:,} + {need[i]:,} blocks)")
        transfer[i] = answer.transfer_seconds or 0.0
    sub = _subset(terms, idx)
    mean_prompt = max(round(lengths.prompt_mean), 1)
    f_prompt, f_mean = prefill_flops(plan.arch, prompt), prefill_flops(plan.arch, mean_prompt)
    usable = np.where(refused, 0, limit)
    x, y, batch, tpot, ttft, served, b_max = _pd_split(query, lengths, sub, sub, usable, transfer, f_tok,
                                                f_prompt, f_mean)
    own = query.phase_efficiency
    effs = [PhaseEfficiency(prefill=own[str(g)][0], decode=own[str(g)][1]) if str(g) in own
            else efficiency_for(str(g)) for g in table.loc[idx, "gpu"]]
    dec = replace(sub, eff=np.array([e.decode for e in effs]))
    pre = replace(sub, eff=np.array([e.prefill for e in effs]))
    ex, ey, _, e_tpot, e_ttft, _, _ = _pd_split(query, lengths, dec, pre, usable, transfer, f_tok,
                                             f_prompt, f_mean)
    gpr = (sub.tp * sub.pp).astype(np.int64)
    total = (x + y) * gpr
    e_ok = (ey >= 1) & (e_ttft * 1e3 <= query.ttft_ms)
    memory_ok = ~refused
    ttft_ok = ttft * 1e3 <= query.ttft_ms
    tpot_ok = y >= 1
    gpu_ok = total <= query.max_total_gpus
    feasible = memory_ok & ttft_ok & tpot_ok & gpu_ok
    out = table.loc[idx].copy().reset_index(drop=True)
    price = out["cost_per_hour"].to_numpy() / out["total_gpus"].to_numpy()
    cost_h = total * price
    code = np.zeros(idx.size, dtype=np.int64)
    for bit, good in enumerate((memory_ok, ttft_ok, tpot_ok | ~memory_ok, gpu_ok | ~tpot_ok)):
        code |= (~good).astype(np.int64) << bit
    cats = out["fails"].cat.categories
    waiting = np.where(memory_ok, (capacity - batch * full) // np.maximum(need, 1), 0)
    out = out.assign(
        mode=[f"{a}P{b}D" for a, b in zip(x, y, strict=True)],
        prefill_instances=np.where(memory_ok, x, 0), decode_instances=np.where(memory_ok, y, 0),
        transfer_ms=transfer * 1e3, in_flight_bound=waiting,
        max_requests=np.where(memory_ok, limit, 0),
        batch=np.where(feasible, batch, 0), max_batch_tpot=b_max,
        tpot_ms=tpot * 1e3, ttft_ms=ttft * 1e3,
        tokens_per_s_per_replica=np.where(tpot_ok, served / np.maximum(x + y, 1), 0.0),
        replicas=np.where(feasible, x + y, 0), total_gpus=np.where(feasible, total, 0),
        estimate_total_gpus=np.where(e_ok, (ex + ey) * gpr, 0), estimate_tpot_ms=e_tpot * 1e3,
        estimate_ttft_ms=e_ttft * 1e3,
        cost_per_hour=np.where(feasible, cost_h, np.nan),
        cost_per_m_tokens=np.where(feasible, cost_h / (served * 3600) * 1e6, np.nan),
        gpu_hours_per_m_tokens=np.where(feasible, total / (served * 3600) * 1e6, np.nan),
        feasible=feasible,
        fails=pd.Categorical.from_codes(code, categories=cats))
    return out, notes


def _estimated_gpus(query: RecommendQuery, gpu_list: list[GPU], terms: _Terms, grid: Any,
                    limit: np.ndarray, f_tok: float, f_prompt: float, f_mean_prompt: float,
                    lengths: Lengths) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GPUs, TPOT s, TTFT s) the estimate gives: the bounds' step model with the roofline over the
    accelerator's phase efficiencies instead of ``e`` (decode steps over ``e_decode``, prefill over
    ``e_prefill``; ``presets/efficiency.json`` or a calibration), the same replica rule; 0 GPUs where
    the estimate meets a target nowhere within ``limit`` requests."""
    from dataclasses import replace

    own = query.phase_efficiency
    effs = [PhaseEfficiency(prefill=own[g.id][0], decode=own[g.id][1]) if g.id in own
            else efficiency_for(g.id) for g in gpu_list]
    dec = replace(terms, eff=grid(np.array([e.decode for e in effs]), (0,)))
    pre = replace(terms, eff=grid(np.array([e.prefill for e in effs]), (0,)))
    ttft, _ = prefill_time(pre, lengths.prompt, f_prompt)
    t_pf, _ = prefill_time(pre, lengths.prompt_mean, f_mean_prompt)
    batch_max = _largest_batch(dec, limit, query.tpot_ms / 1e3, f_tok)
    safe = np.maximum(batch_max, 1)
    out_mean = lengths.output_mean
    if query.traffic == "users":
        replicas = -(-query.users // safe)
        batch = -(-query.users // replicas)
    else:
        step = decode_time(dec, safe, f_tok)[0]
        capacity = out_mean * safe / (out_mean * step + safe * t_pf / dec.ep)
        replicas = np.ceil(query.rps * out_mean / capacity).astype(np.int64)
        batch = safe
    ok = (batch_max >= 1) & (ttft * 1e3 <= query.ttft_ms)
    total = replicas * (dec.tp * dec.pp * dec.ep).astype(np.int64)
    return np.where(ok, total, 0), decode_time(dec, np.where(ok, batch, 1), f_tok)[0], ttft


def workload_request_sums(arch: ModelArch, prompt: np.ndarray, output: np.ndarray) -> tuple[float, float]:
    """(mean FLOPs per request, mean KV element-tokens a request's decode reads) over the workload:
    ``flops.request_flops`` and ``kv_read_bytes`` (per element, before the format's bits) summed in
    closed form over every request (requests of 0 output tokens count as one prefill)."""
    p = np.asarray(prompt, dtype=np.int64)
    o = np.maximum(np.asarray(output, dtype=np.int64), 1)
    last = p + o - 1
    flops = 2.0 * arch.hidden_size * arch.vocab_size * o.astype(np.float64) + _layers_flops(arch, last)
    elems = np.zeros(p.shape)
    for per_token, kind, window in _cache_layers(arch):
        elems = elems + per_token * (kind.context_sum(window, last) - kind.context_sum(window, p))
    return float(flops.mean()), float(elems.mean())


def workload_phase_sums(arch: ModelArch, prompt: np.ndarray, output: np.ndarray) -> tuple[float, float]:
    """(mean prefill FLOPs, mean KV elements a request holds at its final length ``P + O``) over the
    workload: ``flops.prefill_decode_flops``' prefill and ``Kind.context_at`` of each layer."""
    p = np.asarray(prompt, dtype=np.int64)
    final = p + np.maximum(np.asarray(output, dtype=np.int64), 1)
    flops = 2.0 * arch.hidden_size * arch.vocab_size + _layers_flops(arch, p)
    elems = np.zeros(p.shape)
    for per_token, kind, window in _cache_layers(arch):
        elems = elems + per_token * kind.context_at(window, final)
    return float(flops.mean()), float(elems.mean())


def _layers_flops(arch: ModelArch, tokens: np.ndarray) -> np.ndarray:
    """Every layer's FLOPs summed over positions ``1 … tokens`` (``flops.layer_flops``: dense part
    × tokens + attention × its context sum), one term per distinct layer shape."""
    total = np.zeros(tokens.shape)
    for lf, count in Counter(layer_flops(arch)).items():
        total = total + count * (lf.dense * tokens.astype(np.float64) + lf.attn_coeff
                                 * lf.ctx_sum(tokens).astype(np.float64))
    return total


def _cache_layers(arch: ModelArch) -> list[tuple[int, Kind, int | None]]:
    """(KV elements per token × layers of that shape, cache kind, window): one entry per distinct
    attention / MLA layer shape, so the sums grow with layer kinds, not layers."""
    shapes = Counter((layer.elements_per_token,
                      layer.kind if isinstance(layer, Attention) else layer.cache_kind, layer.window)
                     for layer in arch.layers if isinstance(layer, Attention | MLA))
    return [(per_token * count, kind, window) for (per_token, kind, window), count in shapes.items()]


def _run_columns(arch: ModelArch, gpu_list: list[GPU], layouts: list[tuple[int, int, int]],
                 kv_dtypes: list[str], wds: list[str], w_total: np.ndarray, prompt: np.ndarray,
                 output: np.ndarray, grid: Any,
                 calibrated: dict[str, tuple[float, float]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-replica run upper bound and estimate (``throughput_bound``'s two limits over the
    workload's requests, weights counted as ``throughput_bound`` counts them; ``estimate_throughput`` with
    ``presets.efficiency_for`` each accelerator). ``auto`` weights of a quantized checkpoint take the
    accelerator's highest listed rate (the bound stays a bound)."""
    f_mean, elems_mean = workload_request_sums(arch, prompt, output)
    o_mean = float(np.asarray(output, dtype=np.float64).mean())
    gpr = np.array([tp * pp * ep for tp, pp, ep in layouts], dtype=np.float64)
    experts, params = expert_share(arch)

    def fmt(wd: str) -> str:
        return rate_format(arch, wd)

    peak = np.array([[g.peak_tflops(fmt(wd)) * 1e12 for wd in wds] for g in gpu_list])
    cap = np.array([float(g.capacity_bytes) for g in gpu_list])
    bw = np.array([g.bandwidth_tbps * 1e12 for g in gpu_list])
    bits = np.array([get_dtype(k).bits for k in kv_dtypes], dtype=np.float64)
    own = calibrated or {}
    eff = [PhaseEfficiency(prefill=own[g.id][0], decode=own[g.id][1]) if g.id in own
           else efficiency_for(g.id) for g in gpu_list]
    # weights: params at the format's bits as throughput_bound counts them (a quantized checkpoint's
    # "auto": the bytes as loaded)
    quantized_auto = arch.weights.quantization is not None
    w_fmt = np.array([np.nan if wd == "auto" and quantized_auto
                      else float(get_weight_dtype(fmt(wd)).bytes_for(params)) for wd in wds])
    w_bytes = np.where(np.isnan(w_fmt), w_total, w_fmt)  # (GPU, layout, format)
    w_g = grid(w_bytes / gpr[:, None], (0, 1, 3))
    r_g = grid((w_bytes - np.where(np.isnan(w_fmt), w_total * experts / params,
                                   [float(get_weight_dtype(fmt(wd)).bytes_for(experts)) for wd in wds]))
               / gpr[:, None], (0, 1, 3))
    free = np.maximum(grid(cap, (0,)) - w_g, 0.0)
    s_g = grid(bits / 8, (2,)) * elems_mean / grid(gpr, (1,))
    compute = grid(gpr, (1,)) * grid(peak, (0, 3)) * o_mean / f_mean
    pf_mean, final_mean = workload_phase_sums(arch, prompt, output)
    p_mean = float(np.asarray(prompt, dtype=np.float64).mean())
    link = np.array([(g.interconnect_gbps or g.host_link_gbps or 32.0) * 1e9 for g in gpu_list])
    comm = np.array([[comm_seconds_per_token(arch, tp, pp, float(li)) for tp, pp, _ in layouts]
                     for li in link])
    e_p = grid(np.array([e.prefill for e in eff]), (0,))
    e_d = grid(np.array([e.decode for e in eff]), (0,))
    share = grid(gpr, (1,))
    t_pf, t_dec, _ = estimate_seconds(
        pf_mean, f_mean - pf_mean, p_mean, o_mean, share, grid(peak, (0, 3)), grid(bw, (0,)),
        grid(comm, (0, 1)), r_g, w_g - r_g, (arch.moe.n_active / arch.moe.n_experts) if arch.moe else 0.0,
        s_g, grid(bits / 8, (2,)) * final_mean / share, free, float(estimate_batch_cap()[0]))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        memory = np.where(s_g > 0, o_mean * free * grid(bw, (0,)) / (s_g * (free + r_g)), np.inf)
        bound = np.minimum(compute, memory)
        estimate = np.minimum(o_mean / (t_pf / e_p + t_dec / e_d), bound)
    return bound, estimate


def _min_budget(budgets: np.ndarray) -> np.ndarray:
    """KV budget per GPU: the smallest stage's (padding stages hold int64 max)."""
    return budgets.min(axis=3)


def _pool_requests(pool: KVPool, L: int, rows: np.ndarray) -> np.ndarray:
    return np.asarray(pool.max_requests_for(L, rows), dtype=np.int64)


def _empty_detail(gpu_list: list[GPU], layouts: list[tuple[int, int, int]], kv: list[str],
                  wds: list[str], notes: list[str]) -> str:
    if not gpu_list:
        return "no accelerator chosen"
    if not layouts:
        return "no TP/PP split is allowed within the GPU limit" + (f" ({notes[0]})" if notes else "")
    return "no KV format chosen" if not kv else "no weight format chosen"


def no_feasible_message(table: pd.DataFrame, query: RecommendQuery) -> str:
    """Name the constraint fewest candidates meet, with the best value reached against its target."""
    passing = {name: int((~table["fails"].str.contains(name, regex=False)).sum()) for name in FAILS}
    tightest = min(FAILS, key=lambda name: passing[name])
    if tightest == "TPOT":
        best = f"the fastest decode step is {table['tpot_ms'].min():,.2f} ms against {query.tpot_ms:g} ms"
    elif tightest == "TTFT":
        best = f"the fastest prefill is {table['ttft_ms'].min():,.2f} ms against {query.ttft_ms:g} ms"
    elif tightest == "memory":
        best = (f"no layout holds the weights and one request; the largest KV budget left is "
                f"{max(int(table['kv_budget_bytes'].max()), 0):,} B per GPU")
    elif tightest == "format":
        best = "no accelerator searched has tensor cores for the weight formats chosen"
    else:
        best = f"every candidate needs more than {query.max_total_gpus:,} GPUs"
    return str(KVPlanError("recommend.none", constraint=tightest, passing=f"{passing[tightest]:,}",
                           count=f"{len(table):,}", best=best))


def _formulas(query: RecommendQuery, lengths: Lengths, unit: str) -> list[str]:
    return [
        "TPOT(B) = pp · max((W_dense + W_expert·(1−(1−k/E)^B) + B_gpu·KV(L)) / BW, "
        "B_gpu·F_dec / (pp·tp·FLOPS)) / e + comm(B_gpu)",
        "TTFT(P) = max(F_pf(P) / (tp·FLOPS), pp·W / BW) / e + comm(P)",
        "comm(n) = [2·layers·2(tp−1)/tp + 2·moe_layers·k·(ep−1)/ep + (pp−1)] · n·h·2 B / interconnect",
        f"tokens/s = O·B / (O·TPOT(B) + B·t_pf/ep), O = {lengths.output_mean:,.1f} mean output tokens",
        "replicas = ceil(users / B_max)" if query.traffic == "users"
        else "replicas = ceil(requests/s · O / tokens/s(B_max))",
        "cost per M output tokens = GPUs × price per GPU-hour / (served tokens/s · 3600) · 10⁶"
        if unit == "$" else "GPU-hours per M output tokens = GPUs / (served tokens/s · 3600) · 10⁶ "
                            "(no accelerator searched has a price)",
    ]


def _assumptions(arch: ModelArch, query: RecommendQuery) -> list[str]:
    out = [
        "Bounds, not measurements: peak bandwidth and FLOPS scaled by the efficiency factor "
        f"(default {query.default_efficiency:g}); no kernel launch, scheduling or queueing time.",
        f"Lengths at the {query.percentile} of the workload: TTFT for that prompt, memory and KV "
        "read for that final length on every resident request (the last token of such a request).",
        "Memory is the engine's exact pool for that length (weights as loaded, the release's budget).",
        "Prefills interleave with decode steps: their time lowers throughput, not TPOT.",
        "KV read per decode step = what the engine reserves for the request (for windowed layers a "
        "little more than the tokens attention reads).",
        "PP stages run one after another for a token (no micro-batch overlap); communication is "
        "bandwidth only (no latency term) and not overlapped with compute.",
        "Peak FLOPS: the weight format's dense tensor-core rate (GPU.peak_tflops: FP4, FP8, INT8 "
        "where listed, else the next wider; a quantized checkpoint's own format at the fastest listed).",
        "Tokens/s columns: 'bound' is the run upper bound no run of this workload can beat "
        "(throughput_bound: compute at the format's dense tensor-core rate, memory traffic at each "
        "request's average context, pipelined PP, no efficiency factor); 'estimate' is an estimate, "
        "not a bound: each phase's time at peak (prefill FLOPs; decode weight and KV reads, FLOPs and "
        "TP all-reduce at the engine's batch, at most the fitted batch cap) over the accelerator's "
        "prefill and decode efficiencies (presets/efficiency.json, fitted on published results, "
        "docs/efficiency.md), never above the bound.",
    ]
    if query.image_tokens:
        media = (f"image and video tokens ({query.images} image(s), {query.videos} video(s)"
                 if query.videos else f"image tokens ({query.images} image(s)")
        out.append(f"Each prompt brings {query.image_tokens:,} {media}, "
                   "the checkpoint's processor) beside its text: they are in the prompt and context "
                   "lengths, the KV and the language model's prefill FLOPs; the vision tower's own "
                   "FLOPs are not counted, so TTFT stays a lower bound.")
    if arch.moe is not None:
        out.append("MoE: uniform routing; a step reads the experts its tokens touch. EP candidates run "
                   "attention data-parallel (each GPU its own requests and KV) with experts split over "
                   "the EP GPUs; their dashboard link shows one DP rank without EP.")
    return out


# ------------------------------------------------------------------------------- run upper bound
@dataclass(frozen=True)
class ThroughputBound:
    """Output tokens/s no run of ``n`` requests of ``P`` + ``O`` tokens can beat on ``gpus`` GPUs
    (``throughput_bound``): the smaller of the compute and the memory-traffic limits."""

    tokens_per_s: float
    compute_tokens_per_s: float
    memory_tokens_per_s: float
    limit: Literal["compute", "memory traffic"]
    flops_per_request: float
    peak_flops: float
    weight_bytes_per_gpu: float
    kv_read_bytes_per_request_per_gpu: float
    capacity_bytes: int
    bandwidth: float
    replicas: int
    formula: str
    prompt: int = 1
    output: int = 2
    tp: int = 1
    pp: int = 1
    prefill_flops: float = 0.0
    kv_final_bytes_per_gpu: float = 0.0
    weight_read_bytes_per_gpu: float = 0.0
    route: float = 0.0
    comm_s_per_token: float = 0.0


BOUND_FORMULA = (
    "compute: tokens/s ≤ GPUs · FLOPS_fmt · O / F_req, F_req = FLOPs of prefill P + O−1 decode steps "
    "(flops.request_flops); memory traffic: every decode step of a GPU reads its non-expert weight "
    "shard R_g once (dense models: all of W_g = W/(tp·pp)) and the KV of the tokens it attends, and "
    "holds at most C − W_g of KV, so steps ≥ n·s/(C − W_g) and time ≥ n·s·(C − W_g + R_g) / ((C − W_g)"
    "·BW), s = Σ_{j=1}^{O−1} Σ_layers kv_layer·ctx(P+j) / (tp·pp) (the KV a request's decode reads on "
    "one GPU, = its KV occupancy summed over its steps): tokens/s ≤ replicas · O · (C − W_g) · BW / "
    "(s · (C − W_g + R_g))")


def kv_read_bytes(arch: ModelArch, kv_dtype: str, prompt: int, output: int) -> float:
    """KV bytes a request's ``O − 1`` decode steps read over all layers (bits only, no scales:
    a lower bound): ``Σ_layers elements · bits/8 · (Σ_{p≤P+O−1} ctx(p) − Σ_{p≤P} ctx(p))`` with each
    layer's window rule (``Kind.context_sum``). Recurrent and KV-sharing layers count 0."""
    bits = get_dtype(kv_dtype).bits
    hi, lo = np.asarray([prompt + output - 1]), np.asarray([prompt])
    total = 0.0
    for layer in arch.layers:
        kind: Kind
        if isinstance(layer, Attention):
            kind = layer.kind
        elif isinstance(layer, MLA):
            kind = layer.cache_kind
        else:
            continue
        steps = int(kind.context_sum(layer.window, hi)[0] - kind.context_sum(layer.window, lo)[0])
        total += layer.elements_per_token * bits / 8 * steps
    return total


def throughput_bound(arch: ModelArch, gpu: GPU, gpus: int, tp: int, pp: int, weight_dtype: str,
                     kv_dtype: str, prompt: int, output: int,
                     weights_bytes: float | None = None) -> ThroughputBound:
    """The upper bound of a run at a fixed shape (``BOUND_FORMULA``), for ``gpus / (tp·pp)`` replicas.

    Every quantity errs towards a higher bound: weights are ``params · bits/8`` of the format with its
    group scales (``dtypes.get_weight_dtype``; embeddings in the format too), split evenly over the
    ``tp·pp`` GPUs — a quantized checkpoint in its own format (``auto``): its bytes as loaded
    (``weights_bytes``, the Plan's; else as stored, ``weights.weights_per_gpu``), at the fastest
    rate the accelerator lists (``GPU.peak_tflops("nvfp4")``, as the recommender's run columns); KV
    without scales, split evenly (no head replication); the whole device memory
    (``GPU.capacity_bytes``) holds weights and KV (no reserve); prefill reads and writes nothing;
    FLOPs at the format's dense tensor-core rate (``GPU.peak_tflops``) for attention too; no
    communication. Pipelined PP and chunked prefill mixing are allowed (a stage's step reads its
    weights once for any number of tokens). Not covered: speculative decoding (several tokens per
    KV read), shared prefixes (prefix caching) and KV kept in host memory, which the published
    runs of ``tests/fixtures/published`` do not use.
    """
    if gpus < 1 or tp < 1 or pp < 1 or gpus % (tp * pp) or prompt < 1 or output < 2:
        raise KVPlanError("recommend.run", detail=f"a run needs GPUs a multiple of TP·PP and at least "
                                                  f"2 output tokens (got {gpus} GPUs, TP {tp}, PP {pp}, "
                                                  f"{prompt}+{output} tokens)")
    own_quantized = weight_dtype == "auto" and arch.weights.quantization is not None
    wfmt = rate_format(arch, weight_dtype)
    share = tp * pp
    try:
        wdt = get_weight_dtype(arch.model_dtype if own_quantized else wfmt)
        get_dtype(kv_dtype)
    except KeyError as exc:
        kv_bad = exc.args[0] == kv_dtype
        raise KVPlanError("unknown.dtype", value=str(exc.args[0])[:80], choices=", ".join(
            KV_DTYPE_CHOICES if kv_bad else WEIGHT_DTYPES)) from None
    experts, params = expert_share(arch)
    if own_quantized:
        from kvplan.weights import weights_per_gpu

        total = float(weights_bytes if weights_bytes is not None else weights_per_gpu(arch).total_bytes)
        w_gpu = total / share
        w_read = total * (params - experts) / params / share  # MoE: a step may touch no expert
    else:
        w_gpu = wdt.bytes_for(arch.params_total) / share
        w_read = wdt.bytes_for(arch.params_total - experts) / share
    s = kv_read_bytes(arch, kv_dtype, prompt, output) / share
    cap = gpu.capacity_bytes
    if w_gpu >= cap:
        raise KVPlanError("recommend.run", detail=f"the weights ({w_gpu:,.0f} B per GPU) do not fit "
                                                  f"in {cap:,} B")
    bw = gpu.bandwidth_tbps * 1e12
    peak = gpu.peak_tflops(wfmt) * 1e12
    f_req = request_flops(arch, prompt, output)
    compute = gpus * peak * output / f_req
    replicas = gpus // share
    free = cap - w_gpu
    memory = replicas * output * free * bw / (s * (free + w_read)) if s > 0 else math.inf
    link = (gpu.interconnect_gbps or gpu.host_link_gbps or 32.0) * 1e9
    return ThroughputBound(min(compute, memory), compute, memory,
                           "compute" if compute <= memory else "memory traffic", f_req, peak, w_gpu, s,
                           cap, bw, replicas, BOUND_FORMULA, prompt=prompt, output=output, tp=tp, pp=pp,
                           prefill_flops=prefill_flops(arch, prompt),
                           kv_final_bytes_per_gpu=kv_read_bytes(arch, kv_dtype, prompt + output - 1,
                                                                2) / share,
                           weight_read_bytes_per_gpu=w_read,
                           route=(arch.moe.n_active / arch.moe.n_experts) if arch.moe else 0.0,
                           comm_s_per_token=comm_seconds_per_token(arch, tp, pp, link))


def plan_throughput_bound(plan: Plan, prompt: int, output: int, gpus: int | None = None) -> ThroughputBound:
    """``throughput_bound`` of a plan's model, accelerator, TP × PP and formats (weights ``auto``
    when the plan keeps the checkpoint's own) on ``gpus`` GPUs (default: the plan's, else one
    replica)."""
    q = plan.query
    n = gpus or q.num_gpus or q.tp * q.pp
    return throughput_bound(plan.arch, plan.device, n, q.tp, q.pp, q.weight_dtype or "auto", q.kv_dtype,
                            prompt, output, weights_bytes=plan.weights.total_bytes)


#: KV share of the memory the weights leave that the estimate's batch may fill: trtllm-bench's
#: ``kv_cache_gpu_mem_fraction`` default (tensorrt_llm/bench/build/tuning.py, ``calc_engine_setting``),
#: which sizes its batch as that memory over the KV of ``ISL + OSL`` tokens (the capacity scheduler's
#: GUARANTEED_NO_EVICT holds a request's final length from admission).
ESTIMATE_KV_FRACTION = 0.95

ESTIMATE_FORMULA = (
    "estimate = replicas · O / (t_prefill / e_prefill + t_decode / e_decode), at most the bound; per "
    "request on one replica at peak: t_prefill = F_pf / (tp·pp·FLOPS_fmt) + P·c (batched prefill: no "
    "weight read), t_decode = (O−1)·(R(B) / (B·BW) + c) + s / BW + (F_req − F_pf) / (tp·pp·FLOPS_fmt), "
    "R(B) = non-expert weights + experts touched by B tokens, B = min(0.95·(C − W_g) / KV(P+O), "
    "batch cap), c = TP all-reduce + PP hand-off seconds per token (comm_seconds_per_token)")


def comm_seconds_per_token(arch: ModelArch, tp: int, pp: int, link: float) -> float:
    """Seconds of interconnect per token per GPU: TP ring all-reduce (two per layer) of the hidden
    state ``2·layers·2(tp−1)/tp·h·2 B`` plus the PP hand-off ``(pp−1)·h·2 B``, over ``link`` B/s
    (the recommender's ``comm``, module docstring)."""
    per = 2 * arch.n_layers * 2 * (tp - 1) / tp * arch.hidden_size * ACT_BYTES \
        + (pp - 1) * arch.hidden_size * ACT_BYTES
    return per / link


def estimate_seconds(prefill_flops: Any, decode_flops: Any, prompt: Any, output: Any, share: Any,
                     peak: Any, bw: Any, comm: Any, w_read: Any, w_expert: Any, route: float,
                     kv_read: Any, kv_final: Any, free: Any, batch_cap: float) -> tuple[Any, Any, Any]:
    """(t_prefill, t_decode, B): one request's replica seconds at peak per phase and the decode batch
    (``ESTIMATE_FORMULA``); numpy-broadcasting, so the recommender and ``estimate_throughput`` share it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = np.where(np.asarray(kv_final) > 0, ESTIMATE_KV_FRACTION * np.asarray(free)
                       / np.asarray(kv_final), batch_cap)
    batch = np.clip(np.floor(fit), 1.0, batch_cap)
    t_prefill = prefill_flops / (share * peak) + prompt * comm
    weights = w_read + w_expert * _touched(route, batch)
    t_decode = (output - 1) * (weights / (batch * bw) + comm) + kv_read / bw \
        + decode_flops / (share * peak)
    return t_prefill, t_decode, batch


def _bound_seconds(bound: ThroughputBound, batch: float | None = None) -> tuple[float, float, float]:
    cap = float(batch) if batch is not None else float(estimate_batch_cap()[0])
    t_pf, t_dec, b = estimate_seconds(
        bound.prefill_flops, bound.flops_per_request - bound.prefill_flops, bound.prompt, bound.output,
        bound.tp * bound.pp, bound.peak_flops, bound.bandwidth, bound.comm_s_per_token,
        bound.weight_read_bytes_per_gpu, bound.weight_bytes_per_gpu - bound.weight_read_bytes_per_gpu,
        bound.route, bound.kv_read_bytes_per_request_per_gpu, bound.kv_final_bytes_per_gpu,
        bound.capacity_bytes - bound.weight_bytes_per_gpu, cap)
    return float(t_pf), float(t_dec), float(b)


def estimate_throughput(bound: ThroughputBound, eff: PhaseEfficiency, batch: int | None = None) -> float:
    """The estimate (``ESTIMATE_FORMULA``) of a run, output tokens/s of all its replicas, never above
    the bound; ``batch`` fixes the decode batch (a run at a known concurrency), else the batch cap
    (``presets.estimate_batch_cap``) and the memory decide."""
    t_pf, t_dec, _ = _bound_seconds(bound, batch)
    return min(bound.replicas * bound.output / (t_pf / eff.prefill + t_dec / eff.decode), bound.tokens_per_s)


@dataclass(frozen=True)
class Measured:
    """One measured figure of a run with ``bound``'s model, layout, formats and lengths: output
    ``tokens/s`` of the whole run (``concurrency`` its decode batch per replica when known), or
    ``ttft`` / ``tpot`` in ms of a request at ``concurrency`` requests decoding together."""

    kind: Literal["tokens/s", "ttft", "tpot"]
    value: float
    bound: ThroughputBound
    concurrency: int | None = None


def phase_row(m: Measured) -> tuple[float, float, float]:
    """``(a, b, y)`` with the estimate of ``m`` reading ``a / e_prefill + b / e_decode = y``:
    tokens/s ``(t_prefill, t_decode, replicas·O / tokens/s)``; TTFT ``(F_pf/(tp·FLOPS) + P·c, 0,
    s)`` (one prompt crosses the PP stages in turn); TPOT at batch ``B``
    ``(0, pp·(R(B)/BW + B·(s/(O−1)/BW + F_dec/(O−1)/(tp·pp·FLOPS) + c)), s)``."""
    b = m.bound
    if m.kind == "tokens/s":
        t_pf, t_dec, _ = _bound_seconds(b, m.concurrency)
        return t_pf, t_dec, b.replicas * b.output / m.value
    if m.kind == "ttft":
        return b.prefill_flops / (b.tp * b.peak_flops) + b.prompt * b.comm_s_per_token, 0.0, m.value / 1e3
    batch = float(m.concurrency or 1)
    steps = b.output - 1
    w_expert = b.weight_bytes_per_gpu - b.weight_read_bytes_per_gpu
    weights = b.weight_read_bytes_per_gpu + w_expert * float(_touched(b.route, np.asarray([batch]))[0])
    per_token = (b.kv_read_bytes_per_request_per_gpu / steps / b.bandwidth
                 + (b.flops_per_request - b.prefill_flops) / steps / (b.tp * b.pp * b.peak_flops)
                 + b.comm_s_per_token)
    return 0.0, b.pp * (weights / b.bandwidth + batch * per_token), m.value / 1e3


def calibrate_phases(measured: list[Measured], eff: PhaseEfficiency, source: str = "") -> PhaseEfficiency:
    """Phase efficiencies from measured runs (any layout, formats, lengths): one figure scales both
    of ``eff`` by the factor that makes the estimate return it exactly (their ratio kept); two or
    more solve ``a / e_prefill + b / e_decode = y`` (``phase_row``) by least squares on the relative
    error, exact for two independent figures."""
    if not measured:
        raise KVPlanError("recommend.calibrate", detail="no measured figure given")
    for m in measured:
        if not (m.value > 0 and math.isfinite(m.value)):
            raise KVPlanError("recommend.calibrate", detail=f"the measured {m.kind} must be a positive "
                                                            f"number, got {m.value}")
        if m.kind == "tokens/s" and m.value > m.bound.tokens_per_s * (1 + 1e-12):
            raise KVPlanError("recommend.calibrate", detail=(
                f"the measured {m.value:,.1f} tokens/s is above the upper bound "
                f"{m.bound.tokens_per_s:,.1f} ({m.bound.limit}): check the run's GPUs, TP/PP, formats "
                "and lengths (speculative decoding and shared prefixes are outside the bound)"))
    rows = np.array([phase_row(m) for m in measured])
    note = source or ("calibrated on " + ", ".join(f"a measured {m.kind} of {m.value:,.4g}"
                                                   for m in measured))
    if len(measured) == 1:
        a, b, y = rows[0]
        k = y / (a / eff.prefill + b / eff.decode)
        return PhaseEfficiency(prefill=eff.prefill / k, decode=eff.decode / k, source=note, fit_rows=1)
    x, *_ = np.linalg.lstsq(rows[:, :2] / rows[:, 2:], np.ones(len(rows)), rcond=None)
    if not (x[0] > 0 and x[1] > 0):
        raise KVPlanError("recommend.calibrate", detail=(
            "the measured figures do not determine both phases (give a prefill-heavy and a "
            "decode-heavy figure, e.g. a TTFT and a TPOT)"))
    return PhaseEfficiency(prefill=1 / float(x[0]), decode=1 / float(x[1]), source=note,
                           fit_rows=len(measured))


def calibrate_run(bound: ThroughputBound, measured_tokens_per_s: float, eff: PhaseEfficiency,
                  source: str = "") -> PhaseEfficiency:
    """``calibrate_phases`` on one measured output tokens/s of the run ``bound`` describes."""
    return calibrate_phases([Measured("tokens/s", measured_tokens_per_s, bound)], eff, source=source)


# ------------------------------------------------------------------------------- calibration
def calibrate_efficiency(plan: Plan, measured: float, kind: Literal["decode", "prefill"], batch: int = 1,
                         prompt_tokens: int = 1024, context_tokens: int = 2048) -> float:
    """The efficiency factor one measured run implies.

    ``decode``: ``measured`` = decode tokens/s of a batch of ``batch`` at ``context_tokens``, so the
    step time is ``batch / measured`` and ``e = roofline / (step − comm)``. ``prefill``: ``measured`` =
    TTFT in ms of one ``prompt_tokens`` prompt, ``e = roofline / (TTFT − comm)``. The layout, formats
    and engine are the plan's.
    """
    arch = plan.arch
    if not (measured > 0 and math.isfinite(measured)) or batch < 1:
        raise KVPlanError("recommend.calibrate", detail="the measured figure and the batch must be positive")
    terms = single_terms(plan, context_tokens, efficiency=1.0)
    if kind == "decode":
        _, roof = decode_time(terms, np.asarray([batch]), decode_token_flops(arch, context_tokens))
        step = batch / measured
        comm = _comm(terms, np.ceil(np.asarray([batch]) / terms.ep))
    else:
        _, roof = prefill_time(terms, prompt_tokens, prefill_flops(arch, prompt_tokens))
        step = measured / 1e3
        comm = _comm(terms, np.asarray([float(prompt_tokens)]))
    compute = step - float(comm[0])
    if compute <= 0:
        raise KVPlanError("recommend.calibrate", detail="the measured time is below the communication "
                                                        "term alone")
    return float(roof[0]) / compute


def single_terms(plan: Plan, context_tokens: int, efficiency: float = 1.0) -> _Terms:
    """The time-bound terms of one layout (the plan's TP/PP, formats and engine; no EP)."""
    arch, gpu, base = plan.arch, plan.device, plan.query
    one_replica = plan.vary(tokens=context_tokens, users=1, num_gpus=base.tp * base.pp)
    q = one_replica.query
    budget = one_replica.budget
    pool = one_replica.make_pool(budget.stage_budgets, [])
    top = max(budget.stage_weights)
    experts, params = expert_share(arch)
    w_expert = top * experts // params
    peak = gpu.peak_tflops(rate_format(arch, q.weight_dtype))  # was fp8 or bf16 only
    moe = arch.moe
    one = np.ones(1)
    return _Terms(
        bw=one * gpu.bandwidth_tbps * 1e12, flops=one * peak * 1e12,
        link=one * (gpu.interconnect_gbps or gpu.host_link_gbps or 32.0) * 1e9, eff=one * efficiency,
        tp=one * q.tp, pp=one * q.pp, ep=one, w_dense=one * (top - w_expert), w_expert=one * w_expert,
        kv_request=one * float(pool.per_request_bytes(np.asarray([context_tokens]))[0]),
        route=(moe.n_active / moe.n_experts) if moe else 0.0, layers=arch.n_layers,
        moe_layers=(arch.n_layers - moe.n_dense_layers) if moe else 0, hidden=arch.hidden_size,
        top_k=moe.n_active if moe else 0)


# ------------------------------------------------------------------------------- links
def candidate_scenario(row: Any, scenario: Any, lengths: Lengths) -> Any:
    """The dashboard scenario of one candidate (``kvplan.scenario.Scenario``): its accelerator,
    split, formats, the request length the memory used and its batch per replica as users (its
    text: the context less the images' and videos' tokens, which ``scenario`` brings as
    ``im``/``iw``/``ih`` and ``vn``/``vx``/``vy``/``vs``/``vf``).
    EP candidates open as their data-parallel layout (the dp setting: dp ranks of TP tp, experts
    over ``ep = tp·dp`` GPUs); xPyD candidates as their y decode instances."""
    from kvplan.scenario import MAX_GPUS

    tp, pp, dp = int(row.tp), int(row.pp), int(getattr(row, "dp", row.ep))
    gpr = tp * pp * dp
    total = int(row.total_gpus) if int(row.total_gpus) else gpr
    if int(getattr(row, "decode_instances", 0)):
        total = int(row.decode_instances) * gpr
    n = total if total <= MAX_GPUS else gpr
    gpu: dict[str, Any] = {"gpu": row.gpu}
    if str(row.gpu).startswith("custom:"):
        spec = get_gpu(str(row.gpu))
        gpu = {"gpu": "custom", "custom_gpu_gib": spec.capacity_bytes / 2**30,
               "custom_gpu_tbps": spec.bandwidth_tbps, "custom_gpu_tflops": spec.bf16_tflops}
    settings = {"engine_settings": scenario.engine_settings.model_copy(update={"dp": dp})} if dp > 1 else {}
    return scenario.model_copy(update={
        **gpu, **settings, "tp": tp, "pp": pp, "num_gpus": n, "kv_dtypes": [row.kv_dtype],
        "weight_dtype": row.weight_dtype, "tokens": lengths.context - lengths.image_tokens,
        "users": max(int(row.batch) // dp, 1), "view": "context",
        **({} if lengths.image_tokens else {"images": 0, "videos": 0})})


def candidate_link(row: Any, scenario: Any, lengths: Lengths) -> str:
    """``?key=value…`` of ``candidate_scenario`` (``Scenario.to_query``)."""
    from urllib.parse import quote

    query = candidate_scenario(row, scenario, lengths).to_query()
    return "?" + "&".join(f"{k}={quote(v, safe=',')}" for k, v in query.items())


#: Columns of the ranked table, in the order the CLI and the dashboard show them.
TABLE_COLUMNS = ("mode", "gpu", "tp", "pp", "ep", "dp", "kv_dtype", "weight_dtype", "replicas", "total_gpus",
                 "batch", "tpot_ms", "ttft_ms", "tokens_per_s_per_replica", "bound_tokens_per_s_per_replica",
                 "estimate_tokens_per_s_per_replica", "estimate_total_gpus", "estimate_tpot_ms",
                 "estimate_ttft_ms", "cost_per_hour",
                 "cost_per_m_tokens", "gpu_hours_per_m_tokens", "weights_per_gpu_bytes", "kv_budget_bytes",
                 "kv_bytes_per_request", "max_requests", *PD_COLUMNS)


def unit_headers(cost_unit: str) -> dict[str, str]:
    """Export headers of the cost columns in ``cost_unit`` (``$``, or ``GPU-hours`` when no price
    is given: then the hourly cost is a GPU count); the other columns take ``report.unit_header``."""
    hourly = "GPU-hours per hour = GPUs" if cost_unit == "GPU-hours" else f"{cost_unit} per hour"
    return {"cost_per_hour": f"cost_per_hour [{hourly}]",
            "cost_per_m_tokens": f"cost_per_m_output_tokens [{cost_unit} per 10^6 output tokens]",
            "tpot_ms": "tpot_bound [ms]", "ttft_ms": "ttft_bound [ms]",
            "tokens_per_s_per_replica": "tokens_per_s_per_replica [output tokens/s]",
            "batch": "batch [requests per replica]", "total_gpus": "total_gpus [GPUs]",
            "ep": "ep [GPUs]", "estimate_total_gpus": "estimate_total_gpus [GPUs, estimate]",
            "estimate_tpot_ms": "estimate_tpot [ms, estimate]",
            "estimate_ttft_ms": "estimate_ttft [ms, estimate]",
            "mode": "mode [aggregated | xPyD]", "transfer_ms": "kv_transfer_bound [ms]",
            "prefill_instances": "prefill_instances [xPyD x]",
            "decode_instances": "decode_instances [xPyD y]",
            "in_flight_bound": "in_flight_bound [prompts per decode instance]"}


def ranked_rows(rec: Recommendation, scenario: Any, top: int = 20, unpriced: bool = False,
                xpyd: bool = False) -> list[dict[str, Any]]:
    """The ``top`` cheapest feasible candidates as plain dicts, each with its dashboard link
    (``unpriced``: those on accelerators without a price, ``Recommendation.unpriced_ranked``;
    ``xpyd``: only the disaggregated ones)."""
    out = []
    ranked = rec.unpriced_ranked if unpriced else rec.ranked
    if xpyd:
        ranked = ranked[ranked["mode"] != "aggregated"]
    for row in ranked.head(top).itertuples(index=False):
        item = {name: _plain(getattr(row, name)) for name in TABLE_COLUMNS}
        item["link"] = candidate_link(row, scenario, rec.lengths)
        out.append(item)
    return out


def price_sources(rec: Recommendation, query: RecommendQuery) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """({accelerator: {"per_hour", "source"}} for the searched accelerators with a price, [the
    others]): a ``--price`` given by the user, else the lowest quote of the kind asked in the price
    table (provider, kind, date and source, ``_price``)."""
    priced: dict[str, dict[str, Any]] = {}
    unpriced: list[str] = []
    for gpu_id in [str(g) for g in rec.table["gpu"].cat.categories]:
        value, source = _price(get_gpu(gpu_id).model_copy(update={"id": gpu_id}), query)
        if value is None:
            unpriced.append(gpu_id)
        else:
            priced[gpu_id] = {"per_hour": value, "source": source}
    return priced, unpriced


def failure_counts(rec: Recommendation) -> dict[str, int]:
    """Candidates failing each constraint (a candidate may fail several)."""
    fails = rec.table["fails"].astype(str)
    return {name: int(fails.str.contains(name, regex=False).sum()) for name in FAILS}


def _plain(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return round(float(value), 6)
    return value


# ------------------------------------------------------------------------------- latency at a rate
@dataclass(frozen=True)
class RateLatency:
    """TTFT and TPOT percentiles (ms) of ``latency_at_rate``'s simulation at ``rate`` requests/s per
    replica: estimates, at the efficiencies given (not bounds)."""

    rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    concurrency: float
    offered_tokens_per_s: float
    capacity_tokens_per_s: float
    requests: int
    chunk: int
    max_batch: int
    formula: str

    @property
    def saturated(self) -> bool:
        """The offered output tokens/s exceed what the replica serves at its largest batch."""
        return self.offered_tokens_per_s > self.capacity_tokens_per_s


RATE_FORMULA = (
    "continuous batching, one replica: Poisson arrivals at the rate (seeded), FCFS; each step decodes "
    "one token of every running request (B) and prefills up to chunk − B prompt tokens (chunked "
    "prefill, the chunk = max_num_batched_tokens); step = (pp·R(B)/BW + B·pp·(s/(O−1)/BW + "
    "F_dec/(O−1)/(tp·pp·FLOPS) + c)) / e_decode + n_prefill·(F_pf/P/(tp·FLOPS) + c) / e_prefill; "
    "TTFT = arrival → end of the step finishing its prompt, TPOT = (last − first token) / (O − 1); "
    "at most max_batch requests admitted")


def latency_at_rate(bound: ThroughputBound, eff: PhaseEfficiency, rate: float, requests: int = 1000,
                    seed: int = 0, chunk: int = 8192, max_batch: int | None = None) -> RateLatency:
    """Simulate ``requests`` requests of ``bound``'s shape arriving at ``rate`` per second on one
    replica of its layout (``RATE_FORMULA``): prefill chunks share steps with decode and slow
    them, and requests queue when the replica is busy. Steps that repeat unchanged (no prompt
    waiting) run in one jump to the next arrival or finish."""
    import heapq
    from collections import deque

    if not (rate > 0 and math.isfinite(rate)) or requests < 1 or chunk < 1:
        raise KVPlanError("recommend.rate", detail=f"the request rate must be a positive number and the "
                                                   f"chunk at least 1 token (got {rate}, {chunk})")
    p_len, steps_dec = bound.prompt, bound.output - 1
    _, _, fit_batch = _bound_seconds(bound, max_batch if max_batch is not None else 1 << 30)
    cap = int(max_batch if max_batch is not None else fit_batch)
    w_expert = bound.weight_bytes_per_gpu - bound.weight_read_bytes_per_gpu
    per_dec = bound.pp * (bound.kv_read_bytes_per_request_per_gpu / steps_dec / bound.bandwidth
                          + (bound.flops_per_request - bound.prefill_flops) / steps_dec
                          / (bound.tp * bound.pp * bound.peak_flops) + bound.comm_s_per_token) / eff.decode
    per_pf = (bound.prefill_flops / p_len / (bound.tp * bound.peak_flops)
              + bound.comm_s_per_token) / eff.prefill

    def step_s(batch: int, prefill_tokens: int) -> float:
        touched = float(_touched(bound.route, np.asarray([batch]))[0])
        weights = bound.weight_read_bytes_per_gpu + w_expert * touched
        return bound.pp * weights / bound.bandwidth / eff.decode + batch * per_dec + prefill_tokens * per_pf

    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, requests))
    first = np.zeros(requests)
    last = np.zeros(requests)
    waiting: deque[list[int]] = deque()  # [request, prompt tokens left]
    running: list[tuple[int, int]] = []  # heap of (step of its last token, request)
    t, k, nxt, done = 0.0, 0, 0, 0
    while done < requests:
        while nxt < requests and arrival[nxt] <= t:
            waiting.append([nxt, p_len])
            nxt += 1
        b = len(running)
        if b == 0 and not waiting:
            t = float(arrival[nxt])
            continue
        if not waiting or b >= cap:
            dt = step_s(b, 0)
            until_finish = running[0][0] - k
            until_arrival = math.ceil((arrival[nxt] - t) / dt) if nxt < requests and b < cap else 1 << 62
            m = max(1, min(until_finish, until_arrival))
            t += m * dt
            k += m
            prefilled: list[int] = []
        else:
            budget = max(chunk - b, 0)
            prefilled = []
            used = 0
            admitted = b
            for item in waiting:
                if budget <= 0 or admitted >= cap:
                    break
                take = min(item[1], budget)
                item[1] -= take
                budget -= take
                used += take
                admitted += 1
                if item[1] == 0:
                    prefilled.append(item[0])
            for _ in prefilled:
                waiting.popleft()
            t += step_s(b, used)
            k += 1
        while running and running[0][0] <= k:
            _, r = heapq.heappop(running)
            last[r] = t
            done += 1
        for r in prefilled:
            first[r] = t
            if steps_dec == 0:
                last[r] = t
                done += 1
            else:
                heapq.heappush(running, (k + steps_dec, r))
    ttft = (first - arrival) * 1e3
    tpot = (last - first) / max(steps_dec, 1) * 1e3
    concurrency = float(np.sum(last - arrival) / (last.max() - arrival[0]))
    capacity = estimate_throughput(bound, eff, batch=cap) / bound.replicas
    return RateLatency(rate, float(np.percentile(ttft, 50)), float(np.percentile(ttft, 99)),
                       float(np.percentile(tpot, 50)), float(np.percentile(tpot, 99)), concurrency,
                       rate * bound.output, capacity, requests, chunk, cap, RATE_FORMULA)


# ------------------------------------------------------------------------------- P/D ratio
class RatioRow(BaseModel):
    """Instances an xPyD split needs at ``rps`` requests/s: time lower bounds, memory exact."""

    model_config = ConfigDict(frozen=True)

    rps: float
    prefill_instances: int
    decode_instances: int
    ratio: float


class RatioAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    prefill_seconds: float
    decode_batch: int
    decode_step_seconds: float
    decode_tokens_per_s: float
    rows: list[RatioRow]
    formulas: list[str]

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def pd_ratio(prefill: Plan, decode: Plan, query: DisaggQuery, rates: list[float]) -> RatioAnswer:
    """Prefill and decode instances needed at each traffic rate, as lower bounds: a prefill instance
    takes at least the roofline time of one prompt (``recommend.prefill_time``, efficiency 1); a
    decode instance runs at most ``B`` requests — the decode pool's requests of ``prompt + output``
    tokens, capped by ``max_num_seqs`` — at the roofline step time of that batch
    (``decode_time``). ``x = ceil(rps × TTFT)``, ``y = ceil(rps × output / (B / TPOT))``. It lives
    beside the time bounds it uses (``kvplan.disagg`` sizes the memory and imports nothing of this)."""
    prompt, output = query.prompt_tokens, max(query.output_tokens, 1)
    length = prompt + output
    terms = single_terms(prefill, prompt)
    ttft = float(prefill_time(terms, prompt, prefill_flops(prefill.arch, prompt))[0][0])
    fits = int(decode.pool.max_requests(np.asarray([length]))[0])
    if fits < 1:
        need = int(decode.pool.blocks(np.asarray([length]))[0])
        raise KVPlanError("disagg.prompt", blocks=int(getattr(decode.pool, "capacity", 0)), prompt=length,
                          need=need)
    seqs = int(decode.startup.max_num_seqs or decode.settings.max_num_seqs or fits)
    batch = min(fits, seqs) * decode.settings.dp
    position = prompt + output // 2
    step = float(decode_time(single_terms(decode, length), np.asarray([batch]),
                             decode_token_flops(decode.arch, position))[0][0])
    rate = batch / step
    rows = []
    for rps in rates:
        x = max(int(np.ceil(rps * ttft)), 1)
        y = max(int(np.ceil(rps * output / rate)), 1)
        rows.append(RatioRow(rps=rps, prefill_instances=x, decode_instances=y, ratio=x / y))
    formulas = [
        f"TTFT ≥ {ttft:.4f} s per {prompt:,}-token prompt (roofline, efficiency 1, recommend.prefill_time)",
        f"decode batch B = min(pool {fits:,} requests of {length:,} tokens, max_num_seqs {seqs:,}) × "
        f"{decode.settings.dp} DP = {batch:,}; step ≥ {step:.5f} s (recommend.decode_time at position "
        f"{position:,}) → ≤ {rate:,.0f} tokens/s per decode instance",
        "x = ceil(rps × TTFT), y = ceil(rps × output / decode tokens/s): the fewest instances; real "
        "runs need more (efficiency < 1, queueing)",
    ]
    return RatioAnswer(prefill_seconds=ttft, decode_batch=batch, decode_step_seconds=step,
                       decode_tokens_per_s=rate, rows=rows, formulas=formulas)
