"""Capacity planner: the paper settings and vLLM's block arithmetic, derived by hand."""

from __future__ import annotations

import json

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.cli import main
from kvplan.config_import import parse_config
from kvplan.engines import get_engine
from kvplan.engines.sglang import sglang_mem_fraction_static
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model

#: The release these numbers are derived for (an explicit key: a newer release changes none).
V033 = "vllm@0.33"

GIB = 1 << 30


def run(model: str, gpu: str, **kw) -> object:
    return fit(make_plan(load_model(model), get_gpu(gpu), FitQuery(**kw)))


def test_opt13b_on_a100_40gb_as_in_the_vllm_paper():
    """vLLM paper §1: weights ≈ 65 % of an A100-40GB, ≈ 30 % left for KV, ≈ 7 requests of 2,048.

    Weights as loaded (kvplan.weights): 12,853,473,280 stored parameters (tied embeddings, 2,050
    learned positions, every bias and LayerNorm bias) + vLLM's vocab padding 50,272 → 50,304 rows
    (32 × 5,120) = 12,853,637,120 × 2 B = 25,707,274,240 B = 64 % of 40 GB.
    Budget from CUDA's total, 40,325 MiB = 42,283,827,200 B: ceil(× 0.92) = 38,901,121,024 B.
    Reserve (v0.33, A100-40GB defaults max_num_batched_tokens 2,048, max_num_seqs 256):
    activation = max(forward 2,048 × (3 × 5,120 + ungated MLP 2 × 20,480) × 2 B = 230,686,720,
    FlashInfer sampler 256 × 50,272 × 10 B = 128,696,320) = 230,686,720; non-torch 143,129,785;
    CUDA graphs 51 capture sizes ([1, 2, 4] + 8…248 step 8 + 256…512 step 16) × 8,012,999 B =
    408,662,949 → 782,479,454 B. Budget 38,901,121,024 − 25,707,274,240 − 782,479,454 =
    12,411,367,330 B = 29.4 % of the device; one block = 40 layers × 16 × 40 heads × 128 × 2 × 2 B
    = 13,107,200 B → 946 blocks; a 2,048-token request takes 128 blocks → (946 − 1) // 128 = 7
    requests; 946 / 128 = 7.39x; int(7.390625 × 2,048) = 15,136 tokens.
    """
    r = run("opt-13b", "a100-40gb-sxm", engine=V033, tokens=2048, kv_dtype="fp16", weight_dtype="fp16")
    assert r.weights_bytes == 25_707_274_240
    assert round(r.weights_bytes / 40e9, 2) == 0.64
    assert r.gpu_capacity_bytes == 42_283_827_200 and r.memory_target_bytes == 38_901_121_024
    assert r.reserve_bytes == 230_686_720 + 143_129_785 + 408_662_949
    assert r.kv_budget_bytes == 12_411_367_330
    assert round(r.kv_budget_bytes / r.gpu_capacity_bytes, 2) == 0.29
    assert (r.bytes_per_block, r.num_blocks, r.blocks_per_request) == (13_107_200, 946, 128)
    assert r.max_requests == 7
    assert r.kv_pool_tokens == 15_136
    assert ", ".join(get_engine(r.engine).log_lines(r)) == (
        "GPU KV cache size: 15,136 tokens, Maximum concurrency for 2,048 tokens per request: 7.39x")


def test_dense_block_arithmetic_llama31_8b():
    """vLLM kv_cache_utils.py: page = 16 × 8 × (128 + 128) × 2 = 65,536 B; 32 layers → 2,097,152 B
    per block; 10 GiB // 2,097,152 = 5,120 blocks; L = 32,768 → 2,048 blocks per request;
    concurrency 2.5, logged tokens int(2.5 × 32,768) = 81,920 = 5,120 × 16; (5,120 − 1) // 2,048 = 2.
    """
    r = run("llama-3.1-8b", "h100-sxm", tokens=32768, kv_cache_memory_bytes=10 * GIB)
    assert (r.bytes_per_block, r.num_blocks, r.blocks_per_request) == (2_097_152, 5120, 2048)
    assert r.max_concurrency == 2.5
    assert r.kv_pool_tokens == 81_920
    assert r.max_requests == 2


