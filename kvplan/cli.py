"""Command line: ``kvplan {kv,fit,models,gpus,report,calibrate} ...`` (``pip install .`` gives the
``kvplan`` command; ``python -m kvplan`` is the same).

Bad input exits with code 2 and one line on stderr; ``--json`` prints exactly one JSON object;
``fit --check`` exits 1 when the request does not fit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from kvplan.engines import engine_with_release, get_engine
from kvplan.errors import MESSAGES, KVPlanError, clip, short

GIB = 1 << 30


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        sys.stderr.write(f"kvplan: error: {clip(message, 500)}\n")
        raise SystemExit(2)


def _number(name: str, kind: type, low: float, high: float):
    """argparse type: a number in [low, high], with the message from ``MESSAGES``."""
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                MESSAGES["value.not_number"].format(field=name, value=short(text))) from None
        if not low <= value <= high or value != value:
            raise argparse.ArgumentTypeError(
                MESSAGES["value.range"].format(field=name, low=low, high=high, value=short(text)))
        return value
    return convert


def _positive(name: str, high: int):
    return _number(name, int, 1, high)


def _setting_type(setting):
    """argparse type of a declared engine setting: its own parser and bounds."""
    def convert(text: str):
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
            p.add_argument(*flags, dest=name, choices=["auto", "on", "off"], default="auto",
                           help=setting.help)
        else:
            p.add_argument(*flags, dest=name, type=_setting_type(setting), default=None,
                           help=setting.help)


def settings_from_args(args: argparse.Namespace, tp: int = 1, pp: int = 1):
    """The ``EngineSettings`` the declared flags gave (unset flags keep the engine default)."""
    from kvplan.engines import SETTINGS, EngineSettings

    values: dict[str, Any] = {}
    for name, setting in SETTINGS.items():
        value = getattr(args, name, None)
        if setting.kind == "tristate":
            values[name] = {"auto": None, "on": True, "off": False}[value or "auto"]
        elif value is not None:
            values[name] = value
    return EngineSettings(tp=tp, pp=pp, **values)


def _nonneg_float(text: str) -> float:
    return _number("--reserve-gib", float, 0, 1_000_000)(text)


def _nonneg_int(text: str) -> int:
    return _number("--kv-cache-memory-bytes", int, 0, 10**16)(text)


def plural(count: int, noun: str) -> str:
    """``1 user``, ``8 users`` (the count with thousands separators)."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def build_parser() -> argparse.ArgumentParser:
    from kvplan.engines import DEFAULT_ENGINE, ENGINES, release_choices

    parser = _Parser(prog="kvplan", description="KV-cache memory planner. Every command uses the "
                     f"'{DEFAULT_ENGINE}' engine ({ENGINES[DEFAULT_ENGINE]}) unless --engine says otherwise.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def model_args(p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument("--model", help="preset id (see `models`)")
        group.add_argument("--config", help="path to a Hugging Face config.json")
        p.add_argument("--tokens", type=_positive("--tokens", 100_000_000), required=True,
                       help="tokens per sequence (vLLM: max_model_len)")
        p.add_argument("--kv-dtype", default="auto",
                       help="KV element format; auto = the model's dtype (vLLM's kv_cache_dtype=auto)")
        p.add_argument("--engine", default=DEFAULT_ENGINE, choices=list(ENGINES),
                       help=f"serving engine whose storage rules apply (default: {DEFAULT_ENGINE})")
        p.add_argument("--engine-version", default=None, metavar="RELEASE",
                       help="engine release to model (default: the newest); "
                            + "; ".join(f"{e}: {', '.join(release_choices(e))}" for e in ENGINES
                                        if len(release_choices(e)) > 1))
        _add_settings(p)
        p.add_argument("--json", action="store_true")

    kv = sub.add_parser("kv", help="KV-cache bytes for one sequence length and batch")
    model_args(kv)
    kv.add_argument("--batch", type=_positive("--batch", 10_000_000), default=1)
    kv.add_argument("--tp", type=_positive("--tp", 4096), default=1,
                    help="tensor-parallel size: bytes are per rank")

    fit = sub.add_parser("fit", help="how many requests fit on an accelerator")
    model_args(fit)
    fit.add_argument("--gpu", required=True,
                     help="accelerator id (see `gpus`), or custom:<GiB>[:<TB/s>[:<BF16 TFLOPS>]]")
    fit.add_argument("--num-gpus", type=_positive("--num-gpus", 4096))
    fit.add_argument("--tp", type=_positive("--tp", 4096), default=1)
    fit.add_argument("--pp", type=_positive("--pp", 4096), default=1)
    fit.add_argument("--users", type=_positive("--users", 10_000_000), default=1)
    fit.add_argument("--weight-dtype")
    fit.add_argument("--reserve-gib", type=_nonneg_float)
    fit.add_argument("--kv-cache-memory-bytes", type=_nonneg_int)
    fit.add_argument("--check", action="store_true",
                     help="exit with code 1 when the request does not fit (for scripts)")

    cal = sub.add_parser("calibrate", help="compare kvplan with a real vLLM run's start-up log")
    model_args(cal)
    cal.add_argument("--gpu", required=True, help="accelerator id (see `gpus`) or custom:<GiB>")
    cal.add_argument("--tp", type=_positive("--tp", 4096), default=1)
    cal.add_argument("--pp", type=_positive("--pp", 4096), default=1)
    cal.add_argument("--weight-dtype")
    cal.add_argument("--reserve-gib", type=_nonneg_float,
                     help="reserve of kvplan's own prediction (default: the engine default)")
    cal.add_argument("--log", required=True, help="the vLLM log file (max 1 MiB)")

    sub.add_parser("models", help="list model presets").add_argument("--json", action="store_true")
    sub.add_parser("gpus", help="list accelerators").add_argument("--json", action="store_true")
    report = sub.add_parser("report", help="write CSV/PNG/JSON reports for a scenario")
    report.add_argument("--scenario", required=True, help="scenario JSON file, preset name or link")
    report.add_argument("--out", required=True)
    report.add_argument("--no-png", action="store_true")
    return parser


def _load_arch(args: argparse.Namespace):
    from kvplan.config_import import parse_config
    from kvplan.presets import load_model

    if args.model is not None:
        return load_model(args.model)
    path = Path(args.config)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KVPlanError("file.missing", path=str(path), detail=exc.strerror or str(exc)) from None
    return parse_config(raw, name=path.stem if path.name != "config.json" else path.parent.name,
                        source=str(path))


def human(n: int | float) -> str:
    return f"{n / GIB:,.3f} GiB ({int(n):,} B)"


def cmd_kv(args: argparse.Namespace) -> int:
    from kvplan.sizing import kv_cache

    arch = _load_arch(args)
    settings = settings_from_args(args, tp=args.tp)
    engine = engine_with_release(args.engine, args.engine_version)
    result = kv_cache(arch, args.tokens, args.batch, args.kv_dtype, engine, settings)
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


def cmd_fit(args: argparse.Namespace) -> int:
    from kvplan.capacity import FitQuery, fit
    from kvplan.presets import get_gpu

    arch = _load_arch(args)
    gpu = get_gpu(args.gpu)
    query = FitQuery(tokens=args.tokens, users=args.users, kv_dtype=args.kv_dtype,
                     weight_dtype=args.weight_dtype,
                     engine=engine_with_release(args.engine, args.engine_version),
                     num_gpus=args.num_gpus, tp=args.tp, pp=args.pp, reserve_gib=args.reserve_gib,
                     kv_cache_memory_bytes=args.kv_cache_memory_bytes,
                     settings=settings_from_args(args, tp=args.tp, pp=args.pp))
    result = fit(arch, gpu, query)
    status = 1 if args.check and not result.fits else 0
    if args.json:
        print(result.model_dump_json())
        return status
    gpus = result.replicas * result.tp * result.pp
    print(f"{result.model} on {plural(gpus, 'GPU')} × {gpu.name} ({plural(result.replicas, 'replica')}"
          f" of TP={result.tp}, PP={result.pp}) · {result.engine_label} [{result.engine_release}]")
    print(f"GPU memory:        {human(result.gpu_capacity_bytes)} [{gpu.capacity_basis}]")
    print(f"Weights per GPU:   {human(result.weights_bytes)}")
    print(f"KV budget per GPU: {human(result.kv_budget_bytes)}")
    if result.num_blocks is not None:
        per_request = (f" ({result.blocks_per_request:,} per request)"
                       if result.blocks_per_request is not None else "")
        print(f"Blocks:            {result.num_blocks:,} × {result.block_size} tokens{per_request}")
    if get_engine(result.engine).logs_kv_cache:
        print(f"vLLM would log:    {result.vllm_log}")
    print(f"Requests of {result.tokens:,} tokens that fit: {result.max_requests:,} per replica, "
          f"{result.max_requests_all_replicas:,} in all")
    print(f"Longest request at {plural(result.users, 'user')}: {result.max_tokens_per_request:,} tokens")
    if result.context_limit is not None:
        print(f"Model context limit: {result.context_limit:,} tokens (max_position_embeddings)")
    if result.fits:
        print("Fits.")
    else:
        print(f"Does NOT fit: {result.reason}.")
        if result.suggestion:
            print(f"Smallest change: {result.suggestion}.")
    for note in result.notes:
        print(f"  note: {note}")
    return status


def cmd_models(args: argparse.Namespace) -> int:
    from kvplan.presets import load_model, model_presets

    rows: list[dict[str, Any]] = []
    for preset_id, preset in model_presets().items():
        arch = load_model(preset_id)
        rows.append({"id": preset_id, "name": preset.name, "layers": arch.n_layers,
                     "kinds": arch.kind_counts(), "params_total": arch.params_total,
                     "params_active": arch.params_active})
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            kinds = ", ".join(f"{k} {v}" for k, v in row["kinds"].items())
            print(f"{row['id']:22s} {row['name']:26s} {row['params_total'] / 1e9:8.2f}B  {kinds}")
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from kvplan.presets import gpus

    if args.json:
        print(json.dumps([g.model_dump() for g in gpus().values()]))
        return 0
    for gpu in gpus().values():
        print(f"{gpu.id:16s} {gpu.name:32s} {gpu.capacity_bytes / GIB:8.2f} GiB "
              f"({gpu.capacity_bytes / 1e9:7.2f} GB)  {gpu.bandwidth_tbps:5.2f} TB/s  "
              f"{gpu.bf16_tflops:7.1f} TFLOPS")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from kvplan.report import write_report

    for path in write_report(args.scenario, Path(args.out), png=not args.no_png):
        print(path)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from kvplan.calibrate import MAX_LOG_BYTES, calibrate, parse_vllm_log
    from kvplan.capacity import FitQuery
    from kvplan.engines import log_engine
    from kvplan.presets import get_gpu

    if not get_engine(args.engine).logs_kv_cache:
        raise KVPlanError("calibrate.engine", why=f"engine '{args.engine}' is not vLLM")
    path = Path(args.log)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_LOG_BYTES + 1)
            size = path.stat().st_size if len(raw) > MAX_LOG_BYTES else len(raw)
    except OSError as exc:
        raise KVPlanError("file.missing", path=str(path), detail=exc.strerror or str(exc)) from None
    if size > MAX_LOG_BYTES:
        raise KVPlanError("calibrate.too_large", size=size, limit=MAX_LOG_BYTES)
    log = parse_vllm_log(raw)
    arch = _load_arch(args)
    gpu = get_gpu(args.gpu)
    query = FitQuery(tokens=args.tokens, kv_dtype=args.kv_dtype, weight_dtype=args.weight_dtype,
                     engine=engine_with_release(log_engine(), args.engine_version), tp=args.tp,
                     pp=args.pp, reserve_gib=args.reserve_gib,
                     settings=settings_from_args(args, tp=args.tp, pp=args.pp))
    result = calibrate(arch, gpu, query, log)
    if args.json:
        print(result.model_dump_json())
        return 0
    print(f"{result.model} on {gpu.name} (tp={result.tp}, pp={result.pp}) · vLLM · KV "
          f"{result.kv_dtype} · {result.tokens:,} tokens")

    def row(label: str, logged: object, predicted: object, reproduced: object) -> None:
        print(f"  {label:26s} {logged!s:>16s} {predicted!s:>16s} {reproduced!s:>16s}")

    def fmt(value, spec: str = ",") -> str:
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
    if result.suggested_reserve_gib is not None:
        print(f"Use --reserve-gib {result.suggested_reserve_gib:g} to plan like this run.")
    print(f"Agreement with the logged memory: {result.agreement.replace('_', ' ')} "
          f"(resolution: one block = {result.bytes_per_block:,} B)")
    for key, text in result.formulas.items():
        print(f"  {key}: {text}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0


COMMANDS = {"kv": cmd_kv, "fit": cmd_fit, "models": cmd_models, "gpus": cmd_gpus,
            "report": cmd_report, "calibrate": cmd_calibrate}


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
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "input"
        sys.stderr.write(f"kvplan: error: {where}: {first.get('msg', 'invalid value')}\n")
        return 2
