"""Weights as the engine loads them (kvplan.weights): formats, skip lists, TP/PP/EP, acceptance.

Every expected value is derived by hand in the test's docstring from the shapes in the config and
the ``create_weights`` of the vLLM quantization method named there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvplan.capacity import FitQuery, fit
from kvplan.config_import import parse_config
from kvplan.engines import get_engine
from kvplan.errors import KVPlanError
from kvplan.plan import make_plan
from kvplan.presets import get_gpu, load_model, model_presets
from kvplan.weights import (
    Format,
    QuantScheme,
    Tensor,
    format_from_dtype,
    model_tensors,
    params_from_tensors,
    read_quantization,
    shard_shape,
    weights_per_gpu,
)

GIB = 1 << 30
CONFIGS = Path(__file__).parent / "fixtures" / "vllm_logs" / "configs"
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False}


def tiny(**quant) -> object:
    return parse_config({**TINY, "quantization_config": quant} if quant else TINY, name="tiny")


def scheme(**quant):
    return read_quantization(json.dumps(quant, sort_keys=True), "bf16")


# ------------------------------------------------------------------ formats, one matrix each

def test_fp8_block_scales():
    """fp8.py Fp8LinearMethod: 256 × 300 fp8 = 76,800 B + ceil(256/128) × ceil(300/128) = 2 × 3
    fp32 weight_scale_inv = 24 B → 76,824."""
    fmt = scheme(quant_method="fp8", weight_block_size=[128, 128]).linear
    assert fmt is not None and fmt.matrix_bytes(256, 300) == 76_824


def test_fp8_per_tensor_static_keeps_one_weight_and_one_input_scale_per_module():
    """Fp8LinearMethod without blocks: the checkpoint's weight_scale (+ input_scale when static) per
    fused shard is requantized to one of each per module after loading (v0.33 ``fp8_utils.py``
    ``process_fp8_weight_tensor_strategy`` → ``requantize_with_max_scale``; ``input_scale.max()``):
    qkv (3 shards) 256 × 256 → 65,536 + 2 × 4 = 65,544, as for one shard; dynamic: 65,540."""
    fmt = scheme(quant_method="fp8", activation_scheme="static").linear
    assert fmt is not None and fmt.matrix_bytes(256, 256, shards=3) == 65_544
    assert fmt.matrix_bytes(256, 256) == 65_544
    dynamic = scheme(quant_method="fp8", activation_scheme="dynamic").linear
    assert dynamic is not None and dynamic.matrix_bytes(256, 256, shards=3) == 65_540


def test_mxfp4_experts_of_gpt_oss_120b():
    """mxfp4.py Mxfp4MoEMethod: per expert w13 5,760 × 2,880 → 8,294,400 B + 5,760 × 90 e8m0 =
    518,400; w2 2,880 × 2,880 → 4,147,200 + 259,200; = 13,219,200. Biases bf16 (5,760 + 2,880) × 2.
    36 layers × 128 × (13,219,200 + 17,280) = 60,993,699,840 B of experts on one GPU."""
    layout = weights_per_gpu(load_model("gpt-oss-120b"))
    assert layout.heaviest["experts"] == 36 * 128 * (13_219_200 + 17_280) == 60_993_699_840
    assert layout.format_label.startswith("MXFP4 (e2m1, e8m0 scale per 32) experts + bf16 ")
    assert "quant_method mxfp4" in layout.format_source


def test_nvfp4_modelopt():
    """modelopt.py ModelOptNvFp4LinearMethod: 256 × 256 → 32,768 B packed + 256 × 16 fp8 scales
    + per shard fp32 weight_scale_2 and input_scale (3 shards × 8) = 36,888."""
    fmt = scheme(quant_method="modelopt", quantization={"quant_algo": "NVFP4"}).linear
    assert fmt is not None and fmt.matrix_bytes(256, 256, shards=3) == 36_888


def test_gptq_and_awq_int4_g128():
    """auto_gptq.py (v0.33): out 256 × in 512 int4 = 65,536 B; 4 groups × 256 × (fp16 scale +
    4-bit zero) = 2,560 → 68,096, no g_idx held. auto_awq.py: the same layout → 68,096.
    Channel-wise GPTQ (group −1): one group per column → 65,536 + 256 × 2.5 = 66,176."""
    gptq = scheme(quant_method="gptq", bits=4, group_size=128, desc_act=False).linear
    awq = scheme(quant_method="awq", bits=4, group_size=128, zero_point=True).linear
    channel = scheme(quant_method="gptq", bits=4, group_size=-1, desc_act=True).linear
    assert gptq is not None and gptq.matrix_bytes(256, 512) == 68_096
    assert awq is not None and awq.matrix_bytes(256, 512) == 68_096
    assert channel is not None and channel.matrix_bytes(256, 512) == 66_176
    assert "refused" in scheme(quant_method="gptq", desc_act=True).linear.label


def test_gptq_dynamic_exclusions_and_modules_in_block():
    """``dynamic`` ``-:`` regexes and ``modules_in_block_to_quantize`` leave modules bf16."""
    s = scheme(quant_method="gptq", bits=4, group_size=128,
               dynamic={"-:.*\\.mlp\\.down_proj": {}},
               modules_in_block_to_quantize=[["self_attn.q_proj"], ["mlp.gate_proj", "mlp.down_proj"]])
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "gate": "mlp.gate_proj",
             "down": "mlp.down_proj"}
    got = {k: s.format_for(Tensor(f"model.layers.{{i}}.{n}", "attention", 256, 256, "column"), 0).name
           for k, n in names.items()}
    assert got == {"q": "gptq_int4", "k": "bf16", "gate": "gptq_int4", "down": "bf16"}


def test_bitsandbytes_nf4_double_quant_and_int8():
    """256 × 512 = 131,072 values: nf4 65,536 B + 2,048 absmax — fp32 (8,192) or, double quant,
    uint8 (2,048) + ceil(2,048 / 256) = 8 fp32; int8: 131,072 + 256 fp32 SCB."""
    nf4 = scheme(quant_method="bitsandbytes", load_in_4bit=True, bnb_4bit_quant_type="nf4").linear
    dq = scheme(quant_method="bitsandbytes", load_in_4bit=True, bnb_4bit_quant_type="nf4",
                bnb_4bit_use_double_quant=True).linear
    int8 = scheme(quant_method="bitsandbytes", load_in_8bit=True).linear
    assert nf4 is not None and nf4.matrix_bytes(256, 512) == 65_536 + 8_192
    assert dq is not None and dq.matrix_bytes(256, 512) == 65_536 + 2_048 + 32
    assert int8 is not None and int8.matrix_bytes(256, 512) == 131_072 + 1_024


def test_compressed_tensors_groups_and_ignore():
    """compressed-tensors int8 weight-only (W8A16, no input activations: vLLM's WNA16 scheme) per
    channel on Linear, ``ignore`` lm_head and a regex on the router: q_proj 256 × 256 → 65,536 +
    256 bf16 scales × 2 + an int64 ``weight_shape`` pair (16) = 66,064 (``compressed_tensors_wNa16.py``
    ``create_weights``); lm_head and ``mlp.gate`` stay bf16."""
    s = scheme(quant_method="compressed-tensors", ignore=["lm_head", "re:.*mlp.gate$"],
               config_groups={"group_0": {"targets": ["Linear"], "weights": {
                   "num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}}})
    q = Tensor("model.layers.{i}.self_attn.q_proj", "attention", 256, 256, "column")
    head = Tensor("lm_head", "lm_head", 1000, 256, "vocab", kind="lm_head")
    gate = Tensor("model.layers.{i}.mlp.gate", "router", 8, 256, "replicated")
    assert s.format_for(q, 3).matrix_bytes(256, 256) == 65_536 + 512 + 16 == 66_064
    assert s.format_for(head, None).name == "bf16"
    assert s.format_for(gate, 3).name == "bf16"


def _w8a8(strategy: str, dynamic: bool, symmetric: bool = True) -> Format:
    fmt = scheme(quant_method="compressed-tensors", format="int-quantized", config_groups={
        "group_0": {"targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "int", "strategy": strategy, "symmetric": True},
                    "input_activations": {"num_bits": 8, "type": "int", "dynamic": dynamic,
                                          "symmetric": symmetric,
                                          "strategy": "token" if dynamic else "tensor"}}}).groups[0][1]
    return fmt


def test_int8_w8a8_as_the_cutlass_kernel_holds_it():
    """compressed_tensors_w8a8_int8.py create_weights + scaled_mm/cutlass.py
    CutlassInt8ScaledMMLinearKernel.process_weights_after_loading (v0.33), 256 × 256 matrices:
    channel, dynamic symmetric (the llm-compressor W8A8 preset): 65,536 int8 + 256 fp32 = 66,560,
    fused or not. Per tensor, static symmetric: fused qkv (3 shards) → convert_to_channelwise,
    256 fp32 + one input_scale (input_scale.max()) = 65,536 + 1,024 + 4 = 66,564; unfused o_proj →
    one weight scale + one input scale = 65,544. Asymmetric activations add an int32 azp_adj per
    output row (weight.sum(dim=0)): channel dynamic → 66,560 + 1,024 = 67,584; static per tensor
    fused → 66,564 + 1,024 + 4 (int32 azp) = 67,592."""
    channel = _w8a8("channel", dynamic=True)
    assert channel.matrix_bytes(256, 256, shards=3) == channel.matrix_bytes(256, 256) == 66_560
    tensor = _w8a8("tensor", dynamic=False)
    assert tensor.matrix_bytes(256, 256, shards=3) == 66_564
    assert tensor.matrix_bytes(256, 256) == 65_544
    assert _w8a8("channel", dynamic=True, symmetric=False).matrix_bytes(256, 256) == 67_584
    assert _w8a8("tensor", dynamic=False, symmetric=False).matrix_bytes(256, 256, shards=3) == 67_592
    assert channel.label == "INT8 W8A8 (per-channel scale, dynamic int8 activations)"


def test_llama_31_8b_int8_w8a8_exact_bytes():
    """Llama-3.1-8B with the llm-compressor W8A8 preset (int8 weights per channel, dynamic per-token
    int8 activations, ``ignore: [lm_head]``), one GPU. Per layer the linears hold
    (6,144 + 4,096 + 28,672) × 4,096 + 4,096 × 14,336 = 218,103,808 int8 B + (6,144 + 4,096 +
    28,672 + 4,096) × 4 = 172,032 B of fp32 row scales; × 32 = 6,984,826,880. Norms 32 × 2 × 4,096
    × 2 + 4,096 × 2 = 532,480; embed_tokens and lm_head bf16 2 × 128,256 × 4,096 × 2 =
    2,101,346,304 → 9,086,705,664 B (8.4627 GiB)."""
    ct = {"quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True,
              "dynamic": False}, "input_activations": {
              "num_bits": 8, "type": "int", "strategy": "token", "symmetric": True, "dynamic": True}}}}
    arch = parse_config({**model_presets()["llama-3.1-8b"].config, "quantization_config": ct},
                        name="w8a8")
    assert weights_per_gpu(arch).total_bytes == 9_086_705_664


def test_fp8_modules_to_not_convert_match_exact_names_per_layer():
    """Qwen3-235B-A22B-FP8 lists each layer's ``mlp.gate`` (vLLM is_layer_skipped, exact): the
    router stays bf16 and ``mlp.gate_proj``-style names are not caught by the prefix."""
    config = json.loads((CONFIGS / "Qwen__Qwen3-235B-A22B-FP8.json").read_text())
    arch = parse_config(config, name="q")
    s = read_quantization(arch.weights.quantization, "bf16")
    router = Tensor("model.layers.{i}.mlp.gate", "router", 128, 4096, "replicated")
    expert = Tensor("model.layers.{i}.mlp.experts.0.gate_up_proj", "experts", 3072, 4096,
                    "expert_column", experts=128, kind="expert")
    assert s.skipped("model.layers.93.mlp.gate") and not s.skipped("model.layers.93.mlp.gate_up")
    assert s.format_for(expert, 7).name == "fp8_block128x128"
    assert s.format_for(router, 7).name == "bf16"


@pytest.mark.parametrize(("match", "name", "expected"), [
    ("exact", "model.layers.3.mlp.gate", True),            # the name itself
    ("exact", "model.layers.3.mlp.gate.weight", True),     # a child of the named module
    ("exact", "model.layers.3.mlp.gate_up_proj", False),   # a longer name is not a child
    ("exact", "model.layers.13.mlp.gate", False),
    ("substring", "model.layers.13.mlp.gate_up_proj", True),  # "13.mlp.gate_up" inside it
    ("exact", "model.visual.blocks.0.attn.qkv", True),     # re: pattern, re.match from the start
    ("exact", "lm.model.visual.blocks.0", False),          # re.match does not search
    ("glob", "model.layers.7.self_attn.o_proj", True),     # * glob under glob matching
    ("exact", "model.layers.7.self_attn.o_proj", False),   # the glob is a plain name under exact
    ("ct", "model.layers.7.self_attn.o_proj.weight", True),  # glob of a child (pattern + ".*")
])
def test_skip_list_matching_modes(match, name, expected):
    """``QuantScheme.skipped``: vLLM ``is_layer_skipped`` (exact name or dotted prefix;
    substring), compressed-tensors ``re:`` targets (``re.match``) and transformers' globs."""
    scheme = QuantScheme("fp8", format_from_dtype("bf16", "bf16"), match=match,
                         skip=("model.layers.3.mlp.gate", "re:model\\.visual\\..*",
                               "model.layers.*.self_attn.o_proj", "13.mlp.gate_up"))
    assert scheme.skipped(name) is expected
    assert scheme.skipped(name) is expected    # the remembered answer is the same


@pytest.mark.parametrize(("quant", "code"), [
    ({"quant_method": "hqq_magic"}, "weights.unknown_method"),
    ({"quant_method": "fp8", "weight_block_size": "128"}, "weights.bad_quantization"),
    ({"quant_method": "gptq", "bits": 5}, "weights.bad_quantization"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "weights.bad_quantization"),
    ({"quant_method": "bitsandbytes"}, "weights.bad_quantization"),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "INT3"}}, "weights.bad_quantization"),
])
def test_unknown_or_malformed_quantization_is_a_named_error(quant, code):
    with pytest.raises(KVPlanError) as info:
        weights_per_gpu(tiny(**quant))
    assert info.value.code == code


