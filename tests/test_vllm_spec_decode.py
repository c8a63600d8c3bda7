"""vLLM 0.33 speculative decoding (``--speculative-config``, issue #26 item 1): the drafter's KV layers
in the target's groups, its weights, lookahead slots, capture sizes and the named refusals.

Hand-derived bytes cite vLLM 0.33.0 (``vllm/config/speculative.py``, ``vllm/config/vllm.py``,
``vllm/v1/worker/gpu_model_runner.py`` ``get_kv_cache_spec``, ``vllm/v1/core/kv_cache_planning.py``);
``tests/fixtures/vllm_truth/spec_decode.json`` is vLLM's own planning with the drafter's specs
(``tools/vllm_truth/spec_decode.py``), compared case by case, exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.engines.settings import EngineSettings
from kvplan.engines.vllm.spec_decode import capture_sizes_033, spec_capture_sizes
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import custom_gpu, get_gpu, load_model
from tests.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
TRUTH = json.loads((ROOT / "tests/fixtures/vllm_truth/spec_decode.json").read_text(encoding="utf-8"))
CASES = {case["id"]: case for case in TRUTH["cases"]}
GPU = custom_gpu(80)  # capacity is irrelevant: the KV memory is given
DRAFT_1B = '{"method":"draft_model","model":"llama-3.2-1b","num_speculative_tokens":4}'


def _fit(model: str, spec: str | None, **query: object):
    gpu = query.pop("gpu", get_gpu("h100-sxm"))
    q = FitQuery(engine=str(query.pop("engine", "vllm")), tokens=int(query.pop("tokens", 8192)),
                 speculative_config=spec, **query)
    plan = make_plan(load_model(model), gpu, q)
    return plan, fit(plan, search_gpus=False)


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case_matches_vllm(case_id: str) -> None:
    """Blocks, bytes per block, blocks per request, "GPU KV cache size", concurrency, the resolved
    method, draft TP, lookahead slots, drafting slots, drafter layers and every capture size."""
    case = CASES[case_id]
    spec_config = dict(case["speculative_config"])
    if str(spec_config.get("model", "")).endswith(".json"):  # a draft's config.json, by path
        spec_config["model"] = str(ROOT / spec_config["model"])
    plan, result = _fit(case["model"], json.dumps(spec_config), gpu=GPU,
                        tokens=case["max_model_len"], tp=case["tp"], num_gpus=case["tp"],
                        kv_cache_memory_bytes=case["available_memory"],
                        max_num_batched_tokens=case["max_num_batched_tokens"],
                        max_num_seqs=case["max_num_seqs"])
    ours = {"num_blocks": result.num_blocks, "bytes_per_block": result.bytes_per_block,
            "blocks_per_request": result.blocks_per_request,
            "kv_cache_size_tokens": result.kv_pool_tokens,
            "max_concurrency": result.max_concurrency}
    assert ours == {k: case[k] for k in ours}
    spec = result.speculative
    assert spec is not None
    assert (spec["method"], spec["num_speculative_tokens"], spec["draft_tensor_parallel_size"],
            spec["lookahead_tokens"], spec["max_num_new_slots_for_drafting"],
            spec["draft_kv_layers"], spec["uniform_decode_query_len"]) == (
        case["method"], case["num_speculative_tokens"], case["draft_tensor_parallel_size"],
        case["num_lookahead_tokens"], case["max_num_new_slots_for_drafting"],
        case["draft_kv_layers"], case["uniform_decode_query_len"])
    sizes = capture_sizes_033(case["num_speculative_tokens"], case["max_num_seqs"],
                              case["max_num_batched_tokens"])
    assert sizes == case["cudagraph_capture_sizes"]
    assert (spec["cudagraph_capture_sizes"], spec["max_cudagraph_capture_size"]) == (
        len(sizes), sizes[-1])


def test_fixture_covers_each_resolution() -> None:
    """The fixture holds a UniformTypeKVCacheSpecs group (a draft of other pages), one plain group
    with the draft's layers (same page), MTP's EAGLE-tagged group and an n-gram run without
    drafter layers."""
    groups = {c["id"]: c["groups"] for c in CASES.values()}
    assert groups["llama8b-draft1b-tp1"] == [{"layers": 48, "eagle": False, "type":
                                              "UniformTypeKVCacheSpecs", "uniform_type": True,
                                              "page_size_bytes": 2621440}]
    assert groups["qwen3-32b-draft0.6b-tp2"][0]["layers"] == 64 + 28
    assert groups["deepseek-v3-mtp-tp8"][0] == {"layers": 62, "eagle": True,
                                                "type": "MLAAttentionSpec", "uniform_type": False,
                                                "page_size_bytes": 18432}
    assert CASES["llama8b-ngram"]["draft_kv_layers"] == 0
    assert TRUTH["vllm"] == "0.33.0"


def test_draft_model_bytes_by_hand() -> None:
    """Llama-3.1-8B with Llama-3.2-1B as draft model, 4 tokens, TP 1 on an H100-SXM.

    KV (per block of 16 tokens): target 32 layers × 16 × 8 heads × 128 × 2 (K, V) × 2 B = 2,097,152;
    draft 16 layers × 16 × 8 × 64 × 2 × 2 = 524,288 (a page of 32,768 B, half the target's: one
    UniformTypeKVCacheSpecs group, a block costs the sum) → 2,621,440 B per block; 81,920 B of
    draft KV per token beside the target's 131,072.
    Weights (bf16, the target's dtype; DraftModelProposer shares nothing): embeddings 128,256 ×
    2,048 × 2 = 525,336,576 (tied: no separate LM head); attention 16 × 2,048 × (2,048 + 512 + 512
    + 2,048) × 2 = 335,544,320; MLP 16 × 3 × 2,048 × 8,192 × 2 = 1,610,612,736; norms (2 × 16 +
    1) × 2,048 × 2 = 135,168 → 2,471,628,800 B; + its own RoPE cos/sin cache (vLLM
    ``rotary_embedding/base.py``, model dtype; a distinct ``get_rope`` set, head 64): 131,072 × 64 ×
    2 = 16,777,216 → 2,488,406,016 B.
    Capture sizes (v0.33 ``_set_cudagraph_sizes``, max_num_seqs 1,024, query length 5): the 51
    of the grid plus the uniform decode sizes 5, 10, 20, 280, 360, 440 → 57; at 8,012,999 B per
    size (the release's fitted cost) 6 × 8,012,999 = 48,077,994 B.
    """
    plan, result = _fit("llama-3.1-8b", DRAFT_1B)
    _, plain = _fit("llama-3.1-8b", None)
    assert plain.bytes_per_block == 2_097_152 and result.bytes_per_block == 2_621_440
    terms = {t["name"]: t for t in result.ledger}
    assert terms["reserve: spec_draft_weights"]["bytes"] == 2_488_406_016  # 2,471,628,800 + RoPE 16 MiB
    assert terms["reserve: spec_cuda_graphs"]["bytes"] == 48_077_994
    assert result.reserve_bytes == plain.reserve_bytes + 2_488_406_016 + 48_077_994
    budget = result.kv_budget_bytes
    assert budget == plain.kv_budget_bytes - 2_488_406_016 - 48_077_994
    assert result.num_blocks == budget // 2_621_440
    assert result.speculative is not None
    assert result.speculative["draft_kv_bytes_per_token"] == 16 * 8 * 64 * 2 * 2
    assert result.speculative["lookahead_tokens"] == 4
    sizes = capture_sizes_033(4, 1024, 8192)
    assert sorted(set(sizes) - set(capture_sizes_033(0, 1024, 8192))) == [5, 10, 20, 280, 360, 440]
    assert terms["KV cache pool"]["bytes"] == result.num_blocks * 2_621_440


def test_draft_tp_one_keeps_every_kv_head_on_each_rank() -> None:
    """Target TP 2, draft TP 1: the draft's 8 KV heads on every rank (its own parallel config), the
    target's 4: pages 16 × 8 × 64 × 4 = 32,768 and 16 × 4 × 128 × 4 = 32,768 — one page size, one
    group of 48 layers, 1,572,864 B per block; its weights unsplit (2,471,628,800 B per GPU + its
    131,072 × 64 × 2 = 16,777,216 B RoPE cache, vLLM ``rotary_embedding/base.py``)."""
    _, result = _fit("llama-3.1-8b", '{"model":"llama-3.2-1b","num_speculative_tokens":3,'
                     '"draft_tensor_parallel_size":1}', tp=2, num_gpus=2)
    assert result.bytes_per_block == 48 * 32_768
    terms = {t["name"]: t["bytes"] for t in result.ledger}
    assert terms["reserve: spec_draft_weights"] == 2_488_406_016
    _, split = _fit("llama-3.1-8b", '{"model":"llama-3.2-1b","num_speculative_tokens":3}', tp=2,
                    num_gpus=2)
    # draft TP 2: embeddings 262,668,288 + attention 167,772,160 + MLP 805,306,368 + norms 135,168
    # + the unsplit RoPE cache 16,777,216
    assert {t["name"]: t["bytes"] for t in split.ledger}["reserve: spec_draft_weights"] == 1_252_659_200


def test_eagle3_head_from_its_config_file() -> None:
    """An EAGLE3 head given as a path (``tests/fixtures/configs/llama3-8B-eagle3.json``: SpecForge's
    ``configs/llama3-8B-eagle3.json`` at yubofredwang/SpecForge@79694c7a, one Llama decoder layer) on
    Llama-3.1-8B, TP 1: its full-attention layer has the target's page (16 × 8 × 128 × 4 = 65,536 B),
    so the one group has 33 layers → 2,162,688 B per block; weights (``derived``: the decoder layer
    and ``fc``, the model dtype bf16 — the head's float16 config is run in the target's dtype):
    attention 4,096 × (4,096 + 1,024 + 1,024 + 4,096) × 2 = 83,886,080, MLP 3 × 4,096 × 14,336 × 2
    = 352,321,536, norms (2 + 1) × 4,096 × 2 = 24,576, fc 3 × 4,096 × 4,096 × 2 = 100,663,296 →
    536,895,488 B; + its own RoPE cos/sin cache (vLLM ``rotary_embedding/base.py``: the head's 2,048
    positions, unscaled, a set apart from the target's) 2,048 × 128 × 2 = 524,288 → 537,419,776 B."""
    head = ROOT / "tests/fixtures/configs/llama3-8B-eagle3.json"
    spec = json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 3})
    _, result = _fit("llama-3.1-8b", spec)
    assert result.bytes_per_block == 33 * 65_536
    term = next(t for t in result.ledger if t["name"] == "reserve: spec_draft_weights")
    assert term["bytes"] == 537_419_776 and term["formula"].endswith("[derived]")
    assert result.speculative is not None and result.speculative["draft"] == "llama3-8B-eagle3"
    assert result.speculative["lookahead_tokens"] == 3
    # the name alone makes it EAGLE3 (SpeculativeConfig.__post_init__: "eagle3" in the model path)
    _, again = _fit("llama-3.1-8b", json.dumps({"model": str(head), "num_speculative_tokens": 3}))
    assert again.speculative is not None and again.speculative["method"] == "eagle3"


def test_mtp_loads_and_caches_the_next_n_layer() -> None:
    """DeepSeek-V3, method deepseek_mtp (→ mtp), TP 8: ``num_nextn_predict_layers`` 1 MLA layer
    joins the 61 (62 × 16 × 576 × 2 B = 1,142,784 B per block) and its weights are the target's
    part ``mtp`` (no separate drafter term)."""
    plan, result = _fit("deepseek-v3", '{"method":"deepseek_mtp","num_speculative_tokens":1}', tp=8,
                        num_gpus=8, gpu=get_gpu("h200"))
    _, plain = _fit("deepseek-v3", None, tp=8, num_gpus=8, gpu=get_gpu("h200"))
    assert plan.settings.mtp and result.bytes_per_block == 62 * 16 * 576 * 2
    assert plain.bytes_per_block == 61 * 16 * 576 * 2
    assert result.weights_breakdown["mtp"] > 0 and plain.weights_breakdown.get("mtp", 0) == 0
    assert result.speculative is not None and result.speculative["num_speculative_tokens"] == 1
    assert "reserve: spec_draft_weights" not in {t["name"] for t in result.ledger}


def test_ngram_adds_no_memory_but_capture_sizes() -> None:
    """n-gram drafting runs on the CPU: no drafter layer, no weights, no lookahead; only the capture
    sizes of query length 1 + 5."""
    _, result = _fit("llama-3.1-8b", '{"method":"ngram","num_speculative_tokens":5}')
    _, plain = _fit("llama-3.1-8b", None)
    # no drafter model: vLLM checks no draft TP (the target's parallel config is the draft's)
    _, anyway = _fit("llama-3.1-8b", '{"method":"ngram","num_speculative_tokens":5,'
                     '"draft_tensor_parallel_size":3}', tp=2, num_gpus=2)
    assert anyway.speculative is not None and anyway.speculative["draft_tensor_parallel_size"] == 2
    assert result.bytes_per_block == plain.bytes_per_block
    names = {t["name"] for t in result.ledger}
    assert "reserve: spec_draft_weights" not in names and "reserve: spec_cuda_graphs" in names
    assert result.speculative is not None and result.speculative["lookahead_tokens"] == 0


@pytest.mark.parametrize(("spec", "code", "extra"), [
    ('{"method":"eagle","model":"llama-3.2-1b","num_speculative_tokens":3}', "spec.hidden", {}),
    ('{"model":"Qwen/Qwen3-0.6B","num_speculative_tokens":3}', "spec.vocab", {}),
    ('{"method":"dflash","model":"x","num_speculative_tokens":3}', "spec.unmodelled", {}),
    ('{"method":"medusa","num_speculative_tokens":3}', "spec.method", {}),
    ('{"method":"mtp","num_speculative_tokens":1}', "spec.mtp_model", {}),
    ('{"model":"no-such-draft","num_speculative_tokens":3}', "spec.draft", {}),
    ('{"method":"draft_model","model":"llama-3.2-1b"}', "spec.no_tokens", {}),
    ('{"model":"llama-3.2-1b","num_speculative_tokens":3,"draft_tensor_parallel_size":2}',
     "spec.draft_tp", {"tp": 4, "num_gpus": 4}),
    ('{"model":"llama-3.2-1b","num_speculative_tokens":3}', "spec.pp", {"pp": 2, "num_gpus": 2}),
    ('{"model":"llama-3.2-1b","tensor_parallel_size":2}', "spec.tp_key", {}),
    ('{"model":"llama-3.2-1b","draft":1}', "spec.key", {}),
    ('{"model":"llama-3.2-1b","num_speculative_tokens":0}', "spec.type", {}),
    (DRAFT_1B, "spec.release", {"engine": "vllm@0.17"}),
    # v0.18–v0.32: ngram and suffix read, the draft model not (named with the release's list)
    (DRAFT_1B, "spec.method", {"engine": "vllm@0.19"}),
])
def test_bad_speculative_configs_are_named(spec: str, code: str, extra: dict) -> None:
    with pytest.raises(KVPlanError) as err:
        _fit("llama-3.1-8b", spec, **extra)
    assert err.value.code == code


def test_mtp_tokens_must_divide_by_the_next_n_layers() -> None:
    """``speculative.py``: more tokens than n_predict must be a multiple of it — true of any count
    for DeepSeek-V3's single layer, so a three-token run resolves."""
    _, result = _fit("deepseek-v3", '{"method":"mtp","num_speculative_tokens":3}', tp=8, num_gpus=8,
                     gpu=get_gpu("h200"))
    assert result.speculative is not None and result.speculative["lookahead_tokens"] == 3


def test_json_setting_is_canonical_and_refuses_non_objects() -> None:
    assert EngineSettings(speculative_config='{ "model": "a",  "method":"ngram"}').speculative_config \
        == '{"method":"ngram","model":"a"}'
    with pytest.raises(ValueError, match="expected a JSON object"):
        EngineSettings(speculative_config="[1]")
    with pytest.raises(ValueError, match="not valid JSON"):
        EngineSettings(speculative_config="{method: ngram}")


def test_cli_fit_json_and_messages() -> None:
    """``fit --json`` carries ``speculative``; bad JSON and a mismatched draft are one line each."""
    code, out, _ = run_cli(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8192",
                            "--speculative-config", DRAFT_1B, "--json"])
    assert code == 0
    assert json.loads(out)["speculative"]["draft_weights_bytes"] == 2_488_406_016  # + 16 MiB RoPE cache
    code, out, err = run_cli(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens",
                              "8192", "--speculative-config", "{oops"])
    assert code != 0 and "--speculative-config: not valid JSON" in err and "Traceback" not in err
    code, out, err = run_cli(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens",
                              "8192", "--speculative-config",
                              '{"model":"Qwen/Qwen3-0.6B","num_speculative_tokens":3}'])
    assert code != 0 and "vocabulary of 151,936 tokens" in err + out and "Traceback" not in err


