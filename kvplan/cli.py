"""Command line: ``kvplan {kv,fit,models,gpus,report,calibrate} ...`` (``pip install .`` gives the
``kvplan`` command; ``python -m kvplan`` is the same).

Bad input exits with code 2 and one line on stderr; ``--json`` prints exactly one JSON object;
``fit --check`` exits 1 when the request does not fit.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from kvplan.errors import MESSAGES, KVPlanError, clip, short

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvplan.arch import ModelArch
    from kvplan.engines import EngineSettings, Setting
    from kvplan.plan import FitQuery, Plan

GIB = 1 << 30
#: ``--tp`` and the engines' own spellings: vLLM ``--tensor-parallel-size``/``-tp``
#: (``engine/arg_utils.py``), SGLang ``--tp-size`` (``server_args``), TensorRT-LLM trtllm-serve
#: ``--tp_size``; ``--pp`` likewise.
TP_FLAGS = ("--tp", "--tensor-parallel-size", "-tp", "--tp-size", "--tp_size")
PP_FLAGS = ("--pp", "--pipeline-parallel-size", "-pp", "--pp-size", "--pp_size")


class _Parser(argparse.ArgumentParser):
    """One-line errors; ``populate``, when set, declares the arguments on the first parse or help,
    so ``kvplan --help`` and the other commands never import what only one command needs
    (``recommend`` → pandas)."""

    populate: Callable[[argparse.ArgumentParser], None] | None = None

    def declare(self) -> None:
        """Declare the arguments now (what a parse or help does first)."""
        if self.populate is not None:
            populate, self.populate = self.populate, None
            populate(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.declare()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self.declare()
        return super().format_help()

    def error(self, message: str) -> NoReturn:  # one line, exit 2
        sys.stderr.write(f"kvplan: error: {clip(message, 500)}\n")
        raise SystemExit(2)


def _number(name: str, kind: Callable[[str], Any], low: float = -math.inf,
            high: float = math.inf) -> Callable[[str], Any]:
    """argparse type: a number in [low, high], with the message from ``MESSAGES``; NaN is out of
    every range. Without bounds (the video flags: ``VideoRequest.parse`` is the one home of their
    range, shared with the dashboard) a non-finite number (``1e999``, ``inf``, ``nan``) is refused
    as typed, not as float's ``inf``."""
    bounded = math.isfinite(low) or math.isfinite(high)

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                MESSAGES["value.not_number"].format(field=name, value=short(text))) from None
        if not bounded and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be a finite number, got {short(text)}")
        if not low <= value <= high or value != value:
            raise argparse.ArgumentTypeError(
                MESSAGES["value.range"].format(field=name, low=low, high=high, value=short(text)))
        return value
    return convert


def _positive(name: str, high: int) -> Callable[[str], Any]:
    return _number(name, int, 1, high)


def _kv_transfer_config(text: str) -> tuple[str, str]:
    """``disagg --kv-transfer-config``: vLLM's JSON, read by the vLLM package's own parser."""
    from kvplan.engines.vllm.transfer import parse_kv_transfer_config

    try:
        return parse_kv_transfer_config(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (got {short(text)})") from None


def _setting_type(setting: Setting) -> Callable[[str], Any]:
    """argparse type of a declared engine setting: its own parser and bounds."""
    def convert(text: str) -> Any:
        try:
            return setting.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{setting.flag}: {exc} (got {short(text)})") from None
    return convert


def _add_settings(p: argparse.ArgumentParser) -> None:
    """One flag per declared engine setting (``kvplan.engines.settings``)."""
    from kvplan.engines import SETTINGS

    for name, setting in SETTINGS.items():
        flags = (setting.flag, *setting.aliases)
        if setting.kind == "bool":
            p.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=None,
                           help=setting.help)
        elif setting.kind == "tristate":
            p.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=None,
                           help=setting.help)
            if setting.deprecated_flag:
                p.add_argument(setting.deprecated_flag, dest=f"{name}{_DEPRECATED}",
                               type=_tristate(setting.deprecated_flag), default=None,
                               metavar="{auto,on,off}",
                               help=f"deprecated: use {_spelling(setting, True)} (on) or "
                                    f"{_spelling(setting, False)} (off); not given = auto")
        else:
            p.add_argument(*flags, dest=name, type=_setting_type(setting), default=None,
                           help=setting.help)


def settings_from_args(args: argparse.Namespace, tp: int = 1, pp: int = 1) -> EngineSettings:
    """The ``EngineSettings`` the declared flags gave (unset flags keep the engine default)."""
    from kvplan.engines import SETTINGS, EngineSettings

    values: dict[str, Any] = {}
    for name, setting in SETTINGS.items():
        value = getattr(args, name, None)
        if setting.kind == "tristate":
            value = None if value is None else value is not setting.inverted
            old = getattr(args, f"{name}{_DEPRECATED}", None)
            if old is not None and old[1] is not None and value is not None and old[1] != value:
                raise KVPlanError("value.deprecated_conflict", old=f"{setting.deprecated_flag} {old[0]}",
                                  flag=_spelling(setting, value))
            value = old[1] if value is None and old is not None else value  # auto: None
        if value is not None:
            values[name] = value
    return EngineSettings(tp=tp, pp=pp, **values)


#: The namespace suffix of a tristate setting's deprecated ``FLAG auto|on|off`` spelling.
_DEPRECATED = "__deprecated"


def _spelling(setting: Setting, value: bool) -> str:
    """The engine's flag that sets a ``tristate``/``bool`` setting to ``value``: ``--flag`` or its
    ``--no-`` form (swapped when the flag names the negation, ``Setting.inverted``)."""
    given = value is not setting.inverted
    return setting.flag if given else f"--no-{setting.flag[2:]}"


def _tristate(flag: str) -> Callable[[str], tuple[str, bool | None]]:
    """argparse type of a deprecated ``FLAG auto|on|off``: the word given and its value."""
    def convert(text: str) -> tuple[str, bool | None]:
        word = text.strip().lower()
        if word not in _TRISTATE_WORDS:
            raise argparse.ArgumentTypeError(f"{flag} must be auto, on or off, got {short(text)}")
        return word, _TRISTATE_WORDS[word]
    return convert


_TRISTATE_WORDS: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _nonneg_float(text: str) -> float:
    return _number("--reserve-gib", float, 0, 1_000_000)(text)


def _reserve_term(text: str) -> tuple[str, float]:
    """``NAME=GiB``: one runtime-reserve term replaced (``fit --json`` lists the engine's terms)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(MESSAGES["value.not_number"].format(
            field="--reserve-term NAME=GiB", value=short(text)))
    return name.strip(), _number(f"--reserve-term {short(name.strip())}", float, 0, 1_000_000)(value)


def _reserve_terms(args: argparse.Namespace) -> dict[str, float] | None:
    return dict(args.reserve_term) if getattr(args, "reserve_term", None) else None


def _http_url(text: str) -> str:
    """``--base-url``: an http(s) address with a host."""
    from urllib.parse import urlsplit

    parts = urlsplit(text.strip())
    if parts.scheme not in {"http", "https"} or not parts.netloc or len(text) > 2048:
        raise argparse.ArgumentTypeError(f"--base-url must be an http(s) address with a host, "
                                         f"got {short(text)}")
    return text.strip()


def _nonneg_int(text: str) -> int:
    return _number("--kv-cache-memory-bytes", int, 0, 10**16)(text)


def plural(count: int, noun: str) -> str:
    """``1 user``, ``8 users`` (the count with thousands separators)."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _model_args(p: argparse.ArgumentParser) -> None:
    """The model, length, KV dtype, engine, release and engine-setting arguments."""
    from kvplan.engines import (
        DEFAULT_ENGINE,
        ENGINES,
        engine_with_release,
        has_release_choice,
        release_choices,
    )
    from kvplan.plan import resolve_engine
    from kvplan.scenario import MAX_CONTEXT_TOKENS

    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--model", help="a preset by Hub repo id (Qwen/Qwen3-8B, case-insensitive) or "
                                   "short id (see `models`); resolved offline")
    group.add_argument("--config", help="path to a Hugging Face config.json")
    group.add_argument("--checkpoint", metavar="DIR",
                       help="a local checkpoint folder: its config.json and the exact weight "
                            "bytes of its *.safetensors headers (tensor data is not read)")
    group.add_argument("--hf-id", metavar="ORG/NAME",
                       help="a Hugging Face Hub id: config.json and safetensors headers over "
                            "HTTP range requests (needs huggingface_hub; HF_TOKEN, HF_ENDPOINT)")
    p.add_argument("--tokens", type=_positive("--tokens", MAX_CONTEXT_TOKENS), required=True,
                   help="tokens per sequence (vLLM: max_model_len)")
    p.add_argument("--kv-dtype", "--kv-cache-dtype", dest="kv_dtype", default="auto",
                   help="KV element format; auto = the model's dtype (vLLM's and SGLang's "
                        "--kv-cache-dtype auto)")
    p.add_argument("--engine", default=DEFAULT_ENGINE, choices=list(ENGINES),
                   help=f"serving engine whose storage rules apply (default: {DEFAULT_ENGINE}, "
                        f"{ENGINES[DEFAULT_ENGINE]})")
    p.add_argument("--engine-version", default=None, metavar="RELEASE",
                   help="engine release to model (default: the newest); "
                        + "; ".join(f"{e}: " + ", ".join(
                            f"{r} ({resolve_engine(engine_with_release(e, r)).release})"
                            for r in release_choices(e))
                            for e in ENGINES if has_release_choice(e)))
    _add_settings(p)
    p.add_argument("--json", action="store_true")


def _kv_args(kv: argparse.ArgumentParser) -> None:
    """``kv``'s arguments (declared on its first parse or help)."""
    _model_args(kv)
    kv.add_argument("--batch", type=_positive("--batch", 10_000_000), default=1)
    kv.add_argument(*TP_FLAGS, dest="tp", type=_positive("--tp", 4096), default=1,
                    help="tensor-parallel size: bytes are per rank")


