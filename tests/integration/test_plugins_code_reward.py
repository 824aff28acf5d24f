"""The ``code`` reward end to end: record forms, options, garbage, and HumanEval."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from rlvr_plugins import code_reward as cr

from rlvr import Score

ROOT = Path(__file__).resolve().parents[2]

DATA_DIR = Path(os.environ.get("RLVR_DATA_DIR") or ROOT.parent / "shared" / "data")
HUMANEVAL = DATA_DIR / "humaneval" / "HumanEval.jsonl.gz"

ADD_PROMPT = 'def add(a: int, b: int) -> int:\n    """Add two numbers."""\n'
ADD_TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n    assert candidate(2, 2) == 4\n"


def reward(completions, **columns):
    n = len(completions)
    return cr.code_reward(["<prompt>"] * n, completions, [[]] * n, **columns)


def he_columns(n, prompt=ADD_PROMPT, test=ADD_TEST, entry_point="add"):
    return {"prompt": [prompt] * n, "test": [test] * n, "entry_point": [entry_point] * n}


def test_humaneval_record_forms():
    completions = [
        "    return a + b\n",  # body continuing the prompt
        "```python\ndef add(a, b):\n    return a + b\n```\nThis adds the numbers.",  # full function, fenced
        "def add(a: int, b: int) -> int:\n    return a + b\n",  # full function using the prompt's imports
        "    return a - b\n",
        "Here you go:\n```python\ndef add(a, b):\n    return a * b\n```",
    ]
    scores = reward(completions, **he_columns(len(completions)))
    assert [s.value for s in scores] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert all(isinstance(s, Score) for s in scores)
    info = scores[0].info
    assert info["verdict"] == "passed" and info["isolation"] == "bwrap" and info["format"] == "humaneval"
    assert isinstance(info["seconds"], float)
    assert scores[3].info["verdict"] == "failed" and "assertion failed" in scores[3].info["message"]
    json.dumps([s.info for s in scores])  # reward_info must be JSON-serialisable


def test_prompt_imports_are_kept_for_full_functions():
    prompt = "from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n"
    test = "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n"
    full = "def total(xs: List[int]) -> int:\n    return sum(xs)\n"
    assert reward([full], **he_columns(1, prompt, test, "total"))[0].value == 1.0


def test_chat_completions_are_read():
    completion = [{"role": "assistant", "content": "```py\ndef add(a, b):\n    return a + b\n```"}]
    assert reward([completion], **he_columns(1))[0].value == 1.0


def test_mbpp_asserts_and_partial_credit():
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 6", "assert add(3, 3) == 6"]
    code = "def add(a, b):\n    return a + b\n"
    full = reward([code], test_list=[tests])[0]
    assert full.value == 0.0 and full.info["format"] == "mbpp" and full.info["passed"] < 4
    part = reward([code], test_list=[tests], partial=True)[0]
    assert part.value == pytest.approx(0.75) and part.info["total"] == 4
    setup = "import math\nHALF = 0.5\n"
    scores = reward(["def scaled(x):\n    return math.floor(x * HALF)\n"],
                    test_list=[["assert scaled(5) == 2", "assert math.floor(HALF * 4) == scaled(4)"]],
                    test_setup_code=[setup])
    assert scores[0].value == 1.0, scores[0].info


def test_mbpp_test_list_as_json_string():
    tests = json.dumps(["assert sq(3) == 9"])
    assert reward(["def sq(x):\n    return x * x\n"], test_list=[tests])[0].value == 1.0


def test_io_tests_and_partial_credit():
    program = "a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n"
    cases = [{"input": "1 2\n", "output": "3\n"}, {"input": "40 2", "output": "42"},
             {"input": "200 1", "output": "201"}]
    full = reward([program], io_tests=[cases])[0]
    assert full.value == 0.0 and full.info["format"] == "io" and "case 2" in full.info["message"]
    part = reward([program], io_tests=[cases], partial=True)[0]
    assert part.value == pytest.approx(2 / 3)
    both = reward([program], io_tests=[{"inputs": ["1 2", "3 4"], "outputs": ["3", "7"]}])[0]
    assert both.value == 1.0
    crash = reward(["print(3)\nraise SystemExit(3)\n"], io_tests=[[{"input": "", "output": "3"}]])[0]
    assert crash.value == 0.0 and crash.info["verdict"] == "error"


def test_missing_or_broken_tests_give_none():
    assert reward(["print(1)"])[0].value is None
    assert reward(["print(1)"])[0].info["verdict"] == "no_tests"
    broken = reward(["def f():\n    return 1\n"], test_list=[["assert f( =="]])[0]
    assert broken.value is None and broken.info["verdict"] == "invalid_test"
    no_entry = reward(["def f():\n    return 1\n"], test=[ADD_TEST])[0]
    assert no_entry.value is None
    bad_io = reward(["print(1)"], io_tests=[[{"input": "1"}]])[0]
    assert bad_io.value is None


def test_garbage_never_raises():
    garbage = ["", "def (:", "\x00\x01\x02", "```python\n", "```", None, 12345, {"content": None},
               [{"role": "user", "content": "hi"}], "return 1\n" * 1000, "\ud800", "    " + "(" * 10000]
    for columns in (he_columns(len(garbage)), {"test_list": [["assert add(1, 2) == 3"]] * len(garbage)},
                    {"io_tests": [[{"input": "", "output": "3"}]] * len(garbage)}):
        scores = reward(garbage, **columns)
        assert len(scores) == len(garbage)
        assert all(s.value == 0.0 for s in scores), [s.info for s in scores if s.value != 0.0]


def test_tests_that_loop_over_the_candidates_answers():
    """User test suites that map the candidate over cases: a candidate raising StopIteration
    (which would end the map early) scores 0, as does one whose asserts never ran."""
    forms = [
        "def check(candidate):\n    assert all(map(lambda t: candidate(*t[0]) == t[1], [((1, 2), 3), ((2, 2), 4)]))\n",
        "def check(candidate):\n    for got, want in zip(map(candidate, [1, 2], [2, 2]), [3, 4]):\n        assert got == want\n",
    ]
    completions = ["    return a + b\n", "    raise StopIteration\n", "    if a == 2:\n        raise StopIteration\n    return a + b\n"]
    for test in forms:
        scores = reward(completions, **he_columns(len(completions), test=test))
        assert [s.value for s in scores] == [1.0, 0.0, 0.0], [s.info for s in scores]
        assert "the candidate raised StopIteration" in scores[1].info["message"]
        part = reward(completions, partial=True, **he_columns(len(completions), test=test))
        assert part[0].value == 1.0 and part[1].value == 0.0 and part[2].value < 1.0, [s.info for s in part]
    never = reward(["def add(a, b):\n    return a + b\n"], test_list=[["for x in []:\n    assert add(x, 0) == x"]])[0]
    assert never.value == 0.0 and never.info["message"] == "0 of 1 asserts ran", never.info
    vacuous = reward(["def add(a, b):\n    return a + b\n"], test_list=[["add(1, 2)"]])[0]
    assert vacuous.value is None and vacuous.info["verdict"] == "invalid_test", vacuous.info


def test_timeout_option():
    scores = reward(["import time\ndef add(a, b):\n    time.sleep(5)\n    return a + b\n"],
                    test_list=[["assert add(1, 2) == 3"]], timeout=0.5)
    assert scores[0].value == 0.0 and scores[0].info["verdict"] == "timeout"


def test_process_isolation_is_explicit_and_reported():
    scores = reward(["    return a + b\n", "    return 0\n"], isolation="process", **he_columns(2))
    assert [s.value for s in scores] == [1.0, 0.0]
    assert all(s.info["isolation"] == "process" for s in scores)


def test_a_bare_fence_with_its_language_on_the_next_line_is_tagged_not_code():
    """Qwen2.5-Coder answers a prompt that shows the function in a bare fence with "```" then
    "python" on a line of its own: 110 of 164 HumanEval answers, each a NameError when the
    tag ran as code."""
    assert cr.extract_code("```\npython\ndef f():\n    return 1\n```") == "def f():\n    return 1\n"
    assert cr.extract_code("```\n  py3 \nx = 1\n```\n```\nbash\n```") == "x = 1\n"
    assert cr.extract_code("```\npython = 3\n```") == "python = 3\n"  # code that starts with the word
    assert cr.extract_code("```python\npython\n```") == "python\n"  # tagged already: the line is code
    scores = reward(["```\npython\ndef add(a, b):\n    return a + b\n```"], **he_columns(1))
    assert scores[0].value == 1.0, scores[0].info


@pytest.mark.skipif(not HUMANEVAL.exists(), reason=f"{HUMANEVAL} not found (RLVR_DATA_DIR; make test reads ../shared/data)")
def test_humaneval_canonical_solutions_pass_and_stub_bodies_fail():
    problems = [json.loads(line) for line in gzip.open(HUMANEVAL, "rt")]
    assert len(problems) == 164
    columns = {k: [p[k] for p in problems] for k in ("prompt", "test", "entry_point")}
    solved = reward([p["canonical_solution"] for p in problems], **columns)
    failed = [(p["task_id"], s.info) for p, s in zip(problems, solved) if s.value != 1.0]
    assert failed == []
    stubs = reward(["    pass\n"] * len(problems), **columns)
    passed = [p["task_id"] for p, s in zip(problems, stubs) if s.value != 0.0]
    assert passed == []
