"""Model presets by Hub repo id: the lookup, the refusal of unknown ids, ``kvplan models`` and
``fit --model <hub id>`` over every preset (offline). Each preset's weights against its
safetensors index ``metadata.total_size``: tests/test_checkpoint_index.py."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli

from kvplan.catalogue import format_family, model_rows
from kvplan.cli import main
from kvplan.config_import import parse_config
from kvplan.engines import get_engine
from kvplan.errors import KVPlanError
from kvplan.presets import find_preset, load_model, model_presets
from kvplan.weights import weights_per_gpu

HUB_IDS = sorted(p.hf_repo for p in model_presets().values())


def test_hub_ids_are_unique_and_resolve_case_insensitively():
    table = model_presets()
    assert len(HUB_IDS) == len(set(h.lower() for h in HUB_IDS)) == len(table)
    assert find_preset("Qwen/Qwen3-8B") is find_preset("qwen/QWEN3-8b") is find_preset("qwen3-8b")
    assert find_preset("OPENAI/gpt-oss-20b").id == "gpt-oss-20b"
    assert "META-LLAMA/llama-3.1-8b" in table and "meta-llama/Llama-3.1-9B" not in table
    assert load_model("Qwen/Qwen3-8B") is load_model("qwen3-8b")


def test_search_finds_a_preset_by_any_part_of_its_id():
    assert [p.hf_repo for p in model_presets().search("gpt-oss")] == ["openai/gpt-oss-120b",
                                                                      "openai/gpt-oss-20b"]
    assert {p.hf_repo for p in model_presets().search("MIXTRAL")} == {"mistralai/Mixtral-8x7B-v0.1",
                                                                     "mistralai/Mixtral-8x22B-v0.1"}


def test_unknown_id_is_refused_with_the_closest_presets_and_the_ways_to_supply_a_model():
    with pytest.raises(KVPlanError) as err:
        find_preset("Qwen/Qwen3-8B-Instrukt")
    text = str(err.value)
    assert err.value.code == "unknown.model"
    assert "did you mean Qwen/Qwen3-8B" in text
    for way in ("paste or upload", "--config", "--checkpoint DIR", "--hf-id"):
        assert way in text


def test_misspelt_id_exits_2_with_did_you_mean():
    code, out, message = run_cli(["fit", "--model", "meta-llama/Llama-3.1-8", "--gpu", "h100-sxm",
                                  "--tokens", "1024"])
    assert (code, out, message.count("\n")) == (2, "", 1)
    assert message.startswith("kvplan: error: no preset is the checkpoint 'meta-llama/Llama-3.1-8'")
    assert "did you mean meta-llama/Llama-3.1-8B" in message


def test_models_json_rows(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == sorted(HUB_IDS, key=str.lower)
    llama = next(r for r in rows if r["id"] == "meta-llama/Llama-3.1-8B")
    # 8,030,261,248 bf16 parameters, as transformers counts them (test_param_counts)
    assert (llama["alias"], llama["family"], llama["format"], llama["params_total"],
            llama["weights_bytes"], llama["context_length"]) == (
        "llama-3.1-8b", "Llama-3.1", "bf16", 8_030_261_248, 2 * 8_030_261_248, 131_072)
    oss = next(r for r in rows if r["id"] == "openai/gpt-oss-20b")
    assert oss["format"] == "mxfp4"


@pytest.mark.parametrize("hub_id", HUB_IDS)
def test_fit_by_hub_id_works_offline_for_every_preset(hub_id, capsys):
    """``kvplan fit --model <hub id>`` (an upper-cased id, to hold the case rule too) gives the
    preset's weights: the JSON's whole-model weights are ``weights_per_gpu``'s at TP 1, in the
    dtype vLLM runs the model in (a float32 checkpoint — allenai/OLMo-2-1124-13B — in bf16:
    ``Vllm.model_dtype``, vLLM's ``_resolve_auto_dtype``; every other preset as stored)."""
    assert main(["fit", "--model", hub_id.upper(), "--gpu", "b200", "--tokens", "1024",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    arch = load_model(hub_id)
    runs_in = get_engine("vllm").model_dtype(arch)
    expected = weights_per_gpu(arch, None if runs_in == arch.model_dtype else runs_in)
    assert out["weights_total_bytes"] == expected.total_bytes


def test_index_sources_are_named():
    for preset in model_presets().values():
        if preset.index_total_size:
            assert preset.index_source.startswith("https://"), preset.hf_repo


def test_rows_cover_every_preset():
    assert len(model_rows(get_engine("vllm"))) == len(model_presets())


def test_presets_readme_table_is_the_catalogue():
    """``presets/README.md``'s model table is ``markdown_table(model_rows(vLLM))`` (regenerate it
    with that function when a preset changes)."""
    from kvplan.catalogue import TABLE_END, TABLE_START, markdown_table
    from kvplan.presets import PRESETS_DIR

    text = (PRESETS_DIR / "README.md").read_text()
    table = text[text.index(TABLE_START):text.index(TABLE_END) + len(TABLE_END)]
    assert table == markdown_table(model_rows(get_engine("vllm")))


def test_hf_quant_config_is_read_as_the_quantization_config():
    """nvidia/Llama-3.1-70B-Instruct-FP8 keeps its format in hf_quant_config.json (ModelOpt 0.23:
    quant_algo FP8, exclude_modules ['lm_head']); config.json has no quantization_config. vLLM's
    ``get_config`` reads the file as the quantization_config. Stored bytes: every linear of the 80
    layers FP8 (68,451,041,280 parameters − embeddings and head: 70,553,706,496 − 2 × 128,256 ×
    8,192 − 161 × 8,192 norms) at 1 B, plus an fp32 weight scale and input scale per module (80 × 7
    × 2 × 4 B = 4,480 B), bf16 embeddings + lm_head 2 × 1,050,673,152 × 2 B and norms 1,318,912 × 2
    B: 72,656,376,192 B."""
    preset = find_preset("nvidia/llama-3.1-70b-instruct-fp8")
    assert "quantization_config" not in preset.config and preset.hf_quant_config is not None
    layout = weights_per_gpu(load_model(preset.id))
    assert layout.total_bytes == 68_451_041_280 + 4_480 + 4 * 1_050_673_152 + 2 * 1_318_912
    assert layout.total_bytes == 72_656_376_192
    assert layout.format_label.startswith("FP8 (e4m3, ModelOpt per-tensor scales) attention, mlp")


def test_the_block_fp8_checkpoint_named_in_issue_25_is_sized_as_stored():
    """Qwen/Qwen3-235B-A22B-FP8 (block 128×128 FP8, the checkpoint the issue's logs served): its
    weights are half the bf16 release's plus one fp32 scale per block, not ×1.94 of them."""
    fp8 = weights_per_gpu(load_model("Qwen/Qwen3-235B-A22B-FP8"))
    bf16 = weights_per_gpu(load_model("Qwen/Qwen3-235B-A22B"))
    assert fp8.format_label.startswith("FP8 (e4m3, 128×128 blocks) attention, experts")
    assert (fp8.total_bytes, bf16.total_bytes) == (236_445_455_360, 470_187_269_120)


def test_four_presets_equal_their_index_to_the_byte():
    """The stored bytes kvplan lists part by part equal ``metadata.total_size`` exactly for the
    presets whose index total was found: gpt-oss-20b (MXFP4 experts with one e8m0 scale per 32
    values, everything else bf16, as stored) 13,761,264,768; gpt-oss-120b 65,248,815,744;
    Qwen3-8B 16,381,470,720 and Llama-3.1-8B 16,060,522,496 (bf16: 2 B per parameter,
    8,190,735,360 and 8,030,261,248)."""
    totals = {p: weights_per_gpu(load_model(p)).total_bytes
              for p in ("gpt-oss-20b", "gpt-oss-120b", "qwen3-8b", "llama-3.1-8b")}
    assert totals == {p: model_presets()[p].index_total_size for p in totals}
    assert totals["qwen3-8b"] == 2 * 8_190_735_360 and totals["llama-3.1-8b"] == 2 * 8_030_261_248


def test_a_link_may_name_the_model_by_hub_id():
    """``m=`` takes a Hub id in any case: the link check keeps the preset's link id (so links and
    the model box agree); a misspelt id falls back to the default with a warning naming the
    closest presets."""
    from kvplan.scenario import Scenario, check_names

    checked, warnings = check_names(Scenario(model="QWEN/qwen3-235b-a22b-FP8"))
    assert (checked.model, warnings) == ("Qwen/Qwen3-235B-A22B-FP8", [])
    checked, warnings = check_names(Scenario(model="meta-llama/LLAMA-3.1-8B"))
    assert (checked.model, warnings) == ("llama-3.1-8b", [])
    checked, warnings = check_names(Scenario(model="Qwen/Qwen3-8B-Instrukt"))
    assert checked.model == Scenario().model and len(warnings) == 1
    assert "did you mean Qwen/Qwen3-8B" in warnings[0]


def test_format_family_is_read_from_the_quantization_config():
    """``catalogue.format_family``: the family of a checkpoint's fewest-bits stored format, from its
    own quantization_config (issue #25's counts): block-FP8 Qwen3, ModelOpt NVFP4, gpt-oss's MXFP4
    experts, Kimi-K2.5's compressed-tensors int4 experts (W4A16), none for bf16; a GPTQ block, an
    INT8 W8A8 compressed-tensors group and AutoRound int4 on a bf16 preset's config."""
    assert format_family(load_model("Qwen/Qwen3-30B-A3B-FP8")) == "FP8"
    assert format_family(load_model("nvidia/Qwen3-32B-NVFP4")) == "NVFP4"
    assert format_family(load_model("gpt-oss-20b")) == "MXFP4"
    assert format_family(load_model("moonshotai/Kimi-K2.5")) == "AWQ/GPTQ/W4A16"
    assert format_family(load_model("llama-3.1-8b")) is None
    base = model_presets()["llama-3.1-8b"].config

    def family(quant: dict) -> str | None:
        return format_family(parse_config({**base, "quantization_config": quant}))

    assert family({"quant_method": "gptq", "bits": 4, "group_size": 128}) == "AWQ/GPTQ/W4A16"
    assert family({"quant_method": "awq", "bits": 4, "group_size": 128}) == "AWQ/GPTQ/W4A16"
    assert family({"quant_method": "auto-round", "bits": 4, "group_size": 128}) == "INT4 other"
    assert family({"quant_method": "fbgemm_fp8"}) == "FP8"
    w8a8 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}},
        "ignore": ["lm_head"]}
    assert family(w8a8) == "W8A8"
    w4a16 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                           "group_size": 128}}}}
    assert family(w4a16) == "AWQ/GPTQ/W4A16"
