"""dlscope merge: the profiles of a job's hosts on one clock. Two "hosts" are made from a real
2-GPU DDP profile (H100s, one host: a true common clock), one of them moved to a clock seconds off
and drifting; the merge must put every event back within 50 us and analyse like the original."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports import comm_sum, overlap
from dlscope.application.merge import TIME_COLUMNS, decoded_tables
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta

from .conftest import assert_one_line_error, run_dlscope

JOB = Path(__file__).parent / "data" / "advice_truth_dist" / "ddp2_straggler.dlscope"


def _host(data: ProfileData, rank: int, out: Path, offset_ns: int = 0, drift_ppm: float = 0.0, anchor: int = 0) -> Path:
    """The rows of one rank as its own profile, its clock moved: t' = t + offset + drift x (t - anchor)."""
    b = ProfileBuilder()
    for name, t in decoded_tables(data).items():
        if "rank" in t.column_names:
            t = t.filter(pc.equal(t.column("rank"), rank))
        for c in TIME_COLUMNS:
            if c in t.column_names and t.num_rows:
                v = t.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
                moved = v + offset_ns + np.rint((v - anchor) * drift_ppm * 1e-6).astype(np.int64)
                t = t.set_column(t.schema.get_field_index(c), c, pa.array(moved, pa.int64()))
        b.add(name, t)
    meta = Meta.from_dict(data.meta.to_dict())
    meta.ranks, meta.host = [rank], f"host{rank}"
    meta.devices = [d for d in meta.devices if d.get("rank") == rank]
    b.write(out, meta)
    return out


@pytest.mark.parametrize("offset_s,drift_ppm", [(2.5, 80.0), (-7.0, -30.0), (0.0, 0.0)])
def test_offsets_and_drift_are_recovered_within_50_us(tmp_path, offset_s, drift_ppm):
    job = ProfileData.open(JOB)
    anchor = int(job.scalar("SELECT min(start_ns) FROM steps"))
    a = _host(job, 0, tmp_path / "a.dlscope")
    b = _host(job, 1, tmp_path / "b.dlscope", int(offset_s * 1e9), drift_ppm, anchor)
    r = run_dlscope("merge", b, a, "-o", tmp_path / "job.dlscope")  # order does not matter: rank 0 is the reference
    assert r.returncode == 0, r.stderr
    assert "offset" in r.stderr and "residual" in r.stderr
    merged = ProfileData.open(tmp_path / "job.dlscope")
    assert merged.meta.ranks == [0, 1]
    for table in ("kernels", "api", "steps", "phases", "comms"):
        q = f"SELECT start_ns, end_ns FROM {table} WHERE rank = 1 ORDER BY start_ns, end_ns"
        want = np.array(job.con.execute(q).fetchall(), dtype=np.int64)
        got = np.array(merged.con.execute(q).fetchall(), dtype=np.int64)
        assert got.shape == want.shape and len(want), table
        assert np.abs(got - want).max() <= 50_000, (table, int(np.abs(got - want).max()))
    # analysed like the one-launch job: comm_sum and overlap within 5%
    for report, col in ((comm_sum, "total_ms"), (overlap, "comm_ms")):
        x = report.REPORT.compute(job).table.column(col).to_pylist()
        y = report.REPORT.compute(merged).table.column(col).to_pylist()
        assert len(x) == len(y) and all(abs(p - q_) <= 0.05 * abs(p) + 1e-9 for p, q_ in zip(x, y)), (report, x, y)
    fit = merged.meta.clock["aligned"][0]
    # the drift from 0.4 s of collectives whose ends differ by 8-20 us between ranks: within 10 ppm
    assert abs(fit["offset_ns"] / 1e9 - offset_s) < 1e-3 and abs(fit["drift_ppm"] - drift_ppm) < 10.0


def test_hosts_without_shared_collectives_or_with_the_same_rank_are_refused(tmp_path):
    job = ProfileData.open(JOB)
    a = _host(job, 0, tmp_path / "a.dlscope")
    r = run_dlscope("merge", a, a, "-o", tmp_path / "x.dlscope")
    assert r.returncode == 2 and "rank 0 is in both" in r.stderr
    assert_one_line_error(r.stderr)
    lone = tmp_path / "lone.dlscope"
    b = ProfileBuilder()
    t = decoded_tables(job)["steps"]
    b.add("steps", t.filter(pc.equal(t.column("rank"), 1)))
    meta = Meta.from_dict(job.meta.to_dict())
    meta.ranks = [1]
    b.write(lone, meta)
    r = run_dlscope("merge", a, lone, "-o", tmp_path / "y.dlscope")
    assert r.returncode == 2 and "shares no collective" in r.stderr
    assert_one_line_error(r.stderr)


