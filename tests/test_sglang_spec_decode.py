"""SGLang 0.5.23 speculative decoding (``--speculative-algorithm``, issue #26 item 1): the draft's KV
in the token cell, its weights off the budget, ``max_running_requests`` 48 and the named refusals.

Hand-derived from SGLang 0.5.23: ``model_executor/pool_configurator.py``
``DefaultPoolConfigurator.__init__`` (cell += ``int(cell × draft_layers / num_layers)``),
``model_runner_components/spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state`` (draft
layers), ``arg_groups/speculative_hook.py`` ``_handle_eagle_family`` / ``_auto_choose_speculative_params``
(48 running requests, steps/topk/draft tokens), ``speculative/spec_info.py`` ``from_string``.
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


def _fit(model: str, gpu: str = "h100-sxm", **query: object):
    q = FitQuery(engine="sglang", tokens=int(query.pop("tokens", 8192)), **query)  # type: ignore[arg-type]
    plan = make_plan(load_model(model), get_gpu(gpu) if gpu != "custom" else custom_gpu(80), q)
    return plan, fit(plan, search_gpus=False)


def test_eagle3_head_adds_one_target_layer_to_the_cell() -> None:
    """Llama-3.1-8B at TP 1: cell 32 × 2 × 8 × 128 × 2 B = 131,072 B; the EAGLE3 head (SpecForge's
    llama3-8B-eagle3, ``num_hidden_layers`` 1, no ``num_nextn_predict_layers``) adds
    int(131,072 × 1 / 32) = 4,096 B: 10,737,418,240 // 135,168 = 79,437 tokens (79,437 // 1, page 1)."""
    _, base = _fit("llama-3.1-8b", "custom", kv_cache_memory_bytes=BUDGET, reserve_gib=0)
    assert base.kv_pool_tokens == BUDGET // 131_072 == 81_920
    _, result = _fit("llama-3.1-8b", "custom", kv_cache_memory_bytes=BUDGET, reserve_gib=0,
                     speculative_algorithm="EAGLE3", speculative_draft_model_path=EAGLE3_HEAD)
    assert result.kv_pool_tokens == BUDGET // 135_168 == 79_437
    spec = result.speculative
    assert spec is not None
    assert (spec["draft_kv_layers"], spec["target_kv_layers"], spec["draft_kv_bytes_per_token"]) == (
        1, 32, 4_096)
    # _auto_choose_speculative_params: LlamaForCausalLM → (5 steps, topk 4, 8 draft tokens)
    assert (spec["speculative_num_steps"], spec["speculative_eagle_topk"],
            spec["speculative_num_draft_tokens"]) == (5, 4, 8)


