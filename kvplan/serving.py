"""Serving-side memory questions beyond "how big is one cache": allocation, sharing, offloading,
quantization, static pre-allocation and latency lower bounds.

Pure numpy/pandas; every function states its formula and where it comes from. Sources (quotes in
``../shared/reference/engines.md`` and ``catalog.md``):

* Kwon et al., "Efficient Memory Management for Large Language Model Serving with
  PagedAttention" (vLLM paper, SOSP 2023, arXiv:2309.06180) §1/§3/§6 — contiguous reservation vs
  paged blocks, 20.4–38.2 % of KV memory holding token states in the systems it compared.
* vLLM v1 prefix caching (``kv_cache_utils.py``/``kv_cache_manager.py``): whole blocks only,
  ``max_cache_hit_length = request.num_tokens - 1``; SGLang radix cache: token granular at
  ``page_size=1`` (engines.md A.8, C.7).
* transformers ``cache_utils.py``: offloaded caches (B.4), ``QuantizedCache`` (B.3),
  ``StaticCache`` (B.1/B.7).
* MLPerf Inference ``loadgen/mlperf.conf`` TTFT/TPOT constraints (catalog.md 3c).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from kvplan.arch import ModelArch
from kvplan.capacity import weights_read_bytes
from kvplan.dtypes import KVDType, get_dtype
from kvplan.engines import (
    HF_DYNAMIC,
    HF_STATIC,
    REGISTRY,
    VLLM_DEFAULT_BLOCK_SIZE,
    Engine,
    EngineSettings,
    QuantizedCacheModel,
)
from kvplan.errors import KVPlanError, is_plain_int
from kvplan.presets import GPU
from kvplan.sizing import INT64_MAX, token_bytes_of

MAX_CSV_ROWS = 100_000
MAX_CSV_BYTES = 8_000_000
MAX_SAMPLE = 1_000_000
MAX_LENGTH = 100_000_000
#: The instants ``in_flight_snapshot`` can look at (the serving view's choices).
Snapshot = Literal["final", "in_flight"]
SNAPSHOTS: tuple[Snapshot, ...] = ("in_flight", "final")

# --------------------------------------------------------------------------------------------
# 1. Workloads and allocation strategies
# --------------------------------------------------------------------------------------------


class LengthDist(BaseModel):
    """A distribution of token counts.

    ``fixed``: always ``value``; ``uniform``: integers in ``[low, high]``; ``lognormal``:
    ``exp(N(mu, sigma²))`` with ``mu = ln(mean) − sigma²/2`` so that ``mean`` is the arithmetic
    mean of the lengths (before clipping to ``[1, max_len]``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    value: int = Field(default=256, ge=1, le=MAX_LENGTH)
    low: int = Field(default=1, ge=1, le=MAX_LENGTH)
    high: int = Field(default=512, ge=1, le=MAX_LENGTH)
    mean: float = Field(default=256.0, gt=0, le=MAX_LENGTH)
    sigma: float = Field(default=1.0, ge=0, le=5)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` int64 lengths ≥ 1 drawn with ``rng`` (deterministic for a seeded Generator)."""
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            low, high = min(self.low, self.high), max(self.low, self.high)
            return rng.integers(low, high, size=n, endpoint=True, dtype=np.int64)
        mu = math.log(self.mean) - self.sigma ** 2 / 2
        return np.maximum(1, np.rint(rng.lognormal(mu, self.sigma, size=n))).astype(np.int64)


class Workload(BaseModel):
    """Request lengths: ``prompt[i]`` prompt tokens then ``output[i]`` generated tokens."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    prompt: np.ndarray
    output: np.ndarray
    source: str = ""

    @property
    def final(self) -> np.ndarray:
        return self.prompt + self.output

    @property
    def size(self) -> int:
        return int(self.prompt.size)


def sample_workload(n: int, prompt: LengthDist, output: LengthDist, seed: int = 0,
                    max_len: int | None = None) -> Workload:
    """Draw ``n`` requests with a seeded ``numpy.random.default_rng(seed)``.

    With ``max_len`` the prompt is clipped to ``max_len − 1`` and the output to
    ``max_len − prompt`` (the engine stops a request at its maximum length).
    """
    if not 1 <= n <= MAX_SAMPLE:
        raise KVPlanError("value.range", field="requests", low=1, high=MAX_SAMPLE, value=n)
    rng = np.random.default_rng(seed)
    p = prompt.sample(n, rng)
    o = output.sample(n, rng)
    if max_len is not None:
        p = np.minimum(p, max_len - 1)
        o = np.minimum(o, max_len - p)
    return Workload(prompt=p, output=o, source=f"sampled (seed {seed}): prompt {prompt.kind}, "
                                                 f"output {output.kind}")


def with_image_tokens(workload: Workload, image_tokens: int, images: int = 0,
                      max_len: int | None = None, videos: int = 0) -> Workload:
    """``workload`` whose every prompt also brings ``image_tokens`` (the prompt tokens of its
    ``images``, by the checkpoint's processor: ``kvplan.multimodal.image_prompt_tokens``), beside
    its text; the text lengths are the workload's own. ``videos``: the request's videos, whose
    prompt tokens ``image_tokens`` also holds (``kvplan.multimodal.video_prompt_tokens``; the
    source then says image and video tokens).

    Each request's context is its text plus its image tokens (they take KV like text: the
    processor expands each image's placeholder to its tokens before the engine schedules them).
    With ``max_len`` the text is clipped to ``max_len − 1 − image_tokens`` (at least 1 token of
    text) and the output to ``max_len − prompt``, as ``sample_workload`` clips a text-only one; images
    that leave no token of text and one of output within ``max_len`` are refused by name (an engine
    refuses a prompt above its maximum length; it does not cut an image)."""
    if image_tokens < 0:
        raise KVPlanError("mm.images", count=images, key="images",
                          detail=f"{image_tokens:,} image tokens per request is below 0")
    if not image_tokens:
        return workload
    text, output = workload.prompt, workload.output
    if max_len is not None:
        if image_tokens + 2 > max_len:
            raise KVPlanError("mm.images", count=images, key="images",
                              detail=f"their {image_tokens:,} tokens leave no room for a text token "
                                     f"and an output token within the maximum length {max_len:,}")
        text = np.minimum(text, max_len - 1 - image_tokens)
        output = np.minimum(output, max_len - text - image_tokens)
    if videos:
        label = f"image and video tokens ({images} image(s), {videos} video(s))"
    else:
        label = "image tokens" + (f" ({images} image(s))" if images else "")
    return Workload(prompt=text + image_tokens, output=output,
                    source=f"{workload.source}; each prompt + {image_tokens:,} {label}")


def parse_lengths_csv(data: bytes | str, max_rows: int = MAX_CSV_ROWS) -> Workload:
    """Parse a CSV of ``prompt,output`` token counts (one request per row; optional header).

    Raises ``KVPlanError("csv.invalid")`` naming the first bad row: non-UTF-8, too large,
    wrong column count, non-integer or out-of-range values, no rows, more than ``max_rows`` rows.
    """
    if isinstance(data, bytes):
        if len(data) > MAX_CSV_BYTES:
            raise KVPlanError("csv.invalid", detail=f"file is {len(data):,} bytes; the limit is "
                                                    f"{MAX_CSV_BYTES:,}")
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise KVPlanError("csv.invalid", detail="not UTF-8 text") from None
    prompts: list[int] = []
    outputs: list[int] = []
    try:
        rows = list(csv.reader(io.StringIO(data, newline="")))
    except csv.Error as exc:
        raise KVPlanError("csv.invalid", detail=f"not a CSV table ({exc})"[:120]) from None
    for line_no, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        if len(cells) < 2 or any(cells[2:]):
            raise KVPlanError("csv.invalid", detail=f"row {line_no}: expected 2 columns "
                                                    f"(prompt, output), got {len(cells)}")
        if line_no == 1 and not is_plain_int(cells[0]) and not is_plain_int(cells[1]):
            continue  # header
        values = []
        for cell in cells[:2]:
            if not is_plain_int(cell, 12):
                raise KVPlanError("csv.invalid", detail=f"row {line_no}: {cell[:20]!r} is not a "
                                                        "whole number ≥ 0")
            values.append(int(cell))
        if values[0] + values[1] < 1 or max(values) > MAX_LENGTH:
            raise KVPlanError("csv.invalid", detail=f"row {line_no}: lengths must be 0…"
                                                    f"{MAX_LENGTH:,} with at least one token")
        prompts.append(values[0])
        outputs.append(values[1])
        if len(prompts) > max_rows:
            raise KVPlanError("csv.invalid", detail=f"more than {max_rows:,} rows")
    if not prompts:
        raise KVPlanError("csv.invalid", detail="no data rows")
    return Workload(prompt=np.asarray(prompts, dtype=np.int64),
                    output=np.asarray(outputs, dtype=np.int64), source="uploaded CSV")


def in_flight_snapshot(workload: Workload, snapshot: Snapshot = "in_flight",
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Current and final token counts of the requests resident at one instant.

    ``final``: every request has generated all its output (current = final). ``in_flight``:
    a steady-state continuous-batching snapshot — a request is resident in proportion to its
    decode time (its output length), at a uniformly random point of its generation:
    ``current = prompt + ceil(u · output)``, ``u ~ U(0, 1]``.
    """
    final = workload.final
    if snapshot == "final":
        return final.copy(), final
    rng = np.random.default_rng(seed)
    weights = np.maximum(workload.output, 1).astype(float)
    index = rng.choice(workload.size, size=workload.size, p=weights / weights.sum())
    u = 1.0 - rng.random(workload.size)  # (0, 1]
    current = workload.prompt[index] + np.ceil(u * workload.output[index]).astype(np.int64)
    return np.maximum(current, 1), final[index]


def allocation_table(current: np.ndarray, final: np.ndarray, max_len: int, block_size: int = 16,
                     bytes_per_token: int = 1, budget_bytes: int | None = None) -> pd.DataFrame:
    """Memory used vs reserved by three allocation strategies for the same resident requests.

    Per request with ``c`` tokens now and ``f`` at the end (vLLM paper §3, Fig. 2/3):

    * contiguous — reserves ``max_len`` slots up front: reservation waste ``f − c`` (slots for
      tokens still to come), internal waste ``max_len − f`` (never used);
    * paged — ``ceil(c / bs)`` blocks: internal waste ``ceil(c / bs)·bs − c`` (< one block);
    * token — exactly ``c`` slots.

    ``utilization = Σc / Σreserved``; ``concurrent = floor(budget / mean reserved bytes per
    request)`` (a steady-state mix like this sample). External fragmentation is not modelled.
    """
    c = np.asarray(current, dtype=np.int64)
    f = np.maximum(np.asarray(final, dtype=np.int64), c)
    n = c.size
    if n == 0:
        raise KVPlanError("value.range", field="requests", low=1, high=MAX_SAMPLE, value=0)
    used = int(c.sum())
    paged_slots = -(-c // block_size) * block_size
    rows = [
        ("contiguous (max length)", n * max_len, int((f - c).sum()), int((max_len - f).sum())),
        (f"paged (block {block_size})", int(paged_slots.sum()), 0, int((paged_slots - c).sum())),
        ("token-granular", used, 0, 0),
    ]
    out = []
    for name, reserved, reservation, internal in rows:
        per_request = reserved / n * bytes_per_token
        out.append({
            "strategy": name, "requests": n, "used_tokens": used, "reserved_slots": reserved,
            "reservation_waste_slots": reservation, "internal_waste_slots": internal,
            "wasted_slots": reserved - used,
            "utilization_pct": 100.0 * used / reserved if reserved else 0.0,
            "used_bytes": used * bytes_per_token, "reserved_bytes": reserved * bytes_per_token,
            "concurrent_requests": (int(budget_bytes // per_request)
                                    if budget_bytes is not None and per_request else None),
        })
    return pd.DataFrame(out)


class AllocationResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    table: pd.DataFrame
    current: np.ndarray
    final: np.ndarray
    bytes_per_token: int
    assumptions: list[str]


def allocation_for_model(arch: ModelArch, workload: Workload, max_len: int, kv_dtype: str = "bf16",
                         block_size: int = VLLM_DEFAULT_BLOCK_SIZE, budget_bytes: int | None = None,
                         snapshot: Snapshot = "in_flight",
                         seed: int = 0) -> AllocationResult:
    """``allocation_table`` for a model: bytes per token while every layer grows (full layers)."""
    bpt = token_bytes_of(HF_DYNAMIC, arch, kv_dtype)
    current, final = in_flight_snapshot(workload, snapshot, seed)
    current = np.minimum(current, max_len)
    final = np.minimum(final, max_len)
    table = allocation_table(current, final, max_len, block_size, bpt, budget_bytes)
    assumptions = [
        f"{workload.size:,} requests ({workload.source}); maximum length {max_len:,} tokens",
        f"{bpt:,} B of KV per token ({arch.name}, {kv_dtype}, every layer growing; sliding "
        "windows not applied)",
        "snapshot: every request finished generating" if snapshot == "final" else
        "snapshot: steady-state continuous batching — requests resident in proportion to their "
        "output length, at a uniformly random point of their generation",
        "external fragmentation (allocator holes between contiguous reservations) not modelled, so "
        "contiguous utilization is an upper bound",
    ]
    return AllocationResult(table=table, current=current, final=final, bytes_per_token=bpt,
                            assumptions=assumptions)


#: ShareGPT lengths used in the vLLM paper (§6.1, Fig. 11a): mean input 161.31, output 337.99.
SHAREGPT_PROMPT_MEAN = 161.31
SHAREGPT_OUTPUT_MEAN = 337.99


def vllm_paper_workload(arch: ModelArch, n: int = 2000, seed: int = 0, sigma: float = 1.0,
                        budget_bytes: int | None = 12 * 10**9) -> AllocationResult:
    """A workload like the vLLM paper's (§6.2 / Fig. 2): OPT-13B, max length 2048, ShareGPT-like.

    Prompt and output lengths log-normal with the ShareGPT means of Fig. 11a (161.31 and
    337.99 tokens) and ``sigma`` (an assumption: the paper gives histograms, not parameters),
    clipped to 2048 tokens; the default budget is ≈ 30 % of a 40 GB A100 (paper §1).
    """
    workload = sample_workload(
        n, LengthDist(kind="lognormal", mean=SHAREGPT_PROMPT_MEAN, sigma=sigma),
        LengthDist(kind="lognormal", mean=SHAREGPT_OUTPUT_MEAN, sigma=sigma), seed=seed,
        max_len=2048)
    result = allocation_for_model(arch, workload, 2048, "fp16", 16, budget_bytes, "in_flight", seed)
    result.assumptions.extend([
        f"ShareGPT-like log-normal lengths: means {SHAREGPT_PROMPT_MEAN} / {SHAREGPT_OUTPUT_MEAN} "
        f"tokens (vLLM paper Fig. 11a), sigma {sigma} (assumed)",
        "paper (§1, Fig. 2): 20.4–38.2 % of KV memory holds token states in contiguous systems; "
        "vLLM wastes under 4 %",
    ])
    return result


# --------------------------------------------------------------------------------------------
# 2. Prefix caching
# --------------------------------------------------------------------------------------------


def shared_prefix_tokens(prefix_tokens: int, prompt_tokens: int, engine: Engine,
                         block_size: int | None = None) -> int:
    """Tokens of a common prefix whose KV is physically shared.

    vLLM: full blocks only and the last prompt token is always recomputed (``max_cache_hit_length
    = num_tokens − 1``): ``floor(min(P, prompt − 1) / bs) · bs``. SGLang radix cache: the same
    ``prompt − 1`` cap, at page granularity (``page_size`` 1 → token granular). HF: no sharing.
    The unit is the engine's (``Engine.shared_prefix_unit``).
    """
    unit = engine.shared_prefix_unit(block_size)
    if unit is None:
        return 0
    usable = max(min(prefix_tokens, prompt_tokens - 1), 0)
    return usable // unit * unit


class PrefixResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: str
    unit: int
    shared_tokens: int
    shared_blocks: int
    bytes_per_token: int
    without_sharing_bytes: int
    with_sharing_bytes: int
    saved_bytes: int
    curve: pd.DataFrame
    assumptions: list[str]


def prefix_caching(arch: ModelArch, n_requests: int, prefix_tokens: int, prompt_tokens: int,
                   output_tokens: int, engine: Engine, kv_dtype: str = "bf16",
                   block_size: int | None = None, points: int | None = None) -> PrefixResult:
    """Memory of ``N`` concurrent requests sharing a ``P``-token prefix, with and without sharing.

    Slots per request at the engine's unit ``u`` (vLLM block, SGLang page): ``ceil(T / u) · u`` with
    ``T = prompt + output``. With sharing: ``S + N · (ceil(T / u)·u − S)`` where ``S`` is
    ``shared_prefix_tokens``. The curve gives both for ``N = 1 … n_requests``; with ``points`` it
    holds at most that many evenly spaced ``N`` (always 1 and ``n_requests``; both columns are
    linear in ``N``, so nothing between the samples is lost). Bytes beyond int64 stay exact.
    """
    sharing_unit = engine.shared_prefix_unit(block_size)
    if prefix_tokens > prompt_tokens:
        raise KVPlanError("value.range", field="prefix tokens", low=0, high=prompt_tokens,
                          value=prefix_tokens)
    unit = sharing_unit or 1
    bpt = token_bytes_of(engine if sharing_unit else HF_DYNAMIC, arch, kv_dtype)
    total = prompt_tokens + output_tokens
    slots = -(-total // unit) * unit
    shared = shared_prefix_tokens(prefix_tokens, prompt_tokens, engine, unit)
    top = max(n_requests, 1)
    if points is not None and top > max(points, 2):
        n = np.unique(np.round(np.linspace(1, top, max(points, 2))).astype(np.int64))
    else:
        n = np.arange(1, top + 1, dtype=np.int64)
    if top * slots * bpt > INT64_MAX:  # huge models × long requests: exact Python ints, not wrapped int64
        n = n.astype(object)
    without = n * (slots * bpt)
    with_ = shared * bpt + n * ((slots - shared) * bpt)
    curve = pd.DataFrame({"requests": n, "without_sharing_bytes": without,
                          "with_sharing_bytes": with_})
    assumptions = [
        f"{engine.id}: sharing unit {unit} token(s); the last prompt token is always recomputed",
        f"{bpt:,} B per token ({kv_dtype}, all layers growing; windowed layers not capped)",
        "every request's prompt starts with the same prefix; outputs are not shared",
    ]
    if sharing_unit is None:
        assumptions.append("transformers has no cross-request prefix cache: nothing is shared")
    return PrefixResult(engine=engine.id, unit=unit, shared_tokens=shared, shared_blocks=shared // unit,
                        bytes_per_token=bpt, without_sharing_bytes=int(without[-1]),
                        with_sharing_bytes=int(with_[-1]),
                        saved_bytes=int(without[-1] - with_[-1]), curve=curve,
                        assumptions=assumptions)


# --------------------------------------------------------------------------------------------
# 3. Offloading
# --------------------------------------------------------------------------------------------


class OffloadResult(BaseModel):
    tokens: int
    batch: int
    offloaded_layers: int
    gpu_kv_bytes: int
    cpu_kv_bytes: int
    full_kv_bytes: int
    transfer_bytes_per_step: int
    transfer_s_per_token: float
    link_gbps: float
    cpu_ram_bytes: int | None
    fits_cpu: bool | None
    formula: str
    assumptions: list[str]


def offloading(arch: ModelArch, gpu: GPU, tokens: int, batch: int = 1, kv_dtype: str = "bf16",
               cpu_ram_bytes: int | None = None, link_gbps: float | None = None,
               offload_sliding: bool = True) -> OffloadResult:
    """transformers offloaded cache (``Cache(offloading=True)``, engines.md B.4).

    Each offloaded layer goes back to CPU after its update and the next is prefetched, so the GPU
    holds ≈ 2 offloaded layers (current + prefetched) plus every layer that is not offloaded
    (recurrent states; sliding layers when ``offload_sliding`` is False — ``DynamicCache``
    offloads them, ``StaticCache`` does not). Per decoded token every offloaded layer's KV crosses
    the host link once: ``t ≥ Σ offloaded bytes / link bandwidth``.
    """
    link = link_gbps if link_gbps is not None else (gpu.host_link_gbps or 0.0)
    if link <= 0:
        raise KVPlanError("value.range", field="host link GB/s", low=1, high=10_000, value=link)
    view = HF_DYNAMIC.view(arch, kv_dtype)
    t = np.asarray([tokens], dtype=np.int64)
    # one entry per distinct layer: its caches' bytes (a DSA layer's latent and indexer keys are
    # one transformers layer) and whether it moves (the layer's first cache decides)
    layers: dict[object, tuple[int, int, bool]] = {}
    for rule in view.rules:
        layer_bytes = int(rule.held_bytes(t)[0]) // rule.layers * batch
        movable = not rule.kind.holds_state and (offload_sliding or not rule.kind.windowed)
        key = rule.spec if rule.spec is not None else id(rule)
        size, n, moves = layers.get(key, (0, rule.layers, movable))
        layers[key] = (size + layer_bytes, n, moves)
    per_layer: list[int] = []
    kept = 0
    for layer_bytes, n, movable in layers.values():
        if movable:
            per_layer.extend([layer_bytes] * n)
        else:
            kept += layer_bytes * n
    offloaded = sum(per_layer)
    resident = sum(sorted(per_layer, reverse=True)[:2])
    seconds = offloaded / (link * 1e9)
    return OffloadResult(
        tokens=tokens, batch=batch, offloaded_layers=len(per_layer), gpu_kv_bytes=kept + resident,
        cpu_kv_bytes=offloaded, full_kv_bytes=kept + offloaded, transfer_bytes_per_step=offloaded,
        transfer_s_per_token=seconds, link_gbps=link, cpu_ram_bytes=cpu_ram_bytes,
        fits_cpu=None if cpu_ram_bytes is None else offloaded <= cpu_ram_bytes,
        formula=(f"GPU = kept {kept:,} + 2 largest offloaded layers {resident:,} B; "
                 f"transfer per token ≥ {offloaded:,} B / {link:g} GB/s = {seconds * 1e3:.3f} ms"),
        assumptions=[
            f"host link {link:g} GB/s per direction (GPU preset host_link_gbps unless overridden)",
            "prefetch overlaps compute at best: the transfer time is a lower bound added per "
            "token when the link, not compute, limits",
            "the updated layer also goes device→host each step (the other link direction)",
            "transient full-precision concatenation during update not counted",
        ])


# --------------------------------------------------------------------------------------------
# 4. Quantized cache
# --------------------------------------------------------------------------------------------


def quantized_dtype(nbits: int, q_group_size: int = 64) -> KVDType:
    """quanto/hqq element format: ``nbits`` per element + fp16 scale and zero-point per group."""
    if nbits not in (2, 4):
        raise KVPlanError("value.range", field="nbits", low=2, high=4, value=nbits)
    return KVDType(f"int{nbits}", nbits, group_size=q_group_size, scale_bits=16, zero_bits=16,
                   label=f"INT{nbits} g{q_group_size}")


class QuantizedResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    curve: pd.DataFrame
    full_bytes_per_token: int
    quant_bytes_per_token: int
    worth_it_from_tokens: int | None
    formula: str
    assumptions: list[str]


def quantized_cache(arch: ModelArch, tokens: np.ndarray, nbits: int = 4, q_group_size: int = 64,
                    residual_length: int = 128, batch: int = 1) -> QuantizedResult:
    """transformers ``QuantizedCache`` (engines.md B.3) against the unquantized DynamicCache.

    The prefill is quantized; later tokens sit in a full-precision residual that is re-quantized
    when it reaches ``residual_length`` (so it holds 0…R−1 tokens). Worst case over a context of
    ``T``: ``q·(T − r) + f·r`` with ``r = min(T, R − 1)``; each update also materialises a
    full-precision copy of one layer's whole history (``f_layer · T``). "Worth it" from the first
    ``T`` where worst case + that transient is below the unquantized cache.
    Refused for models with sliding/chunked layers (transformers raises the same).
    """
    qd = quantized_dtype(nbits, q_group_size)
    fd = get_dtype(arch.model_dtype)
    t = np.asarray(tokens, dtype=np.int64)
    model = QuantizedCacheModel.of(arch, qd, residual_length)
    f_tok, q_tok, f_layer = model.full_token_bytes, model.quant_token_bytes, model.layer_token_bytes
    states = model.state_bytes
    unquant = (t * f_tok + states) * batch
    best = model.held_bytes(t, np.zeros_like(t)) * batch
    worst = model.held_bytes(t, model.worst_residual(t)) * batch
    transient = model.transient_bytes(t) * batch
    curve = pd.DataFrame({"tokens": t, "unquantized_bytes": unquant, "quantized_best_bytes": best,
                          "quantized_worst_bytes": worst, "transient_bytes": transient,
                          "quantized_peak_bytes": worst + transient})
    grid = np.arange(1, 1 << 16, dtype=np.int64)
    ok = model.held_bytes(grid, model.worst_residual(grid)) - states + model.transient_bytes(grid) \
        < grid * f_tok
    worth = int(grid[np.argmax(ok)]) if ok.any() else None
    return QuantizedResult(
        curve=curve, full_bytes_per_token=f_tok, quant_bytes_per_token=q_tok,
        worth_it_from_tokens=worth,
        formula=(f"quantized ≤ q·(T−r) + f·r with q = {q_tok:,} B/token, f = {f_tok:,} B/token, "
                 f"r = min(T, {residual_length - 1}); + transient f_layer·T = {f_layer:,}·T"),
        assumptions=[
            f"nbits {nbits}, q_group_size {q_group_size}, fp16 scale + zero-point per group "
            "(quanto/hqq layout approximated)",
            f"residual_length {residual_length}: up to {residual_length - 1} tokens in "
            f"{fd.name} (worst case plotted; best case right after a re-quantization)",
            "below the residual length nothing is quantized: no saving",
        ])


# --------------------------------------------------------------------------------------------
# 5. Static cache
# --------------------------------------------------------------------------------------------


class StaticResult(BaseModel):
    requests: int
    max_cache_len: int
    allocated_bytes: int
    used_bytes: int
    waste_bytes: int
    utilization_pct: float
    overflow_requests: int
    assumptions: list[str]


def static_cache(arch: ModelArch, lengths: np.ndarray, max_cache_len: int,
                 kv_dtype: str = "bf16") -> StaticResult:
    """transformers ``StaticCache``: every request pre-allocates ``max_cache_len`` slots per layer
    (sliding layers ``min(W, max_cache_len)``; engines.md B.1/B.7) whatever its length.

    Used = what a DynamicCache of each request's final length holds; waste = allocated − used.
    Requests longer than ``max_cache_len`` cannot run (counted as overflow, used capped).
    """
    t = np.asarray(lengths, dtype=np.int64)
    settings = EngineSettings(max_cache_len=max_cache_len)
    static = HF_STATIC.view(arch, kv_dtype, settings)
    dynamic = HF_DYNAMIC.view(arch, kv_dtype)
    capped = np.minimum(t, max_cache_len)
    allocated = int(static.held_bytes(capped).sum())
    used = int(dynamic.held_bytes(capped).sum())
    return StaticResult(
        requests=int(t.size), max_cache_len=max_cache_len, allocated_bytes=allocated,
        used_bytes=used, waste_bytes=allocated - used,
        utilization_pct=100.0 * used / allocated if allocated else 0.0,
        overflow_requests=int((t > max_cache_len).sum()),
        assumptions=["used = DynamicCache of the final length (sliding layers W−1 tokens)",
                     "generate() sets max_cache_len = generation max_length − 1"])


# --------------------------------------------------------------------------------------------
# 6. Roofline bounds
# --------------------------------------------------------------------------------------------

#: MLPerf Inference Server-scenario constraints in ms (mlcommons/inference loadgen/mlperf.conf).
MLPERF_BOUNDS: dict[str, tuple[float, float]] = {
    "llama2-70b interactive": (450.0, 40.0),
    "llama2-70b standard": (2000.0, 200.0),
}


def roofline(arch: ModelArch, gpu: GPU, context_tokens: int, prompt_tokens: int,
             batches: np.ndarray, kv_dtype: str = "bf16", weight_dtype: str | None = None,
             tp: int = 1) -> tuple[pd.DataFrame, list[str]]:
    """Memory-bound decode and compute-bound prefill lower bounds per batch size.

    ``TPOT ≥ (weights/tp + B · KV(T)/tp) / HBM bandwidth``; ``tokens/s = B / TPOT``;
    ``TTFT ≥ prefill FLOPs / (tp · peak bf16 TFLOPS)`` with prefill FLOPs from
    ``kvplan.nocache.prefill_flops`` (2 × active params × P + attention). Each batch size is marked
    against the MLPerf Llama-2-70B interactive (450/40 ms) and standard (2000/200 ms) constraints.
    """
    from kvplan.flops import prefill_flops

    b = np.asarray(batches, dtype=np.int64)
    bw = gpu.bandwidth_tbps * 1e12
    w = weights_read_bytes(arch, weight_dtype) / tp
    kv = int(HF_DYNAMIC.view(arch, kv_dtype).held_bytes(np.asarray([context_tokens]))[0]) / tp
    tpot = (w + b * kv) / bw
    ttft = prefill_flops(arch, prompt_tokens) / (gpu.bf16_tflops * 1e12 * tp)
    frame = pd.DataFrame({"batch": b, "tpot_ms": tpot * 1e3, "tokens_per_s": b / tpot,
                          "ttft_ms": np.full(b.shape, ttft * 1e3),
                          "weights_bytes_per_gpu": w, "kv_bytes_per_gpu": b * kv})
    for name, (ttft_ms, tpot_ms) in MLPERF_BOUNDS.items():
        frame[f"meets {name}"] = (frame["tpot_ms"] <= tpot_ms) & (frame["ttft_ms"] <= ttft_ms)
    notes = [
        "lower bounds: perfect overlap, peak bandwidth and FLOPS; real engines are slower",
        f"decode reads weights ({w:,.0f} B/GPU{', active experts only' if arch.moe else ''}) and "
        f"the KV of every sequence at {context_tokens:,} tokens once per step",
        f"prefill of one {prompt_tokens:,}-token prompt at {gpu.bf16_tflops:g} bf16 TFLOPS × {tp}",
        "MLPerf constraints are 99th-percentile Server-scenario limits for Llama-2-70B "
        "(loadgen/mlperf.conf); other models are compared against the same numbers",
    ]
    return frame, notes


# --------------------------------------------------------------------------------------------
# 7. Window explanations
# --------------------------------------------------------------------------------------------


def window_explanations(arch: ModelArch, engines: tuple[Engine, ...] = tuple(REGISTRY.values()),
                        max_cache_len: int = 32768) -> list[dict[str, object]]:
    """Per engine and layer kind: where the cache stops growing (from ``kvplan.engines`` rules)."""
    rows: list[dict[str, object]] = []
    for engine in engines:
        try:
            view = engine.view(arch, "bf16", EngineSettings(max_cache_len=max_cache_len))
        except KVPlanError as exc:
            rows.append({"engine": engine.id, "kind": "", "layers": 0, "window": None,
                         "behaviour": str(exc)})
            continue
        for rule in view.rules:
            rows.append({"engine": engine.id, "kind": rule.kind, "layers": rule.layers,
                         "window": rule.window, "behaviour": rule.describe()})
        rows.extend({"engine": engine.id, "kind": "note", "layers": 0, "window": None,
                     "behaviour": note} for note in view.notes)
    return rows
