#!/bin/bash
# Issue 24's last acceptance point on the 4-GPU host (device tool, nvidia-h100-x4): one DDP job
# launched as two "hosts" of two GPUs each (torchrun --nnodes 2, every GPU visible to both, the
# second launch on GPUs 2-3 by --gpu-offset), each launch under its own `dlscope profile`, merged,
# against the same job in one launch, alternated ROUNDS times (default 3), so that the two-launch
# job's comm_sum and collective_overlap are compared with the one-launch job's run-to-run range
# rather than with one run. Reports are written as JSON on the device; profiles are packed too.
#   BUDGET=540 ROUNDS=3 bash bench/gpu_dist_run6.sh        (carry .whl)
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
start dist6
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PR=/tmp/dist6prof; rm -rf $PR; mkdir -p $PR
P="python3 -m dlscope profile -f --quiet"
T=bench/advice_truth/dist_train.py
ARGS="--steps ${STEPS:-40}"
reports() {  # reports NAME PROFILE
  for rep in comm_sum collective_overlap overlap straggler; do
    timeout 60 python3 -m dlscope stats "$2" --report $rep --format json > $R/${1}_$rep.json 2> $R/${1}_$rep.err
  done
}
for r in $(seq 0 $(( ${ROUNDS:-3} - 1 ))); do
  (( $(left) > 150 )) || { log "round $r: skipped"; break; }
  log "round $r: two launches"
  port=$(( 29600 + r ))
  pids=()
  for h in 0 1; do
    ( timeout 120 $P -o $PR/two${r}_h$h.dlscope -- python3 -m torch.distributed.run --nnodes 2 --node-rank $h \
        --nproc-per-node 2 --master-addr 127.0.0.1 --master-port $port $T $ARGS --gpu-offset $(( 2 * h )) \
        > $R/two${r}_h$h.log 2>&1; echo "two$r host$h rc=$?" ) &
    pids+=($!)
  done
  # the launches by their PIDs: a bare `wait` also waits for gpu_lib's `tee` (bash 5.1 waits for
  # the last process substitution), which never ends; the first try of this script hung there
  wait "${pids[@]}"
  timeout 120 python3 -m dlscope merge $PR/two${r}_h0.dlscope $PR/two${r}_h1.dlscope -o $PR/two$r.dlscope -f > $R/two${r}_merge.log 2>&1
  echo "merge rc=$?"; cat $R/two${r}_merge.log
  reports two$r $PR/two$r.dlscope
  log "round $r: one launch"
  run one$r 120 20 $P -o $PR/one$r.dlscope -- python3 -m torch.distributed.run --nproc-per-node 4 $T $ARGS > $R/one$r.log 2>&1
  reports one$r $PR/one$r.dlscope
  # the merged job and the one-launch job travel back, one tarball a round (the host profiles
  # are in the merge); the reports' JSON is in $OUT/dist6.tar.gz
  rm -rf $PR/two${r}_h0.dlscope $PR/two${r}_h1.dlscope
  tar -czf $OUT/prof$r.tar.gz -C $PR two$r.dlscope one$r.dlscope; pack dist6
done
log done
