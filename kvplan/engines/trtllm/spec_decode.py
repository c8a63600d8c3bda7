"""TensorRT-LLM speculative decoding: what ``speculative_config`` adds to one GPU (PyTorch backend).

Read from the main-branch copies kvplan's ``main`` record cites (``tools/trtllm_truth/SPEC.md``):

* ``tensorrt_llm/llmapi/llm_args.py`` (code-index file 7019226376): ``decoding_type`` picks the
  config — ``Eagle`` / ``Eagle3`` (``EagleDecodingConfig``: ``max_draft_len`` > 0, a
  ``speculative_model``, ``validate_eagle_config``: ``num_eagle_layers = max_draft_len``,
  ``max_total_draft_tokens = max_draft_len``; ``eagle3_one_model`` default True →
  ``EAGLE3_ONE_MODEL``, else ``EAGLE3``), ``MTP`` (``MTPDecodingConfig``: ``num_nextn_predict_layers``
  default 1, ``set_max_total_draft_tokens``: ``max_draft_len = max_total_draft_tokens =
  num_nextn_predict_layers``; ``spec_dec_mode``: a checkpoint with one next-n layer, without
  ``use_mtp_vanilla`` and with ``mtp_eagle_one_model`` (default) is ``MTP_EAGLE_ONE_MODEL``, else
  ``MTP``), ``Draft_Target`` (``DraftTargetDecodingConfig``: ``max_draft_len`` > 0 and a
  ``speculative_model``), ``NGram`` (``max_draft_len`` > 0).
* ``tensorrt_llm/_torch/pyexecutor/resource_manager.py`` (001541ba): ``get_pp_layers`` adds
  ``get_num_spec_layers(spec_config)`` layers to the target's ``KVCacheManager`` on the last PP
  rank, each with the target's KV heads and head size (``num_kv_heads`` is the target's int);
  ``KVCacheManager.__init__``: ``num_extra_kv_tokens = get_num_extra_kv_tokens(spec_config)``;
  ``prepare_resources``: a context request takes ``prompt_len`` tokens plus ``num_extra_kv_tokens``
  plus its draft tokens (``add_token`` loops), a generation step one token plus its draft tokens;
  the static ``get_cache_size_per_token`` (``KvCacheCreator``'s estimate) counts the target's layers
  only, ``calculate_max_num_blocks`` the manager's, spec layers included.
* ``tensorrt_llm/_torch/speculative/utils.py`` (the ``num_eagle_layers`` vintage): ``get_num_spec_layers``:
  ``num_nextn_predict_layers`` for MTP one-model modes, ``num_eagle_layers`` (so ``max_draft_len``)
  for ``EAGLE3_ONE_MODEL``, 0 otherwise; ``get_num_extra_kv_tokens``: ``max_draft_len − 1`` for
  ``EAGLE3_ONE_MODEL``, 0 otherwise.
* ``tensorrt_llm/_torch/pyexecutor/_util.py`` ``KvCacheCreator._get_kv_size_per_token``: with a
  draft model engine (two-model: ``Draft_Target``, ``EAGLE3``) the draft's
  ``get_cache_size_per_token`` is added to the target's, so ``max_tokens`` is the budget over both,
  and each manager's ``calculate_max_num_blocks`` is capped by that ``max_tokens`` — V1 without
  VSWA splits the budget "implicitly" (PR #14373's words).

Main's ``_util.py`` (00043967) gives one-model drafts their own manager
(``_create_one_model_draft_kv_cache_manager``, ``get_num_spec_layers`` layers) and adds its cost in
``_get_kv_size_per_token``; with V1 and one window both pools get the shared ``max_tokens`` =
budget // (target + draft), which is the pool kvplan computes (the older shared-manager path bounds
it by the free memory at creation instead: ``tools/trtllm_truth/SPEC.md``).

The double-budget bugs: PR #12188 (2026-03-13) split ``max_gpu_total_bytes`` between target and
draft for KV cache manager V2 (both claimed the whole budget; V2 is not modelled) and passed the
runtime layer count; PR #12855 (2026-04-08, "kv cache allocation is double the budget for vswa +
eagle") did the same for V1 with several windows — in main's ``_util.py`` 00043967
(``_needs_gpu_kv_cache_budget_split`` → ``_split_kv_cache_budget_for_draft``); before it, each VSWA
manager took the whole budget. kvplan sizes neither split VSWA pool with a draft and refuses
(``trt_spec.vswa``). Newer ``speculative/utils.py`` (011d0933) counts the EAGLE3 head's own
``num_hidden_layers`` and one layer for MTP-Eagle instead of ``max_draft_len`` /
``num_nextn_predict_layers`` (a later record).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.arch import MLA, Attention, Kind, LayerSpec, ModelArch, NoCache, Recurrent
from kvplan.engines.reserve import ReserveTerm
from kvplan.engines.vllm.spec_decode import draft_arch, speculative_json
from kvplan.errors import KVPlanError
from kvplan.weights import LoadingRules, draft_head_parts

#: The reserve term of the draft's weights (loaded with the target, before the profiling run).
TRT_SPEC_WEIGHTS_TERM = "spec_draft_weights"
#: ``decoding_type`` values kvplan sizes (``llm_args.py`` ``Literal`` tags).
MODELLED = ("Eagle", "Eagle3", "MTP", "Draft_Target", "NGram")
#: ``decoding_type`` values of the read ``llm_args.py`` kvplan does not size.
UNMODELLED = ("Medusa", "PARD", "AUTO", "SaveState", "User_Provided")
#: The ``speculative_config`` keys kvplan reads (``DecodingBaseConfig`` and its subclasses).
KEYS = ("decoding_type", "max_draft_len", "speculative_model", "speculative_model_dir",
        "eagle3_one_model",
        "num_nextn_predict_layers", "use_mtp_vanilla", "mtp_eagle_one_model",
        "max_matching_ngram_size")
_INT_KEYS = ("max_draft_len", "num_nextn_predict_layers", "max_matching_ngram_size")
_BOOL_KEYS = ("eagle3_one_model", "use_mtp_vanilla", "mtp_eagle_one_model")


@dataclass(frozen=True)
class TrtSpec:
    """``speculative_config`` as TensorRT-LLM resolves it, and what it adds on one GPU."""

    decoding_type: str
    #: ``SpeculativeDecodingMode`` name (``EAGLE3_ONE_MODEL``, ``EAGLE3``, ``MTP_EAGLE_ONE_MODEL``,
    #: ``MTP``, ``DRAFT_TARGET``, ``NGRAM``).
    mode: str
    max_draft_len: int
    max_total_draft_tokens: int
    #: ``get_num_extra_kv_tokens``.
    num_extra_kv_tokens: int
    #: ``get_num_spec_layers``: layers added to the target's manager, the target's geometry.
    spec_layers: int
    #: The target layer whose KV geometry the spec layers take (None without spec layers).
    spec_layer: LayerSpec | None
    #: The two-model draft's KV layers (its own manager; empty for one-model and NGram).
    draft_layers: tuple[LayerSpec, ...]
    draft_name: str
    model: str | None
    weights_bytes: int
    weights_formula: str
    notes: tuple[str, ...] = ()

    @property
    def extra_tokens(self) -> int:
        """Tokens a request holds beyond its own: ``num_extra_kv_tokens`` + its draft tokens
        (``prepare_resources``)."""
        return self.num_extra_kv_tokens + self.max_total_draft_tokens

    @property
    def has_draft_kv(self) -> bool:
        """Whether a drafter's KV shares the budget."""
        return self.spec_layers > 0 or bool(self.draft_layers)


