"""Weights as the engine loads them: parameter tensors per part, their stored format, bytes per GPU.

1. ``model_tensors`` lists every parameter tensor of the checkpoint from the architecture
   (embeddings, attention, dense MLP, MoE experts/shared experts/router, norms, LM head, MTP
   layers, per-layer embeddings, vision/audio towers and projectors), each with the module name
   the checkpoint uses and how tensor parallelism splits it.
2. ``read_quantization`` turns ``quantization_config`` into a ``QuantScheme``: the stored
   ``Format`` of each tensor (its element bits plus scales, zero points and ``g_idx``), following
   the ``create_weights`` of vLLM's quantization methods (``vllm/model_executor/layers/
   quantization/*.py``, v0.33) and transformers' quantizers for the skip lists.
3. ``weights_per_gpu`` sizes each tensor's shard on one GPU: column/row-parallel layers split
   over ``tp``, vocab-parallel embeddings and LM head padded to 64 rows (vLLM
   ``vocab_parallel_embedding.py`` ``pad_vocab_size``) then split, norms/routers replicated,
   experts split over ``ep`` ranks (vLLM ``determine_expert_map``: ``ceil(E / ep)`` on the
   fullest rank) and their intermediate size over ``tp // ep``; layers to pipeline stages as
   vLLM's ``get_pp_indices``, embeddings on the first stage, LM head and final norm on the last.

What is sized is each stored tensor as the engine release holds it after loading, by the
``LoadingRules`` the engine gives (``Engine.loading_rules``, from ``kvplan/engines/<engine>/weights.py``):
which per-shard scales a fused module keeps (``ScalesAtLoad``) and how MXFP4 experts are re-laid out
(``ExpertRepack``: Marlin/Triton/FlashInfer padding, kept or swizzled scales, fp32 biases). The
defaults are vLLM v0.33's scale rules without a repack. The whole-model totals apply the scale
rules but not the repack (it changes only the bytes per GPU). An engine whose weight figure is the
free device memory loading took (SGLang) also gets the ``allocator`` part (PyTorch's caching
allocator's segments beyond the tensors, ``allocator_excess``); an engine whose figure holds the
RoPE cos/sin caches (SGLang in fp32, vLLM in the model dtype) the ``rope_cache`` part
(``rope_cache_bytes``): ``HELD_PARTS``, never in the whole-model totals. This module
imports nothing from ``kvplan.engines``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from bisect import bisect_left, insort
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any, Literal

from kvplan.arch import MLA, Attention, ModelArch, Recurrent, VisionSpec
from kvplan.config_import import (
    ALWAYS_BIAS_TYPES,
    FOUR_NORM_TYPES,
    GEMMA4_TYPES,
    NON_PARAMETRIC_NORM_TYPES,
    ONE_BLOCK_TYPES,
    ONE_NORM_TYPES,
    POST_MOE_NORM_TYPES,
    has_sinks,
    layer_vectors,
)
from kvplan.errors import KVPlanError, short
from kvplan.parallel import layer_partition

#: The parts weights are grouped into (the KPI, the chart and ``weights_breakdown`` use this order).
PARTS: tuple[str, ...] = (
    "embeddings", "attention", "mlp", "experts", "shared_experts", "router", "norms", "lm_head",
    "mtp", "per_layer_embeddings", "vision", "audio", "rope_cache", "allocator",
)
#: Parts that are not stored tensors: what an engine that measures the free device memory around
#: loading holds besides (``LoadingRules.rope_cache``, ``LoadingRules.allocator_segments``).
HELD_PARTS = frozenset({"rope_cache", "allocator"})
#: vLLM ``DEFAULT_VOCAB_PADDING_SIZE`` (``vocab_parallel_embedding.py``).
VOCAB_PADDING = 64
#: Families whose norms are LayerNorm with a bias (two vectors per norm).
_LAYERNORM_BIAS = {"opt", "falcon", "gpt_neox", "phi", "gpt2", "bloom"}

Split = Literal["column", "row", "heads", "replicated", "vocab", "expert_column", "expert_row"]
Stage = Literal["first", "last", "layer"]


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor (or ``experts`` stacked ones) as the checkpoint names it.

    ``rows × cols`` is ``out × in`` for linear layers (``cols = 1`` for vectors); ``{i}`` in the
    name is the decoder layer. ``quantizable``: a linear/expert weight a method may store
    quantized (embeddings, norms, biases and routers stay in the model's dtype). ``shards``:
    logical matrices vLLM fuses (qkv: 3, gate_up: 2), each with its own per-tensor scales.
    """

    name: str
    part: str
    rows: int
    cols: int
    split: Split
    quantizable: bool = True
    experts: int = 1
    shards: int = 1
    heads: int = 0
    layers: tuple[int, ...] = ()
    stage: Stage = "layer"
    kind: Literal["linear", "expert", "lm_head", "other"] = "linear"

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.experts * max(len(self.layers), 1)


