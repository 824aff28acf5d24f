"""The suite's --no-skips rule (tests/helpers/skips.py), shown to bite on probe files and on the
suite's own skipping tests, each run by pytest in a subprocess: the checks that start worker pools
or loopback services, or build a tiny model in-process (the integration ring; the others:
tests/unit/test_suite_rules.py)."""

from __future__ import annotations



from helpers import ROOT
from helpers.pytest_probe import probe_env, run_pytest
from helpers.skips import OPTION

TESTS = ROOT / "tests"

# ------------------------------------------------------------------------------------ --no-skips

PROBE = '''
import pytest

from helpers.skips import expected_skip


@pytest.fixture
def needs_data():
    pytest.skip("no data for the fixture")


def test_passes():
    pass


def test_skip():
    pytest.skip("no data")


@pytest.mark.skipif(True, reason="no data")
def test_skipif():
    pass


@pytest.mark.skip(reason="later")
def test_mark_skip():
    pass


def test_importorskip():
    pytest.importorskip("rlvr_no_such_module")


def test_fixture_skip(needs_data):
    pass


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False


def test_expected():
    expected_skip("not root")


@pytest.mark.expected_skipif(True, reason="no GPU")
def test_expected_marker():
    pass


@pytest.mark.expected_skipif(False, reason="no GPU")
def test_expected_marker_false_runs():
    pass
'''

PROBE_DOCTEST = '''
def f():
    """
    >>> 1 + 1  # doctest: +SKIP
    3
    """
'''

PROBE_MODULE_SKIP = '''
import pytest

pytest.importorskip("rlvr_no_such_module")


def test_never_runs():
    pass
'''


def test_a_skip_fails_under_no_skips_unless_this_machine_explains_it(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "probe_doc.py").write_text(PROBE_DOCTEST)
    args = ["-p", "helpers.skips", "--doctest-modules", "test_probe.py", "probe_doc.py"]
    unexplained = ["test_skip", "test_skipif", "test_mark_skip", "test_importorskip", "test_fixture_skip", "test_xfail",
                   "probe_doc.f"]
    explained = ["test_expected", "test_expected_marker"]
    ran = ["test_passes", "test_expected_marker_false_runs"]

    done, outcomes = run_pytest([*args, OPTION], tmp_path, tmp_path / "report.xml", probe_env())
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert outcomes == {**dict.fromkeys(unexplained, "failed"), **dict.fromkeys(explained, "skipped"),
                        **dict.fromkeys(ran, "passed")}, done.stdout[-3000:]
    assert "skipped under --no-skips, where a skip is a failure: no data" in done.stdout
    assert "xfail (known bug)" in done.stdout
    assert "not root (expected on this machine)" in done.stdout  # -ra: an explained skip is said

    # Without the option (the inner loop) a skip is a skip, as pytest has it.
    done, outcomes = run_pytest(args, tmp_path, tmp_path / "report.xml", probe_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert outcomes == {**dict.fromkeys(unexplained + explained, "skipped"), **dict.fromkeys(ran, "passed")}


def test_a_module_skipped_while_collected_stops_the_run_under_no_skips(tmp_path):
    (tmp_path / "test_whole.py").write_text(PROBE_MODULE_SKIP)
    (tmp_path / "test_other.py").write_text("def test_passes():\n    pass\n")
    done, _ = run_pytest(["-p", "helpers.skips", OPTION], tmp_path, tmp_path / "report.xml", probe_env())
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]  # pytest's "errors during collection"
    assert "test_whole.py skipped whole under --no-skips" in done.stdout and "rlvr_no_such_module" in done.stdout
    done, outcomes = run_pytest(["-p", "helpers.skips"], tmp_path, tmp_path / "report.xml", probe_env())
    assert done.returncode == 0 and outcomes == {"test_passes": "passed", "test_whole": "skipped"}, done.stdout[-3000:]