def test_kv_bytes_per_token_count_the_drafter() -> None:
    """``kvplan kv``: the view holds the drafter's layers too (``Vllm.view`` → ``pool_arch``):
    32 × 4,096 + 16 × 2,048 = 163,840 B per token, each size on its own line."""
    code, out, _ = run_cli(["kv", "--model", "llama-3.1-8b", "--tokens", "8192",
                            "--speculative-config", DRAFT_1B])
    assert code == 0
    assert "Per token (avg):   163,840 B" in out
    assert "32 layers × 8,192 tokens × 4,096 B" in out and "16 layers × 8,192 tokens × 2,048 B" in out


def test_mamba_states_hold_a_page_per_draft_token() -> None:
    """``MambaSpec(num_speculative_blocks=k)`` (``layers/mamba/abstract.py``): in "align" mode a
    request holds 2 + k state pages per Mamba group. Jamba-1.5-mini, TP 2, 32,768 tokens: 28 Mamba
    and 4 attention layers → groups of 4 (7 Mamba groups, 1 attention group), blocks of 80 tokens;
    cdiv(32,768, 80) = 410 attention blocks + 7 × 2 = 424 per request, with 3 draft tokens
    410 + 7 × 5 = 445 (the fixture's jamba case, vLLM's own count). v0.33 has no per-block ("all")
    Mamba cache mode (``VllmRelease.mamba_prefix`` "align"), so a ``SupportsMambaPrefixCaching``
    model with a draft is "align" too; the refusal ``spec.mamba_all`` guards a release that would
    combine both."""
    _, plain = _fit("jamba-1.5-mini", None, tp=2, num_gpus=2, tokens=32768,
                    kv_cache_memory_bytes=20 * 2**30)
    _, spec = _fit("jamba-1.5-mini", '{"method":"ngram","num_speculative_tokens":3}', tp=2,
                   num_gpus=2, tokens=32768, kv_cache_memory_bytes=20 * 2**30)
    assert (plain.blocks_per_request, spec.blocks_per_request, spec.block_size) == (424, 445, 80)
    assert spec.blocks_per_request == CASES["jamba-ngram-tp2"]["blocks_per_request"]


