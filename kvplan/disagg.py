"""Disaggregated prefill/decode: prefill and decode instances sized separately (each its own Plan:
accelerator, TP, engine release), the decode pool's bound on KV transfers in flight, the connector's
staging buffers per rank, the KV bytes moved per request and the transfer time over the stated link.

The bound: vLLM's NIXL decode side allocates every prompt block before the pull runs
(``nixl/pull_scheduler.py`` ``get_num_new_matched_tokens``, ``update_state_after_alloc``), so a
request in ``WAITING_FOR_REMOTE_KVS`` holds its whole prompt in the pool the running batch uses. The
analysis in ai-dynamo/aiconfigurator PR#1380 writes the headroom as ``floor(pool tokens / seq_len) −
max_num_seqs``; kvplan gives that and the block-exact form: with ``running = min(max_num_seqs,
capacity // blocks(prompt + output))`` requests at full length, ``(capacity − running ×
blocks(prompt + output)) // blocks(prompt)`` prompts can wait (vLLM ``KVCacheManager`` whole blocks,
one null block). Times are lower bounds: bytes over the link at its stated rate.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvplan.engines.vllm.transfer import check_engine, staging_bytes
from kvplan.errors import KVPlanError
from kvplan.plan import Plan


class DisaggQuery(BaseModel):
    """The split asked about: ``prefill_instances`` × P and ``decode_instances`` × D (xPyD), the
    prompt and output lengths, the connector (``nixl``, ``mooncake``) and its ``kv_buffer_device``,
    and the link between a prefill rank and a decode rank (GB/s per direction; default: the decode
    accelerator's ``interconnect_gbps`` — within a node; across nodes give the NIC's rate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_tokens: int = Field(ge=1, le=100_000_000)
    output_tokens: int = Field(default=1, ge=0, le=100_000_000)
    prefill_instances: int = Field(default=1, ge=1, le=4096)
    decode_instances: int = Field(default=1, ge=1, le=4096)
    connector: str = "nixl"
    kv_buffer_device: str = "cuda"
    link_gbps: float | None = Field(default=None, gt=0, le=100_000)


class DisaggAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    prefill: dict[str, object]
    decode: dict[str, object]
    prompt_tokens: int
    output_tokens: int
    prefill_instances: int
    decode_instances: int
    decode_capacity_blocks: int
    decode_block_size: int
    prompt_blocks: int
    request_blocks: int
    max_num_seqs: int
    running_at_full_length: int
    in_flight_bound: int
    in_flight_bound_pr1380: int
    in_flight_total: int
    prefill_prompts_held: int
    kv_bytes_per_request_per_rank: int
    kv_bytes_per_request: int
    transfer_seconds: float | None
    link_gbps: float | None
    staging_gpu_bytes_per_rank: int
    staging_host_bytes_per_rank: int
    formulas: list[str]
    sources: list[str]

    def as_json(self) -> dict[str, object]:
        return self.model_dump(mode="json")


def _side(plan: Plan) -> dict[str, object]:
    return {"engine": plan.engine.id, "release": plan.engine.release, "gpu": plan.device.id,
            "tp": plan.query.tp, "pp": plan.query.pp, "kv_dtype": plan.kv_dtype}


def _blocks(plan: Plan, tokens: int) -> int:
    return int(plan.pool.blocks(np.asarray([tokens]))[0])


def disagg(prefill: Plan, decode: Plan, query: DisaggQuery) -> DisaggAnswer:
    """The xPyD split of ``query`` with ``prefill`` and ``decode`` as their own plans (a named error
    for a decode pool that cannot hold one prompt, or an engine whose connectors are not modelled)."""
    check_engine("prefill", prefill.engine.engine_id)
    check_engine("decode", decode.engine.engine_id)
    pool = decode.pool
    capacity = int(getattr(pool, "capacity", 0))
    block = int(pool.block_size or 1)
    prompt, output = query.prompt_tokens, query.output_tokens
    need = _blocks(decode, prompt)
    if capacity < need:
        raise KVPlanError("disagg.prompt", blocks=capacity, prompt=prompt, need=need)
    full = _blocks(decode, prompt + output)
    seqs = int(decode.startup.max_num_seqs or decode.settings.max_num_seqs or 1)
    running = min(seqs, capacity // max(full, 1))
    waiting = (capacity - running * full) // need
    pool_tokens = capacity * block
    pr1380 = pool_tokens // (prompt + output) - seqs
    per_block = int(getattr(pool, "bytes_per_block", 0))
    rank_bytes = need * per_block
    ranks = decode.query.tp * decode.query.pp
    link = query.link_gbps if query.link_gbps is not None else decode.device.interconnect_gbps
    seconds = rank_bytes / (link * 1e9) if link else None
    kv_pool_bytes = int(getattr(pool, "num_blocks", 0)) * per_block
    gpu_stage, host_stage, stage_formula = staging_bytes(query.connector, query.kv_buffer_device,
                                                         kv_pool_bytes)
    held = int(prefill.pool.max_requests(np.asarray([prompt]))[0])
    dp = decode.settings.dp  # each data-parallel rank runs its own scheduler, pool and max_num_seqs
    formulas = [
        f"decode pool: {capacity:,} blocks of {block} tokens (num_blocks less the null block)",
        f"prompt: ceil({prompt:,} / {block}) = {need:,} blocks; at full length ({prompt + output:,} tokens) "
        f"{full:,} blocks",
        f"running = min(max_num_seqs {seqs:,}, {capacity:,} // {full:,}) = {running:,}",
        f"in flight ≤ ({capacity:,} − {running:,} × {full:,}) // {need:,} = {waiting:,} per decode "
        f"scheduler; × {dp} DP rank(s) × {query.decode_instances} instance(s) = "
        f"{waiting * dp * query.decode_instances:,}",
        f"PR#1380 form: floor({pool_tokens:,} / {prompt + output:,}) − {seqs:,} = {pr1380:,}",
        f"KV moved per request: {need:,} blocks × {per_block:,} B per block per rank = {rank_bytes:,} B per "
        f"rank × {ranks} rank(s) = {rank_bytes * ranks:,} B",
        stage_formula,
    ]
    if seconds is not None:
        formulas.append(f"transfer ≥ {rank_bytes:,} B / {link:g} GB/s = {seconds:.6f} s "
                        "(per rank, in parallel)")
    return DisaggAnswer(
        model=decode.arch.name, prefill=_side(prefill), decode=_side(decode), prompt_tokens=prompt,
        output_tokens=output, prefill_instances=query.prefill_instances,
        decode_instances=query.decode_instances, decode_capacity_blocks=capacity, decode_block_size=block,
        prompt_blocks=need, request_blocks=full, max_num_seqs=seqs, running_at_full_length=running,
        in_flight_bound=waiting, in_flight_bound_pr1380=pr1380,
        in_flight_total=waiting * query.decode_instances * dp, prefill_prompts_held=held,
        kv_bytes_per_request_per_rank=rank_bytes, kv_bytes_per_request=rank_bytes * ranks,
        transfer_seconds=seconds, link_gbps=link, staging_gpu_bytes_per_rank=gpu_stage,
        staging_host_bytes_per_rank=host_stage, formulas=formulas,
        sources=["vLLM 0.33 distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py "
                 "get_num_new_matched_tokens, update_state_after_alloc; base_worker.py host_xfer_buffers",
                 "ai-dynamo/aiconfigurator PR#1380 (staging headroom = floor(kv_pool_tokens / seq_len) − "
                 "max_num_seqs)", "vLLM 0.33 v1/core/kv_cache_manager.py (whole blocks, null block)"])


def pd_candidates(prefill: Plan, decode: Plan, query: DisaggQuery,
                  splits: list[tuple[int, int]]) -> list[DisaggAnswer]:
    """The answer for each ``(x, y)`` split — the hook the recommender can call to propose xPyD
    deployments beside aggregated ones (memory exact; the split's throughput is the caller's)."""
    return [disagg(prefill, decode, query.model_copy(update={"prefill_instances": x,
                                                             "decode_instances": y}))
            for x, y in splits]
