"""Weights in the dashboard: checkpoint headers (upload), Hub ids, and the part-by-part comparison.

The checkpoint summary lives in ``st.session_state["_checkpoint"]`` (bytes per part, the source and
the model it belongs to); it never goes into the link. A Hub id's config becomes the custom config
(so it travels in the link like an uploaded one).
"""

from __future__ import annotations

import struct
from typing import Any

import pandas as pd
import streamlit as st

from kvplan.arch import ModelArch
from kvplan.checkpoint import CheckpointSummary, compare, parse_header, read_index, summarize
from kvplan.errors import KVPlanError, md
from kvplan.scenario import CUSTOM_MODEL, custom_arch
from kvplan.ui import lazy
from kvplan.ui.theme import exact_bytes, fmt_bytes
from kvplan.weights import PARTS, weights_per_gpu

#: Bytes read of each uploaded file: the header only (8 + N, bounded like ``checkpoint``).
MAX_UPLOAD_READ = 100_000_008
#: Files of one upload (the index and a shard header each: Llama-3.1-405B has 191 shards).
MAX_UPLOAD_FILES = 200
#: Header (and index) bytes parsed per upload: about 0.6 s of CPU at the worst (36,000 one-element
#: tensors per 2 MB parse in 0.3 s), so the rerun that reads them stays within the 1 s target
#: (bench/ "rerun, header upload at the limits").
MAX_UPLOAD_HEADER_BYTES = 4_000_000


def _store(summary: CheckpointSummary, source: str, model: str | None) -> None:
    st.session_state["_checkpoint"] = {"summary": summary, "source": source, "model": model}


def _upload_size(name: str, raw: bytes) -> int:
    """Bytes an upload costs to parse: an index all of it, a header its ``8 + N`` (what is there)."""
    if name.endswith(".json") or len(raw) < 8:
        return len(raw)
    return min(len(raw), 8 + struct.unpack("<Q", raw[:8])[0])


def read_uploads(files: list[Any]) -> tuple[dict[str, Any], int | None]:
    """Headers and the index total of one upload; more than ``MAX_UPLOAD_FILES`` files or
    ``MAX_UPLOAD_HEADER_BYTES`` bytes to parse are refused by name before anything is parsed."""
    if len(files) > MAX_UPLOAD_FILES:
        raise KVPlanError("checkpoint.too_many_uploads", count=f"{len(files):,}", limit=MAX_UPLOAD_FILES)
    raws = [(upload.name, upload.getvalue()[:MAX_UPLOAD_READ]) for upload in files]
    size = sum(_upload_size(name, raw) for name, raw in raws)
    if size > MAX_UPLOAD_HEADER_BYTES:
        raise KVPlanError("checkpoint.uploads_too_large", size=size, limit=MAX_UPLOAD_HEADER_BYTES)
    headers: dict[str, Any] = {}
    total = None
    for name, raw in raws:
        if name.endswith(".json"):
            total, _ = read_index(raw, name)
        else:
            headers[name] = parse_header(raw, name)
    return headers, total


def on_headers_upload() -> None:
    """``model.safetensors.index.json`` and/or ``*.safetensors`` files (or their first bytes)."""
    files = st.session_state.get("w_headers") or []
    try:
        headers, total = read_uploads(list(files))
        summary = summarize(headers, None, total) if headers or total is not None else None
    except KVPlanError as err:
        st.session_state["_weights_error"] = str(err)
        return
    if summary is None:
        st.session_state.pop("_checkpoint", None)
        return
    _store(summary, f"{len(files)} uploaded file(s)", None)
    st.session_state.pop("_weights_error", None)


def on_hub_fetch() -> None:
    """Fetch a Hub id's config.json (→ the custom model) and its safetensors headers."""
    repo = (st.session_state.get("w_hf_id") or "").strip()
    try:
        from kvplan.hub import fetch

        config, summary, problem = fetch(repo)
        custom_arch({**config, "name": repo})
    except KVPlanError as err:
        st.session_state["_weights_error"] = str(err)
        return
    st.session_state["custom_config"] = {**config, "name": repo}
    st.session_state["w_model"] = CUSTOM_MODEL
    st.session_state.pop("_weights_error", None)
    if summary is not None:
        _store(summary, f"Hub {repo}", repo)
    else:
        st.session_state.pop("_checkpoint", None)
        st.session_state["_weights_error"] = f"config.json read; headers not read: {problem}"


