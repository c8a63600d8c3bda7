"""Reading and writing the files a user names on the command line, bounded and with named errors.

``read_limited`` refuses anything that is not a regular file (``/dev/zero``, a FIFO, a directory
would otherwise hang or grow without bound) and reads at most ``limit + 1`` bytes, so a file that
grows while it is read cannot exceed the limit either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kvplan.errors import KVPlanError, clip

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_limited(path: str | Path, limit: int, too_large: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ``too_large`` is the message code
    (fields ``size``, ``limit``) for a bigger one. Non-blocking open: a FIFO never stalls it."""
    shown = clip(path, 200)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise KVPlanError("file.missing", path=shown, detail=exc.strerror or str(exc)) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise KVPlanError("file.not_regular", path=shown, kind=_kind(info.st_mode))
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit:
            raise KVPlanError(too_large, size=info.st_size, limit=limit)
        try:
            raw = handle.read(limit + 1)
        except OSError as exc:
            raise KVPlanError("file.missing", path=shown, detail=exc.strerror or str(exc)) from None
    if len(raw) > limit:
        raise KVPlanError(too_large, size=len(raw), limit=limit)
    return raw


def output_dir(path: str | Path) -> Path:
    """A directory to write into, created when missing; anything else is ``file.not_writable``."""
    out = Path(path)
    shown = clip(out, 200)
    try:
        if out.exists() and not out.is_dir():
            raise KVPlanError("file.not_directory", path=shown)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KVPlanError("file.not_writable", path=shown, detail=exc.strerror or str(exc)) from None
    return out


def write_file(path: Path, data: str | bytes) -> Path:
    """Write one output file; an OS refusal (read-only, /proc, full disk) is ``file.not_writable``."""
    try:
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
    except OSError as exc:
        raise KVPlanError("file.not_writable", path=clip(path, 200),
                          detail=exc.strerror or str(exc)) from None
    return path