def test_a_job_of_two_launches_merges_into_one(tmp_path):
    """Two torchrun launches of one job (--nnodes 2, one rank each, Gloo on the CPU), each under its
    own dlscope profile, as two hosts would run it: each profile holds its own rank only (the
    launcher's rows go under the host's lowest rank, not rank 0), and the merge makes one job."""
    import socket
    import subprocess
    import sys
    import threading

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prog = Path(__file__).parents[1] / "bench" / "advice_truth" / "dist_train.py"
    out: dict[int, subprocess.CompletedProcess] = {}

    def host(node: int) -> None:
        out[node] = run_dlscope(
            "profile",
            "-o",
            tmp_path / f"host{node}.dlscope",
            "--quiet",
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node-rank",
            str(node),
            "--nproc-per-node",
            "1",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            str(prog),
            "--steps",
            "10",
            "--seq",
            "32",
            "--batch",
            "2",
            timeout=300,
        )

    threads = [threading.Thread(target=host, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.returncode == 0 for p in out.values()), {n: p.stderr[-500:] for n, p in out.items()}
    for node in (0, 1):
        d = ProfileData.open(tmp_path / f"host{node}.dlscope")
        assert d.meta.ranks == [node]
        d.close()
    m = run_dlscope("merge", tmp_path / "host0.dlscope", tmp_path / "host1.dlscope", "-o", tmp_path / "job.dlscope")
    assert m.returncode == 0, m.stderr
    job = ProfileData.open(tmp_path / "job.dlscope")
    assert job.meta.ranks == [0, 1]
    assert job.scalar("SELECT count(DISTINCT rank) FROM steps") == 2


def _by_hand_transfer(data: ProfileData) -> dict[tuple[str, int], float]:
    """(operation, size) -> median over the operations every rank recorded of the shortest rank's
    duration, us; the k-th operation of a kind on each rank is the same collective."""
    rows = data.con.execute("""SELECT rank, name, in_bytes, start_ns, end_ns FROM comms
                               WHERE step IN (SELECT step FROM sel_steps) ORDER BY rank, start_ns""").fetchall()
    every = data.con.execute("SELECT rank, name, start_ns FROM comms ORDER BY rank, start_ns").fetchall()
    nth: dict[tuple[int, str, int], int] = {}
    count: dict[tuple[int, str], int] = {}
    for rank, name, start in every:
        count[rank, name] = count.get((rank, name), 0) + 1
        nth[rank, name, start] = count[rank, name]
    ranks = {r for r, *_ in rows}
    inst: dict[tuple[str, int], dict[int, dict[int, int]]] = {}
    for rank, name, size, s, e in rows:
        inst.setdefault((name, size), {}).setdefault(nth[rank, name, s], {})[rank] = e - s
    return {
        k: float(np.median([min(v.values()) for v in by.values() if set(v) == ranks])) / 1e3
        for k, by in inst.items()
        if any(set(v) == ranks for v in by.values())
    }


def test_two_launches_on_h100s_merge_into_the_one_launch_jobs_collectives(tmp_path):
    """2 H100s (lease 4, bench/gpu_dist_run3.sh): the DDP job launched as two "hosts" of one GPU
    each (torchrun --nnodes 2, each under its own dlscope profile), merged, against the same job in
    one launch. Which rank arrives last differs from run to run, and with it the waits inside each
    collective (mean 774 us against 157 us for the 28 MB all-reduce); the collectives' own time, the
    last-arriving rank's (transfer_us), agrees within 5% for every kind and size."""
    real = Path(__file__).parent / "data" / "advice_truth_dist"
    m = run_dlscope(
        "merge",
        real / "lease4_twolaunch_host0.dlscope",
        real / "lease4_twolaunch_host1.dlscope",
        "-o",
        tmp_path / "job.dlscope",
    )
    assert m.returncode == 0, m.stderr
    job = ProfileData.open(tmp_path / "job.dlscope")
    one = ProfileData.open(real / "lease4_ddp2_balanced.dlscope")
    got = {}
    for name, d in (("job", job), ("one", one)):
        rows = comm_sum.compute(d).table.to_pylist()
        got[name] = {(r["operation"], r["size_bytes"]): r for r in rows}
        by_hand = _by_hand_transfer(d)
        for (op, size), r in got[name].items():
            if op == "allreduce":  # its message is the rank's buffer: size_bytes = in_bytes
                assert r["transfer_us"] == pytest.approx(by_hand[op, size], rel=1e-9), (name, op, size)
    assert set(got["job"]) == set(got["one"])
    for key, r in got["job"].items():
        o = got["one"][key]
        assert r["count"] == o["count"] and r["ranks_in_group"] == o["ranks_in_group"] == 2
        if key[0] == "allreduce":
            assert r["transfer_us"] == pytest.approx(o["transfer_us"], rel=0.05), key
            assert r["transfer_us"] <= r["mean_us"]


def _hidden_by_hand(data: ProfileData) -> tuple[float, float]:
    """(transfer ns, hidden ns) over the collectives every rank recorded, each taken on the rank with
    its shortest record, against that rank's compute kernels merged in plain Python."""
    from dlscope.analysis.core.gpu_work import gpu_work_sql

    comms = data.con.execute("""SELECT rank, name, group_name, start_ns, end_ns FROM comms
                                WHERE "where" = 'gpu' ORDER BY rank, start_ns""").fetchall()
    nth: dict[tuple[int, str, str], int] = {}
    inst: dict[tuple[str, str, int], list[tuple[int, int, int]]] = {}
    for rank, name, group, s, e in comms:
        k = nth[rank, name, group] = nth.get((rank, name, group), 0) + 1
        inst.setdefault((name, group, k), []).append((e - s, rank, s))
    ranks = {r for r, *_ in comms}
    kernels = data.con.execute(
        f"SELECT rank, start_ns, end_ns FROM ({gpu_work_sql(data)}) WHERE category = 'compute' ORDER BY rank, start_ns"
    ).fetchall()
    merged: dict[int, list[list[int]]] = {}
    for rank, s, e in kernels:
        m = merged.setdefault(rank, [])
        if m and s <= m[-1][1]:
            m[-1][1] = max(m[-1][1], e)
        else:
            m.append([s, e])
    sel = {r[0] for r in data.con.execute("SELECT step FROM sel_steps").fetchall()}
    steps = dict(
        ((r, s), st)
        for r, s, st in data.con.execute("SELECT rank, start_ns, step FROM comms WHERE \"where\" = 'gpu'").fetchall()
    )
    total = hidden = 0
    for recs in inst.values():
        if {r for _, r, _ in recs} != ranks:
            continue
        dur, rank, s = min(recs)
        if steps[rank, s] not in sel:
            continue
        total += dur
        hidden += sum(max(0, min(s + dur, b) - max(s, a)) for a, b in merged.get(rank, []))
    return total, hidden


def test_collective_overlap_is_the_same_for_two_launches_and_one(tmp_path):
    """The same 2-GPU pair as above: per rank, `overlap` tells the waits apart (exposed 2.75 and 0.36
    ms a step merged, 0.34 and 1.46 in one launch); each collective on its last-arriving rank,
    `collective_overlap` gives the job's own overlap: within 5% between the two runs, and equal to
    the same sum done here by hand."""
    from dlscope.analysis.reports import collective_overlap

    real = Path(__file__).parent / "data" / "advice_truth_dist"
    assert (
        run_dlscope(
            "merge",
            real / "lease4_twolaunch_host0.dlscope",
            real / "lease4_twolaunch_host1.dlscope",
            "-o",
            tmp_path / "job.dlscope",
        ).returncode
        == 0
    )
    got = {}
    for name, path in (("job", tmp_path / "job.dlscope"), ("one", real / "lease4_ddp2_balanced.dlscope")):
        d = ProfileData.open(path)
        rows = collective_overlap.REPORT.compute(d).table.to_pylist()
        got[name] = next(r for r in rows if r["operation"] == collective_overlap.ALL)
        total, hidden = _hidden_by_hand(d)
        assert got[name]["transfer_ms"] == pytest.approx(total / 1e6, rel=1e-9)
        assert got[name]["overlapped_ms"] == pytest.approx(hidden / 1e6, rel=1e-9)
        per_rank = overlap.compute(d).table.to_pylist()
        assert max(r["exposed_ms"] for r in per_rank) > 3 * min(r["exposed_ms"] for r in per_rank)  # the waits
    for col in ("overlap_pct", "exposed_ms", "transfer_ms"):
        assert got["job"][col] == pytest.approx(got["one"][col], rel=0.05), col
