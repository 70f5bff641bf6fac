#!/usr/bin/env bash
# The main job: profile the bundled example and show what dlscope made of it; then show every
# layer on a real H100 profile (bundled), since this machine may have no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
mkdir -p out
echo "== profiling examples/train_cpu.py"
dlscope profile -f -o out/train_cpu.dlscope --batch-size 64 -- python examples/train_cpu.py
echo
echo "== the phases, straight from the profile with SQL"
dlscope sql out/train_cpu.dlscope "select name, count(*) as n, round(sum(end_ns - start_ns) / 1e6, 2) as total_ms
  from phases where kind = 'range' group by name order by total_ms desc limit 10"
echo
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "== a GPU is here: profile the GPU example yourself with dlscope profile -- python YOUR_SCRIPT.py"
fi
echo "== a real H100 profile, recorded by dlscope (ResNet-50 training; bundled in examples/data): every layer"
rm -rf out/h100_resnet50.dlscope && tar xzf examples/data/h100_resnet50.dlscope.tgz -C out
dlscope summary out/h100_resnet50.dlscope
dlscope stats out/h100_resnet50.dlscope --report gpu_time_breakdown,memcpy_sum
echo
echo "== reading a trace the PyTorch profiler wrote (H100, bundled in tests/data)"
dlscope import -f tests/data/kineto/h100_resnet50_phases.trace.json.gz -o out/kineto_resnet50.dlscope
dlscope stats out/kineto_resnet50.dlscope --report tensor_core --format csv | cut -c1-150 | sed -n 1,6p
echo
echo "== the HTML reports and the timelines"
for p in train_cpu h100_resnet50; do
  dlscope report -f -o out/$p.report.html out/$p.dlscope
  dlscope export -f -o out/$p.trace.json.gz out/$p.dlscope
done
for p in train_cpu h100_resnet50; do
  echo "report:   $(pwd)/out/$p.report.html (open it in any browser; it works offline)"
  echo "timeline: $(pwd)/out/$p.trace.json.gz (open it in https://ui.perfetto.dev or chrome://tracing)"
done
