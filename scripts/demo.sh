#!/usr/bin/env bash
# The main job: profile the bundled example and show what dlscope made of it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
mkdir -p out
echo "== profiling examples/train_cpu.py"
dlscope profile -f -o out/train_cpu.dlscope --batch-size 64 -- python examples/train_cpu.py
echo
echo "== the ten slowest phases, straight from the profile with SQL"
dlscope sql out/train_cpu.dlscope "select name, count(*) as n, round(sum(end_ns - start_ns) / 1e6, 2) as total_ms
  from phases where kind = 'range' group by name order by total_ms desc limit 10"
echo
echo "== the HTML report and the timeline"
dlscope report -f -o out/train_cpu.report.html out/train_cpu.dlscope
dlscope export -f -o out/train_cpu.trace.json.gz out/train_cpu.dlscope
echo "report:   $(pwd)/out/train_cpu.report.html (open it in any browser; it works offline)"
echo "timeline: $(pwd)/out/train_cpu.trace.json.gz (open it in https://ui.perfetto.dev or chrome://tracing)"
