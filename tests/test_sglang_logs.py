"""Public SGLang start-up logs (``tests/fixtures/sglang_logs``) against kvplan's ``sglang`` engine.

Each fixture is one real run found in public material: its source, the settings it used, the
numbers it printed (``logged``) and the verbatim lines (``log_excerpt``). Checks:

* every logged number is written in the excerpt, and ``kvplan.engines.sglang.log.parse_sglang_log`` reads
  it back (the smallest rank; the largest for "mem usage");
* **(a1) pool bytes, exact**: SGLang allocates ``size + page_size`` token slots per layer
  (``mem_cache/memory_pool.py`` ``MHATokenToKVPool._create_buffers`` / ``MLATokenToKVPool``) and
  prints each buffer's bytes with ``%.2f`` of 2^30 B; kvplan's bytes per token per rank times
  ``tokens + page_size`` must lie in the printed K + V (± 0.005 GiB each) or MLA "KV size";
* **(a2) tokens from the logged memory, exact**: ``profile_max_num_token`` (``model_runner.py``,
  0.5.x ``model_runner_kv_cache_mixin.py``) keeps ``rest = free after loading − free before
  loading × (1 − mem_fraction_static)`` GiB and makes ``int(rest · 2^30) // cell`` tokens, page
  aligned. The printed free memory (2 decimals, minimum over ranks) pins ``rest`` to an interval
  (``SglangLog.rest_memory_interval``); kvplan given each end as ``kv_cache_memory_bytes`` must
  bracket the logged token count;
* **(b) end to end**: kvplan's ``fit`` from the user-facing settings alone (model preset or
  vendored config, GPU preset, TP, mem_fraction_static, page size, KV dtype) against the logged
  pool, within ``e2e_tolerance_bytes`` of KV memory per GPU (the memory kvplan cannot know: held
  before loading, and its weight estimate). Cases outside are ``KNOWN_MISMATCH`` (the test fails
  once they agree), cases that cannot be run are ``NOT_COMPARABLE``, each with its reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from log_fixtures import check_numbers_written, check_schema, fixture_arch, load, values

from kvplan.capacity import FitQuery, fit
from kvplan.engines import EngineSettings, engine_view, get_engine
from kvplan.engines.sglang import SGLANG_SWA_FULL_RATIO
from kvplan.engines.sglang.log import SglangLog, parse_sglang_log
from kvplan.plan import make_plan
from kvplan.presets import get_gpu

DIR = Path(__file__).resolve().parent / "fixtures" / "sglang_logs"
FIXTURES = sorted(DIR.glob("[0-9][0-9]-*.json"))
GIB = 1 << 30
#: Half a unit of the last printed decimal of a "%.2f GB" value, in bytes (rounded up).
HALF_ULP = -(-GIB // 200)

REQUIRED = {
    "id": str, "source": str, "source_title": str, "retrieved": str, "found_via": str,
    "sglang_version": (str, type(None)), "version_evidence": str, "gpu": str, "gpu_count": int,
    "gpu_evidence": str, "gpu_preset": (str, type(None)), "model": str, "model_evidence": str,
    "checkpoint_format": str, "model_preset": (str, type(None)), "config": (str, type(None)),
    "settings": dict, "settings_evidence": str, "logged": dict, "log_excerpt": str, "notes": str,
}
SETTINGS = {
    "tp_size": int, "dp_size": int, "mem_fraction_static": float, "page_size": int,
    "context_length": int, "kv_cache_dtype": str, "dtype": str, "attention_backend": str,
    "chunked_prefill_size": int, "max_total_tokens": int,
}
#: logged field → (type, the SglangLog attribute parse_sglang_log fills, or None: not parsed).
LOGGED = {
    "load_begin_avail_gib": (float, "load_begin_avail_gib"),
    "load_end_avail_gib": (float, "load_end_avail_gib"),
    "weight_mem_usage_gib": (float, "weight_mem_usage_gib"),
    "kv_tokens": (int, "kv_tokens"),
    "k_size_gib": (float, "k_size_gib"),
    "v_size_gib": (float, "v_size_gib"),
    "kv_size_gib": (float, "kv_size_gib"),
    "pool_end_avail_gib": (float, "pool_end_avail_gib"),
    "max_total_num_tokens": (int, "max_total_num_tokens"),
    "context_len": (int, "context_len"),
    "available_gpu_mem_gib": (float, "available_gpu_mem_gib"),
    "full_layer_tokens": (int, None),
    "swa_layer_tokens": (int, None),
}

#: (b) tolerance, in KV bytes per GPU: ``mem_fraction_static × PRELOAD_GIB + WEIGHT_SHARE ×
#: weights``. PRELOAD_GIB: what the process holds before loading (CUDA context, NCCL), which
#: kvplan's SGLang budget now subtracts as a per-vendor fit (``SGLANG_HELD_BEFORE_LOAD``, fitted on
#: 01, 02, 04, 05; the bound is kept as it was, not loosened): CUDA's total
#: (kvplan's capacity) − "Load weight begin" is 0.42 GiB in 01 (L4, TP 4; 22.05 − 21.63) and
#: 0.60 GiB in 02 (H100, TP 1; 79.19 − 78.59), and SGLang scales it by mem_fraction_static; 1.25 GiB
#: was set when the capacity was nvidia-smi's figure (0.86 and 1.06 GiB then) and covers 03, whose
#: memory lines were not posted. WEIGHT_SHARE: kvplan's weights per GPU against the logged "mem
#: usage" are −1.8% (01) and −1.0% (02); loaders pad and keep buffers kvplan does not count.
PRELOAD_GIB = 1.25
WEIGHT_SHARE = 0.03

#: (b) log id → why kvplan's end-to-end pool is outside the tolerance (must stay outside). 04/05
#: (Kimi-K2.5) left it when they moved from the FP8 kimi-k2 stand-in to the moonshotai/Kimi-K2.5
#: preset sized with SGLang's ROCm loading rules (kvplan.engines.sglang.weights): 2,461,957 tokens
#: against 2,454,421 logged, 0.49 GiB of KV per GPU (tolerance 3.22).
KNOWN_MISMATCH: dict[str, str] = {}
#: (b) log id → why there is no end-to-end prediction to make.
NOT_COMPARABLE: dict[str, str] = {
    "06": "Ascend NPU: kvplan has no Ascend accelerator preset",
    "07": "the GPU (a 24 GB card) and mem_fraction_static are not stated",
    "08": "the GPU is not stated (and the log has no memory lines)",
    "09": "the GPU is not stated (a 16 GB card: 15.08 GB free before loading)",
    "10": "the GPUs are not stated (20 GB-class), and cpu_offload_gb=48 keeps the weights in host "
          "memory, which kvplan does not model",
    "11": "the GPU is not stated (a 48 GB-class card: 44.11 GB free before loading)",
}


DOCS = {load(p)["id"]: load(p) for p in FIXTURES}



def arch_of(doc: dict):
    return fixture_arch(doc, DIR)


def page_of(doc: dict) -> int:
    return doc["settings"]["page_size"] or 1


def query(doc: dict, **extra) -> FitQuery:
    s = doc["settings"]
    extra.setdefault("engine", "sglang")
    return FitQuery(tokens=4096, tp=s["tp_size"], num_gpus=s["tp_size"],
                    kv_dtype=s["kv_cache_dtype"] or "auto",
                    page_size=s["page_size"] if page_of(doc) > 1 else None, **extra)


def pool_cell(doc: dict) -> int:
    """kvplan's KV bytes per token per rank of the pool the "KV Cache is allocated" line reports:
    the sliding-window pool for a hybrid-SWA log (``full_layer_tokens`` printed), else all layers."""
    s = doc["settings"]
    view = engine_view(arch_of(doc), "sglang", s["kv_cache_dtype"] or "auto",
                       EngineSettings(tp=s["tp_size"], block_size=page_of(doc)))
    swa_pool = "swa_layer_tokens" in doc["logged"]
    return sum(r.layers * r.bytes_per_token for r in view.rules
               if (r.kind in {"sliding", "chunked"}) == swa_pool)


def logged_tokens(doc: dict) -> int:
    return min(values(doc["logged"]["kv_tokens"]))


def e2e_tolerance_bytes(doc: dict, weights_bytes: int) -> int:
    return int(doc["settings"]["mem_fraction_static"] * PRELOAD_GIB * GIB + WEIGHT_SHARE * weights_bytes)


def test_the_set_covers_releases_accelerators_and_attention_designs():
    """≥ 11 logs from ≥ 10 sources: SGLang 0.4.3 and 0.5.8 (+ development builds), NVIDIA L4 and
    H100, AMD MI355X, an Ascend NPU; TP 1, 2, 4, 8; MHA/GQA, MLA, and a hybrid sliding-window pool
    with a 64-token page; page size 128."""
    docs = list(DOCS.values())
    assert len(docs) == 11 and sorted(DOCS) == [f"{i:02d}" for i in range(1, 12)]
    assert len({d["source"] for d in docs}) == 10
    assert {d["sglang_version"] for d in docs} - {None} == {"0.4.3.post4", "0.5.8.post1 (ROCm build)"}
    assert {d["gpu_preset"] for d in docs} == {"l4", "h100-sxm", "mi355x", None}
    assert {d["settings"]["tp_size"] for d in docs} == {1, 2, 4, 8}
    assert {d["settings"]["page_size"] for d in docs} == {1, 64, 128, None}
    assert any("kv_size_gib" in d["logged"] for d in docs)  # MLA
    assert any("swa_layer_tokens" in d["logged"] for d in docs)  # hybrid SWA


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_schema(path: Path):
    doc = load(path)
    check_schema(doc, path, REQUIRED, SETTINGS, LOGGED)
    assert doc["sglang_version"] is not None or "not stated" in doc["version_evidence"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_logged_number_is_written_in_the_excerpt(path: Path):
    check_numbers_written(load(path))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_the_parser_reads_the_logged_numbers(path: Path):
    doc = load(path)
    log = parse_sglang_log(doc["log_excerpt"])
    for key, value in doc["logged"].items():
        attr = LOGGED[key][1]
        if attr:
            want = max(values(value)) if key == "weight_mem_usage_gib" else min(values(value))
            assert getattr(log, attr) == want, key
    if "mem_fraction_static=" in doc["log_excerpt"]:
        assert log.mem_fraction_static == doc["settings"]["mem_fraction_static"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a1_pool_bytes_per_token_are_kvplans(path: Path):
    """``(tokens + page_size) × kvplan's bytes per token per rank`` lies in the printed sizes."""
    doc = load(path)
    logged = doc["logged"]
    slots = logged_tokens(doc) + page_of(doc)
    if "kv_size_gib" in logged:  # MLA: one latent buffer per layer
        printed, spread = min(values(logged["kv_size_gib"])), HALF_ULP
    else:
        printed = min(values(logged["k_size_gib"])) + min(values(logged["v_size_gib"]))
        spread = 2 * HALF_ULP
    assert abs(slots * pool_cell(doc) - printed * GIB) <= spread, (slots * pool_cell(doc) / GIB, printed)


