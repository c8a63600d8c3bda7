"""The Streamlit server the load tests drive (``tests/app_server.py``), and the RSS of its process
tree."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from app_server import served_app


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def tree_rss_bytes(pid: int) -> int:
    """RSS of the server process and its children (streamlit may spawn helpers, e.g. kaleido)."""
    total = rss_bytes(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        for child in children.read_text().split():
            with contextlib.suppress(FileNotFoundError, AssertionError):
                total += tree_rss_bytes(int(child))
    return total


@contextlib.contextmanager
def streamlit_app() -> Iterator[tuple[int, subprocess.Popen]]:
    """``app.py`` served on 127.0.0.1 by ``streamlit run`` (``app_server.served_app``); yields
    (port, process) once /_stcore/health answers."""
    with tempfile.TemporaryDirectory(prefix="kvplan-load-") as folder, \
            served_app(Path(folder) / "server.log", launcher=False, stop_timeout=20) as (url, proc):
        yield int(url.rsplit(":", 1)[1]), proc
