#!/usr/bin/env bash
# Dev-time only: a virtualenv with CPU torch and the SGLang 0.5.23 wheel, everything after torch
# installed with --no-deps so nothing can pull SGLang's pinned CUDA torch (torch==2.14.1 + cu13
# wheels, several GB). The list below is what the import path of ServerArgs, ModelConfig,
# KVCacheConfigurator and the pool configurators needs, each added when an import failed.
#   tools/sglang_truth/setup.sh      # creates $SGLANG_TRUTH_VENV (default below)
set -euo pipefail
VENV=${SGLANG_TRUTH_VENV:-/work/scratch/sglang/venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
pip_install() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
pip_install "torch==2.13.0"   # the CPU build from the machine's local wheel directory
pip_install --no-deps "sglang==0.5.23"
# SGLang's own pins where it has them (transformers, tokenizers); the rest are light
# pure-Python packages (or small compiled ones without a torch dependency).
pip_install --no-deps \
  "transformers==5.19.0" "tokenizers==0.23.2" "huggingface_hub==1.33.0" "hf-xet==1.8.0" \
  "safetensors==0.8.0" "filelock==4.3.1" "fsspec==2026.9.0" "numpy==2.4.6" "packaging==26.4" \
  "PyYAML==6.0.4" "regex==2026.11.19" "requests==2.34.2" "urllib3==2.8.0" "idna==3.20" \
  "certifi==2026.10.19.post1" "charset-normalizer==3.5.3" "tqdm==4.70.1" "typer==0.29.2" \
  "click==8.5.1" "rich==15.0.0" "markdown-it-py==4.3.0" "mdurl==0.1.2" "Pygments==2.21.0" \
  "shellingham==1.5.4" "annotated-doc==0.0.7" "httpx==0.28.1" "httpcore==1.0.9" "h11==0.16.0" \
  "anyio==4.16.0" "sniffio==1.3.1" "psutil==7.2.2" "pydantic==2.14.4" "pydantic_core==2.50.5" \
  "annotated-types==0.8.0" "typing-inspection==0.4.5" "orjson==3.13.0" "msgspec==0.23.0" \
  "pybase64==1.5.1" "setproctitle==1.3.8" "pillow==13.0.0" "starlette==1.10.0" \
  "pyzmq==27.3.0" "dill==0.4.1" \
  "aiohttp==3.14.5" "aiohappyeyeballs==2.7.1" "aiosignal==1.4.0" "attrs==26.1.0" \
  "frozenlist==1.8.0" "multidict==7.2.1" "propcache==0.5.4" "yarl==1.25.1" \
  "ipython==9.18.1" "ipython_pygments_lexers==1.1.1" "traitlets==5.16.1" "jedi==0.20.1" \
  "parso==0.8.7" "matplotlib-inline==0.2.2" "prompt_toolkit==3.0.53" "wcwidth==0.9.4" \
  "stack-data==0.6.3" "asttokens==3.0.2" "executing==2.3.0" "pure_eval==0.2.4" \
  "pexpect==4.9.0" "ptyprocess==0.7.0" "decorator==5.3.1" \
  "apache-tvm-ffi==0.1.11" "sentencepiece==0.2.1" "compressed-tensors==0.18.0" "gguf==0.19.0" \
  "loguru==0.7.3"
# torchvision is NOT installed: PyPI's wheels are built against CUDA torch and fail to register
# their ops on CPU torch 2.13; generate.py stubs it (only multimodal helpers import it).
# triton: imported at module level by sglang/srt/utils/common.py; it imports without a GPU.
pip_install --no-deps "triton==3.8.0"
"$VENV/bin/python" - <<'PY'
import sglang, torch, transformers
assert torch.__version__.startswith("2.13.0") and "+cpu" in torch.__version__, torch.__version__
print("sglang", sglang.__version__, "torch", torch.__version__, "transformers", transformers.__version__)
PY
