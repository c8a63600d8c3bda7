"""vLLM LoRA: the GPU adapter slots ``--enable-lora`` allocates at start-up, per GPU.

vLLM v0.33 wraps every LoRA-capable module of the model at load time (``vllm/lora/model_manager.py``
``LoRAModelManager._create_lora_modules``: the model's ``LinearBase`` modules and its
``embedding_modules``; ``--lora-target-modules`` restricts the suffixes) and gives each wrapper
``max_loras`` zero-filled slots at ``max_lora_rank`` in ``lora_dtype`` (the model dtype by default;
``vllm/config/lora.py`` ``LoRAConfig.verify_with_model_config``). The wrapping runs inside
``gpu_model_runner.py`` ``load_model``'s ``DeviceMemoryProfiler``, so the slots are counted with the
weights before the KV budget is taken. Per wrapper (TP size ``t``, rank ``r``, ``S`` = ``max_loras``):

* column-parallel (``qkv_proj``: 3 slices, ``gate_up_proj``: 2, ``fc1``: 1;
  ``column_parallel_linear.py`` ``MergedColumnParallelLinearWithLoRA.create_lora_weights``,
  ``MergedQKVParallelLinearWithLoRA``): A ``S × r × input`` per slice (not split), B
  ``S × output_slice / t × r`` per slice — the q slice ``heads/t × head_size``, k and v
  ``max(1, kv_heads/t) × head_size`` (``QKVParallelLinear.num_kv_heads``, replicated heads);
* row-parallel (``o_proj``, ``down_proj``; ``base_linear.py`` ``create_lora_weights``): A
  ``S × r × input / t``, B ``S × output × r`` (not split);
* where the model class lists them in ``embedding_modules`` (``VOCAB_LORA_MODULES``):
  ``embed_tokens`` (``vocab_parallel_embedding.py`` ``VocabParallelEmbeddingWithLoRA``): A
  ``S × vocab × r``, B ``S × hidden × r`` — the whole vocabulary on every rank;
* ``lm_head`` (``logits_processor.py`` ``LogitsProcessorWithLoRA.create_lora_weights``, tied
  embeddings too): A ``S × r × hidden``, B ``S × vocab × r``, and with ``t ≥ 2`` an int64
  ``sharded_to_full_mapping`` of the padded vocabulary (``get_sharded_to_full_mapping``);
* the punica workspace (``punica_wrapper/punica_base.py`` ``PunicaWrapperBase.__init__``: four int64
  index vectors of ``max_num_batched_tokens`` and three of ``max_num_seqs``; ``punica_gpu.py``
  ``PunicaWrapperGPU``: two ``LoRAKernelMeta.make`` — two int32 vectors of
  ``max_num_batched_tokens``, two of ``S + 1``, one of ``S + 2`` each).

The dummy LoRAs of the profile run are built on the CPU and copied into these slots
(``model_manager.py`` ``create_dummy_lora``), so they add no GPU memory. ``max_cpu_loras`` adapters
stay in host memory (``LRUCacheLoRAModelManager``), listed but not on the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvplan.arch import Attention, ModelArch
from kvplan.dtypes import get_dtype
from kvplan.engines.reserve import ReserveTerm
from kvplan.engines.settings import EngineSettings
from kvplan.errors import KVPlanError
from kvplan.parallel import layer_partition

#: ``logits_processor.py`` ``LogitsProcessorWithLoRA.create_lora_weights``: larger vocabularies raise.
LORA_MAX_VOCAB = 258048
#: ``vocab_parallel_embedding.py`` ``DEFAULT_VOCAB_PADDING_SIZE``.
VOCAB_PADDING = 64
#: The reserve term's name (``Reserve``, the ledger's ``reserve: lora_slots``).
LORA_TERM = "lora_slots"
#: The CUDA graphs captured a second time with LoRA active.
LORA_GRAPHS_TERM = "lora_cuda_graphs"
#: The vocabulary modules a model class declares in ``embedding_modules`` (``SupportsLoRA``: none by
#: default; ``vllm/lora/utils.py`` ``get_supported_lora_modules`` wraps only those and the
#: ``LinearBase`` layers), by the config's ``architectures[0]``, read from vLLM 0.33.0's classes
#: (``ModelRegistry._try_load_model_cls(arch).embedding_modules``; ``models/llama.py``, ``phi3.py``,
#: ``qwen3.py``: both; ``commandr.py``: the input embedding only; ``mistral.py``, ``qwen2.py``,
#: ``gemma2.py``, ``gemma3.py``, ``gemma3_mm.py``, ``falcon.py``, ``opt.py``: none).
VOCAB_LORA_MODULES: dict[str, tuple[str, ...]] = {
    "LlamaForCausalLM": ("embed_tokens", "lm_head"),
    "Phi3ForCausalLM": ("embed_tokens", "lm_head"),
    "Qwen3ForCausalLM": ("embed_tokens", "lm_head"),
    "CohereForCausalLM": ("embed_tokens",),
    "MistralForCausalLM": (),
    "Qwen2ForCausalLM": (),
    "Gemma2ForCausalLM": (),
    "Gemma3ForCausalLM": (),
    "Gemma3ForConditionalGeneration": (),
    "FalconForCausalLM": (),
    "OPTForCausalLM": (),
}
#: The module suffixes vLLM wraps in a dense decoder (``--lora-target-modules`` choices).
LORA_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head")


@dataclass(frozen=True)
class LoraSlots:
    """The LoRA buffers on one GPU of the heaviest pipeline stage: bytes per module suffix (all
    ``max_loras`` slots), the punica workspace, and the bytes of one slot."""

    max_loras: int
    max_lora_rank: int
    dtype: str
    modules: dict[str, int]
    workspace: int
    cpu_bytes: int
    formula: str

    @property
    def slot_bytes(self) -> int:
        """Bytes of one adapter slot (every wrapped module, one of ``max_loras``)."""
        return sum(self.modules.values()) // self.max_loras

    @property
    def total(self) -> int:
        return sum(self.modules.values()) + self.workspace

    def workspace_for(self, max_loras: int) -> int:
        """The workspace with another ``max_loras`` (only its ``S + 1`` / ``S + 2`` vectors change)."""
        return self.workspace + 2 * 4 * 3 * (max_loras - self.max_loras)

    def total_for(self, max_loras: int) -> int:
        """The LoRA bytes with ``max_loras`` slots instead (same rank and modules)."""
        return self.slot_bytes * max_loras + self.workspace_for(max_loras)


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def check_lora(arch: ModelArch, ranks: tuple[int, ...], release: str, max_loras: int,
               max_lora_rank: int, max_cpu_loras: int | None, fully_sharded: bool = False,
               tp: int = 1) -> None:
    """The checks of ``vllm/config/lora.py`` (``MaxLoRARanks``, ``max_cpu_loras >= max_loras``) and
    of ``LogitsProcessorWithLoRA`` (vocabulary ≤ 258,048 where the LM head is wrapped), and the
    models kvplan sizes: dense attention decoders (every layer ``Attention``, no MoE) of an
    architecture in ``VOCAB_LORA_MODULES``."""
    if not ranks:
        raise KVPlanError("lora.release", release=release)
    if max_lora_rank not in ranks:
        raise KVPlanError("lora.rank", value=max_lora_rank, release=release,
                          choices=", ".join(str(r) for r in ranks))
    if fully_sharded and (max_lora_rank % tp or arch.hidden_size % tp):
        raise KVPlanError("lora.sharded", rank=max_lora_rank, hidden=arch.hidden_size, tp=tp)
    if max_cpu_loras is not None and max_cpu_loras < max_loras:
        raise KVPlanError("lora.cpu", cpu=max_cpu_loras, gpu=max_loras)
    odd = [layer for layer in arch.distinct_layers() if not isinstance(layer, Attention)]
    if arch.moe is not None or odd:
        what = "MoE experts" if arch.moe is not None else f"{type(odd[0]).__name__} layers"
        raise KVPlanError("lora.model", model=arch.name, what=what)
    if (arch.architecture or "") not in VOCAB_LORA_MODULES:
        raise KVPlanError("lora.architecture", value=arch.architecture or "(none in config.json)",
                          choices=", ".join(VOCAB_LORA_MODULES))
    if "lm_head" in VOCAB_LORA_MODULES[arch.architecture or ""] and arch.vocab_size > LORA_MAX_VOCAB:
        raise KVPlanError("lora.vocab", vocab=f"{arch.vocab_size:,}", limit=f"{LORA_MAX_VOCAB:,}")


def lora_slots(arch: ModelArch, *, tp: int, pp: int, max_loras: int, max_lora_rank: int,
               dtype: str, mnbt: int, max_num_seqs: int, max_cpu_loras: int | None,
               target_modules: tuple[str, ...] | None = None, fully_sharded: bool = False) -> LoraSlots:
    """The LoRA buffers of the heaviest pipeline stage on one GPU (``get_pp_indices`` layers; the
    embedding on the first stage, the LM head on the last), as vLLM v0.33 allocates them (see the
    module docstring for each shape). ``fully_sharded`` (``--fully-sharded-loras``, the
    ``*WithShardedLoRA`` classes): column-parallel A at ``rank / t`` rows and row-parallel B at
    ``output / t`` (``divide`` in ``base_linear.py`` and ``column_parallel_linear.py``
    ``create_lora_weights``); the vocabulary modules as without it."""
    s, r, t = max_loras, max_lora_rank, tp
    d = get_dtype(dtype).bits // 8
    h, v, inter = arch.hidden_size, arch.vocab_size, arch.intermediate_size
    mlp, slices = ("gate_up_proj", 2) if arch.gated_mlp else ("fc1", 1)
    vocab = VOCAB_LORA_MODULES.get(arch.architecture or "", ("embed_tokens", "lm_head"))
    linear = ("qkv_proj", "o_proj", "gate_up_proj", "fc1", "down_proj")
    targets = set(target_modules or (*linear, *vocab))

    # --fully-sharded-loras: column-parallel A at rank / t, row-parallel B at output / t.
    ra, ho = (r // t, h // t) if fully_sharded else (r, h)

    def layer_modules(layer: Attention) -> dict[str, int]:
        q = arch.n_heads // t * layer.head_dim_k
        kv = max(1, layer.n_kv_heads // t) * layer.head_dim_k
        return {"qkv_proj": s * (3 * ra * h + r * (q + 2 * kv)) * d,
                "o_proj": s * r * (arch.n_heads * layer.head_dim_v // t + ho) * d,
                mlp: s * slices * (ra * h + r * (inter // t)) * d if inter else 0,
                "down_proj": s * r * (inter // t + ho) * d if inter else 0}

    best: dict[str, int] = {}
    counts = layer_partition(arch, pp)
    start = 0
    for stage, n in enumerate(counts):
        here: dict[str, int] = {}
        for layer, count in arch.layer_counts(start, start + n).items():
            assert isinstance(layer, Attention)
            for module, size in layer_modules(layer).items():
                here[module] = here.get(module, 0) + size * count
        start += n
        first, last = stage == 0, stage == len(counts) - 1
        if first or (last and arch.tie_word_embeddings):
            here["embed_tokens"] = s * r * (v + h) * d
        if last:
            mapping = _pad(v, VOCAB_PADDING) * 8 if t >= 2 else 0
            here["lm_head"] = s * r * (h + v) * d + mapping
        here = {m: b for m, b in here.items() if m in targets}
        if sum(here.values()) >= sum(best.values()):
            best = here
    layer_bytes = {m: b for m, b in best.items() if b}
    workspace = (4 * mnbt + 3 * max_num_seqs) * 8 + 2 * (2 * mnbt * 4 + 2 * (s + 1) * 4 + (s + 2) * 4)
    one = sum(layer_bytes.values()) // s
    cpu = (max_cpu_loras or s) * one
    formula = (f"{s} slot{'s' if s != 1 else ''} × {one:,} B per slot at rank {r} in {dtype} ("
               + ", ".join(f"{m} {b // s:,}" for m, b in layer_bytes.items())
               + f") + punica workspace {workspace:,} B (max_num_batched_tokens {mnbt:,}, "
               f"max_num_seqs {max_num_seqs:,}); host: max_cpu_loras {max_cpu_loras or s} × "
               f"≤ {one:,} B = ≤ {cpu:,} B (CPU memory, not on the GPU)")
    return LoraSlots(s, r, dtype, layer_bytes, workspace, cpu, formula)


#: Adapter-visible children of the packed modules (the Llama-style ``packed_modules_mapping``):
#: ``lora/utils.py`` ``is_in_target_modules`` matches a packed parent by any of its children.
PACKED_CHILDREN = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                   "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
#: The modules ``lora_slots`` sizes (``module_suffix`` names).
VLLM_LORA_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "fc1", "down_proj", "embed_tokens",
                     "lm_head")


def vllm_lora_targets(text: str | None) -> tuple[str, ...] | None:
    """``--lora-target-modules`` as ``_match_target_modules`` sees it for kvplan's modules: each name
    a module suffix, a packed child naming its parent; None: every supported module. A name that
    matches none of them is refused (vLLM would give it no slot and load no adapter weight)."""
    if text is None:
        return None
    names = [n for n in re.split(r"[,\s]+", text) if n]
    out = []
    for name in names:
        module = PACKED_CHILDREN.get(name, name)
        if module not in VLLM_LORA_MODULES:
            raise KVPlanError("lora.vllm_module", value=name[:40],
                              choices=", ".join((*VLLM_LORA_MODULES, *PACKED_CHILDREN)))
        out.append(module)
    return tuple(dict.fromkeys(out))


def lora_reserve_term(arch: ModelArch, settings: EngineSettings, *, ranks: tuple[int, ...],
                      release: str, dtype: str, mnbt: int, max_num_seqs: int) -> ReserveTerm:
    """The ``lora_slots`` term of the KV budget: ``lora_slots`` with the settings' values, after
    ``check_lora``; counted (vLLM holds it before ``determine_available_memory`` measures)."""
    check_lora(arch, ranks, release, settings.max_loras, settings.max_lora_rank, settings.max_cpu_loras,
               settings.fully_sharded_loras, settings.tp)
    slots = lora_slots(arch, tp=settings.tp, pp=settings.pp, max_loras=settings.max_loras,
                       max_lora_rank=settings.max_lora_rank, dtype=dtype, mnbt=mnbt,
                       max_num_seqs=max_num_seqs, max_cpu_loras=settings.max_cpu_loras,
                       target_modules=vllm_lora_targets(settings.lora_target_modules),
                       fully_sharded=settings.fully_sharded_loras)
    return ReserveTerm(LORA_TERM, slots.total, f"{slots.formula} = {slots.total:,} B",
                       f"{release} vllm/lora/model_manager.py _create_lora_modules → "
                       "create_lora_weights; punica_wrapper/punica_gpu.py PunicaWrapperGPU")


def lora_graphs_term(graphs: ReserveTerm, max_loras: int, release: str) -> ReserveTerm | None:
    """``vllm/v1/cudagraph_dispatcher.py`` ``_get_lora_cases``: with LoRA and
    ``cudagraph_specialize_lora`` (on by default, ``config/compilation.py``) every capture size is
    captured for ``[0, max_loras + 1]`` active adapters — twice the graphs of a run without LoRA, and
    ``gpu_model_runner.py`` ``profile_cudagraph_memory`` counts them all (``per_graph × (len(descs) −
    1)``) — so one more copy of the release's CUDA-graph term (its per-graph cost is fitted on runs
    without LoRA: basis ``fit``). None when no graphs are captured."""
    if graphs.bytes <= 0:
        return None
    return ReserveTerm(LORA_GRAPHS_TERM, graphs.bytes,
                       f"cuda_graphs {graphs.bytes:,} B × 1 more LoRA capture case (cases [0, "
                       f"max_loras + 1 = {max_loras + 1}])",
                       f"{release} vllm/v1/cudagraph_dispatcher.py _get_lora_cases "
                       "(cudagraph_specialize_lora)", basis="fit", counted=graphs.counted)