def _fit_args(fit: argparse.ArgumentParser) -> None:
    """``fit``'s arguments (declared on its first parse or help)."""
    _model_args(fit)
    fit.add_argument("--gpu", required=True,
                     help="accelerator id (see `gpus`), or custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]]")
    fit.add_argument("--num-gpus", type=_positive("--num-gpus", 4096))
    fit.add_argument(*TP_FLAGS, dest="tp", type=_positive("--tp", 4096), default=1)
    fit.add_argument(*PP_FLAGS, dest="pp", type=_positive("--pp", 4096), default=1)
    fit.add_argument("--users", type=_positive("--users", 10_000_000), default=1)
    fit.add_argument("--weight-dtype",
                     help="override the checkpoint's own format (default: what config.json's "
                          "quantization_config says each part is stored in)")
    fit.add_argument("--reserve-gib", type=_nonneg_float,
                     help="the runtime reserve's total (default: the engine release's terms)")
    fit.add_argument("--reserve-term", type=_reserve_term, action="append", metavar="NAME=GiB",
                     help="replace one runtime-reserve term (e.g. activation_peak=2.5); repeatable")
    fit.add_argument("--kv-cache-memory-bytes", type=_nonneg_int)
    fit.add_argument("--verbose", action="store_true",
                     help="print where each number comes from (the device total's measurements, "
                          "each reserve term's engine source); --json always has them")
    fit.add_argument("--check", action="store_true",
                     help="exit with code 1 when the request does not fit (for scripts)")
    _image_args(fit, "--tokens")


def _image_args(p: argparse.ArgumentParser, text: str) -> None:
    """``--images N --image-size WxH`` (``fit``, ``recommend``): the images each request brings."""
    from kvplan.multimodal import MAX_IMAGES

    p.add_argument("--images", type=_number("--images", int, 0, MAX_IMAGES), default=0, metavar="N",
                   help="images per request: each adds its tokens (the checkpoint's processor, "
                        f"presets/processors/) to {text}, which then counts the text alone")
    p.add_argument("--image-size", default="", metavar="WxH",
                   help="pixels of each image, e.g. 1280x720 (needed with --images)")
    p.add_argument("--videos", type=_number("--videos", int, 0, MAX_IMAGES), default=0, metavar="N",
                   help="videos per request (Qwen2-VL / Qwen2.5-VL processors): each adds its tokens "
                        "to the request, frames = --video-seconds × --video-fps, all of them as vLLM "
                        "0.33's default loader keeps them")
    p.add_argument("--video-size", default="", metavar="WxH",
                   help="pixels of each video frame, e.g. 1280x720")
    p.add_argument("--video-seconds", type=_number("--video-seconds", float), default=None, metavar="S",
                   help="duration of each video in seconds")
    p.add_argument("--video-fps", type=_number("--video-fps", float), default=None, metavar="F",
                   help="frame rate of each video file (frames per second)")


def _calibrate_args(cal: argparse.ArgumentParser) -> None:
    """``calibrate``'s arguments (declared on its first parse or help)."""
    _model_args(cal)
    cal.add_argument("--gpu", required=True, help="accelerator id (see `gpus`) or custom:<GiB>")
    cal.add_argument(*TP_FLAGS, dest="tp", type=_positive("--tp", 4096), default=1)
    cal.add_argument(*PP_FLAGS, dest="pp", type=_positive("--pp", 4096), default=1)
    cal.add_argument("--weight-dtype", help="override the checkpoint's own format")
    cal.add_argument("--reserve-gib", type=_nonneg_float,
                     help="reserve of kvplan's own prediction (default: the engine release's terms)")
    cal.add_argument("--reserve-term", type=_reserve_term, action="append", metavar="NAME=GiB",
                     help="replace one runtime-reserve term of kvplan's prediction; repeatable")
    cal.add_argument("--log", required=True, help="the vLLM log file (max 1 MiB)")


def _throughput_args(run: argparse.ArgumentParser) -> None:
    """``throughput``'s arguments (declared on its first parse or help)."""
    group = run.add_mutually_exclusive_group(required=True)
    group.add_argument("--model", help="preset id (see `models`)")
    group.add_argument("--config", help="path to a Hugging Face config.json")
    run.add_argument("--gpu", required=True,
                     help="accelerator id (see `gpus`) or custom:<GiB>[:<TB/s>[:<TFLOPS>]]")
    run.add_argument("--gpus", type=_positive("--gpus", 1_000_000), default=None,
                     help="GPUs of the whole run (default TP × PP: one replica)")
    run.add_argument(*TP_FLAGS, dest="tp", type=_positive("--tp", 4096), default=1)
    run.add_argument(*PP_FLAGS, dest="pp", type=_positive("--pp", 4096), default=1)
    run.add_argument("--weight-dtype", default="auto", help="weight format (auto = the model's dtype; "
                                                            "fp8, nvfp4, mxfp4, int8, int4_g128, bf16)")
    run.add_argument("--kv-dtype", default="bf16", help="KV format (bf16, fp8_e4m3, …)")
    run.add_argument("--isl", type=_positive("--isl", 100_000_000), required=True,
                     help="input tokens per request")
    run.add_argument("--osl", type=_positive("--osl", 100_000_000), required=True,
                     help="output tokens per request")
    run.add_argument("--measured-tokens-per-s",
                     type=_number("--measured-tokens-per-s", float, 1e-9, 1e12),
                     help="output tokens/s a real run of this shape reached: calibrate the efficiencies "
                          "so the estimate returns it exactly")
    run.add_argument("--measured-ttft-ms", type=_number("--measured-ttft-ms", float, 1e-9, 1e9),
                     help="measured TTFT of this run's prompt (ms): calibrates the prefill efficiency")
    run.add_argument("--measured-tpot-ms", type=_number("--measured-tpot-ms", float, 1e-9, 1e9),
                     help="measured TPOT (ms) at --concurrency requests decoding together: calibrates "
                          "the decode efficiency")
    run.add_argument("--concurrency", type=_positive("--concurrency", 1_000_000), default=1,
                     help="requests decoding together per replica for --measured-tpot-ms (default 1)")
    run.add_argument("--rate", type=_number("--rate", float, 1e-6, 1e7), default=None,
                     help="requests/s arriving at the whole run: estimate TTFT and TPOT p50/p99 there "
                          "(a seeded simulation of continuous batching with chunked prefill)")
    run.add_argument("--chunk", type=_positive("--chunk", 10_000_000), default=8192,
                     help="prompt + decode tokens one step may process (max_num_batched_tokens; "
                          "default 8192) for --rate")
    run.add_argument("--json", action="store_true")


def _share_args(shared: argparse.ArgumentParser) -> None:
    """``share``'s arguments (declared on its first parse or help)."""
    shared.add_argument("--gpu", required=True, help="accelerator id (see `gpus`) the instances share")
    shared.add_argument("--instance", action="append", required=True, metavar="KEY=VALUE,…",
                        help="one instance, in start order (repeat): name, model, engine (vllm@0.33, "
                             "sglang, trtllm), tokens, users, kd (KV dtype) and any engine setting by "
                             "its link key (gu = the memory fraction), e.g. "
                             "name=chat,model=llama-3.1-8b,engine=vllm@0.33,gu=0.45,tokens=8192,users=8")
    shared.add_argument(*TP_FLAGS, dest="tp", type=_positive("--tp", 4096), default=1)
    shared.add_argument(*PP_FLAGS, dest="pp", type=_positive("--pp", 4096), default=1)
    shared.add_argument("--num-gpus", type=_positive("--num-gpus", 4096))
    shared.add_argument("--json", action="store_true")


def _offload_args(off: argparse.ArgumentParser) -> None:
    """``offload``'s arguments (declared on its first parse or help)."""
    _model_args(off)
    off.add_argument("--gpu", required=True, help="accelerator id (see `gpus`)")
    off.add_argument(*TP_FLAGS, dest="tp", type=_positive("--tp", 4096), default=1)
    off.add_argument(*PP_FLAGS, dest="pp", type=_positive("--pp", 4096), default=1)
    off.add_argument("--backend", choices=["native", "lmcache", "hicache"], default="native",
                     help="native: vLLM --kv-offloading-backend native (OffloadingConnector); lmcache: "
                          "the in-process LMCacheConnectorV1; hicache: SGLang --enable-hierarchical-cache")
    off.add_argument("--kv-offloading-size", "--max-local-cpu-size", "--hicache-size", dest="size_gib",
                     type=_number("--kv-offloading-size", float, 0, 1_000_000),
                     help="vLLM --kv-offloading-size GiB (total over the ranks); LMCache "
                          "max_local_cpu_size GiB per rank (default 5); SGLang --hicache-size GB per rank")
    off.add_argument("--chunk-tokens", type=_positive("--chunk-tokens", 10_000_000),
                     help="tokens per offloaded chunk: the native connector's block_size (a multiple "
                          "of the GPU block) or LMCache's chunk_size (default 256)")
    off.add_argument("--hicache-ratio", type=_number("--hicache-ratio", float, 0.001, 1000))
    off.add_argument("--max-local-disk-size", dest="disk_gib",
                     type=_number("--max-local-disk-size", float, 0, 100_000_000), default=0.0,
                     help="LMCache disk tier, GiB per rank")
    off.add_argument("--host-ram-gib", type=_number("--host-ram-gib", float, 0.001, 1_000_000),
                     help="the node's RAM (checked against what the tiers pin)")
    off.add_argument("--gpus-per-node", type=_positive("--gpus-per-node", 4096), default=8)
    off.add_argument("--link-gbps", type=_number("--link-gbps", float, 0.001, 100_000),
                     help="GPU↔host GB/s per direction (default: the accelerator's host link)")
    off.add_argument("--sessions", type=_positive("--sessions", 1_000_000_000),
                     help="distinct conversations competing for the tier (share resident)")


