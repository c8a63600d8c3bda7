"""Disaggregated prefill/decode, hand-derived from vLLM 0.33's NIXL connector and the analysis in
ai-dynamo/aiconfigurator PR#1380.

* distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py ``get_num_new_matched_tokens``
  ("pull all prompt blocks from remote"), ``update_state_after_alloc`` (blocks allocated first, out of
  the running batch's pool); base_worker.py ``host_xfer_buffers`` (``kv_buffer_device="cpu"``).
* PR#1380: ``staging headroom (seqs) = floor(kv_pool_tokens / seq_len) − max_num_seqs``.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from kvplan.disagg import DisaggQuery, disagg, pd_candidates
from kvplan.errors import KVPlanError
from kvplan.plan import FitQuery, Plan, make_plan
from kvplan.presets import get_gpu, load_model


def _side(model: str, gpu: str, tp: int, tokens: int, engine: str = "vllm", **settings: object) -> Plan:
    return make_plan(load_model(model), get_gpu(gpu),
                     FitQuery(tokens=tokens, tp=tp, num_gpus=tp, engine=engine, **settings))


def test_decode_pool_bounds_the_transfers_in_flight() -> None:
    """Llama-3.1-70B, prompt 8,150 + output 1,024 (the PR#1380 shape), decode on H200 TP 4 with
    max_num_seqs 64: a block per rank is 80 layers × 16 × 2 heads × 256 × 2 B = 1,310,720 B; the
    prompt takes ceil(8,150 / 16) = 510 blocks, a request at full length 574. The decode plan's pool
    has C blocks; 64 running requests at full length hold 64 × 574, so (C − 36,736) // 510 prompts can
    wait; PR#1380's form floor(16 C / 9,174) − 64."""
    prefill = _side("llama-3.1-70b", "h100-sxm", 8, 9174)
    decode = _side("llama-3.1-70b", "h200", 4, 9174, max_num_seqs=64)
    answer = disagg(prefill, decode, DisaggQuery(prompt_tokens=8150, output_tokens=1024, link_gbps=50))
    capacity = decode.pool.capacity
    assert answer.decode_capacity_blocks == capacity and answer.decode_block_size == 16
    assert answer.prompt_blocks == 510 and answer.request_blocks == 574 and answer.max_num_seqs == 64
    assert answer.running_at_full_length == 64
    assert answer.in_flight_bound == (capacity - 64 * 574) // 510
    assert answer.in_flight_bound_pr1380 == capacity * 16 // 9174 - 64
    # KV moved: 510 blocks × 1,310,720 B = 668,467,200 B per decode rank, × 4 ranks
    assert answer.kv_bytes_per_request_per_rank == 668_467_200
    assert answer.kv_bytes_per_request == 2_673_868_800
    assert answer.transfer_seconds == pytest.approx(668_467_200 / 50e9, rel=1e-12)
    assert answer.staging_gpu_bytes_per_rank == 0 and answer.staging_host_bytes_per_rank == 0


def test_a_full_decode_batch_leaves_no_room_to_wait() -> None:
    """With vLLM's default max_num_seqs (1,024 on an H200) the running batch at full length is
    bounded by the pool (C // 574), and the remainder under 510 blocks holds no waiting prompt:
    PR#1380's form goes negative."""
    prefill = _side("llama-3.1-70b", "h100-sxm", 8, 9174)
    decode = _side("llama-3.1-70b", "h200", 4, 9174)
    answer = disagg(prefill, decode, DisaggQuery(prompt_tokens=8150, output_tokens=1024))
    capacity = decode.pool.capacity
    assert answer.max_num_seqs == 1024 and answer.running_at_full_length == capacity // 574
    assert answer.in_flight_bound == (capacity - (capacity // 574) * 574) // 510
    assert answer.in_flight_bound_pr1380 < 0
    # no link given: the decode accelerator's scale-up link (H200 NVLink4, 450 GB/s per direction)
    assert answer.link_gbps == 450


def test_nixl_host_buffer_doubles_the_pool_on_the_host() -> None:
    """``kv_buffer_device="cpu"``: host_xfer_buffers of the KV cache's own shape = num_blocks × block
    bytes per rank on the host."""
    prefill = _side("llama-3.1-8b", "h100-sxm", 1, 4096)
    decode = _side("llama-3.1-8b", "h100-sxm", 1, 4096)
    answer = disagg(prefill, decode, DisaggQuery(prompt_tokens=4000, kv_buffer_device="cpu"))
    assert answer.staging_host_bytes_per_rank == decode.pool.num_blocks * 2_097_152
    assert answer.kv_bytes_per_request_per_rank == 250 * 2_097_152  # 32 × 16 × 8 × 256 × 2 B a block


def test_xpyd_candidates_scale_the_bound() -> None:
    prefill = _side("llama-3.1-8b", "h100-sxm", 1, 4096)
    decode = _side("llama-3.1-8b", "h100-sxm", 1, 4096)
    one, three = pd_candidates(prefill, decode, DisaggQuery(prompt_tokens=4000), [(1, 1), (2, 3)])
    assert three.in_flight_total == 3 * one.in_flight_bound and three.prefill_instances == 2


def test_decode_pool_that_cannot_hold_one_prompt_is_refused_by_name() -> None:
    """Llama-3.1-8B decoding on an L4: the pool's blocks are fewer than a 100,000-token prompt's
    6,250 (ceil(100,000 / 16))."""
    prefill = _side("llama-3.1-8b", "h100-sxm", 1, 100_001)
    decode = _side("llama-3.1-8b", "l4", 1, 100_001)
    with pytest.raises(KVPlanError, match=r"cannot hold one 100,000-token prompt \(6,250 blocks\)"):
        disagg(prefill, decode, DisaggQuery(prompt_tokens=100_000))


def test_unmodelled_engine_and_connector_are_refused_by_name() -> None:
    prefill = _side("llama-3.1-8b", "h100-sxm", 1, 4096)
    sglang = _side("llama-3.1-8b", "h100-sxm", 1, 4096, engine="sglang")
    with pytest.raises(KVPlanError, match="the decode instance runs sglang"):
        disagg(prefill, sglang, DisaggQuery(prompt_tokens=1000))
    with pytest.raises(KVPlanError, match="unknown KV connector 'p2p'"):
        disagg(prefill, prefill, DisaggQuery(prompt_tokens=1000, connector="p2p"))


def test_kv_per_handoff_matches_the_pr1380_measurement() -> None:
    """ai-dynamo/aiconfigurator PR#1380 (tests/fixtures/disagg/aiconfigurator_1380.json): Kimi-K2.5,
    fp8 KV, ISL 8,150 + OSL 1,024 → "≈ 0.30 GiB KV per sequence, 286 MB per handoff". kvplan: one
    token of MLA latent = 61 layers × (512 + 64) × 1 B = 35,136 B (every decode rank holds it whole,
    TP 1); 8,150 tokens = 286,358,400 B = 286 MB; 9,174 tokens = 322,337,664 B = 0.300 GiB. Moved in
    whole blocks of 32 (the plan's MLA block on B200): ceil(8,150 / 32) = 255 blocks = 286,709,760 B."""
    import json
    from pathlib import Path

    fixture = json.loads((Path(__file__).parent / "fixtures" / "disagg" / "aiconfigurator_1380.json")
                         .read_text())
    decode = make_plan(load_model("kimi-k2"), get_gpu("b200"),
                       FitQuery(tokens=9216, tp=1, num_gpus=4, dp=4, kv_dtype=fixture["kv_dtype"],
                                weight_dtype="nvfp4", max_num_seqs=16))
    assert decode.specs.token_bytes == 35_136
    assert round(8150 * 35_136 / 1e6) == fixture["handoff_mb"]
    assert round(9174 * 35_136 / 2**30, 2) == fixture["sequence_gib"]
    answer = disagg(decode, decode, DisaggQuery(prompt_tokens=8150, output_tokens=1024))
    assert answer.prompt_blocks == 255 and answer.kv_bytes_per_request_per_rank == 286_709_760
    assert answer.in_flight_bound > 0 and answer.in_flight_total == 4 * answer.in_flight_bound  # 4 DP ranks


def test_prefill_decode_ratio_vs_traffic() -> None:
    """The fewest instances per traffic rate (time lower bounds): the decode batch is the decode
    pool's requests of prompt + output tokens — C // 574 blocks, under vLLM's max_num_seqs 1,024 —
    and x = ceil(rps × TTFT) with TTFT from ``recommend.prefill_time`` of the prefill plan."""
    from kvplan.recommend import pd_ratio, prefill_flops, prefill_time, single_terms

    prefill = _side("llama-3.1-70b", "h100-sxm", 8, 9174)
    decode = _side("llama-3.1-70b", "h200", 4, 9174)
    answer = pd_ratio(prefill, decode, DisaggQuery(prompt_tokens=8150, output_tokens=1024), [1, 10, 50])
    assert answer.decode_batch == decode.pool.capacity // 574
    ttft = float(prefill_time(single_terms(prefill, 8150), 8150, prefill_flops(prefill.arch, 8150))[0][0])
    assert answer.prefill_seconds == ttft
    expected = [max(1, math.ceil(rate * ttft)) for rate in (1, 10, 50)]
    assert [row.prefill_instances for row in answer.rows] == expected
    assert all(row.decode_instances >= 1 for row in answer.rows)
    assert answer.rows[-1].decode_instances == math.ceil(50 * 1024 / answer.decode_tokens_per_s)


def test_kv_transfer_config_is_read_as_vllm_names_it() -> None:
    """vLLM 0.33 config/kv_transfer.py ``KVTransferConfig``: ``kv_connector`` a factory name
    (kv_connector/factory.py), ``kv_buffer_device`` defaulting to the platform's ``cuda``."""
    from kvplan.engines.vllm.transfer import parse_kv_transfer_config

    assert parse_kv_transfer_config('{"kv_connector": "NixlConnector", "kv_role": "kv_both"}') == \
        ("nixl", "cuda")
    assert parse_kv_transfer_config('{"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer", '
                                    '"kv_buffer_device": "cpu"}') == ("mooncake", "cpu")
    for text, message in (("[1]", "must be a JSON object"), ("{", "not valid JSON"),
                          ('{"kv_connector": "NixlConnector", "kv_buffer": "cpu"}', "no field 'kv_buffer'"),
                          ('{"kv_connector": "P2pNcclConnector"}', '"P2pNcclConnector" is not modelled'),
                          ('{"kv_connector": "NixlConnector", "kv_buffer_device": "xpu"}',
                           '"xpu" is not one of cuda, cpu'),
                          ('{"kv_connector": "NixlConnector", "kv_role": "both"}', '"both" is not one of')):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_kv_transfer_config(text)


def test_cli_disagg_takes_kv_transfer_config_and_refuses_a_contradiction() -> None:
    from cli_helpers import run_cli

    base = ["disagg", "--model", "llama-3.1-8b", "--tokens", "4000", "--prefill-gpu", "h100-sxm",
            "--decode-gpu", "h100-sxm", "--json"]
    code, out, err = run_cli([*base, "--kv-transfer-config",
                              '{"kv_connector": "NixlConnector", "kv_buffer_device": "cpu"}'])
    assert code == 0, err
    via_json = json.loads(out)
    code, out, err = run_cli([*base, "--kv-connector", "nixl", "--kv-buffer-device", "cpu"])
    assert code == 0, err
    assert json.loads(out) == via_json and via_json["staging_host_bytes_per_rank"] > 0
    code, _, err = run_cli([*base, "--kv-buffer-device", "cuda", "--kv-transfer-config",
                            '{"kv_connector": "NixlConnector", "kv_buffer_device": "cpu"}'])
    assert code == 2 and "--kv-buffer-device cuda disagrees with --kv-transfer-config " \
        "kv_buffer_device (cpu)" in err
    code, _, err = run_cli([*base, "--kv-transfer-config", '{"kv_connector": "Nope"}'])
    assert code == 2 and 'kv_connector "Nope" is not modelled' in err and "Traceback" not in err
