"""The CLI contract (exit 0/2, one stderr line, one JSON object) and every message in MESSAGES.

``test_every_message_formats`` formats each code with dummy fields; ``REACHED`` reaches each code
through a real entry point (CLI, config import, link decoding, scenario files, CSV upload).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import string
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from cli_helpers import run_cli

from kvplan.dtypes import KV_DTYPE_CHOICES, WEIGHT_DTYPES
from kvplan.errors import MESSAGES, KVPlanError, short
from kvplan.plan import make_plan
from kvplan.presets import gpus

# --------------------------------------------------------------------------- helpers




def cli_error(argv: list[str]) -> str:
    code, out, err = run_cli(argv)
    assert code == 2, (argv, code, out, err)
    assert err.startswith("kvplan: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    return err


def raises_code(code: str, func, *args, **kwargs) -> KVPlanError:
    with pytest.raises(KVPlanError) as info:
        func(*args, **kwargs)
    assert info.value.code == code, (info.value.code, str(info.value))
    assert str(info.value) == MESSAGES[code].format(**info.value.fields)
    return info.value


# --------------------------------------------------------------------------- CLI contract

KV = ["kv", "--model", "llama-2-7b", "--tokens", "4096"]
FIT = ["fit", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--tokens", "4096"]
#: ``FIT`` pinned to the release its numbers are derived for (a newer release changes none).
FIT_033 = FIT + ["--engine-version", "0.33"]


@pytest.mark.parametrize("argv", [KV, FIT, ["models"], ["gpus"], KV + ["--batch", "8"],
                                  FIT + ["--engine", "sglang", "--users", "64"]])
def test_ok_commands_exit_0(argv):
    code, out, err = run_cli(argv)
    assert code == 0 and err == "" and out


@pytest.mark.parametrize("argv", [KV + ["--json"], FIT + ["--json"], ["models", "--json"],
                                  ["gpus", "--json"]])
def test_json_is_exactly_one_document(argv):
    code, out, err = run_cli(argv)
    assert code == 0 and err == ""
    json.loads(out)          # raises if there is anything but one JSON document


def test_kv_json_numbers():
    _, out, _ = run_cli(KV + ["--batch", "2", "--json"])
    payload = json.loads(out)
    # Llama-2-7B: 32 layers × 32 heads × 128 × 2 (K, V) × 2 B = 512 KiB per token
    assert payload["kv_bytes"] == 2 * 4096 * 32 * 32 * 128 * 2 * 2


def test_fit_json_numbers():
    """Llama-2-7B fp16 on an H100 SXM, vLLM v0.33 defaults, 4,096 tokens. Capacity: CUDA's total
    81,089 MiB = 85,027,979,264 B (nvidia-smi's 85,520,809,984 B and the marketed 80 GB beside it);
    target ceil(85,027,979,264 × 0.92) = 78,225,740,923; weights 6,738,415,616 × 2 = 13,476,831,232
    plus vLLM's RoPE cos/sin cache 4,096 × 128 × 2 B = 1,048,576 (``rotary_embedding/base.py``;
    helper vllmrope) = 13,477,879,808; reserve: activation max(forward 8,192 × (3 × 4,096 + 3 × 11,008)
    × 2 B = 742,391,808, sampler
    1,024 × 32,000 × 10 B = 327,680,000) + non-torch 143,129,785 + CUDA graphs 51 × 8,012,999 =
    408,662,949 → 1,294,184,542 B; budget 63,453,676,573 B (63,454,725,149 before the cache); a block =
    16 × 524,288 = 8,388,608 B →
    7,564 blocks; a request 4,096 / 16 = 256 blocks → (7,564 − 1) // 256 = 29 requests,
    concurrency 7,564 / 256 = 29.546875, "GPU KV cache size" int(29.546875 × 4,096) = 121,024."""
    _, out, _ = run_cli(FIT_033 + ["--json"])
    payload = json.loads(out)
    assert (payload["memory_target_bytes"], payload["weights_bytes"], payload["kv_budget_bytes"]) == (
        78_225_740_923, 13_476_831_232 + 1_048_576, 63_454_725_149 - 1_048_576)
    assert (payload["num_blocks"], payload["bytes_per_block"], payload["blocks_per_request"]) == (
        7_564, 8_388_608, 256)
    assert (payload["max_requests"], payload["max_concurrency"], payload["kv_pool_tokens"]) == (
        29, 29.546875, 121_024)
    assert payload["fits"] is True and payload["engine_release"] == "vLLM v0.33"
    assert payload["release"] == "0.33"
    cap = payload["capacity"]
    assert (cap["bytes"], cap["source"], cap["status"], cap["marketed"], cap["nvidia_smi"]) == (
        85_027_979_264, "cuda_total", "measured", 80_000_000_000, 85_520_809_984)
    reserve = payload["reserve"]
    assert [(t["name"], t["bytes"], t["counted"]) for t in reserve["terms"]] == [
        ("activation_peak", 742_391_808, True), ("non_torch", 143_129_785, True),
        ("cuda_graphs", 408_662_949, True)]
    assert reserve["total"] == payload["reserve_bytes"] == 1_294_184_542
    assert all(t["formula"] and t["source"] for t in reserve["terms"])


def test_fit_without_engine_version_is_the_newest_release():
    """No ``--engine-version``: the release key is ``latest`` and the rules are the newest record's."""
    from kvplan.engines import get_engine

    _, out, _ = run_cli(FIT + ["--json"])
    payload = json.loads(out)
    assert (payload["release"], payload["engine_release"]) == ("latest", get_engine("vllm").release)


def test_fit_reserve_overrides():
    """--reserve-term replaces one term (activation 2 GiB: 2,147,483,648 + 143,129,785 +
    408,662,949 = 2,699,276,382 B); --reserve-gib replaces the total; an unknown term is refused."""
    _, out, _ = run_cli(FIT_033 + ["--json", "--reserve-term", "activation_peak=2"])
    payload = json.loads(out)
    assert payload["reserve_bytes"] == 2_699_276_382
    assert payload["reserve"]["terms"][0]["basis"] == "override"
    _, out, _ = run_cli(FIT_033 + ["--json", "--reserve-gib", "1"])
    assert json.loads(out)["reserve"] == {**json.loads(out)["reserve"], "total": 1 << 30,
                                          "total_overridden": True}
    code, _, err = run_cli(FIT + ["--reserve-term", "cuda_graphs=1", "--engine-version", "0.19"])
    assert code == 2 and "no term 'cuda_graphs'" in err  # v0.19 does not subtract CUDA graphs


