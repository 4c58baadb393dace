#!/usr/bin/env bash
# Where split_kv's time goes at B=8 (bench/results/probe_h200/gqa_parts/).
# Usage (repo root, on the GPU box): bash bench/results/probe_h200/gqa_parts/commands.sh OUT_DIR [STEP...]
# Steps: parts (split / combine / whole over S), timeline (per-program %globaltimer stamps), ncu.
set -u
OUT=$1
shift
STEPS=${*:-parts timeline ncu}
D=bench/results/probe_h200/gqa_parts
mkdir -p "$OUT"
for step in $STEPS; do
  case $step in
    parts) timeout 200 python3 $D/parts.py "$OUT/parts.json" 2>&1 | tee "$OUT/parts.log" ;;
    timeline) timeout 200 python3 $D/timeline.py "$OUT/timeline.json" 2>&1 | tee "$OUT/timeline.log" ;;
    ncu) timeout 150 ncu --clock-control none --kernel-name regex:gqa_ --launch-skip 2 --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section LaunchStats --section SchedulerStats python3 $D/ncu_target.py > "$OUT/ncu.txt" 2>&1 ;;
  esac
done
