"""The Python API: the checks that run `rlvr` or other processes end to end (the e2e ring; the
others: tests/unit/test_api_python.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


import pytest

import rlvr.api

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 21) for b in range(1, 21)]
RECIPE = {"name": "api", "task": "sums", "prompt": {"template": "{{question}}"},
          "sampling": {"num_generations": 4}, "trainer": {"rollout_batch_size": 8, "micro_batch_size": 4}}


def trl_exact(completions, answer, **kwargs):
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]


@pytest.mark.longer(600, reason="trains, then evaluates, in this process (63 s alone)")
def test_train_then_evaluate_from_python(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))  # trackio, offline: a local database
    before = {k: os.environ.get(k) for k in ("RANK", "MASTER_PORT")}
    sets = {"model.name": tiny_model, "sampling.backend": "hf", "sampling.max_tokens": 8, "trainer.steps": 2,
            "trainer.samples_every": 1, "eval.limit": 4, "trainer.eval_at_end": True,
            "trainer.report_to": ["tensorboard", "trackio"]}
    result = rlvr.api.train(RECIPE, overrides=sets, rewards={"exact": trl_exact, "short": lambda completions, **kw: [
        -len(c[0]["content"]) / 100 for c in completions]}, tasks={"sums": ROWS}, output_dir=tmp_path / "run")
    assert (result.final_model / "config.json").exists()
    assert [r["step"] for r in result.metrics()] == [1, 2] and "reward/short" in result.metrics()[0]
    assert {r["step"] for r in result.samples()} == {1, 2} and result.samples(2)[0]["rewards"]["short"] <= 0
    assert result.summary["eval_after"]["n"] == 4
    from trackio.sqlite_storage import SQLiteStorage

    tracked = SQLiteStorage.get_logs("api", "run")  # project: the recipe's name; run: the folder's
    assert [r["step"] for r in tracked] == [1, 2] and tracked[1]["loss"] == result.metrics()[1]["loss"]
    assert any((tmp_path / "run" / "tensorboard").iterdir())
    ev = rlvr.api.evaluate(RECIPE, result.final_model, overrides={"sampling.backend": "hf", "eval.limit": 4,
                                                                  "eval.max_tokens": 8},
                           rewards={"exact": trl_exact}, tasks={"sums": ROWS}, output_dir=tmp_path / "ev")
    assert ev.report["n"] == 4 and 0 <= ev.accuracy <= 1 and len(ev.samples()) == 4
    assert (tmp_path / "ev" / "eval.log").exists()
    # the world of one is gone with the run: a child process, or the next run, does not find its port
    assert {k: os.environ.get(k) for k in ("RANK", "MASTER_PORT")} == before


def run_example(name: str, model, output_dir, steps: int) -> subprocess.CompletedProcess:
    """``examples/python-api/NAME`` on ``model`` (hf sampling, short answers, 4 eval prompts)."""
    script = ROOT / "examples/python-api" / name
    done = subprocess.run([sys.executable, str(script), f"model.name={model}", "sampling.backend=hf",
                           "sampling.max_tokens=8", f"trainer.steps={steps}", "eval.limit=4", "--output-dir",
                           str(output_dir)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_example_script_runs(tmp_path, tiny_model):
    done = run_example("train_sums.py", tiny_model, tmp_path / "run", steps=1)
    assert "held-out accuracy" in done.stdout and (tmp_path / "run" / "final" / "config.json").exists()


def test_the_notebook_example_stops_the_broken_run_then_trains_and_evaluates(tmp_path, tiny_model):
    """examples/python-api/trl_notebook.py: a conversational JSONL, TRL's list of rewards with
    weights (one raising), two rlvr.api.train calls and rlvr.api.evaluate in one process. The first run
    stops, the second trains, the evaluation runs."""
    out = run_example("trl_notebook.py", tiny_model, tmp_path / "nb", steps=3).stdout
    assert ("RlvrError: no sample could be scored in 3 consecutive steps, so nothing was trained: reward "
            "'typo_reward' could not score") in out, out[-3000:]
    assert "steps (step, reward, optimizer steps): [(1, " in out and "a sample of step 3:" in out
    assert "held-out accuracy of the trained model:" in out and "on 4 problems" in out
    assert (tmp_path / "nb" / "run2" / "final" / "config.json").exists()
    assert not (tmp_path / "nb" / "run1" / "final").exists()  # the stopped run saved no "trained" model
