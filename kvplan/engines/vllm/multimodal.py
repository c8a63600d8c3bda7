"""vLLM's multimodal encoder budget and what its profile run holds for it (V1, v0.10 – v0.33).

At start-up a multimodal model's worker builds a ``MultiModalBudget``
(``vllm/multimodal/encoder_budget.py``; ``v1/worker/utils.py`` before): for each modality whose
``--limit-mm-per-prompt`` is above 0 it asks the processor for the most tokens one item can have
(``get_mm_max_toks_per_item``: the model's ``get_mm_max_tokens_per_item``, else the dummy inputs'
embeddings), then ``compute_mm_encoder_budget`` (``v1/core/encoder_cache_manager.py``) takes

* ``encoder_compute_budget = max(max_num_encoder_input_tokens, largest item)`` and
* ``encoder_cache_size = max(encoder_cache_size, largest item)``,

both ``max_num_batched_tokens`` by default (``config/scheduler.py`` ``SchedulerConfig``). The
profile run (``gpu_model_runner.py`` ``profile_run``) encodes ``max_items_per_batch`` dummy items
of the modality with the most tokens and keeps their outputs in ``encoder_cache`` while the
language model's dummy forward runs, so the profiled peak — and the reserve the KV budget loses —
holds ``items × tokens per item × hidden_size × dtype bytes`` of encoder outputs (Qwen3-VL's rows
also carry its deepstack features, ``× (1 + deepstack)``: ``encoder_output_width``; its
``deepstack_input_embeds`` buffers are a term of their own, ``deepstack_buffer_term``). With every
limit at 0 (text only) there is no budget and no encoder profile. What counts per item is the
release's (``VllmRelease.mm_item_tokens``): the item's embeddings (v0.10.0, v0.13.0+) or its whole
placeholder with the text tokens inside (v0.10.1–v0.12: Gemma-3's 260 tokens per image).

The tower's own transient activations during ``embed_multimodal`` come first: the profile's torch
peak is ``max(tower peak, encoder outputs + the language model's dummy forward)``, so where the
tower's peak is the larger one the reserve gains its excess (``encoder_peak_term``, the
``mm_encoder_peak`` term). It is derived from the tower's shapes for the three tower codes read
(vLLM 0.33; applied to every record from v0.10 — not exact for them all: vLLM 0.11.0's own
Qwen2.5-VL-7B tower, run on CPU on its FlashAttention path as ``qwen3_vl_tower_peak_v0_11.py`` runs
Qwen3-VL, peaks at 55,504,196 B over a 32×32 grid and 219,587,412 B over 64×64 — about 53.6 KB a
patch against this rule's 36.0 KB, its attention's float32 rotary copies, not modelled here), each
checked on vLLM 0.33's own tower run on CPU (``tools/multimodal_truth/tower_peak.py``):

* Qwen2.5-VL (``model_executor/models/qwen2_5_vl.py`` ``Qwen2_5_VisionBlock.forward``, gated
  SiLU MLP): at the MLP's ``down_proj`` the block's input (the transformer loop still holds it),
  ``x_attn``, the fused norm's ``residual`` and normed output, ``gate_up`` (2·I / tp), its
  activation (I / tp) and the output: ``5·h + 3·I/tp`` elements per patch, and the rotary tables
  (``rotary_pos_emb_thw``: cos and sin of ``head_dim / 2`` per patch, kept in ``_rope_by_thw_cache``
  and again as ``prepare_encoder_metadata``'s ``torch.cat``): ``2·head_dim``;
* SigLIP (Gemma-3; ``siglip.py`` ``SiglipEncoderLayer.forward``, in-place residual adds, GELU
  MLP): the embeddings ``SiglipVisionTransformer.forward`` keeps while its encoder runs, the
  layer's input, the residual sum, ``layer_norm2``'s output, ``fc1``'s output and its
  activation: ``4·h + 2·I/tp``;
* Qwen3-VL (and Qwen3.5, the same ``Qwen3_VisionTransformer``; ``qwen3_vl.py``): the last block's
  attention, ``4·h + 8·h/tp``, or its MLP, ``3·h + 2·I/tp``, whichever is larger, with the
  deepstack features and rotary tables held (``_qwen3_vl_peak``; checked on the 2B and 8B towers,
  ``tools/multimodal_truth/qwen3_vl_tower_peak.py``) — vLLM 0.11.0's tower holds another set
  (``_qwen3_vl_peak_v0_11``: the rotary's float32 copies, ``3·h + 10·h/tp`` elements + ``16·h/tp``
  B, or at TP > 1 the all-gather's ``9·h + 3·h/tp``; checked at TP 1,
  ``qwen3_vl_tower_peak_v0_11.py``);

plus the pixel values the caller holds (``channels × temporal patch × patch²`` per patch), in the
model's dtype, over every patch of the profile's dummy batch (Qwen: the items' embeddings ×
``merge_size²``; Gemma-3: ``(image_size / patch)²`` per image). Attention runs on FlashAttention
(vLLM's ViT default on CUDA, "Using backend FLASH_ATTN for vit attention"), which materialises no
scores; the window attention of Qwen2.5-VL changes only ``cu_seqlens``. Other towers (Qwen2-VL,
Llama-4, Pixtral, …) are not modelled: no term, said in the ledger's formula of ``mm_encoder_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.arch import ModelArch, VisionSpec
from kvplan.dtypes import get_dtype
from kvplan.engines.reserve import ReserveTerm
from kvplan.multimodal import DEFAULT_MM_LIMIT, FixedProcessor, Processor, QwenVLProcessor

_SOURCE = ("vllm/v1/core/encoder_cache_manager.py compute_mm_encoder_budget; "
           "vllm/multimodal/encoder_budget.py MultiModalBudget._get_max_items; "
           "vllm/v1/worker/gpu_model_runner.py profile_run (encoder_cache['tmp_i'])")


@dataclass(frozen=True)
class EncoderBudget:
    """One start-up's multimodal budget: the largest item per modality (tokens), the compute budget
    and the cache size (tokens), and the profile's dummy batch (modality, items)."""

    max_tokens_per_item: dict[str, int]
    #: Embeddings of the largest item per modality (what the encoder writes; the tokens above are
    #: the placeholder's where the release counts those).
    embeds_per_item: dict[str, int]
    compute_budget: int
    cache_size: int
    modality: str
    items_per_batch: int

    @property
    def budget(self) -> int:
        """``MultiModalBudget.get_encoder_budget``: ``min(compute budget, cache size)``."""
        return min(self.compute_budget, self.cache_size)

    @property
    def profiled_tokens(self) -> int:
        """Encoder outputs the profile run holds: items × the modality's largest item's embeddings."""
        return self.items_per_batch * self.embeds_per_item[self.modality]

    def log_line(self) -> str:
        """What vLLM logs for it (``profile_run``)."""
        return (f"Encoder cache will be initialized with a budget of {self.budget} tokens, and "
                f"profiled with {self.items_per_batch} {self.modality} items of the maximum feature size.")


