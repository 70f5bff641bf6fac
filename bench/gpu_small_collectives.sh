#!/bin/bash
# small_collectives on a real 2-GPU job (device tool, nvidia-h100-x2 or x4): one all-reduce per
# gradient against one bucket, measured untraced (alternated), then the naive job profiled.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/out}; W=/tmp/sc; mkdir -p "$FINAL" $W
T=bench/advice_truth/dist_train.py
SC="--width 128 --seq 128 --layers 6 --steps 60"
for r in 0 1; do
  for gs in naive bucketed; do
    CUDA_VISIBLE_DEVICES=0,1 timeout 60 python3 -m torch.distributed.run --nproc-per-node 2 $T $SC --grad-sync $gs --times-out $W/sc_${gs}_$r.json > $W/sc_${gs}_$r.log 2>&1; echo "$gs rc=$?"
  done
done
CUDA_VISIBLE_DEVICES=0,1 timeout 90 python3 -m dlscope profile -f --quiet -o $W/small_naive.dlscope -- python3 -m torch.distributed.run \
    --nproc-per-node 2 $T $SC --grad-sync naive --times-out $W/sc_prof.json > $W/small.log 2>&1; echo rc=$?
tar czf "$FINAL/sc.tar.gz" -C $W .
