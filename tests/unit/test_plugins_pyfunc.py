"""The procedural ``pyfunc`` code task: references pass their own tests in the sandbox, wrong
and constant answers fail, and the test split is held out."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rlvr_plugins.pyfunc import TEMPLATES, make_problem, pyfunc

from rlvr import RlvrError

HERE = Path(".")


def one_problem_per_template(seed=0):
    rng = random.Random(seed)
    return [make_problem(t, t.consts(rng), rng) for t in TEMPLATES]


def test_rows_have_mbpp_columns_and_three_distinct_asserts():
    rows = list(pyfunc("train", data_dir=HERE, size=200))
    assert len(rows) == 200
    for row in rows:
        assert {"task_id", "text", "code", "test_list", "test_setup_code", "tests"} <= set(row)
        assert len(row["test_list"]) == 3 == len(set(row["test_list"]))
        assert row["tests"] == "\n".join(row["test_list"])
        assert all(t.startswith("assert ") for t in row["test_list"])


def test_statements_read_as_english():
    texts = [p["text"] for p in one_problem_per_template()] + [r["text"] for r in pyfunc("train", data_dir=HERE, size=300)]
    import re

    assert not [t for t in texts if re.search(r"\b(1th|2th|3th|11st|12nd|13rd)\b", t)]


def test_bad_split_and_options():
    with pytest.raises(RlvrError, match="splits train and test"):
        next(pyfunc("validation", data_dir=HERE))
    with pytest.raises(RlvrError, match="tests must be"):
        next(pyfunc("train", data_dir=HERE, tests=0))