def _disagg_args(dis: argparse.ArgumentParser) -> None:
    """``disagg``'s arguments (declared on its first parse or help)."""
    from kvplan.scenario import MAX_CONTEXT_TOKENS

    _model_args(dis)
    dis.add_argument("--output-tokens", type=_positive("--output-tokens", MAX_CONTEXT_TOKENS), default=1)
    dis.add_argument("--prefill-gpu", required=True)
    dis.add_argument("--prefill-tp", type=_positive("--prefill-tp", 4096), default=1)
    dis.add_argument("--decode-gpu", required=True)
    dis.add_argument("--decode-tp", type=_positive("--decode-tp", 4096), default=1)
    dis.add_argument("--prefill-instances", type=_positive("--prefill-instances", 4096), default=1)
    dis.add_argument("--decode-instances", type=_positive("--decode-instances", 4096), default=1)
    dis.add_argument("--kv-transfer-config", type=_kv_transfer_config, metavar="JSON",
                     help='vLLM\'s --kv-transfer-config, e.g. \'{"kv_connector": "NixlConnector", '
                          '"kv_role": "kv_both", "kv_buffer_device": "cuda"}\' (NixlConnector, '
                          'MooncakeConnector)')
    dis.add_argument("--kv-connector", choices=["nixl", "mooncake"],
                     help="shorthand for kv_connector (default nixl)")
    dis.add_argument("--kv-buffer-device", choices=["cuda", "cpu"],
                     help="shorthand for kv_buffer_device (default cuda)")
    dis.add_argument("--link-gbps", type=_number("--link-gbps", float, 0.001, 100_000),
                     help="prefill↔decode GB/s per rank per direction (default: the decode "
                          "accelerator's scale-up link; across nodes give the NIC's rate)")
    dis.add_argument("--rps", type=_number("--rps", float, 0.001, 10_000_000), action="append",
                     help="a traffic rate (requests/s) for the prefill:decode instances it needs "
                          "(time lower bounds); repeatable")


def _report_args(report: argparse.ArgumentParser) -> None:
    """``report``'s arguments (declared on its first parse or help)."""
    report.add_argument("--scenario", required=True, help="scenario JSON file, preset name or link")
    report.add_argument("--out", required=True)
    report.add_argument("--no-png", action="store_true")
    report.add_argument("--base-url", metavar="URL", type=_http_url,
                        help="the dashboard's address the links in the files start with (default: "
                             "$KVPLAN_BASE_URL, else http://localhost:8501/)")


