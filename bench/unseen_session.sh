#!/usr/bin/env bash
# GPU measurements of the search on tasks nobody tuned it for, each part under a 10-minute command.
# Usage (repo root, on the GPU box): bash bench/unseen_session.sh OUT_DIR [parts...]
# parts: brute-TASK    every config of TASK's space (bench/brute_force.py, resumable: run the part again
#                      until it prints N/N; --retime 5 re-times the five fastest at the end)
#        run-TASK      python -m graph.run TASK --unattended on the GPU (the unattended policy answers every
#                      pause; held candidates stay failures); a run killed by the time limit is resumed by
#                      the same part
#        replay-TASK   the expert search replayed against OUT/brute/TASK.json (10 seeds; no GPU needed)
#        suite-TASK    the run's winner (OUT/runs/TASK) beside torch eager and a static per-shape
#                      torch.compile, timed in one process on both clocks (bench/suite.py --stages
#                      export,time --compile default, into OUT/suite.json)
#        summary       OUT/unseen.md: each run against its brute force, % of the same-size ceiling per shape
# TASK: add_rmsnorm softmax gqa_decode (tasks/) or colsum_cpu_gen stencil_cpu_gen scale_shift_cpu_gen
# (tests/fixtures/tasks/). With PACK=FILE.tgz set, OUT is packed into that file after every part. With
# SECONDS_LEFT=N, the parts together stop within N seconds (each part gets what is left; a resumable part
# goes on in the next call). With BRUTE_GPUS=N, a brute force runs a judge on each of N GPUs (the first N
# of CUDA_VISIBLE_DEVICES; tools/cluster.py) in chunks of 24 per GPU. bench/unseen_parallel.sh runs
# several of these sessions at once, each on GPUs of its own.
set -u
END=$(( $(date +%s) + ${SECONDS_LEFT:-100000} ))
left() { local l=$(( END - $(date +%s) )); echo $(( l < $1 ? l : $1 )); }
OUT=${1:?output folder}; shift
PARTS=${*:-summary}
CHUNK=$(( 24 * ${BRUTE_GPUS:-1} ))
mkdir -p "$OUT/brute" "$OUT/runs"
export PYTHONUNBUFFERED=1
folder() { if [ -d "tasks/$1" ]; then echo "tasks/$1"; else echo "tests/fixtures/tasks/$1"; fi; }
for part in $PARTS; do
  echo "=== $part"
  if [ "$(left 600)" -lt 30 ]; then echo "skipped: under 30 s left"; continue; fi
  case $part in
    brute-*) t=${part#brute-}; timeout "$(left 580)" python3 bench/brute_force.py "$(folder "$t")" --out "$OUT/brute/$t.json" \
               --chunk "$CHUNK" --retime 5 ${BRUTE_GPUS:+--cluster "local:$BRUTE_GPUS"} 2>&1 | tee -a "$OUT/brute/$t.log" | tail -5 ;;
    run-*) t=${part#run-}; run="$OUT/runs/$t"
           if [ -f "$run/checkpoints.sqlite" ]; then args=(--resume "$run"); else
             args=("$(folder "$t")" --device cuda --no-memory --run-dir "$run" --set budget.minutes="${RUN_MINUTES:-8}"); fi
           timeout "$(left 590)" python3 -m graph.run "${args[@]}" --unattended 2>&1 | tee -a "$OUT/runs/$t.log" | tail -8 ;;
    replay-*) t=${part#replay-}; python3 bench/replay_search.py "$OUT/brute/$t.json" --seeds 0-9 \
                2>&1 | tee "$OUT/brute/$t.replay.txt" | tail -3 ;;
    suite-*) t=${part#suite-}; timeout "$(left 590)" python3 bench/suite.py --out "$OUT" --tasks "$t" \
               --stages export,time --compile default 2>&1 | tee -a "$OUT/suite_$t.log" | tail -5 ;;
    summary) python3 bench/unseen_summary.py "$OUT" ;;
    *) echo "unknown part: $part" ;;
  esac
  if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$OUT" .; fi
done