def test_quantization_config_must_be_an_object():
    with pytest.raises(KVPlanError) as info:
        parse_config({**TINY, "quantization_config": "fp8"})
    assert info.value.code == "config.bad_value"


# ------------------------------------------------------------------ parts and parallel layout

def test_llama_31_8b_bf16_is_exactly_params_times_two():
    """8,030,261,248 parameters (vocab 128,256 = 2,004 × 64, no padding) × 2 B, as before."""
    layout = weights_per_gpu(load_model("llama-3.1-8b"))
    assert layout.total_bytes == max(layout.stage_bytes) == 16_060_522_496
    assert params_from_tensors(load_model("llama-3.1-8b")) == 8_030_261_248


def test_vocab_padding_and_kv_head_replication_under_tp():
    """vocab_parallel_embedding.py: OPT 50,272 rows → pad_vocab_size(64) = 50,304, / 8 = 6,288.
    QKVParallelLinear: Qwen3-235B 4 KV heads at tp 8 → max(1, 4 // 8) = 1 head of 128 rows."""
    opt = next(t for t in model_tensors(load_model("opt-13b")) if t.name == "model.embed_tokens")
    assert shard_shape(opt, 8, 1) == (6_288, 5_120, 1)
    qwen = load_model("qwen3-235b-a22b")
    k = next(t for t in model_tensors(qwen) if t.name.endswith("k_proj"))
    assert shard_shape(k, 8, 1) == (128, 4_096, 1)
    assert shard_shape(k, 4, 1) == (128, 4_096, 1) and shard_shape(k, 2, 1) == (256, 4_096, 1)


