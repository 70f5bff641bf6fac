"""The roofline's performance model against Nsight Compute's counters (issue 42's acceptance), on a GPU.

For one of the suite's training programs (``bench/advice_truth/train.py``) in fp32 with TF32 off
(``bench/programs/strict_fp32.py``: the math then runs as FFMA, which ncu's SASS counters count):

1. ``dlscope profile --mode full`` records the program with its ops' shapes;
2. the roofline's own assignment (:mod:`dlscope.analysis.reports.roofline`: each kernel's owning op
   and the model's FLOPs and bytes per call) is read for every kernel of one step (``--step``);
3. the same program runs bare under ncu, which measures every kernel launched in a window around that
   step (``--launch-skip`` / ``--launch-count`` over all kernels: FP32/FP16/FP64 add, mul and FMA
   instructions, FMA as 2 operations, and ``dram__bytes.sum``; caches flushed between kernels, ncu's
   default, so a kernel's DRAM bytes are what it had to read and write);
4. the two kernel sequences are aligned by function name (difflib; launch grids must agree), and
   for each op that owns one of the step's 10 costliest kernel names the model's FLOPs and bytes are
   set against ncu's sums over that op's kernels.

Targets (issue 42): FLOPs within 10% for those ops; bytes within 30% for the memory-bound ones.

    python bench/roofline_vs_ncu.py --model gpt --variant fused_opt [--step 2] -o DIR

Writes ``DIR/roofline_ncu_MODEL.json`` and prints the table; keeps the profile in ``DIR``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
TRAIN = ROOT / "bench" / "advice_truth" / "train.py"
STRICT = ROOT / "bench" / "programs" / "strict_fp32.py"
FLOP_METRICS = {
    f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": 2 if op == "fma" else 1
    for p in "dfh"
    for op in ("add", "mul", "fma")
}
GRID = "launch__grid_size"
# beside dram__bytes: DRAM reads, and the bytes the SMs wrote to L2 (a kernel's output can stay in the
# 50 MB L2 past its end, so DRAM writes undercount what it wrote); the tensor pipe's instructions
# (fp32 math that runs as TF32 on tensor cores is not in the SASS FP counters)
EXTRA = {
    "dram__bytes_read.sum": "dram_read",
    "lts__t_sectors_srcunit_tex_op_write.sum": "l2_write_sectors",
    "sm__inst_executed_pipe_tensor_op_hmma.sum": "tensor_inst",
    "sm__inst_executed_pipe_tensor_op_gmma.sum": "tensor_inst",
}
METRICS = [*FLOP_METRICS, "dram__bytes.sum", GRID]


def available(ncu: str, wanted: list[str]) -> list[str]:
    """The metrics of ``wanted`` that ncu knows on this GPU (one it does not know fails the whole run)."""
    proc = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120, check=False)
    known = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    return [m for m in wanted if m.rsplit(".", 1)[0] in known]


TOP = 10
# the ops whose FLOPs the target holds (matrix math, FFMA in fp32 with TF32 off); the others are
# memory-bound and held to their bytes, their FLOPs shown for information
MATRIX_KINDS = ("gemm", "conv", "attention")
MARGIN = 64  # kernels measured before and after the step: the bare run may launch a few fewer or more


@dataclass
class Kernel:
    """One kernel of the chosen step in the profile, with its owning op's model cost (None: unmodelled)."""

    name: str
    ns: int
    grid: int
    owner: tuple[int, int] | None  # (rank, op_id) of the op the roofline gives it to
    op: str | None
    shapes: str | None
    flops: int | None  # per call of the owner
    bytes: int | None
    kind: str | None
    why: str | None = None  # unmodelled: the launching op and the model's reason


@dataclass
class Measured:
    name: str
    flops: float
    dram_bytes: float
    grid: int
    moved_bytes: float | None = None  # DRAM reads + bytes written to L2 (None: not measured)
    tensor_inst: float | None = None


@dataclass
class OpRow:
    op: str
    shapes: str | None
    kind: str
    calls: int = 0
    kernels: int = 0
    matched: int = 0
    gpu_ms: float = 0.0
    model_flops: float = 0.0
    ncu_flops: float = 0.0
    model_bytes: float = 0.0
    ncu_bytes: float = 0.0
    moved_bytes: float | None = None  # DRAM reads + L2 writes, where measured
    tensor_inst: float | None = None
    top_kernels: list[str] = field(default_factory=list)
    bound: str | None = None

    def ratios(self) -> dict[str, float | None]:
        return {
            "flop_ratio": self.ncu_flops / self.model_flops if self.model_flops else None,
            "byte_ratio": self.ncu_bytes / self.model_bytes if self.model_bytes else None,
            "moved_ratio": self.moved_bytes / self.model_bytes
            if self.model_bytes and self.moved_bytes is not None
            else None,
        }


