"""How each serving engine stores each layer kind: one small rule class per cache kind.

A rule knows, for one rank and one group of identical layers, the bytes one token costs in one
layer, how many tokens a sequence of ``T`` tokens *holds* (steady state) and how many the engine
*reserves* for a request of maximum length ``L``. Rules are vectorised over numpy token arrays.

Engines and their sources (see ``../shared/reference/engines.md`` for quotes):

* ``hf`` — transformers 5.x ``DynamicCache`` (``src/transformers/cache_utils.py``): full layers keep
  every token; ``DynamicSlidingWindowLayer`` keeps ``W - 1`` tokens (chunked layers reuse it with
  ``W = attention_chunk_size``); MLA caches the latent (5.15+); linear-attention layers keep the
  full conv kernel and an fp32 recurrent state; Falcon new-arch caches K/V broadcast to all heads.
* ``hf-legacy`` — transformers ≤ 5.14 (and 4.x): MLA caches expanded per-head K and V.
* ``hf-static`` — ``StaticCache``: pre-allocates ``max_cache_len`` (sliding: ``min(W, max_cache_len)``).
* ``vllm`` — v1 paged blocks (``vllm/v1/kv_cache_interface.py``, ``single_type_kv_cache_manager.py``).
* ``sglang`` — token pool with ``page_size`` (``python/sglang/srt/model_executor/pool_configurator.py``).
* ``trtllm`` — TensorRT-LLM ``KVCacheManager`` (``tensorrt_llm/_torch/pyexecutor/resource_manager.py``):
  ``tokens_per_block`` 32, full length unless ``max_attention_window`` is given per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvplan.arch import MLA, Attention, LayerSpec, ModelArch, NoCache, Recurrent
from kvplan.dtypes import KVDType, get_dtype
from kvplan.errors import KVPlanError

ENGINES: dict[str, str] = {
    "hf": "HF transformers DynamicCache (5.15+)",
    "hf-legacy": "HF transformers DynamicCache (≤5.14: MLA expanded)",
    "hf-static": "HF transformers StaticCache",
    "vllm": "vLLM (v1 paged blocks)",
    "sglang": "SGLang (token pool)",
    "trtllm": "TensorRT-LLM (PyTorch backend, 32-token blocks)",
}
PAGED_ENGINES = ("vllm",)
#: SGLang ``is_hybrid_swa_model`` architectures (``python/sglang/srt/configs/model_config.py``);
#: others (Gemma 2/3, Mistral v0.1) get full-length KV on every layer.
SGLANG_HYBRID_SWA_ARCHS = frozenset({
    "Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2MTP",
    "Step3p5ForCausalLM", "Step3p5MTP", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",
})
#: vLLM ``SupportsMambaPrefixCaching`` families: mamba cache mode "all" instead of "align".
VLLM_MAMBA_ALL_MODE_VARIANTS = frozenset({"mamba2"})
VLLM_DEFAULT_BLOCK_SIZE = 16  # vllm/config/cache.py DEFAULT_BLOCK_SIZE
MLA_ONLY_DTYPES = frozenset({"fp8_ds_mla"})


class EngineSettings(BaseModel):
    """Engine knobs; ``None`` means the engine's own default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, ge=1, le=4096)
    pp: int = Field(default=1, ge=1, le=4096)
    block_size: int | None = Field(default=None, ge=1, le=1_000_000)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=100_000_000)
    #: vLLM ≥0.26 async scheduling: in-flight tokens = (pp + 1) × max_num_batched_tokens.
    async_scheduling: bool = True
    #: vLLM hybrid KV-cache manager; None = engine default (off for chunked-attention models).
    hybrid_manager: bool | None = None
    enable_prefix_caching: bool = True
    max_cache_len: int | None = Field(default=None, ge=1, le=1_000_000_000)
    page_size: int | None = Field(default=None, ge=1, le=1_000_000)
    swa_eviction_interval: int = Field(default=128, ge=0)


