"""TensorRT-LLM KV-cache sizing with speculative decoding, transcribed, for kvplan's fixture tests.

Dev-time, stdlib only, imports nothing from kvplan. TensorRT-LLM cannot be imported here (PyPI's
``tensorrt-llm`` is a ``wheel_stub`` sdist that redirects to pypi.nvidia.com, and its code loads
the CUDA bindings at import; ``tools/trtllm_truth/FINDINGS.md`` §1), so, like ``generate.py``, this
re-states the arithmetic of the PyTorch backend's V1 ``KVCacheManager`` path in TRT-LLM's order of
operations, now with a ``speculative_config``, and writes ``tests/fixtures/trtllm/spec_decode.json``
(``computed_by: "transcribed"``).

Sources (``SPEC_SOURCES``; quotes in ``tools/trtllm_truth/SPEC.md``):

* ``llm_args.py`` (file 7019226376): ``EagleDecodingConfig.validate_eagle_config`` —
  ``self.num_eagle_layers = self.max_draft_len``, ``self.max_total_draft_tokens = self.max_draft_len``;
  ``spec_dec_mode``: ``EAGLE3_ONE_MODEL`` if ``eagle3_one_model`` (default True) else ``EAGLE3``;
  ``MTPDecodingConfig.set_max_total_draft_tokens`` — ``self.max_draft_len =
  self.num_nextn_predict_layers``; ``spec_dec_mode``: ``MTP_EAGLE_ONE_MODEL`` when the checkpoint has
  one next-n layer, not ``use_mtp_vanilla``, ``mtp_eagle_one_model``; else ``MTP``;
  ``DraftTargetDecodingConfig`` / ``NGramDecodingConfig``: ``max_total_draft_tokens = max_draft_len``.
* ``speculative/interface.py`` ``SpeculativeDecodingMode.is_mtp_one_model``: ``MTP`` or
  ``MTP_EAGLE_ONE_MODEL``; ``speculative/utils.py`` (the vintage with ``num_eagle_layers``):
  ``get_num_spec_layers`` — ``num_nextn_predict_layers`` if ``is_mtp_one_model()``,
  ``num_eagle_layers`` (else 1) if ``is_eagle3_one_model()``, else 0; ``get_num_extra_kv_tokens`` —
  ``max_draft_len - 1`` if ``is_eagle3_one_model()``, else 0.
* ``resource_manager.py`` (001541ba): ``get_pp_layers`` — ``total_num_layers += num_spec_layers``
  and, on the last PP rank, ``pp_layers.extend(range(total_num_layers - num_spec_layers,
  total_num_layers))``; ``KVCacheManager.__init__`` — ``num_kv_heads_per_layer`` for every local
  layer (spec layers included) from the target's int ``num_kv_heads``; ``prepare_resources`` —
  ``add_sequence(prompt_len)``, ``num_extra_kv_tokens`` and ``get_draft_token_length(req)``
  ``add_token`` calls; the static ``get_cache_size_per_token`` counts
  ``model_config.get_num_attention_layers()`` only.
* ``_util.py`` ``KvCacheCreator._get_kv_size_per_token`` (the first-read vintage, ``843526953``):
  ``kv_size_per_token += ... get_cache_size_per_token(draft_model_config, ...)`` when there is a
  draft model engine (two-model modes), and each manager's ``calculate_max_num_blocks`` is capped by
  that ``max_tokens``; the draft's own ``KVCacheManager`` is built after the target's pool is
  allocated (free memory lower by the target pool).

Modelled inputs (a GPU run would measure them): the KV memory ``kv_cache_max_memory`` (the
creator's budget, given to kvplan as ``kv_cache_memory_bytes``) and the free memory when the final
managers are built (the budget / fraction plus the released activation peak, ``ACTIVATION``).
A request of ``L`` tokens is taken to hold ``L + num_extra_kv_tokens + max_total_draft_tokens``
tokens (kvplan's convention of counting all ``L`` tokens, as without speculation).

Run: ``python3 tools/trtllm_truth/spec_decode.py`` from the repository root.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate import (  # noqa: E402  (the transcribed V1 helpers, same directory)
    ROOT,
    SOURCES,
    Model,
    get_cache_size_per_token,
    get_size_in_bytes,
    model_kv_dtype,
)

OUT = ROOT / "tests" / "fixtures" / "trtllm" / "spec_decode.json"
GIB = 1 << 30
SPEC_SOURCES = {
    **{k: SOURCES[k] for k in ("rm", "util", "llm_args")},
    "util_first_read": {"repo": "NVIDIA/TensorRT-LLM (code-index copy)",
                        "path": "tensorrt_llm/_torch/pyexecutor/_util.py", "commit": None,
                        "code_index_file_id": "843526953"},
    "spec_utils": {"repo": "NVIDIA/TensorRT-LLM (code-index copies)",
                   "path": "tensorrt_llm/_torch/speculative/utils.py", "commit": None,
                   "code_index_file_id": "13542650405 / 39968783 (same get_num_spec_layers, "
                                         "get_num_extra_kv_tokens)"},
    "spec_interface": {"repo": "NVIDIA/TensorRT-LLM (code-index copy)",
                       "path": "tensorrt_llm/_torch/speculative/interface.py", "commit": None,
                       "code_index_file_id": "10039271475"},
}
#: Released by the time the final managers are built (modelled, as ``generate.py``'s 1–4 GiB).
ACTIVATION = 2 * GIB
FRACTION = 0.9
TOKENS_PER_BLOCK = 32


def resolve(spec: dict, target: Model) -> dict:
    """The ``*DecodingConfig`` validators and ``spec_dec_mode`` (llm_args.py)."""
    kind = spec["decoding_type"]
    if kind in ("Eagle", "Eagle3"):
        max_draft_len = spec["max_draft_len"]  # validate_eagle_config: must be > 0
        mode = "EAGLE3_ONE_MODEL" if spec.get("eagle3_one_model", True) else "EAGLE3"
        num_eagle_layers = max_draft_len  # self.num_eagle_layers = self.max_draft_len
        return {"mode": mode, "max_draft_len": max_draft_len, "max_total_draft_tokens": max_draft_len,
                "num_eagle_layers": num_eagle_layers}
    if kind == "MTP":
        n = spec.get("num_nextn_predict_layers", 1)
        from_model = target.get("num_nextn_predict_layers", 1)
        vanilla = spec.get("use_mtp_vanilla", False)
        one = spec.get("mtp_eagle_one_model", True)
        mode = ("MTP_EAGLE_ONE_MODEL" if from_model == 1 and not vanilla and one
                else "MTP_EAGLE" if from_model == 1 and not vanilla else "MTP")
        return {"mode": mode, "max_draft_len": n, "max_total_draft_tokens": n,
                "num_nextn_predict_layers": n}
    mode = {"Draft_Target": "DRAFT_TARGET", "NGram": "NGRAM"}[kind]
    return {"mode": mode, "max_draft_len": spec["max_draft_len"],
            "max_total_draft_tokens": spec["max_draft_len"]}


def get_num_spec_layers(cfg: dict) -> int:
    """``speculative/utils.py get_num_spec_layers``."""
    if cfg["mode"] in ("MTP", "MTP_EAGLE_ONE_MODEL"):  # is_mtp_one_model()
        return cfg["num_nextn_predict_layers"]
    if cfg["mode"] == "EAGLE3_ONE_MODEL":  # is_eagle3_one_model()
        n = cfg.get("num_eagle_layers")
        return n if n is not None else 1
    return 0


def get_num_extra_kv_tokens(cfg: dict) -> int:
    """``speculative/utils.py get_num_extra_kv_tokens``."""
    if cfg["mode"] == "EAGLE3_ONE_MODEL":
        return cfg["max_draft_len"] - 1
    return 0


def manager_bytes_per_token(model: Model, tp: int, num_layers: int) -> int:
    """``KVCacheManager.get_cache_bytes_per_token`` over ``num_layers`` local layers, each with
    ``ceil(num_kv_heads / tp)`` heads of ``head_dim`` (MLA: one head of ``kv_lora_rank +
    qk_rope_head_dim``, ``kv_factor`` 1)."""
    config = model.config
    if "kv_lora_rank" in config:
        heads, head_dim, kv_factor = 1, config["kv_lora_rank"] + config["qk_rope_head_dim"], 1
    else:
        nkv = config.get("num_key_value_heads", config["num_attention_heads"])
        heads = (nkv + tp - 1) // tp
        head_dim = config.get("head_dim")
        if not isinstance(head_dim, int):
            head_dim = config["hidden_size"] // config["num_attention_heads"]
        kv_factor = 2
    return get_size_in_bytes(kv_factor * heads * num_layers * head_dim, model_kv_dtype(model))


def calculate_max_num_blocks(max_tokens_cfg: int, free_mem: float, cost: int) -> int:
    """``calculate_max_num_blocks`` (one rank, no all-reduce): ``min(max_tokens, fraction × free /
    cost) // tokens_per_block``."""
    max_tokens = FRACTION * free_mem / cost  # rm:calculate_max_num_blocks+16
    max_tokens = min(max_tokens_cfg, max_tokens)  # +22
    return int(max_tokens // TOKENS_PER_BLOCK)  # +41


def run_case(case: dict) -> dict:
    target = Model(_config(case["model"]), None)
    tp = case["tp"]
    cfg = resolve(case["speculative_config"], target)
    budget = case["kv_cache_max_memory"]
    draft = Model(_config(case["draft"]), None) if cfg["mode"] in ("EAGLE3", "DRAFT_TARGET") else None
    # _util.py _get_kv_size_per_token: the target's static cost (+ the draft engine's)
    creator = get_cache_size_per_token(target, tp, 1, 0)
    draft_creator = get_cache_size_per_token(draft, tp, 1, 0) if draft is not None else 0
    slope = creator + draft_creator
    max_tokens = max(budget // slope, 0)  # configure_kv_cache_capacity: tokens_for_budget
    spec_layers = get_num_spec_layers(cfg)  # get_pp_layers: on the last (only) PP rank
    layers = target.get_num_attention_layers() + spec_layers
    target_cost = manager_bytes_per_token(target, tp, layers)
    free = budget / FRACTION + ACTIVATION  # modelled: mem_get_info when the manager is built
    target_blocks = calculate_max_num_blocks(max_tokens, free, target_cost)
    out = {"spec_dec_mode": cfg["mode"], "max_draft_len": cfg["max_draft_len"],
           "max_total_draft_tokens": cfg["max_total_draft_tokens"],
           "num_spec_layers": spec_layers, "num_extra_kv_tokens": get_num_extra_kv_tokens(cfg),
           "creator_bytes_per_token": slope, "creator_max_tokens": max_tokens,
           "target_manager_bytes_per_token": target_cost, "target_blocks": target_blocks}
    if draft is not None:
        draft_cost = manager_bytes_per_token(draft, tp, draft.get_num_attention_layers())
        free_after = free - target_blocks * TOKENS_PER_BLOCK * target_cost
        out["draft_manager_bytes_per_token"] = draft_cost
        out["draft_blocks"] = calculate_max_num_blocks(max_tokens, free_after, draft_cost)
    extra = out["num_extra_kv_tokens"] + out["max_total_draft_tokens"]
    length = case["request_tokens"]
    per_request = math.ceil((length + extra) / TOKENS_PER_BLOCK)
    out["request_blocks"] = per_request
    pools = [target_blocks] + ([out["draft_blocks"]] if draft is not None else [])
    out["max_requests"] = min(p // per_request for p in pools)
    return out


def _config(name: str) -> dict:
    path = ROOT / name if name.endswith(".json") and "/" in name else \
        ROOT / "presets" / "models" / f"{name}.json"
    data = json.loads(path.read_text())
    return data.get("config", data) if "config" in data else data


HEAD = "tests/fixtures/configs/llama3-8B-eagle3.json"
B = 60 * GIB  # a KV budget of 64,424,509,440 B
#: (id, target, tp, speculative_config, draft, KV budget, request tokens)
CASES = [
    ("llama-3.1-8b-eagle3-one-model-k3", "llama-3.1-8b", 1,
     {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": HEAD}, None, B, 8192),
    ("llama-3.1-8b-eagle3-two-model-k3", "llama-3.1-8b", 1,
     {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": HEAD,
      "eagle3_one_model": False}, HEAD, B, 8192),
    ("llama-3.1-8b-eagle3-two-model-k5-tp2", "llama-3.1-8b", 2,
     {"decoding_type": "Eagle3", "max_draft_len": 5, "speculative_model": HEAD,
      "eagle3_one_model": False}, HEAD, B, 4096),
    ("llama-3.1-8b-draft-target-1b-k4", "llama-3.1-8b", 1,
     {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "llama-3.2-1b"},
     "llama-3.2-1b", B, 8192),
    ("llama-3.1-70b-draft-target-1b-k4-tp4", "llama-3.1-70b", 4,
     {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "llama-3.2-1b"},
     "llama-3.2-1b", 50 * GIB, 16384),
    ("qwen3-8b-draft-target-0.6b-k3-tp2", "qwen3-8b", 2,
     {"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "Qwen/Qwen3-0.6B"},
     "Qwen--Qwen3-0.6B", 30 * GIB, 32768),
    ("llama-3.1-8b-eagle3-one-model-k5-tp2", "llama-3.1-8b", 2,
     {"decoding_type": "Eagle3", "max_draft_len": 5, "speculative_model": HEAD}, None, 30 * GIB, 4096),
    ("llama-3.1-8b-ngram-k4", "llama-3.1-8b", 1,
     {"decoding_type": "NGram", "max_draft_len": 4}, None, B, 8192),
    ("deepseek-v3-mtp-1-tp8", "deepseek-v3", 8,
     {"decoding_type": "MTP", "num_nextn_predict_layers": 1}, None, 100 * GIB, 32768),
    ("deepseek-v3-mtp-3-tp8", "deepseek-v3", 8,
     {"decoding_type": "MTP", "num_nextn_predict_layers": 3}, None, 100 * GIB, 32768),
    ("deepseek-v3-mtp-vanilla-2-tp8", "deepseek-v3", 8,
     {"decoding_type": "MTP", "num_nextn_predict_layers": 2, "use_mtp_vanilla": True}, None,
     100 * GIB, 32768),
]


def main() -> None:
    cases = []
    for case_id, model, tp, spec, draft, budget, length in CASES:
        case = {"id": case_id, "model": model, "tp": tp, "speculative_config": spec, "draft": draft,
                "kv_cache_max_memory": budget, "request_tokens": length,
                "modelled": {"free_mem_at_creation": f"kv_cache_max_memory / {FRACTION} + "
                                                     f"{ACTIVATION:,} B released activation"}}
        case["expected"] = run_case(case)
        cases.append(case)
    fixture = {"computed_by": "transcribed",
               "engine": "TensorRT-LLM PyTorch backend, V1 KVCacheManager, speculative_config",
               "sources": SPEC_SOURCES, "generator": "tools/trtllm_truth/spec_decode.py",
               "cases": cases}
    OUT.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
