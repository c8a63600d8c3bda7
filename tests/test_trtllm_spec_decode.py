"""TensorRT-LLM speculative decoding (``speculative_config``, issue #26): the spec layers in the
target's KV manager, the two-model draft's KV in the creator's cost, the extra and draft tokens each
request holds, the draft's weights off the budget, and the named refusals.

Hand-derived from the main-branch code kvplan's ``main`` record cites
(``kvplan/engines/trtllm/spec_decode.py``): ``llm_args.py`` (``EagleDecodingConfig``:
``num_eagle_layers = max_draft_len``; ``MTPDecodingConfig``: ``max_draft_len =
num_nextn_predict_layers``), ``resource_manager.py`` ``get_pp_layers`` / ``prepare_resources`` /
``calculate_max_num_blocks``, ``speculative/utils.py`` ``get_num_spec_layers`` /
``get_num_extra_kv_tokens``, ``_util.py`` ``KvCacheCreator._get_kv_size_per_token``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, get_gpu, load_model
from tests.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
EAGLE3_HEAD = str(ROOT / "tests/fixtures/configs/llama3-8B-eagle3.json")
BUDGET = 10 << 30  # the KV memory given (--kv-cache-memory-bytes): 10,737,418,240 B
#: Llama-3.1-8B at TP 1: 2 × 8 KV heads × 128 × 2 B = 4,096 B per layer, 32 layers.
LAYER, TARGET = 4_096, 131_072


def _fit(model: str, gpu: str = "custom", spec: dict[str, object] | None = None, **query: object):
    if spec is not None:
        query["speculative_config"] = json.dumps(spec)
    engine = str(query.pop("engine", "trtllm"))
    q = FitQuery(engine=engine, tokens=int(query.pop("tokens", 8192)), **query)  # type: ignore[arg-type]
    plan = make_plan(load_model(model), get_gpu(gpu) if gpu != "custom" else custom_gpu(80), q)
    return plan, fit(plan, search_gpus=False)


def _given(model: str = "llama-3.1-8b", spec: dict[str, object] | None = None, **query: object):
    return _fit(model, "custom", spec, kv_cache_memory_bytes=BUDGET, reserve_gib=0, **query)


def test_without_speculation_the_pool_is_the_targets() -> None:
    """10,737,418,240 // 131,072 = 81,920 tokens = 2,560 blocks; 8,192 tokens = 256 blocks → 10."""
    plan, result = _given()
    assert (plan.pool.per_token, plan.pool.num_blocks) == (TARGET, 2_560)
    assert result.max_requests == 10 and result.speculative is None


def test_eagle3_one_model_adds_max_draft_len_layers_and_extra_tokens() -> None:
    """EAGLE3 one-model, max_draft_len 3: ``num_eagle_layers`` = 3 spec layers of the target's
    geometry in the manager (not the head's one layer): 131,072 + 3 × 4,096 = 143,360 B per token;
    10,737,418,240 // 143,360 = 74,898 tokens → 2,340 blocks; a request of 8,192 tokens holds
    8,192 + (3 − 1) extra + 3 draft tokens = cdiv(8,197, 32) = 257 blocks → 2,340 // 257 = 9."""
    plan, result = _given(spec={"decoding_type": "Eagle3", "max_draft_len": 3,
                                "speculative_model": EAGLE3_HEAD})
    assert plan.pool.per_token == TARGET + 3 * LAYER == 143_360
    assert plan.pool.num_blocks == BUDGET // 143_360 // 32 == 2_340
    assert int(plan.pool.blocks([8192])[0]) == 257
    assert result.max_requests == 9
    spec = result.speculative
    assert spec is not None
    assert (spec["spec_dec_mode"], spec["spec_layers_in_target_manager"], spec["num_extra_kv_tokens"],
            spec["max_total_draft_tokens"], spec["extra_tokens_per_request"]) == (
        "EAGLE3_ONE_MODEL", 3, 2, 3, 5)
    assert spec["spec_layers_bytes_per_token"] == 12_288
    assert any("max_draft_len = 3 spec layers" in n for n in result.notes)


