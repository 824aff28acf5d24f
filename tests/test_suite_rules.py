"""The suite's own rules, each shown to bite: under ``make test`` (``--no-skips``) a skip is a
failure unless this machine explains it (tests/helpers/skips.py); no test module imports another
or conftest.py (shared fixtures live in conftest.py, shared helpers in tests/helpers/); every
doctest in the code is collected, and runs."""

from __future__ import annotations

import ast
import doctest
import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import ROOT
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


def run_pytest(args, cwd, report: Path, env=None, timeout=600) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """pytest in a subprocess, with its JUnit report (written to ``report``) read back: test name
    -> passed, failed (a failure or an error) or skipped."""
    report.unlink(missing_ok=True)
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-ra", f"--junitxml={report}", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    outcomes = {}
    if report.exists():
        for case in ET.parse(report).iter("testcase"):
            kinds = {child.tag for child in case}
            outcomes[case.get("name")] = ("failed" if kinds & {"failure", "error"} else
                                          "skipped" if "skipped" in kinds else "passed")
    return done, outcomes


def probe_env() -> dict[str, str]:
    """helpers.skips importable, as a plugin outside this folder (no conftest.py there)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}


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


def make_test_command() -> str:
    """The line of the Makefile's test target that runs pytest."""
    target = re.search(r"^test:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    return next(line for line in target.splitlines() if "/bin/pytest " in line)


def test_make_test_runs_under_no_skips_and_conftest_loads_the_rule(request):
    assert f"pytest -q {OPTION} " in make_test_command()
    assert request.config.pluginmanager.get_plugin("rlvr-skip-rule") is not None  # tests/conftest.py loaded it


# Each test that skips where what it needs is missing: make test provides it, so there it fails.
NEEDS_MAKE_TEST = {
    "tests/test_plugins_code_reward.py::test_humaneval_canonical_solutions_pass_and_stub_bodies_fail": "data",
    "tests/test_plugins_math_reward.py::test_math500_solutions_match_their_answers": "data",
    "tests/test_plugins_math_reward.py::test_gsm8k_gold_solutions": "data",
    "tests/test_rewards_trl.py::test_trl_builtins_score_as_under_trl": "trl",
    "tests/test_rewards_trl.py::test_a_recipe_names_a_trl_reward_by_module_and_function": "trl",
    "tests/test_host_imports.py::test_the_documented_trl_rewards_are_allowed_and_plugin_packages_are_not": "trl",
    "tests/test_runs_tracking.py::test_trackio_offline_gets_each_row_at_its_step": "trackio",
}


@pytest.mark.slow
def test_the_tests_that_need_data_or_a_package_fail_under_make_tests_rule_without_it(tmp_path):
    """The suite's own skipping tests, run as make test runs them (the Makefile's options, this
    repository's conftest.py) on a machine without the data and with trl and trackio unimportable."""
    hidden = tmp_path / "hidden"
    for package in ("trl", "trackio"):
        (hidden / package).mkdir(parents=True)
        (hidden / package / "__init__.py").write_text(f"raise ModuleNotFoundError('{package} hidden by the test', name={package!r})\n")
    (tmp_path / "no-data").mkdir()
    env = {"RLVR_DATA_DIR": str(tmp_path / "no-data"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))}
    names = {node.split("::")[1] for node in NEEDS_MAKE_TEST}

    done, outcomes = run_pytest([*NEEDS_MAKE_TEST, OPTION], ROOT, tmp_path / "report.xml", env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert outcomes == dict.fromkeys(names, "failed"), done.stdout[-3000:]
    done, outcomes = run_pytest(list(NEEDS_MAKE_TEST), ROOT, tmp_path / "report.xml", env)
    assert done.returncode == 0 and outcomes == dict.fromkeys(names, "skipped"), done.stdout[-3000:]


# ------------------------------------------------------------------------------ imports between tests


def suite_files() -> list[Path]:
    """Every Python file of the tests: test modules, conftest.py, helpers, data scripts."""
    return sorted([*TESTS.rglob("*.py"), *ROOT.glob("examples/*/tests/*.py")])


def imported_test_modules(source: str) -> set[str]:
    """The test modules (test_*) and conftest that ``source`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "conftest" or n.split(".")[0].startswith("test_"))
    return found


def test_no_test_module_imports_another_or_conftest():
    offenders = {str(path.relative_to(ROOT)): sorted(found) for path in suite_files()
                 if (found := imported_test_modules(path.read_text()))}
    assert not offenders, (f"{offenders}: a fixture two modules share goes to tests/conftest.py, "
                           "a helper to tests/helpers/")


def test_the_import_check_can_fail():
    source = "import os\ndef f():\n    from test_training_engine import make_run\n    import conftest\nfrom helpers import RLVR\n"
    assert imported_test_modules(source) == {"test_training_engine", "conftest"}


# ------------------------------------------------------------------------------------------ doctests


def doctest_files() -> list[Path]:
    """The code's files (tests aside) with a docstring that holds a ``>>>`` example."""
    found = []
    for path in sorted([*ROOT.glob("rlvr/**/*.py"), *ROOT.glob("plugins/**/*.py"), *ROOT.glob("examples/**/*.py")]):
        if "tests" in path.relative_to(ROOT).parts:
            continue
        tree = ast.parse(path.read_text())
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
        if any(re.search(r"^\s*>>> ", ast.get_docstring(n, clean=False) or "", re.M) for n in nodes):
            found.append(path)
    return found


def test_every_doctest_in_the_code_is_collected_and_none_is_skipped():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in config["addopts"].split()
    collected = [ROOT / p for p in config["testpaths"]]
    files = doctest_files()
    assert ROOT / "rlvr/training/algo.py" in files  # the search finds what is there
    missed = [str(f.relative_to(ROOT)) for f in files if not any(f.is_relative_to(p) for p in collected)]
    assert not missed, (f"doctests pytest does not collect: {missed}; add the package's folder to testpaths "
                        "(plugins/ cannot be: its folder is not its package's name, so test it in tests/)")
    skipped = [str(f.relative_to(ROOT)) for f in files if "+SKIP" in f.read_text()]
    assert not skipped, f"doctests that run nothing: {skipped}"


def test_the_rloo_doctest_runs_and_can_fail():
    from rlvr.training import algo

    (test,) = [t for t in doctest.DocTestFinder().find(algo) if t.examples]
    assert doctest.DocTestRunner().run(test, out=lambda _: None) == (0, 1)  # (failed, attempted): its own +ELLIPSIS
    test.examples[0].want = test.examples[0].want.replace("5.0", "5.5")
    assert doctest.DocTestRunner().run(test, out=lambda _: None).failed == 1
