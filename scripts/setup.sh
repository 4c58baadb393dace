#!/usr/bin/env bash
# Create .venv and install kernel-agent with everything its tests use. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Install torch on its own first: where a CPU build lies on disk (torch==2.13.0) take it, since a bare
# `torch` requirement would pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}" 2>/dev/null \
    || .venv/bin/python -m pip install -q "torch>=2.4"
fi
.venv/bin/python -m pip install -q --progress-bar off -e ".[dev]"
if [ -x scripts/install_llamacpp.sh ]; then bash scripts/install_llamacpp.sh; fi