def _cdiv(a: np.ndarray | int, b: int) -> np.ndarray:
    return -(-np.asarray(a, dtype=np.int64) // b)


@dataclass(frozen=True)
class CacheRule:
    """Storage of ``layers`` identical layers on one rank; subclasses define retention."""

    kind: str
    layers: int
    bytes_per_token: int
    window: int | None = None
    state_bytes: int = 0
    note: str = ""
    spec: object = field(default=None, compare=False, repr=False)

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.asarray(tokens, dtype=np.int64)

    def reserved_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return self.held_tokens(tokens)

    def held_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Bytes one sequence of ``tokens`` holds in these layers (steady state)."""
        return self.layers * (self.held_tokens(tokens) * self.bytes_per_token + self.state_bytes)

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """Bytes the engine sets aside for one request of up to ``tokens`` tokens."""
        return self.layers * (self.reserved_tokens(tokens) * self.bytes_per_token + self.state_bytes)


@dataclass(frozen=True)
class TokenRule(CacheRule):
    """Dynamic storage: keep ``min(T, cap)`` tokens, rounded up to ``page`` tokens."""

    cap: int | None = None
    page: int = 1

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        if self.cap is not None:
            t = np.minimum(t, self.cap)
        return _cdiv(t, self.page) * self.page if self.page > 1 else t


@dataclass(frozen=True)
class StaticRule(CacheRule):
    """Pre-allocated storage of ``slots`` tokens whatever the length (transformers StaticCache)."""

    slots: int = 0

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), self.slots, dtype=np.int64)


@dataclass(frozen=True)
class StateRule(CacheRule):
    """Constant per-sequence state (recurrent layers); ``pages`` counts vLLM state pages."""

    pages_reserved: int = 1

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(tokens), dtype=np.int64)

    def held_bytes(self, tokens: np.ndarray) -> np.ndarray:
        return np.full(np.shape(tokens), self.layers * self.state_bytes, dtype=np.int64)

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        return self.held_bytes(tokens) * self.pages_reserved


@dataclass(frozen=True)
class PagedRule(CacheRule):
    """vLLM block storage: whole blocks of ``block_size`` tokens; ``page_bytes`` per block per layer.

    Held blocks follow the single-type managers' ``get_num_skipped_tokens``: sliding
    ``max(0, T - W + 1 - extra)``, chunked ``(T // C) * C``. Reserved blocks follow
    ``max_memory_usage_bytes``: full ``cdiv(L, bs)``; sliding ``cdiv(min(W - 1 + extra + IFT, L), bs) + 1``;
    chunked ``cdiv(min(C + IFT, L), bs)``.
    """

    block_size: int = VLLM_DEFAULT_BLOCK_SIZE
    in_flight_tokens: int = 0
    extra_retained: int = 0

    @property
    def page_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    def held_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        blocks = _cdiv(t, self.block_size)
        if self.kind == "sliding" and self.window:
            skipped = np.maximum(0, t - self.window + 1 - self.extra_retained)
            return blocks - skipped // self.block_size
        if self.kind == "chunked" and self.window:
            skipped = (t // self.window) * self.window
            return blocks - skipped // self.block_size
        return blocks

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        if self.kind == "sliding" and self.window:
            span = np.minimum(self.window - 1 + self.extra_retained + self.in_flight_tokens, t)
            return _cdiv(span, self.block_size) + 1
        if self.kind == "chunked" and self.window:
            return _cdiv(np.minimum(self.window + self.in_flight_tokens, t), self.block_size)
        return _cdiv(t, self.block_size)

    def held_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return self.held_blocks(tokens) * self.block_size

    def reserved_tokens(self, tokens: np.ndarray) -> np.ndarray:
        return self.reserved_blocks(tokens) * self.block_size


@dataclass(frozen=True)
class EngineView:
    """All rules of one model on one rank for one engine, with the settings that shaped them."""

    engine: str
    dtype: KVDType
    rules: tuple[CacheRule, ...]
    block_size: int | None = None
    in_flight_tokens: int | None = None
    hybrid_manager: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def held_bytes(self, tokens: np.ndarray) -> np.ndarray:
        total = np.zeros(np.shape(tokens), dtype=np.int64)
        for rule in self.rules:
            total = total + rule.held_bytes(tokens)
        return total

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        total = np.zeros(np.shape(tokens), dtype=np.int64)
        for rule in self.rules:
            total = total + rule.reserved_bytes(tokens)
        return total


def _add(rules: list[CacheRule], layer: LayerSpec, rule: CacheRule) -> None:
    rules.append(replace(rule, spec=layer))


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise KVPlanError("unknown.engine", value=engine, choices=", ".join(ENGINES))
    return engine


def resolve_dtype(name: str) -> KVDType:
    try:
        return get_dtype(name)
    except KeyError:
        from kvplan.dtypes import KV_DTYPE_CHOICES

        raise KVPlanError("unknown.dtype", value=name, choices=", ".join(KV_DTYPE_CHOICES)) from None


def kv_heads_per_rank(n_kv: int, tp: int) -> int:
    """``max(1, n_kv // tp)`` (vLLM ``ModelConfig.get_num_kv_heads``; SGLang ``get_num_kv_heads``)."""
    if tp > n_kv and tp % n_kv:
        raise KVPlanError("parallel.tp_heads", tp=tp, heads=n_kv)
    if tp <= n_kv and n_kv % tp:
        raise KVPlanError("parallel.tp_heads", tp=tp, heads=n_kv)
    return max(1, n_kv // tp)


def pp_partition(n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: vLLM ``get_pp_indices`` (remainder to the stages before the last)."""
    if pp > n_layers:
        raise KVPlanError("parallel.pp_layers", pp=pp, layers=n_layers)
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts


def attention_token_bytes(layer: Attention, dtype: KVDType, heads: int) -> int:
    """Bytes of one token's K and V in one layer: ``heads × (vec(hd_k) + vec(hd_v))``."""
    return heads * (dtype.vector_bytes(layer.head_dim_k) + dtype.vector_bytes(layer.head_dim_v))


def mla_token_bytes(layer: MLA, dtype: KVDType, engine: str) -> int:
    """MLA bytes per token per layer.

    vLLM/SGLang: one ``kv_lora_rank + qk_rope_head_dim`` vector (``MLAAttentionSpec``, no V);
    ``fp8_ds_mla`` is fp8 latent + one fp32 scale per 128 + bf16 rope (656 B for 512 + 64). DSA
    models (DeepSeek-V3.2) add an indexer key cache of ``d + d // 128 × 4`` B (uint8 + scales;
    ``models/deepseek_v2.py``): 132 B for d = 128 — in vLLM another MLAAttentionSpec per layer,
    which groups with the latent as one ``UniformTypeKVCacheSpecs``, so it is counted here.
    HF ≥5.15: ``cache.update(kv_nope, k_rot)`` stores the two parts as K and V tensors
    (``DynamicIndexedLayer`` adds the indexer keys in the cache dtype).
    HF ≤5.14: expanded ``H × (qk_nope + qk_rope)`` keys and ``H × v_head_dim`` values.
    """
    d = layer.indexer_head_dim
    if engine == "hf-legacy":
        return layer.n_heads * (dtype.vector_bytes(layer.qk_nope_head_dim + layer.qk_rope_head_dim)
                                + dtype.vector_bytes(layer.v_head_dim)) + dtype.vector_bytes(d)
    if engine in {"hf", "hf-static"}:
        return (dtype.vector_bytes(layer.kv_lora_rank) + dtype.vector_bytes(layer.qk_rope_head_dim)
                + dtype.vector_bytes(d))
    indexer = d + d // 128 * 4
    if dtype.name == "fp8_ds_mla":
        return dtype.vector_bytes(layer.kv_lora_rank) + layer.qk_rope_head_dim * 2 + indexer
    return dtype.vector_bytes(layer.kv_lora_rank + layer.qk_rope_head_dim) + indexer


def recurrent_state_bytes(layer: Recurrent, engine: str, model_dtype: KVDType, tp: int) -> int:
    """Per-sequence state of one recurrent layer.

    HF ``LinearAttentionLayer``: conv ``[C, kernel]`` (full kernel) in the model dtype, recurrent
    state in fp32 for Gated DeltaNet (fla kernels return fp32). vLLM
    ``MambaStateShapeCalculator``: conv ``[C/tp, kernel-1]`` and the SSM state in the model dtype
    (``mamba_cache_dtype="auto"``) unless the config sets ``mamba_ssm_cache_dtype``. SGLang: conv
    in the model dtype, SSM in fp32 unless the config says otherwise.
    """
    fp32 = get_dtype("fp32")
    configured = get_dtype(layer.ssm_dtype) if layer.ssm_dtype else None
    if engine.startswith("hf"):
        ssm_dtype = fp32 if layer.variant == "gdn" else model_dtype
        return (layer.conv_channels * layer.conv_kernel * model_dtype.bits // 8
                + layer.ssm_elements * ssm_dtype.bits // 8)
    shards = tp if layer.tp_shard_unit % tp == 0 else 1
    conv = (layer.conv_channels // shards) * (layer.conv_kernel - 1) * model_dtype.bits // 8
    ssm_dtype = configured or (fp32 if engine == "sglang" else model_dtype)
    return conv + (layer.ssm_elements // shards) * ssm_dtype.bits // 8


def layer_token_bytes(layer: LayerSpec, engine: str, dtype: KVDType, tp: int) -> int:
    """Bytes per token per layer per rank for attention-like layers (0 otherwise)."""
    if isinstance(layer, Attention):
        if dtype.name in MLA_ONLY_DTYPES:
            raise KVPlanError("engine.dtype", engine=engine, dtype=dtype.name,
                              why="this layout exists only for MLA layers")
        if engine == "trtllm":  # get_cache_size_per_token: head_dim · nkv // tp per rank
            return (dtype.vector_bytes(layer.head_dim_k * layer.n_kv_heads // tp)
                    + dtype.vector_bytes(layer.head_dim_v * layer.n_kv_heads // tp))
        # transformers' tp_plan shards k/v projections colwise like vLLM (Falcon new-arch caches
        # the heads it broadcast to every query head)
        heads = (layer.hf_cached_heads or layer.n_kv_heads) if engine.startswith("hf") \
            else layer.n_kv_heads
        heads = kv_heads_per_rank(heads, tp)
        return attention_token_bytes(layer, dtype, heads)
    if isinstance(layer, MLA):
        return mla_token_bytes(layer, dtype, engine)
    return 0


def default_max_num_batched_tokens(device_bytes: int | None, device_name: str = "",
                                   usage: str = "serve") -> int:
    """vLLM ``EngineArgs.get_batch_defaults`` (v0.28+): by device memory and name.

    ≥160 GiB: 16384; ≥70 GiB and not an A100: 16384 (``LLM``) / 8192 (``serve``);
    otherwise 8192 / 2048. Unknown device: the lowest tier.
    """
    gib = 1 << 30
    llm = usage == "llm"
    if device_bytes and device_bytes >= 160 * gib:
        return 16384
    if device_bytes and device_bytes >= 70 * gib and "a100" not in device_name.lower():
        return 16384 if llm else 8192
    return 8192 if llm else 2048


def engine_view(arch: ModelArch, engine: str, kv_dtype: str = "bf16",
                settings: EngineSettings | None = None, stage_layers: tuple[int, int] | None = None,
                mla_block_size: int | None = None) -> EngineView:
    """The rules of ``arch`` under ``engine`` for one rank (layers ``stage_layers`` = [start, stop))."""
    check_engine(engine)
    settings = settings or EngineSettings()
    dtype = resolve_dtype(arch.model_dtype if kv_dtype == "auto" else kv_dtype)  # vLLM "auto"
    model_dtype = resolve_dtype(arch.model_dtype)
    start, stop = stage_layers or (0, arch.n_layers)
    layers = arch.layers[start:stop]
    tp = settings.tp
    if engine in {"hf", "hf-legacy"} and dtype.bits < 16 and any(  # QuantizedCache (quanto/hqq/fp8)
            getattr(layer, "kind", "") in {"sliding", "chunked"} for layer in arch.layers):
        raise KVPlanError("engine.dtype", engine=engine, dtype=dtype.name,
                          why="transformers' QuantizedCache only supports models with only full "
                              "attention layers")
    counts: dict[LayerSpec, int] = {}
    for layer in layers:
        counts[layer] = counts.get(layer, 0) + 1
    builder = {"vllm": _vllm_rules, "sglang": _sglang_rules, "trtllm": _trtllm_rules}.get(engine,
                                                                                         _hf_rules)
    return builder(arch, engine, dtype, model_dtype, settings, tp, counts, mla_block_size)


def layer_kind(layer: Attention | MLA) -> str:
    """Retention kind of an attention-like layer: full/sliding/chunked, or mla (sliding MLA → sliding)."""
    if isinstance(layer, Attention):
        return layer.kind
    return "sliding" if layer.window else "mla"


def _state_rule(layer: Recurrent, n: int, engine: str, model_dtype: KVDType, tp: int) -> StateRule:
    return StateRule("recurrent", n, 0, state_bytes=recurrent_state_bytes(layer, engine, model_dtype, tp))


def _split(counts: dict[LayerSpec, int], engine: str, model_dtype: KVDType,
           tp: int) -> tuple[list[CacheRule], list[tuple[Attention | MLA, int]]]:
    """State rules for the recurrent layers, and the attention-like layers left to the engine."""
    rules: list[CacheRule] = []
    attention: list[tuple[Attention | MLA, int]] = []
    for layer, n in counts.items():
        if isinstance(layer, Recurrent):
            _add(rules, layer, _state_rule(layer, n, engine, model_dtype, tp))
        elif not isinstance(layer, NoCache):
            attention.append((layer, n))
    return rules, attention


def _hf_rules(arch, engine, dtype, model_dtype, settings, tp, counts, _mla_bs) -> EngineView:
    static = engine == "hf-static"
    rules, attention = _split(counts, engine, model_dtype, tp)
    for layer, n in attention:
        bpt = layer_token_bytes(layer, engine, dtype, tp)
        kind, window = layer_kind(layer), layer.window
        if static:
            max_len = settings.max_cache_len or 0
            _add(rules, layer, StaticRule(
                kind, n, bpt, window=window, slots=min(window, max_len) if window else max_len,
                note="pre-allocated max_cache_len"
                     + (" (window: min(W, max_cache_len))" if window else "")))
        else:
            _add(rules, layer, TokenRule(
                kind, n, bpt, window=window, cap=window - 1 if window else None,
                note=f"keeps the last W-1 = {window - 1} tokens" if window else "keeps every token"))
    return EngineView(engine, dtype, tuple(rules))


def _vllm_rules(arch, engine, dtype, model_dtype, settings, tp, counts, mla_bs) -> EngineView:
    hybrid = settings.hybrid_manager
    has_chunked = any(getattr(layer, "kind", "") == "chunked" for layer in arch.layers)
    if hybrid is None:
        hybrid = not has_chunked  # vllm/config/vllm.py: HMA off by default with attention_chunk_size
    mnbt = settings.max_num_batched_tokens or default_max_num_batched_tokens(None)
    concurrent = (settings.pp + 1) if settings.async_scheduling else 1
    ift = concurrent * mnbt
    block = settings.block_size
    if block is None:
        block = (mla_bs or VLLM_DEFAULT_BLOCK_SIZE) if arch.is_mla else VLLM_DEFAULT_BLOCK_SIZE
    notes: list[str] = []
    attn_1tok = [layer_token_bytes(layer, engine, dtype, tp) for layer in counts
                 if isinstance(layer, Attention | MLA)]
    recurrent = [layer for layer in counts if isinstance(layer, Recurrent)]
    state_pages = 1
    if recurrent and attn_1tok:
        state = max(recurrent_state_bytes(r, engine, model_dtype, tp) for r in recurrent)
        align = max(block, 16)
        per_token = max(attn_1tok)
        all_mode = settings.enable_prefix_caching and recurrent[0].variant in VLLM_MAMBA_ALL_MODE_VARIANTS
        if all_mode:  # "all" mode: the block is a multiple of lcm(mamba chunk, kernel alignment)
            chunk = math.lcm(recurrent[0].chunk_size or align, align)
            tokens_per_state = -(-state // per_token)
            raised = chunk * -(-tokens_per_state // chunk)
        else:
            raised = align * -(-state // (align * per_token))
        if raised > block:
            notes.append(f"attention block raised from {block} to {raised} tokens so one page "
                         f"holds a {state:,} B recurrent state (Platform._align_hybrid_block_size)")
            block = raised
        if not settings.enable_prefix_caching:
            state_pages = 1  # mamba_cache_mode "none"
        elif all_mode:
            state_pages = 0  # "all": one state page per block of tokens, set per request below
        else:
            state_pages = 2  # "align"
    rules: list[CacheRule] = []
    for layer, n in counts.items():
        if isinstance(layer, NoCache):
            continue
        if isinstance(layer, Recurrent):
            padded = block * max(attn_1tok) if attn_1tok else \
                recurrent_state_bytes(layer, engine, model_dtype, tp)
            _add(rules, layer, _VllmStateRule(
                "recurrent", n, 0, state_bytes=padded, pages_reserved=state_pages,
                block_size=block, note="state page padded to the attention page"))
            continue
        bpt = layer_token_bytes(layer, engine, dtype, tp)
        kind, window = layer_kind(layer), layer.window
        if not hybrid and kind in {"sliding", "chunked"}:
            notes.append(f"hybrid KV-cache manager off: {kind} layers reserve full max_model_len")
            kind, window = "full", None
        _add(rules, layer, PagedRule(kind, n, bpt, window=window, block_size=block,
                                     in_flight_tokens=ift))
    return EngineView(engine, dtype, tuple(rules), block_size=block, in_flight_tokens=ift,
                      hybrid_manager=hybrid, notes=tuple(dict.fromkeys(notes)))


@dataclass(frozen=True)
class _VllmStateRule(StateRule):
    """vLLM Mamba pages: 1 (prefix caching off), 2 ("align"), or one per block ("all")."""

    block_size: int = VLLM_DEFAULT_BLOCK_SIZE

    def reserved_blocks(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.int64)
        if self.pages_reserved == 0:
            return _cdiv(t, self.block_size)
        return np.full(np.shape(t), self.pages_reserved, dtype=np.int64)

    def reserved_bytes(self, tokens: np.ndarray) -> np.ndarray:
        return self.layers * self.state_bytes * self.reserved_blocks(tokens)

    @property
    def page_bytes(self) -> int:
        return self.state_bytes


def _sglang_rules(arch, engine, dtype, model_dtype, settings, tp, counts, _mla_bs) -> EngineView:
    page = settings.page_size or 1
    hybrid_swa = (arch.architecture or "") in SGLANG_HYBRID_SWA_ARCHS
    notes = [] if hybrid_swa else (
        ["SGLang gives every layer full-length KV for this architecture (not in its hybrid "
         "SWA list)"] if any(getattr(x, "window", None) for x in counts) else [])
    rules, attention = _split(counts, engine, model_dtype, tp)
    for layer, n in attention:
        bpt = layer_token_bytes(layer, engine, dtype, tp)
        kind = layer_kind(layer)
        if layer.window and hybrid_swa:
            cap = layer.window + settings.swa_eviction_interval
            _add(rules, layer, TokenRule(
                kind, n, bpt, window=layer.window, cap=cap, page=page,
                note=f"SWA pool: ≤ W + {settings.swa_eviction_interval} (eviction interval) tokens"))
        else:
            full_kind = "full" if kind in {"sliding", "chunked"} else kind
            _add(rules, layer, TokenRule(full_kind, n, bpt, page=page))
    return EngineView(engine, dtype, tuple(rules), block_size=page, notes=tuple(notes))


TRTLLM_TOKENS_PER_BLOCK = 32  # tensorrt_llm/llmapi/llm_args.py KvCacheConfig.tokens_per_block


def _trtllm_rules(arch, engine, dtype, model_dtype, settings, tp, counts, _mla_bs) -> EngineView:
    """TensorRT-LLM: every attention layer full length in 32-token blocks (``max_attention_window``
    defaults to ``[max_seq_len]``, so sliding windows apply only when configured per layer); MLA
    latent replicated on every TP rank (``kv_factor = 1``)."""
    block = settings.block_size or TRTLLM_TOKENS_PER_BLOCK
    notes = ["TensorRT-LLM keeps full-length KV on windowed layers unless max_attention_window is "
             "set per layer"] if any(getattr(x, "window", None) for x in counts) else []
    rules, attention = _split(counts, engine, model_dtype, tp)
    for layer, n in attention:
        _add(rules, layer, PagedRule("mla" if isinstance(layer, MLA) else "full", n,
                                     layer_token_bytes(layer, engine, dtype, tp), block_size=block))
    return EngineView(engine, dtype, tuple(rules), block_size=block, notes=tuple(notes))
