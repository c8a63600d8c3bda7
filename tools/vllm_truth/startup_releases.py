"""What each vLLM release does at start-up when ``max_num_seqs`` exceeds a hybrid's Mamba state
blocks, from each release's own code → ``tests/fixtures/vllm_truth/startup_releases.json``
(dev-time only). ``tests/test_vllm_startup_releases.py`` compares kvplan's
``VllmRelease.state_block_check`` and ``vllm_startup_check`` with every case.

``python tools/vllm_truth/startup_releases.py [--src X=DIR ...]`` (no vLLM install: the source is read
from each release's wheel, ``pip download vllm==X --no-deps``, or from ``DIR`` holding its unpacked
``vllm/`` tree; ``tools/vllm_truth/kv_dtype_auto.py`` ``release_sources`` does the reading).

Executed as is, per release (the statements' source text, nothing else of vLLM imported):

* ``config/compilation.py`` ``CompilationConfig.resolve_cudagraph_mode_and_sizes``: the ``if`` whose
  test reads ``kv_cache_config.has_mamba_layers`` and whose body raises "max_num_seqs (N) exceeds
  available Mamba cache blocks (M)" (v0.20.0+), run on ``kv_cache_config`` (``num_blocks``,
  ``has_mamba_layers``), ``max_num_reqs``, FULL decode graphs, not profiling;
* ``CompilationConfig.adjust_cudagraph_sizes_for_mamba_cache`` (v0.18–v0.19), run on the capture
  sizes, after checking that ``v1/worker/gpu_model_runner.py`` calls it with ``num_blocks`` under
  ``has_full_cudagraphs()``;
* neither in the release: recorded as no check, with whether ``layers/mamba/ops/causal_conv1d.py``
  still asserts ``num_cache_lines >= batch`` (the failure a FULL decode capture above ``num_blocks``
  meets, issue #34094).

Written here: the inputs — block counts, ``max_num_seqs`` and the capture sizes (kvplan's
``memory.capture_sizes`` for the release's record and 8,192 batched tokens: what
``_set_cudagraph_sizes`` gives is compared elsewhere; the check only filters them).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kv_dtype_auto  # noqa: E402

from kvplan.engines.vllm.memory import capture_sizes  # noqa: E402
from kvplan.engines.vllm.releases import VLLM_RELEASES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fixtures/vllm_truth/startup_releases.json"
COMPILATION = "vllm/config/compilation.py"
RUNNER = "vllm/v1/worker/gpu_model_runner.py"
CONV = "vllm/model_executor/layers/mamba/ops/causal_conv1d.py"
#: One release of each record with a FULL-graph default (v0.11.0+), oldest first.
RELEASES = ("0.11.0", "0.13.0", "0.17.1", "0.19.1", "0.20.0", "0.24.0", "0.27.0", "0.29.0", "0.32.0",
            "0.33.0")
BLOCKS = (83, 333, 1667)
SEQS = (256, 1024)
MNBT = 8192


def sources(version: str, src: dict[str, Path], cache: Path) -> dict[str, str]:
    files = (COMPILATION, RUNNER, CONV)
    saved = kv_dtype_auto.TORCH_UTILS, kv_dtype_auto.CONVERTOR, kv_dtype_auto.ARG_UTILS
    kv_dtype_auto.TORCH_UTILS, kv_dtype_auto.CONVERTOR, kv_dtype_auto.ARG_UTILS = files
    try:
        return kv_dtype_auto.release_sources(version, src, cache)
    finally:
        kv_dtype_auto.TORCH_UTILS, kv_dtype_auto.CONVERTOR, kv_dtype_auto.ARG_UTILS = saved


def _method(text: str, name: str) -> ast.FunctionDef | None:
    cls = next(n for n in ast.parse(text).body
               if isinstance(n, ast.ClassDef) and n.name == "CompilationConfig")
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def raise_check(text: str) -> Any:
    """The release's own ``if … has_mamba_layers …: raise ValueError(…)`` as a function, or None."""
    method = _method(text, "resolve_cudagraph_mode_and_sizes")
    if method is None:
        return None
    for node in ast.walk(method):
        if (isinstance(node, ast.If) and "has_mamba_layers" in ast.unparse(node.test)
                and any(isinstance(b, ast.Raise) for b in node.body)):
            body = textwrap.indent(ast.unparse(node), "    ")
            code = f"def check(kv_cache_config, max_num_reqs, cudagraph_mode, is_profiling):\n{body}\n"
            scope: dict[str, Any] = {}
            exec(compile(code, f"{COMPILATION}:{node.lineno}", "exec"), scope)  # noqa: S102
            return scope["check"], node.lineno
    return None


