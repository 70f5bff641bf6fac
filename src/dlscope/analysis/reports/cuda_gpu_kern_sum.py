"""cuda_gpu_kern_sum: GPU kernels by name, as ``nsys stats --report cuda_gpu_kern_sum``.

Names are printed as the profile stores them: nsys imports store the templated (demangled) name
nsys prints by default; Kineto traces carry their own demangling (``<4, ...>`` where nsys writes
``<(int)4, ...>``). Time (%) is each kernel's share of all kernel time listed.

Scope: the whole profile, or the kernels launched in the selected iterations (see
:mod:`.nsys_conventions`). Checked against HTA's ``get_gpu_kernel_breakdown`` per kernel name in
``tests/test_hta_kernel_breakdown.py``.
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.nsys_conventions import duration_formats, gpu_in_selection, scope_note, summary_sql
from ..core.report import Report, ReportResult


def compute(data: ProfileData) -> ReportResult:
    events = f"SELECT k.name, k.end_ns - k.start_ns AS d FROM kernels k WHERE {gpu_in_selection(data, 'k')}"
    table = data.table(
        summary_sql(events, "Instances", {"name": "Name"}, order='"Total Time (ns)" DESC, "Instances", "Name"')
    )
    return ReportResult(REPORT.name, REPORT.title, table, duration_formats(), [scope_note(data)])


REPORT = Report(
    "cuda_gpu_kern_sum",
    "CUDA GPU Kernel Summary",
    compute,
    needs=("kernels",),
    doc="kernels by name: share of kernel time, total, instances, avg/med/min/max/stddev (ns)",
)
