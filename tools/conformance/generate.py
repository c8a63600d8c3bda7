"""Measure transformers' real KV caches and parameter counts, one JSON fixture per model type.

Dev-time only (needs torch + transformers; see ``README.md``). For every model type of
``CONFIG_MAPPING`` that has an ``AutoModelForCausalLM`` class (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``)
it builds a small config from the config class defaults (``shrink``), instantiates the model in
float32 on CPU, runs forwards with ``use_cache=True`` (batch 2; prefill of 5, 17, 40 tokens, a
16 + 1 decode step, and a 40-token prefill with the model cast to bfloat16), walks the returned
cache object for every tensor (``walk``) and writes ``tests/fixtures/conformance/<model_type>.json``.
Parameter counts: the small model, and the full-size default config instantiated under
``torch.device("meta")`` (no weights allocated).

Each model type runs in a worker process with a per-type alarm; a crash or a hang is recorded as a
failure of that type and the worker restarts with the rest.

    python tools/conformance/generate.py [--only TYPE ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "conformance"
BATCH = 2
PREFILL_LENGTHS = (5, 17, 40)
DECODE = (16, 1)  # prefill 16 tokens, then one decode step
TYPE_SECONDS = 120
SMALL_VOCAB = 256

#: Small values for dimension keys, applied where the default config has the key (int-valued).
DIMS: dict[str, int] = {
    "hidden_size": 64, "n_embd": 64, "d_model": 64, "word_embed_proj_dim": 64, "lru_width": 64,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4, "decoder_attention_heads": 4,
    "encoder_attention_heads": 4, "swa_num_attention_heads": 4,
    "intermediate_size": 80, "ffn_dim": 80, "n_inner": 80, "decoder_ffn_dim": 80,
    "encoder_ffn_dim": 80, "ffn_hidden_size": 80, "d_ff": 80, "dim_ff": 80,
    "feed_forward_size": 80, "dense_intermediate_size": 80, "intermediate_size_mlp": 96,
    "moe_intermediate_size": 32, "expert_ffn_hidden_size": 32,
    "shared_expert_intermediate_size": 48, "shared_intermediate_size": 48,
    "shared_experts_intermediate_size": 48, "moe_shared_expert_intermediate_size": 48,
    "kv_lora_rank": 32, "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
    "v_head_dim": 12, "qk_head_dim": 24, "index_head_dim": 16, "index_n_heads": 2,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 12, "linear_num_heads": 2, "linear_head_dim": 8,
    "mamba_d_state": 8, "ssm_state_size": 8, "state_size": 8, "mamba_n_heads": 4,
    "mamba_num_heads": 4, "mamba_d_head": 32, "mamba_head_dim": 32, "n_mamba_heads": 4,
    "sliding_window": 8, "sliding_window_size": 8, "attention_chunk_size": 8,
    "local_attention_window_len": 8, "attention_window_size": 8, "window_size": 8,
    "hidden_size_per_layer_input": 16, "n_groups": 2, "mamba_headdim": 32,
    "attention_hidden_size": 128, "attention_head_dim": 32, "rotary_dim": 8, "swa_head_dim": 24,
}
#: Expert counts: shrunk only when the default has more than one expert.
EXPERTS = {"num_experts": 4, "n_routed_experts": 4, "num_local_experts": 4, "moe_num_experts": 4}
ACTIVE = {"num_experts_per_tok": 2, "moe_topk": 2, "moe_k": 2, "num_experts_per_token": 2,
          "n_group": 1, "topk_group": 1, "num_expert_group": 1}
#: Defaults that leave a model without any attention layer (transformers cannot run them).
PER_TYPE: dict[str, dict[str, Any]] = {
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["mamba", "attention"], "num_hidden_layers": 2},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_hidden_layers": 2},
    # M-RoPE sections must add up to half the (small) head: 64 / 4 heads = 16 → 8 (the model's
    # default [16, 24, 24] is for 128)
    "qwen2_5_vl_text": {"rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default",
                                            "mrope_section": [2, 3, 3]}},
    "rwkv": {"attention_hidden_size": 64},
    "xlnet": {"d_head": 16},
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [32, 32]},  # asserted by the model
}
#: Types that need more layers than their pattern shows (Zamba ties a shared block across two
#: hybrid layers).
LAYERS_NEEDED = {"zamba": 12}
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
#: Per-layer lists exposed as properties rather than stored keys.
LAYER_PROPS = ("layer_types", "layers_block_type", "block_types", "mlp_layer_types",
               "attention_types", "indexer_types")
PERIOD_KEYS = ("sliding_window_pattern", "_sliding_window_pattern", "full_attention_interval",
               "no_rope_layer_interval", "interleave_moe_layer_step", "global_attn_every_n_layers",
               "attn_layer_period", "expert_layer_period")
MAX_LAYERS = 12
SUBCONFIG_KEYS = ("vision_config", "audio_config", "speech_config", "encoder_config",
                  "perceiver_config", "projector_config")


def _n_layers(d: dict[str, Any]) -> tuple[str | None, int]:
    for key in LAYER_KEYS:
        if isinstance(d.get(key), int) and not isinstance(d.get(key), bool):
            return key, d[key]
    return None, 0


def _per_layer_lists(cfg: Any, d: dict[str, Any], n: int) -> dict[str, list | str]:
    lists: dict[str, list | str] = {}
    for key, value in d.items():
        if isinstance(value, (list, str)) and len(value) == n and n > 1 and key not in (
                "model_type", "_name_or_path", "architectures", "transformers_version") and (
                isinstance(value, list) or key.endswith("pattern")):
            lists[key] = value
    for key in LAYER_PROPS:
        try:
            value = getattr(cfg, key, None)
        except Exception:  # noqa: BLE001 — a property may need keys the config lacks
            value = None
        if isinstance(value, (list, tuple)) and len(value) == n:
            lists.setdefault(key, list(value))
    return lists


def _layers_needed(d: dict[str, Any], lists: dict[str, list | str], n0: int) -> int:
    need = 2
    for value in lists.values():
        seen: dict[str, int] = {}
        for i, item in enumerate(value):
            seen.setdefault(json.dumps(item, sort_keys=True, default=str), i)
        need = max(need, max(seen.values()) + 1)
    for key in PERIOD_KEYS:
        value = d.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            need = max(need, value)
    if isinstance(d.get("attn_layer_offset"), int):
        need = max(need, d["attn_layer_offset"] + 1)
    if isinstance(d.get("num_kv_shared_layers"), int) and d["num_kv_shared_layers"] > 0:
        need = 2 * need
    return min(need, n0, max(MAX_LAYERS, 2)) if n0 else need


def _shrink_dict(d: dict[str, Any], n_layers: int | None, conservative: bool) -> dict[str, Any]:
    out = dict(d)
    heads0 = d.get("num_attention_heads") or d.get("n_head") or d.get("num_heads")
    for key, small in DIMS.items():
        value = d.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int) and value > small:
            out[key] = small
        elif isinstance(value, list) and value and all(isinstance(v, int) for v in value) \
                and key.endswith("intermediate_size"):
            out[key] = [small] * len(value)
    for table in (EXPERTS, ACTIVE):
        for key, small in table.items():
            value = d.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > small:
                out[key] = small
    kv0 = d.get("num_key_value_heads")
    if isinstance(kv0, int) and isinstance(heads0, int):
        out["num_key_value_heads"] = 1 if kv0 == 1 else (4 if kv0 == heads0 else 2)
    for key in ("num_kv_heads", "n_head_kv", "multi_query_group_num", "swa_num_key_value_heads"):
        if isinstance(d.get(key), int) and d[key] > 2:
            out[key] = 2
    if "head_dim" in d and (isinstance(d.get("head_dim"), int) or d.get("head_dim") is None
                            and "num_attention_heads" in d):
        out["head_dim"] = 16 if conservative else 24
    if "num_key_value_heads" in d and d["num_key_value_heads"] is None and "num_attention_heads" in d:
        out["num_key_value_heads"] = 2
    if isinstance(d.get("kv_lora_rank"), int) and "head_dim" in d:  # MLA: head_dim is the rope part
        out["head_dim"] = out.get("qk_rope_head_dim", DIMS["qk_rope_head_dim"])
    if isinstance(d.get("moe_intermediate_size"), int):  # MoE defaults that leave experts unset
        for key in EXPERTS:
            if key in d and d[key] is None:
                out[key] = EXPERTS[key]
                d = {**d, key: EXPERTS[key]}
        if "n_shared_experts" in d and d["n_shared_experts"] is None:
            out["n_shared_experts"] = 1
    if any(isinstance(d.get(k), int) and d[k] > 1 for k in EXPERTS):
        if "moe_intermediate_size" in d and d["moe_intermediate_size"] is None:
            out["moe_intermediate_size"] = DIMS["moe_intermediate_size"]
        for key in ACTIVE:
            if key in d and d[key] is None:
                out[key] = ACTIVE[key]
    if isinstance(d.get("mamba_d_ssm"), int):
        out["mamba_d_ssm"] = out["mamba_n_heads"] * out["mamba_d_head"]
    out.update(PER_TYPE.get(d.get("model_type"), {}))
    if {"expand", "num_heads", "head_dim"} <= set(d) and isinstance(d.get("expand"), int):
        out["head_dim"] = out["hidden_size"] * d["expand"] // out["num_heads"]  # Mamba-2
    if "kv_channels" in d and isinstance(d.get("kv_channels"), int):
        out["kv_channels"] = 16 if conservative else 24
    for key, value in d.items():
        if "vocab" in key and isinstance(value, int) and not isinstance(value, bool) \
                and value > SMALL_VOCAB and key != "type_vocab_size":
            out[key] = SMALL_VOCAB
    next_id = SMALL_VOCAB - 1
    for key, value in d.items():
        if key.endswith(("_token_id", "_token_index", "token_id")) and isinstance(value, int) \
                and not isinstance(value, bool) and value >= SMALL_VOCAB:
            out[key], next_id = next_id, next_id - 1
        elif key.endswith("_token_id") and isinstance(value, list):
            out[key] = [v if v < SMALL_VOCAB else SMALL_VOCAB - 1 for v in value
                        if isinstance(v, int)]
    if isinstance(d.get("first_k_dense_replace"), int) and d["first_k_dense_replace"] > 1:
        out["first_k_dense_replace"] = 1
    if n_layers is not None:
        key, n0 = _n_layers(d)
        if key:
            out[key] = n_layers
            for other in LAYER_KEYS:
                if other != key and isinstance(d.get(other), int) and d[other] == n0:
                    out[other] = n_layers
        if isinstance(d.get("num_kv_shared_layers"), int) and d["num_kv_shared_layers"] > 0:
            out["num_kv_shared_layers"] = n_layers // 2
        for key, value in d.items():
            if isinstance(value, list) and value and len(value) != n0 and all(
                    isinstance(i, int) and not isinstance(i, bool) for i in value) and key.endswith(
                    ("indices", "idxs", "_ids", "layers", "_layer_idx")):
                kept = [i for i in value if i < n_layers]
                out[key] = kept if kept or key == "mlp_only_layers" else [n_layers - 1]
            elif isinstance(value, dict) and value and all(str(k).isdigit() for k in value):
                out[key] = {k: v for k, v in value.items() if int(k) < n_layers}
    return out


def shrink(config_cls: Any, conservative: bool = False) -> tuple[Any, Any]:
    """Small config from the class defaults: few layers (every layer kind kept), small widths."""
    default = config_cls()
    d = default.to_dict()
    text_key = "text_config" if isinstance(d.get("text_config"), dict) else None
    body = d[text_key] if text_key else d
    body_cfg = getattr(default, "text_config", None) if text_key else default
    _, n0 = _n_layers(body)
    lists = _per_layer_lists(body_cfg, body, n0)
    n = LAYERS_NEEDED.get(body.get("model_type"), _layers_needed(body, lists, n0))
    small_body = _shrink_dict(body, n, conservative)
    for key, value in lists.items():
        if key in body and body[key] is not None:
            small_body[key] = value[:n]
    small_body.update(PER_TYPE.get(body.get("model_type"), {}))
    if text_key:
        d = {**d, text_key: small_body}
        for key, value in list(d.items()):
            if key != text_key and isinstance(value, dict) and (key in SUBCONFIG_KEYS or
                                                                "hidden_size" in value):
                d[key] = _shrink_dict(value, 1, True)
        d = _shrink_dict({k: v for k, v in d.items() if k != text_key}, None, True) | {
            text_key: d[text_key]}
    else:
        d = small_body
        for key, value in list(d.items()):
            if key in SUBCONFIG_KEYS and isinstance(value, dict):
                d[key] = _shrink_dict(value, 1, True)
    d.pop("transformers_version", None)
    d.pop("_name_or_path", None)
    d["dtype"] = "float32"
    return config_cls.from_dict(d), default


def _role(path: str, tensor: Any) -> str:
    parts = [p for p in path.lower().split(".") if not p.isdigit()]
    name = parts[-1]
    if not tensor.is_floating_point():
        return "int"
    if "indexer" in path.lower() and "key" in name:
        return "indexer_k"
    if "conv" in name:
        return "conv"
    if "key" in name or name in {"k", "k_cache"}:
        return "k"
    if "value" in name or name in {"v", "v_cache"}:
        return "v"
    if "recurrent" in name or "ssm" in name or "state" in name:
        return "state"
    return "other"


def walk(obj: Any, path: str, out: list, seen: set, depth: int = 0) -> None:
    """Every tensor reachable from a cache object (layers, lists, dicts, attributes)."""
    import torch

    if depth > 8 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.numel() == 0:
            return
        storage = (obj.untyped_storage().data_ptr(), obj.storage_offset(), tuple(obj.shape))
        out.append({"path": path, "shape": list(obj.shape), "dtype": str(obj.dtype).replace(
            "torch.", ""), "bytes": obj.numel() * obj.element_size(), "role": _role(path, obj),
            "_storage": storage})
        return
    if isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            walk(item, f"{path}.{i}", out, seen, depth + 1)
        return
    if isinstance(obj, dict):
        for key, item in obj.items():
            walk(item, f"{path}.{key}", out, seen, depth + 1)
        return
    if isinstance(obj, (torch.nn.Module, str, int, float, bool, type(None))):
        return
    if type(obj).__module__.startswith("transformers") and hasattr(obj, "__dict__"):
        for key, item in vars(obj).items():
            if key in {"config"}:
                continue
            walk(item, f"{path}.{key}", out, seen, depth + 1)


def _measure(model: Any, cache: Any, batch: int, length: int, mode: str) -> dict[str, Any]:
    tensors: list[dict[str, Any]] = []
    walk(cache, "cache", tensors, set())
    storages: set = set()
    totals: dict[str, int] = {}
    for item in tensors:
        key = item.pop("_storage")
        item["alias"] = key in storages
        storages.add(key)
        if not item["alias"]:
            totals[item["role"]] = totals.get(item["role"], 0) + item["bytes"]
    return {"batch": batch, "length": length, "mode": mode,
            "cache_class": type(cache).__name__ if cache is not None else None,
            "bytes_by_role": totals,
            "cache_bytes": sum(v for k, v in totals.items() if k != "int"),
            "tensors": tensors}


def _bf16_measurement(model: Any, measurements: list[dict[str, Any]]) -> str | None:
    """The same model cast to bfloat16, one prefill of the longest length: the cache dtypes the
    model keeps in bf16 (fp32 recurrent states show up here). Returns the error, if any."""
    import torch

    length = PREFILL_LENGTHS[-1]
    try:
        model.to(torch.bfloat16)
        with torch.no_grad():
            ids = torch.randint(3, SMALL_VOCAB // 2, (BATCH, length))
            out = model(input_ids=ids, use_cache=True)
        m = _measure(model, _cache_of(out), BATCH, length, "prefill")
        m["dtype"] = "bfloat16"
        measurements.append(m)
        return None
    except Exception as exc:  # noqa: BLE001 — recorded; the float32 measurements stand
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        model.to(torch.float32)


def _cache_of(output: Any) -> Any:
    for key in ("past_key_values", "cache_params", "mems", "state", "past_buckets_states"):
        value = getattr(output, key, None) if not isinstance(output, dict) else output.get(key)
        if value is not None:
            return value
    return None


#: Modules of a multimodal wrapper that are its vision/audio towers and projectors.
TOWER_MODULES = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "audio_tower")


def _param_count(model: Any, text_only: bool = False) -> int:
    """Parameters (tied ones once); ``text_only``: those outside ``TOWER_MODULES``."""
    if not text_only:
        return sum(p.numel() for p in model.parameters())
    return sum(p.numel() for name, p in model.named_parameters()
               if not set(name.split(".")[:2]) & set(TOWER_MODULES))


def run_type(model_type: str) -> dict[str, Any]:
    """Build, run and measure one model type (inside the worker)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    record: dict[str, Any] = {
        "model_type": model_type,
        "causal_lm_class": MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "dtype": "float32",
        "status": "failed",
    }
    config_cls = CONFIG_MAPPING[model_type]
    errors = []
    attempts = [(False, False), (True, False)] if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else []
    try:
        text_type = getattr(config_cls().get_text_config(), "model_type", None)
    except Exception:  # noqa: BLE001
        text_type = None
    if text_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and text_type != model_type:
        attempts.append((False, True))  # the wrapper's text model alone
    wrapper_cls = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type)
    if not attempts and wrapper_cls and hasattr(transformers, wrapper_cls):
        attempts.append((False, False))  # the whole wrapper, run on text only (Qwen-VL)
    for conservative, text_only in attempts:
        try:
            config, default = shrink(config_cls, conservative)
            if text_only:
                config = config.get_text_config()
            torch.manual_seed(0)
            if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or text_only:
                model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
            else:
                model = getattr(transformers, wrapper_cls)._from_config(
                    config, dtype=torch.float32).eval()
                record["towers_excluded"] = (
                    "the wrapper runs on text tokens only; params_small / params_default count "
                    "its text model and LM head (the tower parameters, under "
                    f"{', '.join(TOWER_MODULES)}, are params_towers_*)")
            if hasattr(model, "set_default_language"):  # X-MOD adapters need a language
                model.set_default_language(next(iter(config.languages)))
            vocab = SMALL_VOCAB
            measurements = []
            with torch.no_grad():
                for length in PREFILL_LENGTHS:
                    ids = torch.randint(3, vocab // 2, (BATCH, length))
                    out = model(input_ids=ids, use_cache=True)
                    measurements.append(_measure(model, _cache_of(out), BATCH, length, "prefill"))
                first, step = DECODE
                ids = torch.randint(3, vocab // 2, (BATCH, first))
                out = model(input_ids=ids, use_cache=True)
                cache = _cache_of(out)
                nxt = torch.randint(3, vocab // 2, (BATCH, step))
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                measurements.append(_measure(model, _cache_of(out), BATCH, first + step, "decode"))
            record["bf16_error"] = _bf16_measurement(model, measurements)
            record.update({
                "shrink": "conservative" if conservative else "default",
                "text_model_only": text_only,
                "model_class": type(model).__name__,
                "config": _as_config_json(config, type(model).__name__),
                "measurements": measurements,
                "params_small": _param_count(model, "towers_excluded" in record),
            })
            if "towers_excluded" in record:
                record["params_towers_small"] = _param_count(model) - record["params_small"]
            break
        except Exception as exc:  # noqa: BLE001 — every failure is recorded with its message
            errors.append(f"{'text model' if text_only else 'conservative' if conservative else 'default'}: "
                          f"{type(exc).__name__}: {str(exc)[:400]}")
            record["traceback"] = traceback.format_exc(limit=-3)[-1500:]
    else:
        record["error"] = " | ".join(errors) or "no causal-LM class and no causal-LM text model"
        return record
    record.pop("traceback", None)
    if errors:
        record["first_attempt_error"] = errors[0]
    record["status"] = "measured"
    try:
        default = config_cls()
        if record.get("text_model_only"):  # the reference is the text model the wrapper holds
            default = default.get_text_config()
        with torch.device("meta"):
            big = AutoModelForCausalLM.from_config(default) if "towers_excluded" not in record \
                else getattr(transformers, wrapper_cls)._from_config(default)
        record["params_default"] = _param_count(big, "towers_excluded" in record)
        if "towers_excluded" in record:
            record["params_towers_default"] = _param_count(big) - record["params_default"]
        record["default_config"] = _as_config_json(default, type(big).__name__)
    except Exception as exc:  # noqa: BLE001
        record["params_default_error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    return record


def _as_config_json(config: Any, model_class: str) -> dict[str, Any]:
    """``config.to_dict()`` as JSON, with ``architectures`` naming the class that was built (what
    a checkpoint's config.json carries)."""
    data = json.loads(config.to_json_string(use_diff=False))
    data["architectures"] = [model_class]
    return data


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    for key in ("config", "default_config"):
        if isinstance(record.get(key), dict):
            record[key].pop("transformers_version", None)
            record[key].pop("_name_or_path", None)
    return record


class _Timeout(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout(f"time limit {TYPE_SECONDS} s")


def worker(types: list[str], out: Path, progress: Path) -> None:
    """Measure ``types`` in order, writing each fixture as soon as it is done."""
    import warnings

    import torch
    from transformers.utils import logging

    warnings.filterwarnings("ignore")
    logging.set_verbosity_error()
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _alarm)
    for model_type in types:
        progress.write_text(model_type)
        (out / f"{model_type}.json").unlink(missing_ok=True)
        start = time.time()
        signal.alarm(TYPE_SECONDS)
        try:
            record = run_type(model_type)
        except _Timeout as exc:
            record = {"model_type": model_type, "status": "failed", "error": f"timeout: {exc}"}
        except Exception as exc:  # noqa: BLE001
            record = {"model_type": model_type, "status": "failed",
                      "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        finally:
            signal.alarm(0)
        seconds = round(time.time() - start, 1)
        (out / f"{model_type}.json").write_text(json.dumps(_clean(record), indent=1,
                                                            sort_keys=True) + "\n")
        print(f"{model_type}: {record['status']} ({seconds} s)"
              + (f" {record.get('error', '')[:160]}" if record["status"] != "measured" else ""),
              flush=True)


def _watch(proc: subprocess.Popen, progress: Path) -> None:
    """Wait for the worker; kill it when one type outlives the alarm (stuck in native code)."""
    last, since = None, time.time()
    while proc.poll() is None:
        time.sleep(2)
        current = progress.read_text() if progress.exists() else ""
        if current != last:
            last, since = current, time.time()
        elif time.time() - since > TYPE_SECONDS + 30:
            proc.kill()
            proc.wait()


#: Image-text-to-text wrappers whose text model has no causal-LM class (``qwen3_vl_text``): the
#: whole wrapper is built and run on text tokens, its text model's parameters counted.
WHOLE_WRAPPERS = ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


def causal_lm_types() -> list[str]:
    """Causal-LM model types, plus multimodal wrappers (image-text-to-text) whose default
    ``text_config`` is a causal-LM type: their text model is measured alone; and
    ``WHOLE_WRAPPERS``."""
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    types = {t for t in causal if t in CONFIG_MAPPING_NAMES}
    for wrapper in getattr(modeling_auto, "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", {}):
        if wrapper in types or wrapper not in CONFIG_MAPPING_NAMES:
            continue
        try:
            text = CONFIG_MAPPING[wrapper]().get_text_config()
        except Exception:  # noqa: BLE001 — a wrapper whose defaults do not build is skipped
            continue
        if getattr(text, "model_type", None) in causal:
            types.add(wrapper)
    return sorted(types | {t for t in WHOLE_WRAPPERS if t in CONFIG_MAPPING_NAMES})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model types to (re)generate")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    progress = args.out.parent / ".conformance-progress"
    if args.worker is not None:
        worker(args.worker, args.out, progress)
        return
    todo = args.only or causal_lm_types()
    while todo:
        progress.write_text("")
        proc = subprocess.Popen([sys.executable, __file__, "--out", str(args.out), "--worker", *todo])
        _watch(proc, progress)
        current = progress.read_text().strip()
        done = todo.index(current) if current in todo else -1
        if proc.returncode == 0:
            break
        if current in todo and not (args.out / f"{current}.json").exists():
            (args.out / f"{current}.json").write_text(json.dumps(
                {"model_type": current, "status": "failed",
                 "error": f"worker died (exit {proc.returncode})"}, indent=1) + "\n")
        todo = todo[done + 1:]
    progress.unlink(missing_ok=True)
    os.sync()


if __name__ == "__main__":
    main()
