"""pytest run on probe files in a subprocess, its outcomes read back: how the suite's own rules
(``skips``, ``rings``) are shown to bite."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from helpers import ROOT

TESTS = ROOT / "tests"


def run_pytest(args, cwd, report: Path, env=None, timeout=600,
               qualified=False) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """pytest in a subprocess, with its JUnit report (written to ``report``) read back: test name
    (``module::name`` when ``qualified``) -> passed, failed (a failure or an error) or skipped."""
    report.unlink(missing_ok=True)
    # Not PYTEST_ADDOPTS, nor the variables of a pytest-xdist worker this may run in.
    env = {k: v for k, v in {**os.environ, **(env or {})}.items()
           if k != "PYTEST_ADDOPTS" and not k.startswith("PYTEST_XDIST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-ra", f"--junitxml={report}", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    outcomes = {}
    if report.exists():
        for case in ET.parse(report).iter("testcase"):
            kinds = {child.tag for child in case}
            name = f"{case.get('classname')}::{case.get('name')}" if qualified else case.get("name")
            outcomes[name] = ("failed" if kinds & {"failure", "error"} else
                                          "skipped" if "skipped" in kinds else "passed")
    return done, outcomes


def probe_env() -> dict[str, str]:
    """The suite's helpers importable, as plugins outside this folder (no conftest.py there)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
