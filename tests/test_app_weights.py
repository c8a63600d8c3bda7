"""The dashboard's weights: format and source shown, KPI split by part, chart stacked by part,
and a Hub id fetched from a local Hub-like server (no internet)."""

from __future__ import annotations

import logging

from test_app import make_app, metric, no_errors, open_boxes, unmd
from test_checkpoint import gpt_oss_tensors, hub  # noqa: F401  (hub is a fixture)

from kvplan.capacity import FitQuery, fit
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model
from kvplan.ui.data import memory_per_gpu

logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)


def test_weights_card_names_the_format_and_splits_by_part():
    """gpt-oss-120b: the card says MXFP4 experts + bf16 …, from quantization_config; the hover
    lists each part's exact bytes (experts 61,206,036,480 B on one H100: vLLM's Triton MXFP4
    layout, ``tests/test_weights.py``)."""
    at = make_app(m="gpt-oss-120b", g="h100-sxm")
    no_errors(at)
    card = metric(at, "Weights per GPU")
    assert "experts 61,206,036,480 B" in card.help
    how = unmd(next(line for c in at.caption for line in c.value.split("  \n")
                    if line.startswith("How, Weights per GPU: MXFP4")))
    assert "from config.json quantization_config (quant_method mxfp4)" in how
    wd = at.sidebar.selectbox(key="w_wd")
    assert unmd(wd.help).startswith("Checkpoint format: MXFP4")
    assert wd.options[0].startswith("auto (checkpoint: MXFP4")


def test_weight_dtype_override_changes_the_card():
    at = make_app(m="gpt-oss-120b", g="h100-sxm", wd="bf16")
    no_errors(at)
    bf16 = fit(make_plan(load_model("gpt-oss-120b"), get_gpu("h100-sxm"), FitQuery(weight_dtype="bf16")))
    assert f"exactly {bf16.weights_bytes:,} B" in metric(at, "Weights per GPU").help


def test_memory_chart_data_stacks_weight_parts():
    """Per accelerator the weight parts add up to the weights per GPU."""
    asked = FitQuery(tokens=4096, tp=8, num_gpus=8)
    frame = memory_per_gpu(make_plan(load_model("deepseek-v3"), None, asked))
    ok = frame[frame["error"] == ""]
    parts = [c for c in ok.columns if c.startswith("weights_") and c != "weights_bytes"]
    assert {"weights_experts_bytes", "weights_attention_bytes", "weights_router_bytes"} <= set(parts)
    assert (ok[parts].fillna(0).sum(axis=1) == ok["weights_bytes"]).all()


def test_hub_id_box_loads_config_and_headers(hub):  # noqa: F811
    at = open_boxes(make_app(g="h100-sxm"), "w_weights_box")
    at.sidebar.text_input(key="w_hf_id").input("org/tiny")
    at.sidebar.button(key="w_hf_go").click()
    at.run()
    no_errors(at)
    assert at.query_params["m"] == "custom" and "c" in at.query_params
    table = next(df.value for df in at.dataframe if "checkpoint_bytes" in df.value.columns)
    assert int(table["checkpoint_bytes"].sum()) == sum(t.nbytes for t in gpt_oss_tensors().values())
    assert (table["checkpoint_bytes"] == table["estimate_bytes"]).all()


def test_hub_offline_is_one_error_and_the_page_stays(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    at = open_boxes(make_app(m="llama-3.1-8b", g="h100-sxm"), "w_weights_box")
    at.sidebar.text_input(key="w_hf_id").input("org/tiny")
    at.sidebar.button(key="w_hf_go").click()
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] and "could not be reached" in at.error[0].value
    assert at.session_state["w_model"] == "llama-3.1-8b"


class _Upload:
    def __init__(self, name: str, data: bytes) -> None:
        self.name, self._data = name, data

    def getvalue(self) -> bytes:
        return self._data


def test_uploaded_headers_cut_after_the_header_give_the_exact_bytes(tmp_path, monkeypatch):
    """Uploads of the index and of each shard's first 8 + N bytes (no tensor data): the table's
    checkpoint column equals the arrays' bytes and the estimate per part."""
    import struct
    import types

    from test_checkpoint import GPT_OSS, write_checkpoint

    from kvplan.config_import import parse_config
    from kvplan.ui import weights_view

    folder = write_checkpoint(tmp_path / "c", GPT_OSS, gpt_oss_tensors(), shards=2)
    uploads = [_Upload("model.safetensors.index.json",
                       (folder / "model.safetensors.index.json").read_bytes())]
    for path in sorted(folder.glob("*.safetensors")):
        raw = path.read_bytes()
        (size,) = struct.unpack("<Q", raw[:8])
        uploads.append(_Upload(path.name, raw[: 8 + size]))
    fake = types.SimpleNamespace(session_state={"w_headers": uploads})
    monkeypatch.setattr(weights_view, "st", fake)
    weights_view.on_headers_upload()
    frame = weights_view.comparison_frame(parse_config(GPT_OSS, name="x"), None)
    assert frame is not None and "_weights_error" not in fake.session_state
    assert int(frame["checkpoint_bytes"].sum()) == sum(t.nbytes for t in gpt_oss_tensors().values())
    assert (frame["checkpoint_bytes"] == frame["estimate_bytes"]).all()
    assert fake.session_state["_checkpoint"]["summary"].index_total == int(frame["checkpoint_bytes"].sum())