def test_a1_hand_values():
    """QwQ-32B at TP 4: 64 layers × 2 of 8 KV heads × (128 + 128) × 2 B = 65,536 B; Kimi K2.5 (MLA,
    replicated): 61 × (512 + 64) × 2 B = 70,272 B; MiMo-V2-Flash's sliding pool at TP 4: 39 layers ×
    2 of 8 heads × (192 + 128) × 2 B = 49,920 B (the Hub config's 9 full layers are not in it)."""
    assert [pool_cell(DOCS[i]) for i in ("01", "04", "08")] == [65536, 70272, 49920]


def test_a1_sliding_pool_is_the_full_pool_times_the_ratio():
    """MiMo-V2-Flash, page 64: swa tokens = full tokens × swa_full_tokens_ratio (0.8), page
    aligned — kvplan's SGLANG_SWA_FULL_RATIO — as the log's 375,360 → 300,288."""
    logged = DOCS["08"]["logged"]
    full, swa = min(logged["full_layer_tokens"]), min(logged["swa_layer_tokens"])
    assert int(full * SGLANG_SWA_FULL_RATIO) // 64 * 64 == swa == logged_tokens(DOCS["08"])


#: (a2) log id → why the logged pool is outside what the printed memory allows (must stay outside).
A2_KNOWN_MISS: dict[str, str] = {
    "09": "2026-09 build: 133,052 tokens logged, below the 133,126–133,347 that 9.83 − 15.08 × 0.18 GiB "
          "(± rounding) allows — 74 tokens (4.2 MB) short. The logged count needs 'free before "
          "loading' ≈ 15.135 GB, i.e. 15.08 plus the 0.06 GB that 'Init torch distributed' took: this "
          "release may measure it before that init (not verified in its source)",
}


