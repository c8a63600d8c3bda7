"""The dashboard served on a free loopback port for the browser and load tests: started, waited
for until ``/_stcore/health`` answers "ok", stopped after (one mechanism for both suites)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
FLAGS = ["--server.headless=true", "--server.address=127.0.0.1", "--browser.gatherUsageStats=false",
         "--server.fileWatcherType=none"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served_app(log: Path, *, launcher: bool, env: Mapping[str, str] | None = None,
               stop_timeout: float = 15) -> Iterator[tuple[str, subprocess.Popen]]:
    """``app.py`` served on 127.0.0.1 — through ``kvplan.ui.launch`` as ``./dev app`` serves it
    (``launcher``) or by ``streamlit run`` — with its output in ``log``; yields (url, process) once
    healthy, fails the test with the log's tail if it exits or stays silent for 60 s."""
    if not APP.exists():
        pytest.skip("app.py not written yet")
    port = free_port()
    command = ([sys.executable, "-m", "kvplan.ui.launch"] if launcher
               else [sys.executable, "-m", "streamlit", "run", str(APP)])
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([*command, *FLAGS, f"--server.port={port}"], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env=None if env is None else dict(env))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.read().strip() == b"ok":
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer /_stcore/health:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
