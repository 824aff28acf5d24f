"""Scoring a batch (rlvr.rewards.runner) with the real code reward in its sandbox: the checks that
start worker pools (the integration ring; the others: tests/unit/test_rewards_runner.py)."""

from rlvr.rewards.runner import BoundReward, score_batch


def test_mixed_humaneval_mbpp_and_stdin_records_score_each_by_its_kind():
    """The real code reward in the real sandbox: one batch, three kinds of record, each scored
    by its own tests (MBPP's test_setup_code reaches its record although the others have none)."""
    from rlvr.host.registry import load_registry

    code = load_registry().reward("code")
    he_prompt = 'def add(a, b):\n    """Add."""\n'
    he = {"prompt": he_prompt, "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
    mbpp = {"text": "floor of a half", "test_list": ["assert half(5) == 2"], "test_setup_code": "import math"}
    io = {"io_tests": [{"input": "2 3\n", "output": "5\n"}]}
    no_prompt = {k: v for k, v in he.items() if k != "prompt"}  # its code prompt is the one it was sampled from
    rows = [he, mbpp, io, he, mbpp, io, no_prompt]
    completions = ["    return a + b\n", "def half(x):\n    return math.floor(x / 2)\n",
                   "a, b = map(int, input().split())\nprint(a + b)\n",
                   "    return a - b\n", "def half(x):\n    return x\n", "print(6)\n", "    return b + a\n"]
    prompts = ["<rendered prompt>"] * 6 + [he_prompt]
    out = score_batch([BoundReward(code)], prompts, completions, [None] * 7, rows)
    assert [i["format"] for i in out.infos["code"]] == ["humaneval", "mbpp", "io"] * 2 + ["humaneval"]
    assert out.values["code"] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0], out.infos["code"]
