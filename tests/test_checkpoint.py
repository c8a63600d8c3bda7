"""Exact weight bytes from safetensors headers (kvplan.checkpoint) and Hub ids (kvplan.hub).

The checkpoints are real safetensors files written with the ``safetensors`` package from numpy
arrays (numpy has no bf16/fp8: fp16 stands for bf16 and uint8 for fp8 — same bytes per element).
The Hub tests serve a Hub-like layout from a local HTTP server on 127.0.0.1 (``HF_ENDPOINT``);
no test touches the internet.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from safetensors.numpy import save_file

from kvplan.checkpoint import MAX_HEADER_BYTES, parse_header, read_checkpoint_dir, read_header_file
from kvplan.config_import import parse_config
from kvplan.errors import KVPlanError
from kvplan.weights import weights_per_gpu

H, INTER, V, D = 256, 512, 1000, 64
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
         "intermediate_size": INTER, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": V, "torch_dtype": "bfloat16",
         "tie_word_embeddings": False}
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": H,
           "intermediate_size": H, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": D, "vocab_size": V, "num_local_experts": 4,
           "num_experts_per_tok": 2, "sliding_window": 128, "attention_bias": True,
           "layer_types": ["sliding_attention", "full_attention"], "tie_word_embeddings": False,
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
               "lm_head"]}}
FP8_BLOCK = {**LLAMA, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                                              "activation_scheme": "dynamic"}}


def _z(*shape: int, dtype: type = np.float16) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def llama_tensors(fp8: bool = False) -> dict[str, np.ndarray]:
    """HF names and shapes of a 2-layer Llama; ``fp8``: linears uint8 + fp32 block scales."""
    out = {"model.embed_tokens.weight": _z(V, H), "lm_head.weight": _z(V, H),
           "model.norm.weight": _z(H)}
    for i in range(2):
        p = f"model.layers.{i}."
        mats = {"self_attn.q_proj": (4 * D, H), "self_attn.k_proj": (2 * D, H),
                "self_attn.v_proj": (2 * D, H), "self_attn.o_proj": (H, 4 * D),
                "mlp.gate_proj": (INTER, H), "mlp.up_proj": (INTER, H), "mlp.down_proj": (H, INTER)}
        for name, (rows, cols) in mats.items():
            if fp8:
                out[p + name + ".weight"] = _z(rows, cols, dtype=np.uint8)
                out[p + name + ".weight_scale_inv"] = _z(-(-rows // 128), -(-cols // 128),
                                                        dtype=np.float32)
            else:
                out[p + name + ".weight"] = _z(rows, cols)
        out[p + "input_layernorm.weight"] = _z(H)
        out[p + "post_attention_layernorm.weight"] = _z(H)
    return out


def gpt_oss_tensors() -> dict[str, np.ndarray]:
    """gpt-oss checkpoint layout: experts as MXFP4 ``_blocks`` (16 bytes = 32 values) and e8m0
    ``_scales``, bf16 biases, router, attention with biases and sinks."""
    out = {"model.embed_tokens.weight": _z(V, H), "lm_head.weight": _z(V, H),
           "model.norm.weight": _z(H)}
    for i in range(2):
        p = f"model.layers.{i}."
        for name, (rows, cols) in {"q_proj": (4 * D, H), "k_proj": (2 * D, H),
                                   "v_proj": (2 * D, H), "o_proj": (H, 4 * D)}.items():
            out[f"{p}self_attn.{name}.weight"] = _z(rows, cols)
            out[f"{p}self_attn.{name}.bias"] = _z(rows)
        out[p + "self_attn.sinks"] = _z(4)
        out[p + "mlp.router.weight"] = _z(4, H)
        out[p + "mlp.router.bias"] = _z(4)
        out[p + "mlp.experts.gate_up_proj_blocks"] = _z(4, 2 * H, H // 32, 16, dtype=np.uint8)
        out[p + "mlp.experts.gate_up_proj_scales"] = _z(4, 2 * H, H // 32, dtype=np.uint8)
        out[p + "mlp.experts.gate_up_proj_bias"] = _z(4, 2 * H)
        out[p + "mlp.experts.down_proj_blocks"] = _z(4, H, H // 32, 16, dtype=np.uint8)
        out[p + "mlp.experts.down_proj_scales"] = _z(4, H, H // 32, dtype=np.uint8)
        out[p + "mlp.experts.down_proj_bias"] = _z(4, H)
        out[p + "input_layernorm.weight"] = _z(H)
        out[p + "post_attention_layernorm.weight"] = _z(H)
    return out


def write_checkpoint(folder: Path, config: dict, tensors: dict[str, np.ndarray], shards: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    names = sorted(tensors)
    weight_map = {}
    for k in range(shards):
        part = {n: tensors[n] for n in names[k::shards]}
        file = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    if shards > 1:
        total = sum(t.nbytes for t in tensors.values())
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}))
    return folder


@pytest.mark.parametrize(("config", "tensors"), [
    (LLAMA, llama_tensors()), (FP8_BLOCK, llama_tensors(fp8=True)), (GPT_OSS, gpt_oss_tensors())],
    ids=["bf16", "fp8-block", "mxfp4"])
def test_header_bytes_equal_the_arrays_and_match_the_estimate(tmp_path, config, tensors):
    """The headers give each array's exact nbytes; the config-derived estimate per part equals
    them (bf16 Llama: every part exact; FP8 128×128 blocks and gpt-oss MXFP4 as well), so the
    0.5 % bound of the issue holds with room."""
    folder = write_checkpoint(tmp_path / "ckpt", config, tensors, shards=2)
    summary = read_checkpoint_dir(folder, n_layers=2)
    assert summary.total_bytes == sum(t.nbytes for t in tensors.values())
    assert summary.index_total == summary.total_bytes
    estimate = weights_per_gpu(parse_config(config, name="x")).total_by_part
    assert sum(estimate.values()) == pytest.approx(summary.total_bytes, rel=0.005)
    for part, size in summary.bytes_by_part.items():
        assert estimate.get(part, 0) == size, part


def test_llama_parts_from_names(tmp_path):
    """embeddings 1,000 × 256 × 2; attention 2 × (256 + 128 + 128 + 256) × 256 × 2; MLP 2 × 3 ×
    512 × 256 × 2; norms 5 × 256 × 2; lm_head as embeddings."""
    summary = read_checkpoint_dir(write_checkpoint(tmp_path / "c", LLAMA, llama_tensors()), 2)
    assert summary.bytes_by_part == {"embeddings": 512_000, "lm_head": 512_000, "norms": 2_560,
                                     "attention": 786_432, "mlp": 1_572_864}
    assert summary.dtypes == {"F16": 3_385_856}


def test_header_is_bounded_and_only_regular_files_are_read(tmp_path):
    big = tmp_path / "big.safetensors"
    big.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}")
    with pytest.raises(KVPlanError) as info:
        read_header_file(big)
    assert info.value.code == "checkpoint.header_too_large"
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    with pytest.raises(KVPlanError) as info:
        read_header_file(folder)
    assert info.value.code == "checkpoint.bad_file" and "regular" in str(info.value)
    short = tmp_path / "short.safetensors"
    short.write_bytes(struct.pack("<Q", 1_000) + b"{}")
    with pytest.raises(KVPlanError) as info:
        read_header_file(short)
    assert info.value.code == "checkpoint.bad_file"


@pytest.mark.parametrize("header", [
    b"[1]", b"{not json", json.dumps({"w": {"dtype": "Q9", "shape": [2]}}).encode(),
    json.dumps({"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 10]}}).encode(),
])
def test_bad_headers_are_named(header):
    with pytest.raises(KVPlanError) as info:
        parse_header(struct.pack("<Q", len(header)) + header, "x.safetensors")
    assert info.value.code == "checkpoint.bad_file"


def test_only_the_header_is_read(tmp_path, monkeypatch):
    """A 4 MiB tensor: the reader asks for 8 bytes, then exactly the header's length."""
    path = tmp_path / "m.safetensors"
    save_file({"w": _z(1024, 2048)}, str(path))
    sizes: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, n=-1):
            sizes.append(n)
            return self.handle.read(n)

    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Spy(real_open(p, mode, *a, **k)))
    (info,) = read_header_file(path)
    (header_len,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert sizes == [8, header_len] and info.nbytes == 1024 * 2048 * 2


def test_cli_checkpoint_json(tmp_path):
    folder = write_checkpoint(tmp_path / "tiny", GPT_OSS, gpt_oss_tensors())
    code, out, err = run_cli(["fit", "--checkpoint", str(folder), "--gpu", "h100-sxm", "--tokens",
                              "1024", "--json"])
    assert code == 0, err
    payload = json.loads(out)
    assert payload["checkpoint"]["total_bytes"] == sum(t.nbytes for t in gpt_oss_tensors().values())
    assert payload["checkpoint"]["estimate_total"] == payload["checkpoint"]["total_bytes"]
    assert payload["weight_format"].startswith("MXFP4")
    assert set(payload["weights_breakdown"]) >= {"embeddings", "attention", "experts", "router"}


def test_cli_checkpoint_reads_hf_quant_config_json(tmp_path):
    """A ModelOpt ≤ 0.29 export keeps its format in hf_quant_config.json and config.json has no
    quantization_config (nvidia/Llama-3.1-70B-Instruct-FP8): ``--checkpoint DIR`` reads it as vLLM's
    ``get_config`` does. FP8 per tensor: uint8 weights, a 0-d fp32 ``weight_scale`` and
    ``input_scale`` per linear, lm_head excluded (bf16); the estimate equals the headers' bytes."""
    tensors = llama_tensors()
    for name in [n for n in tensors if ".layers." in n and n.endswith("_proj.weight")]:
        tensors[name] = tensors[name].astype(np.uint8)
        stem = name.removesuffix(".weight")
        tensors[stem + ".weight_scale"] = np.zeros((), dtype=np.float32)
        tensors[stem + ".input_scale"] = np.zeros((), dtype=np.float32)
    folder = write_checkpoint(tmp_path / "fp8", LLAMA, tensors)
    (folder / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.23.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}))
    code, out, err = run_cli(["fit", "--checkpoint", str(folder), "--gpu", "h100-sxm", "--tokens",
                              "1024", "--json"])
    assert code == 0, err
    payload = json.loads(out)
    assert payload["checkpoint"]["total_bytes"] == sum(t.nbytes for t in tensors.values())
    assert payload["checkpoint"]["estimate_total"] == payload["checkpoint"]["total_bytes"]
    assert payload["weight_format"].startswith("FP8 (e4m3, ModelOpt per-tensor scales)")