def build_parser() -> argparse.ArgumentParser:
    """The commands; each command's arguments are declared on its first parse or help
    (``_Parser.populate``), so ``kvplan --help`` imports no engine, numpy or pydantic."""
    parser = _Parser(prog="kvplan", description="KV-cache memory planner. Every command uses the "
                     "default engine unless --engine says otherwise; `kvplan COMMAND --help` names "
                     "it and the engines.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    kv = sub.add_parser("kv", help="KV-cache bytes for one sequence length and batch")
    kv.populate = _kv_args
    fit = sub.add_parser("fit", help="how many requests fit on an accelerator")
    fit.populate = _fit_args
    cal = sub.add_parser("calibrate", help="compare kvplan with a real vLLM run's start-up log")
    cal.populate = _calibrate_args
    recommend = sub.add_parser("recommend", help="cheapest deployments that hold the traffic and "
                                                 "meet TTFT/TPOT targets (bounds)")
    recommend.populate = _recommend_args
    run = sub.add_parser("throughput", help="a run's output tokens/s: the upper bound no run can beat "
                                            "and the estimate (bound × efficiencies), optionally "
                                            "calibrated on a measured run")
    run.populate = _throughput_args
    shared = sub.add_parser("share", help="several engines on one GPU, started in order: what each "
                                          "holds, its KV pool, whether it starts")
    shared.populate = _share_args
    off = sub.add_parser("offload", help="KV offload tiers: sessions resident per tier, host memory, "
                         "restore time (vLLM native / LMCache, SGLang HiCache)")
    off.populate = _offload_args
    dis = sub.add_parser("disagg", help="disaggregated prefill/decode: the decode pool's in-flight "
                         "bound, KV moved per request, transfer time, staging buffers (vLLM)")
    dis.populate = _disagg_args
    sub.add_parser("models", help="list model presets").add_argument("--json", action="store_true")
    sub.add_parser("gpus", help="list accelerators").add_argument("--json", action="store_true")
    report = sub.add_parser("report", help="write CSV/PNG/JSON reports for a scenario")
    report.populate = _report_args
    return parser


def _csv_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _int_list(name: str) -> Callable[[str], tuple[int, ...]]:
    def convert(text: str) -> tuple[int, ...]:
        return tuple(_positive(name, 4096)(item) for item in _csv_list(text))
    return convert


def _pairs(name: str) -> Callable[[str], tuple[str, float]]:
    """``gpu=value`` → (gpu, float)."""
    def convert(text: str) -> tuple[str, float]:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(MESSAGES["value.not_number"].format(
                field=name, value=short(text)))
        return key.strip(), _number(name, float, 1e-9, 1e6)(value)
    return convert


RUN_KEYS = {"gpu": str, "tp": int, "pp": int, "gpus": int, "weight": str, "kv": str, "isl": int, "osl": int,
            "tokens_per_s": float}


def _run_spec(text: str) -> dict[str, Any]:
    """``--measured-run`` ``key=value,…`` → a dict of RUN_KEYS (gpu, isl, osl, tokens_per_s needed)."""
    out: dict[str, Any] = {"tp": 1, "pp": 1, "weight": "auto", "kv": "bf16"}
    for item in _csv_list(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in RUN_KEYS:
            raise argparse.ArgumentTypeError(f"{short(item)} is not one of "
                                             + ", ".join(f"{k}=…" for k in RUN_KEYS))
        kind = RUN_KEYS[key]
        if kind is str:
            out[key] = value.strip()
        else:
            out[key] = _number(f"--measured-run {key}", kind, 1e-9 if kind is float else 1, 1e12)(value)
    missing = [k for k in ("gpu", "isl", "osl", "tokens_per_s") if k not in out]
    if missing:
        raise argparse.ArgumentTypeError(f"a measured run needs {', '.join(missing)}")
    return out


def _recommend_args(p: argparse.ArgumentParser) -> None:
    from kvplan.engines import ENGINES
    from kvplan.recommend import MAX_GPUS_PER_REPLICA, TARGET_PRESETS

    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--model", help="a preset by Hub repo id (Qwen/Qwen3-8B, case-insensitive) or "
                                       "short id (see `models`); resolved offline")
    group.add_argument("--config", help="path to a Hugging Face config.json")
    p.add_argument("--engine", default=None, choices=list(ENGINES))
    p.add_argument("--engine-version", default=None, metavar="RELEASE",
                   help="engine release to model (default: the newest; see `fit --help`)")
    _add_settings(p)
    p.add_argument("--reserve-gib", type=_nonneg_float)
    traffic = p.add_mutually_exclusive_group()
    traffic.add_argument("--users", type=_number("--users", int, 0, 10_000_000),
                         help="concurrent users (default 64)")
    traffic.add_argument("--rps", type=_number("--rps", float, 0, 1e7), help="requests per second")
    for part, default in (("prompt", 1024), ("output", 256)):
        p.add_argument(f"--{part}-tokens", type=_positive(f"--{part}-tokens", 100_000_000),
                       default=default, help=f"fixed {part} length (default {default})")
        p.add_argument(f"--{part}-mean", type=_number(f"--{part}-mean", float, 1, 1e7),
                       help=f"log-normal {part} lengths with this mean (with --{part}-sigma)")
        p.add_argument(f"--{part}-sigma", type=_number(f"--{part}-sigma", float, 0, 5), default=1.0)
    p.add_argument("--lengths-csv", help="CSV of prompt,output token counts (one request per row)")
    _image_args(p, "every prompt (--prompt-tokens, --prompt-mean or the CSV's prompt column)")
    p.add_argument("--preset", help="TTFT/TPOT targets: " + ", ".join(TARGET_PRESETS)
                                    + " (default: MLPerf Llama-2-70B interactive, p99)")
    p.add_argument("--ttft-ms", type=_number("--ttft-ms", float, -1e9, 1e9))
    p.add_argument("--tpot-ms", type=_number("--tpot-ms", float, -1e9, 1e9))
    p.add_argument("--percentile", choices=["p50", "p99"])
    p.add_argument("--max-context", type=_number("--max-context", int, 2, 100_000_000))
    p.add_argument("--gpus", type=_csv_list, help="comma-separated accelerator ids (default: all)")
    p.add_argument("--max-gpus", type=_positive("--max-gpus", MAX_GPUS_PER_REPLICA), default=8,
                   help="GPUs per replica (TP × PP, or EP)")
    p.add_argument("--max-total-gpus", type=_positive("--max-total-gpus", 1_000_000), default=4096)
    p.add_argument("--tp", type=_int_list("--tp"), help="TP sizes (default: powers of two)")
    p.add_argument("--pp", type=_int_list("--pp"), default=(1, 2, 4))
    p.add_argument("--no-ep", action="store_true", help="no expert-parallel candidates for MoE models")
    p.add_argument("--disagg", action="store_true",
                   help="also propose disaggregated prefill/decode (xPyD, vLLM NIXL) candidates: the "
                        "cheapest feasible layouts split into x prefill + y decode instances (column "
                        "'mode': aggregated or xPyD)")
    p.add_argument("--pd-layouts", type=_positive("--pd-layouts", 64), default=4,
                   help="with --disagg: how many of the cheapest layouts are split (default 4)")
    p.add_argument("--kv-dtypes", type=_csv_list, default=("bf16", "fp8_e4m3"))
    p.add_argument("--weight-dtypes", type=_csv_list, default=None,
                   help="weight formats (default: auto, plus fp8, nvfp4 and mxfp4 where the "
                        "accelerator has their tensor cores and the checkpoint is unquantized)")
    p.add_argument("--price", type=_pairs("--price"), action="append", default=[],
                   help="gpu=price per GPU-hour (repeatable; overrides the price table)")
    p.add_argument("--price-kind", choices=["on-demand", "reserved", "spot", "any"], default="on-demand",
                   help="which quotes of the price table cost an accelerator: the lowest of this kind "
                        "(default on-demand)")
    p.add_argument("--prices-csv", help="a price table replacing presets/prices.json: CSV with columns "
                                        "gpu, provider, kind, usd_per_gpu_hour, as_of, source[, note]")
    p.add_argument("--efficiency", type=_pairs("--efficiency"), action="append", default=[],
                   help="gpu=efficiency factor in (0, 1] (repeatable)")
    p.add_argument("--default-efficiency", type=_number("--default-efficiency", float, 1e-6, 1), default=1.0)
    p.add_argument("--measured-gpu", help="calibrate this accelerator's efficiency factor from one run")
    p.add_argument("--measured-tp", type=_positive("--measured-tp", 4096), default=1)
    p.add_argument("--measured-tokens-per-s", type=_number("--measured-tokens-per-s", float, 0, 1e12),
                   help="decode tokens/s of the run (with --measured-batch, --measured-context)")
    p.add_argument("--measured-ttft-ms", type=_number("--measured-ttft-ms", float, 0, 1e9),
                   help="TTFT of the run (with --measured-prompt)")
    p.add_argument("--measured-batch", type=_positive("--measured-batch", 10_000_000), default=1)
    p.add_argument("--measured-prompt", type=_positive("--measured-prompt", 100_000_000), default=1024)
    p.add_argument("--measured-context", type=_positive("--measured-context", 100_000_000), default=2048)
    p.add_argument("--measured-run", type=_run_spec, action="append", default=[], metavar="KEY=VALUE,…",
                   help="calibrate the tokens/s estimate of one accelerator on a measured run, e.g. "
                        "gpu=h100-sxm,tp=2,pp=1,gpus=2,weight=fp8,kv=fp8_e4m3,isl=128,osl=128,"
                        "tokens_per_s=6378 (output tokens/s of the whole run); repeatable")
    p.add_argument("--top", type=_positive("--top", 10_000), default=20)
    p.add_argument("--json", action="store_true")


def _load_arch(args: argparse.Namespace) -> ModelArch:
    from kvplan.config_import import MAX_CONFIG_BYTES, parse_config
    from kvplan.files import read_limited
    from kvplan.presets import load_model

    if args.model is not None:
        return load_model(args.model)
    if getattr(args, "checkpoint", None) is not None:
        from kvplan.checkpoint import read_checkpoint_dir
        from kvplan.config_import import load_config_text, with_hf_quant_config

        folder = Path(args.checkpoint)
        config_path = folder / "config.json"
        config = load_config_text(read_limited(config_path, MAX_CONFIG_BYTES, "config.too_large"))
        quant_path = folder / "hf_quant_config.json"  # ModelOpt ≤ 0.29 keeps the format there
        if isinstance(config, dict) and config.get("quantization_config") is None \
                and quant_path.is_file():
            hf_quant = load_config_text(read_limited(quant_path, MAX_CONFIG_BYTES, "config.too_large"))
            config = with_hf_quant_config(config, hf_quant if isinstance(hf_quant, dict) else None)
        arch = parse_config(config, name=folder.resolve().name, source=str(config_path))
        args.checkpoint_summary = read_checkpoint_dir(folder, arch.decoder_layers)
        return arch
    if getattr(args, "hf_id", None) is not None:
        from kvplan.hub import fetch

        config, summary, problem = fetch(args.hf_id)
        args.checkpoint_summary, args.checkpoint_problem = summary, problem
        return parse_config(config, name=args.hf_id, source=f"Hub {args.hf_id} config.json")
    path = Path(args.config)
    raw = read_limited(path, MAX_CONFIG_BYTES, "config.too_large")
    return parse_config(raw, name=path.stem if path.name != "config.json" else path.parent.name,
                        source=str(path))


def human(n: int | float) -> str:
    return f"{n / GIB:,.3f} GiB ({int(n):,} B)"


def cmd_kv(args: argparse.Namespace) -> int:
    from kvplan.engines import engine_with_release
    from kvplan.plan import FitQuery, make_plan
    from kvplan.sizing import kv_cache

    arch = _load_arch(args)
    query = FitQuery(tokens=args.tokens, users=args.batch, kv_dtype=args.kv_dtype,
                     engine=engine_with_release(args.engine, args.engine_version), tp=args.tp,
                     settings=settings_from_args(args, tp=args.tp))
    result = kv_cache(make_plan(arch, None, query))
    if args.json:
        payload = result.model_dump()
        payload["layers"] = {k: v.model_dump() for k, v in result.layers.items()}
        print(json.dumps(payload))
        return 0
    print(f"{result.model} · {result.engine_label} · KV {result.kv_dtype} · "
          f"{result.tokens:,} tokens × batch {result.batch:,}")
    print(f"KV cache held:     {human(result.kv_bytes)}")
    if result.reserved_bytes != result.kv_bytes:
        print(f"Engine reserves:   {human(result.reserved_bytes)}")
    print(f"Per token (avg):   {result.kv_bytes_per_token:,} B")
    for kind in result.layers.values():
        print(f"  {kind.kind:9s} {kind.layers:4d} layers × {kind.tokens_held_per_layer:,} tokens × "
              f"{kind.bytes_per_token_per_layer:,} B = {human(kind.bytes)}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def _adapters(plan: Plan) -> dict[str, object] | None:
    """With ``--enable-lora``: the most adapter slots beside the workload (``kvplan.adapters``)."""
    from kvplan.adapters import adapters_that_fit

    return adapters_that_fit(plan).as_json() if plan.settings.enable_lora else None


def _image_request(args: argparse.Namespace, arch: ModelArch, settings: EngineSettings,
                   text: tuple[str, int] | None = None) -> dict[str, Any] | None:
    """``--images N --image-size WxH`` and ``--videos N --video-size WxH --video-seconds S
    --video-fps F``: the request's tokens, ``text`` (the flag and its tokens; ``--tokens`` by
    default) plus each image's and video's prompt tokens by the checkpoint's processor
    (``kvplan.multimodal.image_prompt_tokens``, ``video_prompt_tokens``); None without either."""
    from kvplan.engines import DEFAULT_ENGINE, engine_with_release
    from kvplan.multimodal import ImageRequest, image_prompt_tokens, with_processor_kwargs
    from kvplan.plan import resolve_engine
    from kvplan.scenario import MAX_CONTEXT_TOKENS

    engine = resolve_engine(engine_with_release(getattr(args, "engine", None) or DEFAULT_ENGINE,
                                                args.engine_version))
    limit = engine.image_limit(settings)  # the engine's flag, or a foreign one refused by name
    engine.check_media(arch, images=args.images or 0, videos=getattr(args, "videos", 0) or 0)
    video = _video_request(args, arch, settings, engine.image_limit(settings, "video"),
                           engine.image_limit_flag, engine.image_limit_refusal)
    if not args.images and not args.image_size and video is None:
        return None
    if args.images and not args.image_size:
        raise KVPlanError("mm.images", count=args.images, key="images",
                          detail="give each image's size with --image-size WxH")
    flag, tokens = text or ("--tokens", args.tokens)
    images = ImageRequest.parse(args.images, args.image_size) if args.image_size else ImageRequest()
    processor = with_processor_kwargs(arch.name, arch.processor, settings.mm_processor_kwargs)
    added = image_prompt_tokens(arch.name, processor, images, limit, flag=engine.image_limit_flag,
                                refusal=engine.image_limit_refusal)
    videos = video["video_tokens"] if video else 0
    total = tokens + added + videos
    if total > MAX_CONTEXT_TOKENS:
        raise KVPlanError("mm.images", count=images.count, key="images",
                          detail=f"{flag} {tokens:,} + {added:,} image tokens"
                                 + (f" + {videos:,} video tokens" if video else "")
                                 + f" is above {MAX_CONTEXT_TOKENS:,}")
    per_image = added // images.count if images.count else 0
    shown = processor is not None and images.count > 0
    rule = processor.describe(images.width, images.height) \
        if processor is not None and shown else ""
    embeds = processor.image_tokens(images.width, images.height) \
        if processor is not None and shown else 0
    out: dict[str, Any] = {
        "text_tokens": tokens, "images": images.count,
        "image_size": f"{images.width}x{images.height}" if args.image_size else "",
        "image_tokens_per_image": embeds, "prompt_tokens_per_image": per_image, "image_tokens": added,
        "tokens": total, "rule": rule, "source": processor.source if processor is not None else ""}
    return {**out, **video} if video else out


def _video_request(args: argparse.Namespace, arch: ModelArch, settings: EngineSettings,
                   limit: int | None, flag: str, refusal: str) -> dict[str, Any] | None:
    """``--videos N --video-size WxH --video-seconds S --video-fps F``: the videos' prompt tokens
    (``kvplan.multimodal.video_prompt_tokens``) and their rule; None without videos; each
    missing or bad value refused by name."""
    from kvplan.multimodal import VideoRequest, video_prompt_tokens, with_processor_kwargs

    given = {"--video-size": args.video_size, "--video-seconds": args.video_seconds,
             "--video-fps": args.video_fps}
    if not args.videos and all(v in (None, "") for v in given.values()):
        return None
    missing = [name for name, v in given.items() if v in (None, "")]
    if missing or not args.videos:
        raise KVPlanError("mm.videos", count=args.videos, key="videos",
                          detail="give --videos N with " + (", ".join(missing) if missing else
                                                            "--video-size, --video-seconds and --video-fps"))
    request = VideoRequest.parse(args.videos, args.video_size, args.video_seconds, args.video_fps)
    processor = with_processor_kwargs(arch.name, arch.processor, settings.mm_processor_kwargs)
    tokens = video_prompt_tokens(arch.name, processor, request, limit, flag=flag, refusal=refusal)
    assert processor is not None and hasattr(processor, "describe_video")  # video_prompt_tokens checked
    return {"videos": request.count, "video_size": f"{request.width}x{request.height}",
            "video_seconds": request.seconds, "video_fps": request.fps, "video_frames": request.frames,
            "prompt_tokens_per_video": tokens // request.count, "video_tokens": tokens,
            "video_rule": processor.describe_video(request)}


def cmd_fit(args: argparse.Namespace) -> int:
    from kvplan.capacity import fit
    from kvplan.engines import engine_with_release
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import get_gpu

    arch = _load_arch(args)
    gpu = get_gpu(args.gpu)
    settings = settings_from_args(args, tp=args.tp, pp=args.pp)
    request = _image_request(args, arch, settings)
    query = FitQuery(tokens=request["tokens"] if request else args.tokens, users=args.users,
                     kv_dtype=args.kv_dtype,
                     weight_dtype=args.weight_dtype,
                     engine=engine_with_release(args.engine, args.engine_version),
                     num_gpus=args.num_gpus, tp=args.tp, pp=args.pp, reserve_gib=args.reserve_gib,
                     reserve_terms=_reserve_terms(args),
                     kv_cache_memory_bytes=args.kv_cache_memory_bytes, settings=settings)
    plan = make_plan(arch, gpu, query)
    result = fit(plan)
    status = 1 if args.check and not result.fits else 0
    checkpoint = _checkpoint_report(args, arch, query)
    adapters = _adapters(plan)
    if args.json:
        payload = result.model_dump(mode="json")
        if checkpoint is not None:
            payload["checkpoint"] = checkpoint
        if adapters is not None:
            payload["lora_adapters_that_fit"] = adapters
        if request is not None:
            payload["request"] = request
        print(json.dumps(payload))
        return status
    gpus = result.replicas * result.tp * result.pp
    print(f"{result.model} on {plural(gpus, 'GPU')} × {gpu.name} ({plural(result.replicas, 'replica')}"
          f" of TP={result.tp}, PP={result.pp}) · {result.engine_label} [{result.engine_release}]")
    # the verdict first, then the numbers behind it; provenance only with --verbose (and in --json)
    if result.fits:
        print("Fits.")
    else:
        print(f"Does NOT fit: {result.reason}.")
        if result.suggestion:
            print(f"Smallest change: {result.suggestion}.")
    if result.start_reason:
        print(f"Start-up ({'starts' if result.starts else 'does not start'}): {result.start_reason}")
    if request is not None:
        parts = [f"{request['text_tokens']:,} text tokens"]
        if request["images"] or not request.get("videos"):
            parts.append(f"{request['images']} × {request['image_size']} image(s) of "
                         f"{request['prompt_tokens_per_image']:,} tokens")
        if request.get("videos"):
            parts.append(f"{request['videos']} × {request['video_size']} video(s) of "
                         f"{request['prompt_tokens_per_video']:,} tokens")
        print(f"Request shape:     {' + '.join(parts)} = {request['tokens']:,} tokens")
        if request["rule"]:
            print(f"  per image: {request['rule']}")
        if request.get("videos"):
            print(f"  per video: {request['video_rule']}")
    print(f"Requests of {result.tokens:,} tokens that fit: {result.max_requests:,} per replica, "
          f"{result.max_requests_all_replicas:,} in all")
    if result.max_num_seqs is not None:
        state = (f"; {result.state_blocks:,} recurrent-state blocks" if result.state_blocks is not None
                 else "")
        graphs = (f"; CUDA graphs at {len(result.cuda_graph_sizes)} sizes up to "
                  f"{result.cuda_graph_sizes[-1]:,}" if result.cuda_graph_sizes else "")
        print(f"Request cap:       max_num_seqs {result.max_num_seqs:,} ({result.max_num_seqs_source})"
              f"{state}{graphs}; the pool alone holds {result.max_requests_kv:,}")
    print(f"Longest request at {plural(result.users, 'user')}: {result.max_tokens_per_request:,} tokens")
    if result.context_limit is not None:
        print(f"Model context limit: {result.context_limit:,} tokens ({result.context_limit_rule})")
    verbose = bool(getattr(args, "verbose", False))
    cap = result.capacity
    where = f"{cap.get('note', '')}; " if verbose else ""
    print(f"GPU memory:        {human(result.gpu_capacity_bytes)} [{where}status {cap.get('status', '')}]")
    smi = f", nvidia-smi {human(cap['nvidia_smi'])}" if cap.get("nvidia_smi") else ""
    print(f"  marketed {human(cap.get('marketed', 0))}{smi}")
    print(f"Weights per GPU:   {human(result.weights_bytes)}")
    print(f"  format: {result.weight_format}")
    for part, size in result.weights_breakdown.items():
        print(f"  {part:20s} {human(size)}")
    if checkpoint is not None and "parts" in checkpoint:
        print(f"Checkpoint headers: {checkpoint['files']} file(s), {human(checkpoint['checkpoint_total'])}"
              f" vs config estimate {human(checkpoint['estimate_total'])}")
        for part, row in checkpoint["parts"].items():
            print(f"  {part:20s} checkpoint {row['checkpoint']:>16,} B   estimate {row['estimate']:>16,} B")
    elif checkpoint is not None:
        print(f"Checkpoint headers not read: {checkpoint['problem']}")
    print(f"Runtime reserve:   {human(result.reserve_bytes)}"
          + (" (given)" if result.reserve.get("total_overridden") else ""))
    for term in result.ledger:
        if term["group"] in {"reserve", "outside"}:
            flag = "" if term["group"] == "reserve" else " (not subtracted)"
            source = f" [{term['source']}]" if verbose else ""
            print(f"  {term['name'].removeprefix('reserve: '):24s} {human(term['bytes'])}{flag}: "
                  f"{term['formula']}{source}")
    print(f"KV budget per GPU: {human(result.kv_budget_bytes)}")
    if result.num_blocks is not None:
        per_request = (f" ({result.blocks_per_request:,} per request)"
                       if result.blocks_per_request is not None else "")
        print(f"Blocks:            {result.num_blocks:,} × {result.block_size} tokens{per_request}")
        if "max_requests" in result.formulas:
            print(f"  requests: {result.formulas['max_requests']}")
    for term in result.ledger:
        if term["group"] in {"kv", "free"}:
            print(f"{term['name'] + ':':18s} {human(term['bytes'])} ({term['formula']})")
    if lines := plan.engine.log_lines(result):
        print(f"{plan.engine.short + ' would log:':19s}{', '.join(lines)}")
    if adapters is not None:
        print(f"LoRA adapters that fit: {adapters['max_loras']:,} GPU slots — {adapters['formula']}")
    if (spec := result.speculative) is not None and "speculative_num_steps" in spec:  # SGLang
        print(f"Speculative decoding: {spec['method']} ({spec['draft']}), "
              f"{spec['speculative_num_steps']} steps, topk {spec['speculative_eagle_topk']}, "
              f"{spec['speculative_num_draft_tokens']} draft tokens: {spec['draft_kv_layers']} draft "
              f"KV layer(s) in the token cell (+{int(spec['draft_kv_bytes_per_token']):,} B per "
              f"token), draft weights {int(spec['draft_weights_bytes']):,} B")
    elif spec is not None and "spec_dec_mode" in spec:  # TensorRT-LLM
        draft = spec["draft_kv_bytes_per_token"]
        assert isinstance(draft, dict)
        print(f"Speculative decoding: {spec['decoding_type']} → {spec['spec_dec_mode']} "
              f"({spec['draft']}), max_draft_len {spec['max_draft_len']}: "
              f"{spec['spec_layers_in_target_manager']} spec layer(s) in the target's KV manager "
              f"(+{int(spec['spec_layers_bytes_per_token']):,} B per token), draft manager "
              f"{spec['draft_manager_kv_layers']} layer(s) (+{int(draft['manager']):,} B per token), "
              f"{spec['extra_tokens_per_request']} more tokens per request, draft weights "
              f"{int(spec['draft_weights_bytes']):,} B")
    elif spec is not None:
        print(f"Speculative decoding: {spec['method']} ({spec['draft']}), "
              f"{spec['num_speculative_tokens']} tokens, draft TP {spec['draft_tensor_parallel_size']}: "
              f"{spec['draft_kv_layers']} drafter KV layer(s) in the target's groups "
              f"({int(spec['draft_kv_bytes_per_token']):,} B per token per GPU), "
              f"{spec['lookahead_tokens']} lookahead slots, {spec['cudagraph_capture_sizes']} "
              f"CUDA-graph sizes up to {spec['max_cudagraph_capture_size']:,}")
    for note in result.notes:
        print(f"  note: {note}")
    if not verbose:
        print("Sources of the device total and each reserve term: --verbose (or --json).")
    return status


def _checkpoint_report(args: argparse.Namespace, arch: ModelArch, query: FitQuery) -> dict[str, Any] | None:
    """Headers read with --checkpoint/--hf-id, compared with the config-derived estimate."""
    from kvplan.checkpoint import compare
    from kvplan.weights import weights_per_gpu

    summary = getattr(args, "checkpoint_summary", None)
    if summary is None:
        problem = getattr(args, "checkpoint_problem", None)
        return {"problem": problem} if problem else None
    estimate = weights_per_gpu(arch, query.weight_dtype, 1, 1, 1, query.settings.mtp).total_by_part
    return {**summary.as_dict(), **compare(summary, estimate)}


def cmd_models(args: argparse.Namespace) -> int:
    from kvplan.catalogue import model_rows
    from kvplan.engines import DEFAULT_ENGINE
    from kvplan.plan import resolve_engine

    rows = model_rows(resolve_engine(DEFAULT_ENGINE))
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'Hub id':52s} {'family':14s} {'format':18s} {'params':>9s} {'weights GB':>10s} "
          f"{'context':>9s}  alias")
    for row in rows:
        alias = row["alias"] if row["alias"] != row["id"] else ""
        context = f"{row['context_length']:,}" if row["context_length"] else "?"
        print(f"{row['id']:52s} {row['family']:14s} {row['format']:18s} "
              f"{row['params_total'] / 1e9:8.2f}B {row['weights_bytes'] / 1e9:10.2f} {context:>9s}  {alias}")
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from kvplan.engines import DEFAULT_ENGINE
    from kvplan.plan import resolve_engine
    from kvplan.presets import gpus

    if args.json:
        print(json.dumps([g.model_dump() for g in gpus().values()]))
        return 0
    for gpu in gpus().values():
        cap = resolve_engine(DEFAULT_ENGINE).capacity(gpu)
        print(f"{gpu.id:16s} {gpu.name:32s} {gpu.capacity_bytes / GIB:8.2f} GiB "
              f"({gpu.capacity_bytes / 1e9:7.2f} GB)  CUDA {cap.bytes / GIB:7.2f} GiB ({cap.status})  "
              f"{gpu.bandwidth_tbps:5.2f} TB/s  {gpu.bf16_tflops:7.1f} TFLOPS")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from kvplan.report import write_report

    for path in write_report(args.scenario, Path(args.out), png=not args.no_png, base=args.base_url):
        print(path)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from kvplan.calibrate import MAX_LOG_BYTES, calibrate, compares
    from kvplan.engines import engine_with_release, log_engine
    from kvplan.files import read_limited
    from kvplan.plan import FitQuery, make_plan, resolve_engine
    from kvplan.presets import get_gpu

    if not compares(resolve_engine(args.engine)):
        raise KVPlanError("calibrate.engine", why=f"engine '{args.engine}' is not vLLM")
    raw = read_limited(args.log, MAX_LOG_BYTES, "calibrate.too_large")
    engine = engine_with_release(log_engine(), args.engine_version)
    resolve_engine(engine).parse_log(raw)  # a log it cannot read is refused before the model is loaded
    arch = _load_arch(args)
    gpu = get_gpu(args.gpu)
    query = FitQuery(tokens=args.tokens, kv_dtype=args.kv_dtype, weight_dtype=args.weight_dtype,
                     engine=engine, tp=args.tp,
                     pp=args.pp, reserve_gib=args.reserve_gib, reserve_terms=_reserve_terms(args),
                     settings=settings_from_args(args, tp=args.tp, pp=args.pp))
    result = calibrate(make_plan(arch, gpu, query), raw)
    log = result.log
    if args.json:
        print(result.model_dump_json())
        return 0
    print(f"{result.model} on {gpu.name} (tp={result.tp}, pp={result.pp}) · vLLM · KV "
          f"{result.kv_dtype} · {result.tokens:,} tokens")
    print(f"Release: {result.release_source}")

    def row(label: str, logged: object, predicted: object, reproduced: object) -> None:
        print(f"  {label:26s} {logged!s:>16s} {predicted!s:>16s} {reproduced!s:>16s}")

    def fmt(value: object, spec: str = ",") -> str:
        return "—" if value is None else format(value, spec)

    row("", "logged", "predicted", "with logged mem")
    row("available KV memory (GiB)", fmt(log.available_kv_gib, ".2f"),
        f"{result.predicted_kv_budget_bytes / GIB:.2f}", fmt(log.available_kv_gib, ".2f"))
    row("num_gpu_blocks", fmt(log.num_gpu_blocks) if log.num_gpu_blocks is not None else
        (fmt(result.logged_blocks_low) if result.logged_blocks_low == result.logged_blocks_high
         else "—"), fmt(result.predicted_num_blocks), fmt(result.reproduced_num_blocks))
    row("GPU KV cache size (tokens)", fmt(log.kv_cache_tokens), fmt(result.predicted_kv_cache_tokens),
        fmt(result.reproduced_kv_cache_tokens))
    row("max concurrency (x)", fmt(log.max_concurrency, ".2f"),
        f"{result.predicted_max_concurrency:.2f}", fmt(result.reproduced_max_concurrency, ".2f"))
    if (implied := result.implied_reserve) is not None:
        reserve, low, high = implied
        print(f"Implied runtime reserve: {human(reserve)} "
              f"(between {low / GIB:.4f} and {high / GIB:.4f} GiB); kvplan assumed "
              f"{result.predicted_reserve_bytes / GIB:g} GiB")
    for part in result.implied_terms:
        logged = "" if part["logged_bytes"] is None else f", logged {human(part['logged_bytes'])}"
        print(f"  {part['name']:18s} {human(part['implied_bytes'])} (kvplan {human(part['model_bytes'])}"
              f"{logged})")
    if result.suggested_reserve_gib is not None:
        print(f"Use --reserve-gib {result.suggested_reserve_gib:g} to plan like this run.")
    print(f"Agreement with the logged memory: {result.agreement.replace('_', ' ')} "
          f"(resolution: one block = {result.bytes_per_block:,} B)")
    for key, text in result.formulas.items():
        print(f"  {key}: {text}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def _calibrated(args: argparse.Namespace, arch: ModelArch, engine: str,
                settings: EngineSettings) -> tuple[str, float] | None:
    """(accelerator, efficiency factor) solved from the ``--measured-*`` run, if one was given."""
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import get_gpu
    from kvplan.recommend import calibrate_efficiency

    measured = args.measured_tokens_per_s if args.measured_tokens_per_s is not None else args.measured_ttft_ms
    if measured is None:
        return None
    if args.measured_gpu is None:
        raise KVPlanError("recommend.calibrate", detail="--measured-gpu names the accelerator of the run")
    wd = next(iter(args.weight_dtypes or ("auto",)), "auto")
    base = FitQuery(engine=engine, tp=args.measured_tp, kv_dtype=next(iter(args.kv_dtypes), "bf16"),
                    weight_dtype=None if wd == "auto" else wd, reserve_gib=args.reserve_gib,
                    settings=settings.model_copy(update={"tp": args.measured_tp}))
    kind: Literal["decode", "prefill"] = "decode" if args.measured_tokens_per_s is not None else "prefill"
    factor = calibrate_efficiency(make_plan(arch, get_gpu(args.measured_gpu), base), measured, kind,
                                  args.measured_batch, args.measured_prompt, args.measured_context)
    if factor > 1:
        raise KVPlanError("recommend.calibrate", detail=f"the measured run beats the bound (e = {factor:.3g} "
                                                        "> 1); check the inputs")
    return args.measured_gpu, factor


