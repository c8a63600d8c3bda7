"""Model architecture as the KV cache sees it: a list of layers, each with a cache rule.

Layer kinds (what one layer keeps per sequence):

* ``Attention`` — K and V vectors of ``n_kv_heads`` heads per token; ``kind`` says how long:
  ``full`` (every token), ``sliding`` (the last ``window`` tokens), ``chunked`` (the current
  ``window``-token chunk, Llama 4 iRoPE local layers).
* ``MLA`` — one latent of ``kv_lora_rank + qk_rope_head_dim`` per token (DeepSeek-V2 report §2.1.3);
  the expanded per-head sizes are kept for engines that cache K/V after up-projection.
* ``Recurrent`` — a constant state per sequence (Mamba conv + SSM, Gated DeltaNet).
* ``NoCache`` — layers that reuse another layer's KV.

``Kind`` names what a layer (or one cache of it) keeps; code outside ``kvplan.engines`` reads its
properties (``windowed``, ``grows``, ``holds_state``) instead of comparing kind strings.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from kvplan.multimodal import Processor


class Kind(StrEnum):
    """What one layer's cache keeps per sequence (the values are the serialised names).

    ``FULL`` every token; ``SLIDING`` the last ``window`` tokens; ``CHUNKED`` the current
    ``window``-token chunk (Llama 4 iRoPE local layers); ``MLA`` one latent per token;
    ``DSA_INDEXER`` the DeepSeek sparse-attention indexer keys of an MLA layer (DeepSeek-V3.2);
    ``RECURRENT`` a constant state; ``NONE`` nothing (the layer reuses another layer's KV).
    """

    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"
    MLA = "mla"
    DSA_INDEXER = "dsa_indexer"
    RECURRENT = "recurrent"
    NONE = "none"

    @property
    def windowed(self) -> bool:
        """Keeps at most a window (sliding) or a chunk (chunked) of the tokens."""
        return self in (Kind.SLIDING, Kind.CHUNKED)

    @property
    def grows(self) -> bool:
        """Keeps something per token (attention K/V, an MLA latent, indexer keys)."""
        return self in (Kind.FULL, Kind.SLIDING, Kind.CHUNKED, Kind.MLA, Kind.DSA_INDEXER)

    @property
    def holds_state(self) -> bool:
        """Keeps a constant per-sequence state instead of tokens."""
        return self is Kind.RECURRENT

    @property
    def caches(self) -> bool:
        """Keeps anything at all."""
        return self is not Kind.NONE

    def context_at(self, window: int | None, pos: np.ndarray) -> np.ndarray:
        """Tokens a query at position ``pos`` (1-based) attends to: ``min(pos, W)`` for sliding,
        ``(pos − 1) % C + 1`` for chunked, else ``pos`` — the one window rule for the FLOP model."""
        if self is Kind.SLIDING and window:
            return np.minimum(pos, window)
        if self is Kind.CHUNKED and window:
            return (pos - 1) % window + 1
        return pos

    def context_sum(self, window: int | None, t: np.ndarray) -> np.ndarray:
        """``Σ_{p=1..T} context_at(p)`` in closed form."""
        tri = t * (t + 1) // 2
        if self is Kind.SLIDING and window:
            w = window
            return np.where(t <= w, tri, w * (w + 1) // 2 + (t - w) * w)
        if self is Kind.CHUNKED and window:
            c = window
            q, r = t // c, t % c
            return q * (c * (c + 1) // 2) + r * (r + 1) // 2
        return tri


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Attention(_Spec):
    """Standard attention (MHA / GQA / MQA) with K and V head dims that may differ."""

    kind: Literal[Kind.FULL, Kind.SLIDING, Kind.CHUNKED] = Kind.FULL
    n_kv_heads: int = Field(ge=1)
    head_dim_k: int = Field(ge=1)
    head_dim_v: int = Field(ge=1)
    window: int | None = Field(default=None, ge=1)
    #: Heads transformers caches when it broadcasts K/V before ``cache.update`` (Falcon new arch).
    hf_cached_heads: int | None = Field(default=None, ge=1)

    @property
    def elements_per_token(self) -> int:
        return self.n_kv_heads * (self.head_dim_k + self.head_dim_v)


class MLA(_Spec):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)."""

    kind: Literal[Kind.MLA] = Kind.MLA
    kv_lora_rank: int = Field(ge=1)
    qk_rope_head_dim: int = Field(ge=0)
    n_heads: int = Field(ge=1)
    qk_nope_head_dim: int = Field(ge=0)
    v_head_dim: int = Field(ge=1)
    q_lora_rank: int = Field(default=0, ge=0)
    #: DeepSeek sparse attention (V3.2): head size of the indexer's cached keys (0 = no indexer).
    indexer_head_dim: int = Field(default=0, ge=0)
    window: int | None = Field(default=None, ge=1)

    @property
    def elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def cache_kind(self) -> Kind:
        """Retention of the latent: ``MLA``, or ``SLIDING`` for a windowed MLA layer."""
        return Kind.SLIDING if self.window else Kind.MLA


class Recurrent(_Spec):
    """Constant per-sequence state: a causal conv window plus an SSM / delta-rule state."""

    kind: Literal[Kind.RECURRENT] = Kind.RECURRENT
    variant: Literal["gdn", "mamba1", "mamba2"]
    conv_channels: int = Field(ge=1)
    conv_kernel: int = Field(ge=1)
    ssm_elements: int = Field(ge=1)
    #: Head count that TP shards the state over (value heads for GDN, d_inner for Mamba1).
    tp_shard_unit: int = Field(ge=1)
    #: SSM-state dtype the config asks engines for (``mamba_ssm_cache_dtype``), if any.
    ssm_dtype: str | None = None
    #: Mamba-2 scan chunk (vLLM aligns the attention block to it in "all" cache mode).
    chunk_size: int | None = Field(default=None, ge=1)
    #: The mixer's parameters counted from the config (projections, conv, A, D, dt, norm), when known.
    params: int | None = Field(default=None, ge=0)
    #: Mamba-2: B/C groups and state size (the conv holds ``2 × groups × state`` of its channels).
    #: vLLM ``mamba_utils.py`` ``mamba2_state_shape`` replicates the groups up to the TP size when
    #: they do not divide it (``extra_groups_for_head_shards``); None: not a Mamba-2 mixer.
    n_groups: int | None = Field(default=None, ge=1)
    state_size: int | None = Field(default=None, ge=1)


class NoCache(_Spec):
    kind: Literal[Kind.NONE] = Kind.NONE


LayerSpec = Annotated[Attention | MLA | Recurrent | NoCache, Field(discriminator="kind")]


class MoE(_Spec):
    n_experts: int = Field(ge=1)
    n_active: int = Field(ge=1)
    n_shared: int = Field(default=0, ge=0)
    expert_intermediate: int = Field(ge=1)
    shared_intermediate: int = Field(default=0, ge=0)
    n_dense_layers: int = Field(default=0, ge=0)


class VisionSpec(_Spec):
    """A vision (or audio) encoder loaded with the language model (``vision_config``)."""

    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    n_layers: int = Field(ge=1)
    patch_size: int = Field(default=14, ge=1)
    in_channels: int = Field(default=3, ge=1)
    positions: int = Field(default=0, ge=0)
    gated_mlp: bool = False
    #: Output size of the projector into the language model (0 = no projector weights).
    projector_out: int = Field(default=0, ge=0)
    #: Patches merged before the projector (Qwen2.5-VL ``spatial_merge_size``²; 1 = none).
    projector_merge: int = Field(default=1, ge=1)
    #: Attention heads (``num_heads`` / ``num_attention_heads``; 0 = not stated).
    heads: int = Field(default=0, ge=0)
    name: str = "vision"
    #: The tower's module layout: ``vit`` (the generic SigLIP/CLIP shape of ``weights._tower``),
    #: ``qwen2_5_vl`` / ``qwen3_vl`` (the Qwen-VL towers, to the parameter: ``weights._qwen_vl_tower``).
    #: ``moonvit``: Kimi-K2.5's MoonViT, the ``vit`` shape plus its projector's ``pre_norm`` and
    #: output bias.
    #: ``mistral3``: Pixtral's tower with Mistral-3's patch-merger projector (``weights._pixtral_tower``).
    #: ``gemma3``: SigLIP (the ``vit`` shape) plus Gemma-3's projector norm ``mm_soft_emb_norm``.
    layout: Literal["vit", "qwen2_5_vl", "qwen3_vl", "moonvit", "mistral3", "gemma3"] = "vit"
    #: Frames one patch spans (Qwen-VL ``temporal_patch_size``; the patch embedding's depth).
    temporal_patch: int = Field(default=1, ge=1)
    #: Extra patch mergers fed from intermediate blocks (Qwen3-VL ``deepstack_visual_indexes``).
    deepstack: int = Field(default=0, ge=0)


class WeightSpec(_Spec):
    """What the checkpoint stores besides the KV-relevant layers (read from config.json)."""

    #: Decoder layers that hold MoE experts (None = every layer from ``MoE.n_dense_layers`` on).
    moe_layers: tuple[int, ...] | None = None
    attention_bias: bool = False
    attention_out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    #: q/k norms over the whole projection (``heads × head_dim``) rather than one head.
    qk_norm_full: bool = False
    expert_bias: bool = False
    #: Multi-token-prediction (next-n) layers after the last decoder layer (DeepSeek-V3: 1).
    mtp_layers: int = Field(default=0, ge=0)
    #: Per-layer input embeddings (Gemma 3n): ``vocab_per_layer × layers × per_layer_size``.
    per_layer_vocab: int = Field(default=0, ge=0)
    per_layer_size: int = Field(default=0, ge=0)
    towers: tuple[VisionSpec, ...] = ()
    #: Gemma 4's KV-reusing last layers (``num_kv_shared_layers``): they keep ``q_proj``,
    #: ``q_norm`` and ``o_proj`` (no k/v projections, no ``k_norm``) of each one's head size
    #: (``kv_reuse_head_dims``, one per layer of ``kv_reuse_layers``); with
    #: ``kv_reuse_double_mlp`` their MLP is twice ``intermediate_size`` (``use_double_wide_mlp``).
    kv_reuse_layers: tuple[int, ...] = ()
    kv_reuse_head_dims: tuple[int, ...] = ()
    kv_reuse_double_mlp: bool = False
    #: ``quantization_config`` as canonical JSON text (kept hashable), or None.
    quantization: str | None = None
    #: Module names of the model family (``mlp`` prefix, router and expert naming).
    mlp_name: str = "mlp"
    router_name: str = "gate"
    attn_name: str = "self_attn"
    #: An output gate on each attention layer (``config_import.ATTENTION_GATE_TYPES``):
    #: ``head`` one value per query head (``h × H``), ``channel`` one per output channel
    #: (``h × H·d``); ``attn_gate_bias`` adds a per-head bias.
    attn_gate: Literal["", "head", "channel"] = ""
    attn_gate_bias: bool = False
    #: The router's score-correction bias is a stored parameter (``n_experts`` per MoE layer).
    router_score_bias: bool = False


class RopeScaling(_Spec):
    """One RoPE parameter set of the config (``rope_parameters`` or the legacy ``rope_scaling``):
    what the engines' context-length rules read. ``layer_type`` names the set when the config
    nests one per layer type (transformers 5 ``rope_parameters``), else it is empty."""

    rope_type: str = "default"
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    layer_type: str = ""
    #: Multimodal RoPE: the set names an ``mrope_section`` (or the legacy type ``mrope``, which vLLM
    #: ``patch_rope_parameters`` reads as ``default`` with its section): vLLM's
    #: ``MRotaryEmbedding`` (``kvplan.weights.rope_cache_bytes``).
    mrope: bool = False


class ModelArch(_Spec):
    """Everything kvplan needs about a model; built from a config.json or a preset."""

    name: str
    model_type: str
    architecture: str | None = None
    layers: tuple[LayerSpec, ...]
    hidden_size: int = Field(ge=1)
    n_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    intermediate_size: int = Field(ge=0)
    vocab_size: int = Field(ge=1)
    max_position_embeddings: int | None = None
    #: Every context-length key the (text) config sets, with its value (``max_position_embeddings``,
    #: ``n_positions``, ``seq_length``, ``model_max_length``, …): each engine derives its limit from
    #: them by its own rule (``Engine.context_limit``).
    context_keys: tuple[tuple[str, int], ...] = ()
    rope_scalings: tuple[RopeScaling, ...] = ()
    #: The share of each head's dimensions RoPE rotates (config.json ``partial_rotary_factor``, or
    #: ``rotary_dim`` / ``head_dim``, or GPT-NeoX's ``rotary_pct``; top level or inside
    #: ``rope_parameters``); 1.0 when the config names none. ``rotary_dim`` applies it.
    partial_rotary_factor: float = Field(default=1.0, gt=0, le=1)
    model_dtype: str = "bf16"
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    moe: MoE | None = None
    weights: WeightSpec = Field(default_factory=WeightSpec)
    params_total: int = Field(ge=0)
    params_active: int | None = None
    params_method: str = ""
    source: str = ""
    notes: tuple[str, ...] = ()
    #: The checkpoint's image processor (``presets/processors/``; ``kvplan.multimodal``), or None:
    #: text only, or a multimodal checkpoint whose processor values are not known.
    processor: Processor | None = None
    #: The last ``drafter_layers`` of ``layers`` are a speculative drafter's, appended after the
    #: model's own (vLLM's ``get_kv_cache_spec`` reports them in one pool: ``Vllm.pool_arch``);
    #: 0 for a model as its config describes it.
    drafter_layers: int = Field(default=0, ge=0)
    #: Every decoder layer runs an attention and a Mamba-2 mixer in parallel on the same input
    #: (Falcon-H1, vLLM ``falcon_h1.py`` ``FalconH1ParallelHybrid``): ``layers`` holds two entries
    #: per decoder layer, the attention then the mixer, each with its own cache (vLLM registers
    #: both: 2 × num_hidden_layers specs); the MLP and the two norms belong to the attention entry.
    parallel_mixers: bool = False

    #: Caches keyed by the ``layers`` tuple they were computed from (``model_copy`` copies them).
    _runs: tuple[tuple[LayerSpec, ...], tuple[tuple[LayerSpec, int], ...]] | None = PrivateAttr(
        default=None)
    _counts: tuple[tuple[LayerSpec, ...], dict[LayerSpec, int]] | None = PrivateAttr(default=None)
    _hash: tuple[tuple[LayerSpec, ...], int] | None = PrivateAttr(default=None)

    def __hash__(self) -> int:
        """Pydantic's frozen hash over every field, computed once per model (a 10,000-layer model is
        a cache key of the engines' pool layouts; rehashing its layers on every call would cost more
        than the sizing itself)."""
        if self._hash is None or self._hash[0] is not self.layers:  # model_copy copies private attrs
            self._hash = (self.layers, hash(tuple(getattr(self, name) for name in type(self).model_fields)))
        return self._hash[1]

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def rotary_dim(self) -> int:
        """The dimensions per head RoPE rotates: ``int(head_dim × partial_rotary_factor)`` (vLLM /
        SGLang ``get_rope``'s ``rotary_dim`` as their attention layers pass it); an MLA model
        rotates its ``qk_rope_head_dim`` part only."""
        mla = next((layer for layer in self.distinct_layers() if isinstance(layer, MLA)), None)
        if mla is not None:
            return mla.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def decoder_layers(self) -> int:
        """Decoder layers (``num_hidden_layers``): ``n_layers`` but with ``parallel_mixers``, where
        each decoder layer is two entries of ``layers``."""
        return self.n_layers // 2 if self.parallel_mixers else self.n_layers

    def layer_runs(self) -> tuple[tuple[LayerSpec, int], ...]:
        """The layers as runs of identical consecutive specs (computed once per model)."""
        if self._runs is None or self._runs[0] is not self.layers:
            runs: list[tuple[LayerSpec, int]] = []
            for layer in self.layers:
                if runs and runs[-1][0] is layer:
                    runs[-1] = (layer, runs[-1][1] + 1)
                elif runs and runs[-1][0] == layer:
                    runs[-1] = (runs[-1][0], runs[-1][1] + 1)
                else:
                    runs.append((layer, 1))
            self._runs = (self.layers, tuple(runs))
        return self._runs[1]

    def layer_counts(self, start: int = 0, stop: int | None = None) -> dict[LayerSpec, int]:
        """Distinct layer specs of layers ``[start, stop)`` with their counts, in first-seen order.

        Works on runs of identical layers, so its cost grows with the distinct kinds and their
        alternations, not with a long run of identical layers.
        """
        whole = start == 0 and stop in (None, self.n_layers)
        if whole and self._counts is not None and self._counts[0] is self.layers:
            return dict(self._counts[1])
        stop = self.n_layers if stop is None else stop
        counts: dict[LayerSpec, int] = {}
        position = 0
        for layer, n in self.layer_runs():
            low, high = max(position, start), min(position + n, stop)
            if high > low:
                counts[layer] = counts.get(layer, 0) + high - low
            position += n
        if whole:
            self._counts = (self.layers, dict(counts))
        return counts

    def distinct_layers(self) -> tuple[LayerSpec, ...]:
        """The distinct layer specs, in first-seen order (cached with the counts)."""
        if self._counts is None or self._counts[0] is not self.layers:
            self.layer_counts()
        assert self._counts is not None
        return tuple(self._counts[1])

    def kind_counts(self) -> dict[Kind, int]:
        counts: Counter[Kind] = Counter()
        for layer, n in self.layer_counts().items():
            counts[layer.kind] += n
        return dict(counts)

    @property
    def has_windows(self) -> bool:
        """Whether any attention layer has a sliding window or a chunk."""
        return any(isinstance(layer, Attention) and layer.window for layer in self.distinct_layers())

    @property
    def has_recurrent(self) -> bool:
        """Whether any layer keeps a recurrent state (Mamba, gated-delta, linear attention)."""
        return any(isinstance(layer, Recurrent) for layer in self.distinct_layers())

    @property
    def is_mla(self) -> bool:
        return any(layer.kind is Kind.MLA for layer in self.distinct_layers())

    @property
    def kv_heads(self) -> int:
        """KV heads of the attention layers (1 for MLA latent; max over layers)."""
        heads = [layer.n_kv_heads for layer in self.distinct_layers() if isinstance(layer, Attention)]
        return max(heads) if heads else 1
