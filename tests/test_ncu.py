"""Nsight Compute: the CSV importer, the kernel_metrics table and report, and `dlscope ncu`.

Data: tests/data/gpu/h100_ncu_gemm.csv, a real `ncu --csv --page details` capture of a cuBLAS
SGEMM on an H100 (see tests/data/README.md). Expected values are read from that file with the
csv module here, independently of the importer.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports.kernel_metrics import NCU_REFUSED_NOTE, compute
from dlscope.application.ncu import DEFAULT_METRICS, ROOFLINE_METRICS
from dlscope.store.reader import open_profile

from .conftest import DATA, RESNET_TRACE, assert_one_line_error, q

NCU_CSV = DATA / "gpu" / "h100_ncu_gemm.csv"


def _fixture_rows() -> list[dict[str, str]]:
    text = NCU_CSV.read_text()
    return list(csv.DictReader(io.StringIO(text[text.index('"ID",') :])))


def _numeric(v: str) -> float | None:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return None


def test_import_details_csv_keeps_every_numeric_metric(tmp_path, cli):
    rows = _fixture_rows()
    expected = {
        (r["Section Name"], r["Metric Name"]): _numeric(r["Metric Value"])
        for r in rows
        if r["Metric Name"] and _numeric(r["Metric Value"]) is not None
    }
    r = cli("import", NCU_CSV, "-o", tmp_path / "n.dlscope")
    assert r.code == 0, r.err
    data = ProfileData.open(tmp_path / "n.dlscope")
    got = {(s, m): v for s, m, v in q(data.con, "SELECT section, metric, value FROM kernel_metrics")}
    assert got == expected and len(got) == 47
    assert q(data.con, "SELECT DISTINCT name, launch, device, pid FROM kernel_metrics") == [
        (rows[0]["Kernel Name"], 0, 0, 546)
    ]
    assert q(data.con, "SELECT unit FROM kernel_metrics WHERE metric = 'Duration'") == [("ns",)]


def test_kernel_metrics_report_says_compute_bound(tmp_path, cli):
    cli("import", NCU_CSV, "-o", tmp_path / "n.dlscope")
    res = compute(ProfileData.open(tmp_path / "n.dlscope"))
    row = res.table.to_pylist()[0]
    by_name = {r["Metric Name"]: _numeric(r["Metric Value"]) for r in _fixture_rows()}
    assert row["sm_pct"] == by_name["Compute (SM) Throughput"] == 87.55
    assert row["memory_pct"] == by_name["Memory Throughput"] == 59.91
    assert row["occupancy_pct"] == by_name["Achieved Occupancy"]
    assert row["ncu_ms"] == pytest.approx(by_name["Duration"] / 1e6)
    assert row["bound"] == "compute"  # SM 87.55% of peak > memory 59.91%


def test_raw_page_with_scaled_units(tmp_path, cli):
    # the raw page's shape: one column per metric, a units row; units scaled as ncu prints them
    raw = (
        "==PROF== Connected to process 9\nprogram output\n"
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Device","CC",'
        '"gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed",'
        '"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","dram__bytes.sum",'
        '"sm__sass_thread_inst_executed_op_ffma_pred_on.sum"\n'
        '"","","","","","","","","","usecond","%","%","Mbyte","inst"\n'
        '"0","9","python","h","k_elementwise","1","7","0","9.0","2.50","12.5","91.0","4.00","1,000,000"\n'
        '"1","9","python","h","k_elementwise","1","7","0","9.0","3.50","13.5","89.0","6.00","1,000,000"\n'
    )
    path = tmp_path / "raw.csv"
    path.write_text(raw)
    assert cli("import", path, "-o", tmp_path / "r.dlscope").code == 0
    row = compute(ProfileData.open(tmp_path / "r.dlscope")).table.to_pylist()[0]
    assert row["launches"] == 2 and row["ncu_ms"] == pytest.approx(0.003)  # mean of 2.5 and 3.5 us
    assert row["bound"] == "memory" and row["memory_pct"] == pytest.approx(90.0)
    # 2 FLOP per FMA over 5 MB of DRAM traffic, per launch
    assert row["flop_per_byte"] == pytest.approx(2e6 / 5e6)


@pytest.mark.parametrize(
    "content",
    [
        '"ID","Process ID","Process Name","Host Name","Kernel Name"\n"0","1"\n',
        (
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Metric Name",'
            '"Metric Unit","Metric Value"\n"0","1","p","h","k","Duration"\n'
        ),
    ],
)
def test_bad_ncu_csv_is_one_line(tmp_path, cli, content):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    r = cli("import", path, "-o", tmp_path / "b.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)


FAKE_NCU = """#!{python}
import json, re, sys
args = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
log = args[args.index("--log-file") + 1]
name = args[args.index("--kernel-name") + 1]
text = open({csv!r}).read()
kernel = re.search(r'"127.0.0.1","([^"]+)"', text).group(1)
# ncu's own printed name differs from the profile's (dlscope keeps the profile's)
open(log, "w").write(text.replace(kernel, "printed by ncu"))
"""


@pytest.fixture
def small_profile(tmp_path, cli):
    out = tmp_path / "rn.dlscope"
    assert cli("import", RESNET_TRACE, "-o", out).code == 0
    return out


def test_dlscope_ncu_measures_the_top_kernels(tmp_path, cli, small_profile):
    calls = tmp_path / "calls.jsonl"
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, calls=str(calls), csv=str(NCU_CSV)))
    ncu.chmod(0o755)
    r = cli("ncu", small_profile, "--top", "2", "--ncu", ncu, "--", "python3", "train.py")
    assert r.code == 0, r.err
    # the two costliest kernels of the trace, computed here from its JSON
    with gzip.open(RESNET_TRACE) as f:
        events = json.load(f)["traceEvents"]
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for e in events:
        if e.get("cat") == "kernel":
            total[e["name"]] = total.get(e["name"], 0) + e["dur"]
            count[e["name"]] = count.get(e["name"], 0) + 1
    top = sorted(total, key=lambda n: -total[n])[:2]
    argv = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(argv) == 2
    for a, name in zip(argv, top):
        assert a[-2:] == ["python3", "train.py"] and "--" not in a  # ncu [options] app [args], as run on the H100
        pattern = a[a.index("--kernel-name") + 1]
        assert pattern.startswith("regex:^") and pattern.endswith("$")
        assert re.fullmatch(pattern[len("regex:") :], name)  # the escaped name matches itself only
        assert a[a.index("--launch-skip") + 1] == str(min(1, count[name] - 1))
        assert "SpeedOfLight" in a and "--print-units" in a
    data = ProfileData.open(small_profile)
    got = q(data.con, "SELECT name, count(DISTINCT launch) FROM kernel_metrics GROUP BY 1 ORDER BY 1")
    assert got == sorted((n, 1) for n in top)
    row = {r["name"]: r for r in compute(data).table.to_pylist()}
    for name in top:
        assert row[name]["profile_ms"] == pytest.approx(total[name] / 1e3, rel=1e-6)
        assert row[name]["bound"] == "compute"
    # the profile is otherwise untouched and still opens
    assert open_profile(small_profile).meta.table_rows["kernel_metrics"] == 2 * 47


def test_dlscope_ncu_without_ncu_is_one_line(tmp_path, cli, small_profile, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("DLSCOPE_NCU", raising=False)
    if Path("/usr/local/cuda/bin/ncu").exists() or shutil.which("ncu"):
        pytest.skip("this machine has ncu")
    r = cli("ncu", small_profile, "--", "python3", "x.py")
    assert r.code == 2 and "Nsight Compute (ncu) is not installed" in r.err
    assert_one_line_error(r.err)


def test_profiles_without_kernel_metrics_still_open(tmp_path, cli, small_profile):
    (small_profile / "kernel_metrics.parquet").unlink()  # as written before the table existed
    data = ProfileData.open(small_profile)
    assert q(data.con, "SELECT count(*) FROM kernel_metrics") == [(0,)]


PICKY_NCU = """#!{python}
import json, sys
args = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
log = args[args.index("--log-file") + 1]
if args[args.index("--kernel-name-base") + 1] != "function":
    open(log, "w").write("==WARNING== No kernels were profiled.\\n")  # ncu spells the name differently
