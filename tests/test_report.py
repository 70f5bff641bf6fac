"""The HTML report: its sections hold the profile's numbers, every profile-derived name is shown
as text, it references nothing outside itself, and it opens in headless Chromium with no console
errors and with its plots drawn (screenshot kept for a person to look at)."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pyarrow as pa
import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.steps import step_stats
from dlscope.application.report import build_report
from dlscope.render.html import CSP, render_report, write_report
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import CollectorStatus, Meta

from . import browser
from .conftest import assert_one_line_error
from .report_helpers import FakeFinding
from .test_report_analysis import nvml_counters

XSS = [
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>",
    '"><svg onload=alert(3)>',
    "x' onmouseover='alert(4)",
    "&lt;already-escaped&gt; & <b>bold</b>",
]
EPOCH = 1_800_000_000_000_000_000


class _Text(HTMLParser):
    """The page as a browser would show it: text content, plus every tag and attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> _Text:
    p = _Text()
    p.feed(html)
    return p


def screenshot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: $DLSCOPE_SCREENSHOTS when set (to look at them), else tmp."""
    d = Path(os.environ.get("DLSCOPE_SCREENSHOTS", tmp_path))
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_report_sections_hold_the_profiles_numbers(resnet_profile):
    data = ProfileData.open(resnet_profile)
    html = render_report(build_report(data))
    page = parse(html)
    text = " ".join(page.text)
    st = step_stats(data)
    assert f"{st.mean_ms:,.3f} ms" in text and "131.609 ms" in text
    for anchor in ("summary", "advice", "steps", "phases", "gpu", "kernels", "ops", "roofline", "capture"):
        assert any(t == "h2" and a.get("id") == anchor for t, a in page.tags), anchor
    # the expert system's findings, with their bound and evidence (numbers checked in tests/test_advice_*.py)
    assert "The GPU waits for input data" in text and "input_bound" in text and "sync_in_step" in text
    assert any(t == "p" and a.get("class") == "bound" for t, a in page.tags)
    # charts: step histogram, steps in order, phases per step, GPU busy, the roofline (the trace has shapes and
    # names its H100; the chart's figures are checked in tests/test_report_roofline.py)
    assert sum(t == "svg" for t, _ in page.tags) == 5
    assert sum(t == "rect" and a.get("class") == "seg" for t, a in page.tags) == 3 * 4  # 3 steps x 3 phases+outside
    assert sum(t == "rect" and a.get("class") == "band" for t, a in page.tags) == 9  # phases shaded
    names = [a.get("title") for t, a in page.tags if t == "td" and a.get("title")]
    assert names[0].startswith("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128")
    assert "aten::convolution_backward" in names
    assert "31.2% of kernel time" in text  # tensor cores: TF32 convolutions
    assert "NVIDIA H100 80GB HBM3" in text and "kineto" in text


def test_report_is_self_contained(resnet_profile):
    html = render_report(build_report(ProfileData.open(resnet_profile)))
    page = parse(html)
    assert "<script" not in html.lower()
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [CSP] and "default-src 'none'" in CSP
    for tag, attrs in page.tags:
        for key in ("src", "href", "srcset", "data", "action"):
            v = attrs.get(key)
            # the advice's documentation links are the one way out: plain https anchors, never loaded
            doc_link = (
                tag == "a"
                and key == "href"
                and v is not None
                and v.startswith("https://")
                and attrs.get("rel") == "noreferrer"
            )
            assert v is None or v.startswith("#") or doc_link, f"<{tag} {key}={v}> loads or links outside the page"
    assert not re.search(r"url\(|@import", html)


def nasty_profile(tmp_path: Path) -> Path:
    """A profile whose every name is an injection attempt."""
    n = len(XSS)
    b = ProfileBuilder()
    b.add(
        "steps",
        pa.table(
            {
                "rank": [0, 0],
                "step": [0, 1],
                "start_ns": [EPOCH, EPOCH + 10**7],
                "end_ns": [EPOCH + 10**7, EPOCH + 2 * 10**7],
                "source": ["dlscope"] * 2,
                "warmup": [False, False],
                "pid": [1, 1],
                "tid": [1, 1],
            }
        ),
    )
    b.add(
        "phases",
        pa.table(
            {
                "rank": [0] * n,
                "pid": [1] * n,
                "tid": [1] * n,
                "start_ns": [EPOCH + i * 10**6 for i in range(n)],
                "end_ns": [EPOCH + i * 10**6 + 5 * 10**5 for i in range(n)],
                "name": XSS,
                "kind": ["range"] * n,
                "source": ["dlscope"] * n,
            }
        ),
    )
    b.add(
        "kernels",
        pa.table(
            {
                "rank": [0] * n,
                "device": [0] * n,
                "stream": [7] * n,
                "start_ns": [EPOCH + i * 10**6 for i in range(n)],
                "end_ns": [EPOCH + i * 10**6 + 10**5 * (i + 1) for i in range(n)],
                "name": XSS,
            }
        ),
    )
    b.add(
        "ops",
        pa.table(
            {
                "rank": [0] * n,
                "pid": [1] * n,
                "tid": [1] * n,
                "start_ns": [EPOCH + i * 10**6 for i in range(n)],
                "end_ns": [EPOCH + i * 10**6 + 10**5 for i in range(n)],
                "name": XSS,
                "op_id": list(range(n)),
            }
        ),
    )
    b.add(
        "counters",
        pa.table(
            {
                "rank": [0] * n,
                "device": [0] * n,
                "ts_ns": [EPOCH + i * 10**6 for i in range(n)],
                "metric": XSS,
                "value": [1.0] * n,
            }
        ),
    )
    meta = Meta(
        source=XSS[1],
        command=["python", XSS[0]],
        host=XSS[2],
        notes=list(XSS),
        devices=[{"rank": 0, "index": 0, "name": XSS[3]}],
        collectors={XSS[4]: CollectorStatus("unavailable", XSS[0], {"x": XSS[1]})},
    )
    path = tmp_path / "nasty.dlscope"
    b.write(path, meta)
    return path


def test_names_are_escaped_in_the_html(tmp_path):
    html = render_report(build_report(ProfileData.open(nasty_profile(tmp_path))))
    page = parse(html)
    text = "".join(page.text)
    for name in XSS:
        assert name not in html, f"{name!r} is in the page unescaped"
        assert name in text or name in [a.get("title") for _, a in page.tags], f"{name!r} is not shown as text"
    assert not any(t in ("img", "script", "iframe", "object", "embed") for t, _ in page.tags)
    assert not any(k.startswith("on") for _, a in page.tags for k in a), "an event handler attribute got in"


def test_findings_of_any_evidence_shape_render_as_text(resnet_profile):
    findings = [
        FakeFinding(
            "pageable-h2d",
            "Copies from pageable memory",
            "high",
            [{"kernel": XSS[0], "ms": 14.17, "count": 3}],
            4.7,
            3.6,
            "Pin the memory: " + XSS[1],
            "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/",
        ),
        FakeFinding("sync", XSS[2], "bogus-severity", "text evidence " + XSS[0], None, None, "", "javascript:alert(1)"),
    ]
    model = build_report(ProfileData.open(resnet_profile))
    model.findings = findings  # the renderer formats whatever findings the model holds
    html = render_report(model)
    page = parse(html)
    text = " ".join(page.text)
    assert "Copies from pageable memory" in text and "up to 4.70 ms per step, 3.6% of step time" in text
    assert XSS[0] in text and XSS[2] in text and XSS[0] not in html
    links = [a["href"] for t, a in page.tags if t == "a" and not a["href"].startswith("#")]
    assert links == ["https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/"]  # javascript: is not a link
    classes = [a.get("class") for t, a in page.tags if t == "article"]
    assert classes == ["finding high", "finding info"]


@pytest.mark.browser
def test_report_opens_in_chromium_with_its_plots(resnet_profile, tmp_path):
    out = tmp_path / "report.html"
    write_report(build_report(ProfileData.open(resnet_profile)), out)
    r = browser.open_page(
        out,
        {
            "svgs": "document.querySelectorAll('svg.chart').length",
            "drawn": (
                "[...document.querySelectorAll('svg.chart')].map(s => {const b = s.getBoundingClientRect(); return"
                " [Math.round(b.width), Math.round(b.height), s.querySelectorAll('rect,polyline,circle').length]})"
            ),
            "title": "document.title",
        },
    )
    (screenshot_dir(tmp_path) / "report-resnet50.png").write_bytes(r.screenshot)
    assert r.errors == [] and r.dialogs == []
    assert r.values["title"] == "dlscope report: resnet.dlscope"
    assert r.values["svgs"] == 5  # with the roofline
    for w, h, shapes in r.values["drawn"]:
        assert w > 1000 and h > 150 and shapes >= 3  # each plot laid out full width and holding its marks
    assert r.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and len(r.screenshot) > 100_000


@pytest.mark.browser
def test_counters_report_opens_in_chromium(tmp_path):
    b = ProfileBuilder()
    b.add("counters", nvml_counters())
    b.write(tmp_path / "nvml.dlscope", Meta(source="test:nvml-csv"))
    out = tmp_path / "nvml.html"
    write_report(build_report(ProfileData.open(tmp_path / "nvml.dlscope")), out)
    r = browser.open_page(out, {"captions": "[...document.querySelectorAll('figcaption')].map(f => f.textContent)"})
    (screenshot_dir(tmp_path) / "report-nvml.png").write_bytes(r.screenshot)
    assert r.errors == [] and r.dialogs == []
    assert [c.split(":")[0] for c in r.values["captions"]] == [
        "gpu_util",
        "mem_util",
        "mem_used",
        "power",
        "sm_clock",
        "temperature",
    ]


@pytest.mark.browser
def test_injected_names_execute_nothing_in_the_browser(tmp_path):
    out = tmp_path / "nasty.html"
    write_report(build_report(ProfileData.open(nasty_profile(tmp_path))), out)
    r = browser.open_page(
        out,
        {
            "injected": (
                "document.querySelectorAll('img, script, iframe, object, embed, [onerror], [onload], "
                "[onmouseover]').length"
            ),
            "text": "document.body.innerText",
            "titles": "[...document.querySelectorAll('[title]')].map(e => e.getAttribute('title'))",
        },
    )
    (screenshot_dir(tmp_path) / "report-xss.png").write_bytes(r.screenshot)
    assert r.dialogs == [] and r.errors == []
    assert r.values["injected"] == 0
    for name in XSS:
        assert name in r.values["text"] or name in r.values["titles"], name


def test_report_command(cli, resnet_profile, tmp_path):
    out = tmp_path / "r.html"
    r = cli("report", resnet_profile, "-o", out)
    assert r.code == 0 and out.exists() and "report written to" in r.err and r.out == ""
    r = cli("report", resnet_profile, "-o", out)
    assert r.code == 2 and "exists" in r.err
    assert_one_line_error(r.err)
    r = cli("report", resnet_profile, "-o", tmp_path / "r.pdf")
    assert r.code == 2
    assert_one_line_error(r.err)
    r = cli("report", tmp_path / "missing.dlscope", "-o", tmp_path / "m.html")
    assert r.code == 2
    assert_one_line_error(r.err)
    r = cli("report", resnet_profile, "-o", tmp_path / "s.html", "--iter-start", "3", "--iter-stop", "4")
    assert r.code == 0
    text = " ".join(parse((tmp_path / "s.html").read_text()).text)
    assert "steps 3-4" in text and "Distribution of 2 step times" in text


def test_report_with_sampled_detail_times_untraced_steps_and_counts_gpu_per_traced_step(tmp_path):
    """Steps 2-3 were traced (their kernels recorded, their time inflated): step statistics leave
    them out, GPU figures are per traced step."""
    n, ms = 12, 10**6
    durs = [20 * ms if s in (2, 3) else 10 * ms for s in range(n)]
    starts = [EPOCH + sum(durs[:i]) for i in range(n)]
    b = ProfileBuilder()
    b.add(
        "steps",
        pa.table(
            {
                "rank": [0] * n,
                "step": list(range(n)),
                "start_ns": starts,
                "end_ns": [s + d for s, d in zip(starts, durs)],
                "source": ["dlscope"] * n,
                "warmup": [False] * n,
                "traced": [s in (2, 3) for s in range(n)],
            }
        ),
    )
    k = [starts[2] + ms, starts[2] + 5 * ms, starts[3] + ms]
    b.add(
        "kernels",
        pa.table(
            {
                "rank": [0] * 3,
                "device": [0] * 3,
                "stream": [7] * 3,
                "start_ns": k,
                "end_ns": [t + 2 * ms for t in k],
                "name": ["gemm"] * 3,
            }
        ),
    )
    b.write(tmp_path / "s.dlscope", Meta(source="test"))
    text = " ".join(parse(render_report(build_report(ProfileData.open(tmp_path / "s.dlscope")))).text)
    assert "Distribution of 10 step times" in text and "10.000 ms" in text  # mean of the untraced steps
    assert "3.000 ms/step" in text  # 6 ms of kernels over 2 traced steps
    assert "2 traced steps timed apart" in text


def test_counters_per_phase_table_holds_the_sample_means(tmp_path):
    import csv

    from .test_report_analysis import NVML_CSV

    b = ProfileBuilder()
    b.add("counters", nvml_counters())
    b.write(tmp_path / "nvml.dlscope", Meta(source="test:nvml-csv"))
    page = parse(render_report(build_report(ProfileData.open(tmp_path / "nvml.dlscope"))))
    text = " ".join(" ".join(page.text).split())  # cells separated by single spaces
    with open(NVML_CSV) as f:
        util = [float(r["gpu_util"]) for r in csv.DictReader(f)]
    assert "Counters per phase" in text
    assert f" whole run 0 gpu_util % {sum(util) / len(util):,.1f} {max(util):,.1f} {len(util):,} " in text
