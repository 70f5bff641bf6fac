#!/bin/bash
# A second single-GPU lease (device tool): the GPU marks' cost with the clock resyncs, a longer
# profiled run (the resyncs counted), and `dlscope try` with more alternations for issue 22.
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log() { echo "[$(date +%T)] $*"; }
log "marks"; timeout 60 python3 bench/hook_costs.py --marks-only -o "$OUT/marks_cost_resync.json"
log "gpt2 80 steps"; timeout 150 python3 -m dlscope profile -o /tmp/gpt2_long.dlscope -f --quiet -- \
  python3 bench/advice_truth/train.py --model gpt2 --variant baseline --steps 80 > /tmp/gpt2_long.log 2>&1; echo rc=$?
python3 - <<'PY' > "$OUT/gpt2_long_marks.json"
import json
from dlscope.analysis.core.context import ProfileData
d = ProfileData.open("/tmp/gpt2_long.dlscope")
print(json.dumps({"collectors": d.meta.collectors if hasattr(d.meta, "collectors") else None,
                  "marks": d.con.execute("SELECT count(*) FROM phase_gpu").fetchall()[0][0],
                  "notes": getattr(d.meta, "notes", None)}, default=str, indent=1))
PY
log "try gpt workers x5"; timeout 240 python3 -m dlscope try --fixes workers --repeat 5 --steps 20 --no-combined -o /tmp/try_gpt -f --format json -- \
  python3 bench/advice_truth/train.py --model gpt --steps 200 > "$OUT/try_gpt_workers.json" 2> /tmp/try_gpt.err; echo rc=$?; tail -3 /tmp/try_gpt.err
log "try mlp compile_graphs x3"; timeout 240 python3 -m dlscope try --fixes compile_graphs --repeat 3 --steps 40 --no-combined -o /tmp/try_mlp -f --format json -- \
  python3 bench/advice_truth/train.py --model mlp --steps 400 > "$OUT/try_mlp_compile_graphs.json" 2> /tmp/try_mlp.err; echo rc=$?; tail -3 /tmp/try_mlp.err
log done
