"""The public vLLM start-up logs in ``tests/fixtures/vllm_logs``: schema, provenance and the log parser.

Every fixture is one real start-up log found in a public issue, blog post or committed log file
(``source``), with the settings the run used and the numbers it printed (``logged``). These tests
check the schema, that every logged number is written in the verbatim ``log_excerpt`` (no number
comes from elsewhere), and that ``kvplan.engines.vllm.log.parse_vllm_log`` reads from the excerpt
exactly the numbers recorded — or, where it cannot, that the fixture names the gap (``parser_gaps``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvplan.engines.vllm.log import VllmLog, parse_vllm_log
from kvplan.errors import KVPlanError

DIR = Path(__file__).resolve().parent / "fixtures" / "vllm_logs"
FIXTURES = sorted(DIR.glob("[0-9][0-9]-*.json"))

REQUIRED = {
    "id": str, "source": str, "source_title": str, "retrieved": str, "found_via": str,
    "vllm_version": (str, type(None)), "version_evidence": str, "engine": str, "gpu": str,
    "gpu_evidence": str, "gpu_count": int, "model": str, "model_evidence": str,
    "checkpoint_format": str, "settings": dict, "settings_evidence": str, "logged": dict,
    "parser_gaps": dict, "log_excerpt": str, "config": (str, type(None)), "notes": str,
}
SETTINGS = {
    "tensor_parallel_size": int, "pipeline_parallel_size": int, "max_model_len": int,
    "gpu_memory_utilization": float, "dtype": str, "kv_cache_dtype": str, "quantization": str,
    "max_num_seqs": int, "max_num_batched_tokens": int, "enforce_eager": bool,
    "enable_prefix_caching": bool, "block_size": int, "flashinfer_sampler": bool,
}
#: Settings only runs that use the feature carry (issue #26: 80–82): ``--speculative-config`` as the
#: JSON the run passed.
OPTIONAL_SETTINGS = {"speculative_config": str}
#: logged field → (type of one value, the VllmLog attribute parse_vllm_log fills, or None).
LOGGED = {
    "model_loading_gib": (float, "model_loading_gib"),
    "model_loading_seconds": (float, None),
    "model_weights_gib": (float, None),
    "total_gpu_memory_gib": (float, None),
    "non_torch_memory_gib": (float, None),
    "activation_peak_gib": (float, None),
    "cuda_graph_memory_gib": (float, None),
    "num_cpu_blocks": (int, None),
    "available_kv_cache_memory_gib": (float, "available_kv_gib"),
    "gpu_kv_cache_size_tokens": (int, "kv_cache_tokens"),
    "max_concurrency": (float, "max_concurrency"),
    "tokens_per_request": (int, "max_model_len"),
    "num_gpu_blocks": (int, "num_gpu_blocks"),
}
#: Fields the parser cannot read in any release's format (reported, not asserted per fixture).
NOT_PARSED = {name for name, (_, attr) in LOGGED.items() if attr is None}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
#: Rank lines the parser cannot see, by fixture: 05's log file is hard-wrapped at 129 characters and
#: one rank's line breaks inside the phrase ("Available KV cache me" / "mory: 11.03 GiB").
UNREAD_RANK_LINES = {"05": 1}


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def values(value: object) -> list:
    """One logged value, or the per-rank list of them, as a list."""
    return list(value) if isinstance(value, list) else [value]


def numbers_in(text: str) -> set[float]:
    """Every number written in the text (thousands separators removed)."""
    return {float(m.group().replace(",", "")) for m in _NUMBER.finditer(text)}


def parsed(doc: dict) -> VllmLog | None:
    """The parser's reading of the excerpt; None when it finds no capacity line at all."""
    try:
        return parse_vllm_log(doc["log_excerpt"])
    except KVPlanError as exc:
        assert exc.code == "calibrate.no_lines", exc
        return None


def expected(field: str, value: object) -> float | int:
    """What the parser should return for a logged field: the smallest rank for per-rank capacity
    values, the largest rank's weights for "Model loading took"."""
    return max(values(value)) if field == "model_loading_gib" else min(values(value))