def _a2_docs() -> list[dict]:
    return [d for d in DOCS.values() if d["settings"]["mem_fraction_static"] is not None
            and parse_sglang_log(d["log_excerpt"]).rest_memory_interval(
                d["settings"]["mem_fraction_static"]) is not None]


def test_a2_covers_every_log_with_memory_lines_and_a_known_fraction():
    assert sorted(d["id"] for d in _a2_docs()) == ["01", "02", "04", "05", "06", "09", "10", "11"]


@pytest.mark.parametrize("doc", _a2_docs(), ids=lambda d: d["id"])
def test_a2_tokens_from_the_logged_memory(doc: dict):
    """kvplan given SGLang's rest memory (both ends of what the printed lines allow) brackets the
    logged token count: the cell, the int(// cell) and the page alignment are SGLang's."""
    log: SglangLog = parse_sglang_log(doc["log_excerpt"])
    low, high = log.rest_memory_interval(doc["settings"]["mem_fraction_static"])
    arch, gpu = arch_of(doc), get_gpu(doc["gpu_preset"] or "h100-sxm")
    # the log's own release where its source states one: 0.5.23 takes a multimodal model's
    # embedding cache out of the KV budget (mm_runtime_reservation_gb), 0.5.8 does not (04/05)
    engine = "sglang"
    if doc["sglang_version"]:
        engine = "sglang@" + get_engine("sglang").release_for_version(doc["sglang_version"])[0].key
    fewest = fit(make_plan(arch, gpu, query(doc, kv_cache_memory_bytes=low, engine=engine)),
                 search_gpus=False).kv_pool_tokens
    most = fit(make_plan(arch, gpu, query(doc, kv_cache_memory_bytes=high, engine=engine)),
               search_gpus=False).kv_pool_tokens
    if doc["id"] in A2_KNOWN_MISS:
        assert not fewest <= logged_tokens(doc) <= most, f"now bracketed: delete A2_KNOWN_MISS[{doc['id']!r}]"
        assert (fewest, logged_tokens(doc), most) == (133126, 133052, 133347)
    else:
        assert fewest <= logged_tokens(doc) <= most, (fewest, logged_tokens(doc), most)
    assert most - fewest <= 2 * 0.02 * GIB // pool_cell(doc) + page_of(doc)  # the rounding, no more


