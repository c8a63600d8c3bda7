"""The engine's start-up check of its request cap (issue #28), hand-derived from each release's code.

Qwen3-Next-80B-A3B (36 Gated DeltaNet + 12 full-attention layers, 2 KV heads of 256) on 4 × H100 SXM,
TP 4, 32,768 tokens. vLLM: one KV head per rank → 1,024 B per token per attention layer; the
274,432 B recurrent state raises the block to 272 tokens (``Platform._align_hybrid_block_size``),
a page 272 × 1,024 = 278,528 B; groups of 12 layers (36 GDN in 3, 12 full in 1) → 12 × 278,528 =
3,342,336 B per block id; every group draws on one pool, so the Mamba layers hold ``num_blocks``
state blocks (``kv_cache_config.num_blocks``).

Sources: vLLM ``config/compilation.py`` ``resolve_cudagraph_mode_and_sizes`` (v0.20.0 ``:1436``, v0.33
``:1526``: ``max_num_reqs > kv_cache_config.num_blocks`` raises), v0.18–v0.19
``adjust_cudagraph_sizes_for_mamba_cache`` (capture sizes ≤ num_blocks, a warning), v0.11–v0.17 no
check (``causal_conv1d_update`` asserts during the FULL decode capture, issue #34094);
``engine/arg_utils.py`` ``get_batch_defaults`` (``max_num_seqs`` 1,024 on an H100, 256 below 70 GiB);
SGLang 0.5.23 ``mem_cache/kv_cache_configurator.py`` ``_handle_max_mamba_cache`` and
``resolve_max_num_reqs``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvplan.capacity import fit
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

BLOCK = 3_342_336          # 12 layers × 272 tokens × 1,024 B
H100 = "h100-sxm"


def qwen3_next(engine: str = "vllm@0.33", **query: object):
    arch = load_model("qwen3-next-80b-a3b")
    return fit(make_plan(arch, get_gpu(H100), FitQuery(tokens=32768, engine=engine, tp=4, num_gpus=4,
                                                       **query)))  # type: ignore[arg-type]


def test_v033_refuses_when_max_num_seqs_exceeds_the_state_blocks() -> None:
    """gpu_memory_utilization 0.54: target ceil(85,027,979,264 × 0.54) = 45,915,108,803; weights
    39,875,212,800 + vLLM's RoPE cos/sin cache (``rotary_embedding/base.py``, bf16: 262,144 × 64
    rotary dims × 2 = 33,554,432) = 39,908,767,232, reserve 2,677,644,492 → 3,328,697,079 B →
    3,328,697,079 // 3,342,336 = 995 blocks < 1,024 (the default): vLLM raises after loading. At
    0.55: ceil(46,765,388,595.2) − weights − reserve = 4,178,976,872 B → 1,250 blocks: it starts —
    the smallest change in steps of 0.01. (Before the cache: 3,362,251,511 B, 1,005 blocks; 0.55:
    4,212,531,304 B, 1,260.)"""
    r = qwen3_next(gpu_util=0.54)
    assert (r.memory_target_bytes, r.kv_budget_bytes, r.bytes_per_block, r.block_size) == \
        (45_915_108_803, 3_328_697_079, BLOCK, 272)
    assert (r.num_blocks, r.state_blocks, r.max_num_seqs) == (995, 995, 1024)
    assert not r.starts and r.start_action == "refuses" and not r.fits
    assert r.max_requests_kv == 7 and r.max_requests == 0
    assert r.reason == r.start_reason == (
        "vLLM v0.33 will refuse to start: max_num_seqs 1,024 > 995 Mamba state blocks "
        "(\"max_num_seqs (1024) exceeds available Mamba cache blocks (995)\": config/compilation.py "
        "resolve_cudagraph_mode_and_sizes, after the weights load and the KV cache is profiled; each "
        "decode sequence needs one state block)")
    assert r.suggestion == ("use --max-num-seqs ≤ 995, or --gpu-memory-utilization ≥ 0.55, or "
                            "--enforce-eager (no CUDA graphs, slower decode)")
    ok = qwen3_next(gpu_util=0.55)
    assert (ok.kv_budget_bytes, ok.num_blocks, ok.starts, ok.start_action) == \
        (4_178_976_872, 1250, True, "ok")


@pytest.mark.parametrize(("seqs", "starts"), [(1005, True), (1006, False)])
def test_the_boundary_is_max_num_seqs_equal_to_the_blocks(seqs: int, starts: bool) -> None:
    """``max_num_reqs > num_blocks`` raises: equal is allowed (the null block is counted). The KV
    memory is given (``--kv-cache-memory-bytes``): a smaller ``max_num_seqs`` also shrinks the
    reserve (sampler rows, CUDA graphs), which would add blocks."""
    r = qwen3_next(kv_cache_memory_bytes=1005 * BLOCK + 5, max_num_seqs=seqs)
    assert (r.num_blocks, r.max_num_seqs, r.starts) == (1005, seqs, starts)
    assert r.max_requests == (7 if starts else 0)


def test_enforce_eager_captures_no_graphs_and_starts() -> None:
    """No CUDA graphs, no FULL decode capture, no check (``cudagraph_mode`` NONE). Eager mode also
    drops the CUDA-graph reserve: 0.54 then leaves 1,154 blocks (1,164 before vLLM's 33,554,432 B RoPE
    cache joined the weights: 10 blocks of 3,342,336 B)."""
    r = qwen3_next(kv_cache_memory_bytes=1005 * BLOCK + 5, enforce_eager=True)
    assert (r.starts, r.cuda_graph_sizes, r.num_blocks, r.max_requests) == (True, [], 1005, 7)
    assert qwen3_next(gpu_util=0.54, enforce_eager=True).num_blocks == 1154


@pytest.mark.parametrize(("release", "blocks", "starts", "action", "last_sizes"), [
    # v0.33 / v0.20.0+: refuses whenever max_num_seqs 1,024 > blocks
    ("0.33", 1000, False, "refuses", [496, 512]),
    ("0.20.0", 1000, False, "refuses", [496, 512]),
    # v0.18–v0.19: capture sizes (≤ min(2 × 1,024, 512) = 512) above the blocks are dropped
    ("0.19", 1000, True, "ok", [496, 512]),
    ("0.19", 500, True, "clamps", [480, 496]),
    # v0.11–v0.17: the largest FULL decode capture, 512, must not exceed the blocks
    ("0.17", 1000, True, "ok", [496, 512]),
    ("0.17", 500, False, "refuses", [496, 512]),
    ("0.13", 500, False, "refuses", [496, 512]),
])
def test_each_release_as_its_code_does_it(release: str, blocks: int, starts: bool, action: str,
                                          last_sizes: list[int]) -> None:
    """The KV memory given directly (``--kv-cache-memory-bytes``) as ``blocks`` × 3,342,336 + 5 B,
    so ``num_blocks = blocks`` on every release."""
    r = qwen3_next(f"vllm@{release}", kv_cache_memory_bytes=blocks * BLOCK + 5)
    assert (r.num_blocks, r.state_blocks, r.max_num_seqs) == (blocks, blocks, 1024)
    assert (r.starts, r.start_action, r.cuda_graph_sizes[-2:]) == (starts, action, last_sizes)
    if not starts:  # the budget is given: only the cap or eager mode can help
        assert r.suggestion == (f"use --max-num-seqs ≤ {blocks:,}, or --enforce-eager (no CUDA "
                                "graphs, slower decode)")


def test_a_dense_model_is_capped_by_max_num_seqs_but_has_no_state_blocks() -> None:
    """Llama-3.1-8B on one H100 at 1,024 tokens, ``--max-num-seqs 256``: 60,673,901,597 B // (32
    layers × 16 tokens × 4,096 B = 2,097,152 B) = 28,931 blocks hold (28,931 − 1) // 64 = 452
    requests (60,707,456,029 B / 28,947 blocks before vLLM's 33,554,432 B RoPE cache); vLLM runs at
    most 256 and the rest wait. Capture sizes ``[1, 2, 4] + 8…248 step 8 +
    256…512 step 16`` (``_set_cudagraph_sizes``, top min(2 × 256, 512)) = 3 + 31 + 17 = 51."""
    arch = load_model("llama-3.1-8b")
    plan = make_plan(arch, get_gpu(H100), FitQuery(tokens=1024, users=300, engine="vllm@0.33",
                                                   max_num_seqs=256))
    r = fit(plan)
    assert (r.kv_budget_bytes, r.bytes_per_block) == (60_673_901_597, 2_097_152)
    assert (r.num_blocks, r.state_blocks, r.starts) == (28_931, None, True)
    assert (r.max_requests_kv, r.max_requests, r.max_num_seqs) == (452, 256, 256)
    assert not r.fits
    assert r.reason == ("300 requests exceed the engine's request cap max_num_seqs 256 (set): it runs "
                        "at most 256 at once and queues the rest")
    assert r.suggestion == "set --max-num-seqs 300 (the KV pool holds 452)"
    assert r.cuda_graph_sizes[-1] == 512 and len(r.cuda_graph_sizes) == 3 + 31 + 17


def test_sglang_mamba_pool_clamps_max_running_requests() -> None:
    """SGLang 0.5.23, same model and GPUs: mem_fraction_static 0.824 (its default divides nvidia-smi's
    81,559 MiB: reserved 512 + 8192 × 1.5 + 4/8 × 1024 + 512 × 2 = 14,336 MiB); memory held before
    loading 2,704,755,654 B: the NVIDIA context term 546,534,588 B (``SGLANG_HELD_BEFORE_LOAD``) plus,
    at TP 4 over NVLink, the distributed init 2,158,221,066 B (``SGLANG_NVLINK_DIST_INIT``, 2.01 GiB;
    this pin moved from 29,737,497,613 B / 1,274,055 tokens / 728 slots / 145 running when that term
    was added: the budget falls by 2,158,221,066 × 0.824); KV budget int((85,027,979,264 −
    2,704,755,654) × 0.824) − 40,038,825,984 (39,875,212,800 of tensors + 163,613,184 the RoPE cache
    and allocator segments SGLang's loading holds, test_sglang_weights; the pin was 27,959,123,454 B /
    1,198,499 tokens / 684 slots before them) = 27,795,510,270 B; per-request state 19,316,736 B
    (ssm fp32); ``max_mamba_cache_size = int((27,795,510,270 × 0.9 / 1.9 − 19,316,736) //
    19,316,736) = 680``; KV gets 27,795,510,270 − 681 × 19,316,736 → // 12,288 B per token =
    1,191,472 tokens. ``max_running_requests``: min(clamp(int(1,191,472 / 32,768 × 512) = 18,616,
    2,048, 4,096), 595,736) = 4,096, capped to 680 // 5 = 136 (a warning); the KV pool holds
    1,191,472 // 32,768 = 36."""
    r = qwen3_next("sglang")
    assert (r.kv_budget_bytes, r.kv_pool_tokens, r.state_blocks) == (27_795_510_270, 1_191_472, 680)
    assert (r.max_num_seqs, r.starts, r.start_action) == (136, True, "clamps")
    assert (r.max_requests_kv, r.max_requests) == (36, 36)
    assert r.start_reason == ("SGLang 0.5.23 starts but clamps max_running_requests from 4,096 to 136: "
                              "680 Mamba state slots // 5 slots per request (kv_cache_configurator.py "
                              "resolve_max_num_reqs, a warning)")


def test_sglang_max_mamba_cache_size_sets_the_slots() -> None:
    """``--max-mamba-cache-size 50``: 50 slots (``_handle_max_mamba_cache``), KV 27,795,510,270 −
    51 × 19,316,736 = 26,810,356,734 B → 2,181,832 tokens (66 requests of 32,768; 2,195,147 before
    SGLang's load-end weight terms, 2,339,871 before the NVLink distributed-init term, see above);
    the slots allow 50 // 5 = 10 running (the pool itself counts them, ``SGLangPool.max_requests``)."""
    r = qwen3_next("sglang", max_mamba_cache_size=50)
    assert (r.state_blocks, r.kv_pool_tokens, r.max_num_seqs, r.max_requests_kv, r.max_requests) == \
        (50, 2_181_832, 10, 10, 10)


def test_fit_json_carries_the_start_up_fields(tmp_path: object) -> None:
    """``kvplan fit --json`` has ``state_blocks``, ``max_num_seqs``, ``starts`` and the reason."""
    out = subprocess.run([sys.executable, "-m", "kvplan", "fit", "--model", "qwen3-next-80b-a3b", "--gpu",
                          H100, "--num-gpus", "4", "--tp", "4", "--tokens", "32768", "--gpu-util", "0.54",
                          "--engine-version", "0.33", "--json"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert (data["state_blocks"], data["max_num_seqs"], data["starts"], data["start_action"]) == \
        (995, 1024, False, "refuses")  # 1,005 before vLLM's RoPE cache (test_v033_refuses_…)
    assert data["start_reason"].startswith("vLLM v0.33 will refuse to start: max_num_seqs 1,024 > 995")