def test_the_set_is_as_large_and_as_broad_as_issue_13_and_14_ask():
    """≥ 47 logs, ≥ 4 vLLM releases, ≥ 4 GPU types, TP 1 to 8, ≥ 12 weight logs of real checkpoints
    (MXFP4, FP8, NVFP4, GPTQ, AWQ, multimodal); issue #27's multimodal start-ups numbered 70–74;
    issue #26's speculative-decoding start-ups 80–82 (ngram on v0.29.0 twice and v0.18.0)."""
    docs = [load(p) for p in FIXTURES]
    # 55 → 56: helper quantlogs's NVFP4 log 48 (Nemotron-3-Nano-30B-A3B-NVFP4, vllm-project/vllm#33333)
    assert len(docs) == 56
    assert [d["id"] for d in docs] == [f"{i:02d}" for i in (*range(1, 49), *range(70, 75),
                                                            *range(80, 83))]
    assert [d["id"] for d in docs if "speculative_config" in d["settings"]] == ["80", "81", "82"]
    versions = {d["vllm_version"] for d in docs} - {None}
    assert versions == {"0.8.3", "0.9.0.1", "0.9.2", "0.10.0", "0.10.1.dev680+g79899b63f.d20250817",
                        "0.10.1.1", "0.11.0", "0.11.2", "0.15.0rc2.dev46+gc4e744dbd",
                        "0.14.0rc1.dev227+gb53b89fdb", "0.14.1", "0.19.0", "0.20.1rc1.dev16+g7a1eb8ac2",
                        "0.24.0", "0.28.1rc1.dev563+gdc919e3f5",
                        "0.13.0+faa43dbf.nv26.01", "0.16.0rc2.dev305+g23210a911",
                        "0.23.0", "0.11.0rc2.dev98+g393de22d2", "0.18.0", "0.29.0"}
    assert {d["engine"] for d in docs} == {"V0", "V1"}
    assert {d["settings"]["tensor_parallel_size"] for d in docs} >= {1, 2, 4, 8}
    gpus = {d["gpu"] for d in docs}
    assert {"NVIDIA A100 80GB", "NVIDIA A100 40GB", "H100", "RTX 3090", "AMD Radeon R9700 (gfx1201)",
            "RTX 5090", "NVIDIA GeForce RTX 4090", "RTX A6000", "H100 (79.18 GiB total memory)", "L4",
            "NVIDIA GB10"} <= gpus
    weights = [d for d in docs if "model_loading_gib" in d["logged"] or "model_weights_gib" in d["logged"]]
    assert len(weights) == 50  # 49 → 50: log 48 prints its weights
    formats = " ".join(d["checkpoint_format"] for d in weights)
    for kind in ("mxfp4", "fp8", "nvfp4", "gptq", "awq", "vision tower"):
        assert kind in formats, kind


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_schema(path: Path):
    """Required keys with their types; settings and logged fields from the fixed vocabularies."""
    doc = load(path)
    assert set(doc) == set(REQUIRED), set(doc) ^ set(REQUIRED)
    for key, kind in REQUIRED.items():
        assert isinstance(doc[key], kind), (key, doc[key])
    assert path.name.startswith(doc["id"] + "-")
    # a page's address, or (70–74) the stored index's id of a file it names no repository for
    assert doc["source"].startswith("https://") or re.fullmatch(r"find_string:\d+", doc["source"])
    assert doc["retrieved"] in {"2026-11-30", "2026-12-02"}
    assert doc["engine"] in {"V0", "V1"}
    assert doc["gpu_count"] >= 1
    assert doc["vllm_version"] is not None or "not" in doc["version_evidence"]
    assert set(SETTINGS) <= set(doc["settings"]) <= set(SETTINGS) | set(OPTIONAL_SETTINGS)
    for key, kind in {**SETTINGS, **OPTIONAL_SETTINGS}.items():
        value = doc["settings"].get(key)
        is_bool_as_int = kind is int and isinstance(value, bool)
        assert value is None or (isinstance(value, kind) and not is_bool_as_int), key
    assert doc["logged"], "a fixture without numbers"
    assert set(doc["logged"]) <= set(LOGGED), set(doc["logged"]) - set(LOGGED)
    for key, value in doc["logged"].items():
        kind = LOGGED[key][0]
        for one in values(value):
            assert isinstance(one, int | float) and not isinstance(one, bool), (key, one)
            assert kind is float or isinstance(one, int), (key, one)
    assert set(doc["parser_gaps"]) <= {k for k, (_, attr) in LOGGED.items() if attr} & set(doc["logged"])
    assert doc["log_excerpt"].endswith("\n") and doc["log_excerpt"].count("\n") <= 20


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_logged_number_is_written_in_the_excerpt(path: Path):
    """No logged value comes from anywhere but the verbatim lines kept with it."""
    doc = load(path)
    written = numbers_in(doc["log_excerpt"])
    for key, value in doc["logged"].items():
        for one in values(value):
            assert float(one) in written, (key, one)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_the_parser_reads_the_logged_numbers_or_the_gap_is_named(path: Path):
    """parse_vllm_log on the excerpt returns each logged capacity number exactly (minimum over
    ranks for per-rank values); a field it cannot read must be listed in ``parser_gaps``, and a
    listed gap must really be one (the parser returns nothing for it)."""
    doc = load(path)
    log = parsed(doc)
    for key, value in doc["logged"].items():
        attr = LOGGED[key][1]
        if attr is None:
            continue
        got = None if log is None else getattr(log, attr)
        if key in doc["parser_gaps"]:
            assert got is None, (key, got)
        else:
            assert got == expected(key, value), (key, got, value)
    if log is not None and doc["logged"].get("available_kv_cache_memory_gib") is not None \
            and "available_kv_cache_memory_gib" not in doc["parser_gaps"]:
        ranks = len(values(doc["logged"]["available_kv_cache_memory_gib"]))
        assert log.ranks == ranks - UNREAD_RANK_LINES.get(doc["id"], 0)


