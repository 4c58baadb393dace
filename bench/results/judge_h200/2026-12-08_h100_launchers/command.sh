# Launchers on the H200: the GPU test, add_rmsnorm off/on alternated (cold first), then the GPU tests with launchers on by default.
SECONDS=0; END=${END:-580}
source _devrun/pre.sh d1
O=$W/d1; mkdir -p $O; nvidia-smi > $O/nvidia-smi.txt
{ date -u; nproc; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; cat _devrun/commit; } > $O/env.txt
cp _devrun/d1.sh $O/command.sh
pack() { cp $W/gpu_memory_d1.csv $O/; tar czf $OUT/d1.tgz -C $O .; }
left() { local l=$(( END - SECONDS )); echo $(( l < $1 ? l : $1 )); }
gpu() { t=$(left $2); [ $t -lt 50 ] && { echo "skip $1"; return; }
  echo "=== $1 $(date +%T) ($t s)"; PACK= timeout $t bash bench/gpu_session.sh $O $1 2>&1 | tail -4; pack; }
run() {  # name variant timeout
  t=$(left $3); if [ $t -lt 40 ]; then echo "skip $1"; return; fi
  echo "=== $1 $(date +%T)"; timeout $t python3 bench/evaluator_bench.py --out $O/$1 --tasks "" --throughput 24 --throughput-variants $2 ${TASKARG:-} 2>&1 | tail -2
  cat ~/.cache/kernel-agent/*.json > $O/launcher_memory_after_$1.txt 2>&1; pack
}
echo "=== launcher test $(date +%T)"; timeout 70 python3 -m pytest tests/test_launcher_cache.py -m gpu -q -rA -p no:cacheprovider 2>&1 | tee $O/launcher-cache-tests.log | tail -3; pack
rm -rf ~/.cache/kernel-agent  # the first batch starts cold
run 1_off 15/5/15/grouped 85
run 2_on 15/5/15/grouped/launchers 85
run 3_off 15/5/15/grouped 85
run 4_on 15/5/15/grouped/launchers 85
# launchers on by default for the GPU tests (what would ship)
sed -i 's/prebuilt_launchers: bool = False/prebuilt_launchers: bool = True/' tools/judge_settings.py tools/evaluate.py
grep -n "prebuilt_launchers: bool" tools/judge_settings.py tools/evaluate.py > $O/tests_with_launchers_on.txt
gpu hardening-tests 150
gpu judge-tests 110
TASKARG="--throughput-task tests/fixtures/tasks/scale_shift_cpu_gen"
run 5_scale_on 15/5/15/grouped/launchers 60
echo "=== end $(date +%T) $SECONDS s"; pack
