"""Run the CLI in-process and capture what a user would see (shared by the CLI test modules)."""

from __future__ import annotations

import contextlib
import io

from kvplan.cli import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``python -m kvplan *argv``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()