def _calibrated_run(arch: ModelArch, engine: str, run: dict[str, Any]) -> tuple[tuple[float, float], str]:
    """(prefill, decode) efficiencies that make the estimate return a ``--measured-run`` exactly."""
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import efficiency_for, get_gpu
    from kvplan.recommend import calibrate_run, estimate_throughput, plan_throughput_bound

    gpu = get_gpu(run["gpu"])
    plan = make_plan(arch, gpu, FitQuery(engine=engine, tp=run["tp"], pp=run["pp"], kv_dtype=run["kv"],
                                         weight_dtype=None if run["weight"] == "auto" else run["weight"]))
    bound = plan_throughput_bound(plan, run["isl"], run["osl"], run.get("gpus"))
    eff = calibrate_run(bound, run["tokens_per_s"], efficiency_for(gpu.id))
    again = estimate_throughput(bound, eff)
    return (eff.prefill, eff.decode), (
        f"Estimate for {gpu.id} calibrated on a measured run ({run['isl']:,}/{run['osl']:,} tokens, "
        f"TP {run['tp']} × PP {run['pp']}, {bound.replicas * run['tp'] * run['pp']} GPUs, weights "
        f"{run['weight']}, KV {run['kv']}): efficiencies prefill {eff.prefill:.4g}, decode "
        f"{eff.decode:.4g}; the estimate returns {again:,.1f} tokens/s (measured "
        f"{run['tokens_per_s']:,.1f}; upper bound {bound.tokens_per_s:,.1f})")