def test_pipeline_stages_follow_get_pp_indices():
    """Llama-3.1-8B, pp 3: 32 layers → [11, 11, 10]; a layer = 4,096 × 6,144 + 4,096² + 3 ×
    4,096 × 14,336 + 2 × 4,096 = 218,112,000 params × 2 B; embeddings (525,336,576 params) on
    the first stage, final norm (4,096) and LM head on the last."""
    layer, embed = 218_112_000 * 2, 128_256 * 4_096 * 2
    stages = weights_per_gpu(load_model("llama-3.1-8b"), pp=3).stage_bytes
    assert stages == [11 * layer + embed, 11 * layer, 10 * layer + embed + 4_096 * 2]


def test_identical_layers_are_one_tensor_each_whatever_the_depth():
    """The tiny llama at 2 and at 10,000 layers lists the same tensors (one per matrix, covering
    every layer it repeats on), and its bytes grow exactly by 9,998 layers of 2 × 256² (q/o) +
    2 × 128 × 256 (k/v) + 3 × 512 × 256 (MLP) + 2 × 256 (norms) = 590,336 params × 2 B; on 3
    pipeline stages (vLLM ``get_pp_indices``: 3,333 / 3,334 / 3,333 layers) the embeddings
    (vocab padded to 1,024 rows) sit on the first, the LM head and final norm on the last."""
    small, deep = tiny(), parse_config({**TINY, "num_hidden_layers": 10_000}, name="deep")
    assert len(model_tensors(small)) == len(model_tensors(deep))
    layer = 590_336 * 2
    assert weights_per_gpu(deep).total_bytes - weights_per_gpu(small).total_bytes == 9_998 * layer
    stages = weights_per_gpu(deep, pp=3).stage_bytes
    embed, head = 1_024 * 256 * 2, 1_024 * 256 * 2 + 256 * 2
    assert stages == [3_333 * layer + embed, 3_334 * layer, 3_333 * layer + head]


def test_a_skip_list_naming_one_layer_keeps_that_layer_alone_unquantized():
    """fp8 (per tensor) with ``ignored_layers`` naming layer 1's down_proj only (vLLM
    is_layer_skipped, exact): that 256 × 512 matrix stays bf16 (262,144 B instead of 131,072 + 4);
    layer 0's is fp8. Patterns naming no digit treat every layer number of the same length alike:
    ``re:model\\.layers\\..\\.mlp\\.down_proj`` (one character) skips the down_proj of layers 0–9
    and not of layers 10–11."""
    plain = weights_per_gpu(tiny(quant_method="fp8"))
    one = weights_per_gpu(tiny(quant_method="fp8", ignored_layers=["model.layers.1.mlp.down_proj"]))
    assert one.total_bytes - plain.total_bytes == 256 * 512 * 2 - (256 * 512 + 4)
    ct = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}}
    everywhere = weights_per_gpu(tiny(**ct))
    layer_0 = weights_per_gpu(tiny(**ct, ignore=["re:model.layers.0.mlp.down_proj"]))
    assert layer_0.total_bytes - everywhere.total_bytes == 256 * 512 * 2 - (256 * 512 + 256 * 2 + 16)
    assert scheme(**ct, ignore=["re:model.layers.0.mlp.down_proj"]).layer_specific
    assert not scheme(**ct, ignore=["lm_head", "re:.*mlp.gate$"]).layer_specific
    twelve = {**TINY, "num_hidden_layers": 12, "quantization_config": {
        **ct, "ignore": [r"re:model\.layers\..\.mlp\.down_proj"]}}
    arch = parse_config(twelve, name="twelve")
    down = next(t for t in model_tensors(arch) if t.name.endswith("down_proj"))
    s = read_quantization(arch.weights.quantization, "bf16")
    assert not s.layer_specific
    assert [s.format_for(down, i).name for i in (0, 9, 10, 11)] == ["bf16", "bf16"] + [
        "ct_int8_channel"] * 2
    full = weights_per_gpu(parse_config({**twelve, "quantization_config": ct}, name="all"))
    assert weights_per_gpu(arch).total_bytes - full.total_bytes == 10 * (
        256 * 512 * 2 - (256 * 512 + 256 * 2 + 16))


def test_norms_and_router_are_replicated_experts_split_over_ep():
    """gpt-oss-120b at tp 4: router 128 × 2,880 (+ bias 128) bf16 per layer on every rank; with
    ep 4 each rank holds 32 whole experts: 36 × 32 × (13,219,200 + 17,280) B."""
    arch = load_model("gpt-oss-120b")
    tp4 = weights_per_gpu(arch, tp=4)
    ep4 = weights_per_gpu(arch, tp=4, ep=4)
    assert tp4.heaviest["router"] == ep4.heaviest["router"] == 36 * (128 * 2_880 + 128) * 2
    assert ep4.heaviest["experts"] == 36 * 32 * (13_219_200 + 17_280)
    with pytest.raises(KVPlanError) as info:
        weights_per_gpu(arch, tp=4, ep=3)
    assert info.value.code == "parallel.ep"


def test_ep_setting_is_honoured_by_vllm_and_sglang_only():
    """The same query on vLLM and SGLang splits experts over 4 ranks; HF ignores ep (one rank)."""
    arch, gpu = load_model("qwen3-30b-a3b"), get_gpu("h100-sxm")
    q = {"tokens": 4096, "tp": 4, "num_gpus": 4, "ep": 4}
    vllm = fit(make_plan(arch, gpu, FitQuery(engine="vllm", **q)), search_gpus=False)
    sglang = fit(make_plan(arch, gpu, FitQuery(engine="sglang", **q)), search_gpus=False)
    plain = fit(make_plan(arch, gpu, FitQuery(engine="vllm", tokens=4096, tp=4, num_gpus=4)),
                search_gpus=False)
    assert vllm.weights_breakdown["experts"] == sglang.weights_breakdown["experts"]
    assert vllm.weights_breakdown["experts"] == 48 * 32 * 3 * 2_048 * 768 * 2
    assert plain.weights_breakdown["experts"] == 48 * 128 * 3 * 2_048 * 192 * 2


