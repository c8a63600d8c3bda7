"""SGLang LoRA: the GPU buffers ``--enable-lora`` allocates at start-up (``LoRAMemoryPool``), per GPU.

SGLang v0.5.23 (``python/sglang/srt/lora/mem_pool.py`` ``LoRAMemoryPool.init_buffers``) gives every
target module of every layer (``range(num_hidden_layers)``: all layers, whatever the pipeline
stage) one zero-filled A and one B buffer of ``max_loras_per_batch`` slots at ``max_lora_rank``, in
the model dtype (``lora_manager.py`` ``init_memory_pool``). With ``S`` slots, rank ``r``, TP ``t``
(``get_lora_A_shape`` / ``get_lora_B_shape``, ``lora/utils.py`` ``get_default_hidden_dim`` and
``get_stacked_multiply``: qkv 3, gate_up 2):

* ``qkv_proj``: A ``S × 3r × hidden``; B ``S × out/t × r`` with ``out = head_dim × (heads + 2 ×
  kv_heads)`` — when ``kv_heads < t`` the K/V heads are replicated: ``q/t + 2 × head_dim``
  (``_column_parallel_lora_b_per_rank_dim``);
* ``o_proj`` (row-parallel, ``ROW_PARALLELISM_LINEAR_LORA_NAMES``): A ``S × r × heads·head_dim/t``;
  B ``S × hidden × r``;
* ``gate_up_proj``: A ``S × 2r × hidden``; B ``S × 2·intermediate/t × r`` (``_dense_local_dim``:
  the base layer's ``output_partition_sizes``);
* ``down_proj`` (row-parallel): A ``S × r × intermediate/t``; B ``S × hidden × r``;
* ``embed_tokens`` (``get_embedding_lora_A_shape``: the whole vocabulary on every rank): A
  ``S × r × vocab``, B ``S × hidden × r``;
* ``lm_head``: A ``S × r × hidden``, B ``S × vocab_on_rank × r`` (``get_lm_head_lora_b_shard_size``:
  the base ``ParallelLMHead``'s ``num_org_elements``: ``min(pad64(vocab) / t, vocab)`` on rank 0).

The pool is built by ``ModelRunner.maybe_init_lora_manager`` right after ``load_model`` and before
the KV pool is sized (``model_executor/model_runner.py`` ``initialize``), so it comes out of the
memory free after loading exactly as the weights do: KV = ``pre × mfs − weights − LoRA pool``
(``kv_cache_configurator.py`` ``_profile_available_bytes``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvplan.arch import Attention, ModelArch
from kvplan.dtypes import get_dtype
from kvplan.engines.reserve import ReserveTerm
from kvplan.errors import KVPlanError

#: The reserve term's name (the ledger's ``reserve: lora_pool``).
LORA_POOL_TERM = "lora_pool"
#: The normalized module names SGLang's ``--lora-target-modules all`` resolves to on a dense decoder
#: (``lora/utils.py`` ``auto_detect_lora_target_modules``: every ``LinearBase``, the
#: ``ParallelLMHead`` and the ``VocabParallelEmbedding``).
SGLANG_LORA_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head")
#: ``VocabParallelEmbedding`` pads the vocabulary to 64 rows (``DEFAULT_VOCAB_PADDING_SIZE``).
VOCAB_PADDING = 64


@dataclass(frozen=True)
class SglangLoraPool:
    """The LoRA buffers on one GPU: bytes per normalized module (all slots, A and B), the bytes of one
    slot, and the formula."""

    max_loras_per_batch: int
    max_lora_rank: int
    dtype: str
    modules: dict[str, int]
    formula: str

    @property
    def total(self) -> int:
        return sum(self.modules.values())

    @property
    def slot_bytes(self) -> int:
        return self.total // self.max_loras_per_batch


def check_sglang_lora(arch: ModelArch, target_modules: tuple[str, ...]) -> None:
    """The models kvplan sizes SGLang's pool for: dense attention decoders (MoE expert buffers and
    other layer kinds are not modelled), and only the modules SGLang normalizes to."""
    odd = [layer for layer in arch.distinct_layers() if not isinstance(layer, Attention)]
    if arch.moe is not None or odd or not arch.gated_mlp:
        what = ("MoE experts" if arch.moe is not None else f"{type(odd[0]).__name__} layers" if odd
                else "a non-gated MLP (fc1/fc2)")
        raise KVPlanError("lora.model", model=arch.name, what=what)
    unknown = [m for m in target_modules if m not in SGLANG_LORA_MODULES]
    if unknown:
        raise KVPlanError("lora.sglang_module", value=unknown[0], choices=", ".join(SGLANG_LORA_MODULES))


def sglang_lora_pool(arch: ModelArch, *, tp: int, max_loras_per_batch: int, max_lora_rank: int,
                     dtype: str, target_modules: tuple[str, ...] = SGLANG_LORA_MODULES) -> SglangLoraPool:
    """``LoRAMemoryPool.init_buffers`` on one GPU (module docstring for each shape), after
    ``check_sglang_lora``."""
    check_sglang_lora(arch, target_modules)
    s, r, t = max_loras_per_batch, max_lora_rank, tp
    d = get_dtype(dtype).bits // 8
    h, v, inter = arch.hidden_size, arch.vocab_size, arch.intermediate_size
    targets = set(target_modules)
    modules: dict[str, int] = {}

    def add(name: str, elements: int) -> None:
        if name in targets and elements:
            modules[name] = modules.get(name, 0) + elements * d

    for layer, count in arch.layer_counts(0, arch.n_layers).items():
        assert isinstance(layer, Attention)
        hd, heads, kv = layer.head_dim_k, arch.n_heads, layer.n_kv_heads
        qkv_out = hd * (heads + 2 * kv)
        qkv_b = heads * hd // t + 2 * hd if kv < t else qkv_out // t
        add("qkv_proj", count * s * (3 * r * h + qkv_b * r))
        add("o_proj", count * s * (r * (heads * layer.head_dim_v // t) + h * r))
        if arch.gated_mlp:
            add("gate_up_proj", count * s * (2 * r * h + (2 * inter // t) * r))
        add("down_proj", count * s * (r * (inter // t) + h * r))
    add("embed_tokens", s * (r * v + h * r))
    per_rank = -(-v // VOCAB_PADDING) * VOCAB_PADDING // t
    add("lm_head", s * (r * h + min(per_rank, v) * r))
    total = sum(modules.values())
    formula = (f"max_loras_per_batch {s} × rank {r} in {dtype}: "
               + ", ".join(f"{m} {b:,}" for m, b in modules.items()) + f" = {total:,} B")
    return SglangLoraPool(s, r, dtype, modules, formula)


#: ``lora/utils.py`` ``get_normalized_target_modules`` ``params_mapping`` (the dense-decoder names).
NORMALIZED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
              "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "vocab_emb": "embed_tokens",
              "embeddings": "embed_tokens", "output": "lm_head"}


def sglang_lora_targets(text: str | None) -> tuple[str, ...]:
    """``--lora-target-modules`` normalized (``get_normalized_target_modules``: the last dotted
    part mapped by ``params_mapping``); None or ``all`` = every module
    (``auto_detect_lora_target_modules``)."""
    if text is None or text.strip() == "all":
        return SGLANG_LORA_MODULES
    names = [n for n in re.split(r"[,\s]+", text) if n]
    return tuple(dict.fromkeys(NORMALIZED.get(n.split(".")[-1], n.split(".")[-1]) for n in names))


def sglang_lora_term(arch: ModelArch, *, tp: int, max_loras_per_batch: int, max_lora_rank: int,
                     dtype: str, release: str, target_modules: str | None = None) -> ReserveTerm:
    """The ``lora_pool`` term of the KV budget (counted: allocated before the KV pool is sized)."""
    pool = sglang_lora_pool(arch, tp=tp, max_loras_per_batch=max_loras_per_batch,
                            max_lora_rank=max_lora_rank, dtype=dtype,
                            target_modules=sglang_lora_targets(target_modules))
    return ReserveTerm(LORA_POOL_TERM, pool.total, pool.formula,
                       f"{release}: lora/mem_pool.py LoRAMemoryPool.init_buffers (after load_model, "
                       "before the KV pool: model_runner.py initialize)")