def test_cli_checkpoint_without_safetensors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    code, _, err = run_cli(["fit", "--checkpoint", str(tmp_path), "--gpu", "h100-sxm", "--tokens", "8"])
    assert code == 2 and "no *.safetensors file" in err


# ------------------------------------------------------------------ Hub ids (local server)


class _Hub(BaseHTTPRequestHandler):
    root: Path
    token = "secret-token"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 (http.server API)
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            self.send_error(404)
            return
        repo, file = "/".join(parts[:2]), "/".join(parts[4:])
        if repo.endswith("/gated") and self.headers.get("authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.send_header("X-Error-Code", "GatedRepo")
            self.end_headers()
            return
        path = self.root / repo.replace("/", "__") / file
        if not path.is_file():
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()
            return
        data = path.read_bytes()
        rng = self.headers.get("range")
        if rng and rng.startswith("bytes="):
            start, _, end = rng[6:].partition("-")
            body = data[int(start): (int(end) + 1) if end else None]
            self.send_response(206)
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    write_checkpoint(tmp_path / "hub" / "org__tiny", GPT_OSS, gpt_oss_tensors(), shards=2)
    write_checkpoint(tmp_path / "hub" / "org__gated", LLAMA, llama_tensors())
    handler = type("Hub", (_Hub,), {"root": tmp_path / "hub"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server
    server.shutdown()
    server.server_close()


def test_hub_id_reads_config_and_sharded_headers(hub):
    code, out, err = run_cli(["fit", "--hf-id", "org/tiny", "--gpu", "h100-sxm", "--tokens", "512",
                              "--json"])
    assert code == 0, err
    payload = json.loads(out)
    assert payload["checkpoint"]["files"] == 2
    assert payload["checkpoint"]["total_bytes"] == sum(t.nbytes for t in gpt_oss_tensors().values())
    assert payload["checkpoint"]["index_total_size"] == payload["checkpoint"]["total_bytes"]
    assert payload["weight_format"].startswith("MXFP4")


def test_hub_gated_repo_needs_hf_token(hub, monkeypatch):
    code, _, err = run_cli(["fit", "--hf-id", "org/gated", "--gpu", "h100-sxm", "--tokens", "8"])
    assert code == 2 and "HF_TOKEN" in err and err.count("\n") == 1
    monkeypatch.setenv("HF_TOKEN", _Hub.token)
    code, out, err = run_cli(["fit", "--hf-id", "org/gated", "--gpu", "h100-sxm", "--tokens", "8",
                              "--json"])
    assert code == 0, err
    assert json.loads(out)["checkpoint"]["total_bytes"] == 3_385_856


def test_hub_offline_is_one_message(monkeypatch):
    """A port nothing listens on (bound then closed) stands for an offline machine."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    code, _, err = run_cli(["fit", "--hf-id", "org/tiny", "--gpu", "h100-sxm", "--tokens", "8"])
    assert code == 2 and "could not be reached" in err and err.count("\n") == 1


def test_hub_bad_id():
    code, _, err = run_cli(["fit", "--hf-id", "../etc", "--gpu", "h100-sxm", "--tokens", "8"])
    assert code == 2 and "not a Hub model id" in err



def test_any_header_bytes_parse_or_give_a_named_error():
    """Random bytes, random JSON headers with odd dtypes/shapes/offsets: parse_header returns
    tensors with non-negative sizes or raises a checkpoint.* KVPlanError — nothing else."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    entry = st.fixed_dictionaries({}, optional={
        "dtype": st.sampled_from(["F16", "BF16", "U8", "F8_E4M3", "F4", "X", 3, None]),
        "shape": st.one_of(st.lists(st.integers(-2, 1 << 40), max_size=4), st.text(max_size=3)),
        "data_offsets": st.one_of(st.lists(st.integers(-5, 1 << 20), max_size=3), st.none())})
    header = st.dictionaries(st.text(max_size=20), st.one_of(entry, st.integers(), st.none()),
                             max_size=5)
    raw = st.one_of(st.binary(max_size=64),
                    header.map(lambda h: (lambda b: struct.pack("<Q", len(b)) + b)(
                        json.dumps(h).encode())))

    @settings(max_examples=10_000 if os.environ.get("KVPLAN_PROFILE", "").lower() == "long" else 300,
              deadline=None)
    @given(raw)
    def check(data):
        try:
            tensors = parse_header(data, "fuzz.safetensors")
        except KVPlanError as err:
            assert err.code.startswith("checkpoint.")
            return
        assert all(t.nbytes >= 0 for t in tensors)

    check()
