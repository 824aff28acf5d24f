"""A TRL user's notebook, cell by cell, in one Python process: a dataset in TRL's conversational
format (a ``prompt`` column of chat messages) in a JSONL file, a list of TRL-style rewards with
weights (TRL's own ``accuracy_reward`` among them, and one with a bug), two ``rlvr.api.train`` calls
and an ``rlvr.api.evaluate``. About 4 minutes on 2 cores:

    .venv/bin/python examples/python-api/trl_notebook.py [KEY=VALUE ...] [--output-dir DIR]

The first run stops after ``trainer.max_unscored_steps`` steps in which the broken reward left
every sample unscored (``when_unscored: void``, the default); the second sums the rewards that
did score, as TRL does (``when_unscored: skip``), and learns. KEY=VALUE are recipe overrides for
both runs, as ``rlvr train --set`` takes them. Needs TRL: ``pip install 'rlvr[trl]'``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from trl.rewards import accuracy_reward  # TRL's own, unchanged: it wants the answer in \boxed{}

import rlvr.api


def correct(completions, solution, **kwargs):
    """1.0 when the reply's last number is the solution."""
    last = [re.findall(r"-?\d+", c[0]["content"])[-1:] for c in completions]
    return [float(n == [s]) for n, s in zip(last, solution)]


def short(completions, **kwargs):
    """A shaping term that returns numpy scalars."""
    import numpy as np

    return [np.float32(len(c[0]["content"]) < 40) for c in completions]


def typo_reward(completions, solution, **kwargs):
    """A bug: every call raises KeyError('contnet')."""
    return [float(c[0]["contnet"] == s) for c, s in zip(completions, solution)]


REWARDS, WEIGHTS = [correct, accuracy_reward, short, typo_reward], [1.0, 0.5, 0.1, 0.1]


def write_dataset(path: Path, n: int = 600) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            a, b = rng.randint(1, 20), rng.randint(1, 20)
            prompt = [{"role": "system", "content": "Reply with only the number."},
                      {"role": "user", "content": f"What is {a} + {b}?"}]
            f.write(json.dumps({"prompt": prompt, "solution": str(a + b)}) + "\n")


def recipe(data: Path) -> dict:
    return {
        "name": "trl_sums",
        "task": {"name": "dataset", "options": {"path": str(data)}},  # columns: those of its first row
        "prompt": {"template": "{{prompt}}"},  # the conversation itself, through the chat template
        "model": {"name": "smollm2-135m-instruct"},
        "sampling": {"num_generations": 8, "temperature": 0.8, "max_tokens": 32},
        "trainer": {"steps": 8, "rollout_batch_size": 32, "micro_batch_size": 16, "lr": 2e-5, "save_every": 4,
                    "eval_at_start": True, "eval_at_end": True},
        "eval": {"limit": 60, "temperature": 0.0, "correctness_reward": "correct"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--output-dir", default="runs/trl_notebook")
    args = parser.parse_args()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "sums.jsonl"
    write_dataset(data)
    rec = recipe(data)

    print(">>> rlvr.api.train(rec, rewards=[correct, accuracy_reward, short, typo_reward], reward_weights=[1.0, 0.5, 0.1, 0.1])")
    try:
        rlvr.api.train(rec, rewards=REWARDS, reward_weights=WEIGHTS, overrides=args.overrides, output_dir=out / "run1")
    except rlvr.RlvrError as exc:
        print(f"RlvrError: {exc}")

    print(">>> rlvr.api.train(..., overrides=[..., 'when_unscored=skip'])")
    result = rlvr.api.train(rec, rewards=REWARDS, reward_weights=WEIGHTS, overrides=[*args.overrides, "when_unscored=skip"],
                            output_dir=out / "run2")
    print("steps (step, reward, optimizer steps):",
          [(m["step"], round(m["reward_mean"], 3), m["optimizer_steps"]) for m in result.metrics()])
    last = result.metrics()[-1]["step"]
    print(f"a sample of step {last}: {result.samples(last)[0]['turns'][0]['text'][:60]!r}")

    print(">>> rlvr.api.evaluate(rec, result.final_model, rewards=[correct])")
    ev = rlvr.api.evaluate(rec, result.final_model, rewards=[correct], overrides=args.overrides, output_dir=out / "eval")
    print(f"held-out accuracy of the trained model: {100 * ev.accuracy:.1f}% on {ev.report['n']} problems")


if __name__ == "__main__":
    main()