else:
    open(log, "w").write(open({csv!r}).read())
"""


def test_dlscope_ncu_retries_by_function_name(tmp_path, cli, small_profile):
    calls = tmp_path / "calls.jsonl"
    ncu = tmp_path / "ncu"
    ncu.write_text(PICKY_NCU.format(python=sys.executable, calls=str(calls), csv=str(NCU_CSV)))
    ncu.chmod(0o755)
    r = cli("ncu", small_profile, "--top", "1", "--ncu", ncu, "--", "python3", "train.py")
    assert r.code == 0, r.err
    first, second = [json.loads(line) for line in calls.read_text().splitlines()]
    assert second[second.index("--kernel-name-base") + 1] == "function"
    name = q(ProfileData.open(small_profile).con, "SELECT DISTINCT name FROM kernel_metrics")[0][0]
    # the bare function name of the profile's demangled kernel name
    bare = second[second.index("--kernel-name") + 1].removeprefix("regex:^").removesuffix("$")
    assert re.sub(r"\\(.)", r"\1", bare) in name and "<" not in bare and "(" not in bare


def _kernel_ms(trace: Path) -> dict[str, float]:
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    out: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "kernel":
            out[e["name"]] = out.get(e["name"], 0.0) + e["dur"] / 1e3
    return out


def test_kernel_bound_rule_fires_on_a_gpu_bound_model(tmp_path, cli):
    from dlscope import advice

    trace = DATA / "kineto" / "h100_gpt6_fp32.trace.json.gz"
    prof = tmp_path / "gpt.dlscope"
    assert cli("import", trace, "-o", prof).code == 0
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, calls=str(tmp_path / "c.jsonl"), csv=str(NCU_CSV)))
    ncu.chmod(0o755)
    assert cli("ncu", prof, "--top", "3", "--ncu", ncu, "--", "true").code == 0
    data = ProfileData.open(prof)
    found = {f.id: f for f in advice.evaluate(data)}
    f = found["kernel_bound"]
    assert "compute-bound" in f.title
    # its bound: each of the 3 kernels' time per step (2 steps) times the SGEMM's headroom to its
    # compute peak, 1 - 87.55% (the fixture's measurement), from the trace's own numbers
    per_kernel = _kernel_ms(trace)
    top = sorted(per_kernel, key=lambda n: -per_kernel[n])[:3]
    expected = sum(per_kernel[n] / 2 * (1 - 0.8755) for n in top)
    assert f.saving_ms_per_step == pytest.approx(expected, rel=1e-3)


def test_kernel_bound_rule_silent_when_the_gpu_is_not_the_limit(tmp_path, cli, small_profile):
    # ResNet-50's steps wait for input: 12.5% headroom on its top kernels is under 2% of a step
    from dlscope import advice

    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, calls=str(tmp_path / "c.jsonl"), csv=str(NCU_CSV)))
    ncu.chmod(0o755)
    assert cli("ncu", small_profile, "--top", "3", "--ncu", ncu, "--", "true").code == 0
    run = advice.run(ProfileData.open(small_profile))
    assert "kernel_bound" in run.clean and "kernel_bound" not in {f.id for f in run.findings}


@pytest.mark.parametrize(
    "mangled,bare",
    [
        # CUPTI's names of cuBLAS's, cuRAND's and CUB's kernels on the H100 (tests/data/gpu_h100/cupy_cupti.dlscope)
        ("_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nn_align1EEvNT_6ParamsE", "Kernel2"),
        (
            "_Z20generate_seed_pseudoI10rng_configI17curandStateXORWOWL14curandOrdering101EEEvyyyS2_PS1_Pj",
            "generate_seed_pseudo",
        ),
        (
            (
                "_ZN3cub43CUB_300102_SM_750_800_860_890_900_1000_12006detail6reduce18DeviceReduceKernelINS2_10policy_hubIfjN4cuda3"
                "std3__44plusIvEEE10Policy1000EPfjS9_fNS7_8identityEEEvT0_PT3_T1_NS0_13GridEvenShareISH_EET2_T4_"
            ),
            "DeviceReduceKernel",
        ),
        ("_ZL5myKerPf", "myKer"),
        ("_ZN2ns1kEv", "k"),
        ("_ZNK3Foo3barEv", "bar"),
    ],
)
def test_the_function_name_retry_reads_mangled_names(mangled, bare):
    """The issue: `dlscope ncu --top 2` on a CuPy program measured 1 of 2 kernels on the H100: the
    cuBLAS SGEMM, known by its mangled name, matched nothing, and the retry by function name
    searched for the whole mangled string. The retry now names the function as ncu's 'function'
    base does (c++filt on these names gives ``cutlass::Kernel2<...>(...)``, ``generate_seed_pseudo<...>``,
    ``cub::...::DeviceReduceKernel<...>``, ``myKer(float*)``, ``ns::k()``, ``Foo::bar() const``)."""
    from dlscope.application.ncu import function_name

    assert function_name(mangled) == bare


@pytest.mark.parametrize(
    "name, bare",
    [
        # CUPTI's names on the H200 (bench/roofline_vs_ncu.py's GPT): a scope in parentheses, a lambda's template
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, "
            "float const*, float const*, float const*, float*, float*, float*)",
            "vectorized_layer_norm_kernel",
        ),
        (
            "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar "
            "const&)::{lambda()#1}>(int, int*)",
            "elementwise_kernel_with_index",
        ),
        ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int)", "vectorized_gather_kernel"),
    ],
)
def test_the_function_name_of_a_kernel_in_an_anonymous_namespace(name, bare):
    """Found on the H200: ``function_name`` cut '(anonymous namespace)' as if it were the argument list
    and gave '' for PyTorch's layer-norm kernel, so ncu's retry by function name searched for nothing."""
    from dlscope.application.ncu import function_name

    assert function_name(name) == bare


REGEX_REFUSING_NCU = """#!{python}
import csv, io, json, sys
args = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
log = args[args.index("--log-file") + 1]
given = [args[i + 1] for i, a in enumerate(args) if a == "--metrics"]
if len(given) > 1:  # ncu 2025.3's words on the H100
    print("==ERROR== option '--metrics' cannot be specified more than once. Use --help for further details.")
    sys.exit(1)