def test_mtp_layers_load_only_when_asked():
    """DeepSeek-V3 ``num_nextn_predict_layers`` 1: one more MoE decoder layer — MLA 187,107,328
    (q_a 1,536 × 7,168, q_b 24,576 × 1,536, kv_a 576 × 7,168, kv_b 32,768 × 512, o 7,168 ×
    16,384, two latent norms), experts 256 × 3 × 7,168 × 2,048, shared 3 × 7,168 × 2,048, router
    256 × 7,168, 2 norms = 11,507,286,016 — plus enorm, hnorm, head norm and eh_proj 7,168 × 14,336
    (embeddings and head are shared with the model), on the last stage."""
    arch = load_model("deepseek-v3")
    assert "mtp" not in weights_per_gpu(arch, tp=8).heaviest
    layer = 187_107_328 + 256 * 3 * 7_168 * 2_048 + 3 * 7_168 * 2_048 + 256 * 7_168 + 2 * 7_168
    assert layer == 11_507_286_016
    extra = params_from_tensors(arch, mtp=True) - params_from_tensors(arch)
    assert extra == layer + 3 * 7_168 + 7_168 * 14_336
    assert weights_per_gpu(arch, tp=8, pp=2, mtp=True).stages[0]["mtp"] == 0
    assert weights_per_gpu(arch, tp=8, pp=2, mtp=True).stages[1]["mtp"] > 0


def test_vision_tower_of_a_multimodal_config_is_loaded():
    """Gemma 3 27B (-it, vision_config): a 27-layer SigLIP tower (1,152 wide) + projector to
    5,376 — 422,405,488 more parameters than the text model's 27.01e9 published count."""
    arch = load_model("gemma-3-27b")
    layout = weights_per_gpu(arch)
    assert layout.heaviest["vision"] == (params_from_tensors(arch) - sum(
        t.params for t in model_tensors(arch) if t.part != "vision")) * 2
    assert 0.40e9 < layout.heaviest["vision"] / 2 < 0.45e9


def test_user_weight_dtype_overrides_linears_not_embeddings():
    """--weight-dtype fp8 on Llama-3.1-8B: linear layers and the LM head 1 B per parameter;
    embeddings (and norms) stay bf16 as vLLM's --quantization leaves them."""
    arch = load_model("llama-3.1-8b")
    layout = weights_per_gpu(arch, "fp8")
    assert layout.heaviest["embeddings"] == 128_256 * 4_096 * 2
    assert layout.heaviest["lm_head"] == 128_256 * 4_096
    assert layout.heaviest["mlp"] == 32 * 3 * 4_096 * 14_336


def test_params_from_tensors_equal_the_presets_exact_counts():
    """Presets whose params_total is an exact count: the tensor list reproduces it."""
    exact = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "mixtral-8x7b",
             "qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "qwen2.5-7b", "qwen2.5-72b", "phi-4",
             "deepseek-llm-67b", "deepseek-v2-lite", "command-r", "mistral-7b-v0.3"]
    for preset in exact:
        arch = load_model(preset)
        assert params_from_tensors(arch) == model_presets()[preset].params_total, preset


# ------------------------------------------------------------------ acceptance (issue #13)

def test_gpt_oss_120b_fits_one_h100_with_kv_room():
    """MXFP4 experts as vLLM v0.33's Triton backend holds them on SM 9.0 (per expert and layer:
    values 8,294,400 + 4,147,200 B, swizzled scales 5,888 × 90 + 3,072 × 90 B, fp32 biases
    8,640 × 4 B) and the YaRN RoPE cache (4,096 × 32 positions × 64 × 2 B = 16,777,216 B,
    ``test_vllm_rope_cache``): 65,477,929,600 B of weights (65,461,152,384 before helper
    vllmrope); ceil(85,027,979,264 (CUDA total) × 0.92) = 78,225,740,923 − weights − reserve
    2,610,933,854 (activation: the FlashInfer sampler warm-up 1,024 × 201,088 × 10 B =
    2,059,141,120 > forward 853,540,864; non-torch 143,129,785; CUDA graphs 408,662,949) =
    10,136,877,469 B of KV (9.44 GiB; 10,153,654,685 before the RoPE cache) at the default
    settings."""
    r = fit(make_plan(load_model("gpt-oss-120b"), get_gpu("h100-sxm"), FitQuery(engine="vllm@0.33")))
    assert r.fits and r.weights_bytes == 65_461_152_384 + 16_777_216 == 65_477_929_600
    assert r.weights_breakdown["experts"] == 36 * 128 * (8_294_400 + 4_147_200 + 5_888 * 90
                                                         + 3_072 * 90 + 8_640 * 4)
    assert r.reserve_bytes == 2_610_933_854
    assert r.kv_budget_bytes == 10_153_654_685 - 16_777_216 == 10_136_877_469 and r.max_requests > 10
    assert r.weight_format.startswith("MXFP4")


def test_deepseek_v3_fp8_on_8_h200_at_32k():
    r = fit(make_plan(load_model("deepseek-v3"), get_gpu("h200"), FitQuery(tokens=32_768, tp=8, num_gpus=8)),
            search_gpus=False)
    assert r.fits and r.max_requests > 0 and r.weight_dtype == "fp8"


def test_format_roundtrip_of_a_plain_format():
    assert Format("x", "x", 16).matrix_bytes(3, 5) == 30


def test_decode_reads_the_active_experts_in_their_stored_format():
    """gpt-oss-120b: 65,248,815,744 B in all, of which experts 60,993,699,840 (MXFP4); a token
    reads the other 4,255,115,904 B and 4 of 128 experts: 60,993,699,840 / 32 = 1,906,053,120."""
    from kvplan.capacity import weights_read_bytes

    assert weights_read_bytes(load_model("gpt-oss-120b")) == 4_255_115_904 + 1_906_053_120
    assert weights_read_bytes(load_model("llama-3.1-8b")) == 16_060_522_496


_QC_VALUES = [None, True, False, 0, -1, 4, 8, 16, 128, 1e9, "", "fp8", "nf4", "dynamic", "static",
              "tensor", "channel", "group", "block", "tensor_group", [], [128], [128, 128],
              [0, 128], ["lm_head"], ["re:(", "re:.*gate$"], {}, {"quant_algo": "NVFP4"},
              {"g": {"weights": {"num_bits": 4}}}, {"g": {"weights": None}}, {"-:.*": {}}]
_QC_KEYS = ["quant_method", "weight_block_size", "activation_scheme", "modules_to_not_convert",
            "ignored_layers", "bits", "group_size", "desc_act", "zero_point", "load_in_4bit",
            "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "config_groups",
            "ignore", "quantization", "quant_algo", "dynamic", "modules_in_block_to_quantize",
            "lm_head", "exclude_modules"]


