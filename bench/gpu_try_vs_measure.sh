#!/bin/bash
# Issue 22: `dlscope try` against measure.py on the same fix, back to back on one GPU (device tool,
# one H100, 16 CPUs; run from the repo root with .whl carried):
#   bash bench/gpu_try_vs_measure.sh
# For each (model, fix): measure.py times the baseline, the variant that is exactly try's fix
# (programs.TRY_FIXES) and the suite's own variant, alternated in one process; then
# `dlscope try --fixes FIX` runs the unchanged program and the fixed one, alternated, as processes.
# Everything must end within BUDGET s (540 by default); each command gets a slice of what is left.
# Results: $OUT/try_vs_measure.tar.gz (re-packed after each part) and $OUT/run.log. Read with
#   python3 bench/advice_truth/try_vs_measure.py table try_vs_measure.tar.gz
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
start try_vs_measure

TRAIN=bench/advice_truth/train.py
MEASURE=bench/advice_truth/measure.py
STEPS="python3 bench/advice_truth/try_vs_measure.py steps"

# try_pair MODEL FIX REPEAT STEPS WANT RESERVE: dlscope try, then every run's step times from its profiles
try_pair() {
  local m=$1 fix=$2 rep=$3 n=$4 want=$5 reserve=$6
  # (the JSON goes through a file of its own: run's log lines share its stdout)
  run "try $m $fix x$rep" "$want" "$reserve" sh -c "python3 -m dlscope try --fixes $fix --no-combined --repeat $rep \
    --steps $n -f --format json -o /tmp/try_$m -- python3 $TRAIN --model $m --steps 100000 \
    > $R/try_${m}_${fix}.json 2> /tmp/try_${m}.err"
  tail -n 4 "/tmp/try_${m}.err" | cut -c1-300
  timeout 60 $STEPS "/tmp/try_$m" -o "$R/try_${m}_${fix}_steps.json" || log "steps of try $m: failed"
  pack try_vs_measure
}

# 1. gpt, workers (GPT step ~70-90 ms; try's runs ~12 s each: 1 profiled + 2*REPEAT-1)
run "measure gpt" 100 400 python3 $MEASURE --model gpt --variants workers_fix,workers --rounds 4 --block 20 \
  --warmup 5 -o "$R/measure_gpt.json"
pack try_vs_measure
try_pair gpt workers 4 30 130 290

# 2. mlp, compile_graphs (MLP step ~3-10 ms; two compiled variants warm up in measure.py, 20-40 s each;
#    each of try's compiled runs compiles again)
run "measure mlp" 130 200 python3 $MEASURE --model mlp --variants compile_graphs_fix,compile --rounds 4 --block 0 \
  --warmup 10 -o "$R/measure_mlp.json"
pack try_vs_measure
try_pair mlp compile_graphs 3 100 140 70

# 3. cnn, bf16, if time is left (CNN step ~80-150 ms, a noisy host-bound step)
if (( $(left) > 120 )); then
  run "measure cnn" 60 70 python3 $MEASURE --model cnn --variants bf16_fix,bf16 --rounds 3 --block 12 \
    --warmup 4 -o "$R/measure_cnn.json"
  pack try_vs_measure
  try_pair cnn bf16 2 20 $(( $(left) - 8 )) 5
else
  log "cnn: skipped ($(left) s left)"
fi
python3 bench/advice_truth/try_vs_measure.py table "$R" || true
log done
