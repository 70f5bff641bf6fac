#!/bin/bash
# Capture tests/data/nsys/h100_nsys_domains.sqlite.gz and nsys's own reports on it (the ground
# truth, h100_nsys_domains_stats/). Run on a GPU machine with Nsight Systems and the `nvtx` Python
# package; writes into $OUT (default: this directory).
#
# On the project's GPU machine only the nsys bundled with Nsight Compute exists, and its report
# importer (QdstrmImporter) cannot load for want of libdw.so.1, which it needs only for symbol
# resolution. The fixture was made by importing the .qdstrm by hand against a stub libdw built
# here (functions that return 0), as below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here}
bundle=/opt/nvidia/nsight-compute/2025.3.1/host
nsys=${NSYS:-$(command -v nsys || echo $bundle/target-linux-x64/nsys)}
work=$(mktemp -d)
"$nsys" --version
"$nsys" profile -t cuda,nvtx -s none --cpuctxsw=none -o "$work/domains" python3 "$here/capture_domains.py" || true
if [ ! -f "$work/domains.nsys-rep" ]; then
    host=$bundle/linux-desktop-glibc_2_11_3-x64
    syms_122="dwarf_attr dwarf_diecu dwarf_dieoffset dwarf_filesrc dwarf_formudata dwarf_getscopes
        dwarf_getscopes_die dwarf_getsrcfiles dwarf_offdie dwarf_tag dwfl_addrmodule dwfl_begin dwfl_end
        dwfl_getsrc dwfl_lineinfo dwfl_module_addrdie dwfl_module_getdwarf dwfl_module_getsrc dwfl_module_info
        dwfl_offline_section_address dwfl_report_end dwfl_report_offline dwfl_standard_find_debuginfo"
    for s in $syms_122 dwfl_build_id_find_elf; do echo "void*$s(){return 0;}"; done > "$work/dw.c"
    { echo "ELFUTILS_0.122{global:"; for s in $syms_122; do echo "$s;"; done; echo "local:*;};"
      echo "ELFUTILS_0.130{global:dwfl_build_id_find_elf;}ELFUTILS_0.122;"; } > "$work/dw.map"
    gcc -shared -fPIC -o "$work/libdw.so.1" -Wl,-soname,libdw.so.1 -Wl,--version-script,"$work/dw.map" "$work/dw.c"
    LD_LIBRARY_PATH="$host:$work" "$host/QdstrmImporter" -i "$work/domains.qdstrm"
fi
"$nsys" export --type sqlite -o "$work/h100_nsys_domains.sqlite" "$work/domains.nsys-rep"
mkdir -p "$out/h100_nsys_domains_stats"
"$nsys" stats --format csv --force-export=false \
    --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,cuda_gpu_mem_size_sum,nvtx_sum,cuda_gpu_trace \
    -o "$out/h100_nsys_domains_stats/nsysstats" "$work/h100_nsys_domains.sqlite"
gzip -9 -c "$work/h100_nsys_domains.sqlite" > "$out/h100_nsys_domains.sqlite.gz"
ls -la "$out" "$out/h100_nsys_domains_stats"