def test_any_quantization_config_is_sized_or_a_named_error():
    """Random quantization_config objects (known methods, odd values): weights_per_gpu returns
    bytes or raises a KVPlanError from MESSAGES — never another exception."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kvplan.errors import MESSAGES

    methods = st.sampled_from(["fp8", "fbgemm_fp8", "mxfp4", "modelopt", "modelopt_fp4", "gptq",
                               "awq", "bitsandbytes", "compressed-tensors", "auto-round", "x"])
    body = st.dictionaries(st.sampled_from(_QC_KEYS), st.sampled_from(_QC_VALUES), max_size=6)

    @settings(max_examples=10_000 if os.environ.get("KVPLAN_PROFILE", "").lower() == "long" else 300,
              deadline=None)
    @given(methods, body)
    def check(method, extra):
        config = {**TINY, "quantization_config": {**extra, "quant_method": method}}
        try:
            layout = weights_per_gpu(parse_config(config, name="fuzz"), tp=2)
        except KVPlanError as err:
            assert err.code in MESSAGES
            return
        assert layout.total_bytes > 0 and min(layout.stage_bytes) > 0

    check()


# ------------------------------------------------------------------ loading rules (per engine)


def test_weights_module_imports_nothing_from_the_engines():
    """weights.py sits below engines/ (docs/architecture.md): the engine-specific loading rules
    come in as a ``LoadingRules`` value, never by importing ``kvplan.engines``."""
    import ast

    import kvplan.weights

    tree = ast.parse(Path(kvplan.weights.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m == "kvplan.engines" or m.startswith("kvplan.engines.")}


def test_pp_partition_has_one_home_re_exported_by_the_engines():
    from kvplan.engines import pp_partition as from_engines
    from kvplan.parallel import pp_partition

    assert from_engines is pp_partition and pp_partition(61, 4) == [15, 15, 16, 15]


def test_loading_rules_are_explicit_fields():
    """The vLLM v0.33 behaviour is the default ``LoadingRules``; each rule turned off gives the
    checkpoint's own scales. FP8 static qkv (3 shards) 256 × 256: 65,536 + one weight and one input
    scale per shard = 65,560 (65,544 with v0.33's max per module). INT8 W8A8 per tensor, static
    asymmetric, fused: per shard a weight scale, an input scale and an int32 zero point (3 × 12) and
    no azp_adj = 65,572 (67,592 under the CUTLASS rules). WNA16 without its weight_shape pair:
    66,064 − 16 = 66,048."""
    from kvplan.weights import DEFAULT_RULES, LoadingRules

    as_stored = LoadingRules(fp8_scale_per_module=False, static_input_per_module=False,
                             int8_fused_scales_per_row=False, int8_azp_adj=False,
                             wna16_weight_shape=False)
    fp8 = scheme(quant_method="fp8", activation_scheme="static").linear
    assert fp8 is not None and fp8.matrix_bytes(256, 256, 3, DEFAULT_RULES) == 65_544
    assert fp8.matrix_bytes(256, 256, 3, as_stored) == 65_560
    int8 = _w8a8("tensor", dynamic=False, symmetric=False)
    assert int8.matrix_bytes(256, 256, 3, DEFAULT_RULES) == 67_592
    assert int8.matrix_bytes(256, 256, 3, as_stored) == 65_536 + 3 * 12 == 65_572
    wna16 = scheme(quant_method="compressed-tensors", config_groups={"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}})
    q = Tensor("model.layers.{i}.self_attn.q_proj", "attention", 256, 256, "column")
    assert wna16.format_for(q, 0).matrix_bytes(256, 256, 1, as_stored) == 66_048


@pytest.mark.parametrize("engine", ["hf", "hf-legacy", "hf-static", "vllm", "vllm@0.19", "vllm@0.9",
                                    "sglang", "trtllm", "trtllm@1.1"])
@pytest.mark.parametrize("gpu", ["h100-sxm", "b200", "mi300x"])
def test_each_engine_gives_its_loading_rules(engine, gpu):
    """Every engine's rules are vLLM v0.33's scale rules (the others' assumed equal, their
    ``engines/<engine>/weights.py``) with the release's own MXFP4 layout on that GPU."""
    from dataclasses import replace

    from kvplan.weights import DEFAULT_RULES

    e, device = get_engine(engine), get_gpu(gpu)
    rules = e.loading_rules(device)
    # SGLang's own WNA16 MoE, MLA copy and MoonViT rules (test_sglang_weights)
    if engine.startswith("sglang"):
        from kvplan.engines.sglang.weights import SCALE_RULES
        hip = device.vendor == "AMD"
        want = replace(SCALE_RULES, wna16_expert_g_idx=hip, mla_absorbed_copy="hip" if hip else "cuda")
    else:
        want = DEFAULT_RULES
    # vLLM v0.13+ on Blackwell (b200): non-gated NVFP4 experts padded to 128 per rank (added by helper
    # quantlogs: test_nvfp4_experts_of_a_non_gated_moe_are_padded_to_128_per_rank_on_blackwell)
    if engine in {"vllm", "vllm@0.19"} and gpu == "b200":
        want = replace(want, nvfp4_ungated_inter=128)
    # vLLM: the RoPE cos/sin caches in the model dtype, v0.11+'s LongRoPE / MRoPE layouts (helper
    # vllmrope: test_vllm_rope_cache); vllm@0.9 inherits v0.6.6's
    if engine.startswith("vllm"):
        old = engine == "vllm@0.9"
        want = replace(want, rope_cache="model", rope_proportional_full_head=True,
                       rope_longrope_concat_only=not old, rope_mrope_positions=1 if old else 4)
    assert rules == replace(want, mxfp4_experts=e.mxfp4_moe_repack(device))
    # TensorRT-LLM ≤ 1.2.0: the CUTLASS MoE backend's 128 padding on NVIDIA parts (helper trtlogs)
    assert (rules.mxfp4_experts is not None) == ((engine.startswith("vllm") and engine != "vllm@0.9"
                                                  or engine == "trtllm@1.1") and gpu != "mi300x")


def test_skip_lists_are_read_in_the_checkpoints_module_names():
    """A quantization config names modules as the checkpoint does; vLLM maps the names through
    the model's ``hf_to_vllm_mapper`` before matching (``apply_vllm_mapper``). Qwen3.5's and
    Gemma-4's NVFP4 releases keep the text model under ``model.language_model.``; Qwen3.5's
    gated-delta mixer is ``linear_attn``; Gemma-4's MoE layer holds ``mlp`` (dense), ``router``
    and ``experts`` side by side."""
    from kvplan.weights import checkpoint_to_model_name

    assert checkpoint_to_model_name("model.language_model.layers.0.linear_attn*") == \
        "model.layers.0.mixer*"
    assert checkpoint_to_model_name("model.language_model.layers.3.self_attn*") == \
        "model.layers.3.self_attn*"
    assert checkpoint_to_model_name("model.visual*") == "model.visual*"
    gemma = [checkpoint_to_model_name(p, "gemma4_moe") for p in (
        "model.language_model.layers.0.mlp*", "model.language_model.layers.0.router*",
        "model.language_model.layers.0.experts", "model.language_model.layers.10.mlp.down_proj")]
    assert gemma == ["model.layers.0.mlp.shared_experts*", "model.layers.0.mlp.gate*",
                     "model.layers.0.mlp.experts", "model.layers.10.mlp.shared_experts.down_proj"]


def test_nvfp4_releases_keep_what_their_ignore_list_names_in_bf16():
    """nvidia/Qwen3.5-122B-A10B-NVFP4 ignores every layer's linear_attn / self_attn and shared
    expert (148 entries): only the routed experts are NVFP4 — attention 7,657,113,600 B and
    shared experts 905,969,664 B stay the bf16 release's (they were NVFP4 before the names were
    mapped: 77,823,237,600 B in all with the Qwen3-VL-layout tower, 1,775,616 B above the generic
    ViT estimate of 77,821,461,984; was 71,666,760,960). nvidia/Gemma-4-26B-A4B-NVFP4 ignores
    self_attn, mlp and router: experts NVFP4, the rest bf16 as google/gemma-4-26B-A4B
    (18,519,714,784 B, was 16,133,663,344). nvidia/Gemma-4-31B-IT-NVFP4 ignores self_attn: the
    MLP alone is NVFP4 (32,562,657,664 B, was 20,217,643,264)."""
    qwen = weights_per_gpu(load_model("nvidia/Qwen3.5-122B-A10B-NVFP4"))
    base = weights_per_gpu(load_model("Qwen/Qwen3.5-122B-A10B"))
    for part in ("attention", "shared_experts", "embeddings", "lm_head", "router", "vision"):
        assert qwen.total_by_part[part] == base.total_by_part[part], part
    assert (qwen.total_by_part["attention"], qwen.total_by_part["shared_experts"]) == (
        7_657_113_600, 905_969_664)
    assert qwen.total_bytes == 77_823_237_600
    gemma = weights_per_gpu(load_model("nvidia/Gemma-4-26B-A4B-NVFP4"))
    gbase = weights_per_gpu(load_model("google/gemma-4-26B-A4B"))
    assert {p: gemma.total_by_part[p] == gbase.total_by_part[p] for p in gemma.total_by_part} == {
        "embeddings": True, "attention": True, "norms": True, "router": True, "experts": False,
        "shared_experts": True, "vision": True}
    assert gemma.total_bytes == 18_519_714_784
    dense = weights_per_gpu(load_model("nvidia/Gemma-4-31B-IT-NVFP4"))
    assert dense.format_label.startswith("NVFP4 (e2m1, fp8 scale per 16 + fp32 globals) mlp + bf16")
    assert dense.total_bytes == 32_562_657_664


def test_nemotron_h_layers_are_one_block_each():
    """NemotronH's every layer is a norm and one mixer (transformers ``NemotronHBlock``): 54
    Mamba2 ("M"), 10 attention ("*") and 54 MLP ("-") layers for nvidia/Nemotron-H-56B-Base-8K —
    the MLP only on its 54 layers (relu2, up/down: 2 × 8,192 × 32,768 each), one norm per layer.
    56,324,350,464 parameters, transformers 5.24's count on the meta device
    (tests/fixtures/param_counts.json); both kvplan counts agree (it counted an MLP and two
    norms on every layer before: 90,685,055,488)."""
    from kvplan.weights import params_from_tensors

    arch = load_model("nvidia/Nemotron-H-56B-Base-8K")
    mlp = [t for t in model_tensors(arch) if t.part == "mlp"]
    assert {len(t.layers) for t in mlp} == {54} and sum(t.params for t in mlp) == \
        54 * 2 * 8_192 * 32_768
    assert arch.params_total == params_from_tensors(arch) == 56_324_350_464


def test_nemotron_h_moe_blocks_and_the_nvfp4_skip_list():
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: 23 Mamba2, 23 MoE and 6 attention blocks; an
    "E" block is a router, 128 routed experts and one shared expert of relu2 up/down MLPs (the
    shared one ``moe_shared_expert_intermediate_size`` 3,712 wide): 31,577,937,344 parameters
    (3,580,073,408 active), transformers 5.24's count. Its NVFP4 release's
    ``exclude_modules`` name ``backbone.layers.N.mixer.*`` — every attention block's q/k/v/o and
    the in/out projections of the 6 Mamba2 blocks before them stay bf16 (vLLM maps
    ``backbone`` → ``model``; attention is the block's ``mixer`` there): attention
    1,116,145,352 B, was 580,204,088 with those names unmatched."""
    bf16 = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert (bf16.params_total, bf16.params_active) == (31_577_937_344, 3_580_073_408)
    assert params_from_tensors(bf16) == 31_577_937_344
    shared = [t for t in model_tensors(bf16) if t.part == "shared_experts"]
    assert {(t.rows, t.cols) for t in shared} == {(3_712, 2_688), (2_688, 3_712)}
    nvfp4 = weights_per_gpu(load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"))
    base = weights_per_gpu(bf16)
    attention = [t for t in model_tensors(bf16) if t.part == "attention" and "self_attn" in t.name]
    assert nvfp4.total_by_part["attention"] == 1_116_145_352
    assert sum(t.params for t in attention) * 2 < nvfp4.total_by_part["attention"] < \
        base.total_by_part["attention"]
    assert nvfp4.total_bytes == 19_323_097_400


def test_nemotron_h_mlp_block_is_dense_beside_a_moe_block():
    """NemotronHConfig's class default (transformers 5.24 configuration_nemotron_h.py; the fixture
    tests/fixtures/conformance/nemotron_h.json ``default_config``): one block each of Mamba2,
    MoE, attention and MLP. modeling_nemotron_h.py ``NemotronHBlock`` builds ``NemotronHMoE`` only
    for "moe" and a dense ``NemotronHMLP`` for "mlp" (vLLM nemotron_h.py the same for "E" / "-").
    By hand: embeddings + untied head 2 × 131,072 × 4,096 = 1,073,741,824; Mamba2 in_proj
    4,096 × (2·8,192 + 2·8·128 + 128) + conv (10,240 × 4 + 10,240) + dt_bias/A_log/D 3 × 128 +
    norm 8,192 + out_proj 8,192 × 4,096 = 109,635,968; MoE router 8 × 4,096 + 8 experts ×
    2 × 7,688 × 4,096 + shared 2 × 7,688 × 4,096 = 566,853,632; attention 2 × 4,096² +
    2 × 1,024 × 4,096 = 41,943,040; MLP 2 × 21,504 × 4,096 = 176,160,768; 5 norms 20,480:
    1,968,355,712 = transformers' meta-device count (was 2,359,048,576: the MLP block was sized
    as a MoE, 390,692,864 over)."""
    from kvplan.weights import params_from_tensors

    fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / "nemotron_h.json")
                         .read_text())
    arch = parse_config(fixture["default_config"])
    assert arch.weights.moe_layers == (1,)
    assert arch.params_total == params_from_tensors(arch) == 1_968_355_712 == \
        fixture["params_default"]
    mlp = [t for t in model_tensors(arch) if t.part == "mlp"]
    assert sum(t.params for t in mlp) == 176_160_768


def test_kimi_delta_attention_low_rank_gates_and_a_dense_first_layer():
    """KimiLinearConfig's class default (transformers 5.24; tests/fixtures/conformance/
    kimi_linear.json ``default_config``: h 2,304, 32 KDA heads × 128, kernel 4; 21 KDA and 6 MLA
    layers; ``mlp_layer_types`` dense first, then sparse). modeling_kimi_linear.py
    ``KimiDeltaAttention`` (vLLM model_executor/layers/kda.py the same tensors), by hand: q/k/v
    3 × 2,304 × 4,096 = 28,311,552; convs 3 × 4,096 × 4 = 49,152; dt_bias 4,096, A_log 32;
    low-rank f and g gates 2 × (2,304 × 128 + 128 × 4,096) = 1,638,400; b_proj 2,304 × 32 =
    73,728; o_norm 128; o_proj 4,096 × 2,304 = 9,437,184: 39,514,272 per layer (was 56,672,256,
    the generic ``2·h·conv + conv·kernel``: 21 × 17,157,984 = 360,317,664 over). The dense first
    layer (gate/up/down 3 × 2,304 × 9,216) is stored as a dense MLP, not a MoE. 49,133,074,464 =
    transformers' meta-device count, by both kvplan counts. BailingHybrid's full-rank gates
    (modeling_bailing_hybrid.py ``f_proj``, ``g_proj``: 2 × 2,560 × 4,096) make its KDA layer
    3 × 10,485,760 + 49,152 + 4,096 + 32 + 2 × 10,485,760 + 81,920 + 128 + 10,485,760 =
    63,049,888."""
    from kvplan.config_import import mixer_params
    from kvplan.weights import params_from_tensors

    def default(name: str):
        return json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                          .read_text())

    kimi = default("kimi_linear")
    arch = parse_config(kimi["default_config"])
    assert mixer_params(arch.layers[0], arch) == 39_514_272
    assert 0 not in (arch.weights.moe_layers or ()) and len(arch.weights.moe_layers or ()) == 26
    assert arch.params_total == params_from_tensors(arch) == 49_133_074_464 == kimi["params_default"]
    bailing = parse_config(default("bailing_hybrid")["default_config"])
    assert mixer_params(bailing.layers[0], bailing) == 63_049_888


def test_shared_intermediate_size_is_a_shared_expert():
    """``shared_intermediate_size`` names a shared expert beside the routed ones. MiniMax-M3's
    class default (transformers 5.24 modeling_minimax_m3_vl.py ``MiniMaxM3VLSparseMoeBlock
    .shared_experts``, a ``MiniMaxM3VLDenseMLP`` of gate_up 6,144 × 2 · 3,072 and down
    3,072 × 6,144; ``MiniMaxM3VLAttention`` per-head ``q_norm``/``k_norm`` of 128): 60 layers ×
    (3 × 6,144 × 3,072 + 2 × 128) = 3,397,401,600 more — 447,186,441,216, transformers'
    meta-device count (was 443,789,039,616). GraniteMoeHybrid's (modeling_granitemoehybrid.py
    ``shared_mlp``, 1,024 wide): 32 × 3 × 4,096 × 1,024 = 402,653,184 more — 38,601,064,448 (was
    38,198,411,264). A 0 (Granite MoE shared, MiniMax-M2.5) is no shared expert."""
    from kvplan.weights import params_from_tensors

    for name, total, shared in (("minimax_m3_vl_text", 447_186_441_216, 3_072),
                                ("granitemoehybrid", 38_601_064_448, 1_024)):
        fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                             .read_text())
        arch = parse_config(fixture["default_config"])
        assert arch.moe is not None and (arch.moe.n_shared, arch.moe.shared_intermediate) == (1, shared)
        assert arch.params_total == params_from_tensors(arch) == total == fixture["params_default"]
    assert load_model("MiniMaxAI/MiniMax-M2.5").moe.n_shared == 0


def test_gemma4_kv_reusing_layers_keep_q_and_o_and_per_layer_inputs_are_stored():
    """transformers 5.24 modeling_gemma4_unified.py ``Gemma4UnifiedTextAttention`` (and
    modeling_gemma4.py ``Gemma4TextAttention``): a "reuse" layer (the last
    ``num_kv_shared_layers``) builds q_proj, q_norm and o_proj of its own head size and no
    k/v projections or k_norm; ``use_double_wide_mlp`` doubles its MLP. The
    gemma4_unified_assistant fixture's text model (30 layers, all reusing; 25 sliding of head
    256, 5 full of 512; h 2,304, 8 heads): 2 × 2,304 × 8 × (25 × 256 + 5 × 512) + 8,960 =
    330,310,400 more — 2,845,598,720, transformers' meta-device count (was 2,515,288,320 with
    no attention at all). Gemma 4's per-layer inputs, stored by ``model_tensors`` as counted:
    per_layer_model_projection 2,304 × 30 · 256 + norm 256 + 30 × (2 × 2,304 × 256 + 2,304) =
    53,153,536 (the tensor list was that much short of 5,077,177,856, gemma4_text's class
    default)."""
    from kvplan.weights import params_from_tensors

    def fixture(name: str):
        return json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                          .read_text())

    drafter = fixture("gemma4_unified_assistant")
    arch = parse_config(drafter["default_config"])
    assert arch.weights.kv_reuse_layers == tuple(range(30))
    assert sorted(set(arch.weights.kv_reuse_head_dims)) == [256, 512]
    assert not any(".k_proj" in t.name or ".v_proj" in t.name for t in model_tensors(arch))
    assert arch.params_total == params_from_tensors(arch) == 2_845_598_720 == \
        drafter["params_default"]
    gemma = parse_config(fixture("gemma4_text")["default_config"])
    ple = [t for t in model_tensors(gemma) if t.part == "per_layer_embeddings"
           and t.name != "model.embed_tokens_per_layer"]
    assert sum(t.params for t in ple) == 2_304 * 30 * 256 + 30 * 2 * 2_304 * 256
    assert gemma.params_total == params_from_tensors(gemma) == 5_077_177_856


def test_mla_head_dim_is_the_rope_part_when_the_config_states_none():
    """Glm4MoeLiteConfig's class default (transformers 5.24: ``attribute_map`` maps
    ``head_dim`` to ``qk_rope_head_dim``, so its to_dict carries no head_dim; hidden 2,048 is not
    a multiple of its 20 heads) was refused for a missing head_dim; an MLA config's head size is
    its rope part (DeepseekV3Config.__post_init__ ``head_dim = qk_rope_head_dim``): 64, and the
    full-size count 29,943,390,976 = transformers' on the meta device."""
    fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / "glm4_moe_lite.json")
                         .read_text())
    arch = parse_config(fixture["default_config"])
    assert arch.head_dim == 64
    assert arch.params_total == 29_943_390_976 == fixture["params_default"]


