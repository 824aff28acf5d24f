"""One case of ``rlvr doctor --smoke`` (``rlvr.training.smoke`` starts each in a process of its
own): two training steps of a tiny random-init model on whatever this machine has, through the
Python API.

The cases: the HF sampler with full fine-tuning, with LoRA, and with a ``reward_model`` reward
(a random-init sequence classifier) on the trainer's device; where vLLM imports, vLLM with full
fine-tuning and with LoRA. Every case also checks what the step wrote: two metric rows, a
finite loss and gradient norm, a gradient in some step, and a final model. A random model's completions earn no
task reward, so the rewards here hash the text (``text_hash``): they vary between samples, so
every group has a gradient and no sequence is skipped.

Run one case by hand as ``python -m rlvr.api.smoke CASE --folder DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from rlvr.training.smoke import CASES, check_run


def text_hash(completions, **_) -> list[float]:
    """A reward in [0, 1) from a hash of each completion's text: it varies between samples of a
    random model, as no task reward does."""
    from rlvr.kit.text import completion_text

    return [int.from_bytes(hashlib.blake2b(completion_text(c).encode(), digest_size=4).digest(), "big") / 2**32
            for c in completions]


def case_recipe(case: str, model: Path, *, reward_model: Path | None = None, steps: int = 2) -> dict[str, Any]:
    """The recipe of one case, as data."""
    sampler, _, kind = case.partition("-")
    rewards: dict[str, Any] = {"text_hash": 1.0}
    if kind == "reward-model":
        rewards["reward_model"] = {"weight": 1.0, "options": {"model": str(reward_model), "max_length": 256}}
    recipe: dict[str, Any] = {
        "name": f"doctor-{case}",
        "task": {"name": "arithmetic", "options": {"size": 64}},
        "prompt": {"template": "{{question}}", "system": "Answer in \\boxed{}."},
        "rewards": rewards,
        "model": {"name": str(model)},
        "sampling": {"backend": sampler, "num_generations": 4, "max_tokens": 16, "temperature": 1.0},
        "trainer": {"steps": steps, "rollout_batch_size": 8, "micro_batch_size": 4, "lr": 1e-3, "save_every": steps,
                    "keep_last": 1, "final_checkpoint": "none", "samples_every": 0, "report_to": []},
        "algorithm": {"kl": {"beta": 0.0}},
    }
    if kind == "lora":
        recipe["model"]["lora"] = {"r": 4, "alpha": 8}
    if sampler == "vllm":
        recipe["sampling"].update(gpu_memory_utilization=0.3)
    return recipe


def run_case(case: str, folder: Path, model: Path, reward_model: Path | None) -> None:
    """One case in this process (the child ``doctor`` starts): raises on failure."""
    from rlvr.api import train

    out = folder / "run"
    train(case_recipe(case, model, reward_model=reward_model), rewards={"text_hash": text_hash}, output_dir=out)
    problem = check_run(out, 2)
    if problem:
        raise RuntimeError(problem)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.api.smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--model", type=Path, help="default: a tiny random-init model built in FOLDER")
    parser.add_argument("--reward-model", type=Path)
    args = parser.parse_args(argv)
    if args.model is None:
        from rlvr.models.tiny import build_tiny_model

        args.model = build_tiny_model(args.folder / "model")
        if args.case == "hf-reward-model" and args.reward_model is None:
            args.reward_model = build_tiny_model(args.folder / "scorer", seed=1, reward_model=True)
    try:
        run_case(args.case, args.folder, args.model, args.reward_model)
    except BaseException as exc:  # noqa: BLE001 - the reason is the one line the parent reports
        import traceback

        traceback.print_exc()
        print(f"rlvr-doctor-case: {type(exc).__name__}: {' '.join(str(exc).split())}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