def test_eagle3_two_model_draft_has_its_own_layers_and_no_extra_tokens() -> None:
    """``eagle3_one_model`` false: the head's own manager (1 layer, 4,096 B) joins the creator's
    cost: 135,168 B → 79,437 tokens → 2,482 blocks; a request holds 8,192 + 3 draft tokens →
    257 blocks → 9."""
    plan, result = _given(spec={"decoding_type": "Eagle3", "max_draft_len": 3,
                                "speculative_model": EAGLE3_HEAD, "eagle3_one_model": False})
    assert plan.pool.per_token == 135_168
    assert plan.pool.num_blocks == 2_482
    assert int(plan.pool.blocks([8192])[0]) == 257 and result.max_requests == 9
    spec = result.speculative
    assert spec is not None
    assert (spec["spec_dec_mode"], spec["num_extra_kv_tokens"], spec["draft_manager_kv_layers"],
            spec["draft_kv_bytes_per_token"]) == ("EAGLE3", 0, 1, {"creator": 4_096, "manager": 4_096})


def test_draft_target_splits_the_budget_over_both_models() -> None:
    """Draft_Target with Llama-3.2-1B (16 layers × 2 × 8 × 64 × 2 B = 32,768 B): 163,840 B per
    token → 65,536 tokens → 2,048 blocks (target and draft managers each capped at that
    ``max_tokens``); 8,192 + 4 draft tokens → 257 blocks → 7 requests."""
    plan, result = _given(spec={"decoding_type": "Draft_Target", "max_draft_len": 4,
                                "speculative_model": "llama-3.2-1b"})
    assert plan.pool.per_token == 163_840 and plan.pool.num_blocks == 2_048
    assert result.max_requests == 7


def test_ngram_has_no_draft_kv_but_its_draft_tokens_take_slots() -> None:
    """NGram, max_draft_len 4: the pool is the target's (2,560 blocks); 8,196 tokens per request →
    257 blocks → 9 requests (10 without)."""
    plan, result = _given(spec={"decoding_type": "NGram", "max_draft_len": 4})
    assert (plan.pool.per_token, plan.pool.num_blocks) == (TARGET, 2_560)
    assert result.max_requests == 9
    assert result.speculative is not None and result.speculative["draft_weights_bytes"] == 0


def test_mtp_counts_num_nextn_predict_layers_mla_layers_and_loads_them() -> None:
    """DeepSeek-V3 at TP 8, MTP with num_nextn_predict_layers 3 on a one-next-n-layer checkpoint:
    MTP_EAGLE_ONE_MODEL; MLA 61 × (512 + 64) × 2 B = 70,272 B, + 3 spec layers × 1,152 B = 73,728 B;
    10,737,418,240 // 73,728 = 145,635 tokens → 4,551 blocks (4,774 without); the next-n layers'
    weights are loaded (the ``mtp`` setting)."""
    base, _ = _given("deepseek-v3", tp=8, num_gpus=8)
    plan, result = _given("deepseek-v3", spec={"decoding_type": "MTP", "num_nextn_predict_layers": 3},
                          tp=8, num_gpus=8)
    assert (base.pool.per_token, base.pool.num_blocks) == (70_272, 4_774)
    assert (plan.pool.per_token, plan.pool.num_blocks) == (73_728, 4_551)
    assert plan.settings.mtp and not base.settings.mtp
    spec = result.speculative
    assert spec is not None
    assert (spec["spec_dec_mode"], spec["max_draft_len"], spec["num_extra_kv_tokens"]) == (
        "MTP_EAGLE_ONE_MODEL", 3, 0)
    vanilla, _ = _given("deepseek-v3", spec={"decoding_type": "MTP", "use_mtp_vanilla": True},
                        tp=8, num_gpus=8)
    assert vanilla.pool.per_token == 70_272 + 1_152


