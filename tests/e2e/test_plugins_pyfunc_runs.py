"""The procedural ``pyfunc`` code task: every problem's reference passes its tests in the sandbox
and constant answers fail, over thousands of generated problems (the e2e ring, for its length;
the others: tests/unit/test_plugins_pyfunc.py)."""

from __future__ import annotations

import random
from pathlib import Path

from rlvr_plugins import code_reward as cr
from rlvr_plugins.pyfunc import TEMPLATES, make_problem, pyfunc

HERE = Path(".")


def one_problem_per_template(seed=0):
    rng = random.Random(seed)
    return [make_problem(t, t.consts(rng), rng) for t in TEMPLATES]


def score(problems, completions):
    n = len(problems)
    cols = {"test_list": [p["test_list"] for p in problems], "test_setup_code": [""] * n}
    return cr.code_reward(["<prompt>"] * n, completions, [[]] * n, **cols)


def test_every_reference_passes_and_constant_answers_fail():
    problems = one_problem_per_template()
    assert len(problems) == len(TEMPLATES) >= 25
    refs = score(problems, [f"```python\n{p['code']}```" for p in problems])
    assert [s.value for s in refs] == [1.0] * len(problems), [s.info for s in refs if s.value != 1.0]
    # a function returning one fixed value (each problem's first expected value) must fail
    consts = []
    for p, t in zip(problems, TEMPLATES):
        first_expected = p["test_list"][0].split(" == ", 1)[1]
        consts.append(f"def {t.name}(*args):\n    return {first_expected}\n")
    fixed = score(problems, consts)
    assert [s.value for s in fixed] == [0.0] * len(problems)
    # and an off-by-one edit of the reference fails on most problems
    wrong = [p["code"].replace("return ", "return 1 + ", 1) if "return " in p["code"] else p["code"] for p in problems]
    wrong_scores = [s.value for s in score(problems, wrong)]
    assert sum(v == 0.0 for v in wrong_scores) >= len(problems) - 3


def test_split_is_held_out_and_deterministic():
    train = {r["text"] for r in pyfunc("train", data_dir=HERE, size=3000)}
    test_recipe_rows = list(pyfunc("test", data_dir=HERE, size=10_000))
    test = [r["text"] for r in test_recipe_rows]
    assert 150 < len(test) < 10_000  # the space is finite: test stops when it is exhausted
    assert len(test) == len(set(test))  # no repeats in test
    assert not train & set(test)  # never trained on
    assert list(pyfunc("test", data_dir=HERE, size=20)) == test_recipe_rows[:20]
