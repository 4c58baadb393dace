#!/usr/bin/env bash
# The probe behind the register-prefetch (softmax, add_rmsnorm) and stream-K (gqa_decode) variants:
# each new variant's grid beside the configs that won before (bench/results/probe_h200/).
# Usage (repo root, on the GPU box): bash bench/results/probe_h200/variants/commands.sh OUT_DIR (ran from the repo root; the record of this probe)
set -u
OUT=$1
mkdir -p "$OUT"
P="python3 bench/probe.py --out $OUT/probe_variants.json --top 6"
timeout 240 $P --task gqa_decode --shapes B=1,S=32768 B=8,S=8192 B=32,S=4096 \
  --grid 'streamk.py:PROGRAMS=132,264,396;BLOCK_S=32,64,128;num_warps=4,8;num_stages=2,3' \
  --grid 'split_kv.py:SPLITS=1,2,16;BLOCK_S=128;num_warps=4;num_stages=3,4' 2>&1 | tee "$OUT/gqa_decode.log"
timeout 150 $P --task softmax --shapes M=8192,N=32768 M=4096,N=4096 \
  --grid 'prefetch.py:PROGRAMS=132,264,396,528;num_warps=4,8,16,32' \
  --grid 'baseline.py:num_warps=8,16,32' --grid 'multirow.py:ROWS=1,2;num_warps=4,8' 2>&1 | tee "$OUT/softmax.log"
timeout 150 $P --task add_rmsnorm --dtypes bfloat16 --shapes M=4096,N=4096 M=4096,N=8192 M=16384,N=4096 \
  --grid 'prefetch.py:PROGRAMS=132,264,396,528;num_warps=4,8,16' \
  --grid 'baseline.py:ROWS=1;num_warps=8,16' 2>&1 | tee "$OUT/add_rmsnorm.log"
