"""vLLM speculative decoding: what ``--speculative-config`` adds to one GPU's memory.

Every method below is read from vLLM 0.33.0; ``ngram`` and ``suffix`` (no drafter on the GPU, no
lookahead slots: ``v1/core/sched/scheduler.py`` sets ``num_lookahead_tokens`` only for EAGLE-family
and draft-model methods, v0.18.0–v0.27.0; ``VllmConfig.num_lookahead_tokens`` from v0.28.0) also from
every release v0.18.0–v0.32.0, whose capture sizes with draft tokens differ (``SpecCapture``; the
records' ``spec_methods`` and ``spec_capture``). Read from vLLM 0.33.0:

* ``vllm/config/speculative.py`` ``SpeculativeConfig.__post_init__``: no ``method`` → ``ngram``
  when ``model`` is ``ngram``, else ``draft_model``; a deprecated ``*_mtp`` method is ``mtp``; a
  ``draft_model`` whose name holds ``eagle-`` / ``eagle3`` is EAGLE / EAGLE3, one whose config's
  ``model_type`` is an MTP type is ``mtp``; ``mtp`` without ``model`` drafts with the target's own
  next-n layers (``hf_config_override``: ``n_predict = num_nextn_predict_layers``; a larger
  ``num_speculative_tokens`` must be a multiple of it — and it must be given: the target becomes
  the draft only when it is, else ``_verify_args`` refuses the missing count); ``suffix`` defaults to
  ``suffix_decoding_max_tree_depth`` = 24 tokens; ``_verify_and_get_draft_tp``: the draft's TP is
  the target's or 1; ``verify_equal_vocab_size_if_draft_model``: a draft model's vocabulary must
  equal the target's; ``_verify_args``: ``tensor_parallel_size`` is refused, ``num_speculative_tokens``
  must be > 0.
* ``vllm/v1/worker/gpu_model_runner.py`` ``get_kv_cache_spec``: every attention layer of the
  static forward context — the drafter's too (``is_draft``, ``compare=False`` in
  ``kv_cache_interface.py``: it does not split groups) — gets a spec, so the drafter's layers join
  the target's KV-cache groups (``kv_cache_planning.py`` ``get_kv_cache_groups``; its comment: "a
  typical example is gpt-oss-20b + eagle") and every block id costs their pages too.
* ``vllm/config/vllm.py`` ``num_lookahead_tokens``: EAGLE-family and draft-model drafters write KV
  ``num_speculative_tokens`` past the scheduled tokens; the scheduler allocates them
  (``kv_cache_manager.py`` ``allocate_slots``: ``min(tokens + lookahead, max_model_len)`` — capped
  at ``max_model_len``, so a request at the full length holds no extra block); ``ngram`` and
  ``suffix`` reserve none. ``SpeculativeConfig.max_num_new_slots_for_drafting``: 1 for a draft
  model, 0 otherwise (parallel drafting is not modelled). The hybrid KV-cache manager is turned off
  for chunked-local models with an EAGLE-family method (``VllmConfig.__post_init__``). Mamba
  layers keep ``num_speculative_tokens`` more state pages per request
  (``layers/mamba/abstract.py`` ``MambaSpec(num_speculative_blocks=…)``, ``Vllm.view_shape``).
* ``vllm/config/speculative.py`` ``ModelConfig(dtype=target dtype)``: the draft runs in the
  target's dtype; ``v1/spec_decode/draft_model.py`` ``DraftModelProposer``: a draft model shares
  neither embeddings nor LM head with the target; ``create_draft_parallel_config``: the draft has
  pipeline size 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from kvplan.arch import MLA, Attention, Kind, LayerSpec, ModelArch
from kvplan.config_import import load_config_text, parse_config
from kvplan.dtypes import get_dtype
from kvplan.engines.reserve import ReserveTerm
from kvplan.errors import KVPlanError
from kvplan.presets import load_model
from kvplan.weights import LoadingRules, weights_per_gpu

#: The reserve term of the draft's weights (the ledger's ``reserve: spec_draft_weights``).
SPEC_WEIGHTS_TERM = "spec_draft_weights"
#: ``MTPModelTypes``: method names vLLM 0.33 accepts and replaces with ``mtp`` (a warning).
MTP_METHODS = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
    "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
    "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
    "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp",
    "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp"})
#: ``SpeculativeMethod`` values of vLLM 0.33 kvplan does not size (named when asked for).
UNMODELLED_METHODS = ("ngram_gpu", "dflash", "dspark", "custom_class", "extract_hidden_states")
#: Target ``model_type`` → the MTP draft ``hf_config_override`` makes of it, for the targets whose
#: next-n layer count kvplan reads (``num_nextn_predict_layers``, ``WeightSpec.mtp_layers``).
#: (Qwen3-Next is not listed: its config has no ``num_nextn_predict_layers`` and
#: ``qwen3_next_mtp.py`` builds one layer by default, which kvplan's weights do not model yet.)
MTP_TARGETS = {"deepseek_v3": "deepseek_mtp", "deepseek_v32": "deepseek_mtp",
               "glm_moe_dsa": "deepseek_mtp"}
#: ``SpeculativeConfig.suffix_decoding_max_tree_depth`` default (suffix's default token count).
SUFFIX_MAX_TREE_DEPTH = 24
#: The keys kvplan reads from the JSON (``SpeculativeConfig`` fields).
KEYS = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
        "prompt_lookup_min", "prompt_lookup_max")
#: Methods whose drafter writes KV ahead (``VllmConfig.num_lookahead_tokens``, ``use_eagle``).
EAGLE_FAMILY = frozenset({"eagle", "eagle3", "mtp"})


@dataclass(frozen=True)
class SpecDecode:
    """``--speculative-config`` as vLLM resolves it, and what it adds on one GPU: the drafter's KV
    layers (as the target-TP pool sees them), its weights and the lookahead slots."""

    method: str
    model: str | None
    num_speculative_tokens: int
    draft_tp: int
    #: ``VllmConfig.num_lookahead_tokens``: KV slots past the scheduled tokens per running request.
    lookahead_tokens: int
    #: ``SpeculativeConfig.max_num_new_slots_for_drafting``.
    new_slots: int
    #: The drafter's attention layers, each as a layer the target-TP view sizes like the drafter
    #: (with draft TP 1 its KV heads are scaled by the target's TP: the same heads per rank).
    draft_layers: tuple[LayerSpec, ...]
    #: Draft weights per GPU beside the target's (0 for MTP: in the target's weights, part ``mtp``).
    weights_bytes: int
    weights_formula: str
    draft_name: str
    notes: tuple[str, ...] = ()

    @property
    def uses_drafter_kv(self) -> bool:
        """``SpeculativeConfig.uses_draft_kv_cache`` (EAGLE family and draft models)."""
        return self.method in EAGLE_FAMILY or self.method == "draft_model"


def speculative_json(text: str) -> dict[str, object]:
    """``--speculative-config`` / ``speculative_config`` text as a JSON object, or ``spec.json``
    naming why not (TensorRT-LLM's ``spec_decode`` reads it too)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise KVPlanError("spec.json", detail=str(exc)[:80]) from None
    if not isinstance(data, dict):
        raise KVPlanError("spec.json", detail=f"expected a JSON object, got {type(data).__name__}")
    return data


def read_speculative_config(text: str) -> dict[str, object]:
    """The JSON object of ``--speculative-config`` with only the keys kvplan reads; the others and
    wrong types are named (``tensor_parallel_size`` as vLLM's ``_verify_args`` refuses it)."""
    data = speculative_json(text)
    if "tensor_parallel_size" in data:
        raise KVPlanError("spec.tp_key")
    unknown = sorted(k for k in data if k not in KEYS)
    if unknown:
        raise KVPlanError("spec.key", key=str(unknown[0])[:40], keys=", ".join(KEYS))
    for key in ("method", "model"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise KVPlanError("spec.type", key=key, expected="a string", value=str(data[key])[:40])
    for key in ("num_speculative_tokens", "draft_tensor_parallel_size", "prompt_lookup_min",
                "prompt_lookup_max"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= 1024):
            raise KVPlanError("spec.type", key=key, expected="a whole number from 1 to 1024",
                              value=str(value)[:40])
    return data


@lru_cache(maxsize=32)
def draft_arch(model: str) -> ModelArch:
    """The draft or EAGLE head ``model`` names, as vLLM's ``ModelConfig(model=...)`` reads it: a
    kvplan preset (Hub id, link id or alias), else a local directory holding ``config.json`` or the
    file itself; anything else is refused by name."""
    try:
        return load_model(model)
    except KVPlanError as exc:
        path = Path(model)
        name = path.name if path.is_dir() else path.stem
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise KVPlanError("spec.draft", model=model[:80], why=str(exc)) from None
    return parse_config(load_config_text(path.read_bytes()), name=name or model, source=str(path))


def _method(data: dict[str, object], methods: tuple[str, ...], release: str) -> str:
    """``__post_init__``'s method: inferred, deprecated MTP names folded into ``mtp``; refused
    when the release lacks it or kvplan does not size it."""
    method = data.get("method")
    model = data.get("model")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    assert isinstance(method, str)
    method = "mtp" if method in MTP_METHODS else "ngram" if method == "[ngram]" else method
    if method in UNMODELLED_METHODS:
        raise KVPlanError("spec.unmodelled", method=method, choices=", ".join(methods))
    if method not in methods:
        raise KVPlanError("spec.method", method=method[:40], release=release,
                          choices=", ".join(methods))
    return method


def _attention_layers(arch: ModelArch) -> tuple[LayerSpec, ...]:
    """The layers of ``arch`` that hold KV (attention and MLA), in order."""
    return tuple(layer for layer in arch.layers if isinstance(layer, Attention | MLA))


def _on_target_tp(layer: LayerSpec, draft_tp: int, tp: int) -> LayerSpec:
    """A draft layer as the target-TP view sizes it: with draft TP 1 under target TP ``t`` each
    rank holds all ``n`` KV heads (``ModelConfig.get_num_kv_heads`` with the draft's parallel
    config), which is what ``n × t`` heads give at TP ``t``; MLA's latent is replicated anyway."""
    if draft_tp == tp or not isinstance(layer, Attention):
        return layer
    return layer.model_copy(update={"n_kv_heads": layer.n_kv_heads * tp})


def _mtp_layers(arch: ModelArch) -> tuple[LayerSpec, ...]:
    """The next-n layers' KV: ``num_nextn_predict_layers`` decoder layers, each with the target's
    full attention (``deepseek_mtp.py`` ``DeepSeekMultiTokenPredictor``: ``num_mtp_layers`` layers of
    ``DeepseekV2DecoderLayer``; ``qwen3_next_mtp.py``: full-attention ``Qwen3NextDecoderLayer``s) —
    the spec of the target's last full-attention or MLA layer (Qwen3-Next is not in ``MTP_TARGETS``)."""
    full = [layer for layer in arch.layers
            if isinstance(layer, MLA) or (isinstance(layer, Attention) and layer.kind is Kind.FULL)]
    return (full[-1],) * arch.weights.mtp_layers


def resolve_speculative(arch: ModelArch, text: str, *, tp: int, pp: int, methods: tuple[str, ...],
                        release: str, model_dtype: str, rules: LoadingRules) -> SpecDecode:
    """``--speculative-config`` ``text`` for ``arch`` at ``tp`` as vLLM 0.33 resolves it (see the
    module docstring), with the drafter's KV layers and weights per GPU; bad input is named."""
    if not methods:
        raise KVPlanError("spec.release", release=release)
    data = read_speculative_config(text)
    method = _method(data, methods, release)
    model = data.get("model")
    assert model is None or isinstance(model, str)
    k = data.get("num_speculative_tokens")
    assert k is None or isinstance(k, int)
    draft_tp_set = data.get("draft_tensor_parallel_size")
    assert draft_tp_set is None or isinstance(draft_tp_set, int)
    if pp > 1 and method != "ngram" and method != "suffix":
        raise KVPlanError("spec.pp", pp=pp, method=method)
    draft: ModelArch | None = None
    if method in ("draft_model", "eagle", "eagle3") or (method == "mtp" and model is not None):
        if model is None:
            raise KVPlanError("spec.no_model", method=method)
        draft = draft_arch(model)
        if method == "draft_model":
            lower = model.lower()
            if "eagle-" in lower:
                method = "eagle"
            elif "eagle3" in lower:
                method = "eagle3"
            elif draft.model_type in MTP_METHODS:
                method = "mtp"
            if method not in methods:
                raise KVPlanError("spec.method", method=method, release=release,
                                  choices=", ".join(methods))
    if method == "mtp" and (draft is None or draft is arch or draft == arch):
        draft = arch
        if arch.model_type not in MTP_TARGETS:
            raise KVPlanError("spec.mtp_model", model=arch.name, model_type=arch.model_type,
                              choices=", ".join(MTP_TARGETS))
        n_predict = arch.weights.mtp_layers
        if n_predict < 1:
            raise KVPlanError("spec.mtp_layers", model=arch.name)
        if k is None:  # __post_init__ sets model = target only when the tokens are given
            raise KVPlanError("spec.no_tokens", method=method)
        if k > n_predict and k % n_predict:
            raise KVPlanError("spec.mtp_divisible", k=k, n=n_predict)
    elif method == "mtp":
        raise KVPlanError("spec.mtp_draft", model=str(model)[:80])
    if k is None and method == "suffix":
        k = SUFFIX_MAX_TREE_DEPTH
    if k is None:
        raise KVPlanError("spec.no_tokens", method=method)
    draft_tp = tp if draft_tp_set is None or method in ("ngram", "suffix") else draft_tp_set
    if draft_tp not in (1, tp):  # _verify_and_get_draft_tp runs for model-based drafters only
        raise KVPlanError("spec.draft_tp", value=draft_tp, tp=tp)
    low, high = data.get("prompt_lookup_min"), data.get("prompt_lookup_max")
    if method == "ngram" and isinstance(low, int) and isinstance(high, int) and low > high:
        raise KVPlanError("spec.lookup", low=low, high=high)
    if draft is not None and draft is not arch:
        if method == "draft_model" and draft.vocab_size != arch.vocab_size:
            raise KVPlanError("spec.vocab", draft=draft.name, vocab=f"{draft.vocab_size:,}",
                              target=arch.name, target_vocab=f"{arch.vocab_size:,}")
        if method in ("eagle", "eagle3") and draft.hidden_size != arch.hidden_size:
            raise KVPlanError("spec.hidden", draft=draft.name, hidden=f"{draft.hidden_size:,}",
                              target=arch.name, target_hidden=f"{arch.hidden_size:,}")
    notes: list[str] = []
    if method in ("ngram", "suffix"):
        layers: tuple[LayerSpec, ...] = ()
        weights, formula, name = 0, f"{method}: no drafter on the GPU", method
    elif method == "mtp":
        layers = _mtp_layers(arch)
        weights, name = 0, f"{arch.name} next-n layers"
        formula = (f"mtp: {arch.weights.mtp_layers} next-n layer(s) of the target's checkpoint, "
                   "counted in the target's weights (part mtp)")
    else:
        assert draft is not None
        layers = tuple(_on_target_tp(layer, draft_tp, tp) for layer in _attention_layers(draft))
        name = draft.name
        weights, formula = _draft_weights(draft, method, draft_tp, model_dtype, rules)
        if method != "draft_model":
            notes.append(f"{method} head {draft.name}: its decoder layers' weights at draft TP "
                         f"{draft_tp}; embed_tokens and lm_head taken as shared with the target "
                         "(llm_base_proposer.py _maybe_share_embeddings / _maybe_share_lm_head "
                         "share them when the head's checkpoint lacks them or holds the same)")
    lookahead = k if method in EAGLE_FAMILY or method == "draft_model" else 0
    return SpecDecode(method, model, k, draft_tp, lookahead, 1 if method == "draft_model" else 0,
                      layers, weights, formula, name, tuple(notes))


def _draft_weights(draft: ModelArch, method: str, draft_tp: int, model_dtype: str,
                   rules: LoadingRules) -> tuple[int, str]:
    """The drafter's weights on one GPU: a draft model whole (``DraftModelProposer`` shares
    nothing), in the target's dtype unless quantized (``ModelConfig(dtype=target dtype)``), split
    over the draft TP (``weights_per_gpu``, one stage); an EAGLE head without its embeddings and
    LM head (shared)."""
    own = draft.weights.quantization is not None
    if method != "draft_model":  # llama_eagle.py / llama_eagle3.py: dense LlamaDecoderLayer(s)
        draft = draft.model_copy(update={"moe": None})
    layout = weights_per_gpu(draft, None if own else model_dtype, draft_tp, 1, 1, False, rules)
    parts = dict(layout.stages[0])
    if method != "draft_model":
        parts = {p: b for p, b in parts.items() if p not in {"embeddings", "lm_head"}}
        # llama_eagle.py / llama_eagle3.py: fc = ReplicatedLinear(k × hidden → hidden, no bias) in
        # the model dtype, k = 2 (EAGLE: embeds ‖ hidden) or 3 (EAGLE3: three aux hidden states).
        width = 2 if method == "eagle" else 3
        parts["fc"] = width * draft.hidden_size * draft.hidden_size * get_dtype(model_dtype).bits // 8
    total = sum(parts.values())
    shown = ", ".join(f"{p} {b:,}" for p, b in parts.items() if b)
    return total, (f"{draft.name} at draft TP {draft_tp} in {layout.format_label}: {shown} "
                   f"= {total:,} B")


def spec_weights_term(spec: SpecDecode, release: str) -> ReserveTerm | None:
    """The ``spec_draft_weights`` term: the drafter is loaded in ``gpu_model_runner.py``
    ``load_model`` (``drafter.load_model``) inside the weights' ``DeviceMemoryProfiler``, before
    ``determine_available_memory`` — counted like the weights. None without drafter weights."""
    if spec.weights_bytes <= 0:
        return None
    head = spec.method in ("eagle", "eagle3")
    formula = spec.weights_formula + (
        " (an EAGLE head: decoder layers and fc; not counted — EAGLE3's first-layer 2 × hidden "
        "qkv input, its own draft-vocabulary lm_head and d2t map where the checkpoint has them)"
        if head else "")
    return ReserveTerm(SPEC_WEIGHTS_TERM, spec.weights_bytes, formula,
                       f"{release} vllm/v1/worker/gpu_model_runner.py load_model → drafter.load_model "
                       "(v1/spec_decode/draft_model.py, llm_base_proposer.py)",
                       basis="derived" if head else "source")


#: The CUDA-graph term of speculative decoding's extra capture sizes.
SPEC_GRAPHS_TERM = "spec_cuda_graphs"


#: How a release's ``VllmConfig._set_cudagraph_sizes`` lays out the capture sizes with draft tokens
#: (``VllmRelease.spec_capture``), read per release: ``ceiling`` (v0.18.0–v0.20.0: the ceiling
#: ``min(max_num_seqs × q × 2, 512)`` grows with the query length ``q = 1 + num_speculative_tokens``,
#: capped at ``max_num_batched_tokens``), ``ceiling_mnbt`` (v0.20.1–v0.28: also
#: ``max_num_batched_tokens`` itself when it fits under the ceiling; 1,024 on data-centre Blackwell
#: from v0.28), ``uniform_decode`` (v0.29–v0.30: also the uniform decode sizes ``n × q``),
#: ``uniform_decode_seqs`` (v0.31+: and ``max_num_seqs`` when ``q = 1``).
SpecCapture = Literal["ceiling", "ceiling_mnbt", "uniform_decode", "uniform_decode_seqs"]


def spec_capture_sizes(rule: SpecCapture, num_speculative_tokens: int, max_num_seqs: int, mnbt: int,
                       blackwell: bool = False) -> list[int]:
    """``VllmConfig._set_cudagraph_sizes`` (balanced mode, no sizes given) with query length
    ``q = 1 + num_speculative_tokens`` (``uniform_decode_query_len``) under the release's ``rule``
    (``SpecCapture``): the ceiling is ``min(max_num_seqs × q × 2, 512 | 1024 on SM 10.x)``, then at
    most ``max_num_batched_tokens``; ``[1, 2, 4] + range(8, 256, 8) + range(256, ceiling + 1, 16)``;
    from ``ceiling_mnbt`` ``max_num_batched_tokens`` when it fits; from ``uniform_decode`` the
    uniform decode sizes ``n × q`` for the request counts ``[1, 2, 4] + range(8, 256, 8) +
    range(256, max_num_seqs + 1, 16) + [max_num_seqs]`` (``q > 1``), each within the ceiling; with
    ``uniform_decode_seqs`` ``max_num_seqs`` itself when ``q = 1``."""
    default = 1024 if blackwell else 512
    q = 1 + num_speculative_tokens
    ceiling = min(max_num_seqs * q * 2, default)
    uniform: list[int] = []
    if rule in ("uniform_decode", "uniform_decode_seqs"):
        if q > 1:
            reqs = min(max_num_seqs, default)
            counts = [n for n in (1, 2, 4) if n <= reqs] + list(range(8, min(reqs + 1, 256), 8))
            counts = sorted({*counts, *range(256, reqs + 1, 16), reqs})
            uniform = sorted({n * q for n in counts if n * q <= ceiling})
        elif rule == "uniform_decode_seqs" and max_num_seqs <= ceiling:
            uniform = [max_num_seqs]
    ceiling = min(mnbt, ceiling)
    sizes = [n for n in (1, 2, 4) if n <= ceiling]
    if ceiling >= 8:
        sizes += list(range(8, min(ceiling + 1, 256), 8))
    if ceiling >= 256:
        sizes += list(range(256, ceiling + 1, 16))
    if rule != "ceiling" and mnbt <= ceiling and mnbt not in sizes:
        sizes.append(mnbt)
    sizes += [s for s in uniform if s <= mnbt]
    return sorted(set(sizes))


def capture_sizes_033(num_speculative_tokens: int, max_num_seqs: int, mnbt: int,
                      blackwell: bool = False) -> list[int]:
    """v0.33's capture sizes (``spec_capture_sizes`` with ``uniform_decode_seqs``)."""
    return spec_capture_sizes("uniform_decode_seqs", num_speculative_tokens, max_num_seqs, mnbt,
                              blackwell)


def spec_graphs_term(graphs: ReserveTerm | None, base_sizes: int, spec: SpecDecode,
                     max_num_seqs: int, mnbt: int, blackwell: bool, release: str,
                     rule: SpecCapture) -> ReserveTerm | None:
    """The capture sizes speculative decoding adds (``spec_capture_sizes`` under the release's
    ``rule``, with the draft tokens against without), each at the per-size cost of the release's
    CUDA-graph term (fitted on runs
    without speculation: basis ``fit``). Not recounted: the FULL decode graphs, which the V2 runner
    captures at each size rounded up to a multiple of ``1 + k`` and deduplicated
    (``v1/worker/gpu/cudagraph_utils.py`` ``_init_candidates``), and the drafter's own graphs.
    None when no graphs are captured or no size is added."""
    if graphs is None or graphs.bytes <= 0 or base_sizes <= 0:
        return None
    with_spec = spec_capture_sizes(rule, spec.num_speculative_tokens, max_num_seqs, mnbt, blackwell)
    without = spec_capture_sizes(rule, 0, max_num_seqs, mnbt, blackwell)
    extra = len(with_spec) - len(without)
    if extra <= 0:
        return None
    per = graphs.bytes // base_sizes
    return ReserveTerm(
        SPEC_GRAPHS_TERM, extra * per,
        f"{len(with_spec)} capture sizes with query length 1 + {spec.num_speculative_tokens} (up to "
        f"{with_spec[-1]:,}) − {len(without)} without = {extra} more × {per:,} B per size "
        f"= {extra * per:,} B (decode graphs at multiples of {1 + spec.num_speculative_tokens} and the "
        "drafter's graphs not recounted)", f"{release} vllm/config/vllm.py _set_cudagraph_sizes "
        "(uniform_decode_query_len)", basis="fit", counted=graphs.counted)


def spec_summary(spec: SpecDecode, token_bytes: int, max_num_seqs: int, mnbt: int,
                 blackwell: bool, rule: SpecCapture) -> dict[str, object]:
    """``fit --json``'s ``speculative``: the resolved config and what it adds on one GPU."""
    sizes = spec_capture_sizes(rule, spec.num_speculative_tokens, max_num_seqs, mnbt, blackwell)
    return {
        "method": spec.method, "model": spec.model, "draft": spec.draft_name,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "draft_tensor_parallel_size": spec.draft_tp,
        "draft_kv_layers": len(spec.draft_layers),
        "draft_kv_bytes_per_token": token_bytes,
        "draft_weights_bytes": spec.weights_bytes,
        "draft_weights_formula": spec.weights_formula,
        "lookahead_tokens": spec.lookahead_tokens,
        "lookahead_rule": (f"{spec.lookahead_tokens} KV slots past the scheduled tokens per running "
                           "request (VllmConfig.num_lookahead_tokens), capped at max_model_len "
                           "(kv_cache_manager.py allocate_slots): no extra block at the full length"),
        "max_num_new_slots_for_drafting": spec.new_slots,
        "uniform_decode_query_len": 1 + spec.num_speculative_tokens,
        "cudagraph_capture_sizes": len(sizes),
        "max_cudagraph_capture_size": sizes[-1] if sizes else 0,
        "notes": list(spec.notes),
    }
