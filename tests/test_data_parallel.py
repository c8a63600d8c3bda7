"""Data-parallel attention (issue #28): vLLM ``--data-parallel-size N --enable-expert-parallel``,
SGLang ``--enable-dp-attention --dp N``. Each of the ``dp`` ranks (``tp`` GPUs) keeps its own
requests in its own KV pool; attention, embeddings and the router are held per rank, the routed
experts split over all ``dp × tp`` GPUs (vLLM ``FusedMoEParallelConfig.make``: EP size = dp × tp).

DeepSeek-V3 (61 MLA layers, latent 512 + 64 → 1,152 B per token per layer in bf16, replicated on
every TP rank) on 8 × H200 at 32,768 tokens, vLLM v0.33: a block is 61 × 16 × 1,152 = 1,124,352 B
(FlashAttention-MLA, block 16 on Hopper bf16) and a request 32,768 / 16 = 2,048 blocks.
"""

from __future__ import annotations

import pytest

from kvplan.capacity import fit
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.weights import weights_per_gpu


def v3(tp: int, dp: int, engine: str = "vllm@0.33", users: int = 64):
    return fit(make_plan(load_model("deepseek-v3"), get_gpu("h200"),
                         FitQuery(tokens=32768, users=users, engine=engine, tp=tp, num_gpus=8, dp=dp)))


def test_tp8_replicates_the_latent_dp8_holds_each_ranks_own_requests() -> None:
    """TP 8: 85,161,042,976 B of weights per GPU, KV 50,404,806,912 B // 1,124,352 = 44,830 blocks →
    (44,830 − 1) // 2,048 = 21 requests for the whole replica (every GPU keeps the same latents).
    DP 8 × TP 1: 100,861,659,488 B per GPU (attention whole, experts / 8), KV 34,481,494,062 B →
    30,667 blocks → 14 requests per rank, 8 × 14 = 112 per replica: 64 users fit. Both hold vLLM's
    YaRN RoPE cos/sin cache (``rotary_embedding/base.py``, bf16): 4,096 × 40 positions × 64 × 2 =
    20,971,520 B (85,140,071,456 / 100,840,687,968 B of weights, 44,848 / 30,686 blocks before it)."""
    tp8 = v3(8, 1)
    assert (tp8.weights_bytes, tp8.kv_budget_bytes, tp8.bytes_per_block) == \
        (85_161_042_976, 50_404_806_912, 1_124_352)
    assert (tp8.num_blocks, tp8.blocks_per_request, tp8.max_requests, tp8.dp, tp8.fits) == \
        (44_830, 2048, 21, 1, False)
    dp8 = v3(1, 8)
    assert (dp8.weights_bytes, dp8.kv_budget_bytes, dp8.num_blocks) == \
        (100_861_659_488, 34_481_494_062, 30_667)
    assert (dp8.max_requests_per_rank, dp8.max_requests, dp8.replicas, dp8.dp, dp8.fits) == \
        (14, 112, 1, 8, True)
    assert tp8.suggestion == (
        "at most 21 users or at most 11,200 tokens per request or data-parallel attention on your 8 "
        "GPUs: --data-parallel-size 8 --tensor-parallel-size 1 --enable-expert-parallel (14 per rank, "
        "112 per replica) or 16 GPUs with TP=8, PP=2")


@pytest.mark.parametrize(("tp", "dp"), [(1, 8), (2, 4)])
def test_weights_per_rank_are_the_ranks_parts_with_experts_over_every_gpu(tp: int, dp: int) -> None:
    """Every part as a rank of ``tp`` GPUs holds it, the routed experts as ``dp × tp``-way EP, and
    vLLM's YaRN RoPE cache (163,840 × 64 × 2 = 20,971,520 B, ``rotary_embedding/base.py``)."""
    arch = load_model("deepseek-v3")
    rank = weights_per_gpu(arch, None, tp, 1, 1).heaviest
    wide = weights_per_gpu(arch, None, tp * dp, 1, tp * dp).heaviest
    want = sum(rank.values()) - rank["experts"] + wide["experts"] + 163_840 * 64 * 2
    result = v3(tp, dp)
    assert result.weights_bytes == want
    assert result.weights_breakdown["experts"] == wide["experts"]


