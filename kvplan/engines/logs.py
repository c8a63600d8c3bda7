"""What every engine's start-up log parser shares (``kvplan/engines/<engine>/log.py``): the record
base class ``StartupLog`` (``Engine.log_format``), the bounded text a log is read as, the number
patterns, and reading one number with its bounds and its declared type.

A number is written with optional thousands separators and decimals (``61.54``, ``469,536``); an
exponent (``1e309``), ``inf`` or ``nan`` is read too, so that a number no float holds is refused by
name (``calibrate.not_finite``) instead of the line not matching.
"""

from __future__ import annotations

import math
import re
import typing
from typing import ClassVar, Protocol

from pydantic import BaseModel

from kvplan.errors import KVPlanError, clip

#: Largest log accepted (bytes); the capacity lines come within the first seconds of a start-up.
MAX_LOG_BYTES = 1 << 20
GIB = 1 << 30

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
#: An exponent, or a non-finite word, after (or instead of) the digits: read, then refused by name.
_ODD = r"(?:[eE][+-]?\d+)?"
_NONFINITE = r"[-+]?(?:inf(?:inity)?|nan)\b"
INT = r"(" + _NONFINITE + r"|(?:\d{1,3}(?:,\d{3})+|\d+)" + _ODD + r")"
FLOAT = r"(" + _NONFINITE + r"|(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)" + _ODD + r")"
SIGNED = r"(" + _NONFINITE + r"|-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)" + _ODD + r")"
GIB_UNIT = r"\s*Gi?B"
_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")

#: The range of a number no engine-specific limit names.
OTHER_LOG_LIMITS = (-10**15, 10**15)


class StartupLog(BaseModel):
    """The numbers one engine's start-up log prints (``None``: not in the log); each engine's
    record subclasses it and reads a log with ``parse``."""

    #: Whether ``kvplan.calibrate`` compares this record with a plan (vLLM's: available memory,
    #: blocks, tokens and concurrency); the others are read, not compared yet.
    compared: ClassVar[bool] = False

    #: The engine version the log prints (its version line, e.g. ``0.11.0``; None: not printed).
    version: str | None = None
    #: The words the version was read from, as printed (shown when a release is chosen by it).
    version_line: str | None = None

    @classmethod
    def parse(cls, log: str | bytes) -> StartupLog:
        """Read a start-up log (named ``calibrate.*`` errors for logs that cannot be read)."""
        raise NotImplementedError


class PoolAnswer(Protocol):
    """What an engine's ``log_lines`` reads of a planned pool (``kvplan.capacity.FitResult``)."""

    @property
    def kv_pool_tokens(self) -> int: ...

    @property
    def tokens(self) -> int: ...

    @property
    def max_concurrency(self) -> float: ...


def number(field: str, text: str, kind: type, engine: str,
           limits: tuple[int, int] = OTHER_LOG_LIMITS) -> int | float:
    """One number of the log, within ``limits`` (digits are bounded before converting): an
    infinite or NaN value, or one past a 64-bit float (``1e309``) → ``calibrate.not_finite``;
    out of range, or a fraction in a whole-number field → ``calibrate.bad_value``; both name the
    field and the value."""
    low, high = limits
    digits = text.replace(",", "")
    value: int | float
    if _PLAIN.fullmatch(digits):
        value = kind(digits) if len(digits) <= 30 else math.inf
    else:
        value = float(digits)  # linear in the digits (the log is bounded)
        if not math.isfinite(value):
            raise KVPlanError("calibrate.not_finite", engine=engine, field=field, value=clip(text, 24),
                              low=low, high=high)
        if kind is int and not value.is_integer():
            value = math.inf  # refused below: a whole-number field
    if not low <= value <= high:
        raise KVPlanError("calibrate.bad_value", engine=engine, field=field, value=clip(text, 24),
                          low=low, high=high)
    return kind(value)


#: A version as engines print it: ``0.10.1.1``, ``v0.28.1rc1.dev563+gdc919e3f5``, ``1.1.0rc3``.
VERSION = r"v?(\d+\.\d+(?:\.\d+)*(?:[A-Za-z0-9.+-]*[A-Za-z0-9])?)"


def find_version(text: str, patterns: tuple[re.Pattern[str], ...]) -> tuple[str, str] | None:
    """The first version a log prints, by the first of ``patterns`` (each with one ``VERSION``
    group) that matches: ``(version, the words that say it)``; None: no version line."""
    for pattern in patterns:
        if m := pattern.search(text):
            return m.group(1), clip(m.group(0).strip(" \t█▀▄"), 200)
    return None


def version_number(version: str) -> tuple[int, ...]:
    """The release numbers of a printed version (``0.28.1rc1.dev563+g…`` → ``(0, 28, 1)``: a
    pre-release or development build is read as the release it leads to)."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in m.group(1).split(".")[:4]) if m else ()


def field_kind(model: type[BaseModel], field: str) -> type:
    """``int`` or ``float``: the type ``model`` declares for ``field`` (``int | None`` → int)."""
    return int if int in typing.get_args(model.model_fields[field].annotation) else float


def decimals(text: str) -> int:
    """Decimals a printed number has (``10.00`` → 2; ``1.5e-3`` → 4)."""
    mantissa, _, exponent = text.lower().partition("e")
    places = len(mantissa.split(".", 1)[1]) if "." in mantissa else 0
    return max(places - int(exponent or 0), 0)


def as_text(log: str | bytes) -> str:
    """The log as text without colour codes, bounded: too large, binary and empty inputs are
    refused with a message."""
    if isinstance(log, bytes | bytearray):
        if len(log) > MAX_LOG_BYTES:
            raise KVPlanError("calibrate.too_large", size=len(log), limit=MAX_LOG_BYTES)
        try:
            text = bytes(log).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KVPlanError("calibrate.not_text", detail=f"not UTF-8 at byte {exc.start:,}") from None
    else:
        text = str(log)
        if len(text) > MAX_LOG_BYTES or len(text.encode("utf-8", "replace")) > MAX_LOG_BYTES:
            raise KVPlanError("calibrate.too_large", size=len(text.encode("utf-8", "replace")),
                              limit=MAX_LOG_BYTES)
    if not text.strip():
        raise KVPlanError("calibrate.empty")
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\x1b") + text.count("\ufffd")
    if "\x00" in text or controls > max(8, len(text) // 20):
        raise KVPlanError("calibrate.not_text", detail="control bytes; paste the log as text")
    return ANSI.sub("", text)