def test_eagle_on_chunked_local_attention_turns_the_hybrid_manager_off(tmp_path: Path) -> None:
    """``VllmConfig.__post_init__``: a model with ``attention_chunk_size`` and an EAGLE-family method
    runs without the hybrid KV-cache manager — Llama-4-Scout's chunked layers then reserve the full
    length, as with ``hybrid_manager`` off; an explicit on is kept. The head: one Llama layer of
    the target's hidden size 5,120 (a config written here for the rule)."""
    head = tmp_path / "eagle3-head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 5120,
        "intermediate_size": 16384, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "num_hidden_layers": 1, "vocab_size": 202048, "rms_norm_eps": 1e-05,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    spec = json.dumps({"method": "eagle3", "model": str(head), "num_speculative_tokens": 2})
    common = {"tp": 4, "num_gpus": 4, "tokens": 65536, "kv_cache_memory_bytes": 20 * 2**30}
    _, auto = _fit("llama-4-scout", spec, **common)
    _, off = _fit("llama-4-scout", spec, hybrid_manager=False, **common)
    _, on = _fit("llama-4-scout", spec, hybrid_manager=True, **common)
    assert (auto.num_blocks, auto.blocks_per_request) == (off.num_blocks, off.blocks_per_request)
    assert on.blocks_per_request != off.blocks_per_request
    assert auto.blocks_per_request == 65536 // 16  # every layer at the full length, blocks of 16


