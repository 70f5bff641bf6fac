#!/bin/bash
# Capture tests/data/nsys/h100_nsys_domains.sqlite.gz and nsys's own reports on it (the ground
# truth). Run on a GPU machine with Nsight Systems; writes into $OUT (default: this directory).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here}
nsys=${NSYS:-$(command -v nsys || echo /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys)}
work=$(mktemp -d)
"$nsys" --version
"$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none -o "$work/domains" python3 "$here/capture_domains.py"
"$nsys" export --type sqlite -o "$work/h100_nsys_domains.sqlite" "$work/domains.nsys-rep"
mkdir -p "$out/h100_nsys_domains_stats"
"$nsys" stats --format csv --force-export=false \
    --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum,nvtx_sum,cuda_gpu_trace \
    -o "$out/h100_nsys_domains_stats/nsysstats" "$work/h100_nsys_domains.sqlite"
gzip -9 -c "$work/h100_nsys_domains.sqlite" > "$out/h100_nsys_domains.sqlite.gz"
ls -la "$out" "$out/h100_nsys_domains_stats"
