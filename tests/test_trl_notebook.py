"""The TRL user's notebook (examples/python-api/trl_notebook.py), on the tiny model: a
conversational JSONL, TRL's list of rewards with weights (one raising), two rlvr.train calls and
rlvr.evaluate in one process. The first run stops, the second trains, the evaluation runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_notebook_example_stops_the_broken_run_then_trains_and_evaluates(tmp_path, tiny_model):
    script = ROOT / "examples/python-api/trl_notebook.py"
    done = subprocess.run([sys.executable, str(script), f"model.name={tiny_model}", "sampling.backend=hf",
                           "sampling.max_tokens=8", "trainer.steps=3", "eval.limit=4", "--output-dir",
                           str(tmp_path / "nb")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert ("RlvrError: no sample could be scored in 3 consecutive steps, so nothing was trained: reward "
            "'typo_reward' could not score") in out, out[-3000:]
    assert "steps (step, reward, optimizer steps): [(1, " in out and "a sample of step 3:" in out
    assert "held-out accuracy of the trained model:" in out and "on 4 problems" in out
    assert (tmp_path / "nb" / "run2" / "final" / "config.json").exists()
    assert not (tmp_path / "nb" / "run1" / "final").exists()  # the stopped run saved no "trained" model
