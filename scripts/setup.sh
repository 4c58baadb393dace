#!/usr/bin/env bash
# Create .venv with what the main job needs (python -m graph.run with the expert policy). Idempotent.
# The test command (scripts/test.sh) adds the rest: memory, Studio, anchors, cluster, the local GGUF
# model and the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Install torch on its own first: where a CPU build lies on disk (torch==2.13.0) take it, since a bare
# `torch` requirement would pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q --progress-bar off "torch==${TORCH_VERSION:-2.13.0}" 2>/dev/null \
    || .venv/bin/python -m pip install -q --progress-bar off "torch>=2.4"
fi
if ! .venv/bin/python -c "import langgraph.checkpoint.sqlite, triton, matplotlib, tools.evaluate" 2>/dev/null; then
  .venv/bin/python -m pip install -q --progress-bar off -e .
fi
