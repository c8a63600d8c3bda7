"""SGLang speculative decoding: what ``--speculative-algorithm`` adds to one GPU (0.5.23).

Read from SGLang 0.5.23:

* ``speculative/spec_info.py`` ``SpeculativeAlgorithm.from_string``: the name upper-cased, ``NEXTN``
  an alias of ``EAGLE`` (``spec_registry.py`` ``_RESERVED_ALIASES``); any other unknown name raises
  "Unknown speculative algorithm name".
* ``arg_groups/speculative_hook.py`` ``_handle_eagle_family`` (EAGLE, EAGLE3, STANDALONE) and
  ``_handle_ngram``: ``max_running_requests`` = 48 unless set; the listed DeepSeek/GLM/… targets
  draft from their own checkpoint (``speculative_draft_model_path = model_path``);
  ``_auto_choose_speculative_params``: (steps, topk, draft tokens) = (3, 1, 4) for STANDALONE, (5, 4,
  8) for Llama and Grok, else (3, 1, 4); with topk 1 the draft tokens become steps + 1; STANDALONE
  refuses DP attention.
* ``model_executor/model_runner_components/spec_aux_hidden_state.py``
  ``_resolve_eagle_aux_hidden_state``: the draft's layer count is its config's
  ``num_nextn_predict_layers``, else (a draft path) ``max(num_hidden_layers, num_attention_layers)``.
* ``model_executor/pool_configurator.py`` ``DefaultPoolConfigurator.__init__``: for EAGLE-family and
  STANDALONE the target's cell per token grows by ``int(cell × draft_layers / num_layers)`` — "assumes
  the draft shares the target's per-layer KV size".
* ``speculative/eagle_worker_v2.py``: the draft shares the target's embeddings and (EAGLE, NEXTN) LM
  head (``set_embed_and_head``); the draft is loaded before the pool is sized, so its weights leave
  the budget (the refusal's "draft weights are now counted").

* ``model_executor/pool_configurator.py`` ``HybridSWAPoolConfigurator.__init__`` /
  ``_recompute_cell_size`` (hybrid-SWA targets: gpt-oss, Llama 4, …): the draft's
  ``eagle_draft_num_layers`` split into ``eagle_draft_swa_num_layers`` (``spec_aux_hidden_state.py``:
  the SWA layers of the draft's config when that config is itself hybrid SWA — the target's own for
  a path-less next-n draft — capped at the draft's layers) and full layers; the cell is
  ``full_per_token × (full + draft_full) + ratio × swa_per_token × (swa + draft_swa)``, each per-layer
  size the target's (no ``int()`` of a share, unlike the default configurator).

* ``mem_cache/kv_cache_configurator.py`` ``_handle_max_mamba_cache`` (Mamba / linear-attention
  hybrids): with speculation the state pool reserves the per-draft-token intermediate states —
  ``K = int((budget × r / (1 + r) − state × (1 + D)) // (state × (1 + D / ratio)))`` slots (``D`` =
  ``speculative_num_draft_tokens``, ``ratio`` the slots per request), then ``state × (min(max(1,
  max_running_requests // dp), K // ratio) + 1) × D`` bytes of intermediate state leave the KV
  memory with the ``(K + 1) × state`` main states (``--max-mamba-cache-size``: ``K`` as set, the same
  intermediate); ``DefaultPoolConfigurator``'s draft share is of the full-attention layers
  (``mambaish.full_attention_layer_ids``).

Not modelled (refused by name): the DSA pool configurator with a draft (the DSA indexer), an
all-SWA target, pipeline parallel, a target's own next-n layers on a Mamba hybrid, DFLASH / DSPARK /
UNO / FROZEN_KV_MTP.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.arch import MLA, Attention, ModelArch, Recurrent
from kvplan.engines.kinds import layer_window
from kvplan.engines.reserve import ReserveTerm
from kvplan.engines.vllm.spec_decode import draft_arch
from kvplan.errors import KVPlanError
from kvplan.weights import LoadingRules, draft_head_parts, weights_per_gpu

#: The reserve term of the draft's weights (loaded after ``pre_model_load_memory`` is measured).
SGL_SPEC_WEIGHTS_TERM = "spec_draft_weights"
#: Algorithms kvplan sizes (``SpeculativeAlgorithm`` members and the ``NEXTN`` alias).
MODELLED = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
#: ``SpeculativeAlgorithm`` members of 0.5.23 kvplan does not size.
UNMODELLED = ("DFLASH", "UNO", "DSPARK", "FROZEN_KV_MTP")
#: ``_handle_eagle_family``: targets whose draft defaults to their own checkpoint's next-n layers.
NEXTN_IN_TARGET_ARCHS = frozenset({
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration", "HYV3ForCausalLM", "HYV4ForCausalLM",
    "Qwen4ExpForConditionalGeneration"})
#: ``_auto_choose_speculative_params``: architectures that get (5, 4, 8).
WIDE_TREE_ARCHS = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
#: ``_handle_eagle_family`` / ``_handle_ngram``: ``max_running_requests`` when not set.
SPEC_MAX_RUNNING_REQUESTS = 48
#: Model types of the DeepSeek sparse-attention targets (the draft's indexer is not modelled).
DSA_MODEL_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})
#: ``_handle_ngram``: ``speculative_num_draft_tokens`` default.
NGRAM_DRAFT_TOKENS = 12
#: ``arg_groups/fields/spec.py`` ``speculative_ngram_max_bfs_breadth`` default.
NGRAM_BFS_BREADTH = 10


@dataclass(frozen=True)
class SglangSpec:
    """``--speculative-algorithm`` as SGLang 0.5.23 resolves it, and what it adds on one GPU."""

    #: The resolved algorithm (``NEXTN`` → ``EAGLE``).
    algorithm: str
    #: As given (``NEXTN`` kept for the summary).
    given: str
    draft_path: str | None
    draft_name: str
    #: ``eagle_draft_num_layers``: the draft's KV layers in the target's token cell (0 for NGRAM).
    draft_layers: int
    #: ``num_effective_layers``: the target layers the cell is built from.
    target_layers: int
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    #: The target's next-n layers are the draft (loaded as the target's part ``mtp``).
    nextn_in_target: bool
    #: Draft weights per GPU besides the target's (0 for NGRAM and target next-n layers).
    weights_bytes: int
    weights_formula: str
    notes: tuple[str, ...] = ()
    #: ``eagle_draft_swa_num_layers`` (hybrid-SWA pools only): draft layers sized as SWA layers.
    draft_swa_layers: int = 0
    #: The layers the cell is built from when they are not ``target_layers``: a Mamba hybrid's
    #: full-attention layers (``DefaultPoolConfigurator``: ``mambaish.full_attention_layer_ids``).
    cell_layers: int = 0

    def hybrid_draft_cell(self, full_layer: int, swa_layer: int, ratio: float) -> float:
        """``HybridSWAPoolConfigurator._recompute_cell_size``'s draft part: ``full_per_token ×
        draft_full + ratio × swa_per_token × draft_swa`` bytes more per token."""
        full = self.draft_layers - self.draft_swa_layers
        return full_layer * full + ratio * swa_layer * self.draft_swa_layers

    def draft_cell(self, cell: int) -> int:
        """``pool_configurator.py`` ``DefaultPoolConfigurator.__init__``:
        ``int(cell × draft_layers / num_layers)`` bytes more per token."""
        layers = self.cell_layers or self.target_layers
        if not self.draft_layers or not layers:
            return 0
        return int(cell * self.draft_layers / layers)


def _auto_params(algorithm: str, arch: ModelArch) -> tuple[int, int, int]:
    """``_auto_choose_speculative_params`` (0.5.23)."""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    if (arch.architecture or "") in WIDE_TREE_ARCHS:
        return 5, 4, 8
    return 3, 1, 4


def _check_pool(arch: ModelArch, pp: int, hybrid_swa: bool) -> None:
    """Refuse the pools whose draft sizing kvplan does not model, by name."""
    why = None
    if pp > 1:
        why = f"pipeline parallel size {pp}"
    elif hybrid_swa and all(layer_window(layer) for layer in arch.layers):
        why = "an all-SWA hybrid pool (HybridSWAPoolConfigurator without full layers)"
    elif arch.model_type in DSA_MODEL_TYPES:
        why = "the DSA indexer's draft cell"
    if why is not None:
        raise KVPlanError("sgl_spec.pool", model=arch.name, why=why)


def _draft_weights(draft: ModelArch, algorithm: str, tp: int,
                   rules: LoadingRules) -> tuple[int, str, list[str]]:
    """The draft's weights on one GPU (draft TP = target TP): a next-n checkpoint's ``mtp`` part; an
    EAGLE/EAGLE3 head without embeddings and LM head (``set_embed_and_head`` / ``set_embed``) plus its
    ``fc`` (``llama_eagle.py``: ``Linear(2h, h)`` with bias; ``llama_eagle3.py``: ``Linear(3h, h)``,
    bias per config, not counted); a STANDALONE draft whole. The draft's own checkpoint dtype."""
    notes: list[str] = []
    if draft.weights.mtp_layers:
        layout = weights_per_gpu(draft, None, tp, 1, 1, True, rules)
        parts, label = {"mtp": dict(layout.stages[-1]).get("mtp", 0)}, layout.format_label
    else:
        head = algorithm in ("EAGLE", "EAGLE3")
        width = 2 if algorithm == "EAGLE" else 3
        parts, label = draft_head_parts(draft, tp, rules, head=head, fc_width=width,
                                        fc_bias=width == 2)
        if head:
            notes.append(f"{algorithm} head {draft.name}: embeddings shared with the target "
                         "(eagle_worker_v2.py set_embed_and_head / set_embed); "
                         + ("its LM head shared too" if width == 2 else
                            "an EAGLE3 head's own draft-vocabulary LM head is not counted"))
    total = sum(parts.values())
    shown = ", ".join(f"{p} {b:,}" for p, b in parts.items() if b)
    return total, f"{draft.name} at TP {tp} in {label}: {shown} = {total:,} B", notes


