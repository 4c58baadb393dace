# #19 on the H200: the unattended runs of softmax and gqa_decode (3 minutes each), against the committed brute forces.
SECONDS=0
source _devrun/pre.sh d2
O=$W/d2; mkdir -p $O/brute; cp bench/results/unseen_h200/brute/*.json $O/brute/
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; cat _devrun/commit; } > $O/env.txt
cp _devrun/d2.sh $O/command.sh
SECONDS_LEFT=${LEFT:-560} RUN_MINUTES=3 PACK=$OUT/d2.tgz bash bench/unseen_session.sh $O run-softmax run-gqa_decode summary 2>&1 | tail -30
cp $W/gpu_memory_d2.csv $O/; tar czf $OUT/d2.tgz -C $O .