metrics = given[0].split(",") if given else []
if any(m.startswith({refuse!r}) for m in metrics):
    print("==ERROR== Failed to find metric " + next(m for m in metrics if m.startswith({refuse!r})))
    sys.exit(1)
text = open({csv!r}).read()
# the asked-for metrics in ncu's own section, as ncu 2025.3 printed --metrics on an H100
row = next(csv.reader([next(line for line in text.splitlines() if line.startswith('"0",'))]))
out = io.StringIO()
w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\\n")
for m in metrics:
    w.writerow(row[:11] + ["Command line profiler metrics", m, "byte", "1,024"] + [""] * (len(row) - 15))
open(log, "w").write(text.rstrip("\\n") + "\\n" + out.getvalue())
"""


def _refusing_ncu(tmp_path: Path, refuse: str) -> tuple[Path, Path]:
    """A fake ncu (REGEX_REFUSING_NCU) refusing every metric that starts with ``refuse``, and the
    file where it writes each command line it was given."""
    calls = tmp_path / "calls.jsonl"
    ncu = tmp_path / "ncu"
    ncu.write_text(REGEX_REFUSING_NCU.format(python=sys.executable, calls=str(calls), csv=str(NCU_CSV), refuse=refuse))
    ncu.chmod(0o755)
    return ncu, calls


def test_dlscope_ncu_asks_for_fewer_metrics_when_ncu_refuses_some(tmp_path, cli, small_profile):
    """An ncu that refuses any regex metric (as the whole default set was dropped on an H100): the
    second run asks for the roofline's counters by their plain names, which are stored, and the
    profile keeps ncu's words for the report."""
    ncu, calls = _refusing_ncu(tmp_path, "regex:")
    r = cli("ncu", small_profile, "--top", "1", "--ncu", ncu, "--", "python3", "train.py")
    assert r.code == 0, r.err
    assert "ncu refused the first set: ==ERROR== Failed to find metric regex:" in r.err
    argv = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(argv) == 2  # the regex set once, the plain names once; the name filter was never at fault
    assert argv[0][argv[0].index("--kernel-name-base") + 1] == argv[1][argv[1].index("--kernel-name-base") + 1]
    plain = [a for i, a in enumerate(argv[1]) if argv[1][i - 1] == "--metrics"]
    assert plain == [",".join(ROOFLINE_METRICS)]
    data = ProfileData.open(small_profile)
    got = {
        m: v
        for m, v in q(
            data.con, "SELECT metric, value FROM kernel_metrics WHERE section = 'Command line profiler metrics'"
        )
    }
    assert got == {m: 1024.0 for m in ROOFLINE_METRICS}
    assert any(n.startswith(NCU_REFUSED_NOTE) for n in open_profile(small_profile).meta.notes)


