"""``rlvr doctor --smoke``: two training steps of a tiny random-init model on whatever this
machine has, one process per case, each with its own folder, time limit, and pass or fail with
the reason.

The cases: the HF sampler with full fine-tuning, with LoRA, and with a ``reward_model`` reward
(a random-init sequence classifier) on the trainer's device; where vLLM imports, vLLM with full
fine-tuning and with LoRA. Every case also checks what the step wrote: two metric rows, a
finite loss and gradient norm, a gradient in some step, and a final model. A random model's completions earn no
task reward, so the rewards here hash the text (``text_hash``): they vary between samples, so
every group has a gradient and no sequence is skipped.

Run one case by hand as ``python -m rlvr.training.smoke CASE --folder DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

CASES = ("hf-full", "hf-lora", "hf-reward-model", "vllm-full", "vllm-lora")


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


def check_run(out: Path, steps: int) -> str | None:
    """What is wrong with a finished run's output, or None."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return "no metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if [r.get("step") for r in rows] != list(range(1, steps + 1)):
        return f"metric rows for steps {[r.get('step') for r in rows]}, not 1..{steps}"
    for r in rows:
        for key in ("loss", "grad_norm"):
            value = r.get(key)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"step {r['step']}: {key} is {value!r}"
    if not any(r["grad_norm"] > 0 for r in rows):
        return "no step had a gradient (grad_norm 0 in every step)"
    if not (out / "final").is_dir():
        return "no final/ model"
    return None


def run_case(case: str, folder: Path, model: Path, reward_model: Path | None) -> None:
    """One case in this process (the child ``doctor`` starts): raises on failure."""
    from rlvr.api import train

    out = folder / "run"
    train(case_recipe(case, model, reward_model=reward_model), rewards={"text_hash": text_hash}, output_dir=out)
    problem = check_run(out, 2)
    if problem:
        raise RuntimeError(problem)


@dataclass
class CaseResult:
    case: str
    ok: bool
    seconds: float
    reason: str = ""


def available_cases(have_vllm: bool | None = None) -> list[str]:
    """The cases this machine can run: the vLLM ones only where vLLM imports."""
    if have_vllm is None:
        from importlib.util import find_spec

        have_vllm = find_spec("vllm") is not None
    return [c for c in CASES if have_vllm or not c.startswith("vllm")]


def run_smoke(cases: list[str], *, work: Path | None = None, timeout_s: float = 600.0,
              shape: str = "tiny", on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Each case in a child process of its own, in a fresh folder under ``work`` (a temporary
    one by default), stopped after ``timeout_s``; the results as each ends (``on_result``)."""
    from rlvr.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="rlvr-doctor-") as tmp:
        root = Path(work) if work is not None else Path(tmp)
        model = build_tiny_model(root / "model", shape)
        scorer = build_tiny_model(root / "scorer", shape, seed=1, reward_model=True) \
            if "hf-reward-model" in cases else None
        results = []
        for case in cases:
            folder = root / case
            folder.mkdir(parents=True, exist_ok=True)
            results.append(_child(case, folder, model, scorer, timeout_s))
            if on_result:
                on_result(results[-1])
        return results


def _child(case: str, folder: Path, model: Path, scorer: Path | None, timeout_s: float) -> CaseResult:
    cmd = [sys.executable, "-m", "rlvr.training.smoke", case, "--folder", str(folder), "--model", str(model)]
    if scorer is not None:
        cmd += ["--reward-model", str(scorer)]
    start = time.perf_counter()
    log = folder / "output.log"
    with open(log, "wb") as sink:
        try:
            done = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return CaseResult(case, False, time.perf_counter() - start, f"over {timeout_s:g} s (log: {log})")
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return CaseResult(case, True, seconds)
    return CaseResult(case, False, seconds, f"{_last_error(log.read_text(errors='replace'))} (log: {log})")


def _last_error(text: str) -> str:
    """The line of a failed child's output that says why: its last error or exception line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("rlvr-doctor-case: ") or "Error" in line.split(":", 1)[0] or line.startswith("rlvr: error"):
            return line.removeprefix("rlvr-doctor-case: ")[:400]
    return lines[-1][:400] if lines else "exited without output"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.training.smoke", description=__doc__.split("\n\n")[0])
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
