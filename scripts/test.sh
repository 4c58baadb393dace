#!/usr/bin/env bash
# Run the test suite: sets up .venv (scripts/setup.sh), adds what only the tests use (memory, Studio,
# anchors, cluster, pytest, ruff, llama-cpp-python and its GGUF model), then ruff and pytest.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! .venv/bin/python -c "import chromadb, sentence_transformers, langgraph_sdk, liger_kernel, distributed, pytest_timeout" 2>/dev/null \
  || [ ! -x .venv/bin/ruff ]; then
  .venv/bin/python -m pip install -q --progress-bar off -e ".[dev]"
fi
bash scripts/install_llamacpp.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
