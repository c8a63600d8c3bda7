"""Dev-time truth for the context limit: run vLLM's own ``_get_and_verify_max_len`` on real configs.

Run with the venv of ``README.md`` here (vLLM 0.33.0 installed); CI never runs this file, it only
reads the JSON it writes (``tests/fixtures/vllm_truth/context_limits.json``), which
``tests/test_context_limit.py`` compares with ``Vllm.context_limit``.

vLLM's code, called as is: ``vllm/config/model.py`` ``_get_and_verify_max_len`` (with
``max_model_len=None``: the derived maximum a ``--max-model-len`` may not exceed) on the text config
transformers builds from the config.json, and the convertor's ``derive_max_model_len_and_key``
(``vllm/transformers_utils/model_arch_config_convertor.py``, the class vLLM picks per
``model_type`` from ``MODEL_ARCH_CONFIG_CONVERTORS``). Written here: reading the config files and
building the transformers config (``AutoConfig.for_model``), as ``ModelConfig`` would from the Hub.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import transformers
import vllm
from context_configs import ROOT, configs
from vllm.config.model import _get_and_verify_max_len
from vllm.transformers_utils.model_arch_config_convertor import (
    MODEL_ARCH_CONFIG_CONVERTORS,
    ModelArchConfigConvertorBase,
)

OUT = ROOT / "tests" / "fixtures" / "vllm_truth" / "context_limits.json"


def derived_max(config: dict) -> int | None:
    """vLLM 0.33's derived maximum for ``config``, or None when it takes any ``--max-model-len``."""
    hf = transformers.AutoConfig.for_model(**config)
    text = hf.get_text_config()
    convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(getattr(hf, "model_type", ""), ModelArchConfigConvertorBase)
    arch = SimpleNamespace(derived_max_model_len_and_key=convertor(hf, text).derive_max_model_len_and_key())
    if arch.derived_max_model_len_and_key[0] == float("inf"):
        return None
    return int(_get_and_verify_max_len(text, arch, None, None, False, None))


def main() -> None:
    cases, skipped = {}, {}
    for name, config in configs().items():
        try:
            cases[name] = {"config_source": name, "derived_max_model_len": derived_max(config)}
        except Exception as exc:  # noqa: BLE001 - a config this transformers cannot build is listed
            skipped[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
    OUT.write_text(json.dumps({
        "generator": "tools/vllm_truth/context_limits.py",
        "vllm": vllm.__version__, "transformers": transformers.__version__,
        "function": "vllm/config/model.py _get_and_verify_max_len(max_model_len=None)",
        "cases": cases, "skipped": skipped}, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases, {len(skipped)} skipped → {OUT}")


if __name__ == "__main__":
    main()