def test_attention_sinks_per_family_and_layer_kind():
    """Per-head sinks (``SINK_TYPES``), as transformers 5.24 builds them: MiMo-V2-Flash on its
    sliding layers only (modeling_mimo_v2_flash.py ``MiMoV2FlashAttention``: ``if is_swa``; the
    class default's 39 sliding of 48 layers × 64 heads = 2,496), Granite-SWA on every layer
    (modeling_granite_swa.py: 24 × 20 = 480), Flint on every layer (49 × 32 = 1,568, with its
    per-head q/k norms 49 × 2 × 128 = 12,544). Each class default's count is transformers' on
    the meta device by both kvplan counts; gpt-oss keeps its sinks."""
    from kvplan.weights import params_from_tensors

    for name, sinks in (("mimo_v2_flash", 2_496), ("granite_swa", 480), ("flint", 1_568)):
        fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                             .read_text())
        arch = parse_config(fixture["default_config"])
        assert sum(t.params for t in model_tensors(arch) if t.name.endswith(".sinks")) == sinks
        assert arch.params_total == params_from_tensors(arch) == fixture["params_default"]
    oss = load_model("openai/gpt-oss-20b")
    assert sum(t.params for t in model_tensors(oss) if t.name.endswith(".sinks")) == 24 * 64


