"""kvplan's ``sglang`` engine against SGLang 0.5.23's own pool sizing (fixtures, no SGLang import).

``tests/fixtures/sglang/cases.json`` is written by ``tools/sglang_truth/generate.py``, which runs
SGLang's argument resolution, ``ModelConfig`` and ``KVCacheConfigurator`` /
``DefaultPoolConfigurator`` / ``HybridSWAPoolConfigurator`` on CPU with only the GPU facts stubbed
(see ``tools/sglang_truth/README.md``). Each case is answered here through kvplan's public API
(``kvplan.capacity.fit`` with ``FitQuery(engine="sglang")``) and kvplan's ``kv_pool_tokens`` must
equal SGLang's ``max_total_num_tokens`` exactly.

Cases where kvplan is known to differ are listed in ``KNOWN_MISMATCH`` with their class; for those
the test asserts that kvplan still differs, so a fix fails the test until its entries are deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.arch import ModelArch
from kvplan.capacity import FitQuery, fit
from kvplan.config_import import parse_config
from kvplan.engines import EngineSettings, engine_view, get_engine
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model, model_presets

FIXTURE = Path(__file__).parent / "fixtures" / "sglang" / "cases.json"
DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))
CASES = DATA["cases"]
BY_ID = {case["id"]: case for case in CASES}

CHUNKED = "chunked layers in the hybrid SWA pool"
FLOAT32 = "float32 config downcast"
MEMORY_BASE = "memory base with the default mem_fraction_static"
SETTING = "SGLang setting kvplan does not model"
UNSUPPORTED = "architecture SGLang 0.5.23 cannot serve"

RECURRENT = "recurrent state pool split"

_CHUNKED_WHY = ("SGLang puts Llama 4's 36 chunked layers on the SWA side (configs/model_config.py "
                "get_hybrid_layer_ids) and sizes cell = 12·full + 0.8·36·swa "
                "(HybridSWAPoolConfigurator._recompute_cell_size); kvplan prices all 48 as full")
_F32_WHY = ("SGLang resolves dtype auto of a float32 config to fp16 (bf16 for Gemma) "
            "(configs/model_config.py _get_and_verify_dtype); kvplan keeps 4-byte KV")
_BASE_WHY = ("SGLang's budget is free_after − free_before·(1 − mfs) from free memory "
             "(kv_cache_configurator.py _profile_available_bytes), so 512 MiB of CUDA context "
             "costs 512 MiB·mfs; kvplan starts from the device capacity")
_SETTING_WHY = {
    "--swa-full-tokens-ratio": "swa_full_tokens_ratio scales the SWA side of the hybrid cell "
                               "(HybridSWAPoolConfigurator._recompute_cell_size); kvplan fixes 0.8",
    "--disable-hybrid-swa-memory": "every layer full length in DefaultPoolConfigurator; kvplan "
                                   "keeps gpt-oss's SWA pool",
    "--max-total-tokens": "caps max_total_num_tokens (kv_cache_configurator.py "
                          "_apply_token_constraints); kvplan has no such setting",
}
_RECURRENT_WHY = ("SGLang gives the Mamba pool (K+1)·state bytes with K = int((rest·0.9/1.9 − state)"
                  " // state) (kv_cache_configurator.py _handle_max_mamba_cache); kvplan keeps "
                  "int(budget / 1.9) for KV")
_UNSUPPORTED_WHY = ("no SGLang model class and the Transformers fallback is refused "
                    "(model_loader/utils.py resolve_transformers_arch)")

#: case id → (class, reason). Each fix deletes its entries (the test fails while they remain). The
#: six classes the fixture first showed (chunked layers in the hybrid SWA pool, float32 downcast,
#: memory base, the recurrent pool split, --swa-full-tokens-ratio / --disable-hybrid-swa-memory /
#: --max-total-tokens, unserved architectures) are modelled now.
KNOWN_MISMATCH: dict[str, tuple[str, str]] = {}
GIB = 1 << 30


def _flag(case: dict, flag: str) -> str | None:
    argv = case.get("argv", [])
    return argv[argv.index(flag) + 1] if flag in argv else None


def case_arch(case: dict) -> ModelArch:
    """The model of a fixture case: a preset (with the case's config overrides), or a config file
    of the repository (``*.json``: Falcon-H1, which has no preset), as the generator built it."""
    if case["model"].endswith(".json"):
        data = json.loads((Path(__file__).resolve().parent.parent / case["model"]).read_text(
            encoding="utf-8"))
        return parse_config({**{k: v for k, v in data.items() if not k.startswith("_")},
                             **case.get("config_overrides", {})}, name=Path(case["model"]).stem)
    preset = model_presets()[case["model"]]
    return parse_config({**preset.config, **case.get("config_overrides", {})}, name=preset.name,
                        params_total=preset.params_total, params_active=preset.params_active)


def kvplan_tokens(case: dict) -> tuple[int, int]:
    """kvplan's SGLang pool tokens for a fixture case, and its per-GPU weight bytes."""
    arch = case_arch(case)
    kv_dtype = case.get("kv_cache_dtype", "auto")
    ratio, total = _flag(case, "--swa-full-tokens-ratio"), _flag(case, "--max-total-tokens")
    query = FitQuery(engine="sglang", tokens=4096, tp=case.get("tp", 1), kv_dtype=kv_dtype,
                     page_size=case.get("page_size"),
                     kv_cache_memory_bytes=case["available_bytes"] if case["mode"] == "budget"
                     else None,
                     reserve_gib=case.get("cuda_context_bytes", 0) / GIB,
                     swa_full_tokens_ratio=float(ratio) if ratio else None,
                     max_total_tokens=int(total) if total else None,
                     disable_hybrid_swa_memory="--disable-hybrid-swa-memory" in case.get("argv", []))
    result = fit(make_plan(arch, stub_gpu(), query))
    return result.kv_pool_tokens, result.weights_bytes


def stub_gpu():
    """The generator's device stub (``device_stub``: H100, 81,559 MiB): the memory SGLang's stubbed
    ``get_available_gpu_memory`` reports is CUDA's total, so it is the catalogue H100 with that
    ``cuda_total_mib``."""
    stub = DATA["device_stub"]
    gpu = get_gpu("h100-sxm")
    assert gpu.device_name == stub["name"] and gpu.compute_capability == "{}.{}".format(
        *stub["compute_capability"])
    return gpu.model_copy(update={"cuda_total_mib": stub["capacity_mib"],
                                  "status": {**gpu.status, "cuda_total": "fixture stub"}})


def test_fixture_provenance_and_coverage():
    """Generated by SGLang 0.5.23 over ≥ 70 cases and ≥ 12 real configs, none failed."""
    assert DATA["sglang_version"] == "0.5.23"
    assert DATA["torch_version"].startswith("2.13.0")
    assert len(CASES) >= 70
    assert len({case["model"] for case in CASES}) >= 12
    assert [c["id"] for c in CASES if "error" in c] == []
    assert len(BY_ID) == len(CASES)
    assert set(KNOWN_MISMATCH) <= set(BY_ID)
    configurators = {c["sglang"]["configurator"] for c in CASES if "sglang" in c}
    assert configurators == {"DefaultPoolConfigurator", "HybridSWAPoolConfigurator"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_kvplan_matches_sglang_pool_tokens(case):
    if "unsupported" in case:  # SGLang refuses the architecture: so does kvplan, by name
        with pytest.raises(KVPlanError) as err:
            kvplan_tokens(case)
        assert err.value.code == "engine.unserved"
        return
    tokens, weights = kvplan_tokens(case)
    if case["mode"] == "default_fraction":
        assert weights == case["weights_bytes"]  # the stubbed weights are kvplan's
    want = case["sglang"]["max_total_num_tokens"]
    if case["id"] in KNOWN_MISMATCH:
        assert tokens != want, f"fixed: delete KNOWN_MISMATCH[{case['id']!r}]"
    else:
        assert tokens == want


@pytest.mark.parametrize("case", [c for c in CASES if "sglang" in c
                                  and c["sglang"]["configurator"] == "DefaultPoolConfigurator"
                                  and c["id"] not in KNOWN_MISMATCH
                                  and not c["model"].startswith("qwen3-next")],
                         ids=lambda c: c["id"])
def test_kvplan_token_bytes_equal_sglang_cell_size(case):
    """``DefaultPoolConfigurator._compute_cell_size`` equals kvplan's bytes per token per rank."""
    arch = case_arch(case)
    view = engine_view(arch, "sglang", case.get("kv_cache_dtype", "auto"),
                       EngineSettings(tp=case.get("tp", 1)))
    assert sum(r.layers * r.bytes_per_token for r in view.rules) == case["sglang"]["cell_size"]


def test_hand_derived_cases():
    """Two fixture values by hand.

    llama-3.1-8b, 40 GiB, bf16: cell = 32 layers × 8 heads × (128 + 128) × 2 B = 131,072 B;
    42,949,672,960 // 131,072 = 327,680 tokens. Llama 4 Scout (hybrid SWA): 12 full + 36
    chunked layers × 8 heads × 256 × 2 B = 4,096 B each; cell = 12·4096 + 0.8·36·4096 =
    167,116.8 B; int(42,949,672,960 / 167,116.8) = 257,003 full tokens, SWA 0.8× = 205,602.
    """
    llama = BY_ID["llama-3.1-8b-budget40g-auto-p1"]["sglang"]
    assert (llama["cell_size"], llama["max_total_num_tokens"]) == (131072, 327680)
    scout = BY_ID["llama-4-scout-budget40g-auto-p1"]["sglang"]
    assert scout["cell_size"] == pytest.approx(167116.8)
    assert (scout["full_attention_layers"], scout["swa_attention_layers"]) == (12, 36)
    assert (scout["max_total_num_tokens"], scout["swa_max_total_num_tokens"]) == (257003, 205602)


SIZED = [c for c in CASES if "sglang" in c]


@pytest.mark.parametrize("case", SIZED, ids=[c["id"] for c in SIZED])
def test_max_running_requests_and_mamba_slots_match_sglang(case: dict) -> None:
    """kvplan's request cap (``FitResult.max_num_seqs``: ``resolve_max_num_reqs``, with SGLang's
    ``context_len`` as the length) and Mamba slots (``state_blocks``: ``_handle_max_mamba_cache``'s
    ``max_mamba_cache_size``) are SGLang's own, case by case."""
    sg = case["sglang"]
    arch = case_arch(case)
    ratio, total = _flag(case, "--swa-full-tokens-ratio"), _flag(case, "--max-total-tokens")
    running = _flag(case, "--max-running-requests")
    query = FitQuery(engine="sglang", tokens=sg["context_len"], tp=case.get("tp", 1),
                     kv_dtype=case.get("kv_cache_dtype", "auto"), page_size=case.get("page_size"),
                     kv_cache_memory_bytes=case["available_bytes"] if case["mode"] == "budget" else None,
                     reserve_gib=case.get("cuda_context_bytes", 0) / GIB,
                     swa_full_tokens_ratio=float(ratio) if ratio else None,
                     max_total_tokens=int(total) if total else None,
                     max_num_seqs=int(running) if running else None,
                     disable_hybrid_swa_memory="--disable-hybrid-swa-memory" in case.get("argv", []))
    result = fit(make_plan(arch, stub_gpu(), query), search_gpus=False)
    assert (result.max_num_seqs, result.state_blocks, result.kv_pool_tokens) == \
        (sg["max_running_requests"], sg["max_mamba_cache_size"], sg["max_total_num_tokens"])


def test_the_cap_cases_cover_mamba() -> None:
    """Qwen3-Next, the 12 Qwen3.5 / Qwen3.6 cases (multimodal wrappers: SGLang's 100 MiB
    embedding cache leaves the budget before the Mamba split) and 4 Falcon-H1 cases (attention and
    a Mamba-2 mixer on every layer, TP 1 and 2: 95 → 99 sized cases, 15 → 19 with Mamba slots)
    size Mamba slots."""
    assert len(SIZED) == 99 and sum(c["sglang"]["max_mamba_cache_size"] is not None for c in SIZED) == 19
    assert sum("qwen3.5" in c["id"] or "qwen3.6" in c["id"] for c in SIZED) == 12
    assert sum("falcon-h1" in c["id"] for c in SIZED) == 4


DP_ATTENTION = [c for c in SIZED if "--enable-dp-attention" in c.get("args", [])]


@pytest.mark.parametrize("case", DP_ATTENTION, ids=[c["id"] for c in DP_ATTENTION])
def test_dp_attention_rank_matches_sglang(case: dict) -> None:
    """DeepSeek-V3 / Kimi-K2 under ``--tp 8 --enable-dp-attention --dp D`` (kvplan: ``dp = D``,
    ``tp = 8 / D`` per attention rank, ``dp_flags``): one rank's MLA pool and the server's
    ``max_running_requests`` (``resolve_max_num_reqs``), SGLang's own."""
    sg, dp = case["sglang"], int(_flag(case, "--dp-size") or 0)
    query = FitQuery(engine="sglang", tokens=sg["context_len"], tp=case["tp"] // dp, dp=dp,
                     num_gpus=case["tp"], kv_cache_memory_bytes=case["available_bytes"])
    result = fit(make_plan(load_model(case["model"]), stub_gpu(), query), search_gpus=False)
    assert (result.kv_pool_tokens, result.max_num_seqs, result.dp) == \
        (sg["max_total_num_tokens"], sg["max_running_requests"], dp)
    assert get_engine("sglang").dp_flags(dp, case["tp"] // dp).startswith(
        f"--enable-dp-attention --dp {dp} --tp {case['tp']}")


def test_dp_attention_cases_present() -> None:
    assert sorted(c["id"] for c in DP_ATTENTION) == sorted(
        f"{m}-tp8-dp{d}-dpattn-budget20g-auto-p1" for m in ("deepseek-v3", "kimi-k2") for d in (8, 4))