RESOLUTIONS = {case["id"]: case for case in TRUTH["resolutions"]}
#: vLLM's refusals in the fixture (its own ``SpeculativeConfig``) → the kvplan message for each.
ERRORS = {"vocab": "spec.vocab", "draft-tp": "spec.draft_tp", "tp-key": "spec.tp_key",
          "no-tokens": "spec.no_tokens", "mtp-no-tokens": "spec.no_tokens",
          "ngram-lookup": "spec.lookup"}


def _spec_text(case: dict) -> str:
    spec = dict(case["speculative_config"])
    if str(spec.get("model", "")).endswith(".json"):
        spec["model"] = str(ROOT / spec["model"])
    return json.dumps(spec)


@pytest.mark.parametrize("case_id", sorted(RESOLUTIONS))
def test_resolution_matches_vllm(case_id: str) -> None:
    """vLLM 0.33's own ``SpeculativeConfig`` (local config directories): method, tokens, draft TP."""
    case = RESOLUTIONS[case_id]
    gpu = get_gpu("h200") if case["tp"] == 8 else GPU
    _, result = _fit(case["model"], _spec_text(case), tp=case["tp"], num_gpus=case["tp"], gpu=gpu,
                     kv_cache_memory_bytes=20 * 2**30)
    assert result.speculative is not None
    assert (result.speculative["method"], result.speculative["num_speculative_tokens"],
            result.speculative["draft_tensor_parallel_size"]) == (
        case["method"], case["num_speculative_tokens"], case["draft_tensor_parallel_size"])


