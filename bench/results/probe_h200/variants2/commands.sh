#!/usr/bin/env bash
# Second probe: the register-prefetch kernels with the next loads issued before the wait on the
# current ones, and online.py's tile prefetch (bench/results/probe_h200/variants2/).
# Usage (repo root, on the GPU box): bash bench/results/probe_h200/variants2/commands.sh OUT_DIR (ran from the repo root; the record of this probe)
set -u
OUT=$1
mkdir -p "$OUT"
P="python3 bench/probe.py --out $OUT/probe_variants2.json --top 6"
timeout 200 $P --task softmax --shapes M=8192,N=32768 M=4096,N=4096 M=2048,N=131072 \
  --grid 'prefetch.py:PROGRAMS=132,264;num_warps=16,32' --grid 'baseline.py:num_warps=16,32' \
  --grid 'online.py:BLOCK_N=2048,4096,8192,16384;PROGRAMS=132,264;num_warps=8,16,32' 2>&1 | tee "$OUT/softmax.log"
timeout 120 $P --task add_rmsnorm --dtypes bfloat16 --shapes M=4096,N=4096 M=4096,N=8192 \
  --grid 'prefetch.py:PROGRAMS=132,264,528;num_warps=8,16' \
  --grid 'baseline.py:ROWS=1;num_warps=8,16' 2>&1 | tee "$OUT/add_rmsnorm.log"
