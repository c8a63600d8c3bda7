#!/usr/bin/env bash
# Dev-time venv for the conformance generator (never used by CI).
# torch 2.13.0 is the CPU build available from the local wheel cache; do not change it.
set -euo pipefail
VENV="${KVPLAN_CONF_VENV:-/work/scratch/conf/venv}"
TRANSFORMERS_VERSION="5.24.0"
TORCH_VERSION="2.13.0"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "torch==${TORCH_VERSION}"
"$VENV/bin/pip" install --quiet "transformers==${TRANSFORMERS_VERSION}" accelerate
"$VENV/bin/python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