def test_nextn_on_deepseek_v3_uses_the_target_next_n_layer() -> None:
    """DeepSeek-V3 at TP 8, ``--speculative-algorithm NEXTN`` (→ EAGLE) and no draft path
    (``_handle_eagle_family``: the draft is the target's checkpoint): MLA cell 61 × (512 + 64) × 2 B
    = 70,272 B, + int(70,272 × 1 / 61) = 1,152 B → 71,424 B; 10 GiB // 71,424 = 150,333 tokens. The
    next-n layer's weights are the target's part ``mtp`` (loaded: ``--mtp`` on)."""
    plan, result = _fit("deepseek-v3", "h200", tp=8, num_gpus=8, kv_cache_memory_bytes=BUDGET,
                        reserve_gib=0, speculative_algorithm="NEXTN")
    assert result.kv_pool_tokens == BUDGET // 71_424 == 150_333
    assert plan.settings.mtp is True
    spec = result.speculative
    assert spec is not None
    assert (spec["method"], spec["resolved_algorithm"], spec["draft_kv_bytes_per_token"],
            spec["draft_weights_bytes"]) == ("NEXTN", "EAGLE", 1_152, 0)
    assert (spec["speculative_num_steps"], spec["speculative_eagle_topk"],
            spec["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert "mtp" in plan.weights.stages[-1]


def test_standalone_draft_weights_leave_the_budget_and_cell_grows_by_half() -> None:
    """STANDALONE Llama-3.1-8B + Llama-3.2-1B on an H100: draft layers 16 (its
    ``num_hidden_layers``), so the cell grows by int(131,072 × 16 / 32) = 65,536 B (SGLang prices
    them at the target's per-layer bytes); the 1B's weights, 2,471,628,800 B (embeddings 128,256 ×
    2,048 × 2, attention 16 × 2,048 × 5,120 × 2, MLP 16 × 3 × 2,048 × 8,192 × 2, norms 33 × 2,048 × 2;
    tied head) and what its loading holds besides (test_sglang_weights.test_what_sglang_holds_at_load_end:
    the fp32 RoPE cache 131,072 × 64 × 4 = 33,554,432; the allocator's segments 15,593,472 — the
    embedding 501 → 502 MiB, each 8 MiB o_proj in a 20 MiB segment whose 12 MiB remainder takes the
    next layer's qkv_proj, 16 × 20 + 12 MiB for 16 × 20, the norms in one 2 MiB segment), 2,520,776,704
    B, come off the budget unscaled by mem_fraction_static."""
    base_plan, _ = _fit("llama-3.1-8b")
    plan, result = _fit("llama-3.1-8b", speculative_algorithm="STANDALONE",
                        speculative_draft_model_path="llama-3.2-1b")
    terms = {t["name"]: t["bytes"] for t in result.ledger}
    assert terms["reserve: spec_draft_weights"] == 2_471_628_800 + 33_554_432 + 15_593_472 \
        == 2_520_776_704
    assert plan.budget.kv_budget == base_plan.budget.kv_budget - 2_520_776_704
    assert result.kv_pool_tokens == plan.budget.kv_budget // 196_608
    assert result.speculative is not None and result.speculative["draft_kv_bytes_per_token"] == 65_536
    assert (result.speculative["speculative_num_steps"],
            result.speculative["speculative_num_draft_tokens"]) == (3, 4)


def test_max_running_requests_defaults_to_48() -> None:
    """``_handle_eagle_family``: ``max_running_requests`` = 48 unless set; ``resolve_max_num_reqs``
    then treats it as set (min(48, tokens // 2)). A set value is kept."""
    plan, result = _fit("llama-3.1-8b", speculative_algorithm="EAGLE3",
                        speculative_draft_model_path=EAGLE3_HEAD)
    assert plan.settings.max_num_seqs == 48
    assert plan.startup.max_num_seqs == 48
    plan, _ = _fit("llama-3.1-8b", speculative_algorithm="EAGLE3", max_num_seqs=100,
                   speculative_draft_model_path=EAGLE3_HEAD)
    assert plan.settings.max_num_seqs == 100
    plan, _ = _fit("llama-3.1-8b", speculative_algorithm="NGRAM")
    assert plan.settings.max_num_seqs == 48 and plan.budget.kv_budget == _fit("llama-3.1-8b")[
        0].budget.kv_budget


def test_topk_one_sets_draft_tokens_to_steps_plus_one() -> None:
    """``_handle_eagle_family``: with topk 1, ``speculative_num_draft_tokens`` = steps + 1."""
    _, result = _fit("deepseek-v3", "h200", tp=8, num_gpus=8, speculative_algorithm="EAGLE",
                     speculative_num_steps=2, speculative_eagle_topk=1,
                     speculative_num_draft_tokens=10)
    assert result.speculative is not None
    assert result.speculative["speculative_num_draft_tokens"] == 3


@pytest.mark.parametrize(("model", "query", "code"), [
    ("llama-3.1-8b", {"speculative_algorithm": "MEDUSA"}, "sgl_spec.unknown"),
    ("llama-3.1-8b", {"speculative_algorithm": "dflash"}, "sgl_spec.unmodelled"),
    ("llama-3.1-8b", {"speculative_algorithm": "NEXTN"}, "sgl_spec.no_draft"),
    ("llama-3.1-8b", {"speculative_algorithm": "STANDALONE"}, "sgl_spec.no_draft"),
    ("llama-3.1-8b", {"speculative_algorithm": "STANDALONE",
                      "speculative_draft_model_path": "llama-2-7b"}, "sgl_spec.vocab"),
    ("llama-3.1-8b", {"speculative_algorithm": "EAGLE",
                      "speculative_draft_model_path": "llama-3.2-1b"}, "sgl_spec.hidden"),
    ("llama-3.1-8b", {"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 2,
                      "speculative_draft_model_path": EAGLE3_HEAD}, "sgl_spec.params"),
    ("llama-3.1-8b", {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "nope/x"},
     "spec.draft"),
    ("qwen3-next-80b-a3b", {"speculative_algorithm": "NEXTN",
                            "speculative_draft_model_path": "qwen3-next-80b-a3b"}, "sgl_spec.pool"),
])
def test_refusals_by_name(model: str, query: dict[str, object], code: str) -> None:
    with pytest.raises(KVPlanError) as err:
        _fit(model, **query)
    assert err.value.code == code


@pytest.mark.parametrize("release", ["0.4", "0.4.5", "0.4.6", "0.4.8", "0.5.3", "0.5.5"])
def test_releases_before_0_5_23_refuse_drafts_by_name(release: str) -> None:
    """kvplan sizes drafts from 0.5.23's code only (``SglangRelease.spec_algorithms``): an older
    record refuses every algorithm by name (``sgl_spec.release``) instead of applying 0.5.23's rules
    to a release that budgeted drafts otherwise (PR#23862); 0.5.23 itself sizes them."""
    arch = load_model("llama-3.1-8b")
    q = FitQuery(engine=f"sglang@{release}", tokens=8192, speculative_algorithm="NGRAM")
    with pytest.raises(KVPlanError) as err:
        fit(make_plan(arch, get_gpu("h100-sxm"), q), search_gpus=False)
    assert err.value.code == "sgl_spec.release"
    assert f"SGLang {release}" in str(err.value)
    ok = fit(make_plan(arch, get_gpu("h100-sxm"), q.model_copy(update={"engine": "sglang@0.5.23"})),
             search_gpus=False)
    assert ok.speculative is not None and ok.speculative["resolved_algorithm"] == "NGRAM"


def test_hybrid_swa_pool_sizes_the_draft_by_layer_kind() -> None:
    """``HybridSWAPoolConfigurator`` (gpt-oss: 2 × 8 KV heads × 64 × 2 B = 2,048 B per layer, full
    and sliding alike; ratio 0.8). gpt-oss-20b (12 full + 12 SWA): 12 × 2,048 + 0.8 × 12 × 2,048 =
    44,236.8 B; an EAGLE3 head's one layer is a full layer: + 2,048 = 46,284.8 B → 10 GiB // that =
    231,985 tokens. gpt-oss-120b (18 + 18: 66,355.2 B) with gpt-oss-20b as STANDALONE draft (its
    12 sliding layers sized as SWA layers, ``eagle_draft_swa_num_layers``): + 24,576 + 19,660.8 =
    110,592 B → 97,090 tokens."""
    plan, result = _fit("gpt-oss-20b", "custom", kv_cache_memory_bytes=BUDGET, reserve_gib=0,
                        speculative_algorithm="EAGLE3", speculative_draft_model_path=EAGLE3_HEAD)
    assert plan.pool.cell == 46_284.8  # type: ignore[attr-defined]
    assert result.kv_pool_tokens == int(BUDGET // 46_284.8) == 231_985
    assert result.speculative is not None and result.speculative["draft_swa_layers"] == 0
    plan, result = _fit("gpt-oss-120b", "custom", kv_cache_memory_bytes=BUDGET, reserve_gib=0,
                        speculative_algorithm="STANDALONE", speculative_draft_model_path="gpt-oss-20b")
    assert plan.pool.cell == 110_592  # type: ignore[attr-defined]
    assert result.kv_pool_tokens == BUDGET // 110_592 == 97_090
    assert result.speculative is not None
    assert (result.speculative["draft_swa_layers"], result.speculative["draft_kv_bytes_per_token"]) \
        == (12, 44_236.8)


def test_mamba_hybrid_reserves_the_drafts_intermediate_states() -> None:
    """Qwen3-Next at TP 4 (state 19,316,736 B per slot; 12 full-attention layers × 1,024 B = 12,288 B)
    with Qwen3-0.6B as STANDALONE draft (28 layers: int(12,288 × 28 / 12) = 28,672 B more per token,
    the share of the full-attention layers) and D = 4 draft tokens, 10 GiB given:
    ``_handle_max_mamba_cache`` K = (10,737,418,240 × 0.9 / 1.9 − 19,316,736 × 5) // (19,316,736 ×
    (1 + 4 / 5)) = 143 slots; the intermediate states of min(48, 143 // 5) = 28 (+1) requests,
    19,316,736 × 29 × 4 = 2,240,741,376 B, and the 144 main states leave 5,715,066,880 B of KV →
    139,528 tokens at 40,960 B; 28 running requests (143 // 5)."""
    plan, result = _fit("qwen3-next-80b-a3b", "custom", tp=4, num_gpus=4,
                        kv_cache_memory_bytes=BUDGET, reserve_gib=0,
                        speculative_algorithm="STANDALONE",
                        speculative_draft_model_path="Qwen/Qwen3-0.6B")
    pool = plan.pool
    assert (pool.per_request_state, pool.slots, pool.cell) == (19_316_736, 143, 40_960)  # type: ignore[attr-defined]
    assert pool.kv_budget == BUDGET - 144 * 19_316_736 - 2_240_741_376 == 5_715_066_880  # type: ignore[attr-defined]
    assert result.kv_pool_tokens == 139_528 and plan.startup.max_num_seqs == 28


def test_nextn_without_next_n_layers_is_refused() -> None:
    """A DeepSeek-V3 config without ``num_nextn_predict_layers``: no draft to load."""
    arch = load_model("deepseek-v3")
    arch = arch.model_copy(update={"weights": arch.weights.model_copy(update={"mtp_layers": 0})})
    q = FitQuery(engine="sglang", tokens=8192, tp=8, num_gpus=8, speculative_algorithm="NEXTN")
    with pytest.raises(KVPlanError) as err:
        fit(make_plan(arch, get_gpu("h200"), q), search_gpus=False)
    assert err.value.code == "sgl_spec.no_nextn"


def test_cli_flags_as_sglang_names_them() -> None:
    base = ["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang",
            "--tokens", "8192"]
    code, out, err = run_cli([*base, "--speculative-algorithm", "EAGLE3",
                              "--speculative-draft-model-path", EAGLE3_HEAD])
    assert code == 0, err
    assert "Speculative decoding: EAGLE3 (llama3-8B-eagle3), 5 steps, topk 4, 8 draft tokens" in out
    code, _, err = run_cli([*base, "--speculative-algorithm", "MEDUSA"])
    assert code != 0 and "Unknown speculative algorithm name" in err


def test_text_setting_is_bounded_and_printable() -> None:
    """``Setting.parse`` for a ``text`` setting: printable, at most 300 characters, not empty."""
    from kvplan.engines.settings import SETTINGS

    setting = SETTINGS["speculative_draft_model_path"]
    assert setting.parse(" llama-3.2-1b ") == "llama-3.2-1b"
    for bad, why in (("", "empty"), ("a\x00b", "control"), ("x" * 301, "longer than 300")):
        with pytest.raises(ValueError, match=why):
            setting.parse(bad)


TRUTH = json.loads((ROOT / "tests/fixtures/sglang/spec_decode.json").read_text(encoding="utf-8"))


def _stub_gpu():
    """``generate.py``'s device stub: the catalogue H100 with 81,559 MiB of CUDA total."""
    stub = TRUTH["device_stub"]
    gpu = get_gpu("h100-sxm")
    return gpu.model_copy(update={"cuda_total_mib": stub["capacity_mib"],
                                  "status": {**gpu.status, "cuda_total": "fixture stub"}})


def test_truth_fixture_provenance() -> None:
    """Written by ``tools/sglang_truth/spec_decode.py`` with SGLang 0.5.23 (17 cases: 14 through
    ``DefaultPoolConfigurator`` — 3 of them Qwen3-Next, a Mamba / linear-attention hybrid, whose
    state pool holds the draft's intermediate states —, 3 through ``HybridSWAPoolConfigurator`` —
    gpt-oss with an EAGLE3 head and with gpt-oss-20b as a STANDALONE draft, 12 of its 24 layers
    SWA; 48 running requests unless set or capped by the Mamba slots)."""
    assert TRUTH["sglang_version"] == "0.5.23" and len(TRUTH["cases"]) == 17
    assert [c["sglang"]["max_running_requests"] for c in TRUTH["cases"]].count(48) == 15
    configurators = [c["sglang"]["configurator"] for c in TRUTH["cases"]]
    assert configurators.count("DefaultPoolConfigurator") == 14
    assert configurators.count("HybridSWAPoolConfigurator") == 3
    assert [c["sglang"]["speculative"].get("eagle_draft_swa_num_layers") for c in TRUTH["cases"]
            if c["sglang"]["configurator"] == "HybridSWAPoolConfigurator"] == [None, 12, None]
    assert all(c["sglang"]["speculative"]["eagle_draft_num_layers"] for c in TRUTH["cases"])


@pytest.mark.parametrize("case", TRUTH["cases"], ids=[c["id"] for c in TRUTH["cases"]])
def test_case_matches_sglang(case: dict) -> None:
    """kvplan's pool tokens, cell, running requests, steps/topk/draft tokens and draft layers equal
    SGLang's own (``KVCacheConfigurator._resolve_memory_pool_config`` with the draft), exactly."""
    draft = case["draft"]
    if draft is not None and draft.endswith(".json"):
        draft = str(ROOT / draft)
    budget = case["mode"] == "budget"
    flags = dict(zip(case["flags"][::2], case["flags"][1::2], strict=True))
    names = {"--page-size": "page_size", "--max-running-requests": "max_num_seqs",
             "--max-mamba-cache-size": "max_mamba_cache_size",
             "--speculative-num-steps": "speculative_num_steps",
             "--speculative-eagle-topk": "speculative_eagle_topk",
             "--speculative-num-draft-tokens": "speculative_num_draft_tokens"}
    extra: dict[str, object] = {names[f]: int(v) for f, v in flags.items() if f in names}
    q = FitQuery(engine="sglang", tokens=4096, tp=case["tp"], num_gpus=case["tp"],
                 kv_dtype=flags.get("--kv-cache-dtype", "auto"), **extra,  # type: ignore[arg-type]
                 kv_cache_memory_bytes=case["available_bytes"] if budget else None,
                 reserve_gib=0 if budget else None,
                 reserve_terms=None if budget else {"held_before_load": 0.0},
                 speculative_algorithm=case["algorithm"], speculative_draft_model_path=draft)
    plan = make_plan(load_model(case["model"]), _stub_gpu(), q)
    result = fit(plan, search_gpus=False)
    want, spec = case["sglang"], case["sglang"]["speculative"]
    assert result.kv_pool_tokens == want["max_total_num_tokens"]
    assert plan.pool.cell == want["cell_size"]  # type: ignore[attr-defined]
    assert plan.startup.max_num_seqs == want["max_running_requests"]
    ours = result.speculative
    assert ours is not None
    assert (ours["speculative_num_steps"], ours["speculative_eagle_topk"],
            ours["speculative_num_draft_tokens"], ours["draft_kv_layers"],
            ours["target_kv_layers"]) == (
        spec["speculative_num_steps"], spec["speculative_eagle_topk"],
        spec["speculative_num_draft_tokens"], spec["eagle_draft_num_layers"],
        spec["num_effective_layers"])
    assert ours["draft_swa_layers"] == (spec.get("eagle_draft_swa_num_layers") or 0)
    if not budget:
        terms = {t["name"]: t["bytes"] for t in result.ledger}
        assert terms["reserve: spec_draft_weights"] == case["draft_weights_bytes"]


def test_blackwell_default_backend_takes_topk_one_only() -> None:
    """On SM 10.x SGLang's default backend for MHA/GQA is trtllm_mha (page 64), which refuses
    topk > 1 (``_handle_eagle_family``): Llama's automatic (5, 4, 8) is refused by name, topk 1 runs
    with draft tokens = steps + 1."""
    with pytest.raises(KVPlanError) as err:
        _fit("llama-3.1-8b", "b200", speculative_algorithm="EAGLE3",
             speculative_draft_model_path=EAGLE3_HEAD)
    assert err.value.code == "sgl_spec.trtllm_topk"
    _, result = _fit("llama-3.1-8b", "b200", speculative_algorithm="EAGLE3",
                     speculative_draft_model_path=EAGLE3_HEAD, speculative_num_steps=3,
                     speculative_eagle_topk=1)
    assert result.speculative is not None
    assert result.speculative["speculative_num_draft_tokens"] == 4


def test_link_keys_are_their_own() -> None:
    """The five SGLang flags' link keys (``qa qp qn qk qt``) are no other setting's nor a scenario
    field's (``sk`` stack kinds, ``sv`` serving were taken)."""
    from kvplan.engines.settings import SETTINGS
    from kvplan.scenario import Scenario

    keys = [s.key for s in SETTINGS.values()]
    aliases = {f.alias for f in Scenario.model_fields.values() if f.alias}
    assert len(keys) == len(set(keys)) and not set(keys) & aliases
    assert [SETTINGS[n].key for n in ("speculative_algorithm", "speculative_draft_model_path",
                                      "speculative_num_steps", "speculative_eagle_topk",
                                      "speculative_num_draft_tokens")] == ["qa", "qp", "qn", "qk", "qt"]
