"""vLLM LoRA adapter slots, derived by hand from vLLM 0.33.0's ``vllm/lora``:
``layers/column_parallel_linear.py`` ``MergedColumnParallelLinearWithLoRA.create_lora_weights`` and
``MergedQKVParallelLinearWithLoRA`` (A ``S×r×in`` per slice, B ``S×out/t×r`` per slice),
``layers/base_linear.py`` ``create_lora_weights`` (row-parallel: A ``S×r×in/t``, B ``S×out×r``),
``layers/vocab_parallel_embedding.py`` ``VocabParallelEmbeddingWithLoRA`` (A ``S×vocab×r``, B
``S×hidden×r``), ``layers/logits_processor.py`` ``LogitsProcessorWithLoRA`` (A ``S×r×hidden``, B
``S×vocab×r``, int64 ``sharded_to_full_mapping`` with TP ≥ 2), ``punica_wrapper/punica_base.py`` and
``punica_gpu.py`` (the workspace), ``config/lora.py`` (``MaxLoRARanks``, ``max_cpu_loras``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.adapters import adapters_that_fit
from kvplan.capacity import fit
from kvplan.cli import main
from kvplan.engines import EngineSettings
from kvplan.engines.vllm.lora import lora_slots
from kvplan.errors import KVPlanError
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

H100 = get_gpu("h100-sxm")
LLAMA8 = load_model("llama-3.1-8b")  # h 4,096, 32 heads, 8 KV heads × 128, I 14,336, vocab 128,256


def _plan(arch=LLAMA8, tokens=8192, users=1, engine="vllm@0.33", tp=1, pp=1, **settings):
    query = FitQuery(tokens=tokens, users=users, engine=engine, tp=tp, pp=pp,
                     settings=EngineSettings(tp=tp, pp=pp, **settings))
    return make_plan(arch, H100, query)


def _ledger(plan) -> dict[str, int]:
    return {t.name: t.bytes for t in plan.ledger}


def test_llama_8b_rank_64_four_slots_tp1_by_module() -> None:
    """Per slot, rank 64, bf16, 32 layers: qkv 64 × (3·4,096 + 4,096 + 2·1,024) × 2 × 32; o 64 ×
    (4,096 + 4,096) × 2 × 32; gate_up 64 × 2 × (4,096 + 14,336) × 2 × 32; down 64 × (14,336 +
    4,096) × 2 × 32; embed and lm_head 64 × (128,256 + 4,096) × 2 (no mapping at TP 1)."""
    slots = lora_slots(LLAMA8, tp=1, pp=1, max_loras=4, max_lora_rank=64, dtype="bf16", mnbt=8192,
                       max_num_seqs=1024, max_cpu_loras=None)
    per_slot = {m: b // 4 for m, b in slots.modules.items()}
    assert per_slot == {"qkv_proj": 75_497_472, "o_proj": 33_554_432, "gate_up_proj": 150_994_944,
                        "down_proj": 75_497_472, "embed_tokens": 16_941_056, "lm_head": 16_941_056}
    assert slots.slot_bytes == 369_426_432
    # (4·8,192 + 3·1,024) × 8 + 2 × (2·8,192·4 + 2·5·4 + 6·4)
    assert slots.workspace == 286_720 + 131_200 == 417_920
    assert slots.total == 4 * 369_426_432 + 417_920 == 1_478_123_648
    assert slots.cpu_bytes == 4 * 369_426_432


def test_tp2_splits_b_of_column_and_a_of_row_and_adds_the_vocab_mapping() -> None:
    """TP 2, rank 16, one slot: q 16 heads × 128 = 2,048, k/v 4 heads × 128 = 512 per rank;
    qkv 16 × (3·4,096 + 2,048 + 2·512) × 2 × 32; o 16 × (2,048 + 4,096) × 2 × 32; gate_up
    16 × 2 × (4,096 + 7,168) × 2 × 32; down 16 × (7,168 + 4,096) × 2 × 32; embed 16 × (128,256 +
    4,096) × 2 (whole vocab on each rank); lm_head the same + 128,256 (padded to 64) × 8 B."""
    slots = lora_slots(LLAMA8, tp=2, pp=1, max_loras=1, max_lora_rank=16, dtype="bf16", mnbt=2048,
                       max_num_seqs=256, max_cpu_loras=None)
    assert slots.modules == {"qkv_proj": 15_728_640, "o_proj": 6_291_456, "gate_up_proj": 23_068_672,
                             "down_proj": 11_534_336, "embed_tokens": 4_235_264,
                             "lm_head": 4_235_264 + 1_026_048}


def test_fully_sharded_splits_column_a_by_rank_and_row_b_by_output() -> None:
    """``--fully-sharded-loras`` at TP 2, rank 16, one slot: qkv 3 × 8 × 4,096 + 16 × (2,048 +
    2·512); o 16 × (2,048 + 2,048); gate_up 2 × (8 × 4,096 + 16 × 7,168); down 16 × (7,168 +
    2,048); each × 2 B × 32 layers; embed and lm_head as without it."""
    slots = lora_slots(LLAMA8, tp=2, pp=1, max_loras=1, max_lora_rank=16, dtype="bf16", mnbt=2048,
                       max_num_seqs=256, max_cpu_loras=None, fully_sharded=True)
    assert slots.modules == {"qkv_proj": (3 * 8 * 4096 + 16 * 3072) * 64,
                             "o_proj": 16 * 4096 * 64, "gate_up_proj": 2 * (8 * 4096 + 16 * 7168) * 64,
                             "down_proj": 16 * (7168 + 2048) * 64, "embed_tokens": 4_235_264,
                             "lm_head": 4_235_264 + 1_026_048}


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    """TP 16 on 8 KV heads: ``max(1, 8 // 16)`` = 1 head per rank (``QKVParallelLinear``); q 2 heads:
    qkv per slot rank 8 = 8 × (3·4,096 + 256 + 2·128) × 2 × 32."""
    slots = lora_slots(LLAMA8, tp=16, pp=1, max_loras=1, max_lora_rank=8, dtype="bf16", mnbt=2048,
                       max_num_seqs=256, max_cpu_loras=None)
    assert slots.modules["qkv_proj"] == 8 * (3 * 4096 + 256 + 256) * 2 * 32 == 6_553_600


def test_pp_keeps_the_heaviest_stage() -> None:
    """PP 2: 16 layers per stage, the embedding on the first, the LM head on the last (equal at TP 1)."""
    whole = lora_slots(LLAMA8, tp=1, pp=1, max_loras=1, max_lora_rank=16, dtype="bf16", mnbt=2048,
                       max_num_seqs=256, max_cpu_loras=None)
    half = lora_slots(LLAMA8, tp=1, pp=2, max_loras=1, max_lora_rank=16, dtype="bf16", mnbt=2048,
                      max_num_seqs=256, max_cpu_loras=None)
    layers = sum(b for m, b in whole.modules.items() if m not in {"embed_tokens", "lm_head"})
    assert sum(half.modules.values()) == layers // 2 + whole.modules["lm_head"]
    assert "embed_tokens" not in half.modules


def test_vocab_modules_only_where_the_model_class_declares_them() -> None:
    """``Qwen2ForCausalLM`` (``models/qwen2.py``) and ``Gemma3ForConditionalGeneration`` declare no
    ``embedding_modules``: only the linear layers get slots, and Gemma 3's 262,208-token vocabulary
    is no obstacle (the 258,048 limit is ``LogitsProcessorWithLoRA``'s, not built here)."""
    qwen = lora_slots(load_model("qwen2.5-7b"), tp=1, pp=1, max_loras=1, max_lora_rank=8, dtype="bf16",
                      mnbt=2048, max_num_seqs=256, max_cpu_loras=None)
    assert set(qwen.modules) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    gemma = _plan(load_model("gemma-3-12b"), enable_lora=True)
    assert "reserve: lora_slots" in _ledger(gemma)
    cohere = lora_slots(load_model("command-r"), tp=1, pp=1, max_loras=1, max_lora_rank=8,
                        dtype="bf16", mnbt=2048, max_num_seqs=256, max_cpu_loras=None)
    assert "embed_tokens" in cohere.modules and "lm_head" not in cohere.modules


def test_target_modules_restrict_the_wrapped_suffixes() -> None:
    slots = lora_slots(LLAMA8, tp=1, pp=1, max_loras=2, max_lora_rank=8, dtype="bf16", mnbt=2048,
                       max_num_seqs=256, max_cpu_loras=None, target_modules=("o_proj",))
    assert slots.modules == {"o_proj": 2 * 8 * (4096 + 4096) * 2 * 32}


def test_the_slots_are_a_ledger_term_that_the_kv_budget_loses_exactly() -> None:
    """Beside the slots, ``cudagraph_dispatcher.py`` ``_get_lora_cases`` captures every size for
    ``[0, max_loras + 1]`` adapters: the CUDA-graph term (408,662,949 B on an H100 at TP 1, see
    ``tests/test_reserve.py``) once more."""
    base = _plan()
    lora = _plan(enable_lora=True, max_loras=4, max_lora_rank=64)
    assert _ledger(lora)["reserve: lora_slots"] == 1_478_123_648
    assert _ledger(lora)["reserve: lora_cuda_graphs"] == _ledger(base)["reserve: cuda_graphs"] \
        == 408_662_949
    assert "reserve: lora_slots" not in _ledger(base)
    assert base.budget.kv_budget - lora.budget.kv_budget == 1_478_123_648 + 408_662_949
    eager = _plan(enable_lora=True, max_loras=4, max_lora_rank=64, enforce_eager=True)
    assert "reserve: lora_cuda_graphs" not in _ledger(eager)
    term = next(t for t in lora.ledger if t.name == "reserve: lora_slots")
    assert term.group == "reserve" and "create_lora_weights" in term.source and "rank 64" in term.formula
    assert sum(t.bytes for t in lora.ledger if t.group != "capacity" and t.group != "outside") \
        == H100.cuda_total_bytes


def test_adapters_that_fit_is_the_largest_max_loras_with_the_workload_fitting() -> None:
    """40 requests of 8,192 tokens on one H100 at rank 64: 45 slots fit, 46 do not."""
    plan = _plan(users=40, enable_lora=True, max_lora_rank=64)
    answer = adapters_that_fit(plan)
    assert answer.max_loras == 45 and answer.lora_bytes == 45 * 369_426_432 + 417_848 + 44 * 24
    assert fit(_plan(users=40, enable_lora=True, max_lora_rank=64, max_loras=45)).fits
    assert not fit(_plan(users=40, enable_lora=True, max_lora_rank=64, max_loras=46)).fits
    assert adapters_that_fit(_plan(users=10_000, enable_lora=True)).max_loras == 0


@pytest.mark.parametrize(("model", "settings", "engine", "needle"), [
    ("llama-3.1-8b", {"max_lora_rank": 24}, "vllm@0.33", "--max-lora-rank 24 is not a rank vLLM v0.33"),
    ("llama-3.1-8b", {"max_loras": 4, "max_cpu_loras": 2}, "vllm@0.33", "--max-cpu-loras 2 must be"),
    ("llama-3.1-8b", {}, "vllm@0.19", "vLLM v0.18–v0.19 is not modelled"),
    ("mixtral-8x7b", {}, "vllm@0.33", "has MoE experts"),
    ("deepseek-v2-lite", {}, "vllm@0.33", "has MoE experts"),
    ("jamba-1.5-mini", {}, "vllm@0.33", "has MoE experts"),
])
def test_bad_lora_settings_are_named(model: str, settings: dict, engine: str, needle: str) -> None:
    with pytest.raises(KVPlanError, match=needle.replace("(", r"\(")):
        _plan(load_model(model), engine=engine, enable_lora=True, **settings).budget  # noqa: B018


def test_cli_fit_prints_the_slots_and_the_adapters_that_fit(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8192", "--users", "40",
            "--enable-lora", "--max-lora-rank", "64", "--engine-version", "0.33"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "lora_slots" in out and "LoRA adapters that fit: 45 GPU slots" in out
    assert main([*args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["lora_adapters_that_fit"]["max_loras"] == 45
    assert {t["name"]: t["bytes"] for t in payload["ledger"]}["reserve: lora_slots"] == 369_844_280
    assert main([*args[:-2], "--max-lora-rank", "7"]) == 2
    assert "--max-lora-rank 7 is not a rank" in capsys.readouterr().err


TRUTH = json.loads((Path(__file__).parent / "fixtures" / "vllm_truth" / "lora_slots.json").read_text())


@pytest.mark.parametrize("case", TRUTH["cases"],
                         ids=lambda c: f"{c['model']}-tp{c['tp']}-r{c['max_lora_rank']}"
                         + ("-sharded" if c["fully_sharded_loras"] else ""))
def test_slots_equal_vllms_own_wrappers(case: dict) -> None:
    """``tools/vllm_truth/lora_slots.py``: vLLM 0.33.0's ``from_layer`` / ``create_lora_weights`` and
    ``PunicaWrapperGPU`` on the meta device under a gloo TP group — every module's bytes exact."""
    assert TRUTH["vllm"] == "0.33.0"
    arch = load_model(case["model"])
    slots = lora_slots(arch, tp=case["tp"], pp=1, max_loras=case["max_loras"],
                       max_lora_rank=case["max_lora_rank"], dtype=case["dtype"],
                       mnbt=case["max_num_batched_tokens"], max_num_seqs=case["max_num_seqs"],
                       max_cpu_loras=None, fully_sharded=case["fully_sharded_loras"])
    expected = {m: b * arch.n_layers for m, b in case["per_layer"].items()}
    expected |= {m: case[m] for m in ("embed_tokens", "lm_head") if case[m] is not None}
    assert slots.modules == expected
    assert slots.workspace == case["workspace"]


def test_lora_target_modules_restricts_the_slots() -> None:
    """``--lora-target-modules o_proj`` (``LoRAConfig.target_modules``, ``_match_target_modules``):
    only o_proj gets a wrapper — Llama-3.1-8B, 1 slot, rank 16, bf16: 32 × 16 × (32 × 128 + 4,096)
    × 2 B = 8,388,608 B, + the unchanged punica workspace 417,848 B = 8,806,456 B. ``q_proj,v_proj``
    name the packed qkv_proj (``is_in_target_modules``: a packed parent matched by its children),
    whose wrapper holds all three slices: 32 × (3 × 16 × 4,096 + 16 × 6,144) × 2 B = 18,874,368 B."""
    from kvplan.engines.vllm.lora import vllm_lora_targets

    def term(targets: str) -> int:
        plan = make_plan(load_model("llama-3.1-8b"), get_gpu("h100-sxm"),
                         FitQuery(engine="vllm", tokens=4096, enable_lora=True,
                                  lora_target_modules=targets))
        return {t.name: t.bytes for t in plan.budget.reserve_detail.terms}["lora_slots"]

    assert term("o_proj") == 8_388_608 + 417_848
    assert term("q_proj, v_proj") == 18_874_368 + 417_848
    assert vllm_lora_targets("gate_proj,up_proj,down_proj") == ("gate_up_proj", "down_proj")
    with pytest.raises(KVPlanError) as err:
        vllm_lora_targets("all")
    assert err.value.code == "lora.vllm_module"
