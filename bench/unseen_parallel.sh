#!/usr/bin/env bash
# Several unseen sessions at once on one multi-GPU machine, each on GPUs of its own.
# Usage (repo root, on the GPU box): bash bench/unseen_parallel.sh OUT_DIR "GPUS:PARTS" ["GPUS:PARTS" ...]
#   GPUS: one GPU (3) or a range (0-5); a range runs its brute forces with a judge on each GPU
#   PARTS: bench/unseen_session.sh's parts, run in order on those GPUs
# e.g. bash bench/unseen_parallel.sh OUT "0-5:brute-gqa_decode" "6:brute-softmax" "7:run-softmax"
# Each group logs to OUT/group_GPUS.log; SECONDS_LEFT bounds every group. Timings of groups that share the
# machine's CPUs are fair for their kernels (device clock) but not for the user's clock: time anchors
# (suite-TASK) with the machine to themselves.
set -u
OUT=${1:?output folder}; shift
[ $# -ge 1 ] || { echo "usage: bash bench/unseen_parallel.sh OUT_DIR GPUS:PARTS ..." >&2; exit 2; }
mkdir -p "$OUT"
pids=()
for group in "$@"; do
  gpus=${group%%:*}; parts=${group#*:}
  case $gpus in
    *-*) first=${gpus%-*}; last=${gpus#*-}; list=$(seq -s, "$first" "$last"); count=$(( last - first + 1 )) ;;
    *) list=$gpus; count=1 ;;
  esac
  if [ "$count" -gt 1 ]; then brute=$count; else brute=""; fi
  # shellcheck disable=SC2086 # parts are words
  CUDA_VISIBLE_DEVICES=$list BRUTE_GPUS=$brute PACK="" bash bench/unseen_session.sh "$OUT" $parts \
    > "$OUT/group_$gpus.log" 2>&1 &
  pids+=($!)
  echo "group $gpus (CUDA_VISIBLE_DEVICES=$list): $parts"
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
tail -n 4 "$OUT"/group_*.log
exit $status
