"""Calibration against a vLLM log: the parser, the inferred reserve, the CLI and the expander."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import pytest
from cli_helpers import run_cli
from md_text import unmd
from test_app import open_boxes

from kvplan.calibrate import MAX_LOG_BYTES, calibrate
from kvplan.capacity import GIB, FitQuery, fit
from kvplan.engines import get_engine
from kvplan.engines.sglang.log import SglangLog, parse_sglang_log
from kvplan.engines.trtllm.log import parse_trtllm_log
from kvplan.engines.vllm.log import VllmLog, parse_vllm_log
from kvplan.errors import MESSAGES, KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model

#: The release these numbers are derived for (an explicit key: a newer release changes none).
V033 = "vllm@0.33"

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)

APP = Path(__file__).resolve().parent.parent / "app.py"
ARCH = load_model("llama-3.1-8b")
H100 = get_gpu("h100-sxm")
L = 32768
#: Llama-3.1-8B, bf16, block 16: 32 layers × 16 × 8 heads × 128 × 2 (K, V) × 2 B = 2 MiB a block.
BLOCK_BYTES = 32 * 16 * 8 * 128 * 2 * 2


def log_of(result, prefix: str = "") -> str:
    """The three capacity lines vLLM prints, from kvplan's own FitResult."""
    return (f"{prefix}Available KV cache memory: {result.kv_budget_bytes / GIB:.2f} GiB\n"
            f"{prefix}GPU KV cache size: {result.kv_pool_tokens:,} tokens\n"
            f"{prefix}Maximum concurrency for {result.tokens:,} tokens per request: "
            f"{result.max_concurrency:.2f}x\n")


def ten_gib() -> str:
    result = fit(make_plan(ARCH, H100, FitQuery(tokens=L, kv_cache_memory_bytes=10 * GIB)))
    assert result.num_blocks == 5120 and result.bytes_per_block == BLOCK_BYTES
    assert result.blocks_per_request == 2048
    assert ", ".join(get_engine(result.engine).log_lines(result)) == (
        "GPU KV cache size: 81,920 tokens, Maximum concurrency for 32,768 tokens per request: 2.50x")
    return log_of(result)


REAL = (
    "\x1b[1;36m(EngineCore_DP0 pid=4711)\x1b[0;0m INFO 11-29 10:02:11 [gpu_model_runner.py:2653] "
    "Model loading took 14.9889 GiB and 4.512 seconds\n"
    "(VllmWorker TP0 pid=4712) \x1b[0;36mINFO\x1b[0m 11-29 10:02:20 [gpu_worker.py:276] "
    "Available KV cache memory: \x1b[1m10.00\x1b[0m GiB\n"
    "(VllmWorker TP1 pid=4713) INFO 11-29 10:02:20 [gpu_worker.py:276] "
    "Available KV cache memory: 10.02 GiB\n"
    "garbage line ÿ with nothing in it\n"
    "(EngineCore_DP0 pid=4711) INFO 11-29 10:02:21 [kv_cache_utils.py:1087] "
    "GPU KV cache size: 81,920 tokens\r\n"
    "(EngineCore_DP0 pid=4711) INFO 11-29 10:02:21 [kv_cache_utils.py:1091] "
    "Maximum concurrency for 32,768 tokens per request: 2.50x\n"
    "INFO 11-29 10:02:22 [core.py:210] init engine (profile, create kv cache, warmup model) took 9.1 s\n"
)


# --------------------------------------------------------------------------- parser