def test_per_head_qk_norms_and_axk1s_post_moe_norm():
    """Class defaults of transformers 5.24, short by exactly these before: per-head q/k RMSNorms
    of ``head_dim`` (modeling_exaone_moe.py ``ExaoneMoeAttention``, modeling_hy_v3.py,
    modeling_mellum.py: layers × 2 × head_dim = 8,192, 20,480, 7,168) and A.X-K1's norm on its
    MoE block's output (modeling_axk1.py ``AXK1MoE.post_mlp_layernorm``: 60 MoE layers × 7,168 =
    430,080). Both kvplan counts equal transformers' on the meta device."""
    from kvplan.weights import params_from_tensors

    for name, total in (("exaone_moe", 28_550_639_616), ("hy_v3", 295_033_528_320),
                        ("mellum", 12_149_923_072), ("axk1", 518_983_052_288)):
        fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                             .read_text())
        arch = parse_config(fixture["default_config"])
        assert arch.params_total == params_from_tensors(arch) == total == fixture["params_default"]
    axk1 = parse_config(json.loads((Path(__file__).parent / "fixtures" / "conformance" /
                                    "axk1.json").read_text())["default_config"])
    post = [t for t in model_tensors(axk1) if t.name.endswith("post_mlp_layernorm")]
    assert sum(t.params for t in post) == 60 * 7_168


