#!/bin/bash
# Issues 21 and 22 on 2 GPUs of one host (device tool, nvidia-h100-x2):
#  1. a straggler whose slow Python runs *inside* the forward (a hook on the middle block of rank 1),
#     measured untraced against the balanced job (alternated), then profiled: the GPU-waits verdict
#     must name rank 1 with its real cost;
#  2. accelerate's balanced MLP profiled once more (no straggler expected);
#  3. the suite's launch-bound MLP on one GPU, plain and under `dlscope profile`, alternated: what
#     dlscope's hooks cost its untraced steps (try's arms carry them).
# Everything is packed under $OUT.   (carry .whl)
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_VISIBLE_DEVICES=0,1
FINAL=${OUT:-/tmp/out}; W=/tmp/d5; mkdir -p "$FINAL" $W/prof
START=$(date +%s); BUDGET=${BUDGET:-400}
log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
P="python3 -m dlscope profile -f --quiet"
T=bench/advice_truth/dist_train.py
TR="python3 -m torch.distributed.run --nproc-per-node 2"
SLOW="--slow-rank 1 --slow-where forward --python-ms 25"

log "1. in-forward straggler: truth, then profiled"
for r in 0 1; do
  timeout 60 $TR $T --steps 40 --times-out $W/fwd_t_balanced_$r.json > /dev/null 2>&1; echo "balanced $r rc=$?"
  timeout 60 $TR $T --steps 40 $SLOW --times-out $W/fwd_t_straggler_$r.json > /dev/null 2>&1; echo "straggler $r rc=$?"
done
timeout 120 $P -o $W/prof/fwd_straggler.dlscope -- $TR $T --steps 30 $SLOW > $W/fwd_straggler.log 2>&1; echo "profiled rc=$?"

if [ "$(left)" -gt 150 ]; then
  log "2. accelerate"
  timeout 100 $P -o $W/prof/acc_2.dlscope -- accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \
    --mixed_precision no --dynamo_backend no bench/accelerate_train.py --steps 80 --times-out $W/acc_prof_2 > $W/acc_2.log 2>&1; echo "acc rc=$?"
fi

log "3. the MLP, plain and under dlscope profile"
export CUDA_VISIBLE_DEVICES=0
M="bench/advice_truth/train.py --model mlp --steps 400"
for r in 0 1; do
  [ "$(left)" -gt 60 ] || break
  timeout 60 python3 $M --times-out $W/mlp_plain_$r.json > /dev/null 2>&1; echo "plain $r rc=$?"
  timeout 90 $P -o $W/prof/mlp_$r.dlscope -- python3 $M --times-out $W/mlp_prof_$r.json > /dev/null 2>&1; echo "prof $r rc=$?"
done
log "packing"
tar czf "$FINAL/d5_results.tar.gz" -C $W $(cd $W && ls *.json *.log 2>/dev/null)
tar czf "$FINAL/d5_profiles.tar.gz" -C $W/prof .
log done
