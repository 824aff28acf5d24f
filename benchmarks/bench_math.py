"""Throughput and agreement of the ``math`` reward vs plain math-verify.

Pairs are built from the offline data ($RLVR_DATA_DIR, default ../shared/data beside the checkout):

- gsm8k:   gold = the GSM8K solution (``... #### N``); predictions = short completions
           ending in ``\\boxed{N}`` (right) or ``\\boxed{N+1}`` etc. (wrong), in varied formats.
- math500: gold = the ``answer`` column; predictions = the problem's own solution and a
           completion boxing the answer (right), other problems' solutions (wrong).

Each gold answer gets ``--group`` predictions (default 4), as with RL group sampling.
- mix+adv: 100 pairs from each set (other problems) plus a few adversarial answers (a
           tower of exponents, a huge factorial, deep nesting, a giant completion).

The rlvr side is ``math_reward`` (worker processes, hard per-sample limit); the
baseline is ``math_verify.verify(parse(gold), parse(completion))`` in this process,
one pair after another, with its default 5 s timeouts. "acc" is agreement with the
right/wrong label each pair was built with. Run from the repository root:

    .venv/bin/python benchmarks/bench_math.py            # about a minute on 2 cores
    .venv/bin/python benchmarks/bench_math.py --n 100    # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import rlvr_plugins.math as mr
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(ROOT))
    import plugins.math as mr

# Predictions for the gold answer "4"; all wrong, all expensive to evaluate naively.
ADVERSARIAL = [
    "\\boxed{9^{9^{9^9}}}",  # a tower of exponents
    "\\boxed{(10^{6})!}",  # a huge factorial
    "\\boxed{" + "(" * 150 + "1" + ")" * 150 + "}",  # nesting that the LaTeX parser chokes on
    "word " * 400_000 + "\\boxed{3}",  # a 2 MB completion
]


def _read(path: Path, n: int) -> list[dict]:
    with path.open() as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def gsm8k_pairs(data: Path, n: int, group: int, rng: random.Random) -> list[tuple[str, str, bool]]:
    """``group`` completions per problem, as in RL sampling; half right, half wrong."""
    pairs = []
    for row in _read(data / "gsm8k" / "test.jsonl", n):
        final = int(row["answer"].split("####")[-1].strip().replace(",", ""))
        for k in range(group):
            right = k % 2 == 0
            value = final if right else final + rng.choice([-1, 1, 10])
            shown = rng.choice([f"{value}", f"{value:,}", f"\\${value}", f"{value}.00", f"{value} \\text{{ dollars}}"])
            pairs.append((row["answer"], f"Adding up the parts gives {value}. The answer is $\\boxed{{{shown}}}$.", right))
    return pairs


def math500_pairs(data: Path, n: int, group: int, rng: random.Random) -> list[tuple[str, str, bool]]:
    """``group`` completions per problem: its own solution, a short completion boxing the
    answer (right), and other problems' solutions with a different answer (wrong)."""
    rows = _read(data / "math500" / "test.jsonl", 500)
    pairs = []
    for row in rows[:n]:
        others = [r for r in rows if r["answer"].replace(" ", "") != row["answer"].replace(" ", "")]
        for k in range(group):
            if k == 0:
                pairs.append((row["answer"], row["solution"], True))
            elif k == 1:
                pairs.append((row["answer"], f"Therefore the answer is $\\boxed{{{row['answer']}}}$.", True))
            else:
                pairs.append((row["answer"], rng.choice(others)["solution"], False))
    return pairs


def run_rlvr(pairs, timeout: float) -> tuple[float, list]:
    t0 = time.perf_counter()
    scores = mr.math_reward(None, [p for _, p, _ in pairs], None, answer=[g for g, _, _ in pairs], timeout=timeout)
    return time.perf_counter() - t0, [s.value for s in scores]


def run_math_verify(pairs) -> tuple[float, list]:
    from math_verify import parse, verify

    t0 = time.perf_counter()
    verdicts = []
    for gold, pred, _ in pairs:
        try:
            verdicts.append(1.0 if verify(parse(gold), parse(pred)) else 0.0)
        except Exception:  # noqa: BLE001 - count as "not equal", as a training loop would
            verdicts.append(0.0)
    return time.perf_counter() - t0, verdicts


def agreement(values, pairs) -> float:
    return sum((v == 1.0) == right for v, (_, _, right) in zip(values, pairs)) / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50, help="problems per data set (default 50)")
    parser.add_argument("--group", type=int, default=4, help="predictions per problem (default 4)")
    parser.add_argument("--timeout", type=float, default=5.0, help="per-sample limit of the rlvr reward")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import logging

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # per-timeout warnings of the baseline
    data = Path(os.environ.get("RLVR_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
    rng = random.Random(args.seed)
    sets = {"gsm8k": gsm8k_pairs(data, args.n, args.group, rng), "math500": math500_pairs(data, args.n, args.group, rng)}
    adversarial = [("4", text, False) for text in ADVERSARIAL]
    # Other problems than the first two sets (the last 100 pairs of twice as many problems).
    mixed = (gsm8k_pairs(data, 2 * args.n, args.group, rng)[-100:]
             + math500_pairs(data, 2 * args.n, args.group, rng)[-100:] + adversarial)
    rng.shuffle(mixed)
    sets["mix+adv"] = mixed

    # Start the workers and warm both sides before timing anything.
    t0 = time.perf_counter()
    mr.math_reward(None, ["\\boxed{1}"] * 4, None, answer=["1"] * 4)
    start_s = time.perf_counter() - t0
    run_math_verify([("1", "\\boxed{1}", True)])
    workers = mr._pool().processes

    print(f"rlvr math reward: {workers} worker processes (started in {start_s:.1f} s), timeout {args.timeout:g} s;"
          f" baseline: math-verify verify(parse(gold), parse(pred)) in-process, 1 thread")
    print(f"{'set':10} {'pairs':>5} {'rlvr pairs/s':>13} {'math-verify pairs/s':>20} {'ratio':>6} {'rlvr acc':>9} {'mv acc':>7}")
    for name, pairs in sets.items():
        ours_s, ours = run_rlvr(pairs, args.timeout)
        mv_s, theirs = run_math_verify(pairs)
        ours_rate, mv_rate = len(pairs) / ours_s, len(pairs) / mv_s
        print(f"{name:10} {len(pairs):5d} {ours_rate:13.1f} {mv_rate:20.1f} {ours_rate / mv_rate:6.2f}"
              f" {agreement(ours, pairs):9.3f} {agreement(theirs, pairs):7.3f}", flush=True)
    print(f"mix+adv holds {len(adversarial)} adversarial answers; each costs at most the {args.timeout:g} s limit")


if __name__ == "__main__":
    main()
