"""Importing a real Nsight Systems export: every table checked against the SQLite file itself."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.importers.base import ImportOptions
from dlscope.importers.run import import_files

from .conftest import DATA, assert_one_line_error, q

NSYS_GZ = DATA / "nsys" / "h100_nsys_mlp.sqlite.gz"
SESSION_START = 1795271749030963851  # TARGET_INFO_SESSION_START_TIME.utcEpochNs of the fixture


@pytest.fixture(scope="module")
def sqlite_path(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nsys") / "h100_nsys_mlp.sqlite"
    with gzip.open(NSYS_GZ, "rb") as g, open(out, "wb") as f:
        shutil.copyfileobj(g, f)
    return out


@pytest.fixture(scope="module")
def raw(sqlite_path):
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    return import_files([NSYS_GZ], tmp_path_factory.mktemp("p") / "mlp.dlscope")


@pytest.fixture(scope="module")
def data(profile):
    d = ProfileData.open(profile)
    yield d
    d.close()


def test_row_counts_match_the_export(data, raw):
    for table, nsys_table in [
        ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
        ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
        ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
        ("api", "CUPTI_ACTIVITY_KIND_RUNTIME"),
        ("sync", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    ]:
        assert data.count(table) == raw.execute(f"SELECT count(*) FROM {nsys_table}").fetchone()[0], table
    ranges = raw.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()[0]
    assert q(data.con, "SELECT count(*) FROM phases WHERE kind = 'range'")[0][0] == ranges == 24


def test_times_are_epoch_ns_with_exact_differences(data, raw):
    ours = q(data.con, "SELECT correlation_id, start_ns, end_ns FROM kernels ORDER BY correlation_id")
    theirs = raw.execute(
        "SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY correlationId"
    ).fetchall()
    assert [(c, s - SESSION_START, e - SESSION_START) for c, s, e in ours] == theirs
    assert data.meta.clock["nsys"][0]["offset_ns"] == SESSION_START
    assert data.meta.clock["nsys"][0]["source"] == "TARGET_INFO_SESSION_START_TIME.utcEpochNs"
    # the session start is 2026-11-21T14:35:49 UTC, as the export's utcTime says
    import datetime as dt

    t = dt.datetime.fromtimestamp(data.meta.clock["origin_ns"] / 1e9, dt.timezone.utc)
    assert (
        t.strftime("%Y-%m-%dT%H:%M:%S")
        == raw.execute("SELECT utcTime FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    )


def test_kernel_columns(data, raw):
    ours = q(
        data.con,
        """SELECT correlation_id, name, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers,
                                 static_shared_bytes, dynamic_shared_bytes, shared_bytes, stream, device, pid
                          FROM kernels ORDER BY correlation_id""",
    )
    theirs = raw.execute("""
        SELECT k.correlationId, s.value, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread,
               staticSharedMemory, dynamicSharedMemory, staticSharedMemory + dynamicSharedMemory, streamId, deviceId,
               p.pid
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        JOIN PROCESSES p ON p.globalPid = k.globalPid ORDER BY k.correlationId""").fetchall()
    assert ours == [tuple(r) for r in theirs]


def test_memcpy_kinds_follow_the_exports_enums(data, raw):
    ours = q(
        data.con,
        "SELECT copy_kind, src_kind, dst_kind, count(*), sum(bytes)::BIGINT FROM memcpy GROUP BY ALL ORDER BY 1",
    )
    theirs = raw.execute("""
        SELECT o.label, s.label, d.label, count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
        JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = m.copyKind JOIN ENUM_CUDA_MEM_KIND s ON s.id = m.srcKind
        JOIN ENUM_CUDA_MEM_KIND d ON d.id = m.dstKind GROUP BY 1, 2, 3""").fetchall()
    short = {"Host-to-Device": "HtoD", "Device-to-Host": "DtoH", "Device-to-Device": "DtoD"}
    assert sorted(ours) == sorted((short[o], s.lower(), d.lower(), n, b) for o, s, d, n, b in theirs)
    assert q(data.con, "SELECT DISTINCT mem_kind FROM memset") == [("device",)]


def test_api_calls_names_kinds_threads(data, raw):
    by_name = dict(q(data.con, "SELECT name, count(*) FROM api GROUP BY 1"))
    assert by_name["cudaLaunchKernel"] == 182  # stored as cudaLaunchKernel_v7000 in the export
    assert by_name["cudaStreamIsCapturing_v10000"] == 33  # a 5-digit suffix stays, as nsys prints it
    kinds = dict(q(data.con, "SELECT kind, count(*) FROM api GROUP BY 1"))
    exp = dict(
        raw.execute(
            "SELECT CASE eventClass WHEN 1 THEN 'driver' ELSE 'runtime' END, count(*) "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1"
        ).fetchall()
    )
    assert kinds == exp
    tids = {r[0] for r in q(data.con, "SELECT DISTINCT tid FROM api")}
    names = dict(
        raw.execute(
            "SELECT t.globalTid & 16777215, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
        ).fetchall()
    )
    assert {names[t] for t in tids} == {"python3", "pt_autograd_0"}
    assert q(data.con, "SELECT DISTINCT pid FROM api") == [(784,)]


def test_sync_records_take_kind_and_thread_from_their_api_call(data):
    rows = q(data.con, "SELECT kind, count(*), count(tid) FROM sync GROUP BY 1")
    assert rows == [("stream", 10, 10)]  # all ten come from cudaStreamSynchronize
    assert (
        q(
            data.con,
            """SELECT count(*) FROM sync s JOIN api a USING (correlation_id)
                          WHERE a.name = 'cudaStreamSynchronize' AND a.tid = s.tid""",
        )[0][0]
        == 10
    )


def test_nvtx_ranges_become_phases(data, raw):
    rows = q(data.con, "SELECT name, source, style, domain, min(depth), count(*) FROM phases GROUP BY ALL ORDER BY 1")
    assert rows == [
        ("postprocess", "nvtx", "pushpop", None, 1, 6),
        ("preprocess", "nvtx", "pushpop", None, 1, 6),
        ("step", "nvtx", "pushpop", None, 0, 6),
        ("train_step", "nvtx", "pushpop", None, 1, 6),
    ]
    ours = sorted(q(data.con, "SELECT start_ns - 1795271749030963851, end_ns - 1795271749030963851, name FROM phases"))
    theirs = sorted(
        raw.execute(
            "SELECT e.start, e.end, s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE eventType = 59"
        ).fetchall()
    )
    assert ours == theirs


def test_meta_devices_command_collectors(data):
    m = data.meta
    assert m.source == "imported:nsys"
    assert m.devices == [
        {
            "index": 0,
            "nsys_gpu_id": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "sms": 132,
            "memory_bytes": 85017493504,
            "uuid": "017487f3-f40b-1acf-4309-b8ce803ca0f9",
            "bus": "0000:00:06.0",
            "clock_hz": 1980000000,
            "memory_bandwidth_Bps": 3352320000000,
            "l2_bytes": 52428800,
            "chip": "GH100",
            "compute_capability": "9.0",
        }
    ]
    assert m.command == ["python3", "nsys_workload.py"]
    assert m.host == "vm"
    assert m.collectors["cupti"].status == "ok" and m.collectors["nvtx"].status == "ok"
    assert m.collectors["torch"].status == "unavailable"
    assert m.start_ns == SESSION_START + 492819616 and m.end_ns == SESSION_START + 11789981537
    assert any("2025.3.2" in n for n in m.notes)


def test_plain_sqlite_imports_like_the_gz(sqlite_path, data, tmp_path):
    p = import_files([sqlite_path], tmp_path / "plain.dlscope")
    d = ProfileData.open(p)
    try:
        for t in ("kernels", "api", "phases", "memcpy", "memset", "sync"):
            assert d.count(t) == data.count(t)
    finally:
        d.close()


def test_key_node_steps_tile_the_run(tmp_path, raw):
    p = import_files([NSYS_GZ], tmp_path / "kn.dlscope", ImportOptions(key_node="step"))
    d = ProfileData.open(p)
    try:
        steps = q(
            d.con,
            "SELECT step, start_ns - 1795271749030963851, end_ns - 1795271749030963851, source, warmup "
            "FROM steps ORDER BY step",
        )
        ends = [
            r[0]
            for r in raw.execute(
                "SELECT end FROM NVTX_EVENTS WHERE eventType = 59 AND textId = "
                "(SELECT id FROM StringIds WHERE value = 'step') ORDER BY end"
            )
        ]
        first = raw.execute(
            "SELECT min(start) FROM NVTX_EVENTS WHERE textId = (SELECT id FROM StringIds WHERE value = 'step')"
        ).fetchone()[0]
        assert steps == [(i, first if i == 0 else ends[i - 1], e, "key_node", False) for i, e in enumerate(ends)]
        assert d.meta.key_node == "step"
        # each kernel takes the step of the API call that launched it
        assert (
            q(
                d.con,
                """SELECT count(*) FROM kernels k JOIN api a USING (correlation_id)
                           WHERE k.step IS DISTINCT FROM a.step""",
            )[0][0]
            == 0
        )
        launched_in_steps = raw.execute(
            """
            SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
            WHERE r.start >= ? AND r.start < ?""",
            (first, ends[-1]),
        ).fetchone()[0]
        assert q(d.con, "SELECT count(*) FROM kernels WHERE step IS NOT NULL")[0][0] == launched_in_steps
    finally:
        d.close()


def test_unknown_key_node_is_one_line_error(cli, tmp_path):
    r = cli("import", NSYS_GZ, "-o", tmp_path / "x.dlscope", "--key-node", "no_such_range")
    assert r.code == 2
    assert_one_line_error(r.err)
    assert "no_such_range" in r.err


def _strip(src: Path, dst: Path, sql: list[str]) -> Path:
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    for s in sql:
        con.execute(s)
    con.commit()
    con.execute("VACUUM")
    con.close()
    return dst


def test_older_schema_without_optional_tables_and_columns(sqlite_path, tmp_path):
    """An export missing tables and columns that older nsys versions lack still imports; what is
    missing is empty and meta says why."""
    db = _strip(
        sqlite_path,
        tmp_path / "old.sqlite",
        [
            "DROP TABLE NVTX_EVENTS",
            "DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            "DROP TABLE TARGET_INFO_SESSION_START_TIME",
            "DROP TABLE ENUM_CUDA_MEM_KIND",
            "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN greenContextId",
            "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN mangledName",
            "ALTER TABLE CUPTI_ACTIVITY_KIND_MEMSET DROP COLUMN memKind",
            "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN eventClass",
        ],
    )
    p = import_files([db], tmp_path / "old.dlscope")
    d = ProfileData.open(p)
    try:
        assert d.count("kernels") == 212 and d.count("api") == 1579
        assert d.count("phases") == 0 and d.count("sync") == 0
        assert d.meta.collectors["nvtx"].status == "unavailable"
        assert "-t nvtx" in d.meta.collectors["nvtx"].reason
        assert any("no session start time" in n for n in d.meta.notes)
        # without a session start, times stay on the session clock
        assert q(d.con, "SELECT min(start_ns) FROM kernels")[0][0] == 9797363797
        # memory kinds fall back to nsys's default numbering; API kind to the name
        assert q(d.con, "SELECT DISTINCT src_kind FROM memcpy ORDER BY 1") == [("device",), ("pageable",)]
        assert dict(q(d.con, "SELECT kind, count(*) FROM api GROUP BY 1")) == {"driver": 1226, "runtime": 353}
        assert q(d.con, "SELECT count(*) FROM memset WHERE mem_kind IS NULL")[0][0] == 6
    finally:
        d.close()


def test_export_without_cuda_trace(sqlite_path, tmp_path, cli):
    db = _strip(
        sqlite_path,
        tmp_path / "nvtxonly.sqlite",
        [f"DROP TABLE CUPTI_ACTIVITY_KIND_{t}" for t in ("KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "SYNCHRONIZATION")],
    )
    p = import_files([db], tmp_path / "nvtxonly.dlscope")
    d = ProfileData.open(p)
    assert d.meta.collectors["cupti"].status == "unavailable"
    assert "-t cuda" in d.meta.collectors["cupti"].reason
    d.close()
    r = cli("stats", p, "--report", "cuda_gpu_kern_sum")
    assert r.code == 2 and "no kernels data" in r.err
    assert_one_line_error(r.err)
    r = cli("summary", p)
    assert r.code == 0 and "-t cuda" in r.out


DOMAINS_GZ = DATA / "nsys" / "h100_nsys_domains.sqlite.gz"


@pytest.fixture(scope="module")
def domains(tmp_path_factory):
    raw_path = tmp_path_factory.mktemp("draw") / "domains.sqlite"
    raw_path.write_bytes(gzip.decompress(DOMAINS_GZ.read_bytes()))
    con = sqlite3.connect(f"file:{raw_path}?mode=ro", uri=True)
    d = ProfileData.open(import_files([DOMAINS_GZ], tmp_path_factory.mktemp("d") / "domains.dlscope"))
    yield d, con
    d.close()
    con.close()


def test_nvtx_domains_styles_marks(domains):
    d, raw = domains
    rows = q(
        d.con,
        """SELECT name, domain, kind, style, min(depth), count(*) FROM phases
                       GROUP BY ALL ORDER BY name LIMIT 7""",
    )
    assert rows == [
        ("async_window", None, "range", "startend", None, 4),  # start/end ranges have no depth
        ("checkpoint", "model", "mark", None, None, 4),
        ("compute", "model", "range", "pushpop", 1, 4),
        ("iteration", None, "range", "pushpop", 0, 4),
        ("load", "data", "range", "pushpop", 1, 4),
        ("never_closed", None, "range", "pushpop", 0, 1),
        ("prefetch", "data", "range", "startend", None, 4),
    ]
    # nsys itself closes a range left open at exit, at the end of the session
    end = raw.execute(
        "SELECT e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE coalesce(s.value, e.text) = 'never_closed'"
    ).fetchone()[0]
    offset = raw.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    assert q(d.con, "SELECT end_ns FROM phases WHERE name = 'never_closed'")[0][0] == end + offset
    # start/end ranges keep the thread that started them, though another thread ended them
    starters = {r[0] for r in raw.execute("SELECT globalTid & 16777215 FROM NVTX_EVENTS WHERE eventType = 60")}
    assert {r[0] for r in q(d.con, "SELECT DISTINCT tid FROM phases WHERE style = 'startend'")} == starters
    marks = q(d.con, "SELECT count(*) FROM phases WHERE kind = 'mark' AND end_ns = start_ns")[0][0]
    assert marks == raw.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34").fetchone()[0] == 8


def test_waits_and_copies_of_every_kind(domains):
    d, raw = domains
    kinds = q(
        d.con, "SELECT s.kind, a.name, count(*) FROM sync s JOIN api a USING (correlation_id) GROUP BY ALL ORDER BY 1"
    )
    # the export gives cudaStreamSynchronize and cudaStreamWaitEvent the same syncType: the API decides
    assert kinds == [
        ("event", "cudaEventSynchronize", 4),
        ("stream", "cudaStreamSynchronize", 8),
        ("stream_wait_event", "cudaStreamWaitEvent", 4),
    ]
    assert (
        raw.execute(
            "SELECT count(DISTINCT syncType) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 2"
        ).fetchone()[0]
        == 1
    )
    copies = q(d.con, "SELECT copy_kind, src_kind, dst_kind, count(*) FROM memcpy GROUP BY ALL ORDER BY ALL")
    assert copies == [
        ("DtoD", "device", "device", 4),
        ("DtoH", "device", "pageable", 4),
        ("HtoD", "pageable", "device", 4),
        ("HtoD", "pinned", "device", 4),
    ]
    ctx = {r[0] for r in raw.execute("SELECT DISTINCT contextId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    assert {r[0] for r in q(d.con, "SELECT DISTINCT context FROM kernels")} == ctx


def test_range_without_end_ends_at_the_last_nvtx_timestamp(tmp_path):
    db = tmp_path / "open.sqlite"
    db.write_bytes(gzip.decompress(DOMAINS_GZ.read_bytes()))
    con = sqlite3.connect(db)
    n = con.execute(
        "UPDATE NVTX_EVENTS SET end = NULL WHERE text = 'never_closed' OR "
        "textId = (SELECT id FROM StringIds WHERE value = 'never_closed')"
    ).rowcount
    assert n == 1
    last, offset = con.execute(
        "SELECT max(max(start), max(end)), (SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME) FROM NVTX_EVENTS"
    ).fetchone()
    con.commit()
    con.close()
    d = ProfileData.open(import_files([db], tmp_path / "open.dlscope"))
    try:
        assert q(d.con, "SELECT end_ns FROM phases WHERE name = 'never_closed'")[0][0] == last + offset
        assert any("1 NVTX range(s) never ended" in n for n in d.meta.notes)
    finally:
        d.close()