def test_parser_gaps_across_the_set():
    """The gaps the set exposes, by fixture: only the llm-d summaries (27–36, 47), which are prose or
    a summary table's rows, not log lines. (The V0 formats — kv_cache_size=,
    available_kv_cache_memory, "the rest of the memory reserved for KV Cache", "# CUDA blocks", a
    '#'-less "GPU blocks" — and a negative budget were gaps until calibrate read every release's
    format.)"""
    gaps = {load(p)["id"]: sorted(load(p)["parser_gaps"]) for p in FIXTURES if load(p)["parser_gaps"]}
    assert gaps == {
        "27": ["available_kv_cache_memory_gib"],
        "28": ["available_kv_cache_memory_gib"],
        "29": ["available_kv_cache_memory_gib"],
        "30": ["available_kv_cache_memory_gib"],
        "31": ["available_kv_cache_memory_gib"],
        "32": ["available_kv_cache_memory_gib"],
        "33": ["available_kv_cache_memory_gib", "model_loading_gib"],
        "34": ["available_kv_cache_memory_gib", "model_loading_gib"],
        "35": ["model_loading_gib"],
        "36": ["available_kv_cache_memory_gib", "gpu_kv_cache_size_tokens", "max_concurrency",
               "num_gpu_blocks", "tokens_per_request"],
        "47": ["available_kv_cache_memory_gib", "model_loading_gib"],
    }
    logged = set().union(*(load(p)["logged"] for p in FIXTURES))
    assert logged & NOT_PARSED == {"model_loading_seconds", "model_weights_gib",
                                   "total_gpu_memory_gib", "non_torch_memory_gib", "activation_peak_gib",
                                   "cuda_graph_memory_gib", "num_cpu_blocks"}


def test_the_newest_single_line_format_and_rank_minimum_are_read():
    """Fixture 20 (v0.28 dev) prints tokens and concurrency on one line; fixture 06 folds three
    ranks into '[repeated 3x across cluster]' after ANSI codes: both read exactly."""
    newest = parse_vllm_log(load(DIR / "20-qwen3.8-27b-fp8-2xr9700-v0.28-dev.json")["log_excerpt"])
    assert (newest.kv_cache_tokens, newest.max_concurrency, newest.max_model_len) == (424854, 1.62, 262144)
    assert newest.available_interval() == (7253126022, 7263863439)
    ray = parse_vllm_log(load(DIR / "06-gpt-oss-120b-a100-80gb-tp4-gmu08-four-nodes.json")["log_excerpt"])
    assert (ray.available_kv_gib, ray.ranks, ray.kv_cache_tokens) == (45.32, 2, 2640144)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_configs_exist_with_their_source(path: Path):
    """A fixture's config points at a Hub config.json copy with a .source file naming where it came from."""
    doc = load(path)
    if doc["config"] is None:
        return
    config = DIR / doc["config"]
    hub_id = config.stem.replace("__", "/")
    assert hub_id == doc["model"]
    cfg = json.loads(config.read_text())
    assert "architectures" in cfg
    source = config.with_suffix(".source").read_text()
    assert f"https://huggingface.co/{hub_id}" in source and "https://github.com/" in source


def test_config_copies_hold_the_quantization_the_logs_show():
    """gpt-oss-120b: MXFP4 experts, bf16 attention/router/embeddings/lm_head; Qwen3-235B-A22B-FP8:
    128×128 block FP8 with 1 + 94 × 3 unconverted modules; Gemma 4: vision tower of 27 layers;
    TheBloke's Mixtral GPTQ main branch: 4 bits, one group per column, act order; the FP8-dynamic
    recipe: FP8 weights per channel, lm_head ignored; Qwen2.5-0.5B-Instruct: tied embeddings."""
    cfg = {p.stem: json.loads(p.read_text()) for p in (DIR / "configs").glob("*.json")}
    oss = cfg["openai__gpt-oss-120b"]["quantization_config"]
    assert oss == {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                              "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}
    qwen = cfg["Qwen__Qwen3-235B-A22B-FP8"]["quantization_config"]
    assert (qwen["quant_method"], qwen["weight_block_size"], len(qwen["modules_to_not_convert"])) == \
        ("fp8", [128, 128], 283)
    assert cfg["google__gemma-4-26B-A4B"]["vision_config"]["num_hidden_layers"] == 27
    gptq = cfg["TheBloke__Mixtral-8x7B-v0.1-GPTQ.quantize_config"]
    assert (gptq["bits"], gptq["group_size"], gptq["desc_act"]) == (4, -1, True)
    fp8 = cfg["neuralmagic__Meta-Llama-3.1-70B-Instruct-FP8-dynamic.quantization_config"]
    weights = fp8["config_groups"]["group_0"]["weights"]
    assert (weights["type"], weights["num_bits"], weights["strategy"], fp8["ignore"]) == \
        ("float", 8, "channel", ["lm_head"])
    small = cfg["unsloth__Qwen2.5-0.5B-Instruct"]
    assert (small["_name_or_path"], small["tie_word_embeddings"]) == ("Qwen/Qwen2.5-0.5B-Instruct", True)
