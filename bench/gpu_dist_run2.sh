#!/bin/bash
# Issue 24's runs on the 4-GPU host (device tool, nvidia-h100-x4): a job launched as two "hosts"
# (two torchrun launches, --nnodes 2, 2 GPUs each) and the same job in one launch, for
# `dlscope merge`; `accelerate launch` of a balanced 2-GPU job; a job with one all-reduce per
# gradient (small_collectives) against the same job with one bucket, measured untraced.
# Profiles and results are packed into two files under $OUT.   (carry .whl)
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/out}; W=/tmp/d24; mkdir -p "$FINAL" $W
log() { echo "[$(date +%T)] $*"; }
P="python3 -m dlscope profile -f --quiet"
T=bench/advice_truth/dist_train.py
ARGS="--steps 30"
log "two launches"
( CUDA_VISIBLE_DEVICES=0,1 timeout 120 $P -o $W/host0.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank 0 \
    --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29517 $T $ARGS > $W/host0.log 2>&1; echo "host0 rc=$?" ) &
( CUDA_VISIBLE_DEVICES=2,3 timeout 120 $P -o $W/host1.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank 1 \
    --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29517 $T $ARGS > $W/host1.log 2>&1; echo "host1 rc=$?" ) &
wait
log "one launch"; timeout 120 $P -o $W/one.dlscope -- python3 -m torch.distributed.run --nproc-per-node 4 $T $ARGS > $W/one.log 2>&1; echo rc=$?
log "accelerate"; CUDA_VISIBLE_DEVICES=0,1 timeout 120 $P -o $W/accelerate.dlscope -- accelerate launch --multi_gpu --num_processes 2 \
    --num_machines 1 --mixed_precision no --dynamo_backend no bench/accelerate_train.py --steps 60 > $W/accelerate.log 2>&1; echo rc=$?
SC="--d 128 --seq 128 --layers 6 --steps 60"
log "small collectives truth"
for r in 0 1; do
  for gs in naive bucketed; do
    CUDA_VISIBLE_DEVICES=0,1 timeout 60 python3 -m torch.distributed.run --nproc-per-node 2 $T $SC --grad-sync $gs --times-out $W/sc_${gs}_$r.json > /dev/null 2>&1; echo "$gs rc=$?"
  done
done
log "small collectives profile"; CUDA_VISIBLE_DEVICES=0,1 timeout 90 $P -o $W/small_naive.dlscope -- python3 -m torch.distributed.run \
    --nproc-per-node 2 $T $SC --grad-sync naive --times-out $W/sc_prof.json > $W/small.log 2>&1; echo rc=$?
tar czf "$FINAL/d24_results.tar.gz" -C $W $(cd $W && ls *.json *.log)
tar czf "$FINAL/d24_profiles.tar.gz" -C $W $(cd $W && ls -d *.dlscope)
log done
