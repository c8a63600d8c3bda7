"""Hub ids (optional, online): ``config.json`` and safetensors headers of ``org/name``.

Uses ``huggingface_hub`` (an optional dependency): ``get_session`` for ``config.json`` and
``model.safetensors.index.json``, and ``HfApi.parse_safetensors_file_metadata`` for each
shard's header — HTTP range requests (``bytes=0-100000``, then the rest of the header), never the
tensor data (``huggingface_hub/hf_api.py`` ``get_safetensors_metadata``). ``HF_TOKEN`` and
``HF_ENDPOINT`` are read at call time. Offline, unreachable or unauthorised → one named
``KVPlanError``; nothing else changes.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kvplan.checkpoint import MAX_FILES, CheckpointSummary, TensorInfo, header_tensors, summarize
from kvplan.errors import KVPlanError, clip

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
TIMEOUT_S = 20.0


def check_repo_id(repo_id: str) -> str:
    repo_id = repo_id.strip()
    if not _REPO.match(repo_id) or ".." in repo_id:
        raise KVPlanError("hub.bad_id", repo=clip(repo_id))
    return repo_id


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise KVPlanError("hub.not_installed") from None
    return huggingface_hub


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _get(repo_id: str, filename: str, missing_ok: bool = False) -> bytes | None:
    """One file of the repo's main revision (``None`` when absent and ``missing_ok``)."""
    hub = _hub()
    url = hub.hf_hub_url(repo_id, filename, endpoint=_endpoint())
    headers = hub.utils.build_hf_headers(token=os.environ.get("HF_TOKEN") or None)
    try:
        response = hub.get_session().get(url, headers=headers, timeout=TIMEOUT_S)
    except Exception as exc:  # network layer (httpx/requests), offline mode
        raise KVPlanError("hub.unavailable", repo=clip(repo_id), detail=type(exc).__name__) from None
    if response.status_code in (401, 403):
        raise KVPlanError("hub.unauthorized", repo=clip(repo_id), detail=f"HTTP {response.status_code}")
    if response.status_code == 404:
        if missing_ok:
            return None
        raise KVPlanError("hub.unauthorized", repo=clip(repo_id),
                          detail=f"{clip(filename)}: HTTP 404 (missing, private or gated)")
    if response.status_code >= 400:
        raise KVPlanError("hub.unavailable", repo=clip(repo_id), detail=f"HTTP {response.status_code}")
    return bytes(response.content[:50_000_000])


def fetch_config(repo_id: str) -> dict[str, Any]:
    """``config.json`` of a Hub repo as a dict (parsed by ``config_import.load_config_text``)."""
    from kvplan.config_import import load_config_text

    raw = _get(check_repo_id(repo_id), "config.json")
    assert raw is not None
    return load_config_text(raw)


def fetch_headers(repo_id: str, n_layers: int | None = None) -> CheckpointSummary:
    """Every shard's safetensors header, grouped into parts (no tensor data is downloaded)."""
    repo_id = check_repo_id(repo_id)
    hub = _hub()
    index_raw = _get(repo_id, "model.safetensors.index.json", missing_ok=True)
    total = None
    if index_raw is None:
        files = ["model.safetensors"]
    else:
        from kvplan.checkpoint import read_index

        total, files = read_index(index_raw)
    api = hub.HfApi(endpoint=_endpoint(), token=os.environ.get("HF_TOKEN") or None)
    headers: dict[str, list[TensorInfo]] = {}
    for name in files[:MAX_FILES]:
        try:
            meta = api.parse_safetensors_file_metadata(repo_id, name, timeout=TIMEOUT_S)
        except Exception as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if status in (401, 403, 404):
                raise KVPlanError("hub.unauthorized", repo=clip(repo_id),
                                  detail=f"{clip(name)}: HTTP {status}") from None
            if type(exc).__name__ == "SafetensorsParsingError":
                raise KVPlanError("checkpoint.bad_file", path=clip(name),
                                  detail="header not parsable") from None
            raise KVPlanError("hub.unavailable", repo=clip(repo_id), detail=type(exc).__name__) from None
        raw = {tensor: {"dtype": info.dtype, "shape": list(info.shape),
                        "data_offsets": list(info.data_offsets)}
               for tensor, info in meta.tensors.items()}
        headers[name] = header_tensors(raw, name)
    return summarize(headers, n_layers, total)


def fetch(repo_id: str) -> tuple[dict[str, Any], CheckpointSummary | None, str | None]:
    """Config, checkpoint headers (None with the reason when they cannot be read) of a Hub id."""
    from kvplan.config_import import parse_config

    config = fetch_config(repo_id)
    arch = parse_config(config, name=repo_id)
    try:
        return config, fetch_headers(repo_id, arch.n_layers), None
    except KVPlanError as exc:
        return config, None, str(exc)


__all__ = ["check_repo_id", "fetch", "fetch_config", "fetch_headers"]