def program(args: argparse.Namespace, steps: int) -> list[str]:
    return [
        sys.executable,
        str(STRICT),
        str(TRAIN),
        "--model",
        args.model,
        "--variant",
        args.variant,
        "--steps",
        str(steps),
    ]


def step_kernels(profile: Path, step: int) -> tuple[list[Kernel], int, dict[str, Any]]:
    """The step's kernels in launch order with their owners' costs, and how many kernels came before it."""
    from dlscope.analysis.core.hardware import lookup
    from dlscope.analysis.models.op_cost import OpCost
    from dlscope.analysis.reports.roofline import _groups, _models, _tables, profile_gpu
    from dlscope.application.open import open_for_analysis

    data = open_for_analysis(str(profile))
    launch, chain = _tables(data)
    keys, costs = _models(data, chain)
    _groups(data, launch, chain)  # leaves rl_assign: each launching op's owner and key
    gpu = profile_gpu(data)
    before = int(
        data.scalar(f"""SELECT count(*) FROM kernels WHERE start_ns < (SELECT min(start_ns) FROM kernels
                        WHERE step = {int(step)})""")
        or 0
    )
    rows = data.con.execute(f"""
        SELECT k.name, (k.end_ns - k.start_ns)::BIGINT, coalesce(k.grid_x, 1) * coalesce(k.grid_y, 1)
               * coalesce(k.grid_z, 1), a.rank, a.owner, a.okey, a.self_key, o.op_id IS NOT NULL
        FROM kernels k
        LEFT JOIN (SELECT rank, op_id, external_id FROM raw_ops WHERE external_id IS NOT NULL) o
          ON o.rank = k.rank AND o.external_id = k.external_id
        LEFT JOIN rl_assign a ON a.rank = o.rank AND a.launch_id = o.op_id
        WHERE k.step = {int(step)} ORDER BY k.start_ns""").fetchall()
    out: list[Kernel] = []
    for name, ns, grid, rank, owner, okey, self_key, linked in rows:
        if owner is not None:
            cost = costs[okey]
            assert isinstance(cost, OpCost)
            out.append(
                Kernel(
                    name, ns, grid, (rank, owner), keys[okey].name, keys[okey].shapes, cost.flops, cost.bytes, cost.kind
                )
            )
        else:
            why = "no launching op" if not linked else "no model"
            if self_key is not None:
                c = costs[self_key]
                why = f"{keys[self_key].name}: {getattr(c, 'reason', 'held by an op whose count includes others')}"
            out.append(Kernel(name, ns, grid, None, None, None, None, None, None, why))
    peaks = lookup(gpu.name).peaks
    info = {
        "gpu": gpu.name,
        "hbm_tbs": peaks.hbm_tbs if peaks else None,
        "fp32_tflops": peaks.compute_peak("float32", True, False)[0] if peaks else None,
    }
    return out, before, info


def ncu_window(args: argparse.Namespace, skip: int, count: int, log: Path) -> list[Measured]:
    """Every kernel launched from ``skip`` on, ``count`` of them, measured by ncu in the bare program."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    extra = available(ncu, list(EXTRA))
    print(f"ncu: extra metrics known here: {extra}", flush=True)
    cmd = [
        ncu,
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--log-file",
        str(log),
        "--target-processes",
        "all",
        "--clock-control",
        "none",
        "--launch-skip",
        str(skip),
        "--launch-count",
        str(count),
        "--metrics",
        ",".join(METRICS + extra),
        *program(args, args.step + 1),
    ]
    t = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.ncu_timeout, check=False)
    print(f"ncu: rc={proc.returncode} in {time.monotonic() - t:.0f} s", flush=True)
    if not log.exists():
        raise SystemExit(f"ncu wrote nothing: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return read_window(log)


def read_window(log: Path) -> list[Measured]:
    """ncu's raw CSV (plain or gzip'd) as one record per launch, in launch order."""
    import gzip

    from dlscope.importers.ncu import parse_ncu_csv, read_ncu_file

    if log.suffix == ".gz":
        with gzip.open(log, "rt") as f:
            text = f.read()
    else:
        text = read_ncu_file(log)
    table = parse_ncu_csv(text, log)
    per: dict[int, dict[str, Any]] = defaultdict(lambda: {"flops": 0.0, "bytes": 0.0, "grid": 0, "name": ""})
    for launch, name, metric, value in zip(
        *(table.column(c).to_pylist() for c in ("launch", "name", "metric", "value")), strict=True
    ):
        d = per[launch]
        d["name"] = name
        if metric in FLOP_METRICS and value is not None:
            d["flops"] += value * FLOP_METRICS[metric]
        elif metric == "dram__bytes.sum" and value is not None:
            d["bytes"] += value
        elif metric == GRID and value is not None:
            d["grid"] = int(value)
        elif metric in EXTRA and value is not None:
            d[EXTRA[metric]] = d.get(EXTRA[metric], 0.0) + value
    out = []
    for _, d in sorted(per.items()):
        moved = d["dram_read"] + 32 * d["l2_write_sectors"] if "dram_read" in d and "l2_write_sectors" in d else None
        out.append(Measured(d["name"], d["flops"], d["bytes"], d["grid"], moved, d.get("tensor_inst")))
    return out


def align(prof: list[Kernel], meas: list[Measured]) -> dict[int, int]:
    """Profile index -> ncu index, by the kernels' bare function names in order, where grids agree."""
    from dlscope.application.ncu import function_name

    a = [function_name(k.name) for k in prof]
    b = [function_name(m.name) for m in meas]
    pairs: dict[int, int] = {}
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for i in range(blk.size):
            if prof[blk.a + i].grid == meas[blk.b + i].grid or not meas[blk.b + i].grid:
                pairs[blk.a + i] = blk.b + i
    return pairs