def test_length_not_a_multiple_of_the_block_size():
    """L = 1,000: cdiv(1000, 16) = 63 blocks; 5,120 / 63 × 1,000 = 81,269.8 → 81,269 tokens logged,
    fewer than the 81,920 physical slots."""
    r = run("llama-3.1-8b", "h100-sxm", tokens=1000, kv_cache_memory_bytes=10 * GIB)
    assert r.blocks_per_request == 63
    assert r.kv_pool_tokens == 81_269
    assert r.max_requests == (5120 - 1) // 63


def test_sliding_window_model_mistral_v01():
    """kv_cache_interface.py SlidingWindowSpec: cdiv(min(W − 1 + IFT, L), bs) + 1 with IFT =
    2 × max_num_batched_tokens (async scheduling): cdiv(min(4095 + 16384, 32768), 16) + 1 = 1,281;
    5,120 / 1,281 × 32,768 = 130,969.7 → 130,969 tokens (more than the 81,920 slots)."""
    r = run("mistral-7b-v0.1", "h100-sxm", tokens=32768, kv_cache_memory_bytes=10 * GIB,
            max_num_batched_tokens=8192)
    assert (r.num_blocks, r.blocks_per_request) == (5120, 1281)
    assert r.kv_pool_tokens == 130_969
    legacy = run("mistral-7b-v0.1", "h100-sxm", tokens=32768, kv_cache_memory_bytes=10 * GIB,
                 max_num_batched_tokens=8192, async_scheduling=False)
    assert legacy.blocks_per_request == (4095 + 8192 + 15) // 16 + 1  # 769


GEMMA3_27B = {
    "model_type": "gemma3",
    "architectures": ["Gemma3ForConditionalGeneration"],
    "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376,
                    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                    "intermediate_size": 21504, "sliding_window": 1024,
                    "sliding_window_pattern": 6, "vocab_size": 262208,
                    "max_position_embeddings": 131072},
}


def test_gemma3_five_to_one_hybrid_groups():
    """kv_cache_utils.py _get_kv_cache_groups_uniform_page_size: 52 sliding + 10 full layers,
    group_size = 10 (52 ≥ 1.5 × 10) → 6 sliding groups (9/9/9/9/8/8) + 1 full group; a block id
    costs 10 × 16 × 16 × 256 × 2 = 1,310,720 B; per request 2,048 + 6 × (cdiv(1023 + 16384, 16) + 1)
    = 2,048 + 6 × 1,089 = 8,582 blocks; 20 GiB → 16,384 blocks; int(16,384 / 8,582 × 32,768) = 62,557.
    """
    arch = parse_config(GEMMA3_27B, params_total=27_000_000_000)
    r = fit(make_plan(arch, get_gpu("h100-sxm"), FitQuery(tokens=32768, kv_cache_memory_bytes=20 * GIB,
                                                 max_num_batched_tokens=8192)))
    assert (r.bytes_per_block, r.num_blocks, r.blocks_per_request) == (1_310_720, 16_384, 8_582)
    assert r.kv_pool_tokens == 62_557
    assert any("8 padding layers" in note for note in r.notes)


def test_mla_block_size_and_replication_deepseek_v3():
    """MLAAttentionSpec: one 576-element latent per token and layer, no V, replicated on every TP
    rank. Hopper bf16 → FlashAttention-MLA, block 16: 61 × 16 × 576 × 2 = 1,124,352 B per block;
    10 GiB → 9,549 blocks at tp 1 and at tp 8 alike. fp8 on Hopper → FlashMLA, block 64:
    61 × 64 × 576 = 2,248,704 B → 4,774 blocks."""
    one = run("deepseek-v3", "h200", tokens=32768, kv_cache_memory_bytes=10 * GIB)
    eight = run("deepseek-v3", "h200", tokens=32768, kv_cache_memory_bytes=10 * GIB, tp=8,
                num_gpus=8, weight_dtype="fp8")
    assert (one.block_size, one.bytes_per_block, one.num_blocks) == (16, 1_124_352, 9549)
    assert (eight.bytes_per_block, eight.num_blocks) == (1_124_352, 9549)
    fp8 = run("deepseek-v3", "h200", tokens=32768, kv_cache_memory_bytes=10 * GIB, kv_dtype="fp8")
    assert (fp8.block_size, fp8.bytes_per_block, fp8.num_blocks) == (64, 2_248_704, 4774)


