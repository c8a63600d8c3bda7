"""Hub ids (optional, online): ``config.json`` and safetensors headers of ``org/name``.

Uses ``huggingface_hub`` (an optional dependency) for its request headers
(``huggingface_hub/utils/_headers.py`` ``build_hf_headers``: user agent, the token) and reads, as
``HfApi.get_safetensors_metadata`` does (``huggingface_hub/hf_api.py``), ``config.json``,
``model.safetensors.index.json`` and each shard's header with HTTP range requests
(``bytes=0-100000``, then the rest of the header), never the tensor data. ``HF_TOKEN`` and
``HF_ENDPOINT`` are read at call time. Offline, unreachable or unauthorised → one named
``KVPlanError``; nothing else changes.

The repository's files are untrusted (``_Fetch``): shard names must be plain file names
(``checkpoint.shard_name``), at most ``MAX_SHARDS`` shards, ``checkpoint.MAX_READ_HEADER_BYTES``
per header and ``checkpoint.MAX_TOTAL_HEADER_BYTES`` in all, ``DEADLINE_S`` for the whole fetch;
the token goes only to the configured endpoint's host and port, on the first request — never to a
redirect's target (redirects are followed by hand, ``MAX_REDIRECTS`` at most, http(s) only).
"""

from __future__ import annotations

import os
import re
import struct
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from kvplan.checkpoint import (
    MAX_INDEX_BYTES,
    MAX_READ_HEADER_BYTES,
    MAX_TOTAL_HEADER_BYTES,
    CheckpointSummary,
    TensorInfo,
    parse_header,
    read_index,
    summarize,
)
from kvplan.errors import KVPlanError, clip

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
#: Seconds one request may wait for the server.
TIMEOUT_S = 20.0
#: Seconds one whole fetch (config, index and every header) may take.
DEADLINE_S = 120.0
#: Shards of one index (the largest public checkpoints have a few hundred: Llama-3.1-405B 191).
MAX_SHARDS = 512
MAX_REDIRECTS = 5
#: The first range request of a header (``huggingface_hub`` ``get_safetensors_metadata``).
FIRST_RANGE = 100_000
MAX_CONFIG_FETCH = 2_000_000


def check_repo_id(repo_id: str) -> str:
    repo_id = repo_id.strip()
    if not _REPO.match(repo_id) or ".." in repo_id:
        raise KVPlanError("hub.bad_id", repo=clip(repo_id))
    return repo_id


