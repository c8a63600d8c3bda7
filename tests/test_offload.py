"""Offload tiers, hand-derived from the engines' and connectors' sizing code.

* vLLM 0.33 native CPU offloading: vllm/v1/kv_offload/cpu/spec.py ``CPUOffloadingSpec.__init__``,
  distributed/kv_transfer/kv_connector/v1/offloading/config.py ``build_offloading_config``,
  config/vllm.py ``_post_init_kv_transfer_config`` (``cpu_bytes_to_use = size × 2^30``, total).
* LMCache 0.5.6: lmcache/integration/vllm/utils.py ``create_lmcache_metadata`` (kv_shape over every
  layer of the stage), v1/storage_backend/local_cpu_backend.py ``initialize_allocator``,
  v1/memory_management.py ``AddressManager.ALIGN_BYTES = 4096``.
* SGLang 0.5.23 HiCache: python/sglang/srt/mem_cache/pool_host/base.py ``HostKVCache.__init__``,
  ``_allocate_host_buffer``, ``HICACHE_HOST_MEMORY_RESERVE_BYTES``; mem_cache/hicache_auto_size.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines.vllm.offload import native_cpu_tier
from kvplan.errors import KVPlanError
from kvplan.offload import OffloadQuery, offload
from kvplan.plan import FitQuery, Plan, make_plan
from kvplan.presets import get_gpu, load_model

FIXTURES = Path(__file__).parent / "fixtures" / "offload"


def _plan(model: str, gpu: str, engine: str, tp: int, tokens: int, kv: str = "auto") -> Plan:
    return make_plan(load_model(model), get_gpu(gpu),
                     FitQuery(tokens=tokens, tp=tp, num_gpus=tp, kv_dtype=kv, engine=engine))


def test_vllm_native_llama_70b_tp8() -> None:
    """Llama-3.1-70B bf16, TP 8: one block per rank = 80 layers × 16 tokens × 1 KV head × (128 + 128)
    × 2 B = 655,360 B (the GPU pool's block); a chunk holds the 8 ranks' blocks: 5,242,880 B, already
    a multiple of 4096; 400 GiB = 429,496,729,600 B // 5,242,880 = 81,920 chunks of 16 tokens; a
    131,072-token prompt stores 8,192 chunks → 10 sessions."""
    plan = _plan("llama-3.1-70b", "h100-sxm", "vllm", 8, 131072)
    tier = offload(plan, OffloadQuery(backend="native", size_gib=400)).tiers[0]
    assert tier.tokens_per_unit == 16 and tier.units == 81_920 and tier.units_per_session == 8_192
    assert tier.sessions_per_instance == 10 and tier.rank_token_bytes == 40_960
    assert tier.allocations == 1 and tier.host_bytes_per_instance == 81_920 * 5_242_880
    # one rank's slice back over PCIe Gen5 x16 (64 GB/s): 131,072 × 40,960 B / 64e9
    assert tier.session_rank_bytes == 5_368_709_120
    assert tier.restore_seconds == pytest.approx(5_368_709_120 / 64e9, rel=1e-12)


def test_vllm_native_chunk_of_256_tokens() -> None:
    """``kv_connector_extra_config`` ``block_size`` 256 = 16 GPU blocks per chunk: 655,360 × 8 × 16 =
    83,886,080 B; 400 GiB // that = 5,120 chunks; 512 per 131,072-token session → 10; a 1,000-token
    prompt stores 3 whole chunks (768 tokens)."""
    plan = _plan("llama-3.1-70b", "h100-sxm", "vllm", 8, 131072)
    tier = offload(plan, OffloadQuery(backend="native", size_gib=400, chunk_tokens=256)).tiers[0]
    assert tier.units == 5_120 and tier.units_per_session == 512 and tier.sessions_per_instance == 10
    short = offload(plan.vary(tokens=1000), OffloadQuery(backend="native", size_gib=400, chunk_tokens=256))
    assert short.tiers[0].units_per_session == 3 and short.tiers[0].sessions_per_instance == 1_706


def test_vllm_native_chunk_not_a_block_multiple_is_refused() -> None:
    plan = _plan("llama-3.1-70b", "h100-sxm", "vllm", 8, 8192)
    with pytest.raises(KVPlanError, match=r"250 tokens is not a multiple of the GPU block of 16 .*use 256"):
        offload(plan, OffloadQuery(backend="native", size_gib=10, chunk_tokens=250))


def test_vllm_native_replicated_mla_pads_to_the_page() -> None:
    """DeepSeek-V3, TP 8: pure MLA at TP > 1, PP 1 on CUDA → one copy per chunk (replicated
    layout). Block = 61 layers × 16 × 576 × 2 B = 1,124,352 B → round_up(, 4096) = 1,126,400 B;
    100 GiB = 107,374,182,400 // 1,126,400 = 95,325 chunks; 8,192 per 131,072 tokens → 11."""
    plan = _plan("deepseek-v3", "h200", "vllm", 8, 131072)
    tier = offload(plan, OffloadQuery(backend="native", size_gib=100)).tiers[0]
    assert tier.units == 95_325 and tier.sessions_per_instance == 11
    assert tier.host_bytes_per_instance == 95_325 * 1_126_400
    assert any("replicated MLA" in note for note in tier.notes)


def test_native_rule_rounds_a_chunk_up_to_the_page() -> None:
    """A 1,000 B block on 2 ranks: 2,000 B → 4,096 B per chunk; 1 GiB // 4,096 = 262,144 chunks."""
    tier = native_cpu_tier(size_gib=1, worker_bytes_per_block=1000, gpu_block_size=16, world_size=2,
                           replicated=False, n_groups=1)
    assert tier.unit_bytes == 4096 and tier.units == 262_144


def test_vllm_native_hybrid_model_refused_by_name() -> None:
    plan = _plan("Qwen/Qwen3.5-27B", "h100-sxm", "vllm", 2, 65536)
    with pytest.raises(KVPlanError, match="vLLM native CPU offloading: .* 4 groups"):
        offload(plan, OffloadQuery(backend="native", size_gib=30))


def test_lmcache_llama_70b_50_gib_per_rank() -> None:
    """LMCache chunk of 256 tokens: 2 × 80 layers × 1 head × 128 × 2 B = 40,960 B per token per rank
    → 10,485,760 B (a 4096 multiple); 50 GiB per rank = 53,687,091,200 // that = 5,120 chunks → 10
    sessions of 131,072 tokens; 8 ranks pin 8 × 50 GiB on the node."""
    plan = _plan("llama-3.1-70b", "h100-sxm", "vllm", 8, 131072)
    answer = offload(plan, OffloadQuery(backend="lmcache", size_gib=50, disk_gib=500, sessions=40))
    cpu, disk = answer.tiers
    assert cpu.units == 5_120 and cpu.sessions_per_instance == 10 and cpu.rank_token_bytes == 40_960
    assert cpu.allocations == 8 and cpu.host_bytes_per_node == 8 * 53_687_091_200
    assert cpu.share_resident == 0.25 and not any("MLA" in note for note in cpu.notes)
    assert disk.medium == "disk" and disk.units == 51_200 and disk.sessions_per_instance == 100
    assert disk.share_resident == 1.0


def test_lmcache_stores_every_layer_of_a_hybrid_model() -> None:
    """Qwen3.5-27B (64 layers, 16 of them full attention, 4 KV heads of 256), TP 2: the GPU pool
    holds 16 × 2 heads × 512 × 2 B = 32,768 B per token per rank, but LMCache's kv_shape counts
    ``get_num_layers`` = 64 layers: 2 × 64 × 2 × 256 × 2 = 131,072 B — 4× the GPU's. 30 GiB per
    rank // 33,554,432 B chunks = 960 → 3 sessions of 65,536 tokens."""
    plan = _plan("Qwen/Qwen3.5-27B", "h100-sxm", "vllm", 2, 65536)
    tier = offload(plan, OffloadQuery(backend="lmcache", size_gib=30)).tiers[0]
    assert tier.gpu_rank_token_bytes == 32_768 and tier.rank_token_bytes == 131_072
    assert tier.units == 960 and tier.sessions_per_instance == 3


def test_lmcache_measured_bytes_per_token_club_3090() -> None:
    """noonghunna/club-3090#422: LMCache held 4.93 GB in RAM for a 36,808-token session of
    Qwen3.5-27B on two RTX 3090s (TP 2, 1-byte int8 KV): ~131 KB per token, against the GPU's
    18.9 KB. kvplan: 65,536 B per rank (64 layers × 2 × 2 heads × 256 × 1 B) × 2 ranks = 131,072 B;
    the whole-chunk store of 36,608 tokens → 4.80e9 B, within 3 % of the measured 4.93 GB. The rig ran
    LMCache's multi-process server, which kvplan does not model (the fixture's caveat): a consistency
    check of the in-process rule, not a derivation of the MP one."""
    fixture = json.loads((FIXTURES / "club3090_lmcache.json").read_text())
    plan = _plan("Qwen/Qwen3.5-27B", "h100-sxm", "vllm", 2, fixture["session_tokens"], kv="fp8")
    tier = offload(plan, OffloadQuery(backend="lmcache", size_gib=30)).tiers[0]
    total = tier.session_rank_bytes * tier.allocations
    assert tier.rank_token_bytes * 2 == 131_072
    assert total == 36_608 * 131_072
    assert abs(total - fixture["l1_bytes"]) / fixture["l1_bytes"] < 0.03


def test_hicache_default_ratio_from_the_device_pool() -> None:
    """Llama-3.1-8B on SGLang, one H100 (mem_fraction_static 0.835 — SGLang's default divides
    nvidia-smi's 81,559 MiB — of what is free after the 0.509 GiB held before loading: KV budget
    54,412,810,272 B — 54,481,483,808 before SGLang's weights held the fp32 RoPE cache and the
    allocator's segments, 68,673,536 B, test_sglang_weights): device pool 415,136 tokens of 131,072 B
    (32 layers × 8 heads × 256 × 2 B); ratio 2.0 → int(830,272) tokens; page_num = 830,272 // 1 + 1 =
    830,273; size 830,273 tokens → 25 sessions of 32,768; 830,273 × 131,072 B pinned per rank."""
    plan = _plan("llama-3.1-8b", "h100-sxm", "sglang", 1, 32768)
    assert plan.budget.kv_budget == 54_412_810_272 and plan.pool.capacity == 415_136
    tier = offload(plan, OffloadQuery(backend="hicache")).tiers[0]
    assert tier.units == 830_273 and tier.sessions_per_instance == 25
    assert tier.allocation_bytes == 830_273 * 131_072


def test_hicache_size_in_decimal_gb() -> None:
    """``--hicache-size 100``: int(100e9 // 131,072) = 762,939 tokens → 762,940 after the page."""
    plan = _plan("llama-3.1-8b", "h100-sxm", "sglang", 1, 32768)
    tier = offload(plan, OffloadQuery(backend="hicache", size_gib=100)).tiers[0]
    assert tier.units == 762_940 and tier.sessions_per_instance == 23
    with pytest.raises(KVPlanError, match="whole number of GB"):
        offload(plan, OffloadQuery(backend="hicache", size_gib=2.5))


def test_hicache_auto_size_on_the_entered_ram() -> None:
    """Default ratio, 128 GiB entered, one GPU per node: budget = int((128 − 10) GiB × 0.8) =
    101,361,228,185 B; device bytes (415,016 + 1) × 131,072 = 54,397,108,224; ratio = min(2,
    budget × 0.95 / device bytes) = 1.77019…; int(415,016 × ratio) = 734,656, + 1 page = 734,657
    tokens = 96,292,962,304 B, under the budget."""
    plan = _plan("llama-3.1-8b", "h100-sxm", "sglang", 1, 32768)
    tier = offload(plan, OffloadQuery(backend="hicache", host_ram_gib=128, gpus_per_node=1)).tiers[0]
    budget = int((128 - 10) * 1024**3 * 0.8)
    ratio = min(2.0, budget * 0.95 / ((415_016 + 1) * 131_072))
    assert budget == 101_361_228_185 and int(415_016 * ratio) == 734_656
    assert tier.units == 734_657 and tier.allocation_bytes == 96_292_962_304 < budget


def test_a_tier_larger_than_the_host_ram_is_refused_by_name() -> None:
    plan = _plan("llama-3.1-70b", "h100-sxm", "vllm", 8, 131072)
    with pytest.raises(KVPlanError, match=r"vLLM native CPU pins 4,294,967,296,000 B .*node's RAM"):
        offload(plan, OffloadQuery(backend="native", size_gib=4000, host_ram_gib=2048))
    sglang = _plan("llama-3.1-8b", "h100-sxm", "sglang", 1, 32768)
    with pytest.raises(KVPlanError, match=r"SGLang's allowance per rank 57,982,058,496 B"):
        offload(sglang, OffloadQuery(backend="hicache", size_gib=100, host_ram_gib=64))


def test_a_backend_of_another_engine_is_refused_by_name() -> None:
    plan = _plan("llama-3.1-8b", "h100-sxm", "sglang", 1, 4096)
    with pytest.raises(KVPlanError, match="backend 'native' runs under vllm, not sglang"):
        offload(plan, OffloadQuery(backend="native", size_gib=10))
    with pytest.raises(KVPlanError, match="--kv-offloading-size must be a positive size"):
        offload(plan.for_engine("vllm"), OffloadQuery(backend="native"))


def test_lmcache_refuses_a_sub_byte_kv_dtype_by_name() -> None:
    from kvplan.dtypes import KVDType
    from kvplan.engines.vllm.offload import lmcache_token_bytes

    arch = load_model("llama-3.1-8b")
    with pytest.raises(KVPlanError, match="KV dtype int4 has no whole-byte element"):
        lmcache_token_bytes(arch, KVDType("int4", 4), 1, 32)
    no_kv = arch.model_copy(update={"layers": ()})
    with pytest.raises(KVPlanError, match="no attention layer"):
        lmcache_token_bytes(no_kv, KVDType("bf16", 16), 1, 32)


def test_cli_offload_json_carries_the_exact_numbers() -> None:
    """``kvplan offload --json``: the LMCache case above through the CLI (flags as LMCache names its
    settings), and the text report names the tier and its formulas."""
    from cli_helpers import run_cli

    argv = ["offload", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "8", "--tokens", "131072",
            "--backend", "lmcache", "--max-local-cpu-size", "50", "--sessions", "40"]
    code, out, err = run_cli([*argv, "--json"])
    assert code == 0, err
    payload = json.loads(out)
    (tier,) = payload["tiers"]
    assert payload["engine"] == "vllm" and payload["gpu_sessions"] == 10
    assert tier["units"] == 5_120 and tier["sessions_per_instance"] == 10 and tier["share_resident"] == 0.25
    assert tier["host_bytes_per_node"] == 8 * 53_687_091_200
    code, out, _ = run_cli(argv)
    assert code == 0 and "LMCache CPU: 10 sessions per instance" in out and "5,120 chunks" in out


def test_cli_disagg_json_carries_the_exact_numbers() -> None:
    from cli_helpers import run_cli

    code, out, err = run_cli(["disagg", "--model", "llama-3.1-70b", "--tokens", "8150",
                              "--output-tokens", "1024", "--prefill-gpu", "h100-sxm", "--prefill-tp", "8",
                              "--decode-gpu", "h200", "--decode-tp", "4", "--max-num-seqs", "64",
                              "--link-gbps", "50", "--json"])
    assert code == 0, err
    payload = json.loads(out)
    assert payload["prompt_blocks"] == 510 and payload["request_blocks"] == 574
    assert payload["kv_bytes_per_request"] == 2_673_868_800
    capacity = payload["decode_capacity_blocks"]
    assert payload["in_flight_bound"] == (capacity - 64 * 574) // 510
    assert payload["decode"]["gpu"] == "h200" and payload["prefill"]["tp"] == 8


def test_lmcache_mla_stores_on_the_first_rank_only() -> None:
    """DeepSeek-V3 TP 8: LMCache's chunk is 1 × 61 layers × 256 × 576 × 2 B = 17,989,632 B per rank
    (a 4096 multiple); 20 GiB // that = 1,193 chunks on the first rank, which alone stores
    (save_only_first_rank); all 8 ranks still allocate 20 GiB."""
    plan = _plan("deepseek-v3", "h200", "vllm", 8, 32768)
    tier = offload(plan, OffloadQuery(backend="lmcache", size_gib=20)).tiers[0]
    assert tier.units == 1_193 and tier.units_per_session == 128 and tier.sessions_per_instance == 9
    assert tier.host_bytes_per_instance == 8 * 20 * 2**30
    assert any("only the first rank stores" in note for note in tier.notes)
