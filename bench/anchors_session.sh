#!/usr/bin/env bash
# The suite against fair anchors, on the GPU box, unattended: our exported kernels beside torch eager,
# torch.compile compiled per shape (static, default and max-autotune) and once over all shapes (dynamic),
# Liger-Kernel and torch SDPA, on the device clock and the user's clock; then the exported modules' host
# cost and the GPU tests of what their docstrings promise.
#
# Usage (repo root, on the GPU box): bash bench/anchors_session.sh DEST [parts...]
#   DEST   the suite folder to write (suite.json, suite.md, roofline.png, kernels/, export_overhead.*);
#          when it holds no suite.json it starts as a copy of bench/results/suite_h200 (run folders
#          and the searches' facts), so a session can write DEST=$OUT/suite_h200 and the result is
#          copied back over bench/results/suite_h200.
#   parts  default, in order: install export time-add_rmsnorm time-softmax time-gqa_decode overhead gpu-tests
#          install    Liger-Kernel and pydantic from .whl/ (the box is offline) into $ANCHORS_SITE
#                     (default /tmp/anchors_site), each only where it does not import yet
#          export     each task's committed run exported again as DEST/kernels/TASK.py
#          time-TASK  the suite's time stage for TASK (resumes a killed one: its rows are kept)
#          overhead   bench/export_overhead.py on DEST/kernels -> DEST/export_overhead.{md,json}
#          gpu-tests  tests/test_export_gpu.py and tests/test_anchors_gpu.py
# Each part runs under its own time limit; "install" is cheap and skipped once the imports work, so
# run it first in every session (a fresh box has nothing). Logs: DEST/session.log.
set -u
DEST=${1:?destination folder}; shift
PARTS=${*:-install export time-add_rmsnorm time-softmax time-gqa_decode overhead gpu-tests}
SITE=${ANCHORS_SITE:-/tmp/anchors_site}
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ ! -f "$DEST/suite.json" ]; then
  mkdir -p "$DEST" && cp -r bench/results/suite_h200/. "$DEST/"
fi
LOG="$DEST/session.log"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
  git rev-parse HEAD 2>/dev/null; } >> "$LOG" 2>&1
for part in $PARTS; do
  echo "=== $part" | tee -a "$LOG"
  case $part in
    install) python3 -c "import pydantic" 2>/dev/null || python3 -m pip install -q --no-deps --no-index \
               --target "$SITE" .whl/pydantic*.whl .whl/typing_*.whl .whl/annotated_types*.whl 2>&1 | tee -a "$LOG"
             python3 -c "import liger_kernel" 2>/dev/null || python3 -m pip install -q --no-deps --no-index \
               --target "$SITE" .whl/liger_kernel-*.whl 2>&1 | tee -a "$LOG"
             python3 -c "import importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'), 'pydantic', m.version('pydantic'))" 2>&1 | tee -a "$LOG" ;;
    export) timeout 120 python3 bench/suite.py --out "$DEST" --stages export 2>&1 | tee -a "$LOG" | grep -v "^|" | tail -5 ;;
    time-*) timeout 590 python3 bench/suite.py --out "$DEST" --tasks "${part#time-}" --stages time 2>&1 \
              | tee -a "$LOG" | grep "timed\|error" | tail -5 ;;
    overhead) timeout 300 python3 bench/export_overhead.py --kernels "$DEST/kernels" --out "$DEST" 2>&1 | tee -a "$LOG" | tail -40 ;;
    gpu-tests) timeout 300 python3 -m pytest tests/test_export_gpu.py tests/test_anchors_gpu.py -m gpu -q -rA \
                 -p no:cacheprovider 2>&1 | tee -a "$LOG" | tail -15 ;;
    *) echo "unknown part: $part" | tee -a "$LOG" ;;
  esac
done