def test_a2_hand_values():
    """QwQ-32B (01): rest ∈ [6.085 − 21.635 × 0.15, 6.095 − 21.625 × 0.15] GiB = [2.83975,
        2.85125] GiB → [46,526, 46,714] tokens of 65,536 B; logged 46,611. Ascend (06), no begin line:
    free before = 29.60 + 31.01 GB (± 0.01), rest ∈ [29.595 − 60.62 × 0.2, 29.605 − 60.60 × 0.2]
    → 131,072 B tokens, page 128: [143,104, 143,232]; logged 143,104."""
    low, high = parse_sglang_log(DOCS["01"]["log_excerpt"]).rest_memory_interval(0.85)
    assert (low // 65536, high // 65536) == (46526, 46714)
    npu = parse_sglang_log(DOCS["06"]["log_excerpt"]).rest_memory_interval(0.8)
    assert [b // 131072 // 128 * 128 for b in npu] == [143104, 143232]


def _e2e_docs() -> list[dict]:
    return [d for d in DOCS.values() if d["id"] not in NOT_COMPARABLE]


def test_b_every_log_is_compared_or_says_why_not():
    assert sorted(d["id"] for d in _e2e_docs()) == ["01", "02", "03", "04", "05"]
    for i in NOT_COMPARABLE:
        settings = DOCS[i]["settings"]
        assert DOCS[i]["gpu_preset"] is None or settings["mem_fraction_static"] is None
    assert set(KNOWN_MISMATCH) <= {d["id"] for d in _e2e_docs()}


@pytest.mark.parametrize("doc", _e2e_docs(), ids=lambda d: d["id"])
def test_b_end_to_end_from_the_settings(doc: dict):
    """kvplan's pool from the preset/config, the GPU preset and the run's settings only, against
    the logged pool, in KV bytes per GPU."""
    asked = query(doc, gpu_util=doc["settings"]["mem_fraction_static"])
    result = fit(make_plan(arch_of(doc), get_gpu(doc["gpu_preset"]), asked), search_gpus=False)
    error = abs(result.kv_pool_tokens - logged_tokens(doc)) * pool_cell(doc)
    tolerance = e2e_tolerance_bytes(doc, result.weights_bytes)
    detail = (result.kv_pool_tokens, logged_tokens(doc), error / GIB, tolerance / GIB)
    if doc["id"] in KNOWN_MISMATCH:
        assert error > tolerance, f"now within tolerance: delete KNOWN_MISMATCH[{doc['id']!r}] {detail}"
    else:
        assert error <= tolerance, detail


def test_b_hand_values():
    """01, QwQ-32B on an L4: kvplan starts from CUDA's total (issue #14), 22,579 MiB (vLLM CI's
    22.05 GiB, presets/gpus/l4.json), less the NVIDIA memory held before loading
    (``SGLANG_HELD_BEFORE_LOAD``, 546,534,588 B = 0.509 GiB, fitted on 01 and 02), × 0.85 − 15.54 GiB
    of weights = 2.77 GiB → 45,361 tokens; SGLang had 21.63 GB free before loading and 15.54 GB of
    weights → 46,611. The weights are what loading takes of the free memory: the 15.26 GiB of
    parameters + the fp32 RoPE cache and the allocator's segment rounding (304,109,568 B,
    ``test_sglang_weights.test_what_sglang_holds_at_load_end``; 50,002 tokens before them, gap
    +0.21 GiB). The −0.08 GiB gap left is the 0.09 GiB × 0.85 the held term exceeds this log's
    0.42 GiB by. (Held memory 0: 57,090 tokens before the load-end terms.)"""
    doc = DOCS["01"]
    result = fit(make_plan(arch_of(doc), get_gpu("l4"), query(doc, gpu_util=0.85)), search_gpus=False)
    assert result.gpu_capacity_bytes == 22_579 * 2**20
    assert result.kv_budget_bytes == int((22_579 * 2**20 - 546_534_588) * 0.85) - result.weights_bytes
    assert result.kv_pool_tokens == 45361
    assert round((45361 - 46611) * 65536 / GIB, 2) == -0.08


def test_b_from_the_cuda_total_the_gap_narrows():
    """SGLang budgets from CUDA's free memory; nvidia-smi's total (``reported_mib``) exceeds CUDA's
    (``cuda_total_mib``) by 455 MiB (L4) and 470 MiB (H100). kvplan starts from the CUDA total
    (issue #14) less the memory held before loading, which moves the end-to-end pool towards the
    log compared with nvidia-smi's figure: 01 51,549 → 45,361 tokens (gap 0.32 → −0.08 GiB), 02
    447,449 → 444,141 (0.57 → 0.17 GiB). (Each was 4,641 and 524 tokens more before SGLang's
    weights held the RoPE cache and the allocator's rounding, ``test_b_hand_values``.)"""
    for log_id, reported, cuda in (("01", 51549, 45361), ("02", 447449, 444141)):
        doc = DOCS[log_id]
        gpu = get_gpu(doc["gpu_preset"])
        at_smi_total = gpu.model_copy(update={"cuda_total_mib": gpu.reported_mib})
        got = [fit(make_plan(arch_of(doc), g, query(doc, gpu_util=doc["settings"]["mem_fraction_static"])),
                   search_gpus=False).kv_pool_tokens for g in (at_smi_total, gpu)]
        assert got == [reported, cuda]
        assert abs(cuda - logged_tokens(doc)) < abs(reported - logged_tokens(doc))


def test_b_03_holds_the_nvlink_distributed_init():
    """03, Qwen3-235B-A22B-FP8 at TP 4 on H100 SXMs, mem_fraction_static 0.93 (typed), a log no
    constant was fitted on: SGLang budgets ``free after loading − free before × (1 − mfs)``
    (``model_runner.py`` ``profile_max_num_token``), so what the process holds before loading is
    scaled by mfs. Held = the NVIDIA context 546,534,588 B (``SGLANG_HELD_BEFORE_LOAD``) + the
    distributed init over NVLink at TP > 1, 2,158,221,066 B (``SGLANG_NVLINK_DIST_INIT``: 2.01 GiB,
    sgl-project/sglang PR#11716's 'Init torch distributed ends. mem usage=2.01 GB' at TP 8) =
    2,704,755,654 B; KV int((85,027,979,264 − 2,704,755,654) × 0.93) − 59,506,688,000 B of weights
    (59,186,485,760 of tensors + the fp32 RoPE cache 40,960 × 128 × 4 = 20,971,520 + the allocator's
    segments 299,230,720: each layer's FP8 qkv_proj, 2,304 × 4,096 = 9 MiB, and o_proj, 8 MiB, are
    both under 10 MiB and share a 20 MiB segment whose 3 MiB remainder no later request fits,
    ``test_sglang_weights.test_what_sglang_holds_at_load_end``) = 17,053,909,957 B // 48,128 B
    (94 layers × 1 KV head × 128 × 2 × 2 B) = 354,344 tokens against 367,404 logged: ×0.964, out of
    3 % (360,998, ×0.983, before the load-end terms; without the NVLink term ×1.08). The log prints
    no memory line, so which term is off is not known: the NVLink term is fitted on a TP 8 H200
    run, this is TP 4 on H100s; SGLang's FP8 post-load processing may re-pack the segments."""
    doc = DOCS["03"]
    result = fit(make_plan(arch_of(doc), get_gpu("h100-sxm"), query(doc, gpu_util=0.93)),
                 search_gpus=False)
    assert (result.weights_bytes, pool_cell(doc)) == (59_186_485_760 + 20_971_520 + 299_230_720, 48_128)
    assert result.kv_budget_bytes == int((85_027_979_264 - 2_704_755_654) * 0.93) - 59_506_688_000
    assert result.kv_pool_tokens == 354_344
    assert 0.96 < result.kv_pool_tokens / logged_tokens(doc) < 0.97


def test_the_nvlink_distributed_init_is_held_only_over_nvlink_at_tp_above_one():
    """``sglang_nvlink_dist_init``: 2.01 GiB = 2,158,221,066 B on NVLink 3/4/5 parts at TP > 1 (H100
    SXM, A100 SXM, B200, H200), 0 at TP 1, on PCIe cards (L4: log 01 prints 0.13 GB for the same
    step, inside the vendor term), on a bridged pair (H100 NVL) and on AMD (its 4.45 GiB vendor fit
    is a TP 8 run)."""
    from kvplan.engines.sglang.engine import SGLANG_NVLINK_DIST_INIT, sglang_nvlink_dist_init
    assert SGLANG_NVLINK_DIST_INIT == 2_158_221_066
    held = {(g, tp): sglang_nvlink_dist_init(get_gpu(g), tp)
            for g in ("h100-sxm", "a100-80gb-sxm", "b200", "h200", "l4", "h100-nvl", "mi355x")
            for tp in (1, 4)}
    assert {k for k, v in held.items() if v} == {("h100-sxm", 4), ("a100-80gb-sxm", 4), ("b200", 4),
                                                 ("h200", 4)}
    assert set(held.values()) == {0, SGLANG_NVLINK_DIST_INIT}
