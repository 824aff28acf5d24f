"""How the fork server turns what it saw of a run into a result: output read from a
program's pipes against a byte cap (``OutputSink``), exit statuses described, io-mode
output compared, the exec candidate's end-of-run report read (``exec_status``) and the
tester's verdict checked (``check_report``)."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from .wire import short


INFO_BYTES = 8192  # the exec candidate's report of how its program ended


def exec_status(out: OutputSink, info: OutputSink, exited: bool, code: int | None, job: dict) -> tuple[str, str]:
    """exec mode: (status, message) from the candidate's report and its exit."""
    if out.over:
        return "output_limit", f"output over {job['max_output']} bytes"
    if not exited:
        return "timeout", f"no exit within {job['timeout']} s"
    if code is None or code < 0:
        return "crashed", describe_exit(code)
    report = None
    for line in info.text().splitlines():  # the last well-formed report counts
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if type(value) is dict and value.get("end") in ("ok", "error"):
            report = value
    if report is None:  # os._exit(), or the candidate died before it could say
        return "exited", f"the program ended the process itself ({describe_exit(code)})"
    if report["end"] == "error":
        return "error", str(report.get("message") or "error")
    return "ok", ""


def prefix_text(data: bytes, cut: bool) -> str:
    """Kept output as text; when it was cut, a character split at the cut is dropped."""
    if not cut:
        return data.decode("utf-8", "replace")
    import codecs

    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


class OutputSink:
    """Reads a pipe, counting bytes against a cap shared between stdout and stderr."""

    def __init__(self, fd: int, cap: int, keep: int = 4096, shared: OutputSink | None = None) -> None:
        self.fd, self.cap, self.keep = fd, cap, keep
        self.shared = shared
        self.count = 0
        self.data = bytearray()
        self._over = False

    @property
    def over(self) -> bool:
        return self._over or (self.shared is not None and self.shared.over)

    def total(self) -> int:
        return self.count + (self.shared.total() if self.shared is not None else 0)

    def read(self) -> bool:
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return False
        self.count += len(chunk)
        if len(self.data) < self.keep:
            self.data += chunk[: self.keep - len(self.data)]
        if self.total() > self.cap:
            self._over = True
            if self.shared is not None:
                self.shared._over = True
        return True

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def normalize_output(text: str) -> str:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip()


def describe_exit(status: int | None) -> str:
    if status is None:
        return "exit status unknown"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"killed by {name}"
    return f"exit code {status}"


def check_report(report: dict) -> Any:
    if (report.get("status") not in _TESTER_STATUSES or type(report.get("passed")) is not int
            or type(report.get("total")) is not int):
        return "gone"
    return {"status": report["status"], "passed": report["passed"], "total": report["total"],
            "message": short(str(report.get("message", "")))}


_TESTER_STATUSES = {"passed", "failed", "error", "timeout", "crashed", "invalid_test"}
