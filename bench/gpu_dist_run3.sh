#!/bin/bash
# Issues 21 and 24 on 2 GPUs of one host (device tool, nvidia-h100-x2), in priority order, each
# part skipped once the call's budget runs short:
#  1. accelerate's balanced MLP, alternated without and with `dlscope profile`, each run writing
#     every rank's own host time per phase (is rank 0 slower by itself, or under the profiler?);
#  2. FSDP2 as the suite runs it, profiled with FSDP2's defaults and with the fix
#     fsdp_exposed_gathers advises (--prefetch 2 --keep-last), and both measured untraced,
#     alternated (the rule's estimate against the setting's measured effect);
#  3. one job launched as two "hosts" of one GPU each (torchrun --nnodes 2), for `dlscope merge`,
#     and the same job in one launch.
# Everything is packed under $OUT.   (carry .whl)
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_VISIBLE_DEVICES=0,1
FINAL=${OUT:-/tmp/out}; W=/tmp/d3; mkdir -p "$FINAL" $W/prof
START=$(date +%s); BUDGET=${BUDGET:-540}
log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
P="python3 -m dlscope profile -f --quiet"
T=bench/advice_truth/dist_train.py
TR="python3 -m torch.distributed.run --nproc-per-node 2"
ACC="accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no"
nvidia-smi topo -m > $W/topo.txt 2>&1; lscpu > $W/lscpu.txt 2>&1

log "1. accelerate, alternated"
for r in 0 1; do
  timeout 90 $ACC bench/accelerate_train.py --steps 80 --times-out $W/acc_plain_$r > $W/acc_plain_$r.log 2>&1; echo "plain $r rc=$?"
  timeout 120 $P -o $W/prof/acc_$r.dlscope -- $ACC bench/accelerate_train.py --steps 80 --times-out $W/acc_prof_$r > $W/acc_prof_$r.log 2>&1; echo "prof $r rc=$?"
done
for r in 0 1; do
  python3 -m dlscope advise $W/prof/acc_$r.dlscope --format json > $W/acc_advise_$r.json 2>> $W/errors.log
  python3 -m dlscope stats $W/prof/acc_$r.dlscope --report rank_waits --format json > $W/acc_rank_waits_$r.json 2>> $W/errors.log
done

if [ "$(left)" -gt 200 ]; then
  log "2. FSDP2: profiled, then untraced alternated"
  FS="--fsdp --steps 30"
  timeout 120 $P -o $W/prof/fsdp_base.dlscope -- $TR $T $FS > $W/fsdp_base.log 2>&1; echo "fsdp base rc=$?"
  python3 -m dlscope advise $W/prof/fsdp_base.dlscope --format json > $W/fsdp_base_advise.json 2>> $W/errors.log
  for r in 0 1 2; do
    [ "$(left)" -gt 120 ] || break
    timeout 60 $TR $T --fsdp --steps 40 --times-out $W/fsdp_t_base_$r.json > /dev/null 2>&1; echo "base $r rc=$?"
    timeout 60 $TR $T --fsdp --steps 40 --prefetch 2 --keep-last --times-out $W/fsdp_t_fix_$r.json > /dev/null 2>&1; echo "fix $r rc=$?"
  done
  if [ "$(left)" -gt 150 ]; then
    timeout 120 $P -o $W/prof/fsdp_fix.dlscope -- $TR $T $FS --prefetch 2 --keep-last > $W/fsdp_fix.log 2>&1; echo "fsdp fix rc=$?"
    python3 -m dlscope advise $W/prof/fsdp_fix.dlscope --format json > $W/fsdp_fix_advise.json 2>> $W/errors.log
  fi
fi

if [ "$(left)" -gt 100 ]; then
  log "3. two launches of one GPU each, then one launch"
  ARGS="--steps 30"
  ( CUDA_VISIBLE_DEVICES=0 timeout 90 $P -o $W/prof/host0.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank 0 \
      --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29517 $T $ARGS > $W/host0.log 2>&1; echo "host0 rc=$?" ) &
  ( CUDA_VISIBLE_DEVICES=1 timeout 90 $P -o $W/prof/host1.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank 1 \
      --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29517 $T $ARGS > $W/host1.log 2>&1; echo "host1 rc=$?" ) &
  wait
  [ "$(left)" -gt 45 ] && { timeout 90 $P -o $W/prof/one.dlscope -- $TR $T $ARGS > $W/one.log 2>&1; echo "one rc=$?"; }
fi
log "packing"
tar czf "$FINAL/d3_results.tar.gz" -C $W $(cd $W && ls *.json *.log *.txt 2>/dev/null)
tar czf "$FINAL/d3_profiles.tar.gz" -C $W/prof .
log done
