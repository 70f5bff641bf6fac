#!/bin/bash
# Issue 24 on the 4-GPU host (device tool, nvidia-h100-x4), in priority order, each part skipped
# once the call's budget runs short:
#  1. FSDP2 on 4 GPUs, profiled with FSDP2's defaults and with the fix fsdp_exposed_gathers
#     advises (--prefetch 2 --keep-last), and both measured untraced, alternated;
#  2. one job launched as two "hosts" of two GPUs each (torchrun --nnodes 2, every GPU visible to
#     both, the second launch on GPUs 2-3 by --gpu-offset), for `dlscope merge`, and the same job
#     in one launch.
# Everything is packed under $OUT.   (carry .whl)
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/out}; W=/tmp/d4; mkdir -p "$FINAL" $W/prof
START=$(date +%s); BUDGET=${BUDGET:-540}
log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
P="python3 -m dlscope profile -f --quiet"
T=bench/advice_truth/dist_train.py
TR="python3 -m torch.distributed.run --nproc-per-node 4"
nvidia-smi topo -m > $W/topo4.txt 2>&1

log "1. FSDP2 on 4 GPUs: profiled, then untraced alternated"
FS="--fsdp --steps 30"
timeout 150 $P -o $W/prof/fsdp4_base.dlscope -- $TR $T $FS > $W/fsdp4_base.log 2>&1; echo "fsdp4 base rc=$?"
for r in 0 1 2; do
  [ "$(left)" -gt 200 ] || break
  timeout 70 $TR $T --fsdp --steps 40 --times-out $W/fsdp4_t_base_$r.json > /dev/null 2>&1; echo "base $r rc=$?"
  timeout 70 $TR $T --fsdp --steps 40 --prefetch 2 --keep-last --times-out $W/fsdp4_t_fix_$r.json > /dev/null 2>&1; echo "fix $r rc=$?"
done
if [ "$(left)" -gt 190 ]; then
  timeout 150 $P -o $W/prof/fsdp4_fix.dlscope -- $TR $T $FS --prefetch 2 --keep-last > $W/fsdp4_fix.log 2>&1; echo "fsdp4 fix rc=$?"
fi

if [ "$(left)" -gt 100 ]; then
  log "2. two launches of two GPUs each, then one launch"
  ARGS="--steps 30"
  ( timeout 100 $P -o $W/prof/host0.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank 0 \
      --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29517 $T $ARGS > $W/host0.log 2>&1; echo "host0 rc=$?" ) &
  ( timeout 100 $P -o $W/prof/host1.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank 1 \
      --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29517 $T $ARGS --gpu-offset 2 > $W/host1.log 2>&1; echo "host1 rc=$?" ) &
  wait
  [ "$(left)" -gt 45 ] && { timeout 100 $P -o $W/prof/one4.dlscope -- $TR $T $ARGS > $W/one4.log 2>&1; echo "one rc=$?"; }
fi
log "packing"
tar czf "$FINAL/d4_results.tar.gz" -C $W $(cd $W && ls *.json *.log *.txt 2>/dev/null)
tar czf "$FINAL/d4_profiles.tar.gz" -C $W/prof .
log done
