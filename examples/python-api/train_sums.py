"""rlvr from Python: your own rows as the task and your own reward, a function written for TRL
(keywords: completions, columns, **kwargs), no plugin package. About 2 minutes on 2 cores:

    .venv/bin/python examples/python-api/train_sums.py [KEY=VALUE ...] [--output-dir DIR]

KEY=VALUE are recipe overrides, as `rlvr train --set` takes them (e.g. trainer.steps=4).
"""

from __future__ import annotations

import argparse
import re

import rlvr.api


def exact_number(completions, answer, **kwargs):
    """1.0 when the last number in the reply is the answer. Conversational completions (a list
    of one assistant message), as TRL passes them for chat prompts."""
    scores = []
    for completion, gold in zip(completions, answer):
        numbers = re.findall(r"-?\d+", completion[0]["content"])
        scores.append(float(bool(numbers) and numbers[-1] == gold))
    return scores


ROWS = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 25) for b in range(1, 25)]

RECIPE = {
    "name": "python_sums",
    "task": "sums",  # the rows below; one in five is held out for evaluation
    "prompt": {"system": "Reply with only the number.", "template": "{{question}}"},
    "model": {"name": "smollm2-135m-instruct"},
    "sampling": {"backend": "vllm", "num_generations": 8, "temperature": 0.8, "max_tokens": 32},
    "trainer": {"steps": 16, "rollout_batch_size": 32, "micro_batch_size": 16, "lr": 2.0e-5,
                "eval_at_start": True, "eval_at_end": True},
    "eval": {"limit": 100},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--output-dir", default="runs/python_sums")
    args = parser.parse_args()
    result = rlvr.api.train(RECIPE, rewards={"exact_number": exact_number}, tasks={"sums": ROWS},
                            overrides=args.overrides, output_dir=args.output_dir)
    before, after = result.summary["eval_before"]["accuracy"], result.summary["eval_after"]["accuracy"]
    print(f"held-out accuracy {100 * before:.1f}% -> {100 * after:.1f}%; model in {result.final_model}")
    print(f"last step: reward {result.metrics()[-1]['reward_mean']:.3f}")


if __name__ == "__main__":
    main()
