"""Recommend a deployment: hand-derived memory, TPOT, TTFT and EP cases, calibration, bad inputs,
and the exact-memory guarantee (every candidate's memory figures equal ``capacity.fit``)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from kvplan import recommend as rc
from kvplan.capacity import FitQuery, fit
from kvplan.cli import main
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, get_gpu, gpus, load_model
from kvplan.recommend import RecommendQuery, calibrate_efficiency, decode_time, prefill_time, recommend
from kvplan.serving import LengthDist, parse_lengths_csv

#: The release these numbers are derived for (an explicit key: a newer release changes none).
V033 = "vllm@0.33"

LLAMA8 = load_model("llama-3.1-8b")
LLAMA8_PLAN = make_plan(LLAMA8, None, FitQuery(engine=V033))
LOOSE = {"ttft_ms": 100_000.0, "tpot_ms": 1000.0, "tp": (1,), "pp": (1,), "kv_dtypes": ("bf16",),
         "weight_dtypes": ("auto",)}


def rec_len(rec: rc.Recommendation) -> int:
    return int(rec.lengths.context)


def row(rec: rc.Recommendation, **match: object):
    table = rec.table
    for key, value in match.items():
        table = table[table[key] == value]
    assert len(table) == 1, table
    return table.iloc[0]


def test_memory_decides() -> None:
    """Llama-3.1-8B (8,030,261,248 params, bf16) on vLLM, one user, 1,024 + 256 tokens.

    Weights 2 × 8,030,261,248 = 16,060,522,496 B + vLLM's RoPE cos/sin cache (``rotary_embedding/
    base.py``, bf16) 131,072 × 128 × 2 = 33,554,432 → 16,094,076,928 B. A 16 GiB GPU's target
    ceil(17,179,869,184 × 0.92) = 15,805,479,650 B is below the weights: memory fails. 24 GiB (a
    custom GPU's GiB is its CUDA total): ceil(25,769,803,776 × 0.92) = 23,708,219,474 −
    16,094,076,928 − reserve 880,128,094 = 6,734,014,452 B of KV (6,767,568,884 before the cache). The
    reserve (v0.33 defaults below 70 GiB: max_num_batched_tokens 2,048,
    max_num_seqs 256): activation max(forward 2,048 × (2 × 4,096 + 3 × 14,336) × 2 B = 209,715,200,
    sampler 256 × 128,256 × 10 B = 328,335,360) + non-torch 143,129,785 + CUDA graphs 51 ×
    8,012,999 = 408,662,949. A block is 16 tokens × 32 layers × 8 heads × 128 × 2 (K, V) × 2 B =
    2,097,152 B → 3,211 blocks; a 1,280-token request takes 80 blocks → (3,211 − 1 null) // 80 = 40
    requests. Both meet the loose targets.
    """
    rec = recommend(make_plan(LLAMA8, None, FitQuery(engine=V033)),
                    RecommendQuery(users=1, gpus=("custom:16:1:100", "custom:24:1:100"), **LOOSE))
    small, large = row(rec, gpu="custom:16:1:100"), row(rec, gpu="custom:24:1:100")
    assert small["fails"] == "memory" and not small["feasible"]
    assert large["weights_per_gpu_bytes"] == 16_094_076_928
    assert large["kv_budget_bytes"] == 6_734_014_452
    assert large["kv_bytes_per_request"] == 80 * 2_097_152
    assert large["max_requests"] == 40
    assert large["feasible"] and rec.ranked["gpu"].tolist() == ["custom:24:1:100"]


def test_tpot_decides_bandwidth_bound_decode() -> None:
    """80 GiB, 1 TB/s, 10⁶ TFLOPS (compute negligible), TP 1: ``TPOT(B) = (16,094,076,928 + B ×
    167,772,160) / 10¹² s`` (the weights with vLLM's 33,554,432 B RoPE cache; 16,060,522,496 before
    it). TPOT ≤ 20 ms → B ≤ (2·10¹⁰ − 16,094,076,928) / 167,772,160 = 23.28 → B_max = 23; 100 users
    → ceil(100 / 23) = 5 replicas of ceil(100 / 5) = 20 users: TPOT(20) = 19,449,520,128 / 10¹² =
    19.449520 ms. A 15 ms target is below TPOT(1) = 16.262 ms."""
    gpu = "custom:80:1:1000000"
    rec = recommend(LLAMA8_PLAN, RecommendQuery(users=100, gpus=(gpu,), **{**LOOSE, "tpot_ms": 20.0}))
    best = row(rec, gpu=gpu)
    assert best["max_batch_tpot"] == 23 and best["replicas"] == 5 and best["batch"] == 20
    assert best["tpot_ms"] == pytest.approx(19.449520128, rel=1e-6)
    assert best["total_gpus"] == 5 and best["cost_per_hour"] == 5.0
    rec = recommend(LLAMA8_PLAN, RecommendQuery(users=100, gpus=(gpu,), **{**LOOSE, "tpot_ms": 15.0}))
    assert row(rec, gpu=gpu)["fails"] == "TPOT"
    assert "TPOT" in rec.message and "16.26 ms against 15 ms" in rec.message


def test_ttft_decides_long_prompts() -> None:
    """32,768-token prompts on 100 TFLOPS (100 TB/s: decode is cheap). Prefill FLOPs (``flops``
    module formulas): per token per layer dense 83,886,080 + 352,321,536 = 436,207,616, attention
    16,384·ctx; 32 × (436,207,616 × 32,768 + 16,384 × 32,768·32,769/2) + 2·4,096·128,256 =
    738,881,454,473,216. TP 1: 7,388.81 ms > 2,000 ms. TP 8: 923.60 ms + all-reduce 2·32·2·(7/8) ×
    32,768 × 4,096 × 2 B = 30,064,771,072 B over 32 GB/s (no interconnect: PCIe) = 939.52 ms → 1,863.13 ms."""
    query = RecommendQuery(users=1, prompt=LengthDist(value=32768), output=LengthDist(value=16),
                           gpus=("custom:80:100:100",), **{**LOOSE, "tp": (1, 8), "ttft_ms": 2000.0})
    rec = recommend(LLAMA8_PLAN, query)
    assert rec.lengths.prompt == 32768
    one, eight = row(rec, tp=1), row(rec, tp=8)
    assert one["fails"] == "TTFT"
    assert one["ttft_ms"] == pytest.approx(7388.81454473216, rel=1e-9)
    assert eight["ttft_ms"] == pytest.approx(923.60181809152 + 939.52409600, rel=1e-9)
    assert eight["feasible"]


def test_expert_parallel_changes_the_answer() -> None:
    """DeepSeek-V2-Lite (MLA, 15,706,484,224 params, 26 MoE layers × 64 experts × 3 × 2,048 × 1,408
    = 14,394,851,328 expert params) on two 40 GiB GPUs, 1,000 users of 1,280 tokens.

    Latent per token 27 layers × 576 × 2 B = 31,104 B; block 497,664 B; a request 80 blocks. Target
    ceil(42,949,672,960 × 0.92) = 39,513,699,124 B. Reserve (below 70 GiB: 2,048 batched tokens, 256
    seqs): activation = the sampler 256 × 102,400 × 10 B = 262,144,000 (forward 136,839,168), CUDA
    graphs 51 sizes, non-torch; TP 2: 262,144,000 + 590,558,003 + 51 × 10,416,899 = 1,383,963,852 B;
    TP 1: 262,144,000 + 143,129,785 + 408,662,949 = 813,936,734 B. TP 2 (vLLM replicates the latent
    on each rank): weights 15,762,840,576 B/GPU (``kvplan.weights``: replicated norms and router,
    vocab padded to 64, the rest split over 2 ranks; + vLLM's YaRN RoPE cache 163,840 × 64 × 2 =
    20,971,520 B, ``rotary_embedding/base.py``), KV 39,513,699,124 − 15,762,840,576 −
    1,383,963,852 = 22,366,894,696 B → 44,943 blocks → (44,943 − 1) // 80 = 561 requests of KV,
    capped at max_num_seqs 256 (the v0.33 default below 70 GiB, ``get_batch_defaults``) per replica
    → 4 replicas (8 GPUs). EP 2 (attention data-parallel, each rank TP 1): 2,623,265,792
    non-expert B + 28,789,702,656 / 2 + the RoPE cache 20,971,520 = 17,039,088,640 B/GPU, KV
    39,513,699,124 − 17,039,088,640 − 813,936,734 = 21,660,673,750 B → 43,524 blocks → 544 per rank
    of KV (before the cache: 15,741,869,056 / 22,387,866,216 B, 562; 17,018,117,120 /
    21,681,645,270 B), 256 per rank by
    max_num_seqs (a per-rank cap), 512 per replica → 2 replicas (4 GPUs): EP halves the GPUs.
    """
    arch = load_model("deepseek-v2-lite")
    query = RecommendQuery(users=1000, gpus=("custom:40:2:400",), max_gpus=2,
                           **{**LOOSE, "tp": (2,), "expert_parallel": False})
    tp_only = recommend(make_plan(arch, None, FitQuery(engine=V033)), query)
    tp2 = row(tp_only, tp=2)
    assert (tp2["weights_per_gpu_bytes"], tp2["kv_budget_bytes"]) == (15_762_840_576, 22_366_894_696)
    assert (tp2["max_requests"], tp2["replicas"], tp2["total_gpus"]) == (256, 4, 8)
    both = recommend(make_plan(arch, None, FitQuery(engine=V033)),
                     query.model_copy(update={"expert_parallel": True}))
    ep2 = row(both, ep=2)
    assert (ep2["weights_per_gpu_bytes"], ep2["kv_budget_bytes"]) == (17_039_088_640, 21_660_673_750)
    assert (ep2["max_requests"], ep2["replicas"], ep2["total_gpus"]) == (512, 2, 4)
    # an EP candidate is fit's data-parallel-attention layout: dp = ep ranks of TP 1
    dp = fit(make_plan(arch, custom_gpu(40, 2, 400), FitQuery(engine=V033, tokens=rec_len(both), tp=1,
                                                              dp=2, num_gpus=2, users=1000)))
    assert (dp.weights_bytes, dp.kv_budget_bytes, dp.max_requests) == \
        (ep2["weights_per_gpu_bytes"], ep2["kv_budget_bytes"], ep2["max_requests"])
    assert both.ranked.iloc[0]["ep"] == 2 and tp_only.ranked.iloc[0]["tp"] == 2


def test_no_feasible_candidate_names_the_tightest_constraint() -> None:
    """Llama-3.1-405B bf16 (≈ 811 GB) on one 24 GB L4 per replica: only memory fails."""
    rec = recommend(make_plan(load_model("llama-3.1-405b"), None, FitQuery()), RecommendQuery(gpus=("l4",),
                                                                                              max_gpus=1, **{
        k: v for k, v in LOOSE.items() if k != "tp"}))
    assert not rec.table["feasible"].any() and rec.ranked.empty
    assert rec.message == ("no candidate meets every constraint; the tightest is memory (0 of 1 "
                           "candidates meet it): no layout holds the weights and one request; the "
                           "largest KV budget left is 0 B per GPU")


def test_efficiency_calibration_round_trips() -> None:
    """A decode tokens/s and a TTFT computed with e = 0.55 (TP 2: the communication term is not
    scaled) give back 0.55."""
    gpu = get_gpu("h100-sxm")
    base = FitQuery(tp=2, kv_dtype="fp8_e4m3")
    terms = rc.single_terms(make_plan(LLAMA8, gpu, base), 4096, efficiency=0.55)
    step = decode_time(terms, np.asarray([32]), rc.decode_token_flops(LLAMA8, 4096))[0][0]
    assert calibrate_efficiency(make_plan(LLAMA8, gpu, base), 32 / step, "decode", batch=32,
                                context_tokens=4096) == pytest.approx(0.55, rel=1e-12)
    ttft = prefill_time(terms, 2048, rc.prefill_flops(LLAMA8, 2048))[0][0]
    assert calibrate_efficiency(make_plan(LLAMA8, gpu, base), ttft * 1e3, "prefill", prompt_tokens=2048,
                                context_tokens=4096) == pytest.approx(0.55, rel=1e-12)
    with pytest.raises(KVPlanError) as err:
        calibrate_efficiency(make_plan(LLAMA8, gpu, base), 1e-9, "prefill", prompt_tokens=2048)
    assert err.value.code == "recommend.calibrate"


@pytest.mark.parametrize(("update", "code"), [
    ({"gpus": ()}, "recommend.empty"),
    ({"kv_dtypes": ()}, "recommend.empty"),
    ({"users": 0}, "recommend.traffic"),
    ({"traffic": "rps", "rps": 0.0}, "recommend.traffic"),
    ({"ttft_ms": 0.0}, "recommend.targets"),
    ({"tpot_ms": float("nan")}, "recommend.targets"),
    ({"gpus": ("no-such-gpu",)}, "unknown.gpu"),
    ({"output": LengthDist(value=1), "max_context": 2, "prompt": LengthDist(value=5)}, None),
])
def test_bad_inputs_get_named_messages(update: dict, code: str | None) -> None:
    query = RecommendQuery(**{**LOOSE, **update})
    if code is None:  # clipped to 1 prompt + 1 output token: still a valid search
        assert recommend(LLAMA8_PLAN, query).lengths.context == 2
        return
    with pytest.raises(KVPlanError) as err:
        recommend(LLAMA8_PLAN, query)
    assert err.value.code == code


def test_too_many_candidates_and_malformed_csv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rc, "MAX_CANDIDATES", 10)
    with pytest.raises(KVPlanError, match="more than the 10 the search allows"):
        recommend(LLAMA8_PLAN, RecommendQuery())
    with pytest.raises(KVPlanError, match="row 2"):
        parse_lengths_csv("prompt,output\n12,x\n")
    with pytest.raises(KVPlanError, match="no output tokens"):
        recommend(LLAMA8_PLAN, RecommendQuery(**LOOSE), parse_lengths_csv("5,0\n7,0\n"))


def test_search_time_is_bounded_for_extreme_inputs() -> None:
    """Huge traffic, 10M-token contexts and the whole catalogue still answer within seconds."""
    query = RecommendQuery(traffic="rps", rps=1e7, prompt=LengthDist(value=10_000_000),
                           output=LengthDist(value=10_000_000), max_context=100_000_000, max_gpus=64)
    start = time.perf_counter()
    rec = recommend(make_plan(load_model("llama-4-scout"), None, FitQuery()), query)
    assert time.perf_counter() - start < 10
    assert len(rec.table) > 0 and rec.message is not None


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "trtllm@1.1", "hf"])
@pytest.mark.parametrize("model_id", ["llama-3.1-70b", "gemma-3-27b", "deepseek-v2-lite",
                                      "qwen3-next-80b-a3b"])
def test_memory_figures_equal_capacity_fit(engine: str, model_id: str) -> None:
    """Every non-EP candidate's weights, KV budget, KV per request and max requests are ``fit``'s
    (TensorRT-LLM's PyTorch backend has no DeepSeek-V2 class: that pair is refused, not sized)."""
    if (engine.partition("@")[0], model_id) == ("trtllm", "deepseek-v2-lite"):
        with pytest.raises(KVPlanError) as err:
            fit(make_plan(load_model(model_id), gpus()["h100-sxm"], FitQuery(engine=engine)))
        assert err.value.code == "engine.unserved"
        return
    arch = load_model(model_id)
    query = RecommendQuery(tp=(1, 2), pp=(1, 2), kv_dtypes=("bf16", "fp8_e4m3"),
                           weight_dtypes=("auto", "fp8"), expert_parallel=False, **{
                               k: v for k, v in LOOSE.items()
                               if k not in {"tp", "pp", "kv_dtypes", "weight_dtypes"}})
    rec = recommend(make_plan(arch, None, FitQuery(engine=engine)), query)
    catalogue = gpus()
    L = rec.lengths.context
    checked = 0
    for cand in rec.table.itertuples():
        q = FitQuery(engine=engine, tokens=L, tp=cand.tp, pp=cand.pp, kv_dtype=cand.kv_dtype,
                     weight_dtype=None if cand.weight_dtype == "auto" else cand.weight_dtype)
        try:
            want = fit(make_plan(arch, catalogue[cand.gpu], q), search_gpus=False)
        except KVPlanError:
            continue
        assert cand.weights_per_gpu_bytes == want.weights_bytes
        assert cand.kv_budget_bytes == want.kv_budget_bytes
        assert cand.kv_bytes_per_request == want.kv_bytes_per_request
        assert cand.max_requests == (want.max_requests if want.weights_fit else 0), cand
        checked += 1
    assert checked >= len(catalogue)


def test_cli_recommend_json_and_errors(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    code = main(["recommend", "--model", "llama-3.1-8b", "--users", "1", "--gpus",
                 "custom:16:1:100,custom:24:1:100", "--tp", "1", "--pp", "1", "--kv-dtypes", "bf16",
                 "--ttft-ms", "100000", "--tpot-ms", "1000", "--json", "--engine-version", "0.33",
                 "--weight-dtypes", "auto"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["kind"] == "bounds" and out["feasible"] == 1
    first = out["table"][0]
    # test_memory_decides' 24 GiB row (6,767,568,884 before vLLM's 33,554,432 B RoPE cache)
    assert (first["gpu"], first["max_requests"], first["kv_budget_bytes"]) == ("custom:24:1:100", 40,
                                                                               6_734_014_452)
    assert first["link"] == "?v=1&ev=0.33&kd=bf16&g=custom&gm=24.0&gb=1.0&gf=100.0&t=1280&u=1"
    assert out["failures"] == {"memory": 1, "TTFT": 0, "TPOT": 0, "GPU limit": 0, "format": 0}
    bad = tmp_path / "lengths.csv"
    bad.write_text("prompt,output\n10,ten\n")
    assert main(["recommend", "--model", "llama-3.1-8b", "--lengths-csv", str(bad)]) == 2
    assert "request-length CSV is invalid: row 2" in capsys.readouterr().err
    assert main(["recommend", "--model", "llama-3.1-8b", "--tpot-ms", "-1"]) == 2
    assert "impossible latency targets" in capsys.readouterr().err


def test_prices_turn_gpu_hours_into_money() -> None:
    """Prices from the table (presets/prices.json): the lowest on-demand quote (H100 Lambda 2.99,
    H200 packet.ai 2.25 per GPU-hour), or of the kind asked (reserved: AWS Capacity Blocks 4.916);
    accelerators without one (L4) are listed apart in GPU-hours, unless the user prices them; with no
    price at all the costs are GPU-hours (price 1)."""
    query = RecommendQuery(users=64, gpus=("h100-sxm", "h200"), **LOOSE)
    rec = recommend(LLAMA8_PLAN, query)
    assert rec.cost_unit == "$"
    h100 = row(rec, gpu="h100-sxm")
    assert h100["cost_per_hour"] == pytest.approx(h100["total_gpus"] * 2.99)
    assert row(rec, gpu="h200")["cost_per_hour"] == pytest.approx(row(rec, gpu="h200")["total_gpus"] * 2.25)
    reserved = recommend(LLAMA8_PLAN, query.model_copy(update={"price_kind": "reserved"}))
    assert row(reserved, gpu="h100-sxm")["cost_per_hour"] == pytest.approx(h100["total_gpus"] * 4.916)
    mixed = recommend(LLAMA8_PLAN, query.model_copy(update={"gpus": ("h100-sxm", "l4")}))
    assert mixed.cost_unit == "$" and math.isnan(row(mixed, gpu="l4")["cost_per_hour"])
    assert set(mixed.ranked["gpu"].astype(str)) == {"h100-sxm"}
    assert set(mixed.unpriced_ranked["gpu"].astype(str)) == {"l4"}
    l4 = mixed.unpriced_ranked.iloc[0]
    assert l4["gpu_hours_per_m_tokens"] > 0 and not l4["priced"]
    priced = recommend(LLAMA8_PLAN, query.model_copy(update={"gpus": ("h100-sxm", "l4"),
                                                             "prices": {"l4": 0.5}}))
    assert priced.cost_unit == "$" and row(priced, gpu="l4")["cost_per_hour"] == pytest.approx(
        row(priced, gpu="l4")["total_gpus"] * 0.5)
    none = recommend(LLAMA8_PLAN, query.model_copy(update={"gpus": ("l4",)}))
    assert none.cost_unit == "GPU-hours" and row(none, gpu="l4")["cost_per_hour"] == row(none, gpu="l4")[
        "total_gpus"]


def test_cli_calibrates_the_efficiency_from_a_measured_ttft(capsys: pytest.CaptureFixture[str]) -> None:
    """A TTFT computed with e = 0.5 on an H100 (TP 1: no communication term) gives e = 0.5 back,
    used for that accelerator."""
    gpu = get_gpu("h100-sxm")
    terms = rc.single_terms(make_plan(LLAMA8, gpu, FitQuery()), 2048, efficiency=0.5)
    ttft_ms = float(prefill_time(terms, 1024, rc.prefill_flops(LLAMA8, 1024))[0][0]) * 1e3
    assert main(["recommend", "--model", "llama-3.1-8b", "--gpus", "h100-sxm", "--tp", "1", "--pp", "1",
                 "--kv-dtypes", "bf16", "--measured-gpu", "h100-sxm", "--measured-ttft-ms", repr(ttft_ms),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["efficiency"]["h100-sxm"] == pytest.approx(0.5, rel=1e-9)


def test_requests_per_second_sets_the_replicas() -> None:
    """10 requests/s of 1,024 + 256 tokens on the TPOT-test GPU (80 GiB, 1 TB/s, compute negligible),
    TPOT ≤ 20 ms → B_max = 23. TPOT(23) = (16,094,076,928 + 23 × 167,772,160) / 10¹² = 19.952837 ms
    (the weights with vLLM's 33,554,432 B RoPE cache; 19.919282 before it); the mean prefill reads
    the weights once: 16.094077 ms. tokens/s = 256·23 / (256 × 0.019952837 + 23 × 0.016094077) =
    1,074.83; 10 × 256 = 2,560 tokens/s → 3 replicas; 3 GPU-hours per hour over
    2,560 × 3,600 tokens = 0.325521 GPU-hours per million output tokens."""
    gpu = "custom:80:1:1000000"
    query = RecommendQuery(traffic="rps", rps=10.0, gpus=(gpu,), **{**LOOSE, "tpot_ms": 20.0})
    best = row(recommend(LLAMA8_PLAN, query), gpu=gpu)
    assert (best["max_batch_tpot"], best["replicas"], best["total_gpus"]) == (23, 3, 3)
    assert best["tpot_ms"] == pytest.approx(19.952836608, rel=1e-6)
    assert best["tokens_per_s_per_replica"] == pytest.approx(5888 / (256 * 0.019952836608
                                                                     + 23 * 0.016094076928), rel=1e-6)
    assert best["cost_per_m_tokens"] == pytest.approx(3 / (2560 * 3600) * 1e6, rel=1e-12)


def test_expert_parallel_only_where_the_engine_has_it() -> None:
    """transformers has no expert parallelism: no EP layout for it; vLLM offers EP 2, 4, 8."""
    arch = load_model("qwen3-30b-a3b")
    query = RecommendQuery(gpus=("h100-sxm",), **{**LOOSE, "tp": (1,)})
    assert sorted(set(recommend(make_plan(arch, None, FitQuery(engine="vllm")), query).table["ep"])) == [1, 2,
                                                                                                         4, 8]
    assert set(recommend(make_plan(arch, None, FitQuery(engine="hf")), query).table["ep"]) == {1}


def test_fp8_and_fp4_searched_by_default_where_supported() -> None:
    """No weight formats given: auto, fp8, nvfp4, mxfp4 for an unquantized checkpoint, each only on
    accelerators with its tensor cores (H100: fp8, not FP4; B200: all; A100: neither), the others
    failing "format"; formats asked for run everywhere. The time bounds take the format's rate:
    nvfp4 on a B200 prefills at 9,000 TFLOPS, so its TTFT bound is at most the bf16 one / 4."""
    base = {k: v for k, v in LOOSE.items() if k != "weight_dtypes"}
    rec = recommend(LLAMA8_PLAN, RecommendQuery(users=1, gpus=("h100-sxm", "b200", "a100-80gb-sxm"),
                                                **base))
    fails = {(str(r.gpu), str(r.weight_dtype)): str(r.fails) for r in rec.table.itertuples()}
    formats = ("auto", "fp8", "nvfp4", "mxfp4")
    assert {str(w) for w in rec.table["weight_dtype"].cat.categories} == set(formats)
    assert [w for w in formats if "format" in fails["h100-sxm", w]] == ["nvfp4", "mxfp4"]
    assert [w for w in formats if "format" in fails["b200", w]] == []
    assert [w for w in formats if "format" in fails["a100-80gb-sxm", w]] == ["fp8", "nvfp4", "mxfp4"]
    b200 = rec.table[rec.table["gpu"] == "b200"].set_index("weight_dtype")
    assert b200.loc["nvfp4", "ttft_ms"] < b200.loc["auto", "ttft_ms"] / 3
    asked = recommend(LLAMA8_PLAN, RecommendQuery(users=1, gpus=("h100-sxm",), **{**base,
                                                  "weight_dtypes": ("nvfp4",)}))
    assert "format" not in str(asked.table["fails"].iloc[0])
    quantized = make_plan(load_model("Qwen/Qwen3-32B-FP8"), None, FitQuery(engine=V033))
    assert quantized.arch.weights.quantization is not None
    q = recommend(quantized, RecommendQuery(users=1, gpus=("h100-sxm",), **base))
    assert list(q.table["weight_dtype"].cat.categories) == ["auto"]


def test_estimated_gpus_beside_the_lower_bound() -> None:
    """Each candidate also carries the estimate's GPUs, TPOT and TTFT: the bounds' step model over
    the accelerator's phase efficiencies (H100: e_decode 0.7571, e_prefill 0.5864). One user: TPOT =
    the batch-1 decode step at e_decode (rc.single_terms at that efficiency); the estimate never
    needs fewer GPUs than the lower bound."""
    from kvplan.presets import efficiency_for

    gpu = get_gpu("h100-sxm")
    rec = recommend(LLAMA8_PLAN, RecommendQuery(users=1, gpus=("h100-sxm",), **LOOSE))
    cand = rec.table.iloc[0]
    eff = efficiency_for("h100-sxm")
    L = rec.lengths.context
    terms = rc.single_terms(make_plan(LLAMA8, gpu, FitQuery(engine=V033)), L, efficiency=eff.decode)
    want = float(decode_time(terms, np.ones(1), rc.decode_token_flops(LLAMA8, L))[0][0]) * 1e3
    assert cand["estimate_tpot_ms"] == pytest.approx(want, rel=1e-12)
    pre = rc.single_terms(make_plan(LLAMA8, gpu, FitQuery(engine=V033)), L, efficiency=eff.prefill)
    prompt = rec.lengths.prompt
    ttft = float(prefill_time(pre, prompt, rc.prefill_flops(LLAMA8, prompt))[0][0]) * 1e3
    assert cand["estimate_ttft_ms"] == pytest.approx(ttft, rel=1e-12)
    many = recommend(LLAMA8_PLAN, RecommendQuery(users=5000, gpus=("h100-sxm", "h200"),
                                                 **{**LOOSE, "tpot_ms": 30.0}))
    ok = many.table[many.table["feasible"] & (many.table["estimate_total_gpus"] > 0)]
    assert len(ok) > 0 and (ok["estimate_total_gpus"] >= ok["total_gpus"]).all()
    assert (ok["estimate_total_gpus"] > ok["total_gpus"]).any()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_expert_parallel_memory_is_the_plans_dp_layout(engine: str) -> None:
    """EP candidates are attention data-parallel over ep ranks (the engines' dp setting): weights per
    GPU, KV budget, KV per request and requests equal capacity.fit of the Plan with dp = ep, byte for
    byte (Qwen3-30B-A3B on H100, EP 2/4/8; before, a params-proportional expert share was 11–20 kB
    off the Plan's weights)."""
    from kvplan.capacity import fit

    arch = load_model("qwen3-30b-a3b")
    plan = make_plan(arch, None, FitQuery(engine=engine))
    rec = recommend(plan, RecommendQuery(users=64, gpus=("h100-sxm",), **LOOSE))
    gpu = get_gpu("h100-sxm")
    for ep in (2, 4, 8):
        cand = rec.table[rec.table["ep"] == ep].iloc[0]
        dp = plan.vary(gpu=gpu, tp=1, pp=1, num_gpus=ep, tokens=rec.lengths.context,
                       settings=plan.query.settings.model_copy(update={"dp": ep}))
        want = fit(dp, search_gpus=False)
        assert (cand["weights_per_gpu_bytes"], cand["kv_budget_bytes"], cand["kv_bytes_per_request"],
                cand["max_requests"]) == (want.weights_bytes, want.kv_budget_bytes, want.kv_bytes_per_request,
                                          want.max_requests), ep


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_dp_attention_candidates_with_tp_ranks(engine: str) -> None:
    """MoE candidates also run dp attention ranks of TP > 1 (experts over ep = tp·dp GPUs): their
    memory equals capacity.fit of the Plan with that tp and dp, and their link opens that layout
    (the dp setting; Qwen3-30B-A3B on H100, TP 2 × DP 2/4, TP 4 × DP 2)."""
    from kvplan.capacity import fit
    from kvplan.scenario import Scenario

    arch = load_model("qwen3-30b-a3b")
    plan = make_plan(arch, None, FitQuery(engine=engine))
    rec = recommend(plan, RecommendQuery(users=64, gpus=("h100-sxm",), **{**LOOSE, "tp": None}))
    table = rec.table
    assert {(2, 2, 4), (2, 4, 8), (4, 2, 8)} <= set(zip(table.tp, table.dp, table.ep, strict=True))
    gpu = get_gpu("h100-sxm")
    for tp, dp in ((2, 2), (2, 4), (4, 2)):
        cand = table[(table.tp == tp) & (table.dp == dp)].iloc[0]
        layout = plan.vary(gpu=gpu, tp=tp, pp=1, num_gpus=tp * dp, tokens=rec.lengths.context,
                           settings=plan.query.settings.model_copy(update={"dp": dp}))
        want = fit(layout, search_gpus=False)
        assert (cand["weights_per_gpu_bytes"], cand["kv_budget_bytes"], cand["max_requests"]) == (
            want.weights_bytes, want.kv_budget_bytes, want.max_requests)
        opened = rc.candidate_scenario(next(table[(table.tp == tp) & (table.dp == dp)].head(1).itertuples()),
                                       Scenario(model="qwen3-30b-a3b", engine=engine), rec.lengths)
        assert (opened.tp, opened.engine_settings.dp) == (tp, dp) and opened.num_gpus % (tp * dp) == 0


@pytest.mark.parametrize("model_id", ["qwen3-next-80b-a3b", "llama-3.1-70b"])
def test_request_caps_equal_the_start_up_check_row_by_row(model_id: str) -> None:
    """``Vllm.request_caps`` (once per distinct block count, remembered per model/GPU/settings) equals
    the start-up check run on each of 400 budget rows: for a hybrid model (the cap follows the
    Mamba state blocks) and an attention-only one, on v0.33 (refuses) and v0.19 (clamps, starts)."""
    arch = load_model(model_id)
    for engine_id in (V033, "vllm@0.19"):
        plan = make_plan(arch, gpus()["h100-sxm"], FitQuery(engine=engine_id, tokens=4096, tp=4))
        engine, settings, pool = plan.engine, plan.settings, plan.pool
        per_block = int(pool.stage_per_block[0])
        budgets = (np.arange(400, dtype=np.int64) * 7 + 1)[:, None] * per_block  # 1 … 2,794 blocks
        caps = engine.request_caps(arch, plan.device, settings, pool, 4096, budgets)
        assert caps is not None
        again = engine.request_caps(arch, plan.device, settings, pool, 4096, budgets)
        want = [(lambda c: c.max_num_seqs if c.starts and c.max_num_seqs else 0)(
            engine._startup(arch, plan.device, settings, int(n) // per_block)) for n in budgets[:, 0]]
        assert caps.tolist() == want and again.tolist() == want
        seqs = settings.max_num_seqs
        if arch.has_recurrent and engine_id == V033:  # refused while max_num_seqs > state blocks
            assert want[0] == 0 and want[-1] == seqs and want.count(0) == sum(
                int(n) // per_block < seqs for n in budgets[:, 0])
        else:
            assert set(want) == {seqs}


def test_weights_follow_each_accelerators_loading_rules() -> None:
    """gpt-oss-20b (MXFP4 experts) on vLLM v0.33: the experts are re-laid out per accelerator
    (``Engine.loading_rules``: TRT-LLM layout on SM 10.x, Triton on SM 9.0, Marlin elsewhere), so the
    weights per GPU differ by accelerator; every candidate's weights, KV budget and max requests
    equal ``fit``'s on its own accelerator (the recommender once sized every GPU with the first
    one's rules: 28 of 46 candidates off, when the catalogue had 23 accelerators). Each holds vLLM's
    YaRN RoPE cache, 131,072 × 64 × 2 = 16,777,216 B (14,692,990,080 / 13,761,264,768 before it)."""
    arch = load_model("gpt-oss-20b")
    query = RecommendQuery(**{**LOOSE, "tp": (1, 2)}, expert_parallel=False)
    rec = recommend(make_plan(arch, None, FitQuery(engine=V033)), query)
    weights = {str(r.gpu): int(r.weights_per_gpu_bytes) for r in rec.table[rec.table["tp"] == 1].itertuples()}
    assert (weights["b200"], weights["gaudi3"]) == (14_709_767_296, 13_778_041_984)
    assert len(set(weights.values())) >= 3
    checked = 0
    for cand in rec.table.itertuples():
        q = FitQuery(engine=V033, tokens=rec.lengths.context, tp=cand.tp, kv_dtype=cand.kv_dtype)
        try:
            want = fit(make_plan(arch, gpus()[cand.gpu], q), search_gpus=False)
        except KVPlanError:
            continue
        assert (cand.weights_per_gpu_bytes, cand.kv_budget_bytes, cand.max_requests) == (
            want.weights_bytes, want.kv_budget_bytes, want.max_requests if want.weights_fit else 0), cand
        checked += 1
    # 32 accelerators × TP 1/2 (46 before issue #30 added 4 parts: +4 × 2; 54 before the rtx-3090,
    # rtx-a6000, gb10, r9700 and rx-7900-xt of the public vLLM logs: +5 × 2)
    assert checked == 64


def test_plan_with_weight_dtype_equals_vary() -> None:
    """``Plan.with_weight_dtype`` (the recommender's sweep over formats) shares the resolved settings
    and gives ``vary(weight_dtype=…)``'s weights and budget: Llama-3.1-70B, TP 2, on an H100 and a B200."""
    for gpu in ("h100-sxm", "b200"):
        plan = make_plan(load_model("llama-3.1-70b"), gpus()[gpu], FitQuery(engine=V033, tp=2))
        for fmt in (None, "fp8", "nvfp4", "int4_g128"):
            shared, fresh = plan.with_weight_dtype(fmt), plan.vary(weight_dtype=fmt)
            assert shared.settings is plan.settings and shared.settings == fresh.settings
            assert shared.weights == fresh.weights and shared.budget == fresh.budget
    assert plan.with_weight_dtype("fp8").weights.total_bytes < plan.weights.total_bytes


def test_expert_parallel_memory_on_every_accelerator() -> None:
    """gpt-oss-20b on vLLM v0.33 over the whole catalogue, TP 1/2 and the EP/DP layouts: every
    candidate's weights, KV budget, KV per request and max requests equal ``fit`` of the Plan with
    its dp setting, byte for byte, on its own accelerator's loading rules."""
    arch = load_model("gpt-oss-20b")
    plan = make_plan(arch, None, FitQuery(engine=V033))
    rec = recommend(plan, RecommendQuery(**{**LOOSE, "tp": (1, 2)}))
    catalogue, checked = gpus(), 0
    assert set(rec.table["dp"]) == {1, 2, 4, 8}
    for c in rec.table.itertuples():
        settings = plan.query.settings.model_copy(update={"dp": int(c.dp)})
        q = FitQuery(engine=V033, tokens=rec.lengths.context, tp=c.tp, num_gpus=c.tp * c.dp,
                     settings=settings)
        try:
            want = fit(make_plan(arch, catalogue[c.gpu], q), search_gpus=False)
        except KVPlanError:
            continue
        assert (c.weights_per_gpu_bytes, c.kv_budget_bytes, c.kv_bytes_per_request, c.max_requests) == (
            want.weights_bytes, want.kv_budget_bytes, want.kv_bytes_per_request,
            want.max_requests if want.weights_fit else 0), c
        checked += 1
    # 32 accelerators × 7 layouts, none refused (161 = 23 × 7 before issue #30 added rtx-6000-ada,
    # rtx-pro-6000, a40 and mi210; 189 = 27 × 7 before rtx-3090, rtx-a6000, gb10, r9700, rx-7900-xt)
    assert (checked, len(rec.table)) == (224, 224)


def test_single_layout_terms_take_the_formats_rate() -> None:
    """``single_terms`` (``calibrate_efficiency``, ``pd_ratio``) reads the rate of the recommender's
    rule (``rate_format``): on a B200 (bf16 2,250, fp8 4,500, fp4 9,000, int8 4,500 TFLOPS) nvfp4
    weights at 9,000, int8 at 4,500, int4 at bf16's 2,250, a quantized checkpoint's own format at
    the fastest (gpt-oss-20b: 9,000); it read fp8 or bf16 only."""
    b200 = gpus()["b200"]
    plan = make_plan(load_model("llama-3.1-8b"), b200, FitQuery(engine=V033))
    rates = {fmt: float(rc.single_terms(plan.vary(weight_dtype=fmt), 2048).flops[0]) / 1e12
             for fmt in (None, "fp8", "nvfp4", "int8", "int4_g128")}
    assert rates == {None: 2250, "fp8": 4500, "nvfp4": 9000, "int8": 4500, "int4_g128": 2250}
    oss = make_plan(load_model("gpt-oss-20b"), b200, FitQuery(engine=V033))
    assert float(rc.single_terms(oss, 2048).flops[0]) == 9000e12
    assert rc.rate_format(oss.arch, None) == "nvfp4" and rc.rate_format(plan.arch, "auto") == "bf16"


@pytest.mark.parametrize("engine", ["vllm@0.33", "vllm@0.9", "sglang", "trtllm", "hf"])
def test_other_instances_on_the_gpu_count_in_every_candidate(engine: str) -> None:
    """A plan that states other instances on the GPU (``FitQuery.held_by_others``, as ``kvplan share``
    asks) gets every candidate's budget by the engine's rule beside them (``Engine.beside_others``):
    each candidate's KV budget and requests are those of ``fit`` on the plan with the same others,
    and a candidate whose engine refuses to start (``Budget.refusal``: vLLM v0.9.1+'s free-memory
    check) fits no request. 20 GiB held: vLLM 0.33 asks for 0.92 of the device, so it starts only
    where 20 GiB ≤ 8 % of the CUDA total (≥ 250 GiB: none of the catalogue's 80/141/180 GiB cards
    in this search); v0.9.0's budget loses the 20 GiB; SGLang's free memory before loading loses
    them; TensorRT-LLM's fraction applies after them; HF's budget loses them."""
    others = 20 << 30
    base = make_plan(LLAMA8, None, FitQuery(engine=engine, held_by_others=others))
    query = RecommendQuery(gpus=("h100-sxm", "h200", "a100-80gb-sxm"), expert_parallel=False, **LOOSE)
    rec = recommend(base, query)
    assert any(n.startswith(f"{others:,} B held by other instances") for n in rec.notes)
    catalogue = gpus()
    alone = recommend(make_plan(LLAMA8, None, FitQuery(engine=engine)), query)
    checked = 0
    for cand in rec.table.itertuples():
        plan = make_plan(LLAMA8, catalogue[cand.gpu], FitQuery(
            engine=engine, tokens=rec.lengths.context, tp=cand.tp, pp=cand.pp, kv_dtype=cand.kv_dtype,
            held_by_others=others))
        want = fit(plan, search_gpus=False)
        refused = plan.budget.refusal is not None
        assert cand.kv_budget_bytes == (0 if refused else want.kv_budget_bytes), cand
        assert cand.max_requests == (0 if refused or not want.weights_fit else want.max_requests), cand
        before = row(alone, gpu=cand.gpu, tp=cand.tp, pp=cand.pp, kv_dtype=cand.kv_dtype)
        if engine == "vllm@0.33":  # the share of the whole device: refused, never a smaller budget
            assert refused and cand.max_requests == 0 < before.max_requests
            assert f"does not start on {cand.gpu} (no request fits): Free memory on device" in \
                " ".join(rec.notes)
        elif engine in {"vllm@0.9", "hf"}:  # every byte the others hold comes off the budget
            assert not refused and before.kv_budget_bytes - cand.kv_budget_bytes == others
        else:  # the others' bytes come off before the fraction (SGLang's mfs, TRT-LLM's 0.9)
            fraction = plan.engine.memory_fraction(plan.engine.capacity(plan.device).bytes,
                                                   plan.settings)
            assert fraction is not None and fraction < 1
            assert not refused and abs(before.kv_budget_bytes - cand.kv_budget_bytes
                                       - others * fraction) <= 1
        checked += 1
    assert checked == 3
