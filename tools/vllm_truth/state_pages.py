"""The recurrent-state page of Mamba hybrids from vLLM's own model classes →
``tests/fixtures/vllm_truth/state_pages.json`` (dev-time only; the venv of ``README.md``).

``python tools/vllm_truth/state_pages.py`` (two minutes: importing the model files);
``tests/test_vllm_state_pages.py`` compares kvplan's per-layer state bytes with every case.

Called as is (vLLM 0.33.0): the architecture's config hook
(``model_executor/models/config.py`` ``MODELS_CONFIG_MAP[arch].verify_and_update_config``, e.g.
``NemotronHForCausalLMConfig``: ``mamba_ssm_cache_dtype`` from the config, else float32), the
model class's ``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config``
(``models/nemotron_h.py``, ``models/jamba.py``) and ``MambaSpec.page_size_bytes``
(``v1/kv_cache_interface.py``) on those shapes and dtypes — what ``MambaBase.get_kv_cache_spec``
(``layers/mamba/abstract.py``) hands the planner before the page is padded to the attention page.

Written here: ``vllm_config`` is a namespace with what those functions read — the TP size,
``cache_config`` (``mamba_cache_dtype`` / ``mamba_ssm_cache_dtype`` "auto" unless the case sets
one, no speculative tokens, no replay-SSM ring), ``model_config.dtype`` (bf16) and ``hf_config``
(transformers' config class for the model type, built from the config.json with ``for_model``).
Cases: Nemotron-3-Nano-30B-A3B (Mamba-2, ``tests/fixtures/vllm_truth/configs``) and
Jamba-1.5-Mini (Mamba-1, the preset) and the Nemotron config without ``mamba_ssm_cache_dtype``, at
TP 1, 2, 4 and 8, each with the SSM cache dtype "auto" and an explicit bfloat16 / float32 — 36.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fixtures/vllm_truth/state_pages.json"
MODELS = {
    "nemotron-3-nano-30b-a3b": ("tests/fixtures/vllm_truth/configs/nemotron-3-nano-30b-a3b.json", None),
    "jamba-1.5-mini": ("presets/models/jamba-1.5-mini.json", "config"),
}
#: Variants: the Nemotron config without its ``mamba_ssm_cache_dtype`` (older Nemotron-H
#: checkpoints set none: the hook's default applies).
DROP = {"nemotron-3-nano-30b-a3b|no-ssm-key": ("nemotron-3-nano-30b-a3b", "mamba_ssm_cache_dtype")}
#: The vLLM model file of each architecture (``models/registry.py``).
MODEL_FILES = {"NemotronHForCausalLM": "vllm.model_executor.models.nemotron_h",
               "JambaForCausalLM": "vllm.model_executor.models.jamba"}
TPS = (1, 2, 4, 8)
SSM_DTYPES = ("auto", "bfloat16", "float32")


def load(path: str, key: str | None) -> dict:
    data = json.loads((ROOT / path).read_text(encoding="utf-8"))
    config = data[key] if key else data
    return {k: v for k, v in config.items() if not k.startswith("_")}


def main() -> None:
    import torch
    import transformers
    import vllm
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP
    from vllm.v1.kv_cache_interface import MambaSpec

    logging.disable(logging.WARNING)
    cases = []
    runs = [(m, load(p, k)) for m, (p, k) in MODELS.items()]
    runs += [(name, {k: v for k, v in load(*MODELS[base]).items() if k != drop})
             for name, (base, drop) in DROP.items()]
    for model, config in runs:
        arch = config["architectures"][0]
        cls = getattr(importlib.import_module(MODEL_FILES[arch]), arch)
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **{
            k: v for k, v in config.items() if k not in {"model_type", "auto_map"}})
        hook = MODELS_CONFIG_MAP.get(arch)
        for tp in TPS:
            for ssm in SSM_DTYPES:
                cache = SimpleNamespace(mamba_cache_dtype="auto", mamba_ssm_cache_dtype=ssm,
                                        use_replayssm=False)
                vcfg = SimpleNamespace(
                    parallel_config=SimpleNamespace(tensor_parallel_size=tp),
                    cache_config=cache, num_speculative_tokens=0,
                    model_config=SimpleNamespace(hf_config=hf_config, hf_text_config=hf_config,
                                                 dtype=torch.bfloat16),
                    speculative_config=None)
                if hook is not None and hasattr(hook, "update_mamba_ssm_cache_dtype"):
                    hook.update_mamba_ssm_cache_dtype(cache_config=cache, hf_config=hf_config)
                shapes = cls.get_mamba_state_shape_from_config(vcfg)
                dtypes = cls.get_mamba_state_dtype_from_config(vcfg)
                spec = MambaSpec(shapes=tuple(tuple(s) for s in shapes), dtypes=tuple(dtypes),
                                 block_size=16, mamba_cache_mode="none")
                cases.append({
                    "id": f"{model}|tp{tp}|ssm-{ssm}", "model": model, "tp": tp,
                    "mamba_ssm_cache_dtype": ssm, "resolved_ssm_cache_dtype": cache.mamba_ssm_cache_dtype,
                    "model_class": cls.__name__, "shapes": [list(s) for s in shapes],
                    "dtypes": [str(d).removeprefix("torch.") for d in dtypes],
                    "page_size_bytes": spec.page_size_bytes})
                print(cases[-1]["id"], cases[-1]["shapes"], cases[-1]["dtypes"], spec.page_size_bytes,
                      flush=True)
    out = {"generator": "tools/vllm_truth/state_pages.py", "vllm_version": vllm.__version__,
           "torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "sources": {m: p for m, (p, _) in MODELS.items()},
           "variants": {name: f"{base} without {drop}" for name, (base, drop) in DROP.items()},
           "cases": cases}
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
