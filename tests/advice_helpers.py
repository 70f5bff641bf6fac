"""Small hand-made training loops for the advice tests: steps, phases, launches and kernels on one
process, in milliseconds from the profile's origin (``make_profile`` adds T0)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlscope import advice
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.models import replay as R
from dlscope.store.meta import Meta

from .report_helpers import make_profile

MS = 1_000_000
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80_000_000_000, "compute_capability": "9.0"}
V100 = {"index": 0, "name": "Tesla V100-SXM2-32GB", "memory_bytes": 32_000_000_000, "compute_capability": "7.0"}
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>"
    " >(int)"
)
SGEMM = "volta_sgemm_128x64_nn"


@dataclass
class Loop:
    """Rows of a profile under construction (times in ms)."""

    tables: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {
            "steps": [],
            "phases": [],
            "kernels": [],
            "api": [],
            "ops": [],
            "memcpy": [],
            "counters": [],
        }
    )
    corr: int = 0

    def step(self, n: int, start: float, end: float) -> None:
        self.tables["steps"].append(dict(step=n, start_ns=int(start * MS), end_ns=int(end * MS), pid=1, tid=1))

    def phase(self, name: str, start: float, end: float, **kw: Any) -> None:
        self.tables["phases"].append(
            dict(pid=1, tid=1, start_ns=int(start * MS), end_ns=int(end * MS), name=name, **kw)
        )

    def op(self, name: str, start: float, end: float, op_id: int, **kw: Any) -> None:
        self.tables["ops"].append(
            dict(pid=1, tid=1, start_ns=int(start * MS), end_ns=int(end * MS), name=name, op_id=op_id, **kw)
        )

    def call(self, name: str, start: float, end: float, **kw: Any) -> None:
        self.corr += 1
        self.tables["api"].append(
            dict(
                pid=1, tid=1, start_ns=int(start * MS), end_ns=int(end * MS), name=name, correlation_id=self.corr, **kw
            )
        )

    def kernel(self, name: str, launch: float, start: float, end: float, stream: int = 7, **kw: Any) -> None:
        """A kernel and the cudaLaunchKernel call (10 us) that launched it."""
        self.call("cudaLaunchKernel", launch, launch + 0.01, external_id=kw.get("external_id"))
        self.tables["kernels"].append(
            dict(
                device=0,
                stream=stream,
                start_ns=int(start * MS),
                end_ns=int(end * MS),
                name=name,
                correlation_id=self.corr,
                pid=1,
                **kw,
            )
        )

    def copy(
        self, kind: str, src: str, launch: float, call_end: float, start: float, end: float, nbytes: int = 1 << 20
    ) -> None:
        self.call("cudaMemcpyAsync", launch, call_end)
        self.tables["memcpy"].append(
            dict(
                device=0,
                stream=7,
                start_ns=int(start * MS),
                end_ns=int(end * MS),
                correlation_id=self.corr,
                bytes=nbytes,
                copy_kind=kind,
                src_kind=src,
                dst_kind="device" if kind == "HtoD" else "pageable",
                pid=1,
            )
        )

    def sample(self, metric: str, t: float, value: float) -> None:
        self.tables["counters"].append(dict(device=0, ts_ns=int(t * MS), metric=metric, value=float(value)))

    def open(self, tmp_path: Path, devices: list[dict] | None = None, **meta: Any) -> ProfileData:
        """The profile, recorded (by default) from a PyTorch program on an H100."""
        meta.setdefault("frameworks", {"torch": "2.13.0"})
        return make_profile(
            tmp_path,
            Meta(devices=devices if devices is not None else [H100], **meta),
            **{k: v for k, v in self.tables.items() if v},
        )


def findings(data: ProfileData) -> dict[str, advice.Finding]:
    return {f.id: f for f in advice.evaluate(data)}


def outcome(data: ProfileData, rule_id: str) -> str:
    """'finding', 'clean' (ran, found nothing) or 'skipped: why'."""
    r = advice.run(data)
    if rule_id in {f.id for f in r.findings}:
        return "finding"
    if rule_id in r.clean:
        return "clean"
    return "skipped: " + r.skipped[rule_id]


def replay_input(**cols: Any) -> R.Calls:
    """The replay's input by hand: one entry per call, the columns of :data:`replay.ARRAYS` given
    (the rest zero; a larger batch's wave factors: linear, as for a GPU the model does not know)."""
    n = len(cols["gpu_ns"])
    base = {k: np.zeros(n) for k in R.ARRAYS}
    base.update({f"wave{f}": np.full(n, float(f)) for f in R.WAVE_FACTORS})
    base.update({k: np.asarray(v, dtype=float) for k, v in cols.items()})
    base["cls"] = base["cls"].astype(np.int64)
    base["blocking"] = base["blocking"].astype(np.int64)
    return R.Calls(base, int(len(np.unique(base["wid"]))))
