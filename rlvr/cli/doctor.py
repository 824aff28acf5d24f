"""``rlvr doctor``: what a bug report needs (versions, GPUs, the device policy's decisions, the
sampler backends), and with ``--smoke`` two training steps of a tiny random-init model for each
configuration this machine can run, pass or fail with the reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rlvr import RlvrError
from rlvr.cli.common import cli


@cli.command()
@click.option("--smoke", is_flag=True, help="Also train 2 steps of a tiny random-init model in each configuration "
              "this machine can run (HF sampler: full fine-tuning, LoRA, a reward_model reward on the same device; "
              "vLLM where installed), each in a process of its own: pass or fail with the reason.")
@click.option("--case", "cases", multiple=True, help="Only this smoke case (repeatable): hf-full, hf-lora, "
              "hf-reward-model, vllm-full, vllm-lora.")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds each smoke case may take.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the smoke cases write (default: a temporary folder, removed after); must not exist.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
def doctor(smoke, cases, timeout, work_dir, as_json):
    """Print versions (torch, CUDA, vLLM, DeepSpeed and its ops, transformers, peft), the GPUs, the
    bf16 decision and the sampler backends; exit 1 when a smoke case fails."""
    from rlvr.training.doctor import format_report, report
    from rlvr.training.smoke import CASES, available_cases, run_smoke

    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise RlvrError(f"--case {unknown[0]!r}: one of {', '.join(CASES)}")
    if (cases or work_dir) and not smoke:
        raise RlvrError("--case and --work-dir go with --smoke")
    if work_dir is not None and work_dir.exists():
        raise RlvrError(f"--work-dir {work_dir} exists: name a new folder (nothing in it is replaced)")
    found = report()
    if not as_json:
        for line in format_report(found):
            click.echo(line)
    if not smoke:
        if as_json:
            click.echo(json.dumps(found, indent=2))
        return
    can = available_cases()
    chosen = list(cases) or can
    missing = [c for c in chosen if c not in can]
    if missing:
        raise RlvrError(f"smoke case {missing[0]} needs vLLM, which is not installed here")

    def show(result):
        if not as_json:
            verdict = "pass" if result.ok else f"FAIL: {result.reason}"
            click.echo(f"smoke {result.case:<16} {result.seconds:6.1f} s  {verdict}")

    if not as_json:
        click.echo(f"smoke: {len(chosen)} case(s), 2 steps each on a tiny random-init model ...")
    results = run_smoke(chosen, work=work_dir, timeout_s=timeout, on_result=show)
    if as_json:
        found["smoke"] = [vars(r) for r in results]
        click.echo(json.dumps(found, indent=2))
    if not all(r.ok for r in results):
        sys.exit(1)
