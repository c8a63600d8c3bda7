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


def test_qwen2_5_vl_72b_awq_by_hand():
    """Qwen2.5-VL-72B-Instruct-AWQ (hidden 8,192, 80 layers, MLP 29,696; AWQ 4-bit GEMM, group
    128, zero point, ``visual`` left in bf16). Its vision_config states only hidden 1,280, MLP
    3,456 and out 8,192: depth 32 and the patch keys are Qwen2_5_VLVisionConfig's defaults
    (transformers configuration_qwen2_5_vl.py), so the tower is patch 1,280 × 1,176 = 1,505,280;
    per block norms 2,560 + qkv 3,840 × 1,281 + proj 1,280 × 1,281 + gate/up 6,912 × 1,281 +
    down 1,280 × 3,457 = 19,840,512, × 32 = 634,896,384; merger ln_q 1,280 + 5,120 × 5,121 +
    8,192 × 5,121 = 68,172,032: 704,573,696 (transformers' count), 1,409,147,392 B in bf16.
    Each MLP projection (K × N = 8,192 × 29,696 = 243,269,632, as gate, up or down) stores qweight
    K·N/2 = 121,634,816 B + qzeros K/128 · N/8 · 4 = 950,272 B + fp16 scales K/128 · N · 2 =
    3,801,088 B = 126,386,176 B (vLLM awq.py AWQLinearMethod.create_weights): × 3 × 80 layers =
    30,332,682,240 B."""
    assert 1_505_280 + 32 * 19_840_512 + 68_172_032 == 704_573_696
    whole = COUNTS["Qwen--Qwen2.5-VL-72B-Instruct-AWQ"]["architecture_class"]
    assert (whole["text_model"], whole["towers"], whole["params"]) == (
        72_957_861_888, 704_573_696, 73_662_435_584)
    arch = load_model("Qwen/Qwen2.5-VL-72B-Instruct-AWQ")
    assert arch.params_total == 73_662_435_584
    parts = weights_per_gpu(arch).total_by_part
    assert parts["vision"] == 2 * 704_573_696
    assert 121_634_816 + 950_272 + 3_801_088 == 126_386_176
    assert parts["mlp"] == 3 * 80 * 126_386_176 == 30_332_682_240
    assert weights_per_gpu(arch).total_bytes == 43_004_666_368
    assert image_prompt_tokens(arch.name, arch.processor,
                               ImageRequest(count=1, width=1280, height=720)) == 1_198


def test_sparse_qwen2_5_vl_vision_config_takes_the_class_defaults():
    """A Qwen2.5-VL vision_config without depth (the Hub's sparse form) was not sized at all
    before (no vision part: the 72B-AWQ's weights 1,409,147,392 B short); now each key it leaves
    out is Qwen2_5_VLVisionConfig's default, and a stated key wins."""
    from kvplan.config_import import parse_config
    from kvplan.presets import PRESETS_DIR

    path = PRESETS_DIR / "models" / "Qwen--Qwen2.5-VL-3B-Instruct.json"
    config = json.loads(path.read_text())["config"]
    full = weights_per_gpu(parse_config(config)).total_by_part["vision"]
    sparse = dict(config, vision_config={"hidden_size": 1280, "out_hidden_size": 2048})
    assert weights_per_gpu(parse_config(sparse)).total_by_part["vision"] == full == 2 * 668_684_288
    deeper = dict(config, vision_config={"hidden_size": 1280, "out_hidden_size": 2048, "depth": 33})
    assert weights_per_gpu(parse_config(deeper)).total_by_part["vision"] == full + 2 * 19_702_200


def test_qwen2_5_vl_7b_awq_by_hand():
    """Qwen2.5-VL-7B-Instruct-AWQ: the 7B's shapes (hidden 3,584, 28 layers, MLP 18,944, vocab
    152,064 untied) with AWQ 4-bit GEMM over attention and MLP. Its vision_config states no depth
    or widths: the class defaults give the 7B's tower, 676,550,144 parameters (1,353,100,288 B).
    One MLP projection (K · N = 3,584 × 18,944 = 67,895,296) stores K·N/2 = 33,947,648 B +
    qzeros K/128 · N/8 · 4 = 265,216 B + scales K/128 · N · 2 = 1,060,864 B = 35,273,728 B;
    × 3 × 28 = 2,962,993,152 B."""
    whole = COUNTS["Qwen--Qwen2.5-VL-7B-Instruct-AWQ"]["architecture_class"]
    assert (whole["text_model"], whole["towers"]) == (7_615_616_512, 676_550_144)
    arch = load_model("Qwen/Qwen2.5-VL-7B-Instruct-AWQ")
    assert arch.params_total == 8_292_166_656
    parts = weights_per_gpu(arch).total_by_part
    assert parts["vision"] == 1_353_100_288
    assert 33_947_648 + 265_216 + 1_060_864 == 35_273_728
    assert parts["mlp"] == 3 * 28 * 35_273_728 == 2_962_993_152
    assert weights_per_gpu(arch).total_bytes == 6_923_847_680
