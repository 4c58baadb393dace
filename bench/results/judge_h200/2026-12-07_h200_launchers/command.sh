# The device call's command (repo root at commit 4796b91; old/ is the tree of commit 8771328 beside it).
# Before it: the graph's wheels installed into /tmp/site (PYTHONPATH), and GPU memory logged each second:
#   nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 1 > $W/gpu_memory_d1.csv
W=/tmp/w; mkdir -p $W
O=$W/d1; mkdir -p $O; nvidia-smi > $O/nvidia-smi.txt
{ date -u; nproc; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; git rev-parse HEAD; } > $O/env.txt
pack() { cp $W/gpu_memory_d1.csv $O/; tar czf $OUT/d1.tgz -C $O .; }
left() { local l=$(( ${END:-585} - SECONDS )); echo $(( l < $1 ? l : $1 )); }
gpu() { t=$(left 300); [ $t -lt 60 ] && { echo "skip $1"; return; }
  echo "=== $1 $(date +%T) ($t s)"; timeout $t bash bench/gpu_session.sh $O $1 2>&1 | tail -4; pack; }
run() {  # name code-dir variant timeout
  t=$(left $4); if [ $t -lt 40 ]; then echo "skip $1"; return; fi
  echo "=== $1 $(date +%T)"; (cd $2 && timeout $t python3 bench/evaluator_bench.py --out $O/$1 --tasks "" --throughput 24 --throughput-variants $3 ${TASKARG:-} 2>&1 | tail -2)
  ls ~/.cache/kernel-agent/ > $O/launcher_memory_after_$1.txt 2>&1; cat ~/.cache/kernel-agent/*.json >> $O/launcher_memory_after_$1.txt 2>&1; pack
}
echo "=== launcher test $(date +%T)"; timeout 90 python3 -m pytest tests/test_launcher_cache.py -m gpu -q -rA -p no:cacheprovider 2>&1 | tee $O/launcher-cache-tests.log | tail -3
gpu judge-tests
rm -rf ~/.cache/kernel-agent  # the first batch starts cold
run 1_new_grouped . 15/5/15/grouped 95
run 2_old_grouped old 15/5/15/grouped 95
run 3_new_grouped . 15/5/15/grouped 95
run 4_new_early . 15/5/15/early 95
TASKARG="--throughput-task tests/fixtures/tasks/scale_shift_cpu_gen"
run 5_scale_new_grouped . 15/5/15/grouped 70
TASKARG=""
gpu hardening-tests
