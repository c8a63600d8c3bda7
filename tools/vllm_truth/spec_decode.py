"""Dev-time generator: vLLM 0.33.0's own speculative-decoding rules and KV-cache planning with the
drafter's layers → ``tests/fixtures/vllm_truth/spec_decode.json`` (``tests/test_vllm_spec_decode.py``
compares ``kvplan.capacity.fit`` with every case, exactly).

Run in the venv of ``tools/vllm_truth/README.md``:
``$S/venv/bin/python tools/vllm_truth/spec_decode.py``.

What is vLLM's code (called as is, 0.33.0):

* ``SpeculativeConfig._verify_and_get_draft_tp`` (the draft TP), the properties
  ``max_num_new_slots_for_drafting``, ``use_eagle``, ``uses_draft_model``, ``use_multi_module_mtp``
  and ``VllmConfig.num_lookahead_tokens`` / ``num_prefill_lookahead_tokens`` /
  ``uniform_decode_query_len`` evaluated on a stub carrying the resolved method and token count;
* ``VllmConfig._set_cudagraph_sizes`` on a stub (balanced mode, no sizes given, a non-Blackwell
  platform) → the capture sizes with the draft tokens;
* ``get_global_kv_cache_groups`` / ``get_kv_cache_configs`` (``kv_cache_planning.py``, with the
  drafter's specs marked ``is_draft`` as ``gpu_model_runner.py`` ``get_kv_cache_spec`` marks them,
  and ``speculative_config`` set so the EAGLE-group tagging runs) and ``get_kv_cache_capacity``.

* ``SpeculativeConfig`` itself (``__post_init__``, ``_verify_args``) on ``ModelConfig``s of local
  directories holding the target's and the draft's config.json — the resolved method, tokens and
  draft TP of every case (suffix excepted: it needs arctic-inference), ``RESOLVE_CASES``, and what
  it raises for ``ERROR_CASES``.

Written here (vLLM builds them from a loaded drafter on a GPU): the drafter's layer specs — a draft
model's or EAGLE head's layers through ``generate.py`` ``layer_specs`` of its config at the draft
TP (its ``Attention.get_kv_cache_spec``), MTP's ``num_nextn_predict_layers`` layers as the spec of
the target's last full-attention / MLA layer (``deepseek_mtp.py`` ``DeepSeekMultiTokenPredictor``,
``qwen3_next_mtp.py``: the next-n decoder layers are full attention) — and the method resolution
of ``SpeculativeConfig.__post_init__`` for the planning stub (``*_mtp`` → ``mtp``), checked against
the real ``SpeculativeConfig`` above.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate as g  # noqa: E402  (tools/vllm_truth/generate.py: the target's specs and stub)
import vllm  # noqa: E402
from vllm.config import ModelConfig, ParallelConfig  # noqa: E402
from vllm.config.speculative import SpeculativeConfig  # noqa: E402
from vllm.config.vllm import VllmConfig  # noqa: E402
from vllm.distributed.utils import get_pp_indices  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    UniformTypeKVCacheSpecs,
)

OUT = g.ROOT / "tests" / "fixtures" / "vllm_truth" / "spec_decode.json"
#: An EAGLE3 head for Llama-3.1-8B (one Llama decoder layer; SpecForge ``configs/llama3-8B-eagle3.json``,
#: yubofredwang/SpecForge@79694c7a08cb33a62179fa886706cd5b0108be78), as a directory path would be given.
EAGLE3_HEAD = "tests/fixtures/configs/llama3-8B-eagle3.json"
GIB = 1 << 30
#: (id, target preset, tp, speculative_config, max_model_len, max_num_batched_tokens, max_num_seqs)
CASES = [
    ("llama8b-draft1b-tp1", "llama-3.1-8b", 1,
     {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}, 8192, 8192, 1024),
    ("llama8b-draft1b-tp2-dtp1", "llama-3.1-8b", 2,
     {"model": "llama-3.2-1b", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1},
     32768, 8192, 1024),
    ("llama8b-draft1b-tp2", "llama-3.1-8b", 2,
     {"model": "llama-3.2-1b", "num_speculative_tokens": 5}, 16384, 2048, 256),
    ("qwen3-32b-draft0.6b-tp2", "qwen3-32b", 2,
     {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 4},
     32768, 8192, 1024),
    ("deepseek-v3-mtp-tp8", "deepseek-v3", 8, {"method": "deepseek_mtp", "num_speculative_tokens": 1},
     16384, 8192, 1024),
    ("deepseek-v3-mtp3-tp8", "deepseek-v3", 8, {"method": "mtp", "num_speculative_tokens": 3},
     8192, 16384, 512),
    ("llama8b-eagle3-tp2", "llama-3.1-8b", 2,
     {"method": "eagle3", "model": EAGLE3_HEAD, "num_speculative_tokens": 3}, 8192, 8192, 1024),
    ("jamba-ngram-tp2", "jamba-1.5-mini", 2, {"method": "ngram", "num_speculative_tokens": 3},
     32768, 8192, 256),
    ("qwen3-next-suffix-tp4", "qwen3-next-80b-a3b", 4, {"method": "suffix"}, 65536, 8192, 512),
    ("llama8b-ngram", "llama-3.1-8b", 1,
     {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}, 8192, 8192, 1024),
]
#: ``MTPModelTypes`` names fold into ``mtp`` (``__post_init__``).
MTP_NAMES = {"deepseek_mtp", "qwen3_next_mtp", "mtp"}


def _preset(name: str) -> dict:
    if name.endswith(".json"):
        return g.load_config({"config_path": name})
    return g.load_config({"config_path": f"presets/models/{name.replace('/', '--')}.json"})


def resolved_method(spec: dict) -> str:
    """``SpeculativeConfig.__post_init__``'s inference for the cases' methods."""
    method = spec.get("method")
    if method is None:
        method = "ngram" if spec.get("model") in ("ngram", "[ngram]") else "draft_model"
    return "mtp" if method in MTP_NAMES else method


def _config_dir(root: Path, name: str, cfg: dict) -> str:
    """A directory holding ``config.json``, named as the model is (vLLM infers EAGLE from it)."""
    path = root / name.replace("/", "--").removesuffix(".json").split("/")[-1]
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def vllm_speculative_config(model: str, spec: dict, tp: int) -> SpeculativeConfig:
    """vLLM's own ``SpeculativeConfig`` for ``spec`` (``__post_init__``, ``_verify_args``): the target
    and the draft as local directories with their config.json (``ModelConfig``, offline, no
    tokenizer); raises what vLLM raises."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    root = Path(tempfile.mkdtemp(prefix="kvplan-spec-"))
    target = _config_dir(root, model, _preset(model))
    target_config = ModelConfig(model=target, tokenizer=target, skip_tokenizer_init=True)
    args = dict(spec)
    if args.get("model") not in (None, "ngram"):
        name = Path(args["model"]).stem if args["model"].endswith(".json") else args["model"]
        args["model"] = _config_dir(root / "draft", name, _preset(args["model"]))
    return SpeculativeConfig(**args, target_model_config=target_config,
                             target_parallel_config=ParallelConfig(tensor_parallel_size=tp))