def test_fit_engine_version_0_20_sorts_in_the_sampler_warm_up():
    """``--engine-version 0.20`` (v0.20.1–v0.20.2): the same target and CUDA-graph term as v0.33
    (0.92, ceil, estimate subtracted from v0.20.0), but the sampler warm-up sorts (FlashInfer is
    opt-in until v0.21.0, ``envs.py`` ``VLLM_USE_FLASHINFER_SAMPLER``): 1,024 × 32,000 × 39 B =
    1,277,952,000 B > the forward 742,391,808 → reserve 1,277,952,000 + 143,129,785 + 408,662,949 =
    1,829,744,734; budget 78,225,740,923 − 13,477,879,808 (the weights with vLLM's 1,048,576 B RoPE
    cache, ``test_fit_json_numbers``) − 1,829,744,734 = 62,918,116,381 B →
    7,500 blocks of 8,388,608 B, (7,500 − 1) // 256 = 29 requests, int(7,500 / 256 × 4,096) = 120,000
    tokens logged."""
    _, out, _ = run_cli(FIT + ["--json", "--engine-version", "0.20"])
    payload = json.loads(out)
    assert (payload["release"], payload["engine_release"]) == ("0.20", "vLLM v0.20.1–v0.20.2")
    assert [(t["name"], t["bytes"], t["counted"]) for t in payload["reserve"]["terms"]] == [
        ("activation_peak", 1_277_952_000, True), ("non_torch", 143_129_785, True),
        ("cuda_graphs", 408_662_949, True)]
    assert (payload["kv_budget_bytes"], payload["num_blocks"], payload["max_requests"],
            payload["kv_pool_tokens"]) == (62_919_164_957 - 1_048_576, 7_500, 29, 120_000)


def test_usage_errors_are_one_line():
    for argv in ([], ["kv"], ["bogus"], ["kv", "--model", "x"], ["fit", "--tokens", "1"],
                 KV + ["--unknown-flag"], KV + ["--engine", "tensorrt"], ["kv", "--model", "a",
                                                                           "--config", "b",
                                                                           "--tokens", "1"]):
        cli_error(argv)


# --------------------------------------------------------------------------- every message


def _dummy(name: str) -> object:
    return {"size": 3_000_000, "limit": 2_000_000, "low": 1, "high": 4096, "tp": 3, "heads": 8,
            "pp": 99, "layers": 32, "gpus": 3, "tpp": 2, "need": 5_000, "ram": 6_000, "blocks": 7_000,
            "prompt": 8_000}.get(name, f"<{name}>")


@pytest.mark.parametrize("code", sorted(MESSAGES))
def test_every_message_formats(code):
    fields = {name: _dummy(name) for _, name, _, _ in string.Formatter().parse(MESSAGES[code]) if name}
    err = KVPlanError(code, **fields)
    text = str(err)
    assert text and "\n" not in text and "{" not in text.replace("{}", "")
    for value in fields.values():
        assert (f"{value:,}" if isinstance(value, int) else str(value)) in text or str(value) in text
    assert isinstance(err, ValueError) and err.code == code


def test_message_fields_are_bounded():
    assert len(short("x" * 10_000)) <= 60
    assert short("\x00\x1b<script>").isprintable()


def _bad_config(tmp_path, raw: bytes) -> list[str]:
    path = tmp_path / "config.json"
    path.write_bytes(raw)
    return ["kv", "--config", str(path), "--tokens", "10"]


LLAMA_MIN = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}


