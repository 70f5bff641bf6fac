#!/bin/bash
# Issue 21's held-out check, done once (the program is not used to build or tune the advice):
# bench/heldout/vit_train.py on one H100 (device tool; run from the repo root with .whl carried):
#   bash bench/gpu_heldout.sh
# 1. profiled in the default mode and advised (--what-if, JSON);
# 2. the truth: each fix made in the source, as its own process, alternated (alternate.py);
# 3. dlscope try on the unchanged program for the same fixes, while time is left.
# Results: $OUT/heldout.tar.gz and $OUT/run.log.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
start heldout
PROG="python3 bench/heldout/vit_train.py"

run "profile" 90 400 python3 -m dlscope profile -o "$R/vit_baseline.dlscope" -f -- $PROG --steps 40
run "advise" 60 380 sh -c "python3 -m dlscope advise $R/vit_baseline.dlscope --what-if --format json > $R/advise.json"
python3 -m dlscope advise "$R/vit_baseline.dlscope" --what-if | head -30
python3 -m dlscope summary "$R/vit_baseline.dlscope" | head -40
pack heldout

run "truth" 240 150 python3 bench/heldout/alternate.py --rounds 3 --skip 10 -o "$R/truth.json" -- $PROG --steps 40 \
  :: bf16=--bf16 "workers=--workers 6" tf32=--tf32 fused=--fused
pack heldout

run "try" $(( $(left) - 10 )) 5 sh -c "python3 -m dlscope try --fixes bf16,workers,tf32,fused_opt --no-combined \
  --repeat 3 --steps 25 -f --format json -o /tmp/try_vit -- $PROG --steps 100000 > $R/try_vit.json 2> /tmp/try_vit.err"
tail -n 12 /tmp/try_vit.err | cut -c1-300
log done
