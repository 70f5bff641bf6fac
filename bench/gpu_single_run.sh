#!/bin/bash
# One single-GPU lease's runs (device tool): the phase hooks' and GPU marks' cost, profiles with
# GPU phase marks, the batch-size truths, and the framework integrations. Results under $OUT.
#   bash bench/gpu_single_run.sh        (carry .whl: duckdb and isal for Python 3.12)
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log() { echo "[$(date +%T)] $*"; }
log "hook costs"; timeout 150 python3 bench/hook_costs.py --blocks 12 -o "$OUT/hook_costs_h100_marks.json"
mkdir -p /tmp/prof
for m in gpt2 cnn mlp; do
  log "profile $m"
  timeout 120 python3 -m dlscope profile -o /tmp/prof/${m}_baseline.dlscope -f --quiet -- \
    python3 bench/advice_truth/train.py --model $m --variant baseline --steps 30 >/tmp/prof/$m.log 2>&1; echo "rc=$?"
done
tar czf "$OUT/marks_profiles.tar.gz" -C /tmp/prof .
log "batch truth cnn"; timeout 200 python3 bench/advice_truth/run_batch_truth.py --model cnn --batches 64,128 --runs 3 --steps 40
log "batch truth mlp"; timeout 120 python3 bench/advice_truth/run_batch_truth.py --model mlp --batches 256,1024 --runs 3 --steps 300
log "integrations"; timeout 200 python3 bench/integrations_gpu.py --runs 3 --steps 300
log done