def reach(code: str, tmp_path) -> str:
    """Reach ``code`` through a real entry point; returns the message the user sees."""
    from kvplan.capacity import FitQuery
    from kvplan.config_import import MAX_CONFIG_BYTES, parse_config
    from kvplan.presets import get_gpu, load_model
    from kvplan.scenario import Scenario, check_names

    cfg = lambda **kw: json.dumps({**LLAMA_MIN, **kw}).encode()  # noqa: E731
    if code == "config.not_json":
        return cli_error(_bad_config(tmp_path, b"{nope"))
    if code == "config.not_object":
        return cli_error(_bad_config(tmp_path, b"[1, 2]"))
    if code == "config.too_large":
        return cli_error(_bad_config(tmp_path, b" " * (MAX_CONFIG_BYTES + 1)))
    if code == "config.not_utf8":
        return cli_error(_bad_config(tmp_path, b'{"a": "\xff"}'))
    if code == "config.missing_key":
        msg = cli_error(_bad_config(tmp_path, b'{"model_type": "llama"}'))
        assert "num_hidden_layers" in msg
        return msg
    if code == "config.bad_value":
        msg = cli_error(_bad_config(tmp_path, cfg(num_hidden_layers=0)))
        assert "num_hidden_layers" in msg
        assert "num_attention_heads" in str(raises_code(code, parse_config, cfg(num_attention_heads=-4)))
        assert "hidden_size" in str(raises_code(code, parse_config, cfg(hidden_size="big")))
        return msg
    if code == "config.unsupported":
        return cli_error(_bad_config(tmp_path, cfg(layer_types=["full_attention", "warp_drive"])))
    if code == "config.too_deep":
        return cli_error(_bad_config(tmp_path, b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}"))
    if code == "unknown.model":
        raises_code(code, load_model, "gpt-17")
        return cli_error(["kv", "--model", "gpt-17", "--tokens", "1"])
    if code == "unknown.gpu":
        return cli_error(["fit", "--model", "llama-2-7b", "--gpu", "tpu-v99", "--tokens", "1"])
    if code == "unknown.dtype":
        return cli_error(KV + ["--kv-dtype", "fp3"])
    if code == "unknown.engine":
        return str(raises_code(code, make_plan, load_model("llama-2-7b"), get_gpu("h100-sxm"),
                               FitQuery(engine="tensorrt")))
    if code == "unknown.scenario":
        from kvplan.report import load_scenario

        return str(raises_code(code, load_scenario, "no-such-scenario"))
    if code == "value.range":
        msg = cli_error(["kv", "--model", "llama-2-7b", "--tokens", "0"])
        assert "--tokens" in msg
        return msg
    if code == "value.not_number":
        msg = cli_error(["kv", "--model", "llama-2-7b", "--tokens", "many"])
        assert "--tokens" in msg
        return msg
    if code == "value.deprecated_conflict":
        msg = cli_error(FIT + ["--prefix-caching", "on", "--no-enable-prefix-caching"])
        assert msg == ("kvplan: error: --prefix-caching on (deprecated) contradicts "
                       "--no-enable-prefix-caching; give only --no-enable-prefix-caching\n")
        return msg
    if code == "parallel.tp_heads":
        return cli_error(FIT + ["--tp", "3"])          # 32 KV heads, tp 3
    if code == "parallel.pp_layers":
        return cli_error(FIT + ["--pp", "64"])         # 32 layers
    if code == "parallel.gpus":
        return cli_error(FIT + ["--tp", "2", "--num-gpus", "3"])
    if code == "engine.dtype":
        return cli_error(["kv", "--model", "gemma-2-9b", "--tokens", "10", "--kv-dtype", "int4",
                          "--engine", "hf"])
    if code == "unknown.release":
        msg = cli_error(FIT + ["--engine-version", "0.1"])
        assert "choose one of: latest, " in msg  # then every release, newest first
        # 0.30 and 0.28 split off 0.32 and 0.29 (issue #26: capture sizes with draft tokens)
        assert "0.33, 0.32, 0.30, 0.29, 0.28, 0.27, 0.26, 0.25, 0.24, 0.20, 0.20.0, 0.19" in msg
        return msg
    if code == "engine.unserved":  # TensorRT-LLM's PyTorch backend has no Gemma 2 model class
        msg = cli_error(["fit", "--model", "gemma-2-9b", "--gpu", "h100-sxm", "--tokens", "10",
                         "--engine", "trtllm"])
        assert "Gemma2ForCausalLM" in msg
        return msg
    if code in {"link.unknown_key", "link.bad_value", "link.future_version"}:
        query = {"link.unknown_key": {"zz": "1"}, "link.bad_value": {"t": "-5"},
                 "link.future_version": {"v": "99"}}[code]
        _, warnings = Scenario.from_query(query)
        assert len(warnings) == 1
        return warnings[0]
    if code == "scenario.invalid":
        from kvplan.report import scenario_from_json

        return str(raises_code(code, scenario_from_json, b'{"query": 5}'))
    if code == "csv.invalid":
        from kvplan.serving import parse_lengths_csv

        return str(raises_code(code, parse_lengths_csv, b"prompt,output\n12,abc\n"))
    if code == "file.missing":
        return cli_error(["kv", "--config", str(tmp_path / "absent.json"), "--tokens", "1"])
    if code == "file.not_regular":
        return cli_error(["kv", "--config", "/dev/zero", "--tokens", "1"])
    if code == "file.not_writable":
        return cli_error(["report", "--scenario", "opt-13b-vllm-paper", "--out", "/proc/x", "--no-png"])
    if code == "link.too_deep":
        deep = base64.urlsafe_b64encode(zlib.compress(b"[" * 1000)).decode()
        _, warnings = Scenario.from_query({"c": deep})
        assert warnings[0].startswith("link parameter 'c'=")
        return warnings[0]
    if code == "link.config_too_large":
        bomb = base64.urlsafe_b64encode(zlib.compress(b" " * 3_000_000)).decode()
        _, warnings = Scenario.from_query({"c": bomb})
        assert warnings[0].startswith("link parameter 'c'=")
        return warnings[0]
    if code == "file.not_directory":
        return cli_error(["report", "--scenario", "opt-13b-vllm-paper", "--out", "/etc/hostname",
                          "--no-png"])
    if code == "gpu.custom_fields":
        return cli_error(["fit", "--model", "llama-2-7b", "--gpu", "custom:80:1:1:1:1:1", "--tokens", "1"])
    if code == "gpu.custom":
        return cli_error(["fit", "--model", "llama-2-7b", "--gpu", "custom:1e18", "--tokens", "1"])
    if code == "scenario.too_large":
        path = tmp_path / "big.json"
        path.write_bytes(b" " * 1_000_001)
        return cli_error(["report", "--scenario", str(path), "--out", str(tmp_path), "--no-png"])
    if code == "prices.csv":
        path = tmp_path / "prices.csv"
        path.write_text("gpu,provider\nl4,Acme\n")
        return cli_error(["recommend", "--model", "llama-2-7b", "--gpus", "l4", "--prices-csv", str(path)])
    if code == "recommend.run":
        return cli_error(["throughput", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--tp", "2",
                          "--gpus", "3", "--isl", "128", "--osl", "128"])
    if code.startswith("recommend."):
        base = ["recommend", "--model", "llama-2-7b", "--gpus", "h100-sxm"]
        more = {"recommend.empty": ["--kv-dtypes", ""], "recommend.traffic": ["--users", "0"],
                "recommend.targets": ["--tpot-ms", "-1"], "recommend.preset": ["--preset", "fast"],
                "recommend.calibrate": ["--measured-gpu", "h100-sxm", "--measured-ttft-ms", "0.001"],
                "recommend.too_many": ["--gpus", ",".join(gpus()), "--max-gpus", "1024", "--pp",
                                       "1,2,4,8,16,32", "--kv-dtypes", ",".join(KV_DTYPE_CHOICES),
                                       "--weight-dtypes", ",".join(WEIGHT_DTYPES)]}
        if code == "recommend.none":
            status, out, _ = run_cli([*base, "--tpot-ms", "0.001", "--json"])
            assert status == 0
            return json.loads(out)["message"]
        return cli_error([*base, *more[code]])
    if code.startswith("instances."):
        one = "model=llama-3.1-8b,gu=0.3"
        specs = {"instances.too_many": [f"{one},name=i{i}" for i in range(17)],
                 "instances.duplicate": [f"{one},name=a", f"{one},name=a"],
                 "instances.shares": [f"{one},name=a", "model=llama-3.1-8b,gu=0.8,name=b"],
                 "instances.bad": [f"{one},zz=1"]}[code]
        return cli_error(["share", "--gpu", "h100-sxm", *[a for s in specs for a in ("--instance", s)]])
    if code.startswith("calibrate."):
        log = tmp_path / "vllm.log"
        log.write_bytes({"calibrate.empty": b"", "calibrate.not_text": b"\xff\x00" * 64,
                         "calibrate.bad_value": b"GPU KV cache size: " + b"9" * 5000 + b" tokens\n",
                         "calibrate.not_finite": b"Available KV cache memory: 1e309 GiB\n",
                         "calibrate.too_large": b"x" * (2 << 20),
                         "calibrate.no_lines": b"INFO nothing here\n",
                         "calibrate.other_model": b"Model loading took 131.42 GiB and 9 seconds\n"
                                                  b"GPU KV cache size: 81,920 tokens\n"}.get(
            code, b"GPU KV cache size: 81,920 tokens\n"))
        more = ["--engine", "sglang"] if code == "calibrate.engine" else []
        return cli_error(["calibrate", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--tokens",
                          "4096", "--log", str(log), *more])
    if code == "reserve.term":
        return cli_error(["fit", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--reserve-term", "no_such_term=1"])
    if code == "parallel.ep":
        return cli_error(["fit", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--tp", "4", "--num-gpus", "4", "--ep", "3"])
    if code.startswith("lora."):  # vLLM --enable-lora (tests/test_vllm_lora.py has the bytes)
        if code in {"lora.vocab", "lora.architecture"}:
            path = tmp_path / "config.json"
            config = {**LLAMA_MIN, "vocab_size": 300_000, "architectures": ["LlamaForCausalLM"]} \
                if code == "lora.vocab" else \
                {**LLAMA_MIN, "architectures": ["InternLM3ForCausalLM"]}
            path.write_text(json.dumps(config))
            return cli_error(["fit", "--config", str(path), "--gpu", "h100-sxm", "--tokens", "8",
                              "--enable-lora"])
        model, more = {"lora.release": ("llama-3.1-8b", ["--engine-version", "0.19"]),
                       "lora.rank": ("llama-3.1-8b", ["--max-lora-rank", "24"]),
                       "lora.cpu": ("llama-3.1-8b", ["--max-loras", "4", "--max-cpu-loras", "2"]),
                       "lora.sharded": ("llama-3.1-8b", ["--fully-sharded-loras", "--tp", "2",
                                                         "--max-lora-rank", "1"]),
                       "lora.model": ("mixtral-8x7b", []),
                       "lora.vllm_module": ("llama-3.1-8b", ["--lora-target-modules", "mlp"]),
                       "lora.sglang_module": ("llama-3.1-8b", ["--engine", "sglang",
                                                               "--lora-target-modules", "fc9"])}[code]
        return cli_error(["fit", "--model", model, "--gpu", "h100-sxm", "--tokens", "8",
                          "--enable-lora", *more])
    if code.startswith("sgl_spec."):  # SGLang --speculative-* (tests/test_sglang_spec_decode.py)
        head = str(Path(__file__).resolve().parent / "fixtures/configs/llama3-8B-eagle3.json")
        if code == "sgl_spec.no_nextn":
            preset = Path(__file__).resolve().parent.parent / "presets/models/deepseek-v3.json"
            config = json.loads(preset.read_text())["config"]
            path = tmp_path / "config.json"
            path.write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
            return cli_error(["fit", "--config", str(path), "--gpu", "h200", "--tokens", "8",
                              "--engine", "sglang", "--tp", "8", "--num-gpus", "8",
                              "--speculative-algorithm", "NEXTN"])
        model, gpu, more = {
            "sgl_spec.unknown": ("llama-3.1-8b", "h100-sxm", ["--speculative-algorithm", "MEDUSA"]),
            "sgl_spec.release": ("llama-3.1-8b", "h100-sxm", [
                "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", head,
                "--engine-version", "0.5.5"]),
            "sgl_spec.unmodelled": ("llama-3.1-8b", "h100-sxm", ["--speculative-algorithm", "DFLASH"]),
            "sgl_spec.no_draft": ("llama-3.1-8b", "h100-sxm", ["--speculative-algorithm", "NEXTN"]),
            "sgl_spec.vocab": ("llama-3.1-8b", "h100-sxm", [
                "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "llama-2-7b"]),
            "sgl_spec.hidden": ("llama-3.1-8b", "h100-sxm", [
                "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "llama-3.2-1b"]),
            "sgl_spec.dp": ("llama-3.1-8b", "h100-sxm", [
                "--speculative-algorithm", "NGRAM", "--dp", "2", "--num-gpus", "2"]),
            "sgl_spec.params": ("llama-3.1-8b", "h100-sxm", [
                "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", head,
                "--speculative-eagle-topk", "2"]),
            "sgl_spec.pool": ("qwen3-next-80b-a3b", "h100-sxm", [
                "--speculative-algorithm", "NEXTN", "--speculative-draft-model-path",
                "qwen3-next-80b-a3b"]),
            "sgl_spec.trtllm_topk": ("llama-3.1-8b", "b200", [
                "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", head]),
        }[code]
        return cli_error(["fit", "--model", model, "--gpu", gpu, "--tokens", "8", "--engine",
                          "sglang", *more])
    if code.startswith("trt_spec."):  # TensorRT-LLM speculative_config (tests/test_trtllm_spec_decode.py)
        head = str(Path(__file__).resolve().parent / "fixtures/configs/llama3-8B-eagle3.json")
        eagle = json.dumps({"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": head})
        model, spec, more = {
            "trt_spec.key": ("llama-3.1-8b", '{"decoding_type":"Eagle3","draft":1}', []),
            "trt_spec.type": ("llama-3.1-8b", '{"decoding_type":"Eagle3","max_draft_len":"3"}', []),
            "trt_spec.decoding_type": ("llama-3.1-8b", '{"decoding_type":"eagle9"}', []),
            "trt_spec.unmodelled": ("llama-3.1-8b", '{"decoding_type":"Medusa","max_draft_len":3}', []),
            "trt_spec.max_draft_len": ("llama-3.1-8b", '{"decoding_type":"NGram"}', []),
            "trt_spec.no_model": ("llama-3.1-8b", '{"decoding_type":"Draft_Target","max_draft_len":3}',
                                  []),
            "trt_spec.no_mtp": ("llama-3.1-8b", '{"decoding_type":"MTP"}', []),
            "trt_spec.vocab": ("llama-3.1-8b", '{"decoding_type":"Draft_Target","max_draft_len":3,'
                                               '"speculative_model":"Qwen/Qwen3-0.6B"}', []),
            "trt_spec.mtp_two_model": ("deepseek-v3", '{"decoding_type":"MTP","mtp_eagle_one_model":false}',
                                       ["--tp", "8", "--num-gpus", "8"]),
            "trt_spec.pp": ("llama-3.1-8b", eagle, ["--pp", "2", "--num-gpus", "2"]),
            "trt_spec.hybrid": ("qwen3-next-80b-a3b", '{"decoding_type":"NGram","max_draft_len":3}',
                                ["--tp", "4", "--num-gpus", "4"]),
            "trt_spec.vswa": ("llama-3.1-8b", eagle, ["--max-attention-window", "4096,8192"]),
            "trt_spec.release": ("llama-3.1-8b", eagle, ["--engine-version", "1.1"]),
        }[code]
        return cli_error(["fit", "--model", model, "--gpu", "h200", "--tokens", "8", "--engine",
                          "trtllm", "--speculative-config", spec, *more])
    if code.startswith("spec."):  # vLLM --speculative-config (tests/test_vllm_spec_decode.py: bytes)
        model, spec, more = "llama-3.1-8b", '{"model":"llama-3.2-1b","num_speculative_tokens":3}', []
        if code in {"spec.mtp_layers", "spec.mtp_divisible"}:
            preset = Path(__file__).resolve().parent.parent / "presets/models/deepseek-v3.json"
            config = json.loads(preset.read_text())["config"]
            path = tmp_path / "config.json"
            path.write_text(json.dumps({**config, "num_nextn_predict_layers":
                                        0 if code == "spec.mtp_layers" else 2}))
            return cli_error(["fit", "--config", str(path), "--gpu", "h200", "--tokens", "8",
                              "--tp", "8", "--num-gpus", "8", "--speculative-config",
                              '{"method":"mtp","num_speculative_tokens":3}'])
        spec, more = {
            "spec.key": ('{"model":"llama-3.2-1b","draft":1}', []),
            "spec.tp_key": ('{"tensor_parallel_size":2}', []),
            "spec.type": ('{"num_speculative_tokens":"4"}', []),
            "spec.release": (spec, ["--engine-version", "0.17"]),
            "spec.method": ('{"method":"medusa","num_speculative_tokens":3}', []),
            "spec.unmodelled": ('{"method":"dflash","model":"x","num_speculative_tokens":3}', []),
            "spec.no_model": ('{"method":"eagle3","num_speculative_tokens":3}', []),
            "spec.no_tokens": ('{"model":"llama-3.2-1b"}', []),
            "spec.draft": ('{"model":"no/such-draft","num_speculative_tokens":3}', []),
            "spec.draft_tp": ('{"model":"llama-3.2-1b","num_speculative_tokens":3,'
                              '"draft_tensor_parallel_size":2}', ["--tp", "4", "--num-gpus", "4"]),
            "spec.vocab": ('{"model":"Qwen/Qwen3-0.6B","num_speculative_tokens":3}', []),
            "spec.hidden": ('{"method":"eagle","model":"llama-3.2-1b","num_speculative_tokens":3}', []),
            "spec.mtp_model": ('{"method":"mtp","num_speculative_tokens":1}', []),
            "spec.mtp_draft": ('{"method":"mtp","model":"llama-3.2-1b","num_speculative_tokens":1}', []),
            "spec.pp": (spec, ["--pp", "2", "--num-gpus", "2"]),
            "spec.lookup": ('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":5,'
                            '"prompt_lookup_max":2}', []),
        }[code]
        return cli_error(["fit", "--model", model, "--gpu", "h100-sxm", "--tokens", "8",
                          "--speculative-config", spec, *more])
    if code in {"weights.unknown_method", "weights.bad_quantization"}:
        quant = {"quant_method": "hqq_magic"} if code == "weights.unknown_method" else {
            "quant_method": "fp8", "weight_block_size": [128]}
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**LLAMA_MIN, "quantization_config": quant}))
        return cli_error(["fit", "--config", str(path), "--gpu", "h100-sxm", "--tokens", "8"])
    if code in CHECKPOINT_FOLDERS:  # issue #32: one hostile folder per refusal
        (tmp_path / "config.json").write_text(json.dumps(LLAMA_MIN))
        CHECKPOINT_FOLDERS[code](tmp_path)
        return cli_error(["fit", "--checkpoint", str(tmp_path), "--gpu", "h100-sxm", "--tokens", "8"])
    if code == "csv.too_large":
        big = tmp_path / "lengths.csv"
        big.write_bytes(b"1,1\n" * 2_000_001)
        return cli_error(["recommend", "--model", "llama-2-7b", "--gpus", "h100-sxm", "--lengths-csv",
                          str(big)])
    if code in {"link.repeated", "link.alias", "link.gpus_raised"}:
        query = {"link.repeated": {"t": ["5", "6"]}, "link.alias": {"wd": "int4"},
                 "link.gpus_raised": {"tp": "2"}}[code]
        scenario, warnings = Scenario.from_query(query)
        _, more = check_names(scenario)
        assert len(warnings + more) == 1
        return (warnings + more)[0]
    if code.startswith("checkpoint."):
        (tmp_path / "config.json").write_text(json.dumps(LLAMA_MIN))
        if code != "checkpoint.not_found":
            head = (b"\xff" * 8 if code == "checkpoint.header_too_large"
                    else (4).to_bytes(8, "little") + b"[1]!")
            (tmp_path / "model.safetensors").write_bytes(head + b"{}" * 8)
        return cli_error(["fit", "--checkpoint", str(tmp_path), "--gpu", "h100-sxm", "--tokens", "8"])
    if code == "hub.bad_id":
        return cli_error(["fit", "--hf-id", "no-slash", "--gpu", "h100-sxm", "--tokens", "8"])
    if code == "hub.not_installed":
        with mock.patch.dict(sys.modules, {"huggingface_hub": None}):
            return cli_error(["fit", "--hf-id", "org/name", "--gpu", "h100-sxm", "--tokens", "8"])
    if code == "hub.unavailable":
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        with mock.patch.dict(os.environ, {"HF_ENDPOINT": f"http://127.0.0.1:{port}"}):
            return cli_error(["fit", "--hf-id", "org/name", "--gpu", "h100-sxm", "--tokens", "8"])
    if code == "mm.image_size":
        return cli_error(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--images", "1", "--image-size", "0x0"])
    if code == "mm.images":
        return cli_error(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--images", "3", "--image-size", "8x8", "--limit-mm-per-prompt", "2"])
    if code in {"mm.videos", "mm.video_input"}:
        video = ["--videos", "1", "--video-size", "64x64", "--video-fps", "2"]
        video += ["--video-seconds", "1", "--limit-mm-per-prompt", "0"] if code == "mm.videos" else \
            ["--video-seconds", "0"]
        return cli_error(["fit", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100-sxm",
                          "--tokens", "8", *video])
    if code == "mm.transport":
        return cli_error(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--engine", "sglang", "--mm-feature-transport", "nvlink"])
    if code == "mm.limit_flag":
        return cli_error(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--engine", "sglang", "--limit-mm-per-prompt", "2"])
    if code == "mm.kwargs":
        return cli_error(["fit", "--model", "gemma-3-27b", "--gpu", "h100-sxm", "--tokens", "8",
                          "--mm-processor-kwargs", '{"do_pan_and_scan": true}'])
    offload = ["offload", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "8", "--tokens", "8192"]
    if code == "offload.engine":
        return cli_error([*offload, "--engine", "sglang", "--kv-offloading-size", "10"])
    if code == "offload.size":
        return cli_error(offload)
    if code == "offload.whole_gb":
        return cli_error([*offload, "--engine", "sglang", "--backend", "hicache", "--hicache-size", "2.5"])
    if code == "offload.chunk":
        return cli_error([*offload, "--kv-offloading-size", "10", "--chunk-tokens", "250"])
    if code == "offload.hybrid":
        return cli_error(["offload", "--model", "Qwen/Qwen3.5-27B", "--gpu", "h100-sxm", "--tp", "2",
                          "--tokens", "8192", "--kv-offloading-size", "10"])
    if code == "offload.host_ram":
        return cli_error([*offload, "--kv-offloading-size", "4000", "--host-ram-gib", "2048"])
    disagg = ["disagg", "--model", "llama-3.1-8b", "--prefill-gpu", "h100-sxm", "--decode-gpu", "l4"]
    if code == "disagg.prompt":
        return cli_error([*disagg, "--tokens", "100000"])
    if code == "disagg.engine":
        return cli_error([*disagg, "--tokens", "1000", "--engine", "sglang"])
    raise AssertionError(f"no entry point for {code}")


def _header(entries: dict) -> bytes:
    raw = json.dumps(entries).encode()
    return len(raw).to_bytes(8, "little") + raw


def _shard(folder: Path, name: str = "model.safetensors") -> None:
    (folder / name).write_bytes(_header({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})
                                + b"\0" * 4)


def _index(folder: Path, text: str) -> None:
    (folder / "model.safetensors.index.json").write_text(text)


CHECKPOINT_FOLDERS: dict[str, Callable[[Path], object]] = {
    "checkpoint.bad_total": lambda d: (_shard(d), _index(
        d, '{"metadata": {"total_size": Infinity}, "weight_map": {"w": "model.safetensors"}}')),
    "checkpoint.bad_shard": lambda d: (_shard(d), _index(
        d, '{"weight_map": {"w": "../model.safetensors"}}')),
    "checkpoint.missing_shard": lambda d: (_shard(d), _index(
        d, '{"weight_map": {"w": "model.safetensors", "v": "model-2.safetensors"}}')),
    "checkpoint.index_too_large": lambda d: (_shard(d), _index(d, " " * 50_000_001)),
    "checkpoint.too_large": lambda d: (d / "model.safetensors").write_bytes(_header(
        {"w": {"dtype": "F16", "shape": [1 << 62, 1 << 62]}})),
    "checkpoint.too_many_files": lambda d: [(d / f"{i}.safetensors").touch() for i in range(10_001)],
    "checkpoint.headers_too_large": lambda d: [
        (d / f"m{i}.safetensors").write_bytes((15_000_000).to_bytes(8, "little") + b" " * 15_000_000)
        for i in range(3)],
}


#: Codes reached here through an entry point; the dashboard-only ones are reached in
#: tests/test_app.py (test_empty_paste_message, test_a_failing_view_is_reported_not_raised) and
#: tests/test_hostile.py (test_every_gpu_failing_is_a_named_message).
DASHBOARD_ONLY = {"config.empty", "internal.view", "view.no_gpu",
                  # the header upload's limits: tests/test_hostile_input.py (item 10)
                  "checkpoint.too_many_uploads", "checkpoint.uploads_too_large"}
#: hub.unauthorized needs a server answering 401: tests/test_checkpoint.py reaches it through the CLI
#: (test_hub_gated_repo_needs_hf_token) with a local Hub-like server.
SERVER_ONLY = {"hub.unauthorized",
               # a hostile Hub: tests/test_hostile_input.py (items 8 and 9) through the CLI
               "hub.too_many_shards", "hub.header_too_large", "hub.timeout"}
#: The SGLang / TensorRT-LLM log parsers have no CLI command yet: tests/test_calibrate.py reaches
#: calibrate.no_engine_lines (test_engine_parsers_name_the_engine_when_no_line_matches).
LIBRARY_ONLY = {"calibrate.no_engine_lines",
                "recommend.rate",  # the CLI's --rate and --chunk parsers refuse what it would
                # kvplan share takes one --gpu and one layout, and argparse requires an --instance
                "instances.none", "instances.gpu", "instances.layout",
                "spec.json",  # the setting's own JSON check (Setting.parse) answers first
                "spec.mamba_all",  # no importable config is a Mamba2 hybrid (test_vllm_spec_decode)
                # no video flags yet: tests/test_multimodal.py (test_a_video_of_no_frames_is_refused)
                "mm.frames",
                # the CLI's choices and presets leave no way to them; tests/test_offload.py reaches
                # them through kvplan.offload / kvplan.disagg
                "offload.no_kv", "offload.dtype", "disagg.connector"}
REACHED = sorted(set(MESSAGES) - DASHBOARD_ONLY - SERVER_ONLY - LIBRARY_ONLY)


@pytest.mark.parametrize("code", REACHED)
def test_message_reached_through_entry_point(code, tmp_path):
    message = reach(code, tmp_path)
    prefix = MESSAGES[code].split("{")[0].strip()
    assert prefix in message, (code, message)
    assert "\n" not in message.rstrip("\n")
    assert "Traceback" not in message


def test_scenario_file_errors_name_the_problem():
    from kvplan.report import scenario_from_json

    for raw in (b"", b"[]", b"\xff", b"{" * 5000, b'{"query": {"t": "-1"}}', b"x" * 10_000_000):
        with pytest.raises(KVPlanError) as info:
            scenario_from_json(raw)
        assert info.value.code == "scenario.invalid"


@pytest.mark.parametrize("engine", ["hf", "hf-legacy", "hf-static", "vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-3-27b", "deepseek-v3", "qwen3-next-80b-a3b"])
def test_text_output_for_every_engine(engine, model):
    """The human-readable ``kv`` and ``fit`` reports print for every engine and layer design."""
    for argv in (["kv", "--model", model, "--tokens", "5000", "--engine", engine],
                 ["fit", "--model", model, "--gpu", "h200", "--tokens", "5000", "--engine", engine]):
        code, out, err = run_cli(argv)
        assert code == 0 and err == "", (argv, err)
        assert out.count("\n") >= 3


# --------------------------------------------------------------------------- import cost (issue #33)

_IMPORTED = ("import runpy, sys\n"
             "sys.argv = ['kvplan', *sys.argv[1:]]\n"
             "try:\n"
             "    runpy.run_module('kvplan', run_name='__main__')\n"
             "except SystemExit:\n"
             "    pass\n"
             "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n")


def _modules_after(argv: list[str]) -> set[str]:
    """The modules ``python -m kvplan *argv`` has imported when it exits (a fresh interpreter)."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _IMPORTED, *argv], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parent.parent)
    return set(done.stderr.split())


def test_help_imports_no_engine_and_fit_no_pandas() -> None:
    """``kvplan --help`` declares no command's arguments (``_Parser.populate``), so it imports no
    engine, numpy or pydantic; ``fit`` and ``fit --help`` import no pandas, Plotly or Streamlit
    (the speed targets: bench/README.md, ``--help`` ≤ 0.5 s, ``fit`` ≤ 1 s)."""
    top = _modules_after(["--help"])
    assert "kvplan.cli" in top and "argparse" in top
    assert not {"kvplan.engines", "kvplan.arch", "numpy", "pydantic"} & top
    for argv in (["fit", "--help"], ["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm",
                                    "--num-gpus", "2", "--tp", "2", "--tokens", "8192", "--users", "32"]):
        mods = _modules_after(argv)
        assert "kvplan.engines" in mods, argv
        assert not {"pandas", "plotly", "streamlit"} & mods, argv


@pytest.mark.parametrize(("argv", "message"), [
    # a draft the target cannot use: TensorRT-LLM Draft_Target with another vocabulary
    (["fit", "--model", "llama-3.1-8b", "--gpu", "h200", "--tokens", "8", "--engine", "trtllm",
      "--speculative-config",
      '{"decoding_type":"Draft_Target","max_draft_len":3,"speculative_model":"Qwen/Qwen3-0.6B"}'],
     "speculative_config: decoding_type Draft_Target: the draft Qwen3-0.6B has a vocabulary of "
     "151,936 tokens, the target Llama-3.1-8B 128,256; the target verifies the draft's token ids, "
     "which must be the same vocabulary"),
    # a draft method the chosen release does not support as kvplan models it: SGLang before 0.5.23
    (["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8", "--engine", "sglang",
      "--engine-version", "0.5.5", "--speculative-algorithm", "NGRAM"],
     "--speculative-algorithm NGRAM: kvplan sizes SGLang's speculative decoding from SGLang 0.5.23's "
     "code (speculative/, mem_cache/, model_executor/); SGLang 0.5.5 budgets drafts by other rules "
     "(sgl-project/sglang PR#23862) and is not modelled (choose --engine-version 0.5.23)"),
    # ... and an algorithm 0.5.23 has not: the release's own list
    (["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8", "--engine", "sglang",
      "--speculative-algorithm", "MEDUSA"],
     "--speculative-algorithm 'MEDUSA': SGLang 0.5.23 has no such algorithm (\"Unknown speculative "
     "algorithm name\", speculative/spec_info.py from_string); kvplan sizes EAGLE, EAGLE3, NEXTN, "
     "STANDALONE, NGRAM"),
    # a LoRA rank outside the release's allowed set (vLLM 0.33 MaxLoRARanks)
    (["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "8", "--enable-lora",
      "--max-lora-rank", "24", "--engine-version", "0.33"],
     "--max-lora-rank 24 is not a rank vLLM v0.33 allows (vllm/config/lora.py MaxLoRARanks: 1, 8, "
     "16, 32, 64, 128, 256, 320, 512)"),
])
def test_unusable_drafts_methods_and_ranks_exact_text(argv: list[str], message: str) -> None:
    """Issue #26's bad input, exit 2 and the whole message: a draft the target cannot use, a draft
    method the chosen release does not support, a LoRA rank outside the release's set."""
    assert cli_error(argv) == f"kvplan: error: {message}\n"


# --------------------------------------------------------------------------- engine flag names

#: Qwen3-Next-80B-A3B on H100 × TP 4, vLLM 0.33: 10,673 pages of 272-token attention blocks either
#: way; a 4,096-token request holds 2 Mamba pages per layer with prefix caching ("align", 484
#: requests) and 1 without ("none", 561); 10,663 blocks (10,673 and 485 requests before vLLM's RoPE
#: cache joined the weights: 262,144 positions × 64 rotary dims × 2 B = 32 MiB per GPU) —
#: tests/test_engines.py test_qwen3_next_recurrent_* derive
#: the page; these tests check only that every spelling reaches the same setting.
NEXT = ["fit", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-sxm", "--tokens", "4096", "--tp", "4",
        "--engine-version", "0.33", "--json"]


def _fit(argv: list[str]) -> dict:
    code, out, err = run_cli(argv)
    assert code == 0 and err == "", (argv, err)
    return json.loads(out)


@pytest.mark.parametrize(("flags", "requests"), [
    ([], 484),                                                  # auto: on in v0.33
    (["--enable-prefix-caching"], 484),                         # vLLM's name
    (["--no-enable-prefix-caching"], 561),                      # vLLM's BooleanOptionalAction
    (["--prefix-caching", "on"], 484),                          # kvplan's deprecated spelling
    (["--prefix-caching", "off"], 561),
    (["--prefix-caching", "auto", "--no-enable-prefix-caching"], 561),  # auto = not given
    (["--prefix-caching", "off", "--no-enable-prefix-caching"], 561),   # agreeing: fine
])
def test_prefix_caching_flag_is_vllms_name(flags: list[str], requests: int) -> None:
    """vLLM 0.33 ``engine/arg_utils.py`` declares ``--enable-prefix-caching`` with
    ``BooleanOptionalAction`` (default None: the release decides), so ``--no-enable-prefix-caching``
    turns it off; ``--prefix-caching auto|on|off`` stays readable (deprecated)."""
    data = _fit(NEXT + flags)
    assert (data["max_requests"], data["num_blocks"]) == (requests, 10_663)


def test_prefix_caching_link_key_is_unchanged() -> None:
    """The link key ``pc`` is what it was: an old link ``pc=0`` still turns prefix caching off."""
    from kvplan.scenario import Scenario

    scenario, warnings = Scenario.from_query({"pc": "0"})
    assert warnings == [] and scenario.engine_settings.enable_prefix_caching is False
    assert Scenario.from_query({"pc": "1"})[0].engine_settings.enable_prefix_caching is True


@pytest.mark.parametrize(("flags", "blocks"), [
    ([], 157_169), (["--no-disable-hybrid-kv-cache-manager"], 157_169),
    (["--disable-hybrid-kv-cache-manager"], 78_584),
    (["--hybrid-manager", "off"], 78_584), (["--hybrid-manager", "on"], 157_169),
])
def test_hybrid_manager_flag_is_vllms_name(flags: list[str], blocks: int) -> None:
    """vLLM 0.33 ``--disable-hybrid-kv-cache-manager`` (``SchedulerConfig``, BooleanOptionalAction)
    names the negation: giving it turns the manager off. gpt-oss-20b on H100 (v0.33): 157,169 blocks
    with the manager (its sliding layers in their own group), 78,584 with every layer full
    (157,211 / 78,605 before vLLM's 16 MiB YaRN RoPE cache, 4,096 × 32 × 64 × 2 B, joined the
    weights)."""
    data = _fit(["fit", "--model", "gpt-oss-20b", "--gpu", "h100-sxm", "--tokens", "32768",
                 "--engine-version", "0.33", "--json", *flags])
    assert data["num_blocks"] == blocks


@pytest.mark.parametrize("spelling", [
    ["--gpu-util", "0.8"], ["--gpu-memory-utilization", "0.8"], ["--mem-fraction-static", "0.8"],
    ["--kv_cache_free_gpu_memory_fraction", "0.8"],
    ["--tensor-parallel-size", "4"], ["-tp", "4"], ["--tp-size", "4"], ["--tp_size", "4"],
    ["--kv-cache-dtype", "fp8"],
])
def test_engine_spellings_are_the_same_setting(spelling: list[str]) -> None:
    """Each engine's own flag name (vLLM ``--gpu-memory-utilization``/``--tensor-parallel-size``/
    ``-tp``/``--kv-cache-dtype``, SGLang ``--mem-fraction-static``/``--tp-size``, trtllm-serve
    ``--kv_cache_free_gpu_memory_fraction``/``--tp_size``) gives kvplan's own flag's answer."""
    own = {"--gpu-util": ["--gpu-util", "0.8"], "--kv-cache-dtype": ["--kv-dtype", "fp8"]}
    base = ["fit", "--model", "qwen3-8b", "--gpu", "h100-sxm", "--tokens", "4096", "--json"]
    reference = own.get(spelling[0], own["--gpu-util"] if "fraction" in spelling[0]
                        or "utilization" in spelling[0] else ["--tp", "4"])
    assert _fit(base + spelling) == _fit(base + reference)


def test_deprecated_flag_says_so_and_refuses_other_words() -> None:
    code, out, _ = run_cli(["fit", "--help"])
    assert code == 0
    text = "".join(out.split())  # argparse wraps the help (inside a flag, after its '-')
    assert ("--prefix-caching {auto,on,off} deprecated: use --enable-prefix-caching (on) or "
            "--no-enable-prefix-caching (off); not given = auto").replace(" ", "") in text
    assert ("--hybrid-manager {auto,on,off} deprecated: use --no-disable-hybrid-kv-cache-manager "
            "(on) or --disable-hybrid-kv-cache-manager (off); not given = auto").replace(" ", "") in text
    assert cli_error(FIT + ["--prefix-caching", "yes"]) == (
        "kvplan: error: argument --prefix-caching: --prefix-caching must be auto, on or off, "
        "got 'yes'\n")


@pytest.mark.parametrize(("value", "blocks"), [("0", 888), ('{"image": 0, "video": 0}', 888),
                                              ('{"image":2,"video":2}', 866), ("2", 866)])
def test_limit_mm_per_prompt_takes_vllms_json(value: str, blocks: int) -> None:
    """vLLM ``--limit-mm-per-prompt '{"image": N, "video": N}'`` is kvplan's N (one count for every
    modality). Qwen3.5-27B in FP8 on an H100 at 132,000 tokens, 0.90, v0.28: text only drops the
    167,772,160 B encoder-cache term and the vision tower's 921,460,192 B of weights (v0.28 marks it:
    ``_mark_tower_model`` from v0.15.0; 872 when only v0.33 was read to skip it) — 888 blocks
    instead of 866 (tests/test_vllm_mamba_real_runs.py; 890 / 869 before vLLM's MRoPE cache, 4 ×
    262,144 × 64 × 2 B = 134,217,728 B, joined the weights)."""
    data = _fit(["fit", "--model", "Qwen/Qwen3.5-27B", "--gpu", "h100-sxm", "--tokens", "132000",
                 "--gpu-util", "0.9", "--weight-dtype", "fp8", "--engine-version", "0.28",
                 "--limit-mm-per-prompt", value, "--json"])
    assert data["num_blocks"] == blocks


@pytest.mark.parametrize(("value", "why"), [
    ('{"image":1,"video":0}', "kvplan takes one count for every modality, not image 1, video 0"),
    ('{"image":0}', "kvplan takes the JSON form with a whole count for each of image and video (a "
                    "modality left out is 999 in vLLM)"),
])
def test_limit_mm_per_prompt_json_it_cannot_take_is_refused_by_name(value: str, why: str) -> None:
    """vLLM 0.33 ``config/multimodal.py`` ``get_limit_per_prompt``: a modality left out is 999, so
    ``{"image": 0}`` is not text only; different counts per modality are not one kvplan count."""
    assert cli_error(FIT + ["--limit-mm-per-prompt", value]) == (
        f"kvplan: error: argument --limit-mm-per-prompt: --limit-mm-per-prompt: {why} "
        f"(got {value!r})\n")