def cap_check(files: dict[str, str]) -> Any:
    """``adjust_cudagraph_sizes_for_mamba_cache`` (the release's source) and its call site, or None."""
    method = _method(files[COMPILATION], "adjust_cudagraph_sizes_for_mamba_cache")
    if method is None:
        return None
    runner = files.get(RUNNER, "")
    call = runner.find("adjust_cudagraph_sizes_for_mamba_cache(")
    assert call > 0 and "has_full_cudagraphs()" in runner[call - 600:call], "call site moved"
    assert "num_blocks" in runner[call:call + 120]
    scope: dict[str, Any] = {"logger": SimpleNamespace(warning=lambda *a, **k: None)}
    exec(compile(textwrap.dedent(ast.unparse(method)), f"{COMPILATION}:{method.lineno}", "exec"), scope)  # noqa: S102
    return scope["adjust_cudagraph_sizes_for_mamba_cache"], method.lineno


def record_for(version: str):
    key = tuple(int(x) for x in version.split("."))
    chosen = None
    for record in VLLM_RELEASES:
        if tuple(int(x) for x in record.since.split(".")) <= key:
            chosen = record
    assert chosen is not None
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", default=[], help="X=DIR: an unpacked vllm/ tree")
    args = parser.parse_args()
    src = {k: Path(v) for k, v in (s.split("=", 1) for s in args.src)}
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for version in RELEASES:
            files = sources(version, src, Path(tmp))
            record = record_for(version)
            raising, capping = raise_check(files[COMPILATION]), cap_check(files)
            kind = "raise" if raising else "cap" if capping else "none"
            conv_assert = "num_cache_lines >= batch" in files.get(CONV, "")
            for blocks in BLOCKS:
                for seqs in sorted({*SEQS, blocks, blocks + 1}):
                    sizes = capture_sizes(record.capture_rule, seqs, MNBT)
                    case = {"version": version, "record": record.key, "check": kind, "num_blocks": blocks,
                            "max_num_seqs": seqs, "capture_sizes": sizes, "conv_assert": conv_assert}
                    if raising:
                        check, line = raising
                        kv = SimpleNamespace(num_blocks=blocks, has_mamba_layers=True)
                        mode = SimpleNamespace(has_full_cudagraphs=lambda: True)
                        try:
                            check(kv, seqs, mode, False)
                            case.update(starts=True, error="")
                        except ValueError as exc:
                            case.update(starts=False, error=str(exc))
                        case["source"] = f"{COMPILATION}:{line}"
                    elif capping:
                        adjust, line = capping
                        cfg = SimpleNamespace(cudagraph_capture_sizes=list(sizes),
                                              max_cudagraph_capture_size=sizes[-1] if sizes else None)
                        adjust(cfg, blocks)
                        case.update(starts=True, kept_sizes=cfg.cudagraph_capture_sizes,
                                    max_capture=cfg.max_cudagraph_capture_size,
                                    source=f"{COMPILATION}:{line}")
                    else:
                        case.update(source=f"{CONV} (no check in {COMPILATION})")
                    cases.append(case)
            print(version, record.key, kind, conv_assert, flush=True)
    out = {"generator": "tools/vllm_truth/startup_releases.py", "releases": list(RELEASES),
           "max_num_batched_tokens": MNBT, "cases": cases}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