def test_every_vllm_refusal_is_a_named_kvplan_refusal() -> None:
    assert set(ERRORS) == {case["id"] for case in TRUTH["errors"]}
    for case in TRUTH["errors"]:
        assert case["exception"] == "ValidationError" and "Value error" in case["message"]
        with pytest.raises(KVPlanError) as err:
            _fit(case["model"], _spec_text(case), tp=case["tp"], num_gpus=case["tp"],
                 gpu=get_gpu("h200") if case["tp"] == 8 else GPU, kv_cache_memory_bytes=20 * 2**30)
        assert err.value.code == ERRORS[case["id"]], case["id"]


# ------------------------------------------------------------- releases before v0.33 (ngram, suffix)
NGRAM4 = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":4}'


def test_capture_sizes_with_draft_tokens_follow_each_releases_rule() -> None:
    """``_set_cudagraph_sizes`` with 4 draft tokens (q = 5), ``max_num_seqs`` 8: the ceiling is
    min(8 × 5 × 2, 512) = 80 in every release (16 without drafts).
    ``ceiling`` (v0.18.0–v0.20.0): [1, 2, 4] + range(8, 81, 8) = 13 sizes (5 without: 1, 2, 4, 8, 16).
    ``ceiling_mnbt`` (v0.20.1–v0.28): the same 13 at 4,096 batched tokens; at 60 the ceiling is 60
    and 60 itself is captured: 3 + 7 + 1 = 11 (``ceiling``: 10).
    ``uniform_decode`` (v0.29–v0.30): + n × 5 for n in (1, 2, 4, 8) = 5, 10, 20 new (40 is already
    there): 16. ``uniform_decode_seqs`` (v0.31+): without drafts ``max_num_seqs`` 12 joins the
    1, 2, 4, 8, 16, 24 of ceiling 24: 7 against 6."""
    assert spec_capture_sizes("ceiling", 4, 8, 4096) == [1, 2, 4, *range(8, 81, 8)]
    assert spec_capture_sizes("ceiling", 0, 8, 4096) == [1, 2, 4, 8, 16]
    assert spec_capture_sizes("ceiling_mnbt", 4, 8, 4096) == spec_capture_sizes("ceiling", 4, 8, 4096)
    assert spec_capture_sizes("ceiling", 4, 8, 60) == [1, 2, 4, *range(8, 57, 8)]
    assert spec_capture_sizes("ceiling_mnbt", 4, 8, 60) == [1, 2, 4, *range(8, 57, 8), 60]
    assert spec_capture_sizes("uniform_decode", 4, 8, 4096) == sorted(
        [1, 2, 4, *range(8, 81, 8), 5, 10, 20])
    assert len(spec_capture_sizes("uniform_decode", 0, 12, 4096)) == 6
    assert spec_capture_sizes("uniform_decode_seqs", 0, 12, 4096) == [1, 2, 4, 8, 12, 16, 24]
    assert capture_sizes_033(4, 8, 4096) == spec_capture_sizes("uniform_decode_seqs", 4, 8, 4096)