def compare(prof: list[Kernel], meas: list[Measured], pairs: dict[int, int], info: dict[str, Any]) -> dict[str, Any]:
    ns_by_name: dict[str, int] = defaultdict(int)
    for k in prof:
        ns_by_name[k.name] += k.ns
    top = sorted(ns_by_name, key=lambda n: -ns_by_name[n])[:TOP]
    total_ns = sum(ns_by_name.values())
    ridge = info["fp32_tflops"] * 1e12 / (info["hbm_tbs"] * 1e12) if info["fp32_tflops"] and info["hbm_tbs"] else None
    # per owning op instance: its kernels (all must be matched for the op to be compared)
    inst: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, k in enumerate(prof):
        if k.owner is not None:
            inst[k.owner].append(i)
    rows: dict[tuple[str, str | None, int, int], OpRow] = {}
    incomplete = 0
    for idx in inst.values():
        k0 = prof[idx[0]]
        if not any(prof[i].name in top for i in idx):
            continue
        assert k0.op is not None and k0.flops is not None and k0.bytes is not None and k0.kind is not None
        if not all(i in pairs for i in idx):
            incomplete += 1
            continue
        r = rows.setdefault((k0.op, k0.shapes, k0.flops, k0.bytes), OpRow(k0.op, k0.shapes, k0.kind))
        r.calls += 1
        r.kernels += len(idx)
        r.matched += len(idx)
        r.gpu_ms += sum(prof[i].ns for i in idx) / 1e6
        r.model_flops += k0.flops
        r.model_bytes += k0.bytes
        r.ncu_flops += sum(meas[pairs[i]].flops for i in idx)
        r.ncu_bytes += sum(meas[pairs[i]].dram_bytes for i in idx)
        moved = [meas[pairs[i]].moved_bytes for i in idx]
        if all(m is not None for m in moved):
            r.moved_bytes = (r.moved_bytes or 0.0) + sum(m for m in moved if m is not None)
        tensor = [meas[pairs[i]].tensor_inst for i in idx if meas[pairs[i]].tensor_inst is not None]
        if tensor:
            r.tensor_inst = (r.tensor_inst or 0.0) + sum(t for t in tensor if t is not None)
        for i in idx:
            if prof[i].name in top and prof[i].name[:90] not in r.top_kernels:
                r.top_kernels.append(prof[i].name[:90])
        if ridge is not None:
            r.bound = "compute" if k0.bytes and k0.flops / k0.bytes >= ridge else "memory"
    unmodelled = defaultdict(float)
    for k in prof:
        if k.owner is None and k.name in top:
            unmodelled[f"{k.name[:80]} ({k.why})"] += k.ns / 1e6
    table = sorted(rows.values(), key=lambda r: -r.gpu_ms)
    checks = []
    for r in table:
        rt = r.ratios()
        ok_f = rt["flop_ratio"] is not None and abs(rt["flop_ratio"] - 1) <= 0.10
        ok_b = rt["byte_ratio"] is not None and abs(rt["byte_ratio"] - 1) <= 0.30
        ok_m = rt["moved_ratio"] is not None and abs(rt["moved_ratio"] - 1) <= 0.30
        checks.append(
            {
                **asdict(r),
                **rt,
                "flops_within_10pct": ok_f if r.kind in MATRIX_KINDS else None,
                "bytes_within_30pct": ok_b if r.bound == "memory" else None,
                "moved_within_30pct": ok_m if r.bound == "memory" and rt["moved_ratio"] is not None else None,
            }
        )
    return {
        "gpu": info,
        "step_kernels": len(prof),
        "measured": len(meas),
        "aligned": len(pairs),
        "top_kernels": [
            {"name": n[:120], "ms": ns_by_name[n] / 1e6, "pct": 100 * ns_by_name[n] / total_ns} for n in top
        ],
        "top_share_pct": 100 * sum(ns_by_name[n] for n in top) / total_ns if total_ns else None,
        "ops": checks,
        "ops_not_fully_aligned": incomplete,
        "unmodelled_top_kernels_ms": dict(unmodelled),
        "summary": summary(checks),
    }


