#!/bin/bash
# Issue 40: a short NCCL timeout ends a job under dlscope (2 GPUs). Rank 1 hangs in step 15; rank 0 reads
# its loss each step (--item), so its host waits in that step's all-reduce, where NCCL's watchdog times it
# out after --timeout-s and, with TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (tear down), ends the process.
#   run(command="bash bench/nccl_timeout.sh", carry=[".whl"], kind="nvidia-h200-x2")
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for eh in ${HANDLING:-1 3}; do
  p=/tmp/nccl_to_$eh.dlscope
  t=$(date +%s)
  TORCH_NCCL_ASYNC_ERROR_HANDLING=$eh timeout 120 python3 -m dlscope profile -f -q -o $p -- python3 -m \
    torch.distributed.run --nproc-per-node 2 tests/programs/ddp_dies.py --backend nccl --steps 40 --die-at 15 \
    --how hang --item --timeout-s 10 --step-s 0.05 > "$OUT/run_$eh.log" 2>&1
  echo "TORCH_NCCL_ASYNC_ERROR_HANDLING=$eh: exit $? in $(( $(date +%s) - t )) s" | tee -a "$OUT/summary.txt"
  python3 -m dlscope summary $p >> "$OUT/summary.txt" 2>&1
  python3 -m dlscope sql $p "SELECT rank, count(*) AS steps, min(step), max(step) FROM steps GROUP BY rank ORDER BY rank" \
    >> "$OUT/summary.txt" 2>&1
done
grep -h -i "watchdog\|timeout\|timed out" "$OUT"/run_*.log | head -20 >> "$OUT/summary.txt"
