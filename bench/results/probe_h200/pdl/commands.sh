#!/usr/bin/env bash
# Third probe: split_kv's combine kernel as a programmatic dependent launch (PDL=1) against the plain
# launch (PDL=0), same configs, same process (bench/results/probe_h200/pdl/).
# Usage (repo root, on the GPU box): bash bench/results/probe_h200/pdl/commands.sh OUT_DIR (ran from the repo root; the record of this probe)
set -u
OUT=$1
mkdir -p "$OUT"
timeout 200 python3 bench/probe.py --out "$OUT/probe_pdl.json" --top 12 --task gqa_decode \
  --shapes B=1,S=32768 B=8,S=8192 B=32,S=4096 \
  --grid 'split_kv.py:SPLITS=1,2,4,16;BLOCK_S=128;num_warps=4;num_stages=3,4;PDL=0,1' 2>&1 | tee "$OUT/gqa_decode.log"
