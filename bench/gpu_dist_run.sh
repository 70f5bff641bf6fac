#!/bin/bash
# One multi-GPU lease of the distributed truth (device tool, nvidia-h100-x4): DDP and FSDP2 on 2
# GPUs, then FSDP2 on 4, each balanced and with a real straggler (bench/advice_truth/run_dist.py),
# and the GPU marks' per-phase cost. Everything is packed into two files under $OUT (the device
# tool brings back at most 8).   bash bench/gpu_dist_run.sh   (carry .whl)
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
export OUT=/tmp/dist_out; mkdir -p $OUT
log() { echo "[$(date +%T)] $*"; }
log "marks"; timeout 60 python3 bench/hook_costs.py --marks-only -o $OUT/marks_cost.json
log "ddp2"; CUDA_VISIBLE_DEVICES=0,1 timeout 200 python3 bench/advice_truth/run_dist.py --nproc 2 --steps 40
log "fsdp2"; CUDA_VISIBLE_DEVICES=0,1 timeout 200 python3 bench/advice_truth/run_dist.py --nproc 2 --fsdp --steps 40
log "fsdp4"; timeout 220 python3 bench/advice_truth/run_dist.py --nproc 4 --fsdp --steps 40
tar czf "$FINAL/dist_results.tar.gz" -C $OUT $(cd $OUT && ls *.json *.log)
tar cf "$FINAL/dist_profiles.tar" -C $OUT $(cd $OUT && ls *_profiles.tar.gz)
log done
