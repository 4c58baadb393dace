#!/usr/bin/env bash
# One device session: every GPU measurement the repository commits, each part under its own time limit.
# Usage (repo root, on the GPU box): bash bench/gpu_session.sh OUT_DIR [parts...]
# parts: evaluator-tests bench throughput softmax ncu-cases ncu-tasks   (default: these six)
#   also: watchdog-test                        same-process re-time of two candidates (tests/test_watchdog.py -m gpu)
#         suite-search-TASK                    bench/suite.py search + export of one task (graph run <= 8 min;
#                                              SUITE_MINUTES and SUITE_SEARCH_TIMEOUT change the budget)
#         memory-two-runs                      two graph runs per task sharing a case library (tests/test_memory_graph.py)
#         suite-time-TASK                      bench/suite.py timing of one task: best, baseline, eager,
#                                              torch.compile per shape (default, max-autotune) and dynamic, the
#                                              task's library anchors, copy bandwidth, both clocks (Liger-Kernel
#                                              from .whl/: bench/anchors_session.sh installs it)
#         throughput-ab                        the same 24 configs under several PARALLEL/WARMUP/REP settings
#         hardening-tests                      the GPU-only hacks and faults (tests/test_hardening_gpu.py)
#         judge-tests                          every probe on the GPU, the re-measure against the judge's clock (tests/test_judge_gpu.py)
#         throughput-scale-shift               24 configs of tests/fixtures/tasks/scale_shift_cpu_gen (CPU-generator inputs, 352 M elements;
#                                              SCALE_VARIANTS as THROUGHPUT_VARIANTS for throughput-ab)
#         throughput-cluster                   the same 24 add_rmsnorm configs on this machine's judge and on --cluster local:1,
#                                              alternated CLUSTER_PAIRS times (default 2): one pair does not settle a ratio
#         throughput-profile                   the 24 add_rmsnorm configs with the judge under bench/judge_sampler.py
#         timing-duty                          one kernel timed by bench_ms and by the checked bench, steps one by one and as
#                                              graphs, interleaved (bench/timing_duty.py)
#         llm-transcript                       the scripted LLM add_rmsnorm transcript on the GPU (tests/test_llm_gpu.py)
#         profiles-tests                       known-bottleneck kernels profiled and classified (tests/test_profiles_gpu.py)
#   TASK: add_rmsnorm softmax gqa_decode. Suite parts accumulate into OUT/suite (suite.json, suite.md, roofline.png).
# With PACK=FILE.tgz set, OUT is packed into that file after every part (what a killed session keeps).
set -u
OUT=${1:?output folder}; shift
PARTS=${*:-evaluator-tests bench throughput softmax ncu-cases ncu-tasks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
  git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt"
for part in $PARTS; do
  echo "=== $part"
  case $part in
    evaluator-tests) timeout 100 python3 -m pytest tests/test_evaluator_gpu.py -q -p no:cacheprovider 2>&1 | tee "$OUT/evaluator-tests.log" | tail -15 ;;
    hardening-tests) timeout 300 python3 -m pytest tests/test_hardening_gpu.py -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/hardening-tests.log" | tail -15 ;;
    judge-tests) KA_RECORD_DIR="$OUT" timeout 300 python3 -m pytest tests/test_judge_gpu.py -m gpu -s -q -p no:cacheprovider 2>&1 | tee "$OUT/judge-tests.log" | tail -15 ;;
    throughput-scale-shift) timeout "${SCALE_TIMEOUT:-240}" python3 bench/evaluator_bench.py --out "$OUT/throughput-scale-shift" \
                              --tasks "" --throughput 24 --throughput-task tests/fixtures/tasks/scale_shift_cpu_gen \
                              ${SCALE_VARIANTS:+--throughput-variants "$SCALE_VARIANTS"} 2>&1 | tail -30 ;;
    throughput-cluster) pairs=$(for _ in $(seq "${CLUSTER_PAIRS:-2}"); do printf 'local,local:1,'; done)
                        timeout "${CLUSTER_TIMEOUT:-420}" python3 bench/evaluator_bench.py --out "$OUT/throughput-cluster" --tasks "" \
                          --throughput 24 --throughput-clusters "${pairs%,}" 2>&1 | tail -30 ;;
    throughput-profile) timeout 200 python3 bench/evaluator_bench.py --out "$OUT/throughput-profile" --tasks "" --throughput 24 \
                          --judge-profile "$OUT/throughput-profile/judge" 2>&1 | tail -8 ;;
    timing-duty) timeout 200 python3 bench/timing_duty.py --out "$OUT/timing-duty" 2>&1 | tail -15 ;;
    llm-transcript) timeout 300 python3 -m pytest tests/test_llm_gpu.py -m gpu -q -s -p no:cacheprovider 2>&1 | tee "$OUT/llm-transcript.log" | tail -20
                    cp tests/fixtures/transcripts/*.measured.json "$OUT/" 2>/dev/null ;;
    profiles-tests) timeout 200 python3 -m pytest tests/test_profiles_gpu.py -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/profiles-tests.log" | tail -15 ;;
    bench) timeout 300 python3 bench/evaluator_bench.py --out "$OUT/bench" --tasks add_rmsnorm,gqa_decode 2>&1 | tail -40 ;;
    bench-all) timeout 420 python3 bench/evaluator_bench.py --out "$OUT/bench" --tasks add_rmsnorm,gqa_decode,softmax 2>&1 | tail -60 ;;
    throughput) timeout 180 python3 bench/evaluator_bench.py --out "$OUT/throughput" --tasks "" --throughput 24 2>&1 | tail -8 ;;
    throughput-ab) timeout "${AB_TIMEOUT:-420}" python3 bench/evaluator_bench.py --out "$OUT/throughput" --tasks "" --throughput 24 \
                     --throughput-variants "${THROUGHPUT_VARIANTS:-15/5/15,24/5/15,12/10/30}" 2>&1 | tail -30 ;;
    softmax) timeout 300 python3 bench/evaluator_bench.py --out "$OUT/softmax" --tasks softmax --check-timeout 280 2>&1 | tail -25 ;;
    ncu-cases) timeout 200 python3 bench/ncu_fixtures.py --out "$OUT/ncu" --only cases 2>&1 | tail -20 ;;
    ncu-tasks) timeout 300 python3 bench/ncu_fixtures.py --out "$OUT/ncu" --only tasks 2>&1 | tail -20 ;;
    watchdog-test) timeout 200 python3 -m pytest tests/test_watchdog.py -m gpu -q -p no:cacheprovider 2>&1 | tail -15 ;;
    suite-search-*) timeout 590 python3 bench/suite.py --out "$OUT/suite" --tasks "${part#suite-search-}" \
                      --stages search,export --minutes "${SUITE_MINUTES:-8}" \
                      --search-timeout "${SUITE_SEARCH_TIMEOUT:-560}" 2>&1 | tail -5 ;;
    suite-time-*) timeout 590 python3 bench/suite.py --out "$OUT/suite" --tasks "${part#suite-time-}" \
                    --stages time 2>&1 | tail -30 ;;
    memory-two-runs) timeout 590 python3 -m pytest tests/test_memory_graph.py -m gpu -k two_runs_on_the_gpu -s -q \
                       -p no:cacheprovider 2>&1 | tee "$OUT/memory-two-runs.log" | grep -v "^$" | tail -12 ;;
    *) echo "unknown part: $part" ;;
  esac
  [ -n "${PACK:-}" ] && tar czf "$PACK" -C "$OUT" .
done