#: Configs vLLM refuses, each with the kvplan refusal ``tests/test_vllm_spec_decode.py`` expects.
ERROR_CASES = [
    ("vocab", "llama-3.1-8b", 1, {"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}),
    ("draft-tp", "llama-3.1-8b", 4,
     {"model": "llama-3.2-1b", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}),
    ("tp-key", "llama-3.1-8b", 1,
     {"model": "llama-3.2-1b", "num_speculative_tokens": 2, "tensor_parallel_size": 2}),
    ("no-tokens", "llama-3.1-8b", 1, {"model": "llama-3.2-1b"}),
    # mtp without tokens: __post_init__ sets model = target only when num_speculative_tokens is given
    ("mtp-no-tokens", "deepseek-v3", 8, {"method": "mtp"}),
    ("ngram-lookup", "llama-3.1-8b", 1,
     {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2}),
]


#: Configs resolved by vLLM alone (no planning): the method inferred from the name, a deprecated
#: MTP method name, a draft model without a method.
RESOLVE_CASES = [
    ("eagle3-by-name", "llama-3.1-8b", 1, {"model": EAGLE3_HEAD, "num_speculative_tokens": 2}),
    ("mtp-deprecated-name", "deepseek-v3", 8, {"method": "deepseek_mtp", "num_speculative_tokens": 2}),
    ("draft-default-method", "llama-3.1-8b", 2, {"model": "llama-3.2-1b", "num_speculative_tokens": 2,
                                                  "draft_tensor_parallel_size": 1}),
]


def resolve_case(case_id: str, model: str, tp: int, spec: dict) -> dict:
    real = vllm_speculative_config(model, spec, tp)
    return {"id": case_id, "model": model, "tp": tp, "speculative_config": spec,
            "method": real.method, "num_speculative_tokens": real.num_speculative_tokens,
            "draft_tensor_parallel_size": real.draft_tensor_parallel_size}


def error_case(case_id: str, model: str, tp: int, spec: dict) -> dict:
    try:
        vllm_speculative_config(model, spec, tp)
    except Exception as exc:  # noqa: BLE001 — the fixture records whatever vLLM raises
        return {"id": case_id, "model": model, "tp": tp, "speculative_config": spec,
                "exception": type(exc).__name__, "message": " ".join(str(exc).split())[:400]}
    raise AssertionError(f"vLLM accepted {case_id}")


def spec_stub(method: str, k: int, n_mtp: int) -> SimpleNamespace:
    """A ``SpeculativeConfig`` carrying what its properties read, with vLLM's own methods bound."""
    stub = SimpleNamespace(method=method, num_speculative_tokens=k, parallel_drafting=False,
                           disable_eagle_block_drop=False, disable_lookahead_block_hashes=False,
                           num_speculative_tokens_per_batch_size=None,
                           draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(
                               num_nextn_predict_layers=n_mtp, sample_from_anchor=True)))
    for name in ("use_eagle", "uses_draft_model", "use_dflash", "use_dspark",
                 "use_multi_module_mtp", "needs_eagle_block_drop", "use_eagle_block_drop",
                 "uses_dynamic_speculative_decoding", "uses_draft_kv_cache"):
        setattr(stub, name, types.MethodType(getattr(SpeculativeConfig, name), stub))
    stub.max_num_new_slots_for_drafting = SpeculativeConfig.max_num_new_slots_for_drafting.fget(stub)
    return stub


def capture_sizes(vcfg: SimpleNamespace, max_num_seqs: int, mnbt: int) -> list[int]:
    """``VllmConfig._set_cudagraph_sizes`` on a stub (balanced mode, sizes not given)."""
    cfg = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False),
        compilation_config=SimpleNamespace(cudagraph_mode=1, max_cudagraph_capture_size=None,
                                           cudagraph_capture_sizes=None,
                                           post_init_cudagraph_sizes=lambda: None),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs, max_num_batched_tokens=mnbt),
        speculative_config=vcfg.speculative_config, performance_mode="balanced",
        num_speculative_tokens=vcfg.num_speculative_tokens, diffusion_config=None)
    cfg.uniform_decode_query_len = VllmConfig.uniform_decode_query_len.fget(cfg)
    VllmConfig._set_cudagraph_sizes(cfg)
    return list(cfg.compilation_config.cudagraph_capture_sizes)