def mm_limits(image_limit: int | None, modalities: tuple[str, ...]) -> dict[str, int]:
    """``--limit-mm-per-prompt`` per modality: ``image_limit`` for images and videos when set (0 =
    text only: the towers are not profiled), else vLLM's default 999."""
    limit = DEFAULT_MM_LIMIT if image_limit is None else image_limit
    return dict.fromkeys(modalities, limit)


def encoder_budget(arch: ModelArch, *, mnbt: int, max_num_seqs: int, max_model_len: int,
                   image_limit: int | None = None, max_pixels: int | None = None,
                   chunked_prefill: bool = True, placeholder: bool = False,
                   processor: Processor | None = None,
                   ) -> EncoderBudget | None:
    """The budget of ``arch``'s processor (None: no processor, or every limit 0 — text only).

    ``compute_mm_encoder_budget``: both budgets ``max(mnbt, largest item)``; the profile's modality
    is the one with the most tokens per item (``get_modality_with_max_tokens``), and
    ``_get_max_items``: ``max(1, min(budget // tokens, max_num_seqs × max(1, min(limit,
    max_model_len // tokens))))`` items (``max_num_seqs`` capped at ``mnbt // tokens`` without
    chunked prefill). ``placeholder``: the release counts each item's placeholder tokens
    (``VllmRelease.mm_item_tokens``). ``processor``: the checkpoint's with ``--mm-processor-kwargs``
    applied (``kvplan.multimodal.with_processor_kwargs``); default ``arch.processor``."""
    processor = processor or arch.processor
    if processor is None:
        return None
    every = processor.max_tokens_per_item(max_model_len, max_pixels, placeholder)
    embeds = processor.max_tokens_per_item(max_model_len, max_pixels)
    limits = mm_limits(image_limit, tuple(every))
    tokens = {m: t for m, t in every.items() if limits[m] > 0}
    if not tokens:
        return None
    largest = max(tokens.values())
    compute, cache = max(mnbt, largest), max(mnbt, largest)
    modality = max(tokens.items(), key=lambda item: (item[1], item[0]))[0]
    per_item = tokens[modality]
    if per_item == 0:
        return EncoderBudget(tokens, embeds, compute, cache, modality, 0)
    per_prompt = max(1, min(limits[modality], max_model_len // per_item))
    seqs = max_num_seqs if chunked_prefill else min(max_num_seqs, mnbt // per_item)
    items = max(1, min(min(compute, cache) // per_item, seqs * per_prompt))
    return EncoderBudget(tokens, embeds, compute, cache, modality, items)


def encoder_output_width(arch: ModelArch) -> tuple[int, int]:
    """``(elements per encoder-output token, deepstack mergers)``: the language model's
    ``hidden_size`` (the projector's output), times ``1 + deepstack`` for Qwen3-VL, whose tower
    concatenates the merger's output with each deepstack merger's (``qwen3_vl.py``
    ``Qwen3_VisionTransformer.forward``: ``out_hidden_size × (1 + len(deepstack_visual_indexes))``)
    and whose ``embed_multimodal`` returns it whole — the split into the main and multiscale
    embeddings happens only in ``embed_input_ids`` (``_compute_deepstack_embeds``), so the
    encoder cache holds every column."""
    tower = next((t for t in arch.weights.towers if t.name == "vision"), None)
    deep = tower.deepstack if tower is not None else 0
    return arch.hidden_size * (1 + deep), deep


def deepstack_buffer_term(arch: ModelArch, mnbt: int, model_dtype: str,
                          release: str) -> ReserveTerm | None:
    """Qwen3-VL's deepstack input buffers: ``Qwen3VLForConditionalGeneration.__init__`` (vLLM 0.33
    ``qwen3_vl.py``) allocates ``deepstack`` zero tensors of ``max_num_batched_tokens ×
    text hidden_size`` in the model's dtype on the device while the model is built — memory the
    weights do not count and the KV budget loses. Built with the tower: at ``--limit-mm-per-prompt``
    0 there are none (0.33: the tower is a ``StageMissingLayer``, ``use_deepstack`` false; 0.11:
    ``__init__`` sets ``visual`` None when both limits are 0 and builds no buffers — the same
    buffers read at 0.11.0 and 0.33.0). None for a tower without deepstack mergers."""
    _, deep = encoder_output_width(arch)
    if not deep:
        return None
    width = get_dtype(model_dtype).bits // 8
    total = deep * mnbt * arch.hidden_size * width
    formula = (f"{deep} deepstack buffer(s) × max_num_batched_tokens {mnbt:,} × hidden "
               f"{arch.hidden_size:,} × {width} B = {total:,} B")
    return ReserveTerm("mm_deepstack_buffers", total, formula,
                       f"{release} vllm/model_executor/models/qwen3_vl.py "
                       "Qwen3VLForConditionalGeneration.__init__ (deepstack_input_embeds)", "derived")


def cached_rows(budget: EncoderBudget, pads: bool) -> int:
    """Rows of one dummy item's output the profile keeps in ``encoder_cache``: its embeddings, or
    — where the release pads (``VllmRelease.mm_profile_pads``: ``profile_run``'s
    ``if encoder_output_shape[0] < encoder_budget: output.new_zeros((encoder_budget, width))``) —
    the encoder budget's rows when the item has fewer."""
    rows = budget.embeds_per_item[budget.modality]
    return budget.budget if pads and rows < budget.budget else rows


def encoder_cache_term(arch: ModelArch, budget: EncoderBudget, model_dtype: str,
                       release: str, pads: bool = False) -> ReserveTerm:
    """The profile run's encoder outputs held beside the language model's dummy forward:
    ``items × rows × hidden_size × (1 + deepstack) × dtype bytes`` (the tower's projector writes
    the language model's hidden size, Qwen3-VL's with its deepstack features beside it:
    ``encoder_output_width``; every TP rank holds the whole output). ``rows`` is ``cached_rows``:
    each item's embeddings, or the encoder budget where the release pads shorter outputs to it
    (``pads``; v0.11.0–v0.11.2: Qwen3-VL's 12,288-embedding dummy video is cached as 153,600
    rows, the placeholder-counted budget)."""
    width = get_dtype(model_dtype).bits // 8
    row, deep = encoder_output_width(arch)
    rows = cached_rows(budget, pads)
    total = budget.items_per_batch * rows * row * width
    per_item = budget.embeds_per_item[budget.modality]
    hidden = f"hidden {arch.hidden_size:,}" + (f" × (1 + {deep} deepstack)" if deep else "")
    padded = (f" rows (each output of {per_item:,} embeddings padded to the encoder budget: "
              "profile_run's new_zeros((encoder_budget, width)) + copy)"
              if rows != per_item else " tokens")
    formula = (f"{budget.items_per_batch} {budget.modality} item(s) × {rows:,}{padded} × "
               f"{hidden} × {width} B = {total:,} B (encoder budget "
               f"{budget.budget:,} tokens = max(max_num_batched_tokens, largest item)); vLLM logs "
               f"\"{budget.log_line()}\"")
    return ReserveTerm("mm_encoder_cache", total, formula, f"{release} {_SOURCE}", "derived")


def pad_copy_bytes(arch: ModelArch, budget: EncoderBudget, model_dtype: str, pads: bool) -> int:
    """The tower's own outputs still held while ``profile_run`` copies them into their padded
    copies (0 where nothing is padded): ``items × embeddings × row width × dtype bytes`` beside
    the padded cache, until ``dummy_encoder_outputs`` is rebound to the copies."""
    rows = budget.embeds_per_item[budget.modality]
    if cached_rows(budget, pads) == rows:
        return 0
    return budget.items_per_batch * rows * encoder_output_width(arch)[0] * (get_dtype(model_dtype).bits // 8)



_PEAK_SOURCE = ("vllm/v1/worker/gpu_model_runner.py profile_run (embed_multimodal on the dummy batch "
                "before _dummy_run); model_executor/models/qwen2_5_vl.py Qwen2_5_VisionBlock.forward, "
                "siglip.py SiglipEncoderLayer.forward")


@dataclass(frozen=True)
class TowerPeak:
    """The vision tower's peak over the profile's dummy batch: patches, elements per patch (the
    block's live tensors + the pixel values), bytes, and the rule's name."""

    patches: int
    block_elements: int
    pixel_elements: int
    width: int
    rule: str
    #: Bytes per patch beside the elements (Qwen3-VL's int64 position ids, 2 × 8 B).
    patch_bytes: int = 0
    #: Bytes that do not grow with the patches (Qwen3-VL's int32 ``cu_seqlens`` and ``max_seqlen``).
    fixed_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.patches * ((self.block_elements + self.pixel_elements) * self.width
                               + self.patch_bytes) + self.fixed_bytes


def tower_peak(arch: ModelArch, budget: EncoderBudget,
               processor: Processor | None,
               model_dtype: str, tp: int, qwen3_vl: str = "0.33") -> TowerPeak | None:
    """``TowerPeak`` of the towers kvplan derives (module docstring), else None. ``qwen3_vl``: whose
    Qwen3-VL tower code the release runs (``VllmRelease.qwen3_vl_tower``: "0.33", "0.11.0"; "" —
    not read: None)."""
    tower = next((t for t in arch.weights.towers if t.name == "vision"), None)
    if tower is None or processor is None or not budget.items_per_batch:
        return None
    width = get_dtype(model_dtype).bits // 8
    h, inter = tower.hidden_size, tower.intermediate_size // tp
    if isinstance(processor, QwenVLProcessor) and tower.layout == "qwen3_vl":
        if not tower.heads or qwen3_vl not in ("0.33", "0.11.0"):
            return None
        rule = _qwen3_vl_peak if qwen3_vl == "0.33" else _qwen3_vl_peak_v0_11
        return rule(arch, tower, budget, processor, width, tp)
    if isinstance(processor, QwenVLProcessor) and tower.gated_mlp and tower.heads:
        patches = budget.profiled_tokens * processor.merge_size ** 2
        pixels = tower.in_channels * processor.temporal_patch_size * tower.patch_size ** 2
        rope = 2 * (h // tower.heads)
        return TowerPeak(patches, 5 * h + 3 * inter + rope, pixels, width,
                         "Qwen2.5-VL block: 5·h + 3·I/tp + rotary cos/sin 2·head_dim")
    if isinstance(processor, FixedProcessor) and not tower.gated_mlp:
        side = processor.image_size // tower.patch_size
        pixels = tower.in_channels * tower.patch_size ** 2
        return TowerPeak(budget.items_per_batch * side * side, 4 * h + 2 * inter, pixels, width,
                         "SigLIP layer: 4·h + 2·I/tp")
    return None


def _qwen3_vl_peak(arch: ModelArch, tower: VisionSpec, budget: EncoderBudget,
                   processor: QwenVLProcessor, width: int, tp: int) -> TowerPeak:
    """Qwen3-VL's tower (vLLM 0.33 ``qwen3_vl.py`` ``Qwen3_VisionTransformer.forward``,
    ``Qwen3_VisionBlock``; the attention is ``qwen2_5_vl.py`` ``Qwen2_5_VisionAttention.forward``)
    peaks in the last block's attention, at ``proj``: the block's input (the loop holds it),
    ``norm1``'s output (the module call's arguments hold it), the interpolated ``pos_embeds`` (kept
    in the encoder metadata for the whole forward), ``proj``'s output: ``4·h``; ``qkv`` (3·h/tp),
    ``qk`` made contiguous and ``apply_rotary_emb``'s output (2·h/tp each; one output, as the CUDA
    kernel), the attention's output (h/tp): ``8·h/tp``; the deepstack features already merged
    (``deepstack × out_hidden / merge²``); the rotary tables (cos and sin, ``head_dim / 2``
    each) and the int64 (h, w) position ids of a one-frame item (16 B, ``_rot_pos_ids_cache``);
    beside them the int32 ``cu_seqlens`` (items + 1) and ``max_seqlen``.
    The MLP's ``3·h + 2·I/tp`` (input, the residual sum, ``norm2``'s output, ``linear_fc1`` and
    its activation; the GELU is one op) is below it for every preset (I ≈ 3.7–4·h) — the larger
    is taken. Checked on vLLM 0.33's tower on CPU for Qwen3-VL-2B and -8B
    (``tools/multimodal_truth/qwen3_vl_tower_peak.py``); the profile's dummy is one image
    or Qwen3-VL's two-frame video (``grid_t`` 1 either way), so the ids are per patch (items of
    ``grid_t`` 2 do not hold them at the peak: the fixture's two-frame-group cases)."""
    h, inter = tower.hidden_size, tower.intermediate_size // tp
    merge = processor.merge_size ** 2
    deep = tower.deepstack * arch.hidden_size // merge
    attention, mlp = 4 * h + 8 * h // tp, 3 * h + 2 * inter
    rope = h // tower.heads
    pixels = tower.in_channels * processor.temporal_patch_size * tower.patch_size ** 2
    where = "attention 4·h + 8·h/tp" if attention >= mlp else "MLP 3·h + 2·I/tp"
    rule = (f"Qwen3-VL block at its peak, {where} (max of the two) + deepstack "
            f"{tower.deepstack}·{arch.hidden_size:,}/{merge} + rotary cos/sin head_dim")
    return TowerPeak(budget.profiled_tokens * merge, max(attention, mlp) + deep + rope, pixels, width,
                     rule, patch_bytes=16, fixed_bytes=4 * (budget.items_per_batch + 1) + 4)


def _qwen3_vl_peak_v0_11(arch: ModelArch, tower: VisionSpec, budget: EncoderBudget,
                         processor: QwenVLProcessor, width: int, tp: int) -> TowerPeak:
    """Qwen3-VL's tower under vLLM 0.11.0 (``qwen3_vl.py`` ``Qwen3_VisionTransformer.forward``,
    ``Qwen3_VisionBlock``; ``qwen2_5_vl.py`` ``Qwen2_5_VisionAttention.forward`` and
    ``all_gather_interleave``; ``qwen2_vl.py`` ``apply_rotary_pos_emb_vision``). Held through
    every block: the block's input (the loop's ``hidden_states``), the attention's argument
    (``norm1``'s output, in the module call's arguments), ``pos_embeds`` (a local of ``forward``),
    the deepstack features merged so far (``deepstack × out_hidden / merge²``; all of them at the
    last block) and the float32 rotary table (``head_dim / 2`` × 4 B). The attention's peak is the
    larger of
    * the rotary: ``qkv``'s output (3·h/tp, the local ``x`` keeps it), the contiguous q, k, v
      (3·h/tp), ``qk_concat`` (2·h/tp), its float32 copy ``t_`` and the kernel's float32 output
      (2·h/tp × 4 B each) and the cast back (2·h/tp), with ``freqs.cos()`` and ``.sin()``
      (``head_dim / 2`` × 4 B each): ``3·h + 10·h/tp`` elements + ``16·h/tp + 6·head_dim`` B;
    * at TP > 1, the gather: ``all_gather_interleave`` holds the local ``qkv`` (3·h/tp), the
      gathered list (3·h) and their ``torch.cat`` (3·h): ``9·h + 3·h/tp`` elements + the table;
    and the MLP's ``4·h + max(2·I/tp, I/tp + h)`` (the block's input, the residual sum, ``pos_embeds``,
    ``norm2``'s output; ``linear_fc1``'s output and its activation, or the activation and
    ``linear_fc2``'s) is below both for every preset; the largest is taken. Beside them the int32
    ``grid_thw`` (3 per item) and ``cu_seqlens`` (items + 1; one frame group per item, as the
    profile's dummy). Checked at TP 1 on vLLM 0.11.0's own tower on CPU for Qwen3-VL-2B and -8B
    (``tools/multimodal_truth/qwen3_vl_tower_peak_v0_11.py``: 49,536 and 58,032 B a patch, exact);
    the gather (TP > 1) is read, not run."""
    h, inter = tower.hidden_size, tower.intermediate_size // tp
    head_dim = h // tower.heads
    deep = tower.deepstack * arch.hidden_size // processor.merge_size ** 2
    table = 2 * head_dim  # float32 head_dim / 2
    candidates = [(3 * h + 10 * h // tp + deep, 16 * h // tp + 6 * head_dim, "rotary 3·h + 10·h/tp "
                   "(+ float32 16·h/tp + 6·head_dim B)"),
                  (4 * h + max(2 * inter, inter + h) + deep, table, "MLP 4·h + max(2·I/tp, I/tp + h)")]
    if tp > 1:
        candidates.append((9 * h + 3 * h // tp + deep, table, "gather 9·h + 3·h/tp"))
    elements, fp32, where = max(candidates, key=lambda c: c[0] * width + c[1])
    pixels = tower.in_channels * processor.temporal_patch_size * tower.patch_size ** 2
    rule = (f"vLLM 0.11.0 Qwen3-VL block at its peak, {where} (the largest) + deepstack "
            f"{tower.deepstack}·{arch.hidden_size:,}/{processor.merge_size ** 2}")
    items = budget.items_per_batch
    return TowerPeak(budget.profiled_tokens * processor.merge_size ** 2, elements, pixels, width, rule,
                     patch_bytes=fp32, fixed_bytes=12 * items + 4 * (items + 1))


def encoder_peak_term(arch: ModelArch, budget: EncoderBudget,
                      processor: Processor | None,
                      model_dtype: str, tp: int, held: int, release: str,
                      qwen3_vl: str = "0.33", copy: int = 0) -> ReserveTerm | None:
    """The encoder profile's excess over what the profile holds after it: ``max(0, peak − held)``,
    ``held`` = the activation peak of the language model's dummy forward + the cached encoder
    outputs (the reserve's other terms count those), ``peak`` the larger of the tower's own peak
    and ``copy`` (the padded cache + the tower's outputs while ``profile_run`` pads them:
    ``pad_copy_bytes`` beside the cache; 0 where nothing is padded); None where the tower is not
    modelled and the pad copy stays below ``held``."""
    peak = tower_peak(arch, budget, processor, model_dtype, tp, qwen3_vl)
    if peak is None and not copy:
        return None
    copying = (f"the pad copy {copy:,} B (padded cache + the tower's outputs)") if copy else ""
    if peak is None:
        excess = max(0, copy - held)
        if not excess:
            return None
        formula = (f"max(0, {copying} − {held:,} (activation peak + encoder outputs)) = {excess:,} B "
                   "(the tower's own peak is not modelled for this tower and release)")
        return ReserveTerm("mm_encoder_peak", excess, formula, f"{release} {_PEAK_SOURCE}", "derived")
    tower = next(t for t in arch.weights.towers if t.name == "vision")
    excess = max(0, max(peak.bytes, copy) - held)
    ids = (f" + {peak.patch_bytes} B per patch beside them (position ids / float32)"
           if peak.patch_bytes else "")
    tower_text = (f"{peak.patches:,} patches × ({peak.rule} = "
                  f"{peak.block_elements:,} with h {tower.hidden_size:,}, I {tower.intermediate_size:,}, "
                  f"tp {tp} + pixel values {peak.pixel_elements:,}) × {peak.width} B{ids} = {peak.bytes:,}")
    if copy:
        formula = (f"max(0, max(tower peak, pad copy) − held) = max(0, max({tower_text}, {copying}) − "
                   f"{held:,} (activation peak + encoder outputs)) = {excess:,} B")
    else:
        formula = (f"max(0, tower peak − held) = max(0, {tower_text} − "
                   f"{held:,} (activation peak + encoder outputs)) = {excess:,} B")
    return ReserveTerm("mm_encoder_peak", excess, formula, f"{release} {_PEAK_SOURCE}", "derived")
