"""``rlvr doctor --smoke``'s cases, each run as a child process of its own (``python -m
rlvr.api.smoke CASE``, which trains through the Python API) with its own folder and time limit;
pass or fail with the reason the child gave. The cases and what each checks: ``rlvr.api.smoke``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

CASES = ("hf-full", "hf-lora", "hf-reward-model", "vllm-full", "vllm-lora")


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
    cmd = [sys.executable, "-m", "rlvr.api.smoke", case, "--folder", str(folder), "--model", str(model)]
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
