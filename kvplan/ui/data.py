"""Pure data builders behind every view: one DataFrame per chart (no Streamlit, easy to test)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from kvplan.capacity import FitResult, capacity_sweep, fit
from kvplan.errors import KVPlanError
from kvplan.plan import Plan
from kvplan.presets import gpus
from kvplan.sizing import exact_outer, pool_reserved, sweep, sweep_by_kind, token_grid

CONTEXT_GRID = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
USERS_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


AXIS_END = 10_000_000


def _axis_end(plan: Plan) -> int:
    """Where the context axis stops: the power of ten above 1.5 × the longer of the model's context
    limit and the chosen length (at most 10M) — one grid for every length up to there, so a new
    length re-sends an identical chart (the browser skips the redraw)."""
    longest = max(plan.context_limit or AXIS_END, plan.query.tokens)
    return int(min(10 ** math.ceil(math.log10(max(longest, 1) * 1.5)), AXIS_END))


def context_grid(tokens: int, log_x: bool, limit: int = AXIS_END, points: int = 161) -> np.ndarray:
    """Context lengths to plot: 1..``limit`` log-spaced (``_axis_end``) or 1..2× the chosen length
    (linear)."""
    if log_x:
        return token_grid(1, 1, limit, points)
    return token_grid(tokens, 1, min(max(2 * tokens, 1024), limit), points, log=False)


def kv_vs_context(plan: Plan, kv_dtypes: list[str],
                  log_x: bool) -> tuple[pd.DataFrame, list[str]]:
    """KV bytes (per GPU rank) of ``users`` requests over context length, one block per dtype:
    held (``kv_bytes``) and what the engine's pool reserves (``reserved_bytes``,
    ``sizing.pool_reserved``: the figure the budget is compared with)."""
    t = context_grid(plan.query.tokens, log_x, _axis_end(plan))
    frames, errors = [], []
    for dtype in kv_dtypes:
        try:
            frame = sweep(plan, t, [plan.query.users], [dtype])
            frame["reserved_bytes"] = pool_reserved(plan.vary(kv_dtype=dtype), t, plan.query.users)
        except KVPlanError as err:
            errors.append(f"{dtype}: {err}")
            continue
        frame["kv_dtype"] = dtype
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["engine", "kv_dtype", "tokens", "batch", "kv_bytes",
                                     "reserved_bytes"]), errors
    return pd.concat(frames, ignore_index=True), errors


def kv_by_kind(plan: Plan, log_x: bool) -> pd.DataFrame:
    """Held bytes per layer kind (long format: tokens, kind, kv_bytes) for the first dtype."""
    t = context_grid(plan.query.tokens, log_x, _axis_end(plan))
    wide = sweep_by_kind(plan, t)
    long = wide.melt(id_vars="tokens", var_name="kind", value_name="kv_bytes")
    long["kv_dtype"] = plan.query.kv_dtype
    return long


def fits_per_dtype(plan: Plan, kv_dtypes: list[str]) -> tuple[dict[str, FitResult], list[str]]:
    """The answer of every KV dtype (no layout search), and the refusals."""
    results, errors = {}, []
    for dtype in kv_dtypes:
        try:
            results[dtype] = fit(plan.vary(kv_dtype=dtype), search_gpus=False)
        except KVPlanError as err:
            errors.append(f"{dtype}: {err}")
    return results, errors


def kv_vs_users(results: dict[str, FitResult], users: int) -> pd.DataFrame:
    """KV bytes per GPU of ``u`` requests at the chosen length, u = 1..past the limit."""
    most = max([r.max_requests for r in results.values()] + [0])
    top = int(min(max(2 * users, int(most * 1.25) + 1, 8), 10_000_000))
    u = np.unique(np.round(np.linspace(1, top, min(top, 200))).astype(np.int64))
    u = np.unique(np.append(u, users))
    rows = []
    for dtype, result in results.items():
        kv = exact_outer(np.asarray([result.kv_bytes_per_request], dtype=np.int64), u)
        rows.append(pd.DataFrame({
            "kv_dtype": dtype, "users": u, "kv_bytes": kv,
            "kv_budget_bytes": result.kv_budget_bytes,
            "fits": (u <= result.max_requests) & result.weights_fit
                    & (result.context_limit is None or result.tokens <= result.context_limit)}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["kv_dtype", "users", "kv_bytes", "kv_budget_bytes", "fits"])


def memory_per_gpu(plan: Plan) -> pd.DataFrame:
    """Per accelerator (per GPU): weights (and each part of them), reserve, KV at the chosen
    load, held back, free."""
    query = plan.query
    rows: list[dict[str, Any]] = []
    for gpu in sorted(gpus().values(), key=lambda g: g.capacity_bytes):
        try:
            r = fit(plan.vary(gpu=gpu), search_gpus=False)
        except KVPlanError as err:
            rows.append({"gpu": gpu.id, "gpu_name": gpu.name, "error": str(err)})
            continue
        kv_load = r.kv_bytes_per_request * query.users
        used = r.weights_bytes + r.reserve_bytes + kv_load
        rows.append({
            "gpu": gpu.id, "gpu_name": gpu.name, "capacity_bytes": r.gpu_capacity_bytes,
            "memory_target_bytes": r.memory_target_bytes, "weights_bytes": r.weights_bytes,
            "reserve_bytes": r.reserve_bytes, "kv_at_load_bytes": kv_load,
            "held_back_bytes": r.gpu_capacity_bytes - r.memory_target_bytes,
            "free_bytes": r.memory_target_bytes - used, "kv_budget_bytes": r.kv_budget_bytes,
            "max_requests": r.max_requests, "fits": r.fits, "error": "",
            **{f"weights_{part}_bytes": size for part, size in r.weights_breakdown.items()}})
    return pd.DataFrame(rows)


def requests_grid(plan: Plan, kv_dtypes: list[str]) -> pd.DataFrame:
    """Requests that fit, accelerators × KV dtypes."""
    rows: list[dict[str, Any]] = []
    for gpu in sorted(gpus().values(), key=lambda g: g.capacity_bytes):
        for dtype in kv_dtypes:
            row: dict[str, Any] = {"gpu": gpu.id, "gpu_name": gpu.name, "kv_dtype": dtype}
            try:
                r = fit(plan.vary(gpu=gpu, kv_dtype=dtype), search_gpus=False)
                row.update(weights_bytes=r.weights_bytes, kv_budget_bytes=r.kv_budget_bytes,
                           kv_bytes_per_request=r.kv_bytes_per_request, max_requests=r.max_requests,
                           max_tokens_per_request=r.max_tokens_per_request, fits=r.fits, error="")
            except KVPlanError as err:
                row.update(max_requests=0, fits=False, error=str(err))
            rows.append(row)
    return pd.DataFrame(rows)


def context_users_grid(plan: Plan) -> pd.DataFrame:
    """For the chosen GPU and first dtype: does ``users`` × ``context`` fit, and the KV share used
    (one vectorised ``capacity_sweep`` over the grid)."""
    query = plan.query
    contexts = sorted(set(CONTEXT_GRID) | {query.tokens})
    users = sorted(set(USERS_GRID) | {query.users})
    frame = capacity_sweep(plan, [plan.device], [query.kv_dtype], contexts, users)
    # exact Python ints: 10M users × a 100M-token request overflows int64
    frame["kv_bytes"] = frame["users"].astype(object) * frame["kv_bytes_per_request"].astype(object)
    budget = frame["kv_budget_bytes"].astype(float)
    frame["kv_share"] = (frame["kv_bytes"].astype(float) / budget).where(budget > 0, float("inf"))
    return frame[["tokens", "users", "max_requests", "kv_bytes", "kv_budget_bytes", "kv_share",
                  "fits"]]