def cmd_recommend(args: argparse.Namespace) -> int:
    import json as _json

    from kvplan.config_import import MAX_CONFIG_BYTES
    from kvplan.engines import DEFAULT_ENGINE, engine_with_release
    from kvplan.files import read_limited
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import efficiency_for, read_price_csv
    from kvplan.recommend import (
        RecommendQuery,
        failure_counts,
        price_sources,
        ranked_rows,
        recommend,
        resolve_targets,
    )
    from kvplan.scenario import CUSTOM_MODEL, Scenario
    from kvplan.serving import MAX_CSV_BYTES, LengthDist, parse_lengths_csv

    arch = _load_arch(args)
    engine = engine_with_release(args.engine or DEFAULT_ENGINE, args.engine_version)
    settings = settings_from_args(args)
    request = _image_request(args, arch, settings, ("--prompt-tokens", args.prompt_tokens))
    workload = None
    if args.lengths_csv:
        workload = parse_lengths_csv(read_limited(args.lengths_csv, MAX_CSV_BYTES, "csv.too_large"))

    def dist(part: str) -> LengthDist:
        mean = getattr(args, f"{part}_mean")
        if mean is not None:
            return LengthDist(kind="lognormal", mean=mean, sigma=getattr(args, f"{part}_sigma"))
        return LengthDist(kind="fixed", value=getattr(args, f"{part}_tokens"))

    ttft, tpot, percentile = resolve_targets(args.preset, args.ttft_ms, args.tpot_ms, args.percentile)
    efficiency = dict(args.efficiency)
    calibrated = _calibrated(args, arch, engine, settings)
    if calibrated is not None:
        efficiency[calibrated[0]] = calibrated[1]
    phase: dict[str, tuple[float, float]] = {}
    run_notes: list[str] = []
    for run in args.measured_run:
        phase[run["gpu"]], note = _calibrated_run(arch, engine, run)
        run_notes.append(note)
    query = RecommendQuery(
        phase_efficiency=phase,
        traffic="rps" if args.rps is not None else "users",
        users=args.users if args.users is not None else 64, rps=args.rps if args.rps is not None else 1.0,
        prompt=dist("prompt"), output=dist("output"), percentile="p50" if percentile == "p50" else "p99",
        ttft_ms=ttft, tpot_ms=tpot,
        max_context=args.max_context, gpus=args.gpus, max_gpus=args.max_gpus,
        max_total_gpus=args.max_total_gpus, tp=args.tp, pp=args.pp, expert_parallel=not args.no_ep,
        disagg=args.disagg, pd_layouts=args.pd_layouts, kv_dtypes=args.kv_dtypes,
        weight_dtypes=args.weight_dtypes, prices=dict(args.price),
        price_kind=args.price_kind, price_table=None if args.prices_csv is None else read_price_csv(
            read_limited(args.prices_csv, MAX_CONFIG_BYTES, "config.too_large").decode("utf-8", "replace")),
        efficiency=efficiency, default_efficiency=args.default_efficiency,
        image_tokens=request["image_tokens"] + request.get("video_tokens", 0) if request else 0,
        images=request["images"] if request else 0, videos=request.get("videos", 0) if request else 0)
    plan = make_plan(arch, None, FitQuery(engine=engine, reserve_gib=args.reserve_gib, settings=settings))
    rec = recommend(plan, query, workload)
    model: dict[str, object] = {"model": args.model}
    if args.model is None:
        raw = read_limited(args.config, MAX_CONFIG_BYTES, "config.too_large")
        model = {"model": CUSTOM_MODEL, "custom_config": _json.loads(raw)}
    width, _, height = request["image_size"].partition("x") if request else ("", "", "")
    shape = {"images": request["images"], "image_width": int(width),
             "image_height": int(height)} if request and request["images"] else {}
    scenario = Scenario.model_validate({**model, **shape, "engine": engine.partition("@")[0],
                                        "engine_version": args.engine_version,
                                        "reserve_gib": args.reserve_gib, "engine_settings": settings})
    rows = ranked_rows(rec, scenario, args.top)
    apart = ranked_rows(rec, scenario, args.top, unpriced=True)
    split = ranked_rows(rec, scenario, args.top, xpyd=True) if args.disagg else []
    lengths = rec.lengths
    priced, unpriced = price_sources(rec, query)
    if args.json:
        print(_json.dumps({
            "model": arch.name, "engine": engine, "kind": "bounds",
            "figures": {"mode": "aggregated, or xPyD: x prefill + y decode instances of the layout "
                                "(--disagg); replicas = x + y instances",
                        "bound_tokens_per_s_per_replica": "upper bound (no run can beat it)",
                        "estimate_tokens_per_s_per_replica": "estimate: the bound at the accelerator's "
                                                             "default efficiencies (presets/efficiency.json)",
                        "tpot_ms, ttft_ms, tokens_per_s_per_replica": (
                            "the step-time model at the efficiency factor and the target percentile's "
                            "lengths (for throughput not a bound: runs can beat it; "
                            "bound_tokens_per_s_per_replica is the one that holds)")},
            "targets": {"ttft_ms": ttft, "tpot_ms": tpot, "percentile": percentile},
            "traffic": {"users": query.users} if query.traffic == "users" else {"rps": query.rps},
            "lengths": {"prompt": lengths.prompt, "context": lengths.context,
                        "prompt_mean": lengths.prompt_mean, "output_mean": lengths.output_mean,
                        "requests": lengths.requests, "source": lengths.source,
                        "image_tokens": lengths.image_tokens},
            "request": request,
            "cost_unit": rec.cost_unit, "candidates": len(rec.table),
            "feasible": int(rec.table["feasible"].sum()), "failures": failure_counts(rec),
            "message": rec.message, "table": rows, "formulas": rec.formulas, "efficiency": efficiency,
            "assumptions": rec.assumptions, "notes": rec.notes,
            "prices": priced, "unpriced": unpriced, "unpriced_table": apart,
            "calibrated_runs": run_notes, "xpyd_table": split}))
        return 0
    print(f"{arch.name} · {plan.engine.label} · targets TTFT ≤ {ttft:g} ms, TPOT ≤ {tpot:g} ms "
          f"({percentile}) · lengths: prompt {lengths.prompt:,}, context {lengths.context:,} tokens"
          + (f" (each with {request['images']} × {request['image_size']} image(s) = "
             f"{request['image_tokens']:,} tokens)" if request else ""))
    print(f"{len(rec.table):,} candidates, {int(rec.table['feasible'].sum()):,} feasible; failing: "
          + ", ".join(f"{k} {v:,}" for k, v in failure_counts(rec).items()))
    if rec.message:
        print(rec.message)
    def show(items: list[dict[str, Any]], unit: str, key: str) -> None:
        for i, row in enumerate(items, 1):
            split = (f"DP {row['dp']}×TP {row['tp']}" if row["tp"] > 1 else f"EP {row['ep']}") \
                if row["ep"] > 1 else f"TP {row['tp']} × PP {row['pp']}"
            mode = "" if row["mode"] == "aggregated" else (
                f"{row['mode']} (transfer {row['transfer_ms']:.3f} ms, ≤ {row['in_flight_bound']:,} "
                "prompts in flight per decode instance)  ")
            print(f"{i:3d}. {mode}{row['gpu']:15s} {split:12s} KV {row['kv_dtype']:9s} "
                  f"W {row['weight_dtype']:9s} "
                  f"{row['replicas']:,} × {row['total_gpus'] // max(row['replicas'], 1)} GPUs  "
                  f"TPOT {row['tpot_ms']:.2f} ms  TTFT {row['ttft_ms']:.1f} ms  "
                  f"{row[key]:.4f} {unit}/M tokens  "
                  f"tokens/s per replica: bound {row['bound_tokens_per_s_per_replica']:,.0f}, "
                  f"estimate {row['estimate_tokens_per_s_per_replica']:,.0f}; estimate "
                  + (f"{row['estimate_total_gpus']:,} GPUs (TPOT {row['estimate_tpot_ms']:.2f} ms)"
                     if row["estimate_total_gpus"] else "misses the targets"))

    show(rows, rec.cost_unit, "cost_per_m_tokens")
    if args.disagg:
        print("xPyD candidates (disaggregated prefill/decode, the cheapest first): "
              + ("" if split else "none (the notes say why)"))
        show(split, rec.cost_unit, "cost_per_m_tokens")
        for note in rec.notes:
            if note.startswith("xPyD"):
                print(f"  {note}")
    if apart:
        print(f"Unpriced accelerators, listed apart (no price in the table; GPU-hours per M output "
              f"tokens, not money): {', '.join(unpriced)}")
        show(apart, "GPU-hours", "gpu_hours_per_m_tokens")
    print("TPOT and TTFT are bounds (formulas below), not measurements, and the GPU counts they give "
          "lower bounds. Tokens/s 'bound' is the run upper bound no run can beat (`kvplan throughput`); "
          "'estimate' is an estimate: each phase's time at peak over the accelerator's prefill and decode "
          "efficiencies (presets/efficiency.json, fitted on published results; docs/efficiency.md).")
    used = sorted({str(row["gpu"]) for row in [*rows, *apart]})
    if used:
        print("Efficiencies: " + "; ".join(
            f"{g}: prefill {efficiency_for(g).prefill:.4g}, decode {efficiency_for(g).decode:.4g} "
            f"({efficiency_for(g).source})" for g in used))
    for line in rec.formulas:
        print(f"  {line}")
    for note in run_notes:
        print(note)
    for gpu_id, price in priced.items():
        print(f"Price {gpu_id}: ${price['per_hour']:g} per GPU-hour — {price['source']}")
    if unpriced:
        print(f"No price for {', '.join(unpriced)}: listed apart in GPU-hours (--price gpu=$/h or "
              "--prices-csv to price them)")
    return 0