def test_sglang_dp_attention_suggestion_names_its_flags() -> None:
    """SGLang: ``--tp`` counts every GPU and ``--dp`` the attention ranks. Both layouts hold SGLang's
    NVLink distributed init before loading (``SGLANG_NVLINK_DIST_INIT``, 2,158,221,066 B at
    ``--tp 8``), scaled by the default fraction, and SGLang's bf16 ``w_kc``/``w_vc`` copy of every
    FP8 ``kv_b_proj`` shard (``weights.mla_absorbed_bytes``: 61 layers × heads per rank × 256 × 512
    × 2 B; TP 8: 16 heads, 255,852,544 B; DP 8: 128 heads, 2,046,820,352 B). TP 8 (0.897): KV
    49,018,308,451 − 1,935,924,296 − 255,852,544 = 46,826,531,611 B // 70,272 B = 666,361 tokens →
    20 requests of 32,768 (21 before both terms; SGLang's load-end terms — the fp32 RoPE cache and
    the allocator's segments, test_sglang_weights.test_what_sglang_holds_at_load_end — take
    214,014,944 B more: 46,612,516,667 B, 663,315 tokens, still 20); DP 8 (0.907 per rank): 34,813,326,052 −
    1,957,506,507 − 2,046,820,352 = 30,808,999,193 B → 438,424 tokens → 13 per rank, 104 (15 and
    120 before both terms)."""
    tp8 = v3(8, 1, "sglang")
    assert (tp8.max_requests, v3(1, 8, "sglang").max_requests) == (20, 104)
    assert (tp8.kv_budget_bytes, tp8.kv_pool_tokens) == (46_612_516_667, 663_315)
    assert "--enable-dp-attention --dp 8 --tp 8 --ep 8 (13 per rank, 104 per replica)" in tp8.suggestion


def test_the_request_cap_is_per_rank() -> None:
    """vLLM's ``max_num_seqs`` applies per data-parallel rank (``config/scheduler.py``): 8 ranks
    with ``--max-num-seqs 4`` run 32 at once, whatever their pools hold (15 each)."""
    r = fit(make_plan(load_model("deepseek-v3"), get_gpu("h200"),
                      FitQuery(tokens=32768, users=64, engine="vllm@0.33", tp=1, num_gpus=8, dp=8,
                               max_num_seqs=4)))
    assert (r.max_requests_kv, r.max_requests_per_rank, r.max_requests, r.fits) == (120, 4, 32, False)
    assert r.reason.startswith("64 requests exceed the engine's request cap max_num_seqs 4 on each of "
                               "8 data-parallel ranks")
    assert r.suggestion == "set --max-num-seqs 8 (the KV pool holds 120)"


def test_gpu_count_must_be_a_multiple_of_dp_tp_pp() -> None:
    from kvplan.errors import KVPlanError

    with pytest.raises(KVPlanError) as err:
        fit(make_plan(load_model("deepseek-v3"), get_gpu("h200"),
                      FitQuery(tokens=32768, engine="vllm@0.33", tp=2, num_gpus=6, dp=2)))
    assert err.value.code == "parallel.gpus"


def test_design_comparison_puts_tp_replicated_and_dp_attention_side_by_side() -> None:
    """DeepSeek-V3 on TP 8: the MLA rows — TP-replicated latent 21 requests, DP attention (8 ranks of
    TP 1, the same GPUs) 112 — with the same 70,272 B per token (61 × 1,152); DP's budget 34,481,494,062
    B after vLLM's 20,971,520 B RoPE cache (34,502,465,582 before it)."""
    from kvplan.designs import design_table

    plan = make_plan(load_model("deepseek-v3"), get_gpu("h200"),
                     FitQuery(tokens=32768, users=64, engine="vllm@0.33", tp=8, num_gpus=8))
    table = design_table(plan).set_index("design")
    assert table.loc["mla", ["kv_bytes_per_token", "max_requests", "fits"]].tolist() == [70_272, 21, False]
    assert table.loc["mla_dp", ["kv_bytes_per_token", "kv_budget_bytes", "max_requests", "fits"]].tolist() \
        == [70_272, 34_481_494_062, 112, True]
    hf = make_plan(load_model("deepseek-v3"), get_gpu("h200"), FitQuery(tokens=32768, engine="hf", tp=8,
                                                                         num_gpus=8))
    assert "mla_dp" not in set(design_table(hf)["design"])  # transformers has no DP attention


def test_sglang_max_running_requests_is_the_servers_split_over_dp_workers() -> None:
    """SGLang ``resolve_max_num_reqs``: ``requested_per_worker = max(1, max_running_requests //
    attn_dp_size)``: ``--max-running-requests 40`` over 8 workers → 5 each, 40 per replica (vLLM's
    ``max_num_seqs`` is per rank instead: ``test_the_request_cap_is_per_rank``)."""
    r = fit(make_plan(load_model("deepseek-v3"), get_gpu("h200"),
                      FitQuery(tokens=32768, users=64, engine="sglang", tp=1, num_gpus=8, dp=8,
                               max_num_seqs=40)))
    assert (r.max_num_seqs, r.max_requests_per_rank, r.max_requests) == (5, 5, 40)
