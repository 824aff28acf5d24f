"""Throughput and agreement of the ``math`` reward vs plain math-verify.

Pairs are built from the offline data ($RLVR_DATA_DIR, default /work/shared/data):

- gsm8k:   gold = the GSM8K solution (``... #### N``); prediction = a short completion
           ending in ``\\boxed{N}`` (right) or ``\\boxed{N+1}`` (wrong), in varied formats.
- math500: gold = the ``answer`` column; prediction = the problem's own solution (right)
           or another problem's solution with a different answer (wrong).
- +adv:    the gsm8k and math500 pairs plus a few adversarial answers (towers of
           exponents, huge factorials, a giant completion).

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
    from rlvr_plugins import math_reward as mr
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(ROOT))
    from plugins import math_reward as mr

ADVERSARIAL = [
    "\\boxed{9^{9^{9^9}}}",
    "\\boxed{10^{10^{10}}}",
    "\\boxed{(10^{6})!}",
    "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{\\frac{1}{(10^{9})!}}",
    "word " * 400_000 + "\\boxed{3}",
]


def _read(path: Path, n: int) -> list[dict]:
    with path.open() as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def gsm8k_pairs(data: Path, n: int, rng: random.Random) -> list[tuple[str, str, bool]]:
    pairs = []
    for row in _read(data / "gsm8k" / "test.jsonl", n):
        final = int(row["answer"].split("####")[-1].strip().replace(",", ""))
        right = rng.random() < 0.5
        value = final if right else final + 1
        shown = rng.choice([f"{value}", f"{value:,}", f"\\${value}", f"{value}.00", f"{value} \\text{{ dollars}}"])
        pairs.append((row["answer"], f"Adding up the parts gives {value}. The answer is $\\boxed{{{shown}}}$.", right))
    return pairs


def math500_pairs(data: Path, n: int, rng: random.Random) -> list[tuple[str, str, bool]]:
    rows = _read(data / "math500" / "test.jsonl", 500)[:n]
    pairs = []
    for i, row in enumerate(rows):
        if rng.random() < 0.5:
            pairs.append((row["answer"], row["solution"], True))
            continue
        for k in range(1, len(rows)):  # another problem with a different answer string
            other = rows[(i + k) % len(rows)]
            if other["answer"].replace(" ", "") != row["answer"].replace(" ", ""):
                pairs.append((row["answer"], other["solution"], False))
                break
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
    parser.add_argument("--n", type=int, default=250, help="pairs per data set (default 250)")
    parser.add_argument("--timeout", type=float, default=5.0, help="per-sample limit of the rlvr reward")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import logging

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # per-timeout warnings of the baseline
    data = Path(os.environ.get("RLVR_DATA_DIR", "/work/shared/data"))
    rng = random.Random(args.seed)
    sets = {"gsm8k": gsm8k_pairs(data, args.n, rng), "math500": math500_pairs(data, args.n, rng)}
    mixed = sets["gsm8k"] + sets["math500"]
    adversarial = [("3", text, False) for text in ADVERSARIAL]
    sets["both+adv"] = mixed + adversarial
    rng.shuffle(sets["both+adv"])

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
    print(f"adversarial answers in both+adv: {len(adversarial)} (each costs at most the {args.timeout:g} s limit)")


if __name__ == "__main__":
    main()