@pytest.mark.parametrize(("engine", "sizes", "counted"), [
    ("vllm@0.19", 13, False), ("vllm@0.20.0", 13, True), ("vllm@0.28", 13, True),
    ("vllm@0.29", 16, True), ("vllm@0.30", 16, True), ("vllm@0.32", 16, True), ("vllm@0.33", 16, True)])
def test_ngram_on_each_release_adds_only_capture_sizes(engine: str, sizes: int, counted: bool) -> None:
    """Qwen3-8B, ngram with 4 tokens, 8 sequences, 4,096 batched tokens, CUDA graphs on (the
    settings of logs 80–82 without --enforce-eager): no drafter weights, no drafter KV, no lookahead
    slots; ``sizes`` capture sizes with the drafts (``spec_capture``) against 5 without, each at the
    release's fitted 8,012,999 B per size: 8 more = 64,103,992 B (v0.18–v0.28), 11 more =
    88,142,989 B (v0.29+). v0.18–v0.19 do not subtract CUDA graphs (``graphs_counted``: the term is
    listed, not counted)."""
    plan, result = _fit("qwen3-8b", NGRAM4, engine=engine, gpu=custom_gpu(47.37), tokens=4096,
                        gpu_util=0.75, max_num_batched_tokens=4096, max_num_seqs=8)
    assert result.speculative is not None
    assert (result.speculative["draft_weights_bytes"], result.speculative["draft_kv_layers"],
            result.speculative["lookahead_tokens"]) == (0, 0, 0)
    assert result.speculative["cudagraph_capture_sizes"] == sizes
    detail = plan.budget.reserve_detail
    assert detail is not None
    terms = {t.name: t for t in detail.terms}
    assert "spec_draft_weights" not in terms
    assert terms["spec_cuda_graphs"].bytes == (sizes - 5) * 8_012_999
    assert terms["spec_cuda_graphs"].counted is counted