def test_deepseek_v3_fp8_weights_on_8xh200():
    """The checkpoint's own format (no weight dtype given): FP8 with one fp32 scale per 128×128
    block, embeddings/LM head/norms/routers bf16. Per rank at TP 8: 671.03e9 params × ~1 B / 8
    ≈ 84 GB plus the bf16 parts — 85,140,071,456 B, and vLLM's RoPE cos/sin cache (``deepseek_yarn``:
    4,096 × 40 positions × qk_rope_head_dim 64 × 2 B = 20,971,520 B; helper vllmrope) = 85,161,042,976
    B. Experts: 58 MoE layers × 256 experts, each
    with its 2,048 intermediate split over 8 ranks: w13 512 × 7,168 + w2 7,168 × 256 fp8 bytes and
    (4 × 56 + 56 × 2) fp32 block scales. The rest of 0.92 × 150.75 GB is KV."""
    r = run("deepseek-v3", "h200", tokens=32768, tp=8, num_gpus=8)
    assert r.weights_fit and r.max_requests >= 20
    assert r.weight_dtype == "fp8"
    assert r.weights_bytes == 85_140_071_456 + 20_971_520 == 85_161_042_976
    assert r.weights_breakdown["experts"] == 58 * 256 * (512 * 7168 + 7168 * 256 + (4 * 56 + 56 * 2) * 4)
    assert r.weights_bytes == pytest.approx(671.03e9 / 8, rel=0.02)


def test_llama31_8b_bf16_on_one_h100_at_32k():
    """Weights 8,030,261,248 × 2 B + vLLM's RoPE cache 131,072 × 128 × 2 B = 16,094,076,928 B
    (16,060,522,496 before helper vllmrope); budget ceil(85,027,979,264 (CUDA total, 81,089 MiB) × 0.92) =
    78,225,740,923 − weights − reserve. Reserve (v0.33, H100 defaults max_num_batched_tokens 8,192,
    max_num_seqs 1,024): activation max(forward 8,192 × (3 × 4,096 + gate/up/act 3 × 14,336) × 2 B
    = 905,969,664, FlashInfer sampler 1,024 × 128,256 × 10 B = 1,313,341,440) + non-torch
    143,129,785 + CUDA graphs 51 sizes × 8,012,999 = 408,662,949 → 1,865,134,174 B. 4 KiB per token
    per layer... 131,072 B/token → 2,048 blocks of 2,097,152 B per 32K request; 60,266,529,821 //
    2,097,152 = 28,737 blocks (28,753 before the cache) → (28,737 − 1) // 2,048 = 14 requests."""
    r = run("llama-3.1-8b", "h100-sxm", engine=V033, tokens=32768)
    assert r.weights_bytes == 16_060_522_496 + 33_554_432 == 16_094_076_928
    assert r.reserve_bytes == 1_313_341_440 + 143_129_785 + 408_662_949
    assert r.kv_budget_bytes == 78_225_740_923 - 16_094_076_928 - 1_865_134_174
    assert r.num_blocks == 28_737
    assert r.max_requests == 14


def test_llama31_70b_tp2_leaves_almost_nothing_tp8_dozens():
    two = run("llama-3.1-70b", "h100-sxm", tokens=32768, tp=2, num_gpus=2)
    eight = run("llama-3.1-70b", "h100-sxm", tokens=32768, tp=8, num_gpus=8)
    assert two.max_requests <= 1
    assert 24 <= eight.max_requests <= 60