def cmd_throughput(args: argparse.Namespace) -> int:
    """Bound, estimate and (with ``--measured-tokens-per-s``) calibration of one run, each labelled."""
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import efficiency_for, estimate_batch_cap, get_gpu
    from kvplan.recommend import (
        ESTIMATE_FORMULA,
        Measured,
        calibrate_phases,
        estimate_throughput,
        latency_at_rate,
        plan_throughput_bound,
    )

    arch = _load_arch(args)
    gpu = get_gpu(args.gpu)
    n = args.gpus or args.tp * args.pp
    plan = make_plan(arch, gpu, FitQuery(tp=args.tp, pp=args.pp, kv_dtype=args.kv_dtype,
                                         weight_dtype=None if args.weight_dtype == "auto"
                                         else args.weight_dtype))
    bound = plan_throughput_bound(plan, args.isl, args.osl, n)
    eff = efficiency_for(gpu.id)
    calibrated = None
    given: list[tuple[Literal["tokens/s", "ttft", "tpot"], float | None]] = [
        ("tokens/s", args.measured_tokens_per_s), ("ttft", args.measured_ttft_ms),
        ("tpot", args.measured_tpot_ms)]
    figures = [Measured(kind, value, bound, args.concurrency if kind == "tpot" else None)
               for kind, value in given if value is not None]
    if figures:
        unit = {"tokens/s": "output tokens/s", "ttft": "ms TTFT", "tpot": "ms TPOT"}
        words = ", ".join(f"{m.value:,.1f} {unit[m.kind]}"
                          + (f" at {m.concurrency} requests" if m.kind == "tpot" else "") for m in figures)
        calibrated = calibrate_phases(figures, eff, source=(
            f"calibrated on a measured {words} of this run"
            + (f" (phase ratio from {eff.source})" if len(figures) == 1 else "")))
    used = calibrated or eff
    estimate = estimate_throughput(bound, used)
    at_rate = None if args.rate is None else latency_at_rate(bound, used, args.rate / bound.replicas,
                                                               chunk=args.chunk)
    if args.json:
        print(json.dumps({
            "model": arch.name, "gpu": gpu.id, "gpus": n, "tp": args.tp, "pp": args.pp,
            "weight_dtype": args.weight_dtype, "kv_dtype": args.kv_dtype, "isl": args.isl,
            "osl": args.osl,
            "bound": {"kind": "upper bound", "tokens_per_s": bound.tokens_per_s, "limit": bound.limit,
                      "compute_tokens_per_s": bound.compute_tokens_per_s,
                      "memory_tokens_per_s": bound.memory_tokens_per_s, "formula": bound.formula},
            "estimate": {"kind": "estimate", "tokens_per_s": estimate,
                         "efficiency": used.model_dump(), "calibrated": calibrated is not None},
            **({} if at_rate is None else {"at_rate": {
                "kind": "estimate", "requests_per_s": args.rate, "per_replica": at_rate.rate,
                "ttft_ms": {"p50": at_rate.ttft_p50_ms, "p99": at_rate.ttft_p99_ms},
                "tpot_ms": {"p50": at_rate.tpot_p50_ms, "p99": at_rate.tpot_p99_ms},
                "concurrency_per_replica": at_rate.concurrency, "saturated": at_rate.saturated,
                "max_batch": at_rate.max_batch, "chunk": at_rate.chunk, "formula": at_rate.formula}})}))
        return 0
    print(f"{arch.name} on {n} × {gpu.id} (TP {args.tp} × PP {args.pp}, {bound.replicas} replica"
          f"{'' if bound.replicas == 1 else 's'}), weights {args.weight_dtype}, KV {args.kv_dtype}, "
          f"{args.isl:,} in / {args.osl:,} out")
    print(f"  upper bound (no run can beat it): {bound.tokens_per_s:,.1f} output tokens/s, set by "
          f"{bound.limit} (compute {bound.compute_tokens_per_s:,.1f}, memory traffic "
          f"{bound.memory_tokens_per_s:,.1f})")
    what = "calibrated" if calibrated is not None else "default"
    print(f"  estimate (an estimate, not a bound: each phase's time at peak over its {what} "
          f"efficiency, prefill {used.prefill:.4g}, decode {used.decode:.4g}; decode batch at most "
          f"{estimate_batch_cap()[0]}): {estimate:,.1f} output tokens/s")
    print(f"  efficiencies from: {used.source}")
    print(f"  bound: {bound.formula}")
    print(f"  estimate: {ESTIMATE_FORMULA}")
    if at_rate is not None:
        print(f"  at {args.rate:,.4g} requests/s ({at_rate.rate:,.4g} per replica; estimates from a seeded "
              f"simulation at the efficiencies above, not bounds): TTFT p50 {at_rate.ttft_p50_ms:,.1f} ms, "
              f"p99 {at_rate.ttft_p99_ms:,.1f} ms; TPOT p50 {at_rate.tpot_p50_ms:,.2f} ms, p99 "
              f"{at_rate.tpot_p99_ms:,.2f} ms; {at_rate.concurrency:,.1f} requests in flight per replica"
              + (" — saturated: the rate exceeds what the replica serves, latency grows with the run"
                 if at_rate.saturated else ""))
        print(f"  at a rate: {at_rate.formula}")
    return 0


