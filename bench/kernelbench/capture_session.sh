#!/usr/bin/env bash
# Inductor's code for the KernelBench-format problems, captured on the GPU and checked there, in parts
# that each fit a 10-minute command.
# Usage (repo root, on the GPU box): bash bench/kernelbench/capture_session.sh OUT [parts...]
# parts: capture-GROUP   import the group's problems into OUT/tasks, capture every listed shape and the
#                        general kernels into OUT/inductor (python -m tools.inductor_capture)
#        eval-GROUP      convert each capture (python -m tools.inductor_import) and run the candidate
#                        through the evaluator on cuda at torch.compile's own config: OUT/eval/NAME.json
# GROUP: a (01-07), b (08-14), c (17-20), gemm (15-16: matmuls, captured with Triton GEMM templates).
# Default: capture-a capture-b capture-c capture-gemm. Commit OUT/inductor/*.json as tests/fixtures/inductor/.
set -u
OUT=${1:?output folder}; shift
PARTS=${*:-capture-a capture-b capture-c capture-gemm}
mkdir -p "$OUT/tasks" "$OUT/inductor" "$OUT/eval" "$OUT/candidates"
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
  git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt"
group() {
  case $1 in
    a) echo 01 02 03 04 05 06 07 ;;
    b) echo 08 09 10 11 12 13 14 ;;
    c) echo 17 18 19 20 ;;
    gemm) echo 15 16 ;;
    *) echo "unknown group $1" >&2; return 1 ;;
  esac
}
for part in $PARTS; do
  echo "=== $part"
  numbers=$(group "${part#*-}") || continue
  problems=$(for n in $numbers; do ls bench/kernelbench/problems/${n}_*.py; done)
  names=$(for p in $problems; do basename "$p" .py; done)
  case $part in
    capture-*)
      python3 -m tools.kernelbench $problems --out "$OUT/tasks" >> "$OUT/import.log" 2>&1
      timeout 570 python3 -m tools.inductor_capture $(for n in $names; do echo "$OUT/tasks/$n"; done) \
        --out "$OUT/inductor" --shapes all 2>&1 | tee -a "$OUT/capture.log" | grep -v Warning | tail -40 ;;
    eval-*)
      for n in $names; do
        python3 -m tools.inductor_import "$OUT/inductor/$n.json" --out "$OUT/candidates/$n.py" > "$OUT/candidates/$n.space.json" \
          || { echo "$n: not converted"; continue; }
        timeout 150 python3 -m tools.evaluate "$OUT/tasks/$n" "$OUT/candidates/$n.py" --module inductor.py --config '{}' \
          --device cuda --json > "$OUT/eval/$n.json" 2> "$OUT/eval/$n.log"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['verdict'], r.get('error_type'), (r.get('message') or '')[:160])" \
          "$OUT/eval/$n.json" "$n" 2>/dev/null || echo "$n: evaluation failed (see $OUT/eval/$n.log)"
      done ;;
    *) echo "unknown part $part" ;;
  esac
done