def test_qwen3_235b_tp8_replicates_its_4_kv_heads():
    """4 KV heads over 8 ranks: max(1, 4 // 8) = 1 head per rank (replicated), so per-rank KV per
    token = 94 × 1 × 256 × 2 = 48,128 B — the same as at tp 4."""
    four = run("qwen3-235b-a22b", "h100-sxm", tokens=32768, tp=4, num_gpus=4,
               kv_cache_memory_bytes=10 * GIB)
    eight = run("qwen3-235b-a22b", "h100-sxm", tokens=32768, tp=8, num_gpus=8,
                kv_cache_memory_bytes=10 * GIB)
    assert four.bytes_per_block == eight.bytes_per_block == 94 * 16 * 1 * 256 * 2


def test_does_not_fit_is_an_answer_not_an_error():
    r = run("llama-3.1-405b", "l4", tokens=8192)
    assert not r.fits and not r.weights_fit
    assert r.max_requests == 0 and r.kv_budget_bytes == 0 and r.max_tokens_per_request == 0
    assert r.min_gpus_to_fit is not None and r.min_gpus_to_fit > 8


def test_pipeline_parallel_uses_the_fullest_stage():
    """get_pp_indices(61, 4) = [15, 15, 16, 15]: the 16-layer stage sets bytes per block."""
    r = run("deepseek-v3", "h200", tokens=4096, pp=4, num_gpus=4, kv_cache_memory_bytes=GIB)
    assert r.bytes_per_block == 16 * 16 * 576 * 2


def test_sglang_default_mem_fraction_on_h100():
    """memory_hook.py: reserved = max(512 + 8192 × 1.5 + 1/8 × 1024 + 256 × 2, 10,240) MiB = 13,440
    on an 81,559 MiB H100 → round((81,559 − 13,440) / 81,559, 3) = 0.835."""
    assert sglang_mem_fraction_static(81559 * 2**20, 1, 1, False) == 0.835