def read_trtllm_speculative_config(text: str) -> dict[str, object]:
    """The ``speculative_config`` object with the keys kvplan reads; others and wrong types named."""
    data = speculative_json(text)
    unknown = sorted(k for k in data if k not in KEYS)
    if unknown:
        raise KVPlanError("trt_spec.key", key=str(unknown[0])[:40], keys=", ".join(KEYS))
    if "speculative_model_dir" in data:  # DecodingBaseConfig: AliasChoices("speculative_model", …)
        data.setdefault("speculative_model", data.pop("speculative_model_dir"))
        data.pop("speculative_model_dir", None)
    for key in ("decoding_type", "speculative_model"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise KVPlanError("trt_spec.type", key=key, expected="a string", value=str(data[key])[:40])
    for key in _INT_KEYS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= 1024):
            raise KVPlanError("trt_spec.type", key=key, expected="a whole number from 1 to 1024",
                              value=str(value)[:40])
    for key in _BOOL_KEYS:
        if data.get(key) is not None and not isinstance(data[key], bool):
            raise KVPlanError("trt_spec.type", key=key, expected="true or false",
                              value=str(data[key])[:40])
    return data


def _kv_layers(arch: ModelArch) -> tuple[LayerSpec, ...]:
    return tuple(layer for layer in arch.layers if isinstance(layer, Attention | MLA))


