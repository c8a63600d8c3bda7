"""Issue #16: the answer, its reason and the smallest change; context limits; design head dims;
the CLI's wording, default engine and ``--check``. Every expected value is derived in the docstring."""

from __future__ import annotations

import json

import pytest

from kvplan.capacity import FitQuery, capacity_sweep, fit
from kvplan.designs import assumptions, variants
from kvplan.engines import DEFAULT_ENGINE, ENGINES
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.sizing import full_length_bytes_per_token
from tests.cli_helpers import run_cli
from tests.plans import kv_plan

#: The release these numbers are derived for (an explicit key: a newer release changes none).
V033 = "vllm@0.33"


def test_llama2_7b_beyond_its_context_limit_does_not_fit() -> None:
    """Llama-2-7B: max_position_embeddings 4,096. At 32,768 tokens on an H200 the pool still holds
    7 requests (14,799 blocks // 2,048 per request), but vLLM refuses --max-model-len 32768:
    fits is False, the reason names VLLM_ALLOW_LONG_MAX_MODEL_LEN, the change is ≤ 4,096 tokens."""
    result = fit(make_plan(load_model("llama-2-7b"), get_gpu("h200"), FitQuery(engine=V033, tokens=32768)))
    assert (result.max_requests, result.context_limit, result.fits) == (7, 4096, False)
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in result.reason
    assert ("context limit of 4,096 (max_position_embeddings 4,096; vLLM v0.33 "
            "_get_and_verify_max_len)") in result.reason
    assert result.suggestion == "use at most 4,096 tokens per request"
    at_limit = fit(make_plan(load_model("llama-2-7b"), get_gpu("h200"), FitQuery(engine=V033, tokens=4096)))
    assert (at_limit.fits, at_limit.reason, at_limit.suggestion) == (True, "", "")


def test_sglang_names_its_own_override() -> None:
    result = fit(make_plan(load_model("llama-2-7b"), get_gpu("h200"), FitQuery(tokens=8192, engine="sglang")))
    assert not result.fits
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in result.reason


def test_capacity_sweep_refuses_lengths_beyond_the_limit() -> None:
    """4,096 fits (7 × 4,096-token requests need far less than the budget); 4,097 does not."""
    frame = capacity_sweep(make_plan(load_model("llama-2-7b"), None, FitQuery()), [get_gpu("h200")], ["bf16"],
                           [4096, 4097], [1])
    assert frame["fits"].tolist() == [True, False]
    assert frame["max_requests"].tolist()[1] > 0  # the pool would hold it; the engine refuses it


def test_70b_on_8_gpus_with_tp1_suggests_tp4() -> None:
    """Llama-3.1-70B bf16: 141,107,412,992 B of weights + vLLM's RoPE cos/sin cache on every GPU
    (``rotary_embedding/base.py``, bf16: 131,072 × 128 × 2 = 33,554,432 B) = 141,140,967,424 B; an
    H100's target is ceil(85,027,979,264 (CUDA total) × 0.92) = 78,225,740,923 B, so TP=1 cannot hold
    them. TP=2 holds the weights (70,588,579,840 B per GPU) but not one 32K request: reserve
    activation 1,313,341,440 (sampler 1,024 × 128,256 × 10 B) + non-torch at TP > 1 590,558,003 +
    CUDA graphs 51 × 10,416,899 = 531,261,849 → 2,435,161,292 B; budget 78,225,740,923 −
    70,588,579,840 − 2,435,161,292 = 5,201,999,791 B // 2,621,440 B per block = 1,984 blocks < 2,048
    per 32,768-token request (the longest request is 1,983 usable blocks × 16 = 31,728 tokens; before
    the cache 5,235,554,223 B, 1,997 blocks, 31,936 tokens). TP=4 is the smallest layout —
    and the 8 GPUs allow it (2 replicas)."""
    arch, h100 = load_model("llama-3.1-70b"), get_gpu("h100-sxm")
    two = fit(make_plan(arch, h100, FitQuery(engine=V033, tokens=32768, num_gpus=2, tp=2)))
    assert two.weights_fit and two.kv_budget_bytes == 5_201_999_791
    assert (two.num_blocks, two.max_requests, two.max_tokens_per_request) == (1984, 0, 31_728)
    result = fit(make_plan(arch, h100, FitQuery(engine=V033, tokens=32768, num_gpus=8, tp=1)))
    assert not result.weights_fit and not result.fits
    assert "141,140,967,424 B per GPU" in result.reason
    assert result.suggestion == "set TP=4 (your 8 GPUs allow it; 2 replica(s))"
    one = fit(make_plan(arch, h100, FitQuery(engine=V033, tokens=32768, num_gpus=1)))
    assert one.suggestion == "use 4 GPUs with TP=4"
    assert one.min_gpus_to_fit == 4


def test_tp8_on_one_gpu_names_eight_gpus() -> None:
    with pytest.raises(KVPlanError) as err:
        fit(make_plan(load_model("llama-3.1-70b"), get_gpu("h100-sxm"), FitQuery(num_gpus=1, tp=8)))
    assert str(err.value) == ("the GPU count 1 is not a multiple of tp × pp = 8: use 8 GPUs, or a "
                              "TP × PP that divides 1")


