"""The suite's own tests that skip where what they need is missing (the data, trl, trackio), run as
`make test` runs them in a pytest subprocess: there they fail, elsewhere they skip (the e2e ring:
it runs real tests of the other rings; the probes of the rule: tests/integration/test_suite_rules_live.py)."""

import os

from helpers import ROOT
from helpers.pytest_probe import run_pytest
from helpers.skips import OPTION

# Each test that skips where what it needs is missing: make test provides it, so there it fails.
NEEDS_MAKE_TEST = {
    "tests/integration/test_plugins_code_reward.py::test_humaneval_canonical_solutions_pass_and_stub_bodies_fail": "data",
    "tests/integration/test_plugins_math_reward_live.py::test_math500_solutions_match_their_answers": "data",
    "tests/integration/test_plugins_math_reward_live.py::test_gsm8k_gold_solutions": "data",
    "tests/unit/test_rewards_trl.py::test_trl_builtins_score_as_under_trl": "trl",
    "tests/unit/test_rewards_trl.py::test_a_recipe_names_a_trl_reward_by_module_and_function": "trl",
    "tests/unit/test_host_imports.py::test_the_documented_trl_rewards_are_allowed_and_plugin_packages_are_not": "trl",
    "tests/unit/test_runs_tracking.py::test_trackio_offline_gets_each_row_at_its_step": "trackio",
}


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