def test_the_default_metrics_go_to_ncu_as_one_list(tmp_path, cli, small_profile):
    """On the H100 (ncu 2025.3) every kernel's first run was refused with "option '--metrics'
    cannot be specified more than once": dlscope passed one --metrics per metric, so the second
    and third sets were tried and no roofline came back. The raw metrics now go as one
    comma-separated list: one ncu run per kernel, every metric asked for stored, no refusal note."""
    ncu, calls = _refusing_ncu(tmp_path, "nothing:")
    r = cli("ncu", small_profile, "--top", "1", "--ncu", ncu, "--", "python3", "train.py")
    assert r.code == 0 and "refused" not in r.err, r.err
    argv = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(argv) == 1 and argv[0].count("--metrics") == 1
    got = {
        m
        for (m,) in q(
            ProfileData.open(small_profile).con,
            "SELECT metric FROM kernel_metrics WHERE section = 'Command line profiler metrics'",
        )
    }
    assert got == set(DEFAULT_METRICS)
    assert not any(n.startswith(NCU_REFUSED_NOTE) for n in open_profile(small_profile).meta.notes)
    # the user's own --metrics, repeated or comma-separated, become one list as well
    calls.unlink()
    assert (
        cli(
            "ncu",
            small_profile,
            "--top",
            "1",
            "--ncu",
            ncu,
            "--metrics",
            "dram__bytes.sum",
            "--metrics",
            "a.sum,b.sum",
            "--",
            "python3",
            "train.py",
        ).code
        == 0
    )
    argv = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [a for i, a in enumerate(argv[0]) if argv[0][i - 1] == "--metrics"] == ["dram__bytes.sum,a.sum,b.sum"]


def test_no_roofline_says_what_ncu_refused(tmp_path, cli, small_profile):
    """An ncu that refuses every raw metric: the sections alone are stored (a third run without
    --metrics), and kernel_metrics says why there is no roofline in ncu's words."""
    ncu, calls = _refusing_ncu(tmp_path, "")
    r = cli("ncu", small_profile, "--top", "1", "--ncu", ncu, "--", "python3", "train.py")
    assert r.code == 0, r.err
    argv = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [a.count("--metrics") for a in argv] == [1, 1, 0]
    notes = compute(ProfileData.open(small_profile)).notes
    assert any(
        "no roofline position" in n and "(ncu refused them: ==ERROR== Failed to find metric dram__bytes" in n
        for n in notes
    ), notes


def test_the_help_names_the_default_sections():
    """The command's help spells the default section set without importing the driver: keep them in step."""
    from dlscope.application.ncu import DEFAULT_SECTIONS
    from dlscope.cli.ncu import _SECTIONS_HELP

    assert ", ".join(DEFAULT_SECTIONS) == _SECTIONS_HELP