def cmd_share(args: argparse.Namespace) -> int:
    """``kvplan share``: ``kvplan.instances.share`` over the ``--instance`` list, in start order."""
    from kvplan.instances import parse_instance, share
    from kvplan.presets import get_gpu

    gpu = get_gpu(args.gpu)
    named = [parse_instance(text, gpu, index=i, tp=args.tp, pp=args.pp, num_gpus=args.num_gpus)
             for i, text in enumerate(args.instance, 1)]
    answer = share(named)
    if args.json:
        print(json.dumps(answer.as_json()))
        return 0
    print(f"{len(answer.instances)} instance(s) on one {gpu.name} ({human(answer.capacity)}), started in "
          f"this order: {' → '.join(answer.order)}")
    for n, item in enumerate(answer.instances, 1):
        value = "" if item.setting_value is None else f" {item.setting_value:g}"
        print(f"{n}. {item.name}: {item.engine_label} [{item.release}] {item.setting}{value}; "
              f"{human(item.others)} held by the instances before it")
        if not item.starts:
            print(f"   Does NOT start: {item.message}")
        else:
            print(f"   Starts; holds {human(item.held_bytes)}; KV pool {item.kv_pool_tokens:,} tokens; "
                  f"{item.max_requests:,} requests of {item.tokens:,} tokens fit "
                  f"({'fits' if item.fits else 'does NOT fit'} {plural(item.users, 'user')})")
            for term in item.holds:
                print(f"     {term.name:28s} {human(term.bytes)}")
        if item.fix:
            print(f"   Smallest change: {item.fix}")
    print(f"Free after the last: {human(answer.free_after)}")
    return 0


def cmd_offload(args: argparse.Namespace) -> int:
    from kvplan.engines import engine_with_release
    from kvplan.offload import OffloadQuery, offload
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import get_gpu

    arch = _load_arch(args)
    query = FitQuery(tokens=args.tokens, kv_dtype=args.kv_dtype,
                     engine=engine_with_release(args.engine, args.engine_version),
                     num_gpus=args.tp * args.pp, tp=args.tp, pp=args.pp,
                     settings=settings_from_args(args, tp=args.tp, pp=args.pp))
    answer = offload(make_plan(arch, get_gpu(args.gpu), query), OffloadQuery(
        backend=args.backend, size_gib=args.size_gib, chunk_tokens=args.chunk_tokens,
        hicache_ratio=args.hicache_ratio, disk_gib=args.disk_gib, host_ram_gib=args.host_ram_gib,
        gpus_per_node=args.gpus_per_node, link_gbps=args.link_gbps, sessions=args.sessions))
    if args.json:
        print(json.dumps(answer.as_json()))
        return 0
    print(f"{answer.model} · {answer.engine_release} · {answer.gpu} TP {answer.tp} PP {answer.pp} · "
          f"sessions of {answer.tokens:,} tokens")
    print(f"GPU pool:          {answer.gpu_sessions:,} sessions")
    for tier in answer.tiers:
        print(f"{tier.tier}: {tier.sessions_per_instance:,} sessions per instance, "
              f"{tier.sessions_per_node:,} per node; {tier.rank_token_bytes:,} B/token per rank "
              f"(GPU {tier.gpu_rank_token_bytes:,}); pins {human(tier.host_bytes_per_node)} per node")
        if tier.restore_seconds is not None:
            print(f"  restore ≥ {tier.restore_seconds:.4f} s over {tier.link_gbps:g} GB/s")
        for line in tier.formulas:
            print(f"  {line}")
        for note in tier.notes:
            print(f"  note: {note}")
    return 0


def cmd_disagg(args: argparse.Namespace) -> int:
    from kvplan.disagg import DisaggQuery, disagg
    from kvplan.engines import engine_with_release
    from kvplan.plan import FitQuery, make_plan
    from kvplan.presets import get_gpu
    from kvplan.recommend import pd_ratio

    arch = _load_arch(args)
    engine = engine_with_release(args.engine, args.engine_version)
    length = args.tokens + args.output_tokens

    def side(gpu: str, tp: int) -> Plan:
        query = FitQuery(tokens=length, kv_dtype=args.kv_dtype, engine=engine, num_gpus=tp, tp=tp,
                         settings=settings_from_args(args, tp=tp))
        return make_plan(arch, get_gpu(gpu), query)

    connector, buffer_device = args.kv_transfer_config or ("nixl", "cuda")
    for typed, value, field in ((args.kv_connector, connector, "kv_connector"),
                                (args.kv_buffer_device, buffer_device, "kv_buffer_device")):
        if typed is not None and args.kv_transfer_config and typed != value:
            print(f"error: --kv-{field[3:].replace('_', '-')} {typed} disagrees with "
                  f"--kv-transfer-config {field} ({value}); give one", file=sys.stderr)
            return 2
    connector = args.kv_connector or connector
    buffer_device = args.kv_buffer_device or buffer_device
    prefill, decode = side(args.prefill_gpu, args.prefill_tp), side(args.decode_gpu, args.decode_tp)
    dq = DisaggQuery(prompt_tokens=args.tokens, output_tokens=args.output_tokens,
                     prefill_instances=args.prefill_instances, decode_instances=args.decode_instances,
                     connector=connector, kv_buffer_device=buffer_device,
                     link_gbps=args.link_gbps)
    answer = disagg(prefill, decode, dq)
    ratio = pd_ratio(prefill, decode, dq, args.rps) if args.rps else None
    if args.json:
        payload = answer.as_json()
        if ratio is not None:
            payload["ratio"] = ratio.as_json()
        print(json.dumps(payload))
        return 0
    print(f"{answer.model} · {answer.prefill_instances}P{answer.decode_instances}D · prompt "
          f"{answer.prompt_tokens:,} + output {answer.output_tokens:,} tokens")
    print(f"transfers in flight per decode instance ≤ {answer.in_flight_bound:,} "
          f"(all decode instances: {answer.in_flight_total:,})")
    print(f"KV moved per request: {human(answer.kv_bytes_per_request)}")
    for line in answer.formulas:
        print(f"  {line}")
    if ratio is not None:
        for row in ratio.rows:
            print(f"{row.rps:g} requests/s: ≥ {row.prefill_instances} prefill and ≥ {row.decode_instances} "
                  f"decode instances (P:D {row.ratio:.2f})")
        for line in ratio.formulas:
            print(f"  {line}")
    return 0


COMMANDS = {"recommend": cmd_recommend, "throughput": cmd_throughput,
            "kv": cmd_kv, "fit": cmd_fit, "models": cmd_models, "gpus": cmd_gpus,
            "report": cmd_report, "calibrate": cmd_calibrate, "share": cmd_share, "offload": cmd_offload,
            "disagg": cmd_disagg}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except KVPlanError as exc:
        sys.stderr.write(f"kvplan: error: {clip(exc, 2000)}\n")
        return 2
    except Exception as exc:  # pydantic's ValidationError, imported only by the commands that use it
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "input"
        sys.stderr.write(f"kvplan: error: {where}: {first.get('msg', 'invalid value')}\n")
        return 2
