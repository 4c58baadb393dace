#!/usr/bin/env bash
# The kernel probes behind the example tasks' variants and search spaces (bench/results/probe_h200.md).
# Usage (repo root, on the GPU box): bash bench/probe_session.sh OUT_DIR
set -u
OUT=$1
mkdir -p "$OUT"
P="python3 bench/probe.py --out $OUT/probe.json"
timeout 200 $P --task add_rmsnorm --dtypes bfloat16 --shapes M=4096,N=4096 M=4096,N=8192 M=16384,N=4096 \
  --grid 'baseline.py:ROWS=1,2;num_warps=4,8,16' --grid 'multirow.py:ROWS=2,4;num_warps=4,8,16' \
  --grid 'persistent.py:PROGRAMS=264,528,1056;STAGES=1,3;num_warps=4,8,16' 2>&1 | tee "$OUT/add_rmsnorm.log"
timeout 200 $P --task gqa_decode --shapes B=1,S=32768 B=8,S=8192 \
  --grid 'split_kv.py:SPLITS=16,32,64,128,256;BLOCK_S=64,128;num_warps=4,8;num_stages=2,3' 2>&1 | tee "$OUT/gqa_decode.log"
timeout 100 $P --task softmax --shapes M=4096,N=4096 --grid 'baseline.py:num_warps=4,8,16,32' \
  --grid 'multirow.py:ROWS=1,2,4,8;num_warps=2,4,8,16' 2>&1 | tee "$OUT/softmax_short.log"
timeout 200 $P --task softmax --shapes M=8192,N=32768 M=2048,N=131072 --grid 'baseline.py:num_warps=16,32' \
  --grid 'online.py:BLOCK_N=4096,8192,16384;PROGRAMS=132,264,65536;num_warps=8,16,32' \
  --grid 'split_row.py:SPLITS=8,16;BLOCK_N=2048,4096;num_warps=8,16' 2>&1 | tee "$OUT/softmax_long.log"