def test_parse_own_log_exactly():
    log = parse_vllm_log(ten_gib())
    assert log.available_kv_gib == 10.0 and log.available_kv_decimals == 2
    assert log.kv_cache_tokens == 81_920 and log.max_model_len == L
    assert log.max_concurrency == 2.5 and log.num_gpu_blocks is None
    assert log.lines_matched == 3 and log.ranks == 1
    assert log.available_interval() == (int(-(-(9.995 * GIB) // 1)), int(10.005 * GIB))
    assert log.available_midpoint_bytes == 10 * GIB


def test_parse_real_looking_log_with_ansi_prefixes_and_ranks():
    log = parse_vllm_log(REAL)
    assert log.available_kv_gib == 10.0          # the minimum over the TP ranks
    assert log.ranks == 2
    assert log.kv_cache_tokens == 81_920 and log.max_concurrency == 2.5 and log.max_model_len == L
    assert log.lines_matched == 5  # with the "Model loading took" line
    assert parse_vllm_log(REAL.encode()) == log   # bytes are read as UTF-8


def test_parse_block_lines_and_separators():
    text = ("INFO 02-01 [executor_base.py:112] # cuda blocks: 1,234, # CPU blocks: 2048\n"
            "DEBUG num_gpu_blocks is: 1200\n"
            "Available KV cache memory: 1,024.5 GiB\n"
            "GPU KV cache size: 1,234,567 tokens\n")
    log = parse_vllm_log(text)
    assert log.num_gpu_blocks == 1200              # the minimum over the lines
    assert log.available_kv_gib == 1024.5 and log.available_kv_decimals == 1
    assert log.kv_cache_tokens == 1_234_567 and log.max_model_len is None
    assert parse_vllm_log("# GPU blocks: 77").num_gpu_blocks == 77
    seq = parse_vllm_log("Initializing engine with config: max_seq_len=4096, x\n# GPU blocks: 7")
    assert seq.max_model_len == 4096


@pytest.mark.parametrize(("raw", "code"), [
    ("", "calibrate.empty"),
    (" \n\t\n", "calibrate.empty"),
    (b"", "calibrate.empty"),
    (bytes(range(256)) * 8, "calibrate.not_text"),
    (os.urandom(4096), "calibrate.not_text"),
    ("Available KV cache memory: 1 GiB\x00\x00", "calibrate.not_text"),
    ("\x01\x02\x03\x04" * 100, "calibrate.not_text"),
    (b"x" * (2 << 20), "calibrate.too_large"),
    ("x" * (2 << 20), "calibrate.too_large"),
    ("é" * (MAX_LOG_BYTES // 2 + 1), "calibrate.too_large"),   # 2 bytes a character in UTF-8
    ("INFO nothing to see\nINFO Model loading 14.99 GiB\n", "calibrate.no_lines"),
    ("Available KV cache memory: lots GiB", "calibrate.no_lines"),
])
def test_bad_logs_are_refused_with_their_code(raw, code):
    with pytest.raises(KVPlanError) as info:
        parse_vllm_log(raw)
    assert info.value.code == code
    assert str(info.value) == MESSAGES[code].format(**info.value.fields)


def test_one_mebibyte_is_accepted():
    line = "GPU KV cache size: 81,920 tokens\n"
    text = line + "x" * (MAX_LOG_BYTES - len(line))
    assert len(text.encode()) == MAX_LOG_BYTES
    assert parse_vllm_log(text).kv_cache_tokens == 81_920


# --------------------------------------------------------------------------- calibration


def test_calibration_reproduces_kvplans_own_log_exactly():
    result = calibrate(make_plan(ARCH, H100, FitQuery(engine=V033, tokens=L)), ten_gib())
    assert result.bytes_per_block == BLOCK_BYTES and result.blocks_per_request == 2048
    assert result.logged_blocks_low == result.logged_blocks_high == 5120
    assert result.reproduced_num_blocks == 5120
    assert result.reproduced_kv_cache_tokens == 81_920
    assert result.reproduced_max_concurrency == 2.5
    assert result.tokens_match and result.concurrency_match
    assert result.block_difference == 0 and result.agreement == "exact"
    # the prediction with the default reserve is kvplan's ordinary fit: 28,737 blocks
    # (test_capacity.test_llama31_8b_bf16_on_one_h100_at_32k; 28,753 before vLLM's 33,554,432 B RoPE
    # cache joined the weights), 28,737 / 2,048 × 32,768 = 459,792
    plain = fit(make_plan(ARCH, H100, FitQuery(engine=V033, tokens=L)))
    assert result.predicted_num_blocks == plain.num_blocks == 28_737
    assert result.predicted_kv_cache_tokens == plain.kv_pool_tokens == 459_792
    # implied reserve: target − weights − available, narrowed to the 5,120-block interval
    target, weights = plain.memory_target_bytes, plain.weights_bytes
    assert result.memory_target_bytes == target and result.weights_bytes == weights
    low_avail = max(int(-(-(9.995 * GIB) // 1)), 5120 * BLOCK_BYTES)
    high_avail = min(int(10.005 * GIB), 5121 * BLOCK_BYTES - 1)
    assert result.implied_reserve_low_bytes == target - weights - high_avail
    assert result.implied_reserve_high_bytes == target - weights - low_avail
    assert (result.implied_reserve_low_bytes <= result.implied_reserve_bytes
            <= result.implied_reserve_high_bytes)
    assert result.implied_reserve == (result.implied_reserve_bytes, target - weights - high_avail,
                                      target - weights - low_avail)
    # the suggested reserve makes kvplan's own budget give the logged blocks
    again = fit(make_plan(ARCH, H100, FitQuery(engine=V033, tokens=L,
                                               reserve_gib=result.suggested_reserve_gib)))
    assert again.num_blocks == 5120 and again.kv_pool_tokens == 81_920
    for key in ("predicted", "logged_available", "logged_blocks", "implied_reserve",
                "suggested_reserve", "reproduced", "agreement", "weights"):
        assert result.formulas[key], key
    assert "5,120" in result.formulas["reproduced"] and "2,097,152" in result.formulas["agreement"]


def test_default_run_implies_the_default_reserve():
    """A log made with kvplan's default reserve for Llama-3.1-8B on an H100 at 32K (v0.33:
    activation 1,313,341,440 + non-torch 143,129,785 + CUDA graphs 408,662,949 = 1,865,134,174 B):
    the block count pins the implied reserve to [1,863,709,820, 1,865,806,971] B, which holds it;
    the split gives each term kvplan's value (the log prints none) and leaves the rest,
    −375,778 B (less than one 2,097,152-B block), unexplained."""
    plain = fit(make_plan(ARCH, H100, FitQuery(engine=V033, tokens=L)))
    assert plain.reserve_bytes == 1_865_134_174
    result = calibrate(make_plan(ARCH, H100, FitQuery(engine=V033, tokens=L)), log_of(plain))
    assert result.logged_blocks_low == result.logged_blocks_high == plain.num_blocks
    assert (result.implied_reserve_low_bytes, result.implied_reserve_high_bytes) == (
        1_863_709_820, 1_865_806_971)
    assert result.implied_reserve_low_bytes <= plain.reserve_bytes <= result.implied_reserve_high_bytes
    assert abs(result.implied_reserve_bytes - plain.reserve_bytes) <= BLOCK_BYTES
    assert result.agreement in {"exact", "within_one_block"}
    assert abs(result.block_difference) <= 1
    assert result.suggested_reserve_gib == 1.737  # 1,865,089,548 B: the shortest GiB in the interval
    assert [(t["name"], t["implied_bytes"]) for t in result.implied_terms] == [
        ("activation_peak", 1_313_341_440), ("non_torch", 143_129_785), ("cuda_graphs", 408_662_949),
        ("unexplained", result.implied_reserve_bytes - 1_865_134_174)]
    assert result.implied_reserve_bytes - 1_865_134_174 == -375_778
    # a different printed GiB moves the reserve by exactly that much (± the rounding)
    shifted = log_of(plain).replace(f"{plain.kv_budget_bytes / GIB:.2f} GiB",
                                    f"{plain.kv_budget_bytes / GIB - 2:.2f} GiB")
    only_gib = "\n".join(line for line in shifted.splitlines() if "Available" in line)
    moved = calibrate(make_plan(ARCH, H100, FitQuery(engine=V033, tokens=L)), only_gib)
    assert moved.agreement == "unknown" and moved.logged_blocks_low is None
    assert abs(moved.implied_reserve_bytes - (plain.reserve_bytes + 2 * GIB)) <= 0.005 * GIB + 1


def test_tp_and_fp8_log_round_trip():
    query = FitQuery(tokens=8192, tp=2, kv_dtype="fp8_e4m3", reserve_gib=2.5)
    made = fit(make_plan(ARCH, H100, query))
    result = calibrate(make_plan(ARCH, H100, query.model_copy(update={"reserve_gib": None})), log_of(made))
    assert result.implied_reserve_low_bytes <= int(2.5 * GIB) <= result.implied_reserve_high_bytes
    # fp8 at tp=2: a block is 512 KiB, so ±0.005 GiB is ±10 blocks; the re-run with the printed
    # GiB lands inside that, and the token count pins the block count exactly
    assert result.bytes_per_block == BLOCK_BYTES // 4
    assert result.agreement in {"exact", "within_one_block", "within_rounding"}
    assert abs(result.block_difference) * result.bytes_per_block <= 0.005 * GIB
    assert result.logged_blocks_low == result.logged_blocks_high == made.num_blocks
    again = fit(make_plan(ARCH, H100, query.model_copy(update={"reserve_gib": result.suggested_reserve_gib})))
    assert again.num_blocks == made.num_blocks


def test_mismatch_and_other_length_are_reported():
    made = fit(make_plan(ARCH, H100, FitQuery(tokens=L, kv_cache_memory_bytes=10 * GIB)))
    text = log_of(made).replace("81,920 tokens", "163,840 tokens").replace("2.50x", "5.00x")
    result = calibrate(make_plan(ARCH, H100, FitQuery(tokens=L)), text)
    assert result.agreement == "mismatch" and result.block_difference == 5120 - 10240
    assert not result.tokens_match and not result.concurrency_match
    assert any("disagree" in note for note in result.notes)
    other = calibrate(make_plan(ARCH, H100, FitQuery(tokens=4096)), ten_gib())
    assert other.tokens == L and any("max_model_len" in note for note in other.notes)
    assert other.agreement == "exact"


def test_engine_must_be_vllm():
    with pytest.raises(KVPlanError) as info:
        calibrate(make_plan(ARCH, H100, FitQuery(tokens=L, engine="sglang")), ten_gib())
    assert info.value.code == "calibrate.engine"


def test_vllm_log_model_is_optional_everywhere():
    assert VllmLog().available_interval() is None and VllmLog().available_midpoint_bytes is None


def test_implied_reserve_needs_all_three_numbers():
    result = calibrate(make_plan(ARCH, H100, FitQuery(tokens=L)), ten_gib())
    assert result.implied_reserve is not None
    for field in ("implied_reserve_bytes", "implied_reserve_low_bytes", "implied_reserve_high_bytes"):
        assert result.model_copy(update={field: None}).implied_reserve is None, field


# --------------------------------------------------------------------------- CLI




def cal_argv(path: Path, *more: str) -> list[str]:
    return ["calibrate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", str(L),
            "--log", str(path), *more]


def test_cli_calibrate_text_and_json(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text(REAL)
    code, text, err = run_cli(cal_argv(path))
    assert code == 0 and err == ""
    assert "81,920" in text and "exact" in text and "--reserve-gib" in text
    code, out, err = run_cli(cal_argv(path, "--json"))
    assert code == 0 and err == ""
    payload = json.loads(out)
    assert (f"(between {payload['implied_reserve_low_bytes'] / GIB:.4f} and "
            f"{payload['implied_reserve_high_bytes'] / GIB:.4f} GiB)") in text
    assert payload["agreement"] == "exact" and payload["reproduced_kv_cache_tokens"] == 81_920
    assert payload["log"]["ranks"] == 2


@pytest.mark.parametrize(("content", "more", "code_name"), [
    (b"", (), "calibrate.empty"),
    (b"\xff\xfe\x00\x01" * 64, (), "calibrate.not_text"),
    (b"y" * (2 << 20), (), "calibrate.too_large"),
    (b"INFO hello\n", (), "calibrate.no_lines"),
    (REAL.encode(), ("--engine", "sglang"), "calibrate.engine"),
    (REAL.encode(), ("--tp", "3"), "parallel.tp_heads"),
    (REAL.encode(), ("--kv-dtype", "fp3"), "unknown.dtype"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, content, more, code_name):
    path = tmp_path / "vllm.log"
    path.write_bytes(content)
    code, out, err = run_cli(cal_argv(path, *more))
    assert code == 2 and out == ""
    assert err.startswith("kvplan: error: ") and err.count("\n") == 1
    assert MESSAGES[code_name].split("{")[0].strip() in err


def test_cli_missing_log_and_usage(tmp_path):
    code, _, err = run_cli(cal_argv(tmp_path / "absent.log"))
    assert code == 2 and "cannot read" in err and err.count("\n") == 1
    code, _, err = run_cli(["calibrate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                            "--tokens", "10"])
    assert code == 2 and err.count("\n") == 1     # --log is required


# --------------------------------------------------------------------------- dashboard


def calibration_table(at):
    """The expander's logged-vs-predicted table, or None when it is not shown."""
    return next((df.value for df in at.dataframe if "vLLM log" in df.value.columns), None)


def test_expander_pastes_a_log_and_sets_the_reserve():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update({"t": str(L), "vw": "memory"})
    at.run()
    assert not at.exception
    assert any(e.label == "Calibrate against a vLLM log" for e in at.expander)
    assert not any(t.key == "w_vllm_log" for t in at.text_area)  # lazy: runs only while open
    open_boxes(at, "box_calibrate")
    assert calibration_table(at) is None
    at.text_area(key="w_vllm_log").input(REAL).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    frame = calibration_table(at)
    assert frame is not None
    logged = dict(zip(frame["quantity"], frame["vLLM log"], strict=True))
    reproduced = dict(zip(frame["quantity"], frame["kvplan with the logged memory"], strict=True))
    assert logged["GPU KV cache size (tokens)"] == reproduced["GPU KV cache size (tokens)"] == "81,920"
    assert any("Implied runtime reserve" in m.value for m in at.markdown)
    expected = calibrate(make_plan(ARCH, H100, FitQuery(tokens=L)), REAL).suggested_reserve_gib
    button = at.button(key="calibrate_use_reserve")
    assert f"{expected:g} GiB" in button.label and not button.disabled
    button.click().run()
    assert not at.exception and not at.error
    assert at.session_state["w_reserve"] == expected
    assert at.query_params["r"] in (repr(expected), [repr(expected)])
    link = " ".join(f"{k}={v}" for k, v in dict(at.query_params).items())
    assert "Available" not in link and "81,920" not in link and "EngineCore" not in link
    # after the click kvplan's own prediction uses the run's reserve: it now matches the log
    frame = calibration_table(at)
    predicted = dict(zip(frame["quantity"], frame["kvplan (sidebar reserve)"], strict=True))
    assert predicted["GPU KV cache size (tokens)"] == "81,920"


def test_expander_reports_a_bad_paste_in_place():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    open_boxes(at.run(), "box_calibrate")
    at.text_area(key="w_vllm_log").input("nothing useful here").run()
    assert not at.exception
    assert any("no vLLM capacity line" in e.value for e in at.error)


def test_every_releases_capacity_lines_and_the_loaded_weights_are_read():
    """V0 0.6.4 (fixture 07: "kv_cache_size=2.89GiB", "# GPU blocks: 1478", "Loading model weights
    took 14.9888 GB"), V0 0.7 (18: "the rest of the memory reserved for KV Cache is 3.59GiB",
    "# CUDA blocks: 19609"), a negative V1 budget (10: "-2.14 GiB") and a weights-only log (11:
    "Model loading took 64.38 GiB memory …") — each vllm/worker/worker.py or gpu_worker.py format."""
    from pathlib import Path

    logs = Path(__file__).parent / "fixtures" / "vllm_logs"

    def read(prefix: str):
        (path,) = logs.glob(f"{prefix}-*.json")
        return json.loads(path.read_text())["log_excerpt"]

    v064, v07, negative = parse_vllm_log(read("07")), parse_vllm_log(read("18")), parse_vllm_log(read("10"))
    weights_text = read("11")
    weights_only = parse_vllm_log(weights_text)
    assert (v064.available_kv_gib, v064.num_gpu_blocks, v064.model_loading_gib) == (2.89, 1478, 14.9888)
    assert (v07.available_kv_gib, v07.num_gpu_blocks) == (3.59, 19609)
    assert negative.available_kv_gib == -2.14 and negative.model_loading_gib == 65.9651
    assert (weights_only.model_loading_gib, weights_only.kv_cache_tokens) == (64.38, None)
    result = calibrate(make_plan(load_model("gpt-oss-120b"), H100, FitQuery(tokens=8192)), weights_text)
    assert result.logged_weights_bytes == round(64.38 * GIB) == 69_127_498_629
    assert "Model loading took 64.38 GiB" in result.formulas["weights_vs_log"]


# --------------------------------------------------------------------------------------------
# SGLang and TensorRT-LLM log parsers (the public logs themselves: test_sglang_logs.py,
# test_trtllm_logs.py)


def test_sglang_parser_keeps_the_smallest_rank_and_the_largest_weights():
    """Per-rank lines: SGLang takes the MIN free memory over ranks (get_available_gpu_memory
    distributed=True), so the parser does; "mem usage" keeps the largest rank."""
    log = parse_sglang_log(
        "\x1b[32m[2026-02-26 16:31:00 TP1] Load weight begin. avail mem=283.96 GB\x1b[0m\n"
        "[2026-02-26 16:31:00 TP3] Load weight begin. avail mem=283.53 GB\n"
        "[… TP0] Load weight end. elapsed=1 s, type=X, avail mem=209.98 GB, mem usage=73.58 GB.\n"
        "[… TP3] Load weight end. elapsed=1 s, type=X, avail mem=209.96 GB, mem usage=73.60 GB.\n"
        "[… TP0] KV Cache is allocated. #tokens: 2454421, KV size: 160.63 GB\n"
        "[… TP3] KV Cache is allocated. #tokens: 2454421, KV size: 160.63 GB\n"
        "server_args=ServerArgs(model_path='m', mem_fraction_static=0.8260405859375, tp_size=8)\n")
    assert (log.load_begin_avail_gib, log.load_end_avail_gib, log.weight_mem_usage_gib) == \
        (283.53, 209.96, 73.6)
    assert (log.kv_tokens, log.kv_size_gib, log.k_size_gib, log.ranks) == (2454421, 160.63, None, 2)
    assert log.mem_fraction_static == 0.8260405859375
    # rest = 209.96 − 283.53 × (1 − mfs), each printed value ± 0.005 GiB, floored to bytes
    low, high = log.rest_memory_interval(0.8260405859375)
    assert low == math.floor((209.955 - 283.535 * (1 - 0.8260405859375)) * GIB)
    assert high == math.floor((209.965 - 283.525 * (1 - 0.8260405859375)) * GIB)


def test_sglang_parser_without_a_begin_line_adds_the_weights_back():
    """Only "Load weight end": free before loading = avail + mem usage, each ± 0.005 GiB."""
    log = parse_sglang_log("[x] Load weight end. type=Q, avail mem=29.60 GB, mem usage=31.01 GB.\n")
    assert log.rest_memory_interval(0.8) == (math.floor((29.595 - 60.62 * 0.2) * GIB),
                                             math.floor((29.605 - 60.60 * 0.2) * GIB))
    assert SglangLog().rest_memory_interval(0.8) is None
    assert SglangLog(load_end_avail_gib=1.0).rest_memory_interval(0.8) is None


def test_trtllm_parser_keeps_the_final_pass_and_joins_wrapped_lines():
    """Two passes (estimation, then final): the last value wins; a line hard-wrapped inside
    "paged KV cache" still reads."""
    log = parse_trtllm_log(
        "[TRT-LLM] [W] Both free_gpu_memory_fraction and max_tokens are set (to 0.9 and 8224, "
        "respectively). The smaller value will be used.\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.56 GiB for max tokens in paged KV cache (8224).\n"
        "[TRT-LLM] [I] Peak memory during memory usage profiling (torch + non-torch): 113.65 GiB, "
        "available KV cache memory when calculating max tokens: 5.95 GiB, fraction is set 0.9, "
        "kv size is 73728. device total memory 119.70 GiB, , tmp kv_mem 0.56 GiB\n"
        "[TRT-LLM] [W] Both free_gpu_memory_fraction and max_tokens are set (to 0.9 and 86711, "
        "respectively). The smaller value will be used.\n"
        "[TensorRT-LLM][INFO] Number of tokens per block: 32.\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 5.95 GiB for max tokens in paged\n"
        "  KV cache (86720).\n")
    assert (log.max_tokens, log.allocated_kv_gib, log.allocated_kv_tokens) == (86711, 5.95, 86720)
    assert (log.peak_memory_gib, log.available_kv_memory_gib, log.fraction) == (113.65, 5.95, 0.9)
    assert (log.kv_size_per_token, log.total_gpu_memory_gib, log.tokens_per_block) == (73728, 119.7, 32)


@pytest.mark.parametrize("parse, engine", [(parse_sglang_log, "SGLang"),
                                           (parse_trtllm_log, "TensorRT-LLM")])
def test_engine_parsers_name_the_engine_when_no_line_matches(parse, engine):
    with pytest.raises(KVPlanError) as err:
        parse("INFO: Uvicorn running on http://0.0.0.0:8000\n")
    assert err.value.code == "calibrate.no_engine_lines" and engine in str(err.value)


@pytest.mark.parametrize("parse, engine, line, field", [
    (parse_sglang_log, "SGLang",
     "KV Cache is allocated. #tokens: " + "9" * 40 + ", K size: 1.00 GB, V size: 1.00 GB", "kv_tokens"),
    (parse_trtllm_log, "TensorRT-LLM", "Number of blocks in KV cache primary pool: " + "9" * 40,
     "primary_blocks")])
def test_engine_parsers_name_an_absurd_number(parse, engine, line, field):
    """A 40-digit number is refused by name (it was a pydantic traceback: ``inf`` in an int field)."""
    with pytest.raises(KVPlanError) as err:
        parse(line)
    assert err.value.code == "calibrate.bad_value"
    assert str(err.value).startswith(f"the {engine} log's {field} is 9999")


@pytest.mark.parametrize(("engine", "tokens", "low", "high"), [
    # v0.14–v0.19 log ``num_blocks // n_groups × min_block_size`` (kv_cache_utils.py
    # _report_kv_cache_config): gpt-oss-20b has a sliding and a full group, 137,178 // 2 × 16.
    # Both pools hold vLLM's 16,777,216 B RoPE cache in the weights (131,072 × 64 × 2 B,
    # rotary_embedding/base.py) less: 43 and 42 blocks of 393,216 B (137,221 → 137,178 and
    # 157,211 → 157,169; 1,097,760 and 1,672,018 tokens before it).
    ("vllm@0.19", 1_097_424, 137_178, 137_179),
    # v0.20.1+ log int(num_blocks / blocks_per_request × L): 3,081 blocks per request at 32,768.
    ("vllm@0.33", 1_671_572, 157_169, 157_169),
])
def test_logged_tokens_are_inverted_with_the_release_formula(engine, tokens, low, high):
    """A start-up log printed by each release for gpt-oss-20b on an H100 at 32,768 tokens: the
    "GPU KV cache size" line is turned back into block counts with that release's formula (with
    v0.20.1's formula the v0.19 line would give ≈ 86,000 blocks and contradict the concurrency)."""
    arch, gpu = load_model("gpt-oss-20b"), get_gpu("h100-sxm")
    query = FitQuery(tokens=32_768, engine=engine)
    predicted = fit(make_plan(arch, gpu, query))
    assert predicted.kv_pool_tokens == tokens
    log = (f"INFO [kv_cache_utils.py:1] GPU KV cache size: {tokens:,} tokens\n"
           "INFO [kv_cache_utils.py:1] Maximum concurrency for 32,768 tokens per "
           f"request: {predicted.max_concurrency:.2f}x\n")
    result = calibrate(make_plan(arch, gpu, query), log)
    assert (result.logged_blocks_low, result.logged_blocks_high) == (low, high)
    assert low <= predicted.num_blocks <= high and not result.notes


# --------------------------------------------------------------------------------------------
# Each engine's parser, reached through its engine object; numbers no float holds


@pytest.mark.parametrize(("line", "field", "value"), [
    ("Available KV cache memory: 1e309 GiB", "available KV cache memory (GiB)", "1e309"),
    ("GPU KV cache size: 1e309 tokens", "GPU KV cache size (tokens)", "1e309"),
    ("Maximum concurrency for 32,768 tokens per request: inf x", "maximum concurrency", "inf"),
    ("Available KV cache memory: nan GiB", "available KV cache memory (GiB)", "nan"),
])
def test_a_number_past_a_float_is_named_not_a_missing_line(line, field, value):
    """Issue #32 item 11: ``1e309`` (or ``inf``, ``nan``) was reported as "no vLLM capacity line";
    the field and the value are named instead."""
    with pytest.raises(KVPlanError) as err:
        parse_vllm_log(line + "\n")
    assert err.value.code == "calibrate.not_finite"
    low, high = {"GPU KV cache size (tokens)": (0, 10**15),
                 "maximum concurrency": (0, 10**12)}.get(field, (-1_000_000, 1_000_000))
    assert str(err.value) == (f"the vLLM log's {field} is {value}, which is not a finite number "
                              f"(infinite, NaN or beyond a 64-bit float); kvplan accepts {low:,} "
                              f"to {high:,}")


def test_the_1e309_message_exactly():
    with pytest.raises(KVPlanError) as err:
        parse_vllm_log("INFO [gpu_worker.py:276] Available KV cache memory: 1e309 GiB\n")
    assert str(err.value) == ("the vLLM log's available KV cache memory (GiB) is 1e309, which is "
                              "not a finite number (infinite, NaN or beyond a 64-bit float); kvplan "
                              "accepts -1,000,000 to 1,000,000")


def test_finite_exponents_are_read_and_bounded():
    """A finite exponent is a number like any other: in range it is read, out of range refused by
    its bounds, and a fraction in a whole-number field is refused."""
    log = parse_vllm_log("Available KV cache memory: 1.5e1 GiB\nGPU KV cache size: 8e4 tokens\n")
    assert (log.available_kv_gib, log.available_kv_decimals, log.kv_cache_tokens) == (15.0, 0, 80_000)
    for line in ("Available KV cache memory: 1e308 GiB", "GPU KV cache size: 15e-1 tokens"):
        with pytest.raises(KVPlanError) as err:
            parse_vllm_log(line)
        assert err.value.code == "calibrate.bad_value"


@pytest.mark.parametrize(("engine", "text", "record", "field", "value"), [
    ("vllm", "GPU KV cache size: 81,920 tokens\n", "VllmLog", "kv_cache_tokens", 81_920),
    ("vllm@0.19", "GPU KV cache size: 81,920 tokens\n", "VllmLog", "kv_cache_tokens", 81_920),
    ("sglang", "[x] KV Cache is allocated. #tokens: 2454421, KV size: 160.63 GB\n", "SglangLog",
     "kv_tokens", 2_454_421),
    ("trtllm", "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 2710\n", "TrtllmLog",
     "primary_blocks", 2_710),
    ("trtllm@1.1", "[TensorRT-LLM][INFO] Number of tokens per block: 32.\n", "TrtllmLog",
     "tokens_per_block", 32),
])
def test_each_engine_parses_its_own_log(engine, text, record, field, value):
    """The parser is reached through the engine object (``Engine.parse_log`` → its
    ``log_format``, in ``engines/<engine>/log.py``); only vLLM's record is compared by calibrate."""
    from kvplan.calibrate import compares

    e = get_engine(engine)
    log = e.parse_log(text)
    assert type(log).__name__ == record and type(log).__module__ == f"kvplan.engines.{e.id.split('@')[0]}.log"
    assert getattr(log, field) == value
    assert compares(e) == (record == "VllmLog")


@pytest.mark.parametrize("engine", ["hf", "hf-legacy", "hf-static"])
def test_engines_without_a_log_have_no_parser(engine):
    e = get_engine(engine)
    assert e.log_format is None and e.parse_log("GPU KV cache size: 1 tokens") is None
    assert e.log_lines(fit(make_plan(ARCH, H100, FitQuery(tokens=4096, engine=engine)))) == ()


def test_engine_parsers_refuse_overflowing_numbers_by_name():
    for engine, line, field in (
            ("sglang", "[x] Load weight end. type=Q, avail mem=1e309 GB, mem usage=3.00 GB.",
             "load_end_avail_gib"),
            ("trtllm", "[TensorRT-LLM][INFO] Number of tokens per block: inf.", "tokens_per_block")):
        with pytest.raises(KVPlanError) as err:
            get_engine(engine).parse_log(line)
        assert err.value.code == "calibrate.not_finite" and f"log's {field} is " in str(err.value)


# --------------------------------------------------------------------------------------------
# The release the log names; a log of another model (issue #30 calibrate item, issue #33 items 3-4)

#: Llama-3.1-8B on an H100 at 32K, as kvplan plans it under v0.11.0 (``vllm@0.11``:
#: gpu_memory_utilization 0.9, reserve 1,456,471,225 B): 54.92 GiB, 28,121 blocks (regenerated with
#: ``log_of`` when vLLM's 33,554,432 B RoPE cache joined the weights: 54.96 GiB, 28,137 blocks,
#: 450,192 tokens, 13.74x before it).
V011_LINES = ("Available KV cache memory: 54.92 GiB\n"
              "GPU KV cache size: 449,936 tokens\n"
              "Maximum concurrency for 32,768 tokens per request: 13.73x\n")
API_LINE = "(APIServer pid=7) INFO 11-29 10:00:00 [api_server.py:1837] vLLM API server version 0.11.0\n"
LOGS_DIR = Path(__file__).parent / "fixtures" / "vllm_logs"


def test_the_v011_lines_are_kvplans_own_v011_plan():
    made = fit(make_plan(ARCH, H100, FitQuery(tokens=L, engine="vllm@0.11")))
    assert made.reserve_bytes == 1_456_471_225 and made.num_blocks == 28_121
    assert log_of(made) == V011_LINES


@pytest.mark.parametrize(("line", "version"), [
    ("INFO 11-29 [api_server.py:1837] vLLM API server version 0.11.0", "0.11.0"),
    ("INFO [core.py:74] Initializing a V1 LLM engine (v0.10.1.1) with config: model='m'", "0.10.1.1"),
    ("INFO [llm_engine.py:232] Initializing an LLM engine (v0.6.4.post1) with config: model='m'",
     "0.6.4.post1"),
    ("(APIServer pid=1) INFO [utils.py:299] ▄▄ ▄█ █ █ █ ▀▄▀ █ version 0.19.0", "0.19.0"),
    ("- vLLM version: 0.14.0rc1.dev227+gb53b89fdb", "0.14.0rc1.dev227+gb53b89fdb"),
])
def test_each_version_line_is_read(line, version):
    log = parse_vllm_log(line + "\n" + V011_LINES)
    assert log.version == version


def test_the_fixture_logs_version_lines_place_them_where_the_end_to_end_test_does():
    """Every public log whose excerpt prints a version: the parser reads the version the fixture
    records, and the release it maps to is the one ``test_budget_vs_logs.CASES`` compares it with.
    (Logs 33–35 and 47 are rows of a summary table, with no log line to read.)"""
    from test_budget_vs_logs import CASES

    vllm = get_engine("vllm")
    placed = {}
    for path in sorted(LOGS_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        try:
            log = parse_vllm_log(doc["log_excerpt"])
        except KVPlanError as exc:
            assert exc.code == "calibrate.no_lines" and doc["id"] in {"33", "34", "35", "47"}, path.name
            continue
        if log.version is None:
            continue
        assert log.version == doc["vllm_version"], path.name
        record, _ = vllm.release_for_log(log)
        placed[doc["id"]] = record.key
    # 20 (0.28.1rc1 dev): the v0.28 record since issue #26 split v0.28–v0.29 (capture sizes with
    # draft tokens differ; nothing else kvplan sizes does). 26 (a v0.14 dev build): the v0.14
    # record since 0.14 split off v0.15–v0.17 (its Mamba prefix-caching rule is v0.13's; log 26 is
    # Qwen3-Coder-30B-A3B, no Mamba layer, so none of its numbers move)
    # 01–06, 25, 43 (v0.10.x): the v0.10 record, and 40, 46 (v0.11.2): the v0.11.1–v0.11.2 record,
    # since v0.11.0–v0.11.2 split off (their profile pads the dummy encoder outputs to the encoder
    # budget, VllmRelease.mm_profile_pads); all text-only, so none of their numbers move
    assert placed == {"01": "0.10", "02": "0.10", "03": "0.10", "04": "0.10", "05": "0.10",
                      "06": "0.10", "14": "0.19", "20": "0.28", "22": "0.24", "25": "0.10",
                      "26": "0.14", "37": "0.11", "38": "0.9",
                      "39": "0.17", "40": "0.11.2", "41": "0.9",
                      "42": "0.9", "43": "0.10", "44": "0.13", "45": "0.17", "46": "0.11.2",
                      "70": "0.9", "71": "0.24", "72": "0.11",
                      # issue #26's ngram start-ups: v0.29.0 and v0.18.0 (test_budget_vs_logs.CASES)
                      "80": "0.29", "81": "0.19", "82": "0.29"}
    for case, key in placed.items():
        if case in CASES:
            assert CASES[case].engine == f"vllm@{key}", case


@pytest.mark.parametrize(("version", "how"), [
    ("0.11.0", "vLLM 0.11.0 → vLLM v0.11.0"),
    ("0.11.1", "vLLM 0.11.1 → vLLM v0.11.1–v0.11.2"),
    ("0.12.0", "vLLM 0.12.0 → vLLM v0.12–v0.13"),
    ("0.10.2", "vLLM 0.10.2 → vLLM v0.10"),
    ("0.20.0", "vLLM 0.20.0 → vLLM v0.20.0"),
    ("0.20.2", "vLLM 0.20.2 → vLLM v0.20.1–v0.20.2"),
    ("0.7.3", "vLLM 0.7.3 → vLLM v0.6 (V0)"),
    ("0.5.4", "vLLM 0.5.4 → vLLM v0.6 (V0) (older than every modelled release; read with the oldest, "
              "vLLM v0.6 (V0))"),
    ("0.34.0", "vLLM 0.34.0 → vLLM v0.33 (newer than every modelled release; read with the newest)"),
    # the v0.28 record since issue #26 split v0.28–v0.29 (capture sizes with draft tokens)
    ("0.28.1rc1.dev563+gdc919e3f5", "vLLM 0.28.1rc1.dev563+gdc919e3f5 → vLLM v0.28; a "
                                    "pre-release or development build, read as the release it leads to"),
])
def test_a_version_maps_to_the_record_covering_it(version, how):
    assert get_engine("vllm").release_for_version(version)[1] == how


def test_a_v0_engine_on_a_v1_release_is_read_with_the_v0_record():
    log = parse_vllm_log("INFO [llm_engine.py:232] Initializing an LLM engine (v0.8.5) with config: "
                         "model='m'\n# GPU blocks: 100\n")
    assert log.generation == "V0"
    record, how = get_engine("vllm").release_for_log(log)
    assert record.key == "0.6"
    assert how == ("vLLM 0.8.5 → vLLM v0.8; but the log's engine is V0 ('Initializing an LLM engine' or "
                   "V0 worker lines: VLLM_USE_V1=0) → vLLM v0.6 (V0)")
    v1 = parse_vllm_log("INFO [core.py:74] Initializing a V1 LLM engine (v0.8.5) with config: x\n"
                        "# GPU blocks: 100\n")
    assert v1.generation == "V1" and get_engine("vllm").release_for_log(v1)[0].key == "0.8"


def test_v0_worker_lines_place_a_log_in_the_v0_record():
    """Fixtures 07 (0.6.4's one-line "Memory profiling results: … kv_cache_size=") and 18 (0.7's
    "the rest of the memory reserved for KV Cache") print no version; only V0's worker.py prints
    those lines, so they are read with the V0 record. Fixture 19 (v0.8.3, V0 worker lines, version
    from its issue title only) is V0 too; a V1 log's lines (01) are not."""
    vllm = get_engine("vllm")
    for case in ("07", "18", "19"):
        (path,) = LOGS_DIR.glob(f"{case}-*.json")
        log = parse_vllm_log(json.loads(path.read_text())["log_excerpt"])
        assert (log.version, log.generation) == (None, "V0"), case
        record, how = vllm.release_for_log(log)
        assert record.key == "0.6" and how == (
            "the log prints no version, but its lines are V0's (worker.py memory profile, "
            "model_runner.py 'Loading model weights took') → vLLM v0.6 (V0)"), case
    (path,) = LOGS_DIR.glob("01-*.json")
    assert parse_vllm_log(json.loads(path.read_text())["log_excerpt"]).generation == "V1"
    v0_log = ("Memory profiling results: total_gpu_memory=79.19GiB non_torch_memory=0.35GiB "
              "kv_cache_size=10.00GiB gpu_memory_utilization=0.90\n# GPU blocks: 5120\n")
    result = calibrate(make_plan(ARCH, H100, FitQuery(tokens=L)), v0_log)
    assert result.engine_id == "vllm@0.6" and result.release_source == (
        "vLLM v0.6 (V0), from the log's V0-only lines (the log prints no version, but its lines are "
        "V0's (worker.py memory profile, model_runner.py 'Loading model weights took') → vLLM v0.6 (V0))")


def test_calibrate_uses_the_release_the_log_names():
    """Issue #33 item 3: the same lines with and without "vLLM API server version 0.11.0". With it
    the v0.11.0 rules are used (gpu_memory_utilization 0.9) and the implied reserve is the
    plan's own 1,456,471,225 B within one block; read with v0.33's (0.92) it was 1.58 GiB larger."""
    plan = make_plan(ARCH, H100, FitQuery(tokens=L))
    named = calibrate(plan, API_LINE + V011_LINES)
    assert (named.engine_id, named.release) == ("vllm@0.11", "vLLM v0.11.0")
    assert named.release_source == ("vLLM v0.11.0, from the log's version line 'vLLM API server "
                                    "version 0.11.0' (vLLM 0.11.0 → vLLM v0.11.0)")
    assert named.implied_reserve_bytes == 1_456_463_872  # 1,456,044,442 with the pre-RoPE-cache lines
    assert abs(named.implied_reserve_bytes - 1_456_471_225) < BLOCK_BYTES
    assert named.suggested_reserve_gib == 1.356 and not named.notes
    unnamed = calibrate(plan, V011_LINES)
    assert (unnamed.engine_id, unnamed.release) == ("vllm", "vLLM v0.33")
    assert unnamed.release_source == ("vLLM v0.33: the log prints no version line, so the newest "
                                      "modelled release")
    assert unnamed.implied_reserve_bytes == 3_157_023_458  # 3,156,604,028 with the pre-RoPE-cache lines
    assert unnamed.implied_reserve_bytes - named.implied_reserve_bytes == 1_700_559_586
    # a pinned release is kept, and the log's own is named beside it
    pinned = calibrate(make_plan(ARCH, H100, FitQuery(tokens=L, engine="vllm@0.33")), API_LINE + V011_LINES)
    assert pinned.engine_id == "vllm" and pinned.implied_reserve_bytes == 3_157_023_458
    assert pinned.release_source == ("vLLM v0.33, as chosen (the log's version line 'vLLM API server "
                                     "version 0.11.0' says vLLM v0.11.0)")
    assert pinned.notes == ["the log's version line 'vLLM API server version 0.11.0' places it in vLLM "
                            "v0.11.0, but vLLM v0.33 was chosen; compared with the chosen release"]
    same = calibrate(make_plan(ARCH, H100, FitQuery(tokens=L, engine="vllm@0.11")), API_LINE + V011_LINES)
    assert same.release_source == ("vLLM v0.11.0, as chosen and as the log's version line "
                                   "'vLLM API server version 0.11.0' says")


#: A Llama-3.1-8B start-up (the weights vLLM loads for it: 14.9889 GiB, as in ``REAL``; kvplan's
#: with the RoPE cache, 16,094,076,928 B). The 70B's 131.45 GiB holds its 33,554,432 B RoPE cache
#: (131.42 before it).
EIGHT_B = (API_LINE
           + "(EngineCore_DP0 pid=9) INFO [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
             "model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, max_seq_len=32768\n"
             "(EngineCore_DP0 pid=9) INFO [model.py:547] Resolved architecture: LlamaForCausalLM\n"
             "(EngineCore_DP0 pid=9) INFO [gpu_model_runner.py:2653] Model loading took 14.9889 GiB "
             "and 4.512 seconds\n" + V011_LINES)
OTHER_MODEL_70B = (
    "the log is not a run of Llama-3.1-70B with these settings: it loaded 14.9889 GiB of weights per "
    "GPU, kvplan's Llama-3.1-70B at TP 1 × PP 1 has 131.45 GiB (+777%, beyond ±10%: another model, "
    "TP/PP or weight format). The log says: model 'meta-llama/Llama-3.1-8B-Instruct', architecture "
    "LlamaForCausalLM, vLLM 0.11.0, max_model_len 32,768, 14.9889 GiB of weights per GPU ('Model "
    "loading took')")


def test_a_log_of_another_model_is_refused_with_what_it_says_it_is():
    """Issue #33 item 4: Llama-3.1-70B against a Llama-3.1-8B log gave "Implied runtime reserve:
    −110.643 GiB"; it is refused, naming the log's model and weights."""
    assert calibrate(make_plan(ARCH, H100, FitQuery(tokens=L)), EIGHT_B).engine_id == "vllm@0.11"
    with pytest.raises(KVPlanError) as err:
        calibrate(make_plan(load_model("llama-3.1-70b"), H100, FitQuery(tokens=L)), EIGHT_B)
    assert err.value.code == "calibrate.other_model" and str(err.value) == OTHER_MODEL_70B


def test_another_architecture_or_a_length_past_the_model_is_refused():
    qwen = load_model("qwen2.5-7b")
    with pytest.raises(KVPlanError) as err:
        calibrate(make_plan(qwen, H100, FitQuery(tokens=L)),
                  "Resolved architecture: LlamaForCausalLM\nGPU KV cache size: 81,920 tokens\n")
    assert str(err.value) == (
        f"the log is not a run of {qwen.name} with these settings: vLLM resolved the architecture "
        f"LlamaForCausalLM, {qwen.name}'s is Qwen2ForCausalLM. The log says: architecture LlamaForCausalLM")
    long = "GPU KV cache size: 81,920 tokens\nMaximum concurrency for 262,144 tokens per request: 0.31x\n"
    with pytest.raises(KVPlanError) as err:
        calibrate(make_plan(ARCH, H100, FitQuery(tokens=L)), long)
    assert str(err.value) == (
        "the log is not a run of Llama-3.1-8B with these settings: its max_model_len 262,144 is beyond "
        "Llama-3.1-8B's limit of 131,072 tokens (max_position_embeddings 131,072; vLLM v0.33 "
        "_get_and_verify_max_len). The log says: max_model_len 262,144")


def test_cli_names_the_release_and_refuses_another_model(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text(EIGHT_B)
    code, out, err = run_cli(cal_argv(path))
    assert code == 0 and err == ""
    assert out.splitlines()[1] == ("Release: vLLM v0.11.0, from the log's version line 'vLLM API "
                                   "server version 0.11.0' (vLLM 0.11.0 → vLLM v0.11.0)")
    assert json.loads(run_cli(cal_argv(path, "--json"))[1])["engine_id"] == "vllm@0.11"
    code, out, err = run_cli(["calibrate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm",
                              "--tokens", str(L), "--log", str(path)])
    assert (code, out, err) == (2, "", f"kvplan: error: {OTHER_MODEL_70B}\n")


def test_expander_uses_the_logs_release_and_applies_it_with_the_reserve():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update({"t": str(L), "vw": "memory"})
    open_boxes(at.run(), "box_calibrate")
    at.text_area(key="w_vllm_log").input(EIGHT_B).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(unmd(c.value) == "Release: vLLM v0.11.0, from the log's version line 'vLLM API server "
                          "version 0.11.0' (vLLM 0.11.0 → vLLM v0.11.0)" for c in at.caption)
    button = at.button(key="calibrate_use_reserve")
    assert button.label == "Use 1.356 GiB as the runtime reserve with vLLM v0.11.0"
    button.click().run()
    assert not at.exception and not at.error
    assert at.session_state["w_reserve"] == 1.356 and at.session_state["w_ev"] == "0.11"
    params = {k: v if isinstance(v, str) else v[0] for k, v in dict(at.query_params).items()}
    assert params["r"] == "1.356" and params["ev"] == "0.11"
    # the sidebar now plans with the log's release and reserve: the logged pool, exactly
    frame = calibration_table(at)
    predicted = dict(zip(frame["quantity"], frame["kvplan (sidebar reserve)"], strict=True))
    assert predicted["GPU KV cache size (tokens)"] == "449,936"  # V011_LINES' own
    assert at.button(key="calibrate_use_reserve").label == "Use 1.356 GiB as the runtime reserve"


def test_expander_refuses_a_log_of_another_model():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update({"m": "llama-3.1-70b", "t": str(L), "vw": "memory"})
    open_boxes(at.run(), "box_calibrate")
    at.text_area(key="w_vllm_log").input(EIGHT_B).run()
    assert not at.exception
    assert [unmd(e.value) for e in at.error] == [f"Calibration: {OTHER_MODEL_70B}"]


def test_trtllm_and_sglang_version_lines():
    trt = parse_trtllm_log("[TensorRT-LLM] TensorRT-LLM version: 1.1.0rc3\n"
                           "[TensorRT-LLM][INFO] Number of tokens per block: 32.\n")
    assert (trt.version, trt.version_line) == ("1.1.0rc3", "TensorRT-LLM version: 1.1.0rc3")
    assert get_engine("trtllm").release_for_log(trt)[0].key == "1.1"
    assert get_engine("trtllm").release_for_version("1.2.1")[0].key == "main"
    sgl = parse_sglang_log("sglang: 0.4.3.post2\n[x] KV Cache is allocated. #tokens: 10, KV size: 1.00 GB\n")
    assert sgl.version == "0.4.3.post2"
    assert get_engine("sglang").release_for_log(sgl)[1] == "SGLang 0.4.3.post2 → SGLang 0.4"
    assert get_engine("sglang").release_for_version("0.3.6")[1] == (
        "SGLang 0.3.6 → SGLang 0.4 (older than every modelled release; read with the oldest, SGLang 0.4)")