def draft_specs(target_cfg: dict, target_specs: dict, method: str, spec: dict, tp: int,
                draft_tp: int, kv_dtype: str) -> dict:
    """The drafter's ``{layer_name: spec}`` (``is_draft``), named after the target's layers."""
    n = len(target_specs)
    if method == "mtp":
        text = g.text_config(target_cfg)
        full = [s for s in target_specs.values()
                if isinstance(s, MLAAttentionSpec) or type(s) is FullAttentionSpec]
        layers = [full[-1]] * text["num_nextn_predict_layers"]
    elif method in ("ngram", "suffix"):
        return {}
    else:
        # ModelConfig(dtype=target_model_config.dtype): the draft runs in the target's dtype.
        draft_cfg = {k: v for k, v in _preset(spec["model"]).items() if k != "dtype"}
        draft_cfg["torch_dtype"] = g.DTYPE_NAMES[g.model_dtype(target_cfg)]
        specs, _ = g.layer_specs(draft_cfg, draft_tp, kv_dtype, 16)
        layers = list(specs.values())
    return {f"model.layers.{n + i}.attn": replace(s, is_draft=True) for i, s in enumerate(layers)}


def run_case(case_id: str, model: str, tp: int, spec: dict, max_model_len: int, mnbt: int,
             max_num_seqs: int, available: int) -> dict:
    cfg = _preset(model)
    kv_dtype = "auto"
    specs, mdtype = g.layer_specs(cfg, tp, kv_dtype, 16)
    method = resolved_method(spec)
    draft_tp = SpeculativeConfig._verify_and_get_draft_tp(
        SimpleNamespace(tensor_parallel_size=tp), spec.get("draft_tensor_parallel_size"))
    text = g.text_config(cfg)
    n_mtp = text.get("num_nextn_predict_layers", 0) if method == "mtp" else 0
    k = spec.get("num_speculative_tokens") or n_mtp
    if method == "suffix" and not k:  # _validate_suffix_decoding: the tree depth's default
        k = SpeculativeConfig.__dataclass_fields__["suffix_decoding_max_tree_depth"].default
    resolved = None
    if method != "suffix":  # suffix needs arctic-inference installed
        real = vllm_speculative_config(model, spec, tp)
        resolved = {"method": real.method, "num_speculative_tokens": real.num_speculative_tokens,
                    "draft_tensor_parallel_size": real.draft_tensor_parallel_size
                    if real.method not in ("ngram",) else None}
        assert (real.method, real.num_speculative_tokens) == (method, k), (case_id, resolved)
    drafts = draft_specs(cfg, specs, method, spec, tp, draft_tp, kv_dtype)
    # layers/mamba/abstract.py get_kv_cache_spec: num_speculative_blocks = num_speculative_tokens
    specs = {n: replace(s, num_speculative_blocks=k) if isinstance(s, MambaSpec) else s
             for n, s in specs.items()}
    all_specs = {**specs, **drafts}
    hybrid = g.hma_default(text)
    vcfg = g.stub_config(max_model_len, tp, mnbt, hybrid, True)
    vcfg.speculative_config = spec_stub(method, k, n_mtp)
    vcfg.num_speculative_tokens = VllmConfig.num_speculative_tokens.fget(
        SimpleNamespace(speculative_config=vcfg.speculative_config, diffusion_config=None))
    vcfg.num_lookahead_tokens = VllmConfig.num_lookahead_tokens.fget(vcfg)
    vcfg.num_prefill_lookahead_tokens = VllmConfig.num_prefill_lookahead_tokens.fget(vcfg)
    layouts = [[x.name for x in get_supported_kv_cache_layouts([FlashAttentionBackend])]]
    layout = resolve_kv_cache_layout(vcfg, layouts, all_specs.values())
    vcfg.cache_config.kv_cache_layout = layout.name
    start, stop = get_pp_indices(len(all_specs), 0, 1)
    worker = dict(list(all_specs.items())[start:stop])
    groups = get_global_kv_cache_groups(vcfg, [dict(worker)])
    (kv_config,) = get_kv_cache_configs(vcfg, [worker], [available], groups)
    tokens, concurrency = get_kv_cache_capacity(vcfg, kv_config)
    sizes = capture_sizes(vcfg, max_num_seqs, mnbt)
    blocks_per_request = sum(
        -(-grp.kv_cache_spec.max_memory_usage_bytes(vcfg) // grp.kv_cache_spec.page_size_bytes)
        for grp in kv_config.kv_cache_groups)
    first = next(iter(drafts.values()), None)
    return {
        "id": case_id, "model": model, "tp": tp, "speculative_config": spec,
        "max_model_len": max_model_len, "max_num_batched_tokens": mnbt,
        "max_num_seqs": max_num_seqs, "available_memory": available,
        "method": method, "num_speculative_tokens": k, "draft_tensor_parallel_size": draft_tp,
        "speculative_config_resolved": resolved,
        "num_lookahead_tokens": vcfg.num_lookahead_tokens,
        "num_prefill_lookahead_tokens": vcfg.num_prefill_lookahead_tokens,
        "max_num_new_slots_for_drafting": vcfg.speculative_config.max_num_new_slots_for_drafting,
        "uniform_decode_query_len": 1 + vcfg.num_speculative_tokens,
        "draft_kv_layers": len(drafts),
        "draft_page_size_bytes": first.page_size_bytes if first is not None else None,
        "num_blocks": kv_config.num_blocks,
        "bytes_per_block": kv_config.kv_cache_tensors[0].size // kv_config.num_blocks,
        "blocks_per_request": blocks_per_request,
        "kv_cache_size_tokens": tokens, "max_concurrency": concurrency,
        "groups": [{"layers": len(grp.layer_names), "eagle": bool(grp.is_eagle_group),
                    "type": type(grp.kv_cache_spec).__name__,
                    "uniform_type": isinstance(grp.kv_cache_spec, UniformTypeKVCacheSpecs),
                    "page_size_bytes": grp.kv_cache_spec.page_size_bytes}
                   for grp in kv_config.kv_cache_groups],
        "cudagraph_capture_sizes": sizes,
        "model_dtype": g.DTYPE_NAMES[mdtype],
    }


def main() -> None:
    cases = [run_case(*case, available) for case in CASES for available in (20 * GIB,)]
    errors = [error_case(*case) for case in ERROR_CASES]
    resolutions = [resolve_case(*case) for case in RESOLVE_CASES]
    OUT.write_text(json.dumps({
        "generator": "tools/vllm_truth/spec_decode.py", "vllm": vllm.__version__,
        "source": "vLLM 0.33.0 wheel from PyPI (pip download vllm==0.33.0 --no-deps), run on CPU",
        "cases": cases, "resolutions": resolutions, "errors": errors}, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases → {OUT.relative_to(g.ROOT)}")


if __name__ == "__main__":
    main()