def _target_geometry(arch: ModelArch) -> LayerSpec:
    """The layer whose heads and head size the spec layers get: ``KVCacheManager.__init__`` gives
    every layer, spec layers included, the target's ``num_kv_heads`` and ``head_dim`` — the last
    full-attention or MLA layer's."""
    full = [layer for layer in arch.layers
            if isinstance(layer, MLA) or (isinstance(layer, Attention) and layer.kind is Kind.FULL)]
    return full[-1] if full else _kv_layers(arch)[-1]


def _draft_weights(draft: ModelArch, head: bool, tp: int,
                   rules: LoadingRules) -> tuple[int, str, list[str]]:
    """The draft's weights on one GPU (the target's mapping, one stage): a draft model whole; an
    EAGLE3 head's decoder layers and ``fc`` (3 × hidden → hidden in the head's dtype), its
    embeddings and LM head taken as shared with the target (kvplan's statement: TensorRT-LLM's
    ``modeling_speculative.py`` was not read for them)."""
    notes: list[str] = []
    parts, label = draft_head_parts(draft, tp, rules, head=head, fc_width=3)
    if head:
        notes.append(f"EAGLE3 head {draft.name}: embeddings and LM head taken as shared with the "
                     "target (not read in TensorRT-LLM; an own draft-vocabulary LM head is not "
                     "counted)")
    total = sum(parts.values())
    shown = ", ".join(f"{p} {b:,}" for p, b in parts.items() if b)
    return total, f"{draft.name} at TP {tp} in {label}: {shown} = {total:,} B", notes


def _need_draft_len(data: dict[str, object], decoding_type: str) -> int:
    k = data.get("max_draft_len")
    if not isinstance(k, int):
        raise KVPlanError("trt_spec.max_draft_len", decoding_type=decoding_type)
    return k


