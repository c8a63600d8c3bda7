"""The preset catalogue as ``kvplan models`` and the README table show it: per checkpoint its Hub
id, family, stored format, parameters, weights as stored and context length."""

from __future__ import annotations

from typing import Any

from kvplan.arch import ModelArch
from kvplan.engines.base import Engine
from kvplan.presets import load_model, model_presets, preset_family
from kvplan.weights import read_quantization, weights_per_gpu


def preset_format(arch: ModelArch) -> str:
    """The checkpoint's stored format in one word: its ``quantization_config`` method (``fp8``,
    ``mxfp4``, ``modelopt``, ``compressed-tensors``, ``gptq``, …) or the model dtype."""
    scheme = read_quantization(arch.weights.quantization, arch.model_dtype)
    return arch.model_dtype if scheme.method == "none" else scheme.method


def model_rows(engine: Engine) -> list[dict[str, Any]]:
    """One row per preset for ``kvplan models`` and the README table: Hub id, link id, family,
    stored format, parameters, the weights as stored (``weights_per_gpu`` at TP 1, the
    checkpoint's own format; bytes), the index ``total_size`` where known and the context length
    ``engine`` derives from the config (``Engine.context_limit``)."""
    rows: list[dict[str, Any]] = []
    for preset in model_presets().values():
        repo = preset.hf_repo
        arch = load_model(repo)
        layout = weights_per_gpu(arch)
        limit = engine.context_limit(arch)
        rows.append({"id": repo, "alias": preset.id, "aliases": list(preset.aliases),
                     "name": preset.name, "family": preset_family(preset),
                     "format": preset_format(arch), "format_label": layout.format_label,
                     "params_total": arch.params_total, "params_active": arch.params_active,
                     "weights_bytes": layout.total_bytes, "index_total_size": preset.index_total_size,
                     "context_length": limit.tokens if limit else None,
                     "layers": arch.n_layers, "kinds": arch.kind_counts(),
                     "source": preset.config_source})
    return rows