def round_up(x: int, multiple: int) -> int:
    """vLLM ``round_up``: the smallest multiple of ``multiple`` ≥ ``x``."""
    return -(-x // multiple) * multiple


@dataclass(frozen=True)
class ExpertRepack:
    """How an engine's MXFP4 MoE backend holds the experts of one rank after loading.

    vLLM ``Mxfp4MoEMethod.create_weights`` (``mxfp4_round_up_hidden_size_and_intermediate_size``)
    allocates ``w13``/``w2`` with the hidden size rounded up to ``hidden`` and the per-rank
    intermediate size to ``inter``; ``process_weights_after_loading`` may then pad the packed
    values (rows to ``value_rows``, columns to ``value_cols``), hold a swizzled copy of the e8m0
    scales with rows padded to ``scale_rows`` (columns to even; 0 = no copy), keep the
    checkpoint's scales beside it (``keeps_scales``) and cast the biases to fp32. The values come
    from the engine (``kvplan.engines.vllm.weights.mxfp4_repack``).
    """

    backend: str
    hidden: int = 1
    inter: int = 1
    value_rows: int = 1
    value_cols: int = 1
    scale_rows: int = 0
    keeps_scales: bool = False
    fp32_bias: bool = False
    source: str = ""
    #: The engine whose backend this is (named in ``describe``).
    engine: str = "vLLM"

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of one expert's ``rows × cols`` MXFP4 matrix (already padded to the backend's
        sizes): packed values, the scales the backend keeps, and its swizzled scale copy."""
        values = round_up(rows, self.value_rows) * round_up(cols, self.value_cols) // 2
        scales = rows * -(-cols // 32)
        if not self.scale_rows:
            return values + scales
        swizzled = round_up(rows, self.scale_rows) * round_up(-(-cols // 32), 2)
        return values + swizzled + (scales if self.keeps_scales else 0)

    def describe(self, hidden: int) -> str:
        """One line naming the backend and its padding (shown with the weight format's source)."""
        kept = ", checkpoint scales kept beside a swizzled copy" if self.keeps_scales else ""
        return (f"{self.engine} {self.backend} MXFP4 MoE backend: hidden {hidden:,} → "
                f"{round_up(hidden, self.hidden):,}, intermediate per rank rounded up to "
                f"{self.inter}{kept}{', fp32 biases' if self.fp32_bias else ''} ({self.source})")


@dataclass(frozen=True)
class ScalesAtLoad:
    """The scales of a stored format whose shape after loading is the engine's choice
    (``LoadingRules``), as the checkpoint stores them.

    ``fp8``: FP8 with one fp32 ``weight_scale`` per fused shard (per-tensor); ``int8_w8a8``: INT8
    weights and activations, ``per_tensor`` (one fp32 ``weight_scale`` per shard; else per output
    row, counted by the format); ``wna16``: compressed-tensors weight-only integers with an int64
    ``weight_shape`` pair per module. ``static_input``: a static fp32 ``input_scale`` per shard
    (plus an int32 ``input_zero_point`` when ``asymmetric``); ``asymmetric``: int8 activations with
    a zero point.
    """

    method: Literal["fp8", "int8_w8a8", "wna16"]
    per_tensor: bool = False
    static_input: bool = False
    asymmetric: bool = False


@dataclass(frozen=True)
class LoadingRules:
    """What an engine release holds of the stored weights after loading: the rules
    ``weights_per_gpu`` applies (each engine's in ``kvplan/engines/<engine>/weights.py``,
    through ``Engine.loading_rules``).

    The defaults are vLLM v0.33's (each method's ``process_weights_after_loading``), without an
    MXFP4 repack — what a caller that names no engine gets:

    * ``fp8_scale_per_module``: FP8 per-tensor ``weight_scale`` of a fused module's shards
      requantized to one (``utils/fp8_utils.py`` ``process_fp8_weight_tensor_strategy`` →
      ``w8a8_utils.py`` ``requantize_with_max_scale``); an expert matrix keeps one per expert
      (``process_fp8_weight_tensor_strategy_moe``: the max over w1/w3). False: one per shard.
    * ``static_input_per_module``: a static ``input_scale`` (and INT8 zero point) per shard
      collapsed to one per module (``input_scale.max()``; ``scaled_mm/cutlass.py``
      ``CutlassInt8ScaledMMLinearKernel.process_weights_after_loading`` for INT8).
    * ``int8_fused_scales_per_row``: INT8 W8A8 per-tensor weight scales of a fused module (qkv,
      gate_up) expanded to one fp32 per output row (``convert_to_channelwise``, as the CUTLASS
      kernel needs); an unfused module keeps its one scale.
    * ``int8_azp_adj``: asymmetric INT8 activations add an int32 ``azp_adj`` per output row
      (``weight.sum(dim=0)``, the same CUTLASS function).
    * ``wna16_weight_shape``: compressed-tensors WNA16 keeps its int64 ``weight_shape`` pair per
      module (``compressed_tensors_wNa16.py`` ``CompressedTensorsWNA16.create_weights``).
    * ``mxfp4_experts``: how MXFP4 MoE experts are re-laid out on the GPU (None: as stored).
    * ``nvfp4_ungated_inter``: NVFP4 experts of a model whose MoE activation is not gated (one
      up matrix, Nemotron-H's relu2) have their per-rank intermediate size padded to a multiple of
      this — ``w13`` rows, ``w2`` columns and their block scales (vLLM
      ``utils/flashinfer_fp4_moe.py`` ``prepare_nvfp4_moe_layer_for_fi_or_cutlass`` /
      v0.13 ``modelopt.py`` ``ModelOptNvFp4FusedMoE.process_weights_after_loading``:
      ``swizzle_blockscale`` pads the scale rows to 128 and the weights are padded to match); 1:
      as stored.
    """

    fp8_scale_per_module: bool = True
    static_input_per_module: bool = True
    int8_fused_scales_per_row: bool = True
    int8_azp_adj: bool = True
    wna16_weight_shape: bool = True
    mxfp4_experts: ExpertRepack | None = None
    nvfp4_ungated_inter: int = 1
    #: Bytes of a WNA16 expert matrix's ``weight_shape`` per expert (SGLang
    #: ``compressed_tensors_wNa16_moe.py`` ``CompressedTensorsWNA16MoE.create_weights``:
    #: ``torch.empty(num_experts, 2)``, fp32, 8 B); None: as a linear module (``scale_bytes``).
    wna16_expert_shape_bytes: int | None = None
    #: WNA16 experts keep an int32 ``g_idx`` and an int32 ``g_idx_sort_indices`` per input column
    #: of each expert matrix after loading (SGLang ``CompressedTensorsWNA16TritonMoE``, the ROCm
    #: method: its ``process_weights_after_loading`` does not empty them, unlike Marlin's).
    wna16_expert_g_idx: bool = False
    #: MLA: the engine keeps ``kv_b_proj`` and adds its ``w_kc``/``w_vc`` copies per layer (SGLang
    #: ``deepseek_v2.py`` / ``deepseek_weight_loader.py`` ``post_load_weights``), on ``"cuda"`` or
    #: ``"hip"`` (the FP8 rule differs: ``mla_absorbed_bytes``); None: no copy.
    mla_absorbed_copy: Literal["cuda", "hip"] | None = None
    #: Tower layouts whose MLP and projector the engine builds unsharded on every rank (SGLang
    #: ``kimi_k25.py``: MoonViT's ``MLP2`` is ``nn.Linear``, ``K2VLMultiModalProjector``
    #: ``ReplicatedLinear``; its attention stays TP-split, ``VisionAttention``).
    replicated_tower_mlp: frozenset[str] = frozenset()
    #: The engine's weight figure is the free device memory loading took (SGLang "Load weight end
    #: … mem usage", ``torch.cuda.mem_get_info`` after ``empty_cache``): each parameter is held as
    #: PyTorch's caching allocator rounds its segment (``allocator_excess``), the ``allocator`` part.
    allocator_segments: bool = False
    #: The engine keeps RoPE's cos/sin cache on the device from model construction, one per
    #: distinct rotary set (``rope_cache_bytes``), the ``rope_cache`` part: ``fp32`` — SGLang keeps
    #: it fp32 (``RotaryEmbedding.__init__``); ``model`` — vLLM casts it to the model dtype
    #: (``rotary_embedding/base.py`` ``RotaryEmbedding.__init__``: ``cache.to(dtype)``); None: not
    #: in the engine's weight figure.
    rope_cache: Literal["fp32", "model"] | None = None
    #: LongRoPE keeps only the concatenated short+long cache (vLLM v0.11+
    #: ``phi3_long_rope_scaled_rope.py``: one ``long_short_cos_sin_cache`` buffer), not the short
    #: and long caches besides (SGLang, vLLM v0.6 ``rotary_embedding.py``: three buffers).
    rope_longrope_concat_only: bool = False
    #: MRoPE's cache holds this many times the positions (vLLM v0.11+ ``mrope.py``
    #: ``MRotaryEmbedding.__init__``: ``cache_max_position_num = max_position_embeddings * 4``; 1 in
    #: vLLM v0.6 and SGLang).
    rope_mrope_positions: int = 1
    #: A ``proportional`` RoPE set rotates the whole head (vLLM 0.19.0 ``gemma4_rope.py``
    #: ``Gemma4RotaryEmbedding``: ``rotary_dim = head_size``; ``rope_cache_bytes``).
    rope_proportional_full_head: bool = False
    #: Model types whose engine builds one unscaled cos/sin cache per attention type instead of the
    #: config's RoPE sets (``rope_cache_bytes``' ``unscaled_per_layer_type``).
    rope_unscaled_per_layer_type: frozenset[str] = frozenset()

    def scale_bytes(self, scales: ScalesAtLoad, rows: int, shards: int) -> int:
        """Bytes of the rule-dependent scales of one ``rows``-row matrix fusing ``shards`` shards."""
        if scales.method == "wna16":
            return 16 if self.wna16_weight_shape else 0
        inputs = (1 + scales.asymmetric) if scales.static_input else 0  # scale (+ int32 zero point)
        total = 4 * inputs * (1 if self.static_input_per_module else shards)
        if scales.method == "fp8":
            return total + 4 * (1 if self.fp8_scale_per_module else shards)
        if scales.per_tensor:
            total += 4 * (rows if self.int8_fused_scales_per_row and shards > 1 else shards)
        if scales.asymmetric and self.int8_azp_adj:
            total += 4 * rows
        return total


#: vLLM v0.33's rules without a repack (``LoadingRules``' defaults).
DEFAULT_RULES = LoadingRules()


@dataclass(frozen=True)
class Format:
    """A stored weight format: element bits plus what each scale/zero/index tensor adds.

    Bytes of one ``rows × cols`` matrix: ``ceil(rows·cols·bits/8)`` + group scales and zeros
    (``rows · ceil(cols/group)`` groups, or ``ceil(rows·cols/group)`` when ``flat``) + nested
    scales (one fp32 per ``nested`` groups) + per-row scales + ``ceil(rows/bn)·ceil(cols/bk)``
    block scales + ``tensor_scales`` fp32 scalars per fused shard + an int32 ``g_idx`` per column
    + the ``scales`` the engine's ``LoadingRules`` decide (``LoadingRules.scale_bytes``).
    """

    name: str
    label: str
    bits: int
    group: int = 0
    group_scale_bits: int = 0
    zero_bits: int = 0
    flat: bool = False
    nested: int = 0
    row_scale_bytes: int = 0
    block: tuple[int, int] | None = None
    block_scale_bytes: int = 4
    tensor_scales: int = 0
    g_idx: bool = False
    source: str = ""
    #: Scales whose layout after loading the engine decides (None: none).
    scales: ScalesAtLoad | None = None

    def matrix_bytes(self, rows: int, cols: int, shards: int = 1,
                     rules: LoadingRules = DEFAULT_RULES) -> int:
        """Exact bytes of one ``rows × cols`` matrix in this format as ``rules`` hold it (see the
        class docstring)."""
        n = rows * cols
        if n <= 0:
            return 0
        total = -(-n * self.bits // 8)
        if self.group:
            groups = -(-n // self.group) if self.flat else rows * -(-cols // self.group)
            total += -(-groups * (self.group_scale_bits + self.zero_bits) // 8)
            if self.nested:
                total += 4 * -(-groups // self.nested)
        total += rows * self.row_scale_bytes
        if self.block is not None:
            total += -(-rows // self.block[0]) * -(-cols // self.block[1]) * self.block_scale_bytes
        total += 4 * self.tensor_scales * shards
        if self.scales is not None:
            total += rules.scale_bytes(self.scales, rows, shards)
        if self.g_idx:
            total += 4 * cols
        return total


def plain_format(name: str) -> Format:
    """An unquantized float format (fp32/fp16/bf16) by name."""
    bits = {"fp32": 32, "fp16": 16, "bf16": 16}.get(name)
    if bits is None:
        raise KVPlanError("unknown.dtype", value=name, choices="fp32, fp16, bf16")
    return Format(name, name, bits, source="unquantized")


def format_from_dtype(name: str, model_dtype: str) -> Format:
    """The user's ``weight_dtype`` override (``kvplan.dtypes`` weight formats) as a ``Format``."""
    from kvplan.dtypes import WEIGHT_DTYPES, get_weight_dtype

    try:
        fmt = get_weight_dtype(name)
    except KeyError:
        raise KVPlanError("unknown.dtype", value=name, choices=", ".join(WEIGHT_DTYPES)) from None
    if fmt.name in {"fp32", "fp16", "bf16"}:
        return plain_format(fmt.name)
    group = fmt.group_size if isinstance(fmt.group_size, int) else 0
    return Format(fmt.name, fmt.label or fmt.name, fmt.bits, group=group,
                  group_scale_bits=fmt.scale_bits if group else 0,
                  zero_bits=fmt.zero_bits if group else 0,
                  row_scale_bytes=0, source=f"weight dtype {fmt.name} chosen by the user")


# --------------------------------------------------------------------------------------------
# Formats of each quantization method (vLLM v0.33 create_weights)


def _fp8(block: tuple[int, int] | None, static_act: bool, source: str) -> Format:
    """FP8 e4m3: block-wise → one fp32 ``weight_scale_inv`` per ``bn × bk`` block; else
    per-tensor (``_fp8_per_tensor``)."""
    if block is not None:
        return Format(f"fp8_block{block[0]}x{block[1]}", f"FP8 (e4m3, {block[0]}×{block[1]} blocks)",
                      8, block=block, source=source)
    return _fp8_per_tensor("fp8", "FP8 (e4m3, per-tensor scale)", static_act, source)


def _fp8_per_tensor(name: str, label: str, static_act: bool, source: str) -> Format:
    """FP8 with per-tensor scales: the checkpoint's fp32 ``weight_scale`` (and, static, its
    ``input_scale``) per fused shard; how many survive loading is the engine's rule
    (``LoadingRules.fp8_scale_per_module``, ``static_input_per_module``: vLLM ``fp8.py``
    ``Fp8LinearMethod``, ``compressed_tensors_w8a8_fp8.py``, ``modelopt.py``
    ``process_weights_after_loading`` keep one of each per module)."""
    return Format(name, label, 8, scales=ScalesAtLoad("fp8", per_tensor=True, static_input=static_act),
                  source=source)


MXFP4 = Format("mxfp4", "MXFP4 (e2m1, e8m0 scale per 32)", 4, group=32, group_scale_bits=8,
               source="vLLM quantization/mxfp4.py Mxfp4MoEMethod.create_weights: uint8 weights "
                      "(2 per byte) + uint8 e8m0 scale per 32")
NVFP4 = Format("nvfp4", "NVFP4 (e2m1, fp8 scale per 16 + fp32 globals)", 4, group=16,
               group_scale_bits=8, tensor_scales=2,
               source="vLLM quantization/modelopt.py ModelOptNvFp4LinearMethod.create_weights: "
                      "uint8 weights, fp8 weight_scale per 16, fp32 weight_scale_2 + input_scale")


def _repacked_bytes(t: Tensor, repack: ExpertRepack, arch: ModelArch, tp: int, ep: int,
                    base: Format) -> int:
    """Bytes on the fullest rank of one MXFP4 expert tensor (or its bias) as ``repack`` holds it:
    ``w13`` is ``2·round_up(I/tp, inter) × round_up(H, hidden)``, ``w2`` the transpose."""
    moe = arch.moe
    assert moe is not None
    inter = round_up(-(-moe.expert_intermediate // (tp // ep)), repack.inter)
    hidden = round_up(arch.hidden_size, repack.hidden)
    rows = t.rows // moe.expert_intermediate * inter if t.split == "expert_column" else hidden
    copies = -(-t.experts // ep)
    if t.kind != "expert":  # a bias vector per expert
        return copies * rows * (4 if repack.fp32_bias else base.bits // 8)
    cols = hidden if t.split == "expert_column" else inter
    return copies * repack.matrix_bytes(rows, cols)


@dataclass(frozen=True)
class QuantScheme:
    """How a checkpoint stores each tensor: the method, its formats and its skip lists."""

    method: str
    base: Format
    linear: Format | None = None
    expert: Format | None = None
    lm_head: Format | None = None
    #: Skip patterns and how vLLM/transformers match them ("exact", "substring", "glob", "ct").
    skip: tuple[str, ...] = ()
    match: Literal["exact", "substring", "glob", "ct"] = "exact"
    #: compressed-tensors: (targets, format) per config group, first match wins.
    groups: tuple[tuple[tuple[str, ...], Format], ...] = ()
    #: GPTQ ``modules_in_block_to_quantize``: when given, only these (substrings) are quantized.
    only: tuple[str, ...] = ()
    source: str = "config.json (no quantization_config)"
    _skipped_memo: dict[str, bool] = field(default_factory=dict, compare=False, hash=False,
                                           repr=False)

    @cached_property
    def layer_specific(self) -> bool:
        """Whether a skip/only/target pattern names digits (a digit, or ``\\d`` in a regex): then
        each layer's format is looked up. Otherwise a pattern treats every digit alike, so a
        layer's format depends only on how many digits its number has (``_formats_by_layer``)."""
        patterns = self.skip + self.only + tuple(t for targets, _ in self.groups for t in targets)
        return any(re.search(r"\d|\\d", p) for p in patterns)

    def skipped(self, name: str) -> bool:
        """Whether ``name`` is left unquantized by the skip list (vLLM ``is_layer_skipped``
        exact/substring; transformers ``should_convert_module`` globs; compressed-tensors
        ``re:`` regexes, ``find_matched_target``). A pattern matches ``name`` exactly or as a
        dotted prefix (a module and its children); under "substring" anywhere in it; under
        "glob"/"ct" a ``*`` pattern by ``fnmatch`` (of the name or its children); a ``re:``
        pattern by ``re.match``. Answers are remembered per name (skip lists run to thousands
        of names, asked once per tensor, layer and layout)."""
        memo = self._skipped_memo
        if name not in memo:
            memo[name] = self._skip_match(name)
        return memo[name]

    @cached_property
    def _skip_index(self) -> tuple[frozenset[str], tuple[re.Pattern[str], ...], tuple[str, ...]]:
        """The skip list split for matching: every pattern as an exact/prefix name, the ``re:``
        patterns compiled, and the ``*`` patterns that "glob"/"ct" matching reads."""
        regexes = tuple(re.compile(p[3:]) for p in self.skip if p.startswith("re:"))
        globs = tuple(p for p in self.skip if "*" in p) if self.match in {"glob", "ct"} else ()
        return frozenset(self.skip), regexes, globs

    def _skip_match(self, name: str) -> bool:
        if self.match == "substring" and any(pattern in name for pattern in self.skip):
            return True
        exact, regexes, globs = self._skip_index
        if name in exact or any(name[:i] in exact for i, c in enumerate(name) if c == "."):
            return True
        if any(rx.match(name) is not None for rx in regexes):
            return True
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*")
                   for p in globs)

    def format_for(self, tensor: Tensor, layer: int | None) -> Format:
        """The stored format of one tensor (at decoder layer ``layer``)."""
        if not tensor.quantizable:
            return self.base
        name = tensor.name.replace("{i}", str(layer if layer is not None else 0))
        if self.skip and self.skipped(name):
            return self.base
        if self.only and tensor.kind != "lm_head" and not any(m in name for m in self.only):
            return self.base
        if self.groups:
            if tensor.kind == "lm_head" and not any("lm_head" in t for t, _ in self.groups):
                return self.base
            for targets, fmt in self.groups:
                if any(_ct_target(t, name) for t in targets):
                    return fmt
            return self.base
        if tensor.kind == "expert":
            return self.expert or self.base
        if tensor.kind == "lm_head":
            return self.lm_head or self.base
        return self.linear or self.base

    def describe(self) -> str:
        return f"quant_method {self.method}" if self.method != "none" else "unquantized"


def _ct_target(target: str, name: str) -> bool:
    """compressed-tensors target: ``Linear`` (every linear), ``re:`` regex or the exact name."""
    if target == "Linear":
        return True
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return name == target or name.endswith("." + target)


def _bad(key: str, expected: str, value: Any) -> KVPlanError:
    return KVPlanError("weights.bad_quantization", key=key, expected=expected, value=short(value))


def _int(qc: dict[str, Any], key: str, default: int, allowed: tuple[int, ...] | None = None,
         low: int = -1) -> int:
    value = qc.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            allowed is not None and value not in allowed):
        expected = f"one of {allowed}" if allowed else f"a whole number ≥ {low}"
        raise _bad(key, expected, value)
    return value


def _check_patterns(key: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Module patterns as given; ``re:`` regexes must compile (and stay short)."""
    for pattern in patterns:
        if len(pattern) > 500:
            raise _bad(key, "module patterns of at most 500 characters", pattern)
        if pattern.startswith("re:"):
            try:
                re.compile(pattern[3:])
            except re.error as exc:
                raise _bad(key, f"valid regular expressions ({exc.msg})", pattern) from None
    return patterns


#: Checkpoint module names → the names ``model_tensors`` gives the same modules, applied to a
#: quantization config's skip and module lists before matching, as vLLM maps them through the
#: model's ``hf_to_vllm_mapper`` (``QuantizationConfig.apply_vllm_mapper``; vLLM 0.33
#: ``modelopt.py`` ``ModelOptQuantConfigBase.apply_vllm_mapper``). Every model: multimodal
#: wrappers keep the text model under ``model.language_model.`` (``qwen3_5.py``, ``gemma4_mm.py``
#: ``hf_to_vllm_mapper``), and the gated-delta mixer is the checkpoint's ``linear_attn``
#: (``qwen3_5.py`` ``self.linear_attn``), kvplan's ``mixer``. Per naming (``module_naming``):
#: Gemma-4's MoE layers hold the dense ``mlp``, the ``router`` and the ``experts`` side by side
#: (``gemma4.py`` ``Gemma4DecoderLayer``), kvplan's ``mlp.shared_experts``, ``mlp.gate`` and
#: ``mlp.experts``. NemotronH keeps its layers under ``backbone.`` and names every block's mixer
#: ``mixer`` — attention too (vLLM ``nemotron_h.py`` ``hf_to_vllm_mapper`` ``backbone`` →
#: ``model``, ``NemotronHAttentionDecoderLayer.mixer``): kvplan's ``self_attn.{q,k,v,o}_proj``,
#: and a Mamba2 mixer's ``in_proj``/``out_proj`` are kvplan's one ``mixer.in_proj``. Each rule is
#: a regex substitution on the pattern.
CHECKPOINT_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "": ((r"^model\.language_model\.", "model."), (r"linear_attn", "mixer")),
    "gemma4_moe": ((r"(layers\.[^.]+)\.mlp(?=$|[.*])", r"\1.mlp.shared_experts"),
                   (r"(layers\.[^.]+)\.router(?=$|[.*])", r"\1.mlp.gate"),
                   (r"(layers\.[^.]+)\.experts(?=$|[.*])", r"\1.mlp.experts")),
    "nemotron_h": ((r"^backbone\.", "model."), (r"\.mixer\.([qkvo])_proj", r".self_attn.\1_proj"),
                   (r"\.mixer\.out_proj", ".mixer.in_proj")),
}


def module_naming(arch: ModelArch) -> str:
    """Which ``CHECKPOINT_NAMES`` rules beyond the common ones name this model's modules."""
    if arch.model_type == "nemotron_h":
        return "nemotron_h"
    return "gemma4_moe" if arch.model_type.startswith("gemma4") and arch.moe is not None else ""


def checkpoint_to_model_name(pattern: str, naming: str = "") -> str:
    """A module name or pattern of the checkpoint in ``model_tensors``' naming."""
    for old, new in CHECKPOINT_NAMES[""] + (CHECKPOINT_NAMES[naming] if naming else ()):
        pattern = re.sub(old, new, pattern)
    return pattern


def _list(qc: dict[str, Any], *keys: str) -> tuple[str, ...]:
    for key in keys:
        value = qc.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _bad(key, "a list of module names", value)
        return _check_patterns(key, tuple(value))
    return ()


@lru_cache(maxsize=256)
def read_quantization(text: str | None, model_dtype: str, naming: str = "") -> QuantScheme:
    """The ``QuantScheme`` of a ``quantization_config`` (JSON text); unknown methods and malformed
    configs raise a named ``KVPlanError``, nothing is guessed. Skip and module lists are read in
    ``model_tensors``' names (``checkpoint_to_model_name`` with ``naming``, see
    ``module_naming``)."""
    base = plain_format(model_dtype if model_dtype in {"fp32", "fp16", "bf16"} else "bf16")
    if text is None:
        return QuantScheme("none", base)
    qc = json.loads(text)
    method = qc.get("quant_method") or ("compressed-tensors" if "config_groups" in qc else None) \
        or _modelopt_producer(qc)
    if not isinstance(method, str):
        raise _bad("quant_method", "a method name", method)
    method = method.lower().replace("_", "-") if method.lower() in {
        "compressed_tensors", "compressed-tensors"} else method.lower()
    src = f"config.json quantization_config (quant_method {method})"
    builder = _METHODS.get(method)
    if builder is None:
        raise KVPlanError("weights.unknown_method", method=short(method, 40),
                          known=", ".join(sorted(_METHODS)))
    scheme = builder(qc, base, src)
    return replace(scheme, method=method, source=src,
                   skip=tuple(checkpoint_to_model_name(p, naming) for p in scheme.skip),
                   only=tuple(checkpoint_to_model_name(p, naming) for p in scheme.only))


def _modelopt_producer(qc: dict[str, Any]) -> str | None:
    """``modelopt`` for a ModelOpt ``hf_quant_config.json`` (no ``quant_method``; ``producer.name``
    "modelopt" and a ``quantization`` block): vLLM ``modelopt.py``
    ``ModelOptFp8Config``/``ModelOptNvFp4Config.override_quantization_method`` pick the method from
    the producer and ``quant_algo``."""
    producer = qc.get("producer")
    if isinstance(producer, dict) and producer.get("name") == "modelopt" \
            and isinstance(qc.get("quantization"), dict):
        return "modelopt"
    return None


def _scheme_fp8(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """vLLM ``fp8.py`` ``Fp8Config``: ``weight_block_size``, ``activation_scheme``, and
    ``ignored_layers``/``modules_to_not_convert`` matched exactly (``is_layer_skipped``)."""
    block = qc.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or len(block) != 2 or not all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise _bad("weight_block_size", "two positive whole numbers [n, k]", block)
    act = qc.get("activation_scheme", "dynamic")
    if not isinstance(act, str) or act not in {"dynamic", "static"}:
        raise _bad("activation_scheme", "'dynamic' or 'static'", act)
    fmt = _fp8((block[0], block[1]) if block else None, act == "static",
               "vLLM fp8.py Fp8LinearMethod/Fp8MoEMethod.create_weights")
    return QuantScheme("fp8", base, linear=fmt, expert=fmt,
                       skip=_list(qc, "ignored_layers", "modules_to_not_convert"), match="exact")


def _scheme_fbgemm(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """vLLM ``fbgemm_fp8.py``: fp8 weights with one fp32 scale per output channel."""
    fmt = Format("fp8_channel", "FP8 (e4m3, per-channel scale)", 8, row_scale_bytes=4,
                 source="vLLM fbgemm_fp8.py FBGEMMFp8LinearMethod.create_weights")
    return QuantScheme("fbgemm_fp8", base, linear=fmt, expert=fmt,
                       skip=_list(qc, "modules_to_not_convert"), match="substring")


def _scheme_mxfp4(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """vLLM ``mxfp4.py`` ``Mxfp4Config``: experts only (linear layers unquantized)."""
    return QuantScheme("mxfp4", base, expert=MXFP4, skip=_list(qc, "modules_to_not_convert"),
                       match="glob")


def _scheme_modelopt(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """vLLM ``modelopt.py``: ``quant_algo`` FP8 (one fp32 weight + input scale per module) or NVFP4
    (``ModelOptNvFp4Config``, group 16); ``exclude_modules`` globs."""
    nested = qc.get("quantization")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else qc
    algo = str(inner.get("quant_algo") or "").upper()
    if algo == "FP8":
        fmt = _fp8_per_tensor("fp8", "FP8 (e4m3, ModelOpt per-tensor scales)", True,
                              "vLLM modelopt.py FP8 create_weights + process (max scale per module)")
    elif algo in {"NVFP4", "FP4"}:
        group = _int(inner, "group_size", 16, allowed=(16,))
        fmt = replace(NVFP4, group=group)
    else:
        raise _bad("quant_algo", "FP8 or NVFP4", inner.get("quant_algo"))
    return QuantScheme("modelopt", base, linear=fmt, expert=fmt,
                       skip=_list(inner, "exclude_modules", "ignore"), match="glob")


def _scheme_modelopt_fp4(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    return _scheme_modelopt({**qc, "quant_algo": qc.get("quant_algo") or "NVFP4"}, base, src)


def _wna16(bits: int, group: int, cols_group: bool, zero: bool, g_idx: bool, name: str,
           label: str, source: str) -> Format:
    return Format(name, label, bits, group=group, group_scale_bits=16,
                  zero_bits=bits if zero else 0, g_idx=g_idx, source=source) if cols_group else \
        Format(name, label, bits, row_scale_bytes=2, zero_bits=0, g_idx=g_idx, source=source)


def _scheme_gptq(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """vLLM ``auto_gptq.py`` ``AutoGPTQLinearMethod.create_weights`` (v0.33): int32-packed
    ``qweight``, ``scales`` in the model dtype and packed ``qzeros`` per group (``group_size`` −1
    = one group per column) — no ``g_idx`` is held (the checkpoint's ``g_idx`` is not loaded;
    act-order with groups is refused by ``normalize_and_validate_gptq_desc_act``). Skipped:
    ``dynamic`` rules ``-:regex`` (``get_dynamic_override``), and when
    ``modules_in_block_to_quantize`` is given, every other module."""
    bits = _int(qc, "bits", 4, allowed=(2, 3, 4, 8))
    group = _int(qc, "group_size", 128, low=-1)
    if group == 0:
        raise _bad("group_size", "a positive whole number or -1", group)
    desc = qc.get("desc_act", False)
    if not isinstance(desc, bool):
        raise _bad("desc_act", "true or false", desc)
    dynamic = qc.get("dynamic") or {}
    if not isinstance(dynamic, dict):
        raise _bad("dynamic", "an object of module rules", dynamic)
    only = qc.get("modules_in_block_to_quantize") or []
    if not isinstance(only, list):
        raise _bad("modules_in_block_to_quantize", "a list of module names", only)
    flat = [m for item in only for m in (item if isinstance(item, list) else [item])]
    act_order = desc and group > 0
    fmt = Format(f"gptq_int{bits}", f"GPTQ int{bits} (g{group if group > 0 else 'channel'}"
                 f"{', act-order: refused by vLLM v0.33' if act_order else ''})", bits,
                 group=group if group > 0 else 10**12, group_scale_bits=16, zero_bits=bits,
                 source="vLLM auto_gptq.py AutoGPTQLinearMethod.create_weights")
    head = fmt if qc.get("lm_head") is True else None
    skip = _check_patterns("dynamic", tuple("re:" + str(p)[2:] for p in dynamic
                                            if str(p).startswith("-:")))
    return QuantScheme("gptq", base, linear=fmt, expert=fmt, lm_head=head,
                       skip=skip + _list(qc, "modules_to_not_convert"), match="substring",
                       only=tuple(str(m) for m in flat))


def _scheme_awq(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """vLLM ``awq.py`` ``AWQLinearMethod.create_weights``: packed ``qweight``, fp16 ``scales`` and
    packed ``qzeros`` per group (``zero_point``), no ``g_idx``; ``modules_to_not_convert``."""
    bits = _int(qc, "bits" if "bits" in qc else "w_bit", 4, allowed=(4, 8))
    group = _int(qc, "group_size" if "group_size" in qc else "q_group_size", 128, low=1)
    zero = qc.get("zero_point", True)
    if not isinstance(zero, bool):
        raise _bad("zero_point", "true or false", zero)
    fmt = Format(f"awq_int{bits}", f"AWQ int{bits} (g{group})", bits, group=group,
                 group_scale_bits=16, zero_bits=bits if zero else 0,
                 source="vLLM awq.py AWQLinearMethod.create_weights")
    return QuantScheme("awq", base, linear=fmt, expert=fmt,
                       skip=_list(qc, "modules_to_not_convert"), match="substring")


def _scheme_bnb(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """bitsandbytes: 4-bit (nf4/fp4) packs two values per byte with an absmax per 64 values —
    fp32, or with double quant a uint8 plus one fp32 per 256 absmax (``Params4bit``/
    ``QuantState``); 8-bit stores int8 plus an fp32 ``SCB`` per row (``Int8Params``)
    (transformers ``quantizer_bnb_4bit.py``/``_8bit.py``; vLLM ``bitsandbytes.py``).
    ``llm_int8_skip_modules`` matched as substrings."""
    four, eight = qc.get("load_in_4bit", False), qc.get("load_in_8bit", False)
    if four is True:
        kind = qc.get("bnb_4bit_quant_type", "fp4")
        if not isinstance(kind, str) or kind not in {"nf4", "fp4"}:
            raise _bad("bnb_4bit_quant_type", "'nf4' or 'fp4'", kind)
        double = qc.get("bnb_4bit_use_double_quant", False) is True
        fmt = Format(f"bnb_{kind}", f"bitsandbytes {kind}{' (double quant)' if double else ''}", 4,
                     group=64, group_scale_bits=8 if double else 32, flat=True,
                     nested=256 if double else 0, source="bitsandbytes Params4bit, blocksize 64")
    elif eight is True:
        fmt = Format("bnb_int8", "bitsandbytes int8 (LLM.int8)", 8, row_scale_bytes=4,
                     source="bitsandbytes Int8Params: int8 + fp32 SCB per row")
    else:
        raise _bad("load_in_4bit", "load_in_4bit or load_in_8bit true", qc.get("load_in_4bit"))
    return QuantScheme("bitsandbytes", base, linear=fmt, expert=fmt,
                       skip=_list(qc, "llm_int8_skip_modules"), match="substring")


def _ct_format(args: dict[str, Any], inputs: Any, fmt_name: str) -> Format:
    """One compressed-tensors weight scheme (vLLM ``compressed_tensors/schemes``: W8A8 fp8/int8
    per tensor/channel/block, WNA16 groups, NVFP4 ``tensor_group``)."""
    bits = _int(args, "num_bits", 8, allowed=(2, 3, 4, 8, 16))
    kind = args.get("type", "int")
    strategy = args.get("strategy", "tensor")
    if not isinstance(strategy, str):
        raise _bad("strategy", "tensor, channel, block, group or tensor_group", strategy)
    if not isinstance(kind, str) or kind not in {"int", "float"}:
        raise _bad("weights.type", "'int' or 'float'", kind)
    static = isinstance(inputs, dict) and inputs.get("dynamic") is False
    zero = bits if args.get("symmetric", True) is False else 0
    label = f"{'FP' if kind == 'float' else 'INT'}{bits}"
    src = "vLLM compressed_tensors/schemes create_weights"
    if kind == "int" and bits == 8 and isinstance(inputs, dict) and strategy in {"tensor", "channel"}:
        return _ct_int8_w8a8(strategy, static, inputs.get("symmetric", True) is not False)
    #: Weight-only integers (vLLM ``compressed_tensors_wNa16.py`` ``CompressedTensorsWNA16``): scales
    #: in the model dtype (2 B) and an int64 ``weight_shape`` pair per module
    #: (``LoadingRules.wna16_weight_shape``).
    wna16 = kind == "int" and not isinstance(inputs, dict)
    shape = ScalesAtLoad("wna16") if wna16 else None
    if strategy == "tensor" and kind == "float" and bits == 8:
        return _fp8_per_tensor(f"ct_{label.lower()}_tensor", f"{label} (per-tensor scale)", static, src)
    if strategy == "tensor":
        return Format(f"ct_{label.lower()}_tensor", f"{label} (per-tensor scale)", bits,
                      tensor_scales=2 if static else 1, source=src)
    if strategy == "channel":
        return Format(f"ct_{label.lower()}_channel", f"{label} (per-channel scale)", bits,
                      row_scale_bytes=2 if wna16 else 4, zero_bits=0,
                      tensor_scales=1 if static else 0, scales=shape, source=src)
    if strategy == "block":
        block = args.get("block_structure")
        if not isinstance(block, list) or len(block) != 2 or not all(
                isinstance(b, int) and b > 0 for b in block):
            raise _bad("block_structure", "two positive whole numbers", block)
        return Format(f"ct_{label.lower()}_block", f"{label} ({block[0]}×{block[1]} blocks)", bits,
                      block=(block[0], block[1]), source=src)
    if strategy in {"group", "tensor_group"}:
        group = _int(args, "group_size", 128, low=1)
        if strategy == "tensor_group":
            return replace(NVFP4, group=group, source=src + " (NVFP4 tensor_group)")
        return Format(f"ct_{label.lower()}_g{group}", f"{label} (g{group})", bits, group=group,
                      group_scale_bits=16, zero_bits=zero, scales=shape, source=src)
    raise _bad("strategy", "tensor, channel, block, group or tensor_group", strategy)


def _ct_int8_w8a8(strategy: str, static: bool, input_symmetric: bool) -> Format:
    """INT8 W8A8 (v0.33 ``compressed_tensors_w8a8_int8.py`` ``CompressedTensorsW8A8Int8.create_weights``):
    int8 weight; fp32 ``weight_scale`` per output row (channel) or per shard (tensor); a static
    ``input_scale`` per shard, plus an int32 ``input_zero_point`` when asymmetric. How the
    per-tensor and input scales survive loading, and the ``azp_adj`` asymmetric activations add,
    are the engine's rules (``LoadingRules``: vLLM's CUTLASS kernel,
    ``kernels/linear/scaled_mm/cutlass.py`` ``CutlassInt8ScaledMMLinearKernel.process_weights_after_loading``,
    unchanged since v0.6)."""
    acts = f"{'static' if static else 'dynamic'}{'' if input_symmetric else ' asymmetric'} int8 activations"
    return Format(f"ct_int8_{strategy}", f"INT8 W8A8 (per-{strategy} scale, {acts})", 8,
                  row_scale_bytes=4 if strategy == "channel" else 0,
                  scales=ScalesAtLoad("int8_w8a8", per_tensor=strategy == "tensor", static_input=static,
                                      asymmetric=not input_symmetric),
                  source="vLLM compressed_tensors_w8a8_int8.py + scaled_mm/cutlass.py "
                         "CutlassInt8ScaledMMLinearKernel.process_weights_after_loading")


def _scheme_ct(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """compressed-tensors: ``config_groups`` (targets → weight scheme) and ``ignore`` (names or
    ``re:`` regexes), as vLLM ``compressed_tensors.py`` ``_get_scheme_from_parts`` /
    ``find_matched_target``."""
    groups_raw = qc.get("config_groups")
    if not isinstance(groups_raw, dict) or not groups_raw:
        raise _bad("config_groups", "an object of quantization groups", groups_raw)
    groups = []
    for name, group in groups_raw.items():
        if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
            raise _bad(f"config_groups.{name}.weights", "an object", group)
        targets = group.get("targets", ["Linear"])
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise _bad(f"config_groups.{name}.targets", "a list of names", targets)
        _check_patterns(f"config_groups.{name}.targets", tuple(targets))
        fmt = _ct_format(group["weights"], group.get("input_activations"),
                         str(group.get("format") or qc.get("format") or ""))
        groups.append((tuple(targets), fmt))
    return QuantScheme("compressed-tensors", base, groups=tuple(groups),
                       skip=_list(qc, "ignore"), match="ct")


def _scheme_autoround(qc: dict[str, Any], base: Format, src: str) -> QuantScheme:
    """AutoRound exports GPTQ-layout tensors (``bits``, ``group_size``, ``sym``)."""
    return _scheme_gptq({**qc, "desc_act": False}, base, src)


_METHODS = {
    "fp8": _scheme_fp8, "fbgemm_fp8": _scheme_fbgemm, "mxfp4": _scheme_mxfp4,
    "modelopt": _scheme_modelopt, "modelopt_fp4": _scheme_modelopt_fp4, "gptq": _scheme_gptq,
    "awq": _scheme_awq, "bitsandbytes": _scheme_bnb, "compressed-tensors": _scheme_ct,
    "auto-round": _scheme_autoround, "autoround": _scheme_autoround,
}


# --------------------------------------------------------------------------------------------
# The tensors of a model


def _attention(arch: ModelArch, spec: Attention | MLA, p: str, layers: tuple[int, ...]) -> list[Tensor]:
    """q/k/v/o projections (vLLM ``QKVParallelLinear``: K/V heads replicated when tp > kv) or
    the MLA projections (DeepSeek ``q_a_proj``/``kv_a_proj_with_mqa`` replicated, ``q_b_proj``/
    ``kv_b_proj`` column-parallel, ``o_proj`` row-parallel; vLLM ``deepseek_v2.py``)."""
    h, w = arch.hidden_size, arch.weights
    a = f"{p}.{w.attn_name}"
    if isinstance(spec, MLA):
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        out: list[Tensor] = []
        if spec.q_lora_rank:
            out += [Tensor(f"{a}.q_a_proj", "attention", spec.q_lora_rank, h, "replicated",
                           layers=layers),
                    Tensor(f"{a}.q_a_layernorm", "norms", spec.q_lora_rank, 1, "replicated",
                           quantizable=False, layers=layers, kind="other"),
                    Tensor(f"{a}.q_b_proj", "attention", spec.n_heads * qk, spec.q_lora_rank,
                           "column", layers=layers)]
        else:
            out.append(Tensor(f"{a}.q_proj", "attention", spec.n_heads * qk, h, "column",
                              layers=layers))
        return out + [
            Tensor(f"{a}.kv_a_proj_with_mqa", "attention", spec.kv_lora_rank + spec.qk_rope_head_dim,
                   h, "replicated", layers=layers),
            Tensor(f"{a}.kv_a_layernorm", "norms", spec.kv_lora_rank, 1, "replicated",
                   quantizable=False, layers=layers, kind="other"),
            Tensor(f"{a}.kv_b_proj", "attention",
                   spec.n_heads * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank,
                   "column", layers=layers),
            Tensor(f"{a}.o_proj", "attention", h, spec.n_heads * spec.v_head_dim, "row",
                   layers=layers)]
    nq, nkv = arch.n_heads, spec.n_kv_heads
    out = [Tensor(f"{a}.q_proj", "attention", nq * spec.head_dim_k, h, "column", layers=layers),
           Tensor(f"{a}.k_proj", "attention", nkv * spec.head_dim_k, h, "heads", heads=nkv,
                  layers=layers),
           Tensor(f"{a}.v_proj", "attention", nkv * spec.head_dim_v, h, "heads", heads=nkv,
                  layers=layers),
           Tensor(f"{a}.o_proj", "attention", h, nq * spec.head_dim_v, "row", layers=layers)]
    if w.attention_bias:
        out += [Tensor(f"{a}.q_proj.bias", "attention", nq * spec.head_dim_k, 1, "column",
                       quantizable=False, layers=layers, kind="other"),
                Tensor(f"{a}.k_proj.bias", "attention", nkv * spec.head_dim_k, 1, "heads",
                       heads=nkv, quantizable=False, layers=layers, kind="other"),
                Tensor(f"{a}.v_proj.bias", "attention", nkv * spec.head_dim_v, 1, "heads",
                       heads=nkv, quantizable=False, layers=layers, kind="other")]
    if w.attention_out_bias:
        out.append(Tensor(f"{a}.o_proj.bias", "attention", h, 1, "replicated", quantizable=False,
                          layers=layers, kind="other"))
    if w.qk_norm and w.qk_norm_full:  # MiniMax-M2 per_layer: split with the heads (vLLM minimax_m2.py)
        out += [Tensor(f"{a}.q_norm", "norms", nq * spec.head_dim_k, 1, "column",
                       quantizable=False, layers=layers, kind="other"),
                Tensor(f"{a}.k_norm", "norms", nkv * spec.head_dim_k, 1, "heads", heads=nkv,
                       quantizable=False, layers=layers, kind="other")]
    elif w.qk_norm:
        out += [Tensor(f"{a}.q_norm", "norms", spec.head_dim_k, 1, "replicated",
                       quantizable=False, layers=layers, kind="other"),
                Tensor(f"{a}.k_norm", "norms", spec.head_dim_k, 1, "replicated",
                       quantizable=False, layers=layers, kind="other")]
    return out


def _mlp(arch: ModelArch, p: str, inter: int, part: str, layers: tuple[int, ...],
         copies: int = 1) -> list[Tensor]:
    """Dense MLP: gated ``gate_proj``/``up_proj`` (column) + ``down_proj`` (row), or ungated
    ``fc1``/``fc2``; biases when the family has them."""
    h = arch.hidden_size
    if not inter:
        return []
    names = ("gate_proj", "up_proj", "down_proj") if arch.gated_mlp else ("fc1", "down_proj")
    out = [Tensor(f"{p}.{n}", part, inter * copies, h, "column", layers=layers)
           for n in names[:-1]]
    out.append(Tensor(f"{p}.{names[-1]}", part, h, inter * copies, "row", layers=layers))
    if arch.weights.mlp_bias:
        out += [Tensor(f"{p}.{n}.bias", part, inter * copies, 1, "column", quantizable=False,
                       layers=layers, kind="other") for n in names[:-1]]
        out.append(Tensor(f"{p}.{names[-1]}.bias", part, h, 1, "replicated", quantizable=False,
                          layers=layers, kind="other"))
    return out


def _moe(arch: ModelArch, p: str, layers: tuple[int, ...]) -> list[Tensor]:
    """Router (replicated, never quantized: vLLM builds it with ``quant_config=None``), experts
    (``w13`` = gate+up, ``w2`` = down, vLLM ``FusedMoE``), shared experts as a dense MLP."""
    moe = arch.moe
    assert moe is not None
    h, w = arch.hidden_size, arch.weights
    m = f"{p}.{w.mlp_name}"
    mult = 2 if arch.gated_mlp or arch.model_type == "gpt_oss" else 1
    ie, e = moe.expert_intermediate, moe.n_experts
    out = [Tensor(f"{m}.{w.router_name}", "router", e, h, "replicated", quantizable=False,
                  layers=layers, kind="other"),
           Tensor(f"{m}.experts.0.gate_up_proj", "experts", mult * ie, h, "expert_column",
                  experts=e, shards=mult, layers=layers, kind="expert"),
           Tensor(f"{m}.experts.0.down_proj", "experts", h, ie, "expert_row", experts=e,
                  layers=layers, kind="expert")]
    if w.expert_bias:
        out += [Tensor(f"{m}.{w.router_name}.bias", "router", e, 1, "replicated",
                       quantizable=False, layers=layers, kind="other"),
                Tensor(f"{m}.experts.gate_up_proj_bias", "experts", mult * ie, 1, "expert_column",
                       experts=e, quantizable=False, layers=layers, kind="other"),
                Tensor(f"{m}.experts.down_proj_bias", "experts", h, 1, "expert_row", experts=e,
                       quantizable=False, layers=layers, kind="other")]
    if moe.n_shared:
        shared = "shared_expert" if arch.model_type.startswith("qwen") else "shared_experts"
        out += _mlp(arch, f"{m}.{shared}", moe.shared_intermediate * moe.n_shared,
                    "shared_experts", layers)
    if w.router_score_bias:  # a stored score-correction bias per expert
        out.append(Tensor(f"{m}.{w.router_name}.e_score_correction_bias", "router", e, 1,
                          "replicated", quantizable=False, layers=layers, kind="other"))
    if arch.model_type in POST_MOE_NORM_TYPES:  # A.X-K1's norm on the MoE block's output
        out += _norms(arch, f"{p}.post_mlp_layernorm", 1, layers)
    return out


def _norms(arch: ModelArch, name: str, count: int, layers: tuple[int, ...],
           stage: Stage = "layer", part: str = "norms") -> list[Tensor]:
    if arch.model_type in NON_PARAMETRIC_NORM_TYPES:  # OLMo-1: nothing stored (config_import)
        return []
    vectors = 2 if arch.model_type in _LAYERNORM_BIAS else 1
    return [Tensor(name if count == 1 else f"{name}.{k}", part, arch.hidden_size * vectors, 1,
                   "replicated", quantizable=False, layers=layers, stage=stage, kind="other")
            for k in range(count)]


def _tower(t: VisionSpec) -> list[Tensor]:
    """A ViT encoder (``vision_config``): per block qkv + proj (+ biases), MLP fc1/fc2 (gated:
    three matrices), two LayerNorms; patch and position embeddings; a projector into the
    language model. A generic shape (SigLIP/CLIP/Qwen-VL style), TP-split like vLLM's towers;
    kept in the model's dtype (quantized checkpoints leave their towers unquantized). The Qwen-VL
    towers have their own layout (``_qwen_vl_tower``); Kimi-K2.5's MoonViT (``moonvit``) is this
    shape plus its projector's pre-norm and output bias."""
    if t.layout in {"qwen2_5_vl", "qwen3_vl"}:
        return _qwen_vl_tower(t)
    if t.layout == "mistral3":
        return _pixtral_tower(t)
    hv, n = t.hidden_size, tuple(range(t.n_layers))
    p = f"{t.name}_tower.layers.{{i}}"
    mult = 2 if t.gated_mlp else 1

    def mk(name: str, rows: int, cols: int, split: Split, layers: tuple[int, ...] = n) -> Tensor:
        return Tensor(name, t.name, rows, cols, split, quantizable=False, layers=layers,
                      stage="first", kind="other")

    out = [mk(f"{p}.qkv", 3 * hv, hv + 1, "column"), mk(f"{p}.proj", hv, hv, "row"),
           mk(f"{p}.proj.bias", hv, 1, "replicated"),
           mk(f"{p}.fc1", mult * t.intermediate_size, hv + 1, "column"),
           mk(f"{p}.fc2", hv, t.intermediate_size, "row"), mk(f"{p}.fc2.bias", hv, 1, "replicated"),
           mk(f"{p}.norms", 4 * hv, 1, "replicated"),
           mk(f"{t.name}_tower.patch_embed", hv, t.in_channels * t.patch_size ** 2 + 1,
              "replicated", ()),
           mk(f"{t.name}_tower.post_norm", 2 * hv, 1, "replicated", ())]
    if t.positions:
        out.append(mk(f"{t.name}_tower.position_embedding", t.positions, hv, "replicated", ()))
    if t.projector_out:
        merged = hv * t.projector_merge ** 2
        if t.projector_merge > 1:
            out.append(mk(f"{t.name}_projector.mlp.0", merged, merged + 1, "column", ()))
        out.append(mk(f"{t.name}_projector.proj", t.projector_out, merged, "row", ()))
        if t.layout == "gemma3":  # Gemma3MultiModalProjector.mm_soft_emb_norm (RMSNorm, vision width)
            out.append(mk(f"{t.name}_projector.mm_soft_emb_norm", hv, 1, "replicated", ()))
        if t.layout == "moonvit":  # Kimi-K2.5 mm_projector: pre_norm (LayerNorm), out_proj bias
            out += [mk(f"{t.name}_projector.pre_norm", 2 * hv, 1, "replicated", ()),
                    mk(f"{t.name}_projector.proj.bias", t.projector_out, 1, "replicated", ())]
    return out


def _qwen_vl_tower(t: VisionSpec) -> list[Tensor]:
    """The Qwen-VL vision towers as stored and as vLLM loads them, to the parameter (transformers
    ``modeling_qwen2_5_vl.py`` / ``modeling_qwen3_vl.py``; vLLM ``qwen2_5_vl.py``
    ``Qwen2_5_VisionTransformer``, ``qwen3_vl.py`` ``Qwen3_VisionTransformer``):

    * patch embedding: a ``Conv3d`` of ``hidden × (channels · temporal_patch · patch²)`` (with a
      bias in Qwen3-VL); Qwen3-VL adds learned positions (``num_position_embeddings × hidden``);
    * per block: qkv and proj with biases; the MLP gated (Qwen2.5-VL: gate, up, down with biases)
      or not (Qwen3-VL: fc1, fc2 with biases); two norms (RMSNorm: ``hidden``; LayerNorm:
      weight and bias);
    * the patch merger: a norm over ``hidden`` (RMSNorm ``ln_q`` / LayerNorm), then
      ``hidden·merge² → hidden·merge²`` and ``→ out_hidden_size``, both with biases; Qwen3-VL's
      ``deepstack`` mergers the same with the norm over ``hidden·merge²``."""
    hv, n, qwen3 = t.hidden_size, tuple(range(t.n_layers)), t.layout == "qwen3_vl"
    inter, merged, out_h = t.intermediate_size, t.hidden_size * t.projector_merge ** 2, t.projector_out
    norm = 2 if qwen3 else 1  # LayerNorm weight + bias, or RMSNorm weight
    p = f"{t.name}_tower.blocks.{{i}}"

    def mk(name: str, rows: int, cols: int, split: Split, layers: tuple[int, ...] = n) -> Tensor:
        return Tensor(name, t.name, rows, cols, split, quantizable=False, layers=layers,
                      stage="first", kind="other")

    patch = t.in_channels * t.temporal_patch * t.patch_size ** 2
    out = [mk(f"{p}.attn.qkv", 3 * hv, hv + 1, "column"), mk(f"{p}.attn.proj", hv, hv, "row"),
           mk(f"{p}.attn.proj.bias", hv, 1, "replicated"),
           mk(f"{p}.norms", 2 * norm * hv, 1, "replicated"),
           mk(f"{t.name}_tower.patch_embed", hv, patch + (1 if qwen3 else 0), "replicated", ())]
    if qwen3:
        out += [mk(f"{p}.mlp.linear_fc1", inter, hv + 1, "column"),
                mk(f"{p}.mlp.linear_fc2", hv, inter, "row"),
                mk(f"{p}.mlp.linear_fc2.bias", hv, 1, "replicated")]
        if t.positions:
            out.append(mk(f"{t.name}_tower.pos_embed", t.positions, hv, "replicated", ()))
    else:
        out += [mk(f"{p}.mlp.gate_up_proj", 2 * inter, hv + 1, "column"),
                mk(f"{p}.mlp.down_proj", hv, inter, "row"),
                mk(f"{p}.mlp.down_proj.bias", hv, 1, "replicated")]
    if out_h:
        for k, width in [("merger", hv)] + [(f"deepstack_merger_list.{j}", merged)
                                             for j in range(t.deepstack)]:
            m = f"{t.name}_tower.{k}"
            out += [mk(f"{m}.norm", norm * width, 1, "replicated", ()),
                    mk(f"{m}.fc1", merged, merged + 1, "column", ()),
                    mk(f"{m}.fc2", out_h, merged, "row", ()),
                    mk(f"{m}.fc2.bias", out_h, 1, "replicated", ())]
    return out


def _pixtral_tower(t: VisionSpec) -> list[Tensor]:
    """Pixtral's tower with Mistral-3's projector, as stored and as vLLM loads it (transformers
    ``modeling_pixtral.py`` ``PixtralVisionModel``, ``modeling_mistral3.py``
    ``Mistral3MultiModalProjector``; vLLM ``mistral3.py`` with ``pixtral.py``
    ``PixtralHFVisionModel``): a bias-free patch Conv2d, ``ln_pre`` (RMSNorm), per block q/k/v/o
    and a gated MLP without biases and two RMSNorms; the projector's RMSNorm, the patch merger
    (``hidden·merge² → hidden``) and two linears into the text width (no biases:
    ``multimodal_projector_bias`` false)."""
    hv, n, out_h = t.hidden_size, tuple(range(t.n_layers)), t.projector_out
    p = f"{t.name}_tower.transformer.layers.{{i}}"

    def mk(name: str, rows: int, cols: int, split: Split, layers: tuple[int, ...] = n) -> Tensor:
        return Tensor(name, t.name, rows, cols, split, quantizable=False, layers=layers,
                      stage="first", kind="other")

    return [mk(f"{p}.attention.qkv", 3 * hv, hv, "column"), mk(f"{p}.attention.o_proj", hv, hv, "row"),
            mk(f"{p}.feed_forward.gate_up_proj", 2 * t.intermediate_size, hv, "column"),
            mk(f"{p}.feed_forward.down_proj", hv, t.intermediate_size, "row"),
            mk(f"{p}.norms", 2 * hv, 1, "replicated"),
            mk(f"{t.name}_tower.patch_conv", hv, t.in_channels * t.patch_size ** 2, "replicated", ()),
            mk(f"{t.name}_tower.ln_pre", hv, 1, "replicated", ()),
            mk(f"{t.name}_projector.norm", hv, 1, "replicated", ()),
            mk(f"{t.name}_projector.patch_merger", hv, hv * t.projector_merge ** 2, "replicated", ()),
            mk(f"{t.name}_projector.linear_1", out_h, hv, "column", ()),
            mk(f"{t.name}_projector.linear_2", out_h, out_h, "row", ())]


def _layer_spans(arch: ModelArch, layer_ids: tuple[int, ...]) -> list[tuple[int, int, Any]]:
    """``(start, stop, spec)`` spans of ``layer_ids``: the model's runs of identical layers
    (``ModelArch.layer_runs``) when the ids are every decoder layer, else one span per id (next-n
    layers past the last decoder layer take its spec)."""
    if layer_ids == tuple(range(arch.n_layers)):
        spans, position = [], 0
        for layer, n in arch.layer_runs():
            spans.append((position, position + n, layer))
            position += n
        return spans
    return [(i, i + 1, arch.layers[min(i, arch.n_layers - 1)]) for i in layer_ids]


def _moe_segments(start: int, stop: int, moe_ids: set[int] | range) -> list[tuple[int, int, bool]]:
    """``[start, stop)`` cut where MoE membership changes: arithmetic for a range of MoE layers,
    per layer for an explicit set."""
    if isinstance(moe_ids, range) and moe_ids.step == 1:
        lo, hi = max(start, moe_ids.start), min(stop, moe_ids.stop)
        if lo >= hi:
            return [(start, stop, False)]
        return [seg for seg in ((start, lo, False), (lo, hi, True), (hi, stop, False))
                if seg[1] > seg[0]]
    segments: list[tuple[int, int, bool]] = []
    for i in range(start, stop):
        is_moe = i in moe_ids
        if segments and segments[-1][2] == is_moe:
            segments[-1] = (segments[-1][0], i + 1, is_moe)
        else:
            segments.append((i, i + 1, is_moe))
    return segments


def decoder_layer_tensors(arch: ModelArch, layer_ids: tuple[int, ...], moe_ids: set[int] | range,
                          prefix: str = "model.layers.{i}") -> list[Tensor]:
    """Tensors of the given decoder layers (grouped by identical shape: one ``Tensor`` per
    matrix covering every layer it repeats on)."""
    out: list[Tensor] = []
    # Gemma 3n's KV-sharing layers (``num_kv_shared_layers``) keep their q/k/v/o projections;
    # other no-cache layers (NemotronH "-"/"E") have no attention weights.
    # (Gemma 4's keep q/o only: ``WeightSpec.kv_reuse_layers``, below.)
    w = arch.weights
    fallback = next((s for s in arch.distinct_layers() if isinstance(s, (Attention, MLA))), None) \
        if arch.model_type.startswith("gemma") and not w.kv_reuse_layers else None
    by_spec: dict[tuple[Attention | MLA | Recurrent | None, bool], list[int]] = {}
    for start, stop, layer in _layer_spans(arch, layer_ids):
        spec = layer if isinstance(layer, (Attention, MLA, Recurrent)) else fallback
        for a, b, is_moe in _moe_segments(start, stop, moe_ids):
            by_spec.setdefault((spec, is_moe), []).extend(range(a, b))
    # NemotronH: each layer is one block, a norm and one mixer — Mamba2 ("M"), attention ("*"),
    # MLP ("-") or MoE ("E") — not attention + MLP (transformers ``modeling_nemotron_h.py``
    # ``NemotronHBlock``; vLLM ``nemotron_h.py`` ``ALL_DECODER_LAYER_TYPES``).
    one_block = arch.model_type in ONE_BLOCK_TYPES
    n_norms = 1 if one_block or arch.model_type in ONE_NORM_TYPES else \
        4 if arch.model_type in FOUR_NORM_TYPES else 2
    for (spec, is_moe), ids in by_spec.items():
        layers = tuple(ids)
        if isinstance(spec, (Attention, MLA)):
            out += _attention(arch, spec.model_copy(update={"kind": "full", "window": None})
                              if isinstance(spec, Attention) else spec, prefix, layers)
            if w.attn_gate:  # the attention output gate (config_import.ATTENTION_GATE_TYPES)
                heads = spec.n_heads if isinstance(spec, MLA) else arch.n_heads
                width = heads if w.attn_gate == "head" else heads * (
                    spec.v_head_dim if isinstance(spec, MLA) else spec.head_dim_v)
                out.append(Tensor(f"{prefix}.{w.attn_name}.gate_proj", "attention", width,
                                  arch.hidden_size, "column", layers=layers))
                if w.attn_gate_bias:
                    out.append(Tensor(f"{prefix}.{w.attn_name}.gate_bias", "attention", heads, 1,
                                      "column", quantizable=False, layers=layers, kind="other"))
            out += [Tensor(f"{prefix}.{name}", "norms", size, 1, "replicated", quantizable=False,
                           layers=layers, kind="other") for name, size in layer_vectors(arch, spec)]
            if has_sinks(arch, spec):  # per-head attention sinks (vLLM gpt_oss.py ``sinks``)
                out.append(Tensor(f"{prefix}.{w.attn_name}.sinks", "attention", arch.n_heads, 1,
                                  "column", quantizable=False, layers=layers, kind="other"))
        elif isinstance(spec, Recurrent):
            from kvplan.config_import import mixer_params

            params = mixer_params(spec, arch)
            h = arch.hidden_size
            out.append(Tensor(f"{prefix}.mixer.in_proj", "attention", h, params // h, "row",
                              layers=layers))
            if params % h:
                out.append(Tensor(f"{prefix}.mixer.rest", "attention", params % h, 1,
                                  "replicated", quantizable=False, layers=layers, kind="other"))
        if arch.parallel_mixers and isinstance(spec, Recurrent):
            continue  # Falcon-H1's Mamba-2 branch: the MLP and norms are the attention entry's
        if one_block and spec is not None:
            pass  # a Mamba2 or attention block: no MLP
        elif is_moe:
            out += _moe(arch, prefix, layers)
        else:
            wide = set(w.kv_reuse_layers) if w.kv_reuse_double_mlp else set()
            for group, copies in ((tuple(i for i in layers if i not in wide), 1),
                                  (tuple(i for i in layers if i in wide), 2)):
                if group:
                    out += _mlp(arch, f"{prefix}.{w.mlp_name}", arch.intermediate_size, "mlp",
                                group, copies=copies)
        out += _norms(arch, f"{prefix}.layernorm", n_norms, layers)
    reuse: dict[int, list[int]] = {}
    for i, d in zip(w.kv_reuse_layers, w.kv_reuse_head_dims, strict=True):
        if i in layer_ids:
            reuse.setdefault(d, []).append(i)
    attn, nq = f"{prefix}.{w.attn_name}", arch.n_heads
    for d, ids in reuse.items():  # Gemma 4's KV-reusing layers: q_proj, q_norm, o_proj only
        out += [Tensor(f"{attn}.q_proj", "attention", nq * d, arch.hidden_size, "column",
                       layers=tuple(ids)),
                Tensor(f"{attn}.q_norm", "norms", d, 1, "replicated", quantizable=False,
                       layers=tuple(ids), kind="other"),
                Tensor(f"{attn}.o_proj", "attention", arch.hidden_size, nq * d, "row",
                       layers=tuple(ids))]
    return out


@lru_cache(maxsize=128)
def model_tensors(arch: ModelArch, mtp: bool = False) -> tuple[Tensor, ...]:
    """Every parameter tensor the engine loads for this model (``mtp``: the next-n layers too)."""
    h, w = arch.hidden_size, arch.weights
    moe_ids: set[int] | range = set(w.moe_layers or ()) if arch.moe is not None else range(0)
    if arch.moe is not None and w.moe_layers is None:
        moe_ids = range(arch.moe.n_dense_layers, arch.n_layers)
    out = [Tensor("model.embed_tokens", "embeddings", arch.vocab_size, h, "vocab",
                  quantizable=False, stage="first", kind="other")]
    if arch.model_type == "opt":  # learned positions, offset 2 (OPTLearnedPositionalEmbedding)
        out.append(Tensor("model.decoder.embed_positions", "embeddings",
                          (arch.max_position_embeddings or 2048) + 2, h, "replicated",
                          quantizable=False, stage="first", kind="other"))
    if w.per_layer_vocab and w.per_layer_size:
        out.append(Tensor("model.embed_tokens_per_layer", "per_layer_embeddings", w.per_layer_vocab,
                          arch.n_layers * w.per_layer_size, "vocab", quantizable=False,
                          stage="first", kind="other"))
    if w.per_layer_vocab and w.per_layer_size and arch.model_type in GEMMA4_TYPES:
        # Gemma4TextModel's per-layer inputs (transformers 5.24 modeling_gemma4.py, the count of
        # config_import._embedding_family_params): per_layer_model_projection h → L·h_ple
        # (vLLM gemma4.py ``ColumnParallelLinear``, gather_output), per_layer_projection_norm,
        # and per layer per_layer_input_gate h → h_ple, per_layer_projection h_ple → h and
        # post_per_layer_input_norm (kept whole on every rank here)
        ple, ids = w.per_layer_size, tuple(range(arch.n_layers))
        out += [Tensor("model.per_layer_model_projection", "per_layer_embeddings",
                       arch.n_layers * ple, h, "column", stage="first"),
                Tensor("model.per_layer_projection_norm", "norms", ple, 1, "replicated",
                       quantizable=False, stage="first", kind="other"),
                Tensor("model.layers.{i}.per_layer_input_gate", "per_layer_embeddings", ple, h,
                       "replicated", layers=ids),
                Tensor("model.layers.{i}.per_layer_projection", "per_layer_embeddings", h, ple,
                       "replicated", layers=ids)]
        out += _norms(arch, "model.layers.{i}.post_per_layer_input_norm", 1, ids)
    out += decoder_layer_tensors(arch, tuple(range(arch.n_layers)), moe_ids)
    out += _norms(arch, "model.norm", 1, (), stage="last")
    if not arch.tie_word_embeddings:
        out.append(Tensor("lm_head", "lm_head", arch.vocab_size, h, "vocab", stage="last",
                          kind="lm_head"))
        if arch.model_type in ALWAYS_BIAS_TYPES:  # PhiForCausalLM.lm_head ``bias=True``
            out.append(Tensor("lm_head.bias", "lm_head", arch.vocab_size, 1, "vocab",
                              quantizable=False, stage="last", kind="other"))
    if mtp and w.mtp_layers:  # DeepSeek-V3 next-n: a decoder layer + enorm/hnorm/eh_proj/head norm
        ids = tuple(range(arch.n_layers, arch.n_layers + w.mtp_layers))
        layer = [replace(t, part="mtp", stage="last") for t in decoder_layer_tensors(
            arch, ids, set(ids) if arch.moe is not None else set())]
        out += layer + [replace(t, part="mtp") for t in _norms(arch, "model.layers.{i}.mtp_norm", 3,
                                                                ids, stage="last")]
        out.append(Tensor("model.layers.{i}.eh_proj", "mtp", h, 2 * h, "replicated", layers=ids,
                          stage="last"))
    for tower in w.towers:
        out += _tower(tower)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Bytes per GPU


# --------------------------------------------------------------------------------------------
# What the device holds beyond the stored tensors (engines that measure free memory)

MIB = 1 << 20
#: PyTorch's CUDA caching allocator (``c10/cuda/CUDACachingAllocator.cpp``, unchanged 2.0–2.13):
#: ``round_size`` rounds a request up to ``kMinBlockSize`` 512 B; ``get_allocation_size`` carves a
#: request ≤ ``kSmallSize`` 1 MiB from a ``kSmallBuffer`` 2 MiB segment, one < ``kMinLargeAlloc``
#: 10 MiB from a ``kLargeBuffer`` 20 MiB segment, and gives a larger one its own segment rounded up
#: to ``kRoundLarge`` 2 MiB (the segment is split only when more than ``kSmallSize`` is left over).
ALLOC_BLOCK, SMALL_SIZE, SMALL_BUFFER = 512, 1 * MIB, 2 * MIB
MIN_LARGE_ALLOC, LARGE_BUFFER, ROUND_LARGE = 10 * MIB, 20 * MIB, 2 * MIB
#: Checkpoint tensors vLLM / SGLang load into one fused parameter (``QKVParallelLinear`` qkv_proj,
#: ``MergedColumnParallelLinear`` gate_up_proj), weight and bias alike.
FUSED_SUFFIXES = ((".q_proj", ".k_proj", ".v_proj"), (".gate_proj", ".up_proj"))


def _fused_name(name: str) -> str:
    """The parameter a checkpoint tensor loads into (``FUSED_SUFFIXES``), else its own name."""
    for group in FUSED_SUFFIXES:
        for suffix in group:
            for end in (suffix, suffix + ".bias"):
                if name.endswith(end):
                    return name[:-len(end)] + "+".join(group) + end[len(suffix):]
    return name


def allocator_excess(sizes: list[tuple[int, int]]) -> int:
    """Bytes the caching allocator's segments hold beyond ``sizes`` (``(bytes of one allocation,
    count)``, in construction order: the counts are layers, allocated layer by layer) once all are
    live, by its rules (``ALLOC_BLOCK`` … ``ROUND_LARGE``): each request rounded to 512 B is served
    best-fit from a free block of its pool (small ≤ 1 MiB, large above), split when more than
    ``SMALL_SIZE`` (large pool) or ``ALLOC_BLOCK`` (small pool) is left, else from a new segment —
    2 MiB small, 20 MiB below 10 MiB, else the request rounded up to 2 MiB (``DeviceCachingAllocator
    ::malloc``, ``get_free_block``, ``should_split``). Temporaries freed before (load buffers, RoPE
    scratch) are not replayed."""
    order = [(size, count) for size, count in sizes if size > 0 and count > 0]
    free: dict[bool, list[int]] = {True: [], False: []}  # small pool?, sorted free block sizes
    held = asked = 0
    for layer in range(max((count for _, count in order), default=0)):
        for size, count in order:
            if layer >= count:
                continue
            asked += size
            block = round_up(size, ALLOC_BLOCK)
            small = block <= SMALL_SIZE
            pool = free[small]
            at = bisect_left(pool, block)
            if at < len(pool):
                got = pool.pop(at)
            else:
                got = SMALL_BUFFER if small else LARGE_BUFFER if block < MIN_LARGE_ALLOC \
                    else round_up(block, ROUND_LARGE)
                held += got
            left = got - block
            if left >= ALLOC_BLOCK if small else left > SMALL_SIZE:
                insort(pool, left)
    return held - asked


#: Families whose positions are not rotary (learned: OPT, GPT-2, StarCoder; ALiBi: BLOOM, MPT).
NO_ROPE_TYPES = frozenset({"opt", "gpt2", "gpt_bigcode", "bloom", "mpt"})


def rope_cache_bytes(arch: ModelArch, unscaled_per_layer_type: bool = False, *, element: int = 4,
                     model_element: int | None = None, longrope_concat_only: bool = False,
                     mrope_positions: int = 1, proportional_full_head: bool = False) -> list[int]:
    """Bytes of each cos/sin cache the engine builds (SGLang / vLLM ``layers/rotary_embedding``
    ``get_rope``: one instance per distinct set, shared by the layers, ``_ROPE_DICT``),
    ``positions × ModelArch.rotary_dim × element`` (the ``torch.cat((cos, sin), -1)`` of
    ``_compute_cos_sin_cache``): ``element`` 4 — SGLang keeps it fp32 on CUDA and ROCm (0.4.3
    ``rotary_embedding.py`` ``RotaryEmbedding.__init__``, 0.5.23 ``rotary_embedding/base.py``);
    vLLM casts it to the model dtype (v0.6.6 ``rotary_embedding.py``, v0.11.0–v0.19.0
    ``rotary_embedding/base.py`` ``RotaryEmbeddingBase.__init__``: ``cache.to(dtype)``, ``dtype``
    ``torch.get_default_dtype()``), so its caller passes the model's element size. Positions per
    RoPE set (``ModelArch.rope_scalings``, one default set when the config names none): ``yarn`` /
    ``deepseek_yarn`` ``original × factor`` (``YaRNScalingRotaryEmbedding``,
    ``DeepseekScalingRotaryEmbedding``), ``linear`` / ``dynamic`` ``max_position × factor``
    (``LinearScalingRotaryEmbedding``, ``DynamicNTKScalingRotaryEmbedding``), another (default,
    ``llama3``) ``max_position_embeddings``; an MRoPE set (``RopeScaling.mrope``) those positions
    × ``mrope_positions`` (vLLM v0.11+ ``mrope.py`` ``MRotaryEmbedding.__init__``: ``× 4``, with
    YaRN ``original × 4 × factor``); ``longrope`` keeps a short (``original``) and a long
    (``max_position``) cache in ``model_element`` (default: the config's dtype) plus their
    concatenation (SGLang 0.5.23 ``rope_variant.py``, vLLM v0.6.6
    ``Phi3LongRoPEScaledRotaryEmbedding``), only the concatenation with ``longrope_concat_only``
    (vLLM v0.11.0–v0.19.0 ``phi3_long_rope_scaled_rope.py``). A set named for a layer type
    (``RopeScaling.layer_type``: ``full_attention``, ``sliding_attention``, ``chunked_attention``)
    is built by those layers, with their head size (``Attention.head_dim_k``: Gemma 4's global
    layers' ``global_head_dim``); with ``proportional_full_head`` a ``proportional`` set rotates the
    whole head whatever its ``partial_rotary_factor`` (vLLM 0.19.0 ``gemma4_rope.py``
    ``Gemma4RotaryEmbedding.__init__``: ``rotary_dim = head_size``). ``unscaled_per_layer_type``: the
    model builds one default (unscaled) cache per attention type instead (SGLang
    ``gemma3_causal.py`` ``Gemma3Attention``: ``rope_scaling = {"rope_type": "default"}`` for the
    sliding and the global layers, each with its own base). None without rotary attention
    (``NO_ROPE_TYPES``, no attention layer) or without a position count."""
    layers = arch.distinct_layers()
    if arch.model_type in NO_ROPE_TYPES or not any(isinstance(x, (Attention, MLA)) for x in layers):
        return []
    top, dim = arch.max_position_embeddings or 0, arch.rotary_dim
    if unscaled_per_layer_type:
        kinds = {x.kind for x in layers if isinstance(x, (Attention, MLA))}
        return [top * dim * element] * len(kinds) if top else []
    if model_element is None:
        model_element = 4 if arch.model_dtype == "fp32" else 2
    heads: dict[str, int] = {}
    for x in layers:
        if isinstance(x, Attention):
            name = f"{x.kind.value}_attention"
            heads[name] = max(heads.get(name, 0), x.head_dim_k)
    out: list[int] = []
    for rope in arch.rope_scalings or (None,):
        kind = rope.rope_type if rope is not None else "default"
        dim = arch.rotary_dim
        head = heads.get(rope.layer_type, 0) if rope is not None else 0
        if head:
            dim = int(head * arch.partial_rotary_factor)
        if proportional_full_head and kind == "proportional":
            dim = head or arch.head_dim
        factor = rope.factor if rope is not None and rope.factor else 1.0
        original = rope.original_max_position_embeddings if rope is not None else None
        times = mrope_positions if rope is not None and rope.mrope else 1
        if kind in {"yarn", "deepseek_yarn"} and original:
            out.append(int(original * times * factor) * dim * element)
        elif kind in {"linear", "dynamic"}:
            out.append(int(top * factor) * dim * element)
        elif kind in {"longrope", "su"} and original:
            concat = (original + top) * dim * model_element
            out += [concat] if longrope_concat_only else \
                [original * dim * model_element, top * dim * model_element, concat]
        else:
            out.append(top * times * dim * element)
    return [b for b in out if b > 0]


@dataclass(frozen=True)
class WeightsLayout:
    """Weights per GPU on each pipeline stage, by part, and what format was read from where."""

    stages: tuple[dict[str, int], ...]
    total_bytes: int
    format_label: str
    format_source: str
    tp: int
    pp: int
    ep: int
    #: Whole-model stored bytes by part (no padding, no split): what the checkpoint holds.
    total_by_part: dict[str, int] = field(default_factory=dict)

    @cached_property
    def stage_bytes(self) -> list[int]:
        return [sum(stage.values()) for stage in self.stages]

    @cached_property
    def heaviest(self) -> dict[str, int]:
        """The breakdown of the stage with the most bytes per GPU (the one that decides fit)."""
        totals = self.stage_bytes
        best = max(range(len(self.stages)), key=totals.__getitem__)
        return {part: b for part, b in self.stages[best].items() if b}


def shard_shape(t: Tensor, tp: int, ep: int) -> tuple[int, int, int]:
    """``(rows, cols, copies)`` of a tensor on the fullest rank (vLLM ``divide`` / ceil).

    vocab: ``pad_vocab_size(rows, 64) / tp``; heads: ``max(1, heads // tp)`` heads;
    experts: ``ceil(E / ep)`` experts with the intermediate size split over ``tp // ep``.
    """
    rows, cols, copies = t.rows, t.cols, t.experts
    if t.split == "column":
        rows = -(-rows // tp)
    elif t.split == "row":
        cols = -(-cols // tp)
    elif t.split == "heads":
        per_head = rows // t.heads
        rows = max(1, t.heads // tp) * per_head
    elif t.split == "vocab":
        rows = round_up(rows, VOCAB_PADDING) // tp
    elif t.split in {"expert_column", "expert_row"}:
        copies = -(-copies // ep)
        moe_tp = tp // ep
        if t.split == "expert_column":
            rows = -(-rows // moe_tp)
        elif cols > 1:
            cols = -(-cols // moe_tp)
    return rows, cols, copies


def _stage_starts(arch: ModelArch, pp: int) -> list[int]:
    """First decoder layer of each pipeline stage (vLLM ``get_pp_indices``), then ``n_layers``."""
    starts = [0]
    for count in layer_partition(arch, pp):
        starts.append(starts[-1] + count)
    return starts


def _stage_counts(t: Tensor, layers: tuple[int, ...], starts: list[int],
                  pp: int) -> list[tuple[int, int]]:
    """``(stage, copies of t)`` per pipeline stage: embeddings/towers on the first, the head and
    next-n layers (ids ≥ ``n_layers``) on the last, decoder layers (ascending) by bisection."""
    if t.stage == "first":
        return [(0, max(len(layers), 1))]
    if t.stage == "last" or not layers:
        return [(pp - 1, max(len(layers), 1))]
    cuts = [bisect_left(layers, s) for s in starts]
    counts = [(k, cuts[k + 1] - cuts[k]) for k in range(pp)]
    counts[-1] = (pp - 1, counts[-1][1] + len(layers) - cuts[-1])
    return [c for c in counts if c[1]]


def _formats_by_layer(scheme: QuantScheme, t: Tensor) -> list[tuple[Format, tuple[int, ...]]]:
    """The stored format of ``t`` with the layers it applies to. Patterns that name digits are
    matched per layer; others cannot tell two layer numbers of the same length apart, so one
    lookup serves each run of 1-, 2-, 3-… digit layers (``t.layers`` ascending, cut by bisection)."""
    if not t.layers or not t.quantizable or not (scheme.skip or scheme.only or scheme.groups):
        return [(scheme.format_for(t, t.layers[0] if t.layers else None), t.layers)]
    spans: list[tuple[int, ...]]
    if scheme.layer_specific:
        spans = [(layer,) for layer in t.layers]
    else:
        cuts = [0, *(bisect_left(t.layers, 10 ** k) for k in range(1, len(str(t.layers[-1])))),
                len(t.layers)]
        spans = [t.layers[lo:hi] for lo, hi in zip(cuts, cuts[1:], strict=False) if hi > lo]
    by_name: dict[str, tuple[Format, list[int]]] = {}
    for span in spans:
        fmt = scheme.format_for(t, span[0])
        by_name.setdefault(fmt.name, (fmt, []))[1].extend(span)
    return [(fmt, tuple(ids)) for fmt, ids in by_name.values()]


@lru_cache(maxsize=512)
def weights_per_gpu(arch: ModelArch, weight_dtype: str | None = None, tp: int = 1, pp: int = 1,
                    ep: int = 1, mtp: bool = False,
                    rules: LoadingRules = DEFAULT_RULES) -> WeightsLayout:
    """Bytes per GPU of each part on each pipeline stage (see the module docstring).

    ``weight_dtype`` overrides the checkpoint: a float format sets every tensor's dtype (vLLM
    ``--dtype``); a quantized one every quantizable linear/expert and the LM head, embeddings,
    norms, routers and biases staying in the model's dtype (vLLM ``--quantization``).
    ``rules``: what the engine release holds after loading (``Engine.loading_rules``: the scales
    that survive, its MXFP4 MoE layout for experts stored in MXFP4); default vLLM v0.33's scale
    rules without a repack.
    """
    if arch.moe is None or ep < 1:
        ep = 1
    if tp % ep:
        raise KVPlanError("parallel.ep", ep=ep, tp=tp)
    scheme = read_quantization(arch.weights.quantization, arch.model_dtype, module_naming(arch))
    if weight_dtype and weight_dtype not in {"auto", "checkpoint"}:
        fmt = format_from_dtype(weight_dtype, arch.model_dtype)
        if fmt.name in {"fp32", "fp16", "bf16"}:
            scheme = QuantScheme("none", fmt, source=f"weight dtype {fmt.name} chosen by the user")
        else:
            scheme = QuantScheme(fmt.name, scheme.base, linear=fmt, expert=fmt, lm_head=fmt,
                                 source=f"weight dtype {fmt.name} chosen by the user")
    starts = _stage_starts(arch, pp)
    stages: list[dict[str, int]] = [dict.fromkeys(PARTS, 0) for _ in range(pp)]
    total = 0
    totals: dict[str, int] = {}
    formats: dict[str, set[str]] = {}
    tensors = model_tensors(arch, mtp)  # one Tensor per matrix kind, covering all its layers
    main_parts = {t.part for t in tensors if t.kind != "other"}
    repack = rules.mxfp4_experts
    repacked = repack is not None and scheme.method == "mxfp4"
    replicated = {tw.name for tw in arch.weights.towers if tw.layout in rules.replicated_tower_mlp}
    gated = arch.gated_mlp or arch.model_type == "gpt_oss"  # as ``_moe``'s w13
    ungated_pad = rules.nvfp4_ungated_inter if arch.moe is not None and not gated else 1
    # allocations per stage: (fused parameter, its layers, a format) → [main bytes, counts], and
    # the rest of each tensor (scales, indices, copies) as one allocation of its own
    allocs: list[dict[tuple[str, tuple[int, ...], str], list[int]]] = [{} for _ in range(pp)]
    for t in tensors:
        if t.part in replicated and t.split != "replicated" and _tower_mlp(t.name):
            t = replace(t, split="replicated")
        rows, cols, copies = shard_shape(t, tp, ep)
        for fmt, layers in _formats_by_layer(scheme, t):
            r, c = rows, cols
            if ungated_pad > 1 and t.kind == "expert" and fmt.name == NVFP4.name:
                r, c = _nvfp4_padded(t, rows, cols, ungated_pad)
            if repacked and t.part == "experts" and (fmt.name == "mxfp4" or t.kind != "expert"):
                assert repack is not None
                per_gpu = _repacked_bytes(t, repack, arch, tp, ep, scheme.base)
                main = per_gpu
            else:
                per_gpu = copies * (fmt.matrix_bytes(r, c, t.shards, rules)
                                    + _expert_extra(t, fmt, c, rules))
                main = copies * -(-r * c * fmt.bits // 8)
                if rules.mla_absorbed_copy and t.name.endswith(".kv_b_proj"):
                    per_gpu += r * c * mla_absorbed_bytes(fmt, scheme.base,
                                                                rules.mla_absorbed_copy)
            if rules.allocator_segments:
                for stage, count in _stage_counts(t, layers, starts, pp):
                    entry = allocs[stage].setdefault((_fused_name(t.name), layers, fmt.name), [0, count])
                    entry[0] += main
                    allocs[stage][(t.name + " rest", layers, fmt.name)] = [per_gpu - main, count]
            whole = t.experts * fmt.matrix_bytes(t.rows, t.cols, t.shards, rules) * max(len(layers), 1)
            if t.kind != "other" or t.part not in main_parts:
                formats.setdefault(fmt.label, set()).add(t.part)
            for stage, count in _stage_counts(t, layers, starts, pp):
                stages[stage][t.part] += per_gpu * count
            totals[t.part] = totals.get(t.part, 0) + whole
            total += whole
    if arch.tie_word_embeddings and pp > 1:  # the last stage holds its own copy of the tied head
        head = [t for t in tensors if t.part == "embeddings" and t.split == "vocab"]
        rows, cols, _ = shard_shape(head[0], tp, ep)
        stages[-1]["lm_head"] += scheme.base.matrix_bytes(rows, cols, 1, rules)
        if rules.allocator_segments:
            allocs[-1][("lm_head", (), "tied")] = [scheme.base.matrix_bytes(rows, cols, 1, rules), 1]
    base_element = scheme.base.bits // 8
    ropes = rope_cache_bytes(
        arch, arch.model_type in rules.rope_unscaled_per_layer_type,
        element=4 if rules.rope_cache == "fp32" else base_element, model_element=base_element,
        longrope_concat_only=rules.rope_longrope_concat_only,
        mrope_positions=rules.rope_mrope_positions,
        proportional_full_head=rules.rope_proportional_full_head) if rules.rope_cache else []
    for stage in range(pp):
        stages[stage]["rope_cache"] += sum(ropes)
        if rules.allocator_segments:
            sizes = [(b, 1) for b in ropes] + [(b, c) for b, c in allocs[stage].values()]
            stages[stage]["allocator"] += allocator_excess(sizes)
    source = scheme.source
    if repacked:
        assert repack is not None
        source += "; per GPU as " + repack.describe(arch.hidden_size)
    return WeightsLayout(tuple(stages), total, _label(formats, scheme), source, tp, pp, ep, totals)


def _nvfp4_padded(t: Tensor, rows: int, cols: int, multiple: int) -> tuple[int, int]:
    """One rank's NVFP4 expert matrix of a non-gated MoE with its intermediate dimension (``w13``'s
    rows, ``w2``'s columns) rounded up to ``multiple`` (``LoadingRules.nvfp4_ungated_inter``)."""
    if t.split == "expert_column":
        return round_up(rows, multiple), cols
    return rows, round_up(cols, multiple)


def _tower_mlp(name: str) -> bool:
    """A tower's MLP or projector matrix (``_tower``'s ``fc1``/``fc2``, ``_projector.*``)."""
    return name.endswith((".fc1", ".fc2")) or "_projector." in name


def _expert_extra(t: Tensor, fmt: Format, cols: int, rules: LoadingRules) -> int:
    """Bytes one expert matrix of ``cols`` input columns holds beyond ``fmt.matrix_bytes`` under
    ``rules``: the WNA16 ``weight_shape`` at its MoE size (``wna16_expert_shape_bytes``) and the
    int32 ``g_idx`` + sort indices a Triton WNA16 MoE keeps (``wna16_expert_g_idx``; a format
    with ``g_idx`` already counts the first)."""
    if t.kind != "expert" or fmt.scales is None or fmt.scales.method != "wna16":
        return 0
    extra = 0
    if rules.wna16_expert_shape_bytes is not None:
        extra += rules.wna16_expert_shape_bytes - (16 if rules.wna16_weight_shape else 0)
    if rules.wna16_expert_g_idx:
        extra += 4 * cols * (1 if fmt.g_idx else 2)
    return extra


def mla_absorbed_bytes(fmt: Format, base: Format, device: Literal["cuda", "hip"]) -> int:
    """Bytes per element of SGLang's ``w_kc``/``w_vc`` (``post_load_weights``): FP8 block-wise
    ``kv_b_proj`` is dequantized to bf16 on CUDA with 128×128 blocks (``block_quant_dequant``),
    else requantized per tensor to FP8 (``block_quant_to_tensor_quant``; per-channel FP8:
    ``channel_quant_to_tensor_quant``); INT8 and AWQ are dequantized to bf16; an unquantized
    ``kv_b_proj`` is copied in the model's dtype."""
    if fmt.bits == 8 and fmt.name.startswith("fp8"):
        if fmt.block is not None and device == "cuda" and fmt.block == (128, 128):
            return 2
        return 1
    if fmt.bits < 16:
        return 2
    return fmt.bits // 8


def _label(formats: dict[str, set[str]], scheme: QuantScheme) -> str:
    """"MXFP4 (…) experts + bf16 attention, embeddings, …" from the formats actually used."""
    order = {p: i for i, p in enumerate(PARTS)}
    pieces = []
    for label, parts in sorted(formats.items(), key=lambda kv: min(order[p] for p in kv[1])):
        pieces.append(f"{label} {', '.join(sorted(parts, key=order.__getitem__))}")
    if len(pieces) <= 1:
        return formats and next(iter(formats)) or scheme.base.label
    quantized = [p for p in pieces if not p.startswith(scheme.base.label + " ")]
    rest = [p for p in pieces if p.startswith(scheme.base.label + " ")]
    return " + ".join(quantized + rest)


def params_from_tensors(arch: ModelArch, mtp: bool = False) -> int:
    """Parameters counted from the tensor list (elements of every stored matrix and vector)."""
    return sum(t.params for t in model_tensors(arch, mtp))


def format_summary(layout: WeightsLayout) -> str:
    """One line: the formats and where they were read from."""
    return f"{layout.format_label} — from {layout.format_source}"


__all__ = [
    "DEFAULT_RULES", "MXFP4", "NVFP4", "PARTS", "ExpertRepack", "Format", "LoadingRules", "QuantScheme",
    "ScalesAtLoad", "Tensor", "WeightsLayout", "round_up",
    "decoder_layer_tensors", "format_from_dtype", "format_summary", "model_tensors",
    "params_from_tensors", "read_quantization", "shard_shape", "weights_per_gpu",
]


def draft_head_parts(draft: ModelArch, tp: int, rules: LoadingRules, *, head: bool, fc_width: int = 3,
                     fc_bias: bool = False) -> tuple[dict[str, int], str]:
    """A speculative draft's weights on one GPU by part, and the format they load in (one stage,
    the target's TP). A draft model whole (``head`` False); an EAGLE / EAGLE3 head (experts
    dropped) without embeddings and LM head — the engines share the target's — plus its ``fc``
    ``Linear(fc_width × hidden, hidden)`` (EAGLE: 2, with bias; EAGLE3: 3) in the head's dtype.
    Shared by SGLang's and TensorRT-LLM's ``spec_decode`` (their ``_draft_weights``)."""
    layout = weights_per_gpu(draft.model_copy(update={"moe": None}) if head else draft,
                             None, tp, 1, 1, False, rules)
    parts = dict(layout.stages[0])
    if head:
        parts = {p: b for p, b in parts.items() if p not in {"embeddings", "lm_head"}}
        bits = 16 if draft.model_dtype in ("bf16", "fp16") else 32
        h = draft.hidden_size
        parts["fc"] = (fc_width * h * h + (h if fc_bias else 0)) * bits // 8
    return parts, layout.format_label
