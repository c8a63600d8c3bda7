"""Issue #33's acceptance for the items whose exact text no other test held: item 8 (the CLI's
verdict first, provenance behind ``--verbose``) and item 9 (the block count explained, one token
bound for the CLI and the dashboard, the context axis ending near the model's limit).

Items 1, 2, 5 and 6 are browser tests at 1440×900 and 390×844 (tests/browser/test_issue33.py);
3 and 4 are in tests/test_calibrate.py (``test_calibrate_uses_the_release_the_log_names``,
``test_a_log_of_another_model_is_refused_with_what_it_says_it_is``); 7 in tests/test_report.py;
item 9's Ctrl+Enter and sliding-window note in tests/test_app.py.
"""

from __future__ import annotations

from cli_helpers import run_cli

from kvplan.plan import make_plan
from kvplan.presets import gpus, load_model

#: Issue #33's example: Llama-3.1-70B, 2 × H100-SXM, TP 2, 8,192 tokens, 32 users (vLLM v0.33).
FIT_70B = ["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--num-gpus", "2", "--tp", "2",
           "--tokens", "8192", "--users", "32"]


def test_fit_says_the_verdict_first_and_keeps_provenance_behind_verbose() -> None:
    """Item 8: the first lines are the scenario and the verdict; the device total's measurement
    (torch, driver, URLs) and each reserve term's engine source appear only with ``--verbose``."""
    code, out, err = run_cli(FIT_70B)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:3] == [
        "Llama-3.1-70B on 2 GPUs × NVIDIA H100 SXM5 80GB (1 replica of TP=2, PP=1) · vLLM (v1 paged "
        "blocks) [vLLM v0.33]",
        "Does NOT fit: 32 requests of 8,192 tokens need more KV memory than the budget holds: at most "
        "3 per replica.",
        "Smallest change: at most 3 users or at most 976 tokens per request or 4 GPUs with TP=4.",
    ]  # 992 tokens before vLLM's 33,554,432 B RoPE cache joined the weights (1,997 → 1,984 blocks)
    assert "GPU memory:        79.188 GiB (85,027,979,264 B) [status measured]" in lines
    assert lines[-1] == "Sources of the device total and each reserve term: --verbose (or --json)."
    assert "http" not in out and "driver" not in out
    code, verbose, err = run_cli([*FIT_70B, "--verbose"])
    assert (code, err) == (0, "")
    assert verbose.splitlines()[:3] == lines[:3]
    memory = next(line for line in verbose.splitlines() if line.startswith("GPU memory:"))
    assert memory.startswith("GPU memory:        79.188 GiB (85,027,979,264 B) [torch "
                             "_CudaDeviceProperties(name='NVIDIA H100 80GB HBM3'")
    assert "driver 570.148.08" in memory
    assert "Sources of the device total" not in verbose


def test_the_block_count_beside_the_usable_blocks_is_explained() -> None:
    """Item 9: "1,984 blocks vs 1,983 usable" says why (vLLM V1's null block). 1,997 / 1,996 before
    vLLM's RoPE cos/sin cache (131,072 × 128 × 2 = 33,554,432 B per GPU, ``rotary_embedding/base.py``)
    joined the weights: 13 blocks of 2,621,440 B (test_answer.test_70b_on_8_gpus_with_tp1_suggests_tp4)."""
    out = run_cli(FIT_70B)[1].splitlines()
    assert "Blocks:            1,984 × 16 tokens (512 per request)" in out
    assert ("  requests: 1,983 usable blocks (1,984 − 1: the null block, which no request gets; "
            "v1/core/block_pool.py BlockPool.__init__) // 512 = 3") in out


def test_the_cli_and_the_dashboard_share_one_token_bound() -> None:
    """Item 9: the CLI accepted 100M tokens where the dashboard stopped at 10M; one bound now
    (``scenario.MAX_CONTEXT_TOKENS``). A link may still say up to the schema's 100M
    (``BOUNDS["tokens"]``): the dashboard then plans 10M and says so (``sidebar.check_names``)."""
    from kvplan.scenario import MAX_CONTEXT_TOKENS, Scenario
    from kvplan.ui.sidebar import MAX_UI_TOKENS, check_names

    assert MAX_UI_TOKENS == MAX_CONTEXT_TOKENS == 10_000_000
    scenario, warnings = check_names(Scenario(tokens=100_000_000))
    assert scenario.tokens == 10_000_000
    assert any("above the dashboard's 10,000,000-token limit, so 10,000,000 is used" in w
               for w in warnings)
    argv = ["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens"]
    assert run_cli([*argv, "100000000"]) == (
        2, "", "kvplan: error: argument --tokens: --tokens must be between 1 and 10,000,000, got "
               "'100000000'\n")
    assert run_cli([*argv, "10000000"])[0] == 0


def test_the_context_axis_ends_near_the_models_limit() -> None:
    """Item 9: the KV-vs-context axis ran to 10M tokens whatever the limit; it now ends at the power
    of ten above 1.5 × the longer of the context limit and the chosen length (``data._axis_end``):
    Llama-3.1-8B's 131,072 → 1,000,000 (1.5 × 131,072 = 196,608); a 2,000,000-token request → 10M."""
    from kvplan.capacity import FitQuery
    from kvplan.ui import data

    arch, gpu = load_model("llama-3.1-8b"), gpus()["h100-sxm"]
    plan = make_plan(arch, gpu, FitQuery(tokens=32_768))
    assert plan.context_limit == 131_072
    frame, errors = data.kv_vs_context(plan, ["bf16"], log_x=True)
    assert errors == [] and int(frame["tokens"].max()) == 1_000_000
    long = make_plan(arch, gpu, FitQuery(tokens=2_000_000))
    assert int(data.kv_vs_context(long, ["bf16"], log_x=True)[0]["tokens"].max()) == 10_000_000
