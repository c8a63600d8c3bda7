"""Parameter counts of every model preset, as transformers builds the model (dev-time only).

Each ``presets/models/*.json`` embeds the model's config.json under ``config``. The config is
rebuilt with its transformers config class (``CONFIG_MAPPING[model_type].from_dict``) and the model
instantiated under ``torch.device("meta")`` (no weights allocated) with the class
``AutoModelForCausalLM`` picks; multimodal presets (a ``text_config`` or a ``vision_config``) are
also built with the class ``architectures[0]`` names (the conditional-generation class holding the
vision tower; its count is also split into ``text_model`` and ``towers``). A ``model_type``
transformers does not know (``kimi_k2``) is built with the config class of its
``architectures[0]`` model class. ``quantization_config`` is dropped before building (the count
is of parameters, not bytes; weight formats are issue #13's). The count is
``sum(p.numel() for p in model.parameters())`` (tied weights once).

Writes ``tests/fixtures/param_counts.json``:

    python tools/conformance/param_counts.py
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "presets" / "models"
OUT = ROOT / "tests" / "fixtures" / "param_counts.json"


#: Modules of a multimodal class that are its vision/audio towers and projectors (generate.py's).
TOWER_MODULES = {"visual", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector",
                 "audio_tower"}


def _count(model_cls: Any, config: Any, towers: bool = False) -> dict[str, Any]:
    """Parameters of the class built from ``config``; ``towers``: also split into the text model
    (``text_model``) and the towers (``towers``: parameters under ``TOWER_MODULES`` in the first
    two name parts, e.g. ``model.visual``, ``vision_model``)."""
    import torch

    try:
        with torch.device("meta"):
            model = model_cls._from_config(config) if hasattr(model_cls, "_from_config") else \
                model_cls.from_config(config)
        out = {"class": type(model).__name__,
               "params": sum(p.numel() for p in model.parameters())}
        if towers:
            out["towers"] = sum(p.numel() for name, p in model.named_parameters()
                                if set(name.split(".")[:2]) & TOWER_MODULES)
            out["text_model"] = out["params"] - out["towers"]
        return out
    except Exception as exc:  # noqa: BLE001 — recorded, not dropped
        return {"class": getattr(model_cls, "__name__", str(model_cls)),
                "error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def count_preset(path: Path) -> dict[str, Any]:
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    preset = json.loads(path.read_text())
    raw = dict(preset["config"])
    entry: dict[str, Any] = {"model_type": raw.get("model_type"),
                             "architectures": raw.get("architectures")}
    if raw.pop("quantization_config", None) is not None:
        entry["quantization_config_dropped"] = True
    # remote code is never run: transformers' own class for the model_type (Kimi-K2.5's auto_map)
    for holder in (raw, raw.get("text_config"), raw.get("vision_config")):
        if isinstance(holder, dict) and holder.pop("auto_map", None) is not None:
            entry["auto_map_dropped"] = True
    model_type = raw.get("model_type")
    arch = (raw.get("architectures") or [None])[0]
    if model_type in CONFIG_MAPPING:
        config = CONFIG_MAPPING[model_type].from_dict(raw)
    elif arch and hasattr(transformers, arch):  # e.g. kimi_k2 ships DeepseekV3ForCausalLM
        config_cls = getattr(transformers, arch).config_class
        config = config_cls.from_dict({k: v for k, v in raw.items() if k != "model_type"})
        entry["config_class"] = f"{config_cls.__name__} (from architectures; model_type unknown)"
    else:
        entry["error"] = f"model_type {model_type!r} is not in this transformers' CONFIG_MAPPING"
        return entry
    entry["causal_lm"] = _count(AutoModelForCausalLM, config)
    multimodal = any(k in raw for k in ("text_config", "vision_config"))
    if multimodal and arch and not hasattr(transformers, arch):
        # a class name transformers spells otherwise (KimiK25… → Kimi_K25…): its own mapping's
        from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

        arch = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type, arch)
    if multimodal and arch and hasattr(transformers, arch):
        entry["architecture_class"] = _count(getattr(transformers, arch), config, towers=True)
    return entry


def main() -> None:
    import torch
    import transformers
    from transformers.utils import logging

    warnings.filterwarnings("ignore")
    logging.set_verbosity_error()
    models = {}
    for path in sorted(PRESETS.glob("*.json")):
        models[path.stem] = count_preset(path)
        print(path.stem, json.dumps(models[path.stem])[:200], flush=True)
    OUT.write_text(json.dumps({
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "method": "meta-device instantiation; sum(p.numel() for p in model.parameters())",
        "models": models,
    }, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