def render_inputs(sb: Any) -> None:
    """The sidebar's lazy expander (``kvplan.ui.lazy``): Hub id box and header upload."""
    with lazy.box(sb, "w_weights_box") as box:
        if not box.open:
            _show_error(sb)
            return
        st.text_input("Hugging Face Hub id", key="w_hf_id", placeholder="org/name",
                      help="Reads config.json and the safetensors headers with HTTP range requests "
                           "(optional package huggingface_hub; HF_TOKEN for gated repos, "
                           "HF_ENDPOINT for a mirror). Offline: one message, nothing else changes.")
        st.button("Fetch from the Hub", key="w_hf_go", on_click=on_hub_fetch)
        st.file_uploader("…or upload model.safetensors.index.json and safetensors headers",
                         type=["json", "safetensors"], accept_multiple_files=True, key="w_headers",
                         on_change=on_headers_upload,
                         help="Each .safetensors file may be cut after its header (the first "
                              "8 + N bytes): only the header is read.")
    _show_error(sb)


def _show_error(sb: Any) -> None:
    if st.session_state.get("_weights_error"):
        sb.error(md(st.session_state.pop("_weights_error")))


def format_texts(arch: ModelArch) -> tuple[str, str]:
    """The sidebar's weight-dtype help ("Checkpoint format: MXFP4 … experts + bf16 …, from
    config.json quantization_config.") and its "auto" option ("checkpoint: MXFP4 … + bf16 …")."""
    try:
        layout = weights_per_gpu(arch)
    except KVPlanError as err:
        return f"Checkpoint format not read: {err}.", "the checkpoint's own format"
    return (f"Checkpoint format: {layout.format_label}, from {layout.format_source}.",
            f"checkpoint: {layout.format_label}")


def comparison_frame(arch: ModelArch, weight_dtype: str | None) -> pd.DataFrame | None:
    """Checkpoint bytes vs the config estimate per part (None when no headers were given)."""
    stored = st.session_state.get("_checkpoint")
    if not stored:
        return None
    summary: CheckpointSummary = stored["summary"]
    estimate = weights_per_gpu(arch, weight_dtype).total_by_part
    table = compare(summary, estimate)
    rows = [{"part": part, "checkpoint_bytes": r["checkpoint"], "estimate_bytes": r["estimate"]}
            for part, r in table["parts"].items()]
    if summary.index_total is not None and not summary.bytes_by_part:
        rows.append({"part": "total (index metadata.total_size)", "checkpoint_bytes": summary.index_total,
                     "estimate_bytes": table["estimate_total"]})
    return pd.DataFrame(rows)


def render_comparison(arch: ModelArch, weight_dtype: str | None) -> None:
    frame = comparison_frame(arch, weight_dtype)
    if frame is None:
        return
    stored = st.session_state["_checkpoint"]
    with st.expander(f"Checkpoint headers ({md(stored['source'])}) vs the config estimate"):
        st.dataframe(frame, hide_index=True)
        total_c, total_e = int(frame["checkpoint_bytes"].sum()), int(frame["estimate_bytes"].sum())
        st.caption(f"Checkpoint {exact_bytes(total_c)} · estimate {exact_bytes(total_e)}"
                   + (f" · estimate / checkpoint = {total_e / total_c:.4f}" if total_c else ""))


def breakdown_help(breakdown: dict[str, int]) -> str:
    """Hover text of the weights card: exact bytes of each part on one GPU."""
    order = {p: i for i, p in enumerate(PARTS)}
    return " · ".join(f"{part} {exact_bytes(size)}" for part, size in
                      sorted(breakdown.items(), key=lambda kv: order.get(kv[0], 99)))


def breakdown_short(breakdown: dict[str, int]) -> str:
    return " + ".join(f"{part} {fmt_bytes(size)}" for part, size in breakdown.items())
