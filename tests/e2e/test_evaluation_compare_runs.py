"""`rlvr compare`: the checks that run `rlvr` or other processes end to end (the e2e ring; the
others: tests/unit/test_evaluation_compare.py)."""

import json

import pytest

from helpers import run_rlvr
from helpers.evaluation_compare import _write_eval, _write_seeded


def test_the_command_prints_one_line_and_refuses_bad_input_with_status_2(tmp_path):
    before = _write_eval(tmp_path / "b", {str(i): [i < 5] for i in range(40)})
    after = _write_eval(tmp_path / "a", {str(i): [i < 20] for i in range(40)})
    res = run_rlvr("compare", before, after)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("pass@1 12.50% -> 50.00% (+37.50 points")
    assert "15 problems better, 0 worse" in res.stdout and "beyond noise" in res.stdout
    data = json.loads(run_rlvr("compare", before, after, "--json").stdout)
    assert data["sign_test_p"] == pytest.approx(2 / 2**15)
    bad = run_rlvr("compare", before, tmp_path / "nowhere")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "not found" in bad.stderr


def test_the_command_pools_more_pairs_with_also(tmp_path):
    before = [_write_seeded(tmp_path / f"b{s}", {str(i): [i < 4] for i in range(30)}, s) for s in (1, 2)]
    after = [_write_seeded(tmp_path / f"a{s}", {str(i): [i < 4 + 4 * s] for i in range(30)}, s) for s in (1, 2)]
    res = run_rlvr("compare", before[0], after[0], "--also", before[1], after[1], "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["after"] == pytest.approx((8 + 12) / 60) and data["before"] == pytest.approx(4 / 30)
    assert (data["better"], data["worse"]) == (8, 0) and data["samples_per_prompt"] == {"before": 2, "after": 2}
    twice = run_rlvr("compare", before[0], after[0], "--also", before[0], after[1])
    assert twice.returncode == 2 and "same samples twice" in twice.stderr and "Traceback" not in twice.stderr