def test_fit_cli_json(capsys):
    assert main(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "32768",
                 "--kv-cache-memory-bytes", str(10 * GIB), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_blocks"] == 5120 and data["kv_pool_tokens"] == 81_920
    assert data["max_concurrency"] == 2.5 and data["max_requests"] == 2 and data["fits"] is True


@pytest.mark.parametrize("engine", ["vllm", "sglang", "hf", "hf-static"])
def test_capacity_sweep_agrees_with_fit_point_by_point(engine):
    """The vectorised sweep sizes each pool once; every cell must equal a scalar ``fit``."""
    from kvplan.capacity import capacity_sweep
    from kvplan.presets import gpus

    arch = load_model("gemma-2-9b")
    chosen = [gpus()[g] for g in ("h100-sxm", "l4", "mi300x")]
    tokens, users = [1, 1000, 4096, 32768], [1, 3, 50]
    query = FitQuery(engine=engine, max_num_batched_tokens=4096)
    dtypes = ["bf16", "fp8_e4m3"] if engine in {"vllm", "sglang"} else ["bf16", "fp32"]
    frame = capacity_sweep(make_plan(arch, None, query), chosen, dtypes, tokens, users)
    assert len(frame) == 3 * 2 * 4 * 3
    for row in frame.sample(12, random_state=0).itertuples():
        one = fit(make_plan(arch, gpus()[row.gpu], query.model_copy(update={
            "kv_dtype": row.kv_dtype, "tokens": row.tokens, "users": row.users})))
        assert (row.max_requests, row.kv_bytes_per_request, row.fits) == \
            (one.max_requests, one.kv_bytes_per_request, one.fits)


def test_custom_accelerator_on_the_command_line(capsys):
    """--gpu custom:48:1:300 → a 48 GiB device (51,539,607,552 B), 1 TB/s, 300 TFLOPS."""
    assert main(["fit", "--model", "llama-3.1-8b", "--gpu", "custom:48:1:300", "--tokens", "8192",
                 "--engine-version", "0.33",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_capacity_bytes"] == 51_539_607_552
    assert data["memory_target_bytes"] == -(-51_539_607_552 * 92 // 100)
    for bad, why in (("custom:abc", "memory must be a number, got abc"),
                     ("custom:-5", "memory must be between 0.1 and 1,000,000.0, got -5"),
                     ("custom:inf", "memory must be between 0.1 and 1,000,000.0, got inf"),
                     ("custom:", "memory must be a number, got "),
                     ("custom:80:1:1:1", "4 numbers given, one to three expected")):
        assert main(["fit", "--model", "llama-3.1-8b", "--gpu", bad, "--tokens", "8"]) == 2
        assert capsys.readouterr().err == (f"kvplan: error: accelerator '{bad}': {why} "
                                           "(custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]])\n")


def test_tensorrt_llm_pool_arithmetic():
    """TensorRT-LLM (resource_manager.py get_cache_size_per_token; _util.py _cal_max_memory):
    2 × 8 KV heads × 128 × 2 B × 32 layers = 131,072 B per token; a 10 GiB pool holds 81,920
    tokens = 2,560 blocks of 32; a 32,768-token request takes 1,024 blocks → 2 requests, 2.5x.
    Without a given budget KV gets 0.9 × (CUDA total − weights − activation − non-torch)."""
    r = run("llama-3.1-8b", "h100-sxm", tokens=32768, engine="trtllm", kv_cache_memory_bytes=10 * GIB)
    assert (r.num_blocks, r.block_size, r.kv_pool_tokens, r.max_requests) == (2560, 32, 81_920, 2)
    assert r.max_concurrency == 2.5
    default = run("llama-3.1-8b", "h100-sxm", tokens=32768, engine="trtllm")
    # reserve = the profiling forward of max_num_tokens 8,192: 8,192 × (3 × 4,096 + 3 × 14,336) × 2 B,
    # plus the non-torch memory fitted on TRT-LLM log 05 (TRTLLM_NON_TORCH_BYTES, int(2.52 GiB); issue
    # #30 added it: the reserve was the activation alone, 905,969,664 B)
    assert default.reserve_bytes == 905_969_664 + 2_705_829_396
    assert default.kv_budget_bytes == int((85_027_979_264 - 16_060_522_496 - 905_969_664
                                           - 2_705_829_396) * 0.9) == 58_820_091_937


def test_tensorrt_llm_keeps_whole_heads_when_tp_exceeds_kv_heads():
    """TensorRT-LLM's KVCacheManager holds ceil(nkv / tp) whole heads per layer (4 heads at TP 8 →
    1 head of 128 for K and V), as vLLM's replication does; only KvCacheCreator's estimate prices
    head_dim · nkv // tp = 64 elements (resource_manager.py __init__, get_cache_bytes_per_token)."""
    trt = run("qwen3-235b-a22b", "h100-sxm", tokens=4096, tp=8, num_gpus=8, engine="trtllm",
              kv_cache_memory_bytes=GIB)
    vllm = run("qwen3-235b-a22b", "h100-sxm", tokens=4096, tp=8, num_gpus=8,
               kv_cache_memory_bytes=GIB)
    assert trt.bytes_per_block == 32 * 94 * 2 * 128 * 2
    assert vllm.bytes_per_block == 16 * 94 * 2 * 128 * 2


def test_auto_kv_dtype_is_the_model_dtype(capsys):
    """``--kv-dtype auto`` (the CLI default, vLLM's kv_cache_dtype=auto) stores KV in the model's
    dtype: OPT-13B's config says float16 → 819,200 B/token."""
    assert main(["kv", "--model", "opt-13b", "--tokens", "2048", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["kv_dtype"], data["kv_bytes"]) == ("fp16", 1_677_721_600)
    r = run("opt-13b", "a100-40gb-sxm", tokens=2048, kv_dtype="auto")
    assert (r.kv_dtype, r.max_requests) == ("fp16", 7)
