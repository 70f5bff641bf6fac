#!/bin/bash
# Issues 21 and 22: the CNN suite program's noisy truths, measured again on one GPU (device tool,
# one H100; run from the repo root with .whl carried):
#   bash bench/gpu_cnn_truth.sh
# 1. the host's own speed: the CNN's data decoding alone, in 6 fresh processes (is the spread
#    between runs of one program the host's?), with the host's CPU layout;
# 2. batch 64 -> 128 as separate programs, alternated (the batch2x row's truth);
# 3. bf16 (try's exact fix): measure.py in one process with longer blocks, then `dlscope try`.
# Results: $OUT/cnn_truth.tar.gz and $OUT/run.log.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
start cnn_truth
lscpu | grep -E "^(Model name|CPU\(s\)|NUMA|Thread|Core|Socket)" > "$R/lscpu.txt"; cat "$R/lscpu.txt"
nvidia-smi topo -m > "$R/topo.txt" 2>&1 || true

for i in 1 2 3 4 5 6; do python3 bench/cnn_host_probe.py --samples 640; done | tee "$R/host_probe.jsonl"
pack cnn_truth

OUT=$R run "batch truth cnn" 330 200 python3 bench/advice_truth/run_batch_truth.py --model cnn --batches 64,128 \
  --runs 6 --steps 50
pack cnn_truth

run "measure cnn bf16" 90 110 python3 bench/advice_truth/measure.py --model cnn --variants bf16_fix --rounds 6 \
  --block 25 --warmup 5 -o "$R/measure_cnn.json"
pack cnn_truth

run "try cnn bf16" $(( $(left) - 10 )) 5 sh -c "python3 -m dlscope try --fixes bf16 --no-combined --repeat 3 \
  --steps 25 -f --format json -o /tmp/try_cnn -- python3 bench/advice_truth/train.py --model cnn --steps 100000 \
  > $R/try_cnn_bf16.json 2> /tmp/try_cnn.err"
tail -n 4 /tmp/try_cnn.err | cut -c1-300
timeout 60 python3 bench/advice_truth/try_vs_measure.py steps /tmp/try_cnn -o "$R/try_cnn_bf16_steps.json" || log "steps: failed"
python3 bench/advice_truth/try_vs_measure.py table "$R" || true
log done