def test_draft_weights_come_off_before_the_fraction() -> None:
    """H100 SXM (85,027,979,264 B), Llama-3.1-8B bf16 weights 16,060,522,496 B, activation
    905,969,664 B, non-torch 2,705,829,396 B (``TRTLLM_NON_TORCH_BYTES``, fitted on log 05; issue #30
    added the term, which moved these pins from 61,255,338,393 / 59,030,872,473 B and 11,259 blocks):
    (T − w − a − n) × 0.9 = 58,820,091,937 B; the Llama-3.2-1B draft's 2,471,628,800 B (tied
    embeddings 525,336,576 + attention 335,544,320 + mlp 1,610,612,736 + norms 135,168) come off
    first: 62,884,028,908 × 0.9 = 56,595,626,017 B → 345,432 tokens at 163,840 B → 10,794 blocks."""
    _, base = _fit("llama-3.1-8b", "h100-sxm")
    plan, result = _fit("llama-3.1-8b", "h100-sxm", {"decoding_type": "Draft_Target",
                                                     "max_draft_len": 4,
                                                     "speculative_model": "llama-3.2-1b"})
    assert base.kv_budget_bytes == 58_820_091_937
    assert result.kv_budget_bytes == 56_595_626_017
    term = next(x for x in result.ledger if x["name"] == "reserve: spec_draft_weights")
    assert term["bytes"] == 2_471_628_800
    assert plan.pool.num_blocks == 10_794


@pytest.mark.parametrize(("spec", "code"), [
    ({"decoding_type": "Eagle3", "max_draft_len": 3}, "trt_spec.no_model"),
    ({"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "Qwen/Qwen3-0.6B"},
     "trt_spec.vocab"),  # 151,936 tokens beside Llama-3.1-8B's 128,256
    ({"decoding_type": "Eagle3", "speculative_model": EAGLE3_HEAD}, "trt_spec.max_draft_len"),
    ({"decoding_type": "Medusa", "max_draft_len": 3}, "trt_spec.unmodelled"),
    ({"decoding_type": "eagle3", "max_draft_len": 3}, "trt_spec.decoding_type"),
    ({"max_draft_len": 3}, "trt_spec.decoding_type"),
    ({"decoding_type": "NGram", "max_draft_len": 0}, "trt_spec.type"),
    ({"decoding_type": "NGram", "max_draft_len": 3, "eagle_choices": [[0]]}, "trt_spec.key"),
    ({"decoding_type": "MTP"}, "trt_spec.no_mtp"),
])
def test_refusals_name_the_problem(spec: dict[str, object], code: str) -> None:
    with pytest.raises(KVPlanError) as info:
        _given(spec=spec)
    assert info.value.code == code


def test_release_pp_and_several_windows_are_refused() -> None:
    eagle = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": EAGLE3_HEAD}
    for query, code in (({"engine": "trtllm@1.1"}, "trt_spec.release"),
                        ({"pp": 2, "num_gpus": 2}, "trt_spec.pp"),
                        ({"max_attention_window": (4096, 8192)}, "trt_spec.vswa")):
        with pytest.raises(KVPlanError) as info:
            _given(spec=eagle, **query)
        assert info.value.code == code, query
    _given(spec=eagle, max_attention_window=(8192,))  # one window: sized


def test_cli_prints_the_resolved_config() -> None:
    code, out, err = run_cli(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8192",
                              "--engine", "trtllm", "--json", "--speculative-config",
                              json.dumps({"decoding_type": "NGram", "max_draft_len": 4})])
    assert code == 0, err
    data = json.loads(out)
    spec = data["speculative"] if "speculative" in data else data["results"][0]["speculative"]
    assert (spec["spec_dec_mode"], spec["extra_tokens_per_request"]) == ("NGRAM", 4)


def test_speculative_model_dir_is_speculative_model() -> None:
    """``DecodingBaseConfig.speculative_model``: ``validation_alias=AliasChoices("speculative_model",
    "speculative_model_dir")`` — the older YAML name sizes the same draft."""
    plan, _ = _given(spec={"decoding_type": "Draft_Target", "max_draft_len": 4,
                           "speculative_model_dir": "llama-3.2-1b"})
    assert plan.pool.per_token == 163_840


def test_cli_text_names_the_mode_and_the_layers() -> None:
    """``kvplan fit`` without ``--json`` prints the resolved mode, the spec layers and their bytes."""
    code, out, err = run_cli(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens",
                              "8192", "--engine", "trtllm", "--speculative-config",
                              json.dumps({"decoding_type": "Eagle3", "max_draft_len": 3,
                                          "speculative_model": EAGLE3_HEAD})])
    assert code == 0, err
    assert ("Speculative decoding: Eagle3 → EAGLE3_ONE_MODEL (llama3-8B-eagle3), max_draft_len 3: "
            "3 spec layer(s) in the target's KV manager (+12,288 B per token)") in out
    assert "5 more tokens per request, draft weights 536,895,488 B" in out
