"""Countdown: reach a target number with + - * / and each given number at most once.

An rlvr plugin: one task (``countdown``) and one reward (``countdown``). Copy this package
to start your own; the entry point in ``pyproject.toml`` is what makes rlvr find it.
"""

from __future__ import annotations

import ast
import random
import re
import zlib
from collections import Counter
from fractions import Fraction

from rlvr import RlvrError, Score, hookimpl


def countdown_task(split, *, data_dir, size: int = 1000, seed: int = 0, numbers: int = 4, max_number: int = 25):
    """Countdown puzzles: reach the target with + - * / using each number at most once.

    Both splits draw from one deterministic stream of puzzles, and a hash of each puzzle puts it
    in one split (one in five goes to test), so no test puzzle is ever trained on. Train may
    repeat puzzles; test never does, and has fewer than ``size`` rows when the puzzle space
    holds fewer test puzzles than that.
    """
    del data_dir  # generated, not read
    if split not in ("train", "test"):
        raise RlvrError(f"task 'countdown' has splits train and test, not {split!r}")
    produced, seen = 0, set()
    for draw in range(10 * size + 1000):  # bounded: a small puzzle space holds few test puzzles
        if produced == size:
            return
        rng = random.Random(f"countdown/{seed}/{draw}")
        nums = [rng.randint(1, max_number) for _ in range(numbers)]
        # Build the target from a random expression over the numbers, so every puzzle is solvable.
        expr = str(nums[0])
        for n in nums[1:]:
            expr = f"({expr} {rng.choice('+-*')} {n})"
        target = eval(expr, {"__builtins__": {}})  # noqa: S307 - digits and + - * we generated
        puzzle = f"{sorted(nums)} -> {target}"  # the same puzzle, whatever the order of the numbers
        in_test = zlib.crc32(puzzle.encode()) % 5 == 0
        if in_test != (split == "test") or (in_test and puzzle in seen):
            continue
        seen.add(puzzle)
        yield {
            "id": f"countdown/{split}/{produced}",
            "numbers": nums,
            "target": target,
            "question": f"Using the numbers {nums} (each at most once) and + - * /, make {target}.",
        }
        produced += 1


_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def _evaluate(node) -> tuple[Fraction, list[int]]:
    """Exact value of an arithmetic expression and the integers it uses; ValueError otherwise."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value), [node.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        (a, ua), (b, ub) = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Add):
            return a + b, ua + ub
        if isinstance(node.op, ast.Sub):
            return a - b, ua + ub
        if isinstance(node.op, ast.Mult):
            return a * b, ua + ub
        if b == 0:
            raise ValueError("division by zero")
        return a / b, ua + ub
    raise ValueError(f"not allowed: {ast.dump(node)[:40]}")


def countdown_reward(prompts, completions, completion_ids, *, numbers, target):
    """1.0 when the <answer> expression equals the target using only the given numbers.

    >>> countdown_reward([""], ["<answer>(3 + 5) * 2</answer>"], [None], numbers=[[2, 3, 5]], target=[16])[0].value
    1.0
    """
    out = []
    for completion, nums, goal in zip(completions, numbers, target):
        found = _ANSWER.findall(completion)
        if not found:
            out.append(Score(0.0, {"why": "no <answer>...</answer>"}))
            continue
        text = found[-1].strip().split("=")[0]
        try:
            if len(text) > 200:
                raise ValueError("expression too long")
            value, used = _evaluate(ast.parse(text, mode="eval"))
        except (SyntaxError, ValueError, RecursionError) as exc:
            out.append(Score(0.0, {"answer": text, "why": f"not an arithmetic expression: {exc}"}))
            continue
        extra = Counter(used) - Counter(nums)
        if extra:
            out.append(Score(0.0, {"answer": text, "why": f"uses numbers not given: {sorted(extra.elements())}"}))
        elif value != goal:
            out.append(Score(0.0, {"answer": text, "value": str(value), "why": f"equals {value}, not {goal}"}))
        else:
            out.append(Score(1.0, {"answer": text, "why": "reaches the target"}))
    return out


@hookimpl
def rlvr_register_tasks(register):
    register("countdown", countdown_task, columns=["id", "numbers", "target", "question"])


@hookimpl
def rlvr_register_rewards(register):
    # numbers and target are the puzzle itself (its question shows them): no column is an answer key.
    register("countdown", countdown_reward, gold=())