def _swa_layers(config: ModelArch, hybrid_archs: frozenset[str]) -> int:
    """``len(swa_attention_layer_ids)`` when ``config`` is hybrid SWA (``is_hybrid_swa_model``:
    its architecture listed and sliding layers present), else 0."""
    if (config.architecture or "") not in hybrid_archs:
        return 0
    return sum(1 for layer in config.layers if layer_window(layer))


def resolve_sglang_speculative(arch: ModelArch, *, algorithm: str, draft_path: str | None,
                               num_steps: int | None, eagle_topk: int | None,
                               num_draft_tokens: int | None, tp: int, pp: int, dp: int,
                               hybrid_swa: bool, release: str, rules: LoadingRules,
                               hybrid_archs: frozenset[str] = frozenset(),
                               algorithms: tuple[str, ...] = MODELLED) -> SglangSpec:
    """``--speculative-*`` for ``arch`` as SGLang 0.5.23 resolves them (module docstring), with the
    draft's KV layers and weights per GPU; bad input is refused by name. ``algorithms``: the ones
    kvplan sizes for the release (``SglangRelease.spec_algorithms``; empty: none, refused)."""
    given = algorithm.strip().upper()
    if not algorithms:
        raise KVPlanError("sgl_spec.release", algorithm=algorithm[:40], release=release)
    if given in UNMODELLED:
        raise KVPlanError("sgl_spec.unmodelled", algorithm=given, choices=", ".join(algorithms))
    if given not in algorithms:
        raise KVPlanError("sgl_spec.unknown", algorithm=algorithm[:40], release=release,
                          choices=", ".join(algorithms))
    resolved = "EAGLE" if given == "NEXTN" else given
    notes: list[str] = []
    if resolved == "NGRAM":
        if dp > 1:
            raise KVPlanError("sgl_spec.dp", algorithm=given)
        tokens = num_draft_tokens or NGRAM_DRAFT_TOKENS
        topk = NGRAM_BFS_BREADTH  # _handle_ngram: topk = --speculative-ngram-max-bfs-breadth
        return SglangSpec(resolved, given, None, "ngram", 0, arch.n_layers,
                          num_steps or tokens // topk, topk, tokens, False, 0,
                          "NGRAM: no draft model on the GPU", ())
    if resolved == "STANDALONE" and dp > 1:
        raise KVPlanError("sgl_spec.dp", algorithm=given)
    _check_pool(arch, pp, hybrid_swa)
    target_arch = arch.architecture or ""
    nextn = False
    if draft_path is None:
        if resolved == "STANDALONE" or target_arch not in NEXTN_IN_TARGET_ARCHS:
            raise KVPlanError("sgl_spec.no_draft", algorithm=given, model=arch.name,
                              architecture=target_arch or arch.model_type)
        draft, nextn = arch, True
    else:
        draft = draft_arch(draft_path)
        nextn = draft is arch or draft == arch
    recurrent = any(isinstance(layer, Recurrent) for layer in arch.layers)
    if nextn and recurrent:
        raise KVPlanError("sgl_spec.pool", model=arch.name,
                          why="a Mamba hybrid's own next-n layers (pass a draft model path)")
    if nextn and not arch.weights.mtp_layers:
        raise KVPlanError("sgl_spec.no_nextn", algorithm=given, model=arch.name)
    if resolved == "STANDALONE" and draft.vocab_size != arch.vocab_size:
        raise KVPlanError("sgl_spec.vocab", draft=draft.name, vocab=f"{draft.vocab_size:,}",
                          target=arch.name, target_vocab=f"{arch.vocab_size:,}")
    # llama_eagle.py: fc = Linear(2 × hidden, hidden) over the target's hidden states and the
    # embeddings; EAGLE3 heads may declare target_hidden_size (llama_eagle3.py hidden_size_in)
    if resolved == "EAGLE" and not nextn and draft.hidden_size != arch.hidden_size:
        raise KVPlanError("sgl_spec.hidden", draft=draft.name, hidden=f"{draft.hidden_size:,}",
                          target=arch.name, target_hidden=f"{arch.hidden_size:,}")
    layers = draft.weights.mtp_layers or draft.n_layers
    if nextn:
        weights, formula = 0, (f"{arch.name}: {layers} next-n layer(s) of the target's checkpoint, "
                               "counted in the target's weights (part mtp)")
    else:
        weights, formula, more = _draft_weights(draft, resolved, tp, rules)
        notes += more
    if num_steps is None:
        if eagle_topk is not None or num_draft_tokens is not None:
            raise KVPlanError("sgl_spec.params")
        num_steps, eagle_topk, num_draft_tokens = _auto_params(resolved, arch)
    topk = eagle_topk if eagle_topk is not None else 1
    tokens = num_steps + 1 if topk == 1 else (num_draft_tokens or num_steps + 1)
    per_layer = {type(layer) for layer in draft.layers}
    if not nextn and (draft.layers[0] != arch.layers[0] or len(per_layer) > 1):
        notes.append(f"{draft.name}'s attention differs from {arch.name}'s: SGLang still sizes the "
                     "draft's KV as the target's per-layer bytes (pool_configurator.py: 'assumes the "
                     "draft shares the target's per-layer KV size')")
    swa = min(_swa_layers(draft if draft_path is not None else arch, hybrid_archs), layers) \
        if hybrid_swa else 0
    if hybrid_swa:
        notes.append(f"hybrid SWA pool: {layers - swa} draft layer(s) sized as full layers, {swa} "
                     "as SWA layers (pool_configurator.py HybridSWAPoolConfigurator)")
    return SglangSpec(resolved, given, draft_path, f"{draft.name} next-n layers" if nextn
                      else draft.name, layers, arch.n_layers, num_steps, topk, tokens, nextn,
                      weights, formula, tuple(notes), swa,
                      sum(1 for x in arch.layers if isinstance(x, Attention | MLA)) if recurrent else 0)