def resolve_trtllm_speculative(arch: ModelArch, text: str, *, tp: int, pp: int, windows: int,
                               release: str, modelled: bool, rules: LoadingRules) -> TrtSpec:
    """``speculative_config`` ``text`` for ``arch`` as the release resolves it (module docstring),
    with the spec layers, the two-model draft's KV layers and the draft's weights per GPU."""
    if not modelled:
        raise KVPlanError("trt_spec.release", release=release)
    data = read_trtllm_speculative_config(text)
    given = data.get("decoding_type")
    if not isinstance(given, str):
        raise KVPlanError("trt_spec.decoding_type", value="(none)", choices=", ".join(MODELLED))
    if given in UNMODELLED:
        raise KVPlanError("trt_spec.unmodelled", decoding_type=given, choices=", ".join(MODELLED))
    if given not in MODELLED:
        raise KVPlanError("trt_spec.decoding_type", value=given[:40], choices=", ".join(MODELLED))
    if pp > 1:
        raise KVPlanError("trt_spec.pp", pp=pp)
    if any(isinstance(layer, Recurrent) for layer in arch.layers):
        raise KVPlanError("trt_spec.hybrid", model=arch.name)
    model = data.get("speculative_model")
    assert model is None or isinstance(model, str)
    notes: list[str] = []
    spec_layers, extra = 0, 0
    draft_layers: tuple[LayerSpec, ...] = ()
    weights, formula, name = 0, "no draft weights on the GPU", given
    if given in ("Eagle", "Eagle3"):
        k = _need_draft_len(data, given)
        if model is None:
            raise KVPlanError("trt_spec.no_model", decoding_type=given)
        draft = draft_arch(model)
        one_model = data.get("eagle3_one_model", True) is not False
        mode = "EAGLE3_ONE_MODEL" if one_model else "EAGLE3"
        name = draft.name
        weights, formula, more = _draft_weights(draft, True, tp, rules)
        notes += more
        total = k
        if one_model:
            spec_layers, extra = k, k - 1  # num_eagle_layers = max_draft_len; max_draft_len − 1
            if draft.n_layers != k:
                notes.append(f"EAGLE3 one-model: the target's KV manager holds max_draft_len = {k} "
                             f"spec layers (num_eagle_layers), not the head's {draft.n_layers} "
                             "(speculative/utils.py get_num_spec_layers; the newer utils.py "
                             "011d0933 counts the head's num_hidden_layers)")
        else:
            draft_layers = _kv_layers(draft)
    elif given == "MTP":
        n = data.get("num_nextn_predict_layers", 1)
        assert isinstance(n, int)
        if not arch.weights.mtp_layers:
            raise KVPlanError("trt_spec.no_mtp", model=arch.name)
        vanilla = data.get("use_mtp_vanilla") is True
        if data.get("mtp_eagle_one_model") is False and arch.weights.mtp_layers == 1 and not vanilla:
            raise KVPlanError("trt_spec.mtp_two_model")
        mode = "MTP_EAGLE_ONE_MODEL" if arch.weights.mtp_layers == 1 and not vanilla else "MTP"
        k = total = n  # set_max_total_draft_tokens
        spec_layers = n
        name = f"{arch.name} next-n layers"
        formula = (f"MTP: {arch.weights.mtp_layers} next-n layer(s) of the target's checkpoint, "
                   "counted in the target's weights (part mtp)")
    elif given == "Draft_Target":
        k = total = _need_draft_len(data, given)
        if model is None:
            raise KVPlanError("trt_spec.no_model", decoding_type=given)
        draft = draft_arch(model)
        if draft.vocab_size != arch.vocab_size:  # the target verifies the draft's token ids
            raise KVPlanError("trt_spec.vocab", draft=draft.name, vocab=f"{draft.vocab_size:,}",
                              target=arch.name, target_vocab=f"{arch.vocab_size:,}")
        mode, name = "DRAFT_TARGET", draft.name
        draft_layers = _kv_layers(draft)
        weights, formula, more = _draft_weights(draft, False, tp, rules)
        notes += more
    else:  # NGram
        k = total = _need_draft_len(data, given)
        mode = "NGRAM"
    if (spec_layers or draft_layers) and windows > 1:
        raise KVPlanError("trt_spec.vswa", windows=windows)
    if draft_layers and any(isinstance(x, Recurrent | NoCache) for x in draft_layers):
        raise KVPlanError("trt_spec.hybrid", model=name)
    return TrtSpec(given, mode, k, total, extra, spec_layers,
                   _target_geometry(arch) if spec_layers else None, draft_layers, name, model,
                   weights, formula, tuple(notes))


def trtllm_spec_weights_term(spec: TrtSpec, release: str) -> ReserveTerm | None:
    """The ``spec_draft_weights`` term: the draft (a submodule for one-model, its own engine for
    two-model) is loaded before ``KvCacheCreator``'s profiling run, so it is part of the peak that
    ``_cal_max_memory`` subtracts before the fraction. None without separate draft weights."""
    if spec.weights_bytes <= 0:
        return None
    return ReserveTerm(TRT_SPEC_WEIGHTS_TERM, spec.weights_bytes, spec.weights_formula,
                       f"{release}: _torch/pyexecutor/py_executor_creator.py (draft model engine / "
                       "draft submodule loaded before the KV estimation), _util.py _cal_max_memory",
                       basis="derived" if spec.mode.startswith("EAGLE3") else "source")


def trtllm_spec_summary(spec: TrtSpec, spec_bytes: int, draft_creator: int,
                        draft_manager: int) -> dict[str, object]:
    """``fit --json``'s ``speculative`` for TensorRT-LLM: the resolved config and what it adds."""
    return {
        "decoding_type": spec.decoding_type, "spec_dec_mode": spec.mode, "model": spec.model,
        "draft": spec.draft_name, "max_draft_len": spec.max_draft_len,
        "max_total_draft_tokens": spec.max_total_draft_tokens,
        "num_extra_kv_tokens": spec.num_extra_kv_tokens,
        "spec_layers_in_target_manager": spec.spec_layers,
        "spec_layers_bytes_per_token": spec_bytes,
        "draft_manager_kv_layers": len(spec.draft_layers),
        "draft_kv_bytes_per_token": {"creator": draft_creator, "manager": draft_manager},
        "extra_tokens_per_request": spec.extra_tokens,
        "draft_weights_bytes": spec.weights_bytes, "draft_weights_formula": spec.weights_formula,
        "notes": list(spec.notes),
    }
