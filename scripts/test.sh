#!/usr/bin/env bash
# Run the test suite (sets up .venv first if needed). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c "import tools.evaluate, langgraph, chromadb" 2>/dev/null; then
  bash scripts/setup.sh
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