def summary(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """How many of the compared ops (and how much of their time) meet each target."""
    flop = [c for c in checks if c["flops_within_10pct"] is not None]
    byte = [c for c in checks if c["bytes_within_30pct"] is not None]
    return {
        "flop_ops": len(flop),
        "flop_ops_within_10pct": sum(c["flops_within_10pct"] for c in flop),
        "flop_ms_within_10pct_pct": 100
        * sum(c["gpu_ms"] for c in flop if c["flops_within_10pct"])
        / max(1e-9, sum(c["gpu_ms"] for c in flop)),
        "memory_bound_ops": len(byte),
        "memory_bound_within_30pct": sum(c["bytes_within_30pct"] for c in byte),
        "memory_ms_within_30pct_pct": 100
        * sum(c["gpu_ms"] for c in byte if c["bytes_within_30pct"])
        / max(1e-9, sum(c["gpu_ms"] for c in byte)),
        "moved_within_30pct": sum(bool(c.get("moved_within_30pct")) for c in byte),
    }


def show(model: str, res: dict[str, Any]) -> None:
    print(
        f"\n== {model}: {res['step_kernels']} kernels in the step, {res['measured']} measured by ncu, "
        f"{res['aligned']} aligned; top {TOP} kernel names hold {res['top_share_pct']:.1f}% of the step's GPU time"
    )
    print(
        f"{'op':28} {'shapes':44} {'calls':>5} {'ms':>7} {'model GF':>9} {'ncu GF':>9} {'ratio':>6} "
        f"{'model MB':>9} {'ncu MB':>9} {'ratio':>6} bound"
    )
    for r in res["ops"][:40]:
        fr = f"{r['flop_ratio']:.3f}" if r["flop_ratio"] is not None else "-"
        br = f"{r['byte_ratio']:.3f}" if r["byte_ratio"] is not None else "-"
        print(
            f"{r['op'][:28]:28} {str(r['shapes'])[:44]:44} {r['calls']:5d} {r['gpu_ms']:7.2f} "
            f"{r['model_flops'] / 1e9:9.2f} {r['ncu_flops'] / 1e9:9.2f} {fr:>6} {r['model_bytes'] / 1e6:9.1f} "
            f"{r['ncu_bytes'] / 1e6:9.1f} {br:>6} {r['bound']}"
        )
    for name, ms in res["unmodelled_top_kernels_ms"].items():
        print(f"  unmodelled top kernel: {ms:.2f} ms {name}")
    print("summary:", json.dumps(res["summary"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt")
    p.add_argument("--variant", default="fused_opt")
    p.add_argument("--step", type=int, default=2, help="the step compared (its kernels measured by ncu)")
    p.add_argument("--ncu-timeout", type=float, default=400)
    p.add_argument("-o", "--out", type=Path, default=Path("/tmp/roofline_ncu"))
    p.add_argument("--profile", type=Path, help="an existing full-mode profile of the same program")
    p.add_argument("--ncu-csv", type=Path, help="with --profile: compare again with ncu's stored CSV (runs nothing)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    prof_path = args.profile or args.out / f"{args.model}_strict_fp32.dlscope"
    if args.profile is None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if x)
        cmd = [
            sys.executable,
            "-m",
            "dlscope",
            "profile",
            "--mode",
            "full",
            "-f",
            "-q",
            "-o",
            str(prof_path),
            "--",
            *program(args, args.step + 2),
        ]
        t = time.monotonic()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        print(f"profiled in {time.monotonic() - t:.0f} s", flush=True)
    prof, before, info = step_kernels(prof_path, args.step)
    skip = max(0, before - MARGIN)
    if args.ncu_csv:
        meas = read_window(args.ncu_csv)
    else:
        meas = ncu_window(args, skip, len(prof) + 2 * MARGIN, args.out / f"ncu_{args.model}.csv")
    pairs = align(prof, meas)
    res = compare(prof, meas, pairs, info)
    res.update(model=args.model, variant=args.variant, step=args.step, kernels_before=before, ncu_skip=skip)
    (args.out / f"roofline_ncu_{args.model}.json").write_text(json.dumps(res, indent=1, default=str))
    show(args.model, res)


if __name__ == "__main__":
    main()
