"""Issue #27 item 4: multimodal checkpoints as presets, each held by hand against its config.

Every number here is derived in the docstring from the preset's config.json (and its processor
preset), and checked against transformers 5.24's count (``tests/fixtures/param_counts.json``) where
the class exists there."""

from __future__ import annotations

import json
from pathlib import Path

from kvplan.multimodal import ImageRequest, image_prompt_tokens
from kvplan.presets import load_model
from kvplan.weights import weights_per_gpu

COUNTS = json.loads((Path(__file__).parent / "fixtures" / "param_counts.json").read_text())["models"]


def test_qwen2_5_vl_3b_by_hand():
    """Qwen2.5-VL-3B-Instruct (hidden 2,048, 36 layers, 16 heads / 2 KV × 128, MLP 11,008, vocab
    151,936 tied; transformers modeling_qwen2_5_vl.py, vLLM qwen2_5_vl.py): embeddings 151,936 ×
    2,048 = 311,164,928 (once: tie_word_embeddings true); per layer q 2,048 × 2,049 + k/v 2 ×
    256 × 2,049 + o 2,048² + MLP 3 × 2,048 × 11,008 + 2 norms × 2,048 = 77,076,992, × 36 =
    2,774,771,712; final norm 2,048: text 3,085,938,688. Tower as the 7B's (patch 1,505,280, 32
    blocks × 19,702,200 = 630,470,400) with the merger to 2,048: ln_q 1,280 + 5,120 × 5,121 +
    2,048 × 5,121 = 36,708,608: 668,684,288. Whole class 3,754,622,976; in bf16 7,509,245,952 B.
    Tokens of a 1280×720 image: smart_resize to 1288×728 (multiples of 28), (728/14)·(1288/14)/2²
    = 1,196, + 2 template tokens = 1,198; two images 2,396."""
    assert 311_164_928 + 36 * 77_076_992 + 2_048 == 3_085_938_688
    assert 1_505_280 + 32 * 19_702_200 + 36_708_608 == 668_684_288
    whole = COUNTS["Qwen--Qwen2.5-VL-3B-Instruct"]["architecture_class"]
    assert (whole["text_model"], whole["towers"], whole["params"]) == (
        3_085_938_688, 668_684_288, 3_754_622_976)
    arch = load_model("Qwen/Qwen2.5-VL-3B-Instruct")
    assert arch.params_total == 3_754_622_976
    weights = weights_per_gpu(arch)
    assert weights.total_bytes == 2 * 3_754_622_976 == 7_509_245_952
    assert weights.total_by_part["vision"] == 2 * 668_684_288
    assert image_prompt_tokens(arch.name, arch.processor,
                               ImageRequest(count=2, width=1280, height=720)) == 2 * 1_198