def test_too_many_users_names_each_smallest_change() -> None:
    """Llama-3.1-8B on one H100 at 32,768 tokens: 14 requests fit (28,753 blocks, as
    test_capacity.test_llama31_8b_bf16_on_one_h100_at_32k derives: (28,753 − 1) // 2,048), the
    longest request for 100 users is 28,752 usable blocks // 100 = 287 blocks × 16 = 4,592 tokens,
    and TP=8 (8 GPUs) is the first layout for 100."""
    asked = FitQuery(engine=V033, tokens=32768, users=100)
    result = fit(make_plan(load_model("llama-3.1-8b"), get_gpu("h100-sxm"), asked))
    assert (result.max_requests, result.max_tokens_per_request) == (14, 4592)
    assert result.suggestion == ("at most 14 users or at most 4,592 tokens per request or 8 GPUs "
                                 "with TP=8")


def test_deepseek_v3_mha_variant_uses_the_real_head_dims() -> None:
    """DeepSeek-V3: 61 MLA layers, 128 heads, K head qk_nope 128 + rope 64 = 192, V head 128.
    Dense MHA in bf16: 61 × 128 × (192 + 128) × 2 B = 4,997,120 B per token (not hidden ÷ heads =
    56). GQA with the assumed 8 KV heads: 61 × 8 × 320 × 2 = 312,320 B. The real MLA latent:
    61 × (512 + 64) × 2 = 70,272 B."""
    arch = load_model("deepseek-v3")
    built = variants(arch)
    per_token = {k: full_length_bytes_per_token(kv_plan(v, 1, kv_dtype="bf16", engine="vllm")) for k,
                 v in built.items()}
    assert per_token["mha"] == 4_997_120
    assert per_token["gqa"] == 312_320
    assert per_token["real"] == per_token["mla"] == 70_272
    notes = " ".join(assumptions(arch, tp=8))
    assert "K 192 + V 128" in notes
    assert "replicated 8×" in notes and "DP-attention" in notes


def test_llama_mha_variant_keeps_its_head_dim() -> None:
    """Llama-3.1-8B: 32 layers × 32 heads × (128 + 128) × 2 B = 524,288 B per token as MHA."""
    mha = variants(load_model("llama-3.1-8b"))["mha"]
    assert full_length_bytes_per_token(kv_plan(mha, 1, kv_dtype="bf16", engine="vllm")) == 524_288


# ------------------------------------------------------------------------------------------ CLI
FIT_70B = ["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tokens", "32768",
           "--engine-version", "0.33"]


def test_cli_wording_names_gpus_replicas_and_users() -> None:
    code, out, _ = run_cli(FIT_70B + ["--num-gpus", "8", "--tp", "8"])
    assert code == 0
    first = out.splitlines()[0]
    assert "on 8 GPUs × NVIDIA H100" in first and "(1 replica of TP=8, PP=1)" in first
    assert "Longest request at 1 user:" in out and "1 users" not in out


def test_cli_check_exits_1_when_it_does_not_fit() -> None:
    assert run_cli(FIT_70B + ["--num-gpus", "8", "--tp", "8", "--check"])[0] == 0
    code, out, _ = run_cli(FIT_70B + ["--num-gpus", "8", "--check"])
    assert code == 1
    assert "Smallest change: set TP=4 (your 8 GPUs allow it; 2 replica(s))." in out  # see above
    assert run_cli(FIT_70B + ["--num-gpus", "8"])[0] == 0  # without --check: still exit 0


def test_cli_fit_json_beyond_the_limit() -> None:
    code, out, _ = run_cli(["fit", "--model", "llama-2-7b", "--gpu", "h200", "--tokens", "32768",
                            "--json", "--check"])
    payload = json.loads(out)
    assert code == 1
    assert (payload["fits"], payload["context_limit"], payload["max_requests"]) == (False, 4096, 7)
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in payload["reason"]


def test_one_default_engine_everywhere_and_in_help() -> None:
    """``kv`` and ``fit`` both default to DEFAULT_ENGINE (vLLM: whole 16-token blocks, so 10
    tokens of Llama-2-7B reserve one block = 16 × 524,288 = 8,388,608 B), and --help says so."""
    code, out, _ = run_cli(["kv", "--model", "llama-2-7b", "--tokens", "10", "--json"])
    payload = json.loads(out)
    assert code == 0 and payload["engine"] == DEFAULT_ENGINE == "vllm"
    assert payload["reserved_bytes"] == 8_388_608
    code, out, _ = run_cli(["--help"])  # names no engine: it imports none (kvplan.cli.build_parser)
    assert code == 0 and "uses the default engine unless --engine says otherwise" in " ".join(out.split())
    for command in ("kv", "fit"):
        code, out, _ = run_cli([command, "--help"])
        assert f"(default: {DEFAULT_ENGINE}, {ENGINES[DEFAULT_ENGINE]})" in " ".join(out.split())
