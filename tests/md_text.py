"""The text a Streamlit Markdown element shows for ``kvplan.errors.md`` output (shared by tests)."""

from __future__ import annotations

import re

#: A one-backtick code span (``md`` puts bare addresses in these) or one backslash escape.
_TOKEN = re.compile(r"`([^`]*)`|\\(.)")


def unmd(text: str) -> str:
    """Code spans show their content, ``\\x`` shows ``x``; everything else as it is."""
    return _TOKEN.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)


def outside_code(text: str) -> str:
    """The Markdown source with its code spans removed (where Markdown constructs could live);
    escapes are kept, so an escaped backtick does not open a span."""
    return _TOKEN.sub(lambda m: "" if m.group(1) is not None else m.group(0), text)