def sglang_spec_weights_term(spec: SglangSpec, release: str) -> ReserveTerm | None:
    """The ``spec_draft_weights`` term (None without separate draft weights)."""
    if spec.weights_bytes <= 0:
        return None
    return ReserveTerm(SGL_SPEC_WEIGHTS_TERM, spec.weights_bytes, spec.weights_formula,
                       f"{release}: speculative/eagle_worker_v2.py (draft ModelRunner loaded before "
                       "the KV pool; kv_cache_configurator.py _profile_available_bytes)",
                       basis="derived" if spec.algorithm == "EAGLE3" else "source")


def sglang_spec_summary(spec: SglangSpec, draft_cell: float) -> dict[str, object]:
    """``fit --json``'s ``speculative`` for SGLang: the resolved flags and what they add."""
    return {
        "method": spec.given, "resolved_algorithm": spec.algorithm, "model": spec.draft_path,
        "draft": spec.draft_name, "speculative_num_steps": spec.num_steps,
        "speculative_eagle_topk": spec.eagle_topk,
        "speculative_num_draft_tokens": spec.num_draft_tokens,
        "draft_kv_layers": spec.draft_layers, "target_kv_layers": spec.target_layers,
        "draft_kv_bytes_per_token": draft_cell,
        "draft_swa_layers": spec.draft_swa_layers,
        "draft_weights_bytes": spec.weights_bytes, "draft_weights_formula": spec.weights_formula,
        "notes": list(spec.notes),
    }
