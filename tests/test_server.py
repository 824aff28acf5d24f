"""Server mode: vLLM in a process of its own, weights by collective broadcast (rlvr.server,
rlvr.weight_sync). Tiny random-init model on CPU."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import RLVR
from test_engine import make_run, rows, test_plugin, train_two_steps  # noqa: F401 - fixture

pytestmark = pytest.mark.slow  # every test here starts vLLM


def sampler_pids(out_dir) -> list[int]:
    """Processes whose command line names this run's sampler (vLLM's server and its children)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if f"RLVR_TEST_RUN={out_dir}".encode() in env:
            found.append(int(pid))
    return found


def test_server_mode_trains_and_leaves_nothing_behind(tmp_path, tiny_model, test_plugin):
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    out = tmp_path / "run"
    env["RLVR_TEST_RUN"] = str(out)
    metrics = train_two_steps(recipe, out, env, "sampling.mode=server")
    # same weights and dtype in sampler and trainer after every sync: weights 1, mismatch ~0
    for r in metrics:
        assert r["is_weight_mean"] == pytest.approx(1.0, abs=2e-3) and r["mismatch_k3"] < 1e-4, r
        assert r["time_sync"] > 0
    assert (out / "sampler-0.log").exists()
    assert sampler_pids(out) == []
