"""The rule ``make test`` runs under: a test that skipped has tested nothing, so with ``--no-skips``
(the Makefile's test target passes it) every skip is a failure: ``pytest.skip``, ``skipif``,
``importorskip``, a skipping fixture, an xfail, a doctest whose examples are all ``+SKIP``, a
module skipped while it is collected (that one stops the run at collection). ``make test``
installs every package the tests import and points ``RLVR_DATA_DIR`` at ``../shared/data``, so
a missing package or file is a broken set-up, not a reason to pass.

What this machine cannot do is no failure, when the test says so:

- ``expected_skip(reason)``, called in a test or fixture, is ``pytest.skip`` for a check this
  host cannot make (not root, a GPU, no pids cgroup, ...);
- ``@pytest.mark.expected_skipif(condition, reason=...)`` is ``skipif`` for the same.

Their skips stay skips, reported with "(expected on this machine)". Without ``--no-skips`` (the
inner loop: ``make test-fast``) a skip is a skip, as pytest has it.

tests/conftest.py loads this module as a plugin; ``pytest -p helpers.skips`` loads it where that
conftest is not (tests/unit/test_suite_rules.py runs it so on probe files).
"""

from __future__ import annotations

import pytest

OPTION = "--no-skips"
EXPECTED = "expected on this machine"
HOW = ("make test installs every package the tests use and points RLVR_DATA_DIR at ../shared/data; "
       "a check this host cannot make skips with helpers.skips.expected_skip or @pytest.mark.expected_skipif")


def expected_skip(reason: str):
    """Skip the running test because of what this machine is (not root, a GPU, ...): a skip even
    under ``--no-skips``."""
    __tracebackhide__ = True  # the skip is reported at the caller's line
    error = pytest.skip.Exception(f"{reason} ({EXPECTED})")
    error.rlvr_expected = True
    raise error


def pytest_addoption(parser):
    parser.addoption(OPTION, action="store_true", dest="no_skips",
                     help="fail every skip, xfail and skipped module except expected_skip's and "
                          "expected_skipif's (make test runs with it)")


def pytest_configure(config):
    config.addinivalue_line("markers", "expected_skipif(condition, *, reason): skipif for a check this machine "
                            "cannot make (not root, a GPU, ...): still a skip under --no-skips")
    # A plugin object, not conftest hooks: these apply to every item, doctests and the examples' tests included.
    config.pluginmanager.register(SkipRule(config.getoption("no_skips")), "rlvr-skip-rule")


def _reason(longrepr) -> str:
    if isinstance(longrepr, tuple):  # a skip's (path, line, message)
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipRule:
    def __init__(self, no_skips: bool):
        self.no_skips = no_skips

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        for mark in item.iter_markers("expected_skipif"):
            if "reason" not in mark.kwargs or len(mark.args) != 1:
                pytest.fail(f"write expected_skipif(condition, reason=...), not {mark}", pytrace=False)
            if mark.args[0]:
                error = pytest.skip.Exception(f"{mark.kwargs['reason']} ({EXPECTED})", _use_item_location=True)
                error.rlvr_expected = True
                raise error

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if self.no_skips and report.skipped:
            if getattr(getattr(call.excinfo, "value", None), "rlvr_expected", False):
                return report
            if hasattr(report, "wasxfail"):
                reason = f"xfail ({report.wasxfail or 'no reason given'})"
                del report.wasxfail
            else:
                reason = _reason(report.longrepr)
            report.outcome = "failed"
            report.longrepr = f"skipped under {OPTION}, where a skip is a failure: {reason}\n({HOW})"
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_make_collect_report(self, collector):
        report = yield
        if self.no_skips and report.skipped:
            report.outcome = "failed"
            report.longrepr = (f"{collector.nodeid} skipped whole under {OPTION}, where a skip is a failure: "
                               f"{_reason(report.longrepr)}\n({HOW})")
        return report
