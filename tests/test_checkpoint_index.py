"""Every preset's weights as stored against its safetensors index ``metadata.total_size``.

The totals and their sources are ``tests/fixtures/checkpoint_index/totals.json`` (public copies
found with the search tools, 2026-12-02). kvplan's stored bytes (every part as the checkpoint
stores it, MTP layers where the checkpoint ships them) plus the tensors the index holds that the
engines do not load (``not_counted``, each computed here from the config) must equal the total
within 0.5 %, and to the byte where the fixture says ``exact``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.arch import ModelArch
from kvplan.presets import load_model, model_presets
from kvplan.weights import weights_per_gpu

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_index" / "totals.json"
DATA = json.loads(FIXTURE.read_text(encoding="utf-8"))
CHECKPOINTS: dict[str, dict[str, object]] = DATA["checkpoints"]


def rotary_inv_freq(arch: ModelArch) -> int:
    """The fp32 ``rotary_emb.inv_freq`` buffer the Llama-2 conversions saved in each layer
    (``head_dim / 2`` values); vLLM ``llama.py`` ``load_weights`` skips ``rotary_emb.inv_freq``."""
    return arch.n_layers * (arch.head_dim // 2) * 4


def tied_lm_head(arch: ModelArch) -> int:
    """``lm_head.weight`` stored although ``tie_word_embeddings`` (bf16, vocab × hidden); vLLM's
    ``load_weights`` of a tied model skips it (``qwen3.py``/``qwen2.py``
    ``skip_prefixes=["lm_head."]``, ``falcon.py`` ``lm_head.weight`` with tied embeddings)."""
    assert arch.tie_word_embeddings
    return arch.vocab_size * arch.hidden_size * 2


NOT_COUNTED = {"rotary_inv_freq": rotary_inv_freq, "tied_lm_head": tied_lm_head}


def stored_bytes(arch: ModelArch) -> int:
    return weights_per_gpu(arch, mtp=arch.weights.mtp_layers > 0).total_bytes


def test_every_preset_has_an_index_total_or_says_why_not():
    """Each preset is in exactly one list: a total with its source, or the reason none is held."""
    repos = {p.hf_repo for p in model_presets().values()}
    found, missing = set(CHECKPOINTS), set(DATA["not_found"])
    assert not found & missing
    assert found | missing == repos
    # 29 → 30: meta-llama/Llama-3.1-70B-Instruct (issue #25), whose total a public inventory quotes
    # 30 → 32: Qwen/Qwen2.5-14B and Qwen/Qwen3-14B (issue #25), a runbook's and a tutorial's
    # quotes of their indexes, both to the byte
    assert len(found) == 32
    assert all(DATA["not_found"][r] for r in missing)


@pytest.mark.parametrize("repo", sorted(CHECKPOINTS))
def test_weights_as_stored_equal_the_index_total(repo):
    entry = CHECKPOINTS[repo]
    arch = load_model(repo)
    skipped = sum(NOT_COUNTED[kind](arch) for kind in entry["not_counted"])  # type: ignore[attr-defined]
    total = int(entry["total_size"])  # type: ignore[call-overload]
    stored = stored_bytes(arch)
    assert abs(stored + skipped - total) <= 0.005 * total, (
        f"{repo}: {stored:,} stored + {skipped:,} not loaded vs index {total:,}")
    if entry["exact"]:
        assert stored + skipped == total


@pytest.mark.parametrize("repo", sorted(CHECKPOINTS))
def test_the_preset_carries_the_fixture_total_and_source(repo):
    """``index_total_size`` (the models table's column) is the fixture's, written by
    ``tools/presets_import/index_totals.py``; its source names the index URL and the copy."""
    preset = model_presets()[repo]
    entry = CHECKPOINTS[repo]
    assert preset.index_total_size == entry["total_size"]
    name = entry.get("index_file", "model.safetensors.index.json")
    assert preset.index_source.startswith(f"https://huggingface.co/{repo}/blob/main/{name}: ")
    assert str(entry["copy"]) in preset.index_source


def test_the_not_loaded_tensors_to_the_byte():
    """Llama-2-7b: 32 layers × 64 × 4 B = 8,192 B of inv_freq (13,476,831,232 B loaded,
    13,476,839,424 in the index); Llama-2-70b: 80 × 64 × 4 = 20,480 B; Qwen3-1.7B's stored tied
    head 151,936 × 2,048 × 2 = 622,329,856 B (its second shard, 622,329,984 B with the header);
    falcon-40b's 65,024 × 8,192 × 2 = 1,065,353,216 B."""
    assert rotary_inv_freq(load_model("meta-llama/Llama-2-7b-hf")) == 8_192
    assert stored_bytes(load_model("meta-llama/Llama-2-7b-hf")) == 13_476_831_232
    assert rotary_inv_freq(load_model("meta-llama/Llama-2-70b-hf")) == 20_480
    assert tied_lm_head(load_model("Qwen/Qwen3-1.7B")) == 622_329_856
    assert tied_lm_head(load_model("tiiuae/falcon-40b")) == 1_065_353_216
    assert stored_bytes(load_model("tiiuae/falcon-40b")) == 82_606_587_904
