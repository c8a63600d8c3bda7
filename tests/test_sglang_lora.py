"""SGLang's LoRA memory pool (``kvplan.engines.sglang.lora``), derived by hand from SGLang 0.5.23's
``python/sglang/srt/lora/mem_pool.py`` (``LoRAMemoryPool.get_lora_A_shape`` / ``get_lora_B_shape``,
``get_embedding_lora_A_shape`` / ``_B_shape``, ``_column_parallel_lora_b_per_rank_dim``,
``init_buffers``: every layer of ``num_hidden_layers``), ``lora/utils.py`` (``get_default_hidden_dim``,
``get_stacked_multiply``, ``get_lm_head_lora_b_shard_size``) and where the pool is charged:
``model_executor/model_runner.py`` ``initialize`` (``maybe_init_lora_manager`` after ``load_model``,
before the KV pool) with ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``.

Llama-3.1-8B: hidden 4,096, 32 heads, 8 KV heads × 128, intermediate 14,336, vocab 128,256, 32
layers, bf16 (2 B)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli import main
from kvplan.engines import EngineSettings
from kvplan.engines.sglang.lora import sglang_lora_pool
from kvplan.errors import KVPlanError
from kvplan.plan import FitQuery, make_plan
from kvplan.presets import get_gpu, load_model

H100 = get_gpu("h100-sxm")
LLAMA8 = load_model("llama-3.1-8b")
#: SGLang's weights of Llama-3.1-8B on one H100: 16,060,522,496 B of tensors + what loading holds
#: besides (the fp32 RoPE cache 67,108,864 + the allocator's rounding 1,564,672:
#: test_sglang_weights.test_what_sglang_holds_at_load_end); every pin below moved by −68,673,536.
TOTAL, WEIGHTS = 85_027_979_264, 16_060_522_496 + 68_673_536


def test_llama_8b_eight_slots_rank_16_tp1_by_module() -> None:
    """S 8, r 16, 32 layers, × 2 B: qkv 32·8·(3·16·4,096 + 6,144·16); o 32·8·(16·4,096 + 4,096·16);
    gate_up 32·8·(2·16·4,096 + 28,672·16); down 32·8·(16·14,336 + 4,096·16); embed 8·(16·128,256 +
    4,096·16); lm_head 8·(16·4,096 + 128,256·16) (pad64(128,256) = 128,256, TP 1)."""
    pool = sglang_lora_pool(LLAMA8, tp=1, max_loras_per_batch=8, max_lora_rank=16, dtype="bf16")
    assert pool.modules == {"qkv_proj": 32 * 8 * 294_912 * 2, "o_proj": 32 * 8 * 131_072 * 2,
                            "gate_up_proj": 32 * 8 * 589_824 * 2, "down_proj": 32 * 8 * 294_912 * 2,
                            "embed_tokens": 8 * 2_117_632 * 2, "lm_head": 8 * 2_117_632 * 2}
    assert pool.total == 738_852_864 and pool.slot_bytes == 92_356_608


def test_tp16_replicates_kv_heads_in_qkv_b_and_shards_the_lm_head() -> None:
    """TP 16 > 8 KV heads: qkv B per rank = 32·128/16 + 2·128 = 512
    (``_column_parallel_lora_b_per_rank_dim``); o A 4,096/16 = 256; gate_up B 2·14,336/16 = 1,792;
    down A 14,336/16 = 896; the embedding whole on every rank; lm_head B 128,256/16 = 8,016 rows. S 1, r 8."""
    pool = sglang_lora_pool(LLAMA8, tp=16, max_loras_per_batch=1, max_lora_rank=8, dtype="bf16")
    assert pool.modules == {"qkv_proj": 32 * (3 * 8 * 4096 + 512 * 8) * 2,
                            "o_proj": 32 * (8 * 256 + 4096 * 8) * 2,
                            "gate_up_proj": 32 * (2 * 8 * 4096 + 1792 * 8) * 2,
                            "down_proj": 32 * (8 * 896 + 4096 * 8) * 2,
                            "embed_tokens": (8 * 128_256 + 4096 * 8) * 2,
                            "lm_head": (8 * 4096 + 8016 * 8) * 2}
    assert pool.total == 18_760_960


def _plan(**settings: object):
    """The memory held before loading set to 0, so the fraction rule alone is derived below."""
    return make_plan(LLAMA8, H100, FitQuery(tokens=8192, users=8, engine="sglang",
                                            reserve_terms={"held_before_load": 0},
                                            settings=EngineSettings(gpu_util=0.8, **settings)))


def test_the_pool_comes_off_the_kv_budget_unscaled_by_mem_fraction_static() -> None:
    """KV = int(85,027,979,264 × 0.8) − weights − LoRA = 68,022,383,411 − 16,129,196,032 − 738,852,864
    = 51,154,334,515; with 0.5 GiB held before loading: int((TOTAL − 536,870,912) × 0.8) − W − LoRA =
    67,592,886,681 − 16,129,196,032 − 738,852,864 = 50,724,837,785 (the held bytes scale, the pool
    does not)."""
    assert _plan().budget.kv_budget == 68_022_383_411 - WEIGHTS == 51_893_187_379
    plan = _plan(enable_lora=True, max_loras=8)
    assert plan.budget.kv_budget == 68_022_383_411 - WEIGHTS - 738_852_864 == 51_154_334_515
    term = next(t for t in plan.ledger if t.name == "reserve: lora_pool")
    assert term.group == "reserve" and term.bytes == 738_852_864
    assert "LoRAMemoryPool.init_buffers" in term.source
    settings = EngineSettings(gpu_util=0.8, enable_lora=True, max_loras=8)
    held = make_plan(LLAMA8, H100, FitQuery(tokens=8192, users=8, engine="sglang",
                                            reserve_terms={"held_before_load": 0.5}, settings=settings))
    assert held.budget.kv_budget == int((TOTAL - 536_870_912) * 0.8) - WEIGHTS - 738_852_864 == 50_724_837_785


def test_models_kvplan_does_not_size_are_refused_by_name() -> None:
    with pytest.raises(KVPlanError, match="sizes LoRA slots for dense attention decoders; .* MoE experts"):
        sglang_lora_pool(load_model("qwen3-30b-a3b"), tp=1, max_loras_per_batch=1, max_lora_rank=8,
                         dtype="bf16")
    with pytest.raises(KVPlanError, match="--lora-target-modules q_proj is not a module SGLang"):
        sglang_lora_pool(LLAMA8, tp=1, max_loras_per_batch=1, max_lora_rank=8, dtype="bf16",
                         target_modules=("q_proj",))


def test_cli_fit_sglang_with_lora(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8192", "--users", "8",
                 "--engine", "sglang", "--gpu-util", "0.8", "--enable-lora", "--max-loras-per-batch", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # SGLang's default held before loading on NVIDIA, 546,534,588 B (SGLANG_HELD_BEFORE_LOAD):
    # int((85,027,979,264 − 546,534,588) × 0.8) − 16,129,196,032 − 738,852,864
    assert out["kv_budget_bytes"] == int((TOTAL - 546_534_588) * 0.8) - WEIGHTS - 738_852_864 \
        == 50_717_106_844
    assert {t["name"]: t["bytes"] for t in out["ledger"]}["reserve: lora_pool"] == 738_852_864
    assert out["lora_adapters_that_fit"]["lora_bytes"] > 0


FIXTURE = Path(__file__).parent / "fixtures" / "sglang" / "lora_pool.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-tp{c['tp']}-s{c['max_loras_per_batch']}"
                                                     f"-r{c['max_lora_rank']}")
def test_exact_on_sglangs_own_buffer_shapes(case: dict) -> None:
    """``tools/sglang_truth/lora_pool.py``: SGLang 0.5.23's ``get_lora_A_shape`` / ``get_lora_B_shape`` /
    ``get_embedding_lora_*_shape`` run on the CPU; kvplan's bytes per module = elements × 2 (bf16)."""
    pool = sglang_lora_pool(load_model(case["model"]), tp=case["tp"],
                            max_loras_per_batch=case["max_loras_per_batch"],
                            max_lora_rank=case["max_lora_rank"], dtype="bf16")
    assert pool.modules == {m: n * 2 for m, n in case["elements"].items()}


def test_lora_target_modules_normalized_as_sglang_does() -> None:
    """``--lora-target-modules`` through ``get_normalized_target_modules``: ``q_proj,v_proj`` →
    qkv_proj only (32 × 16 × (3 × 4,096 + 6,144) × 2 B = 18,874,368 B at 1 slot), ``self_attn.o_proj``
    → o_proj (32 × 16 × (4,096 + 4,096) × 2 B = 8,388,608 B); ``all`` = every module."""
    from kvplan.engines.sglang.lora import SGLANG_LORA_MODULES, sglang_lora_targets

    assert sglang_lora_targets("q_proj,v_proj") == ("qkv_proj",)
    assert sglang_lora_targets("all") == SGLANG_LORA_MODULES
    for targets, want in (("q_proj,v_proj", 18_874_368), ("self_attn.o_proj", 8_388_608)):
        plan = make_plan(load_model("llama-3.1-8b"), get_gpu("h100-sxm"),
                         FitQuery(engine="sglang", tokens=4096, enable_lora=True,
                                  lora_target_modules=targets))
        assert {t.name: t.bytes for t in plan.budget.reserve_detail.terms}["lora_pool"] == want