def test_attention_output_gates_router_biases_and_four_norms():
    """Class defaults of transformers 5.24, by hand against their modeling files. AfMoE
    (modeling_afmoe.py): attention ``gate_proj`` 2,048 × 16 · 128 on 32 layers = 134,217,728,
    ``expert_bias`` 31 MoE layers × 64 = 1,984, four norms per layer (+2 × 65,536), per-head
    q/k norms 2 × 4,096, and the dense first layer (``num_dense_layers``) stored dense: was
    19,098,241,024, now 19,232,600,000. Beam (modeling_beam.py): ``gate_proj`` 5,120 × 48 · 128
    and ``gate_bias`` 48 on 52 layers = 1,635,781,056, four norms, q/k norms: 501,267,599,808 (was
    499,631,272,960). Laguna (modeling_laguna.py, ``gating`` true: per-head ``g_proj`` 2,048 × 48
    on 40 layers = 3,932,160; its query heads from ``num_attention_heads_per_layer``), ERNIE 4.5
    MoE (``moe_statics.e_score_correction_bias`` 27 × 64 = 1,728; its dense first layer,
    ``moe_layer_start_index``, stored dense) and BailingHybrid (MLA ``g_proj`` 7 × 2,560 × 32 =
    573,440; ``mlp_layer_types`` over ``first_k_dense_replace``) are exact too, full-size and
    small."""
    from kvplan.weights import params_from_tensors

    for name, total in (("afmoe", 19_232_600_000), ("beam", 501_267_599_808),
                        ("laguna", 33_189_975_808), ("ernie4_5_moe", 21_825_437_888),
                        ("bailing_hybrid", 124_414_191_072)):
        fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                             .read_text())
        for key, count in (("default_config", "params_default"), ("config", "params_small")):
            arch = parse_config(fixture[key])
            assert arch.params_total == params_from_tensors(arch) == fixture[count], (name, key)
        assert parse_config(fixture["default_config"]).params_total == total
    beam = parse_config(json.loads((Path(__file__).parent / "fixtures" / "conformance" /
                                    "beam.json").read_text())["default_config"])
    gates = [t for t in model_tensors(beam) if ".gate_proj" in t.name or ".gate_bias" in t.name
             if "self_attn" in t.name]
    assert sum(t.params for t in gates) == 52 * (5_120 * 48 * 128 + 48)
    bad = {"model_type": "laguna", "num_attention_heads_per_layer": [48, 32], "hidden_size": 2048,
           "num_attention_heads": 48, "num_hidden_layers": 2, "vocab_size": 1000}
    with pytest.raises(KVPlanError, match="per-layer query head counts"):
        parse_config(bad)


def test_family_layer_vectors_apertus_bitnet_diffllama():
    """``layer_vectors`` (transformers 5.24), class defaults: Apertus' xIELU ``alpha_p`` /
    ``alpha_n`` (32 layers × 2 = 64) and its per-head q/k norms (32 × 2 × 128 = 8,192):
    6,979,596,352 (was 6,979,588,096); BitNet's ``attn_sub_norm`` h and ``ffn_sub_norm`` I
    (30 × (2,560 + 6,912) = 284,160): 2,741,155,840; DiffLlama's four ``lambda_*`` of head_dim
    (16 × 4 × 64 = 4,096): 1,204,885,504 — transformers' meta-device counts, by both kvplan
    counts."""
    from kvplan.weights import params_from_tensors

    for name, total in (("apertus", 6_979_596_352), ("bitnet", 2_741_155_840),
                        ("diffllama", 1_204_885_504)):
        fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                             .read_text())
        arch = parse_config(fixture["default_config"])
        assert arch.params_total == params_from_tensors(arch) == total == fixture["params_default"]


def test_seed_oss_biases_kolibri_and_sarvam_norms():
    """Class defaults of transformers 5.24: Seed-OSS (modeling_seed_oss.py ``SeedOssAttention``:
    q/k/v ``bias=attention_bias`` true, o_proj ``bias=attention_out_bias`` false) holds
    64 × (10,240 + 2 × 1,024) = 786,432 biases and no o_proj bias (kvplan counted none in
    params and stored an o_proj bias: 28,921,303,040 parameters in the tensor list before);
    Kolibri1's per-head q/k norms and post-sublayer norms (modeling_kolibri1.py), Sarvam-MoE's
    per-head q/k norms. Both
    kvplan counts equal transformers' on the meta device."""
    from kvplan.weights import params_from_tensors

    for name, total in (("seed_oss", 28_921_040_896), ("kolibri1", 78_103_055_360),
                        ("sarvam_moe", 32_152_648_064)):
        fixture = json.loads((Path(__file__).parent / "fixtures" / "conformance" / f"{name}.json")
                             .read_text())
        arch = parse_config(fixture["default_config"])
        assert arch.params_total == params_from_tensors(arch) == total == fixture["params_default"]
    seed = parse_config(json.loads((Path(__file__).parent / "fixtures" / "conformance" /
                                    "seed_oss.json").read_text())["default_config"])
    assert not any(t.name.endswith("o_proj.bias") for t in model_tensors(seed))


def test_nvfp4_experts_of_a_non_gated_moe_are_padded_to_128_per_rank_on_blackwell():
    """vLLM v0.13 ``modelopt.py`` ``ModelOptNvFp4FusedMoE.process_weights_after_loading`` (v0.14–v0.33
    ``utils/flashinfer_fp4_moe.py``, the CUTLASS / FlashInfer CUTLASS branch): ``swizzle_blockscale``
    rounds the w13 block-scale rows up to 128, and a non-gated activation's ``w13`` rows and ``w2``
    columns are padded to match (a gated one must already fit: ``NotImplementedError``).

    Nemotron-3-Nano-30B-A3B-NVFP4 (relu2 experts, not gated) at TP 2: intermediate 1,856 / 2 = 928
    per rank → 1,024. Each expert matrix grows by 96 × 2,688 elements of NVFP4 (½ B + one fp8 scale
    per 16 = 9/16 B): 145,152 B; × 2 matrices × 128 experts × 23 MoE layers = 854,654,976 B —
    9,669,680,312 → 10,524,335,288 B per rank (9.0056 → 9.8016 GiB; log 48 prints 9.8291 GiB). Not
    on Hopper (NVFP4 MoE runs on Marlin there: not modelled), not on v0.10–v0.11.0 (no non-gated
    NVFP4 MoE on that path), not for a gated MoE. Each rank also holds vLLM's RoPE cos/sin cache
    (262,144 positions × 128 × 2 B = 67,108,864 B, ``test_vllm_rope_cache``; added by helper
    vllmrope): 10,591,444,152 and 9,736,789,176 B per rank."""
    arch = load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    blackwell, hopper = get_gpu("rtx-5090"), get_gpu("h100-sxm")

    def per_rank(engine: str, gpu) -> int:
        return max(weights_per_gpu(arch, None, 2, rules=get_engine(engine).loading_rules(gpu)).stage_bytes)

    rope = 262_144 * 128 * 2
    assert per_rank("vllm@0.13", blackwell) == 10_524_335_288 + rope == 10_591_444_152
    assert per_rank("vllm", blackwell) == 10_524_335_288 + rope
    assert per_rank("vllm@0.13", hopper) == per_rank("vllm@0.11", blackwell) == 9_669_680_312 + rope
    assert 10_524_335_288 - 9_669_680_312 == 96 * 2688 * 9 // 16 * 2 * 128 * 23
    assert get_engine("vllm@0.13").loading_rules(blackwell).nvfp4_ungated_inter == 128
    assert get_engine("vllm@0.13").loading_rules(get_gpu("mi300x")).nvfp4_ungated_inter == 1
    gated = load_model("nvidia/Qwen3-30B-A3B-NVFP4")  # SiLU-gated experts: never padded here
    held = weights_per_gpu(gated, None, 2, rules=get_engine("vllm").loading_rules(blackwell)).stages[0]
    assert sum(held.values()) - held["rope_cache"] == weights_per_gpu(gated, None, 2).stage_bytes[0]
    # the whole-model total is the checkpoint's, unpadded
    assert weights_per_gpu(arch, None, 2, rules=get_engine("vllm").loading_rules(blackwell)).total_bytes \
        == weights_per_gpu(arch, None, 2).total_bytes
