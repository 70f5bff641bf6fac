"""Opening a page in headless Chromium and asking it what happened, over the DevTools protocol on
a pipe (``--remote-debugging-pipe``: JSON messages ending in NUL on file descriptors 3 and 4), so
no websocket library or driver package is needed.

:func:`open_page` loads a file and returns what the browser saw: console messages and errors,
uncaught exceptions, dialogs (an ``alert`` means injected script ran), values of expressions
evaluated in the page, and a full-page screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
    "--hide-scrollbars",
    "--mute-audio",
)


def chromium() -> str:
    """Path of Debian's chromium; skip the test where it is absent (fail under
    DLSCOPE_STRICT_TESTS=1)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    msg = "headless Chromium is not installed (scripts/setup.sh installs it: apt-get install -y chromium)"
    if os.environ.get("DLSCOPE_STRICT_TESTS") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@dataclass
class PageResult:
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    exceptions: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""

    @property
    def errors(self) -> list[str]:
        return [t for lvl, t in self.console if lvl in ("error", "assert")] + self.exceptions


class _Pipe:
    def __init__(self, proc: subprocess.Popen[bytes], write_fd: int, read_fd: int) -> None:
        self.proc, self.w, self.r = proc, write_fd, read_fd
        self.buf = b""
        self.next_id = 0
        self.dismissed = 0
        self.events: list[dict[str, Any]] = []

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30
    ) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read(timeout)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(timeout)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def _read(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        m = json.loads(raw)
        if m.get("method") == "Page.javascriptDialogOpening":
            # an open dialog blocks the page: record it (the caller sees it as an event) and dismiss it
            self.dismissed += 1
            os.write(
                self.w,
                json.dumps(
                    {
                        "id": 10**9 + self.dismissed,
                        "method": "Page.handleJavaScriptDialog",
                        "params": {"accept": True},
                        "sessionId": m.get("sessionId"),
                    }
                ).encode()
                + b"\0",
            )
        return m


def open_page(
    path: Path, expressions: dict[str, str] | None = None, width: int = 1280, settle_s: float = 0.3
) -> PageResult:
    """Load ``path`` in a fresh headless Chromium (no network, fresh profile) and report."""
    exe = chromium()
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    profile = tempfile.mkdtemp(prefix="dlscope-chromium-")
    # bash (dash takes single-digit fds only) puts the pipe ends on fds 3 and 4, where Chromium reads
    # and writes the protocol
    cmd = [
        "bash",
        "-c",
        f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
        exe,
        *FLAGS,
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    proc = subprocess.Popen(
        cmd, pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    pipe = _Pipe(proc, to_chrome_w, from_chrome_r)
    out = PageResult()
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            pipe.send(f"{domain}.enable", session=sid)
        pipe.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=sid,
        )
        pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
        pipe.wait_event("Page.loadEventFired")
        time.sleep(settle_s)  # let late console messages arrive
        for name, expr in (expressions or {}).items():
            r = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
            out.values[name] = r.get("result", {}).get("value")
        size = pipe.send("Page.getLayoutMetrics", session=sid)["cssContentSize"]
        shot = pipe.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1},
            },
            session=sid,
            timeout=60,
        )
        out.screenshot = base64.b64decode(shot["data"])
        pipe.send("Runtime.evaluate", {"expression": "1"}, session=sid)  # flush pending events
        for m in pipe.events:
            p = m.get("params", {})
            if m.get("method") == "Runtime.consoleAPICalled":
                out.console.append(
                    (
                        p.get("type", ""),
                        " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])),
                    )
                )
            elif m.get("method") == "Log.entryAdded":
                e = p.get("entry", {})
                out.console.append((e.get("level", ""), e.get("text", "")))
            elif m.get("method") == "Runtime.exceptionThrown":
                out.exceptions.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m.get("method") == "Page.javascriptDialogOpening":
                out.dialogs.append(p.get("message", ""))
        try:
            pipe.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError):
            pass
    finally:
        os.close(to_chrome_w)
        os.close(from_chrome_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return out