def test_ngram_disables_async_scheduling_where_it_reaches_the_pool() -> None:
    """``VllmConfig.__post_init__`` (0.29.0 ``:1281``; 0.33.0 ``:1654``, the V1 runner that ngram
    runs on): "Async scheduling not supported with ngram-based speculative decoding and will be
    disabled" — the resolved setting is off with ngram or suffix, on without a drafter and with a
    draft model (``draft_model`` keeps it)."""
    arch = load_model("llama-3.1-8b")
    for spec, expected in ((None, True), (NGRAM4, False), ('{"method":"suffix"}', False),
                           (DRAFT_1B, True)):
        plan = make_plan(arch, get_gpu("h100-sxm"), FitQuery(engine="vllm@0.33", tokens=8192,
                                                             speculative_config=spec))
        assert plan.settings.async_scheduling is expected, spec


def test_methods_v019_has_not_been_read_for_are_named() -> None:
    """v0.18–v0.32: kvplan read ngram and suffix only; a draft model or an EAGLE head there is
    refused with the release's list (``spec.method``), a release before v0.18 with ``spec.release``."""
    with pytest.raises(KVPlanError) as err:
        _fit("llama-3.1-8b", DRAFT_1B, engine="vllm@0.29")
    assert err.value.code == "spec.method"
    assert str(err.value) == ("--speculative-config: method 'draft_model' is not one vLLM v0.29 "
                              "supports as kvplan models it (ngram, suffix)")
    with pytest.raises(KVPlanError) as err:
        _fit("llama-3.1-8b", NGRAM4, engine="vllm@0.17")
    assert err.value.code == "spec.release"


def test_pool_arch_marks_the_drafter_by_a_typed_count() -> None:
    """``Vllm.pool_arch`` appends the drafter's 16 Llama-3.2-1B layers once (32 + 16 = 48) and
    records them in ``ModelArch.drafter_layers``; a second call returns the same object. The
    check reads that count, not a note's text: a model whose own notes begin with the drafter
    note's words is still extended."""
    from kvplan.engines.vllm.engine import DRAFTER_NOTE, Vllm

    plan, _ = _fit("llama-3.1-8b", DRAFT_1B)
    engine, settings = plan.engine, plan.settings
    assert isinstance(engine, Vllm) and plan.arch.drafter_layers == 0
    pooled = engine.pool_arch(plan.arch, settings)
    assert (pooled.n_layers, pooled.drafter_layers) == (48, 16)
    assert engine.pool_arch(pooled, settings) is pooled
    noted = plan.arch.model_copy(update={"notes": (*plan.arch.notes, DRAFTER_NOTE)})
    assert (engine.pool_arch(noted, settings).n_layers, engine.pool_arch(noted, settings).drafter_layers) \
        == (48, 16)