def _hub() -> Any:
    try:
        import huggingface_hub
        from huggingface_hub import constants, utils
    except ImportError:
        raise KVPlanError("hub.not_installed") from None
    return huggingface_hub, utils, constants


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are returned, not followed (``_Fetch.get`` follows them without the token)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Fetch:
    """One bounded fetch of a repository: a deadline, the token only on first requests to the
    endpoint's own host."""

    def __init__(self, repo_id: str) -> None:
        _, utils, constants = _hub()
        if getattr(constants, "HF_HUB_OFFLINE", False):
            raise KVPlanError("hub.unavailable", repo=clip(repo_id), detail="HF_HUB_OFFLINE is set")
        self.repo = repo_id
        self.endpoint = _endpoint()
        self.host = urlsplit(self.endpoint).netloc.lower()
        headers = utils.build_hf_headers(token=os.environ.get("HF_TOKEN") or None)
        self.token = headers.pop("authorization", None)
        self.headers = headers
        self.deadline = time.monotonic() + DEADLINE_S
        self.opener = urllib.request.build_opener(_NoRedirect)
        self.requests = 0

    def url(self, filename: str) -> str:
        return f"{self.endpoint}/{self.repo}/resolve/main/{quote(filename)}"

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise KVPlanError("hub.timeout", repo=clip(self.repo), limit=f"{DEADLINE_S:g}")
        return left

    def get(self, filename: str, limit: int, byte_range: tuple[int, int] | None = None,
            missing_ok: bool = False) -> bytes | None:
        """At most ``limit`` bytes of one file (``None`` when absent and ``missing_ok``)."""
        url = self.url(filename)
        for hop in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                raise KVPlanError("hub.unavailable", repo=clip(self.repo),
                                  detail=f"{clip(filename)}: redirect to a non-HTTP address")
            headers = dict(self.headers)
            if byte_range is not None:
                headers["range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
            if hop == 0 and self.token and parts.netloc.lower() == self.host:
                headers["authorization"] = self.token
            request = urllib.request.Request(url, headers=headers)
            self.requests += 1
            try:
                response = self.opener.open(request, timeout=min(TIMEOUT_S, self._left()))
                status = response.status
            except urllib.error.HTTPError as exc:
                response, status = exc, exc.code
            except KVPlanError:
                raise
            except Exception as exc:  # network layer: refused, DNS, TLS, timeout
                self._left()  # a timeout at the deadline is the deadline's
                raise KVPlanError("hub.unavailable", repo=clip(self.repo),
                                  detail=type(exc).__name__) from None
            with response:
                if status in (301, 302, 303, 307, 308) and response.headers.get("location"):
                    url = urljoin(url, response.headers["location"])
                    continue
                if status in (401, 403):
                    raise KVPlanError("hub.unauthorized", repo=clip(self.repo), detail=f"HTTP {status}")
                if status == 404:
                    if missing_ok:
                        return None
                    raise KVPlanError("hub.unauthorized", repo=clip(self.repo),
                                      detail=f"{clip(filename)}: HTTP 404 (missing, private or gated)")
                if status >= 300:
                    raise KVPlanError("hub.unavailable", repo=clip(self.repo), detail=f"HTTP {status}")
                return self._read(response, limit)
        raise KVPlanError("hub.unavailable", repo=clip(self.repo),
                          detail=f"{clip(filename)}: more than {MAX_REDIRECTS} redirects")

    def _read(self, response: Any, limit: int) -> bytes:
        """The body, at most ``limit`` bytes, in chunks so a slow server meets the deadline."""
        chunks: list[bytes] = []
        size = 0
        try:
            while size < limit:
                self._left()
                chunk = response.read(min(1 << 16, limit - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except KVPlanError:
            raise
        except Exception as exc:
            self._left()
            raise KVPlanError("hub.unavailable", repo=clip(self.repo), detail=type(exc).__name__) from None
        return b"".join(chunks)

    def header(self, name: str, left: int) -> tuple[list[TensorInfo], int]:
        """One shard's header (two range requests at most) and its ``8 + N`` bytes; ``N`` bounded
        by ``MAX_READ_HEADER_BYTES`` and by ``left`` (the fetch's remaining header budget)."""
        first = self.get(name, FIRST_RANGE + 1, (0, FIRST_RANGE))
        assert first is not None
        if len(first) < 8:
            raise KVPlanError("checkpoint.bad_file", path=clip(name), detail="shorter than 8 bytes")
        (size,) = struct.unpack("<Q", first[:8])
        if size > MAX_READ_HEADER_BYTES:
            raise KVPlanError("hub.header_too_large", repo=clip(self.repo), name=clip(name), size=size,
                              limit=MAX_READ_HEADER_BYTES)
        if 8 + size > left:
            raise KVPlanError("checkpoint.headers_too_large", limit=MAX_TOTAL_HEADER_BYTES)
        raw = first[:8 + size]
        if len(raw) < 8 + size:
            rest = self.get(name, 8 + size - len(raw), (len(raw), 8 + size - 1))
            raw += rest or b""
        return parse_header(raw, name), 8 + size


def fetch_config(repo_id: str, session: _Fetch | None = None) -> dict[str, Any]:
    """``config.json`` of a Hub repo as a dict (parsed by ``config_import.load_config_text``)."""
    from kvplan.config_import import load_config_text

    session = session or _Fetch(check_repo_id(repo_id))
    raw = session.get("config.json", MAX_CONFIG_FETCH + 1)
    assert raw is not None
    return load_config_text(raw)


def fetch_headers(repo_id: str, n_layers: int | None = None,
                  session: _Fetch | None = None) -> CheckpointSummary:
    """Every shard's safetensors header, grouped into parts (no tensor data is downloaded)."""
    session = session or _Fetch(check_repo_id(repo_id))
    index_raw = session.get("model.safetensors.index.json", MAX_INDEX_BYTES, missing_ok=True)
    total = None
    if index_raw is None:
        files = ["model.safetensors"]
    else:
        total, files = read_index(index_raw)
        if len(files) > MAX_SHARDS:
            raise KVPlanError("hub.too_many_shards", repo=clip(session.repo), count=f"{len(files):,}",
                              limit=MAX_SHARDS)
    headers: dict[str, list[TensorInfo]] = {}
    left = MAX_TOTAL_HEADER_BYTES
    for name in files:
        headers[name], used = session.header(name, left)
        left -= used
    return summarize(headers, n_layers, total)


def fetch(repo_id: str) -> tuple[dict[str, Any], CheckpointSummary | None, str | None]:
    """Config, checkpoint headers (None with the reason when they cannot be read) of a Hub id."""
    from kvplan.config_import import parse_config

    session = _Fetch(check_repo_id(repo_id))
    config = fetch_config(repo_id, session)
    arch = parse_config(config, name=repo_id)
    try:
        return config, fetch_headers(repo_id, arch.decoder_layers, session), None
    except KVPlanError as exc:
        return config, None, str(exc)


__all__ = ["check_repo_id", "fetch", "fetch_config", "fetch_headers"]
