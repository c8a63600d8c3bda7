"""Dev-time truth for SGLang's context limit: run SGLang's own ``get_context_length`` on real configs.

Run with the venv of ``setup.sh`` here (``/work/scratch/sglang/venv2/bin/python
tools/sglang_truth/context_limits.py``); CI only reads ``tests/fixtures/sglang/context_limits.json``,
which ``tests/test_context_limit.py`` compares with ``SGLang.context_limit``.

SGLang's code, called as is: ``sglang/srt/utils/hf_transformers/common.py`` ``get_hf_text_config``
and ``get_context_length`` (what ``configs/model_config.py`` ``_derive_context_length`` refuses
above). Written here: the transformers config built from each config.json
(``AutoConfig.for_model``); the configs are those of ``tools/vllm_truth/context_limits.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "sglang" / "context_limits.json"
sys.path[:0] = [str(ROOT / "tools" / "sglang_truth"), str(ROOT / "tools" / "vllm_truth")]

from generate import install_stubs  # noqa: E402  (this folder's generator: the GPU stubs)


def main() -> None:
    sglang = install_stubs()
    import transformers
    from context_configs import configs  # presets, vendored configs, the test's cases
    from sglang.srt.utils.hf_transformers.common import get_context_length, get_hf_text_config

    cases, skipped = {}, {}
    for name, config in configs().items():
        try:
            text = get_hf_text_config(transformers.AutoConfig.for_model(**config))
            cases[name] = {"config_source": name, "context_length": int(get_context_length(text))}
        except Exception as exc:  # noqa: BLE001 - a config this transformers cannot build is listed
            skipped[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
    OUT.write_text(json.dumps({
        "generator": "tools/sglang_truth/context_limits.py", "sglang": sglang.__version__,
        "transformers": transformers.__version__,
        "function": "sglang/srt/utils/hf_transformers/common.py get_context_length(get_hf_text_config)",
        "cases": cases, "skipped": skipped}, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases, {len(skipped)} skipped → {OUT}")


if __name__ == "__main__":
    main()
