"""The rings' rules (tests/helpers/rings.py), each shown to bite on probe files run by pytest in a
subprocess: a unit test that starts a process, a worker, a socket or a model fails, even when it
catches the error; the same test passes in tests/integration; a test outside the rings stops the
collection; each ring has its time limit, a longer one needs a reason; a gpu test is an expected
skip without CUDA; and this suite's own tests are all in a ring, marked by it, in ring order."""

from __future__ import annotations

import os
import textwrap

import pytest
import torch

from helpers import ROOT
from helpers.pytest_probe import probe_env, run_pytest
from helpers.rings import RINGS, TIMEOUTS, ring_of

FORBIDDEN = '''
import multiprocessing
import socket
import subprocess
import sys
import time

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def test_pure():
    assert sum(range(4)) == 6


def test_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_subprocess_caught():
    try:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    except Exception:
        pass


def test_worker_process():
    process = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))  # imports no test module
    process.start()
    process.join()


def test_fork():
    import os

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def test_socket():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))


def test_model_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    with open(tmp_path / "model.safetensors", "rb") as f:
        f.read()


def test_model_built():
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                 num_attention_heads=1, num_key_value_heads=1))


@pytest.fixture
def started():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_fixture_starts_a_process(started):
    pass


def test_over_the_limit():
    time.sleep(1.5)


@pytest.mark.longer(60, reason="the probe's longer limit")
def test_longer_with_a_reason():
    time.sleep(1.5)


@pytest.mark.gpu
def test_needs_cuda():
    assert torch.cuda.is_available()
'''
BROKEN_BY_UNIT = ["test_subprocess", "test_subprocess_caught", "test_worker_process", "test_fork", "test_socket",
                  "test_model_file", "test_model_built", "test_fixture_starts_a_process"]
INI = "[pytest]\naddopts = --strict-markers\n"


def probe(tmp_path, files: dict[str, str], *args):
    for name, text in {"pytest.ini": INI, **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    # Limits at a tenth: unit 1 s, integration 6 s: the probe's 1.5-s sleep is over the first only.
    return run_pytest(["-p", "helpers.rings", "-p", "helpers.skips", "--no-skips", "--timeout-scale", "0.1", *args],
                      tmp_path, tmp_path / "report.xml", probe_env(), timeout=300, qualified=True)


def test_a_unit_test_that_starts_a_process_a_socket_or_a_model_fails_and_in_integration_passes(tmp_path):
    done, outcomes = probe(tmp_path, {"tests/unit/test_probe_unit.py": FORBIDDEN,
                                      "tests/integration/test_probe_integration.py": FORBIDDEN})
    output = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 1, output
    gpu = "passed" if torch.cuda.is_available() else "skipped"
    unit = {**dict.fromkeys(BROKEN_BY_UNIT, "failed"), "test_pure": "passed", "test_over_the_limit": "failed",
            "test_longer_with_a_reason": "passed", "test_needs_cuda": gpu}
    integration = {**dict.fromkeys(unit, "passed"), "test_needs_cuda": gpu}
    assert outcomes == {**{f"tests.unit.test_probe_unit::{n}": o for n, o in unit.items()},
                        **{f"tests.integration.test_probe_integration::{n}": o for n, o in integration.items()}}, output
    # The unit ring runs first (the JUnit report is in run order; pytest collects integration/ first),
    # and each failure says what the test did.
    assert list(outcomes)[0].startswith("tests.unit.") and list(outcomes)[-1].startswith("tests.integration.")
    for what in ("started a process", "started a worker process", "forked", "bound a socket", "loaded a model",
                 "built a model"):
        assert f"the unit ring allows no process, socket or model, and this test {what}" in done.stdout, what
    assert "Timeout" in done.stdout
    if not torch.cuda.is_available():
        assert "needs a CUDA GPU (expected on this machine)" in done.stdout


@pytest.mark.parametrize("files, message", [
    ({"tests/test_flat.py": "def test_x():\n    pass\n"}, "tests outside the rings (tests/unit, tests/integration, tests/e2e): tests/test_flat.py::test_x"),
    ({"tests/unit/test_t.py": "import pytest\n@pytest.mark.timeout(5)\ndef test_x():\n    pass\n"},
     "write @pytest.mark.longer(seconds, reason=...), not pytest-timeout's timeout marker"),
    ({"tests/unit/test_l.py": "import pytest\n@pytest.mark.longer(50)\ndef test_x():\n    pass\n"},
     "write longer(seconds, reason=...)"),
    ({"tests/unit/test_m.py": "import pytest\n@pytest.mark.sloww\ndef test_x():\n    pass\n"}, "'sloww' not found in `markers`"),
], ids=["outside", "timeout-marker", "longer-without-reason", "unknown-marker"])
def test_what_the_rings_refuse_stops_the_collection(tmp_path, files, message):
    done, _ = probe(tmp_path, files)
    assert done.returncode in (2, 4), done.stdout[-3000:] + done.stderr[-3000:]  # interrupted / usage error
    assert message in done.stdout + done.stderr


def test_ring_of_reads_the_folder():
    assert ring_of(ROOT / "tests/unit/test_x.py", ROOT) == "unit"
    assert ring_of(ROOT / "tests/e2e/sub/test_x.py", ROOT) == "e2e"
    assert ring_of(ROOT / "tests/test_x.py", ROOT) is None
    assert ring_of(ROOT / "tests/helpers/rings.py", ROOT) is None
    assert ring_of(ROOT / "rlvr/training/algo.py", ROOT) == "unit"  # doctests
    assert ring_of(ROOT / "examples/rlvr-countdown/tests/test_countdown.py", ROOT) == "e2e"
    assert ring_of(ROOT / "examples/rlvr-countdown/rlvr_countdown/__init__.py", ROOT) == "unit"


def test_this_suite_is_in_its_rings_marked_and_in_ring_order(request):
    items = request.session.items
    rings = [next(r for r in RINGS if item.get_closest_marker(r)) for item in items]
    order = RINGS[::-1] if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else RINGS
    assert rings == sorted(rings, key=order.index)
    for item, ring in zip(items, rings):
        assert ring == ring_of(item.path, ROOT), item.nodeid
        limit = item.get_closest_marker("timeout").args[0]
        longer = item.get_closest_marker("longer")
        assert limit == (longer.args[0] if longer else TIMEOUTS[ring]) * request.config.getoption("timeout_scale")
    test_files = {p.relative_to(ROOT).parts[1] for p in (ROOT / "tests").rglob("test_*.py")}
    assert test_files <= set(RINGS), test_files
