"""``rlvr train`` end to end with a tiny random-init model and the ``test_plugin`` fixture's reward
(``even_tokens``) and environment (``ticker``), as tests/e2e/test_training_engine.py, test_sampling_server.py,
test_sampling_episodes.py and test_models_distributed.py run it; and what a run's processes leave behind or listen on."""

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from helpers import RLVR

METRIC_KEYS = {
    "step", "reward_mean", "reward_std", "zero_variance_frac", "unscorable", "kl", "clip_low_frac",
    "clip_high_frac", "entropy", "completion_len_mean", "completion_len_max", "truncated_frac", "grad_norm",
    "lr", "time_generate", "time_score", "time_train", "time_sync", "tokens_per_s", "reward/even_tokens",
}

# The sampler's dtype is pinned: "auto" is bfloat16 on CPUs with bf16 instructions and float32 on
# the others, and these tests check that the sampler computes what the trainer (float32) does.
# tests/e2e/test_training_engine.py's test_vllm_weight_sync_matches_trainer covers a bfloat16 sampler with its own tolerance.
RECIPE = """
name: tiny
task: {{name: arithmetic, options: {{size: 64}}}}
prompt: {{template: "{{{{question}}}}", system: "Answer in \\\\boxed{{}}."}}
rewards:
  even_tokens: 1.0
model: {{name: {model}}}
sampling: {{backend: {backend}, num_generations: 4, max_tokens: 12, dtype: float32}}
trainer: {{steps: {steps}, rollout_batch_size: 16, micro_batch_size: 4, lr: 1.0e-3, schedule: linear, zero_stage: {zero}, save_every: 1, keep_last: 2}}
algorithm: {{clip: {{eps_low: 0.2, eps_high: 0.28}}, ppo_epochs: 2, kl: {{beta: 0.01, estimator: k3, target: loss}}}}
"""


def make_run(tmp_path, tiny_model, test_plugin, backend="hf", zero=2, steps=2):
    """RECIPE for ``tiny_model`` written to ``tmp_path``, and the environment that finds ``test_plugin``."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE.format(model=tiny_model, backend=backend, zero=zero, steps=steps))
    env = {**os.environ, "PYTHONPATH": str(test_plugin), "RLVR_LOAD_PLUGINS": "tasks,testplug"}
    return recipe, env


def rows(out_dir):
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def train_two_steps(recipe, out, env, *sets: str, verbose: bool = False) -> list[dict]:
    """`rlvr train` a 2-step recipe; it must succeed and log one row with every key per step.
    The terminal shows rlvr's lines only (everything with --verbose); train.log gets everything."""
    cmd = [RLVR, "train", recipe, "--output-dir", out] + [arg for kv in sets for arg in ("--set", kv)]
    done = subprocess.run(cmd + ["--verbose"] * verbose, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = rows(out)
    assert [r["step"] for r in metrics] == [1, 2]
    assert METRIC_KEYS <= set(metrics[0])
    terminal, log = done.stdout + done.stderr, (out / "train.log").read_text()
    assert "step 2/2  reward" in terminal and "step 2/2  reward" in log
    assert "Loading weights" in log and ("Loading weights" in terminal) == verbose  # a third-party progress bar
    return metrics


def train_two_ranks(recipe, out, env, port: int, *sets: str) -> list[dict]:
    """`rlvr train` a 2-step recipe on two CPU ranks (torchrun, gloo); it must succeed and log steps 0, 1."""
    env = {**env, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}  # a crash shows every thread
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "rlvr.cli", "train", str(recipe), "--output-dir", str(out)] + [a for kv in sets for a in ("--set", kv)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-8000:]  # with the threads a crash dumped
    metrics = rows(out)
    assert [r["step"] for r in metrics] == [1, 2]
    return metrics


def assert_sampler_holds_trainer_weights(metrics: list[dict]) -> None:
    """Same weights and dtype in sampler and trainer (float32, pinned in RECIPE) after every sync:
    importance weights 1 and the sampler-trainer mismatch ~0."""
    for r in metrics:
        assert r["is_weight_mean"] == pytest.approx(1.0, abs=2e-3) and r["mismatch_k3"] < 1e-4, r


def sampler_pids(out_dir) -> list[int]:
    """Processes of this run's sampler (vLLM's server and its children): those whose environment
    carries the test's RLVR_TEST_RUN marker, other than the trainer (gone by then)."""
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


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # /proc prints 32-bit words in host order
    address = ipaddress.ip_address(words)
    return getattr(address, "ipv4_mapped", None) or address


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` holds in LISTEN state, seen in its own network namespace."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        tables = [open(f"/proc/{pid}/net/{name}").read() for name in ("tcp", "tcp6")]
    except OSError:  # gone meanwhile
        return set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].rsplit(":", 1)
                found.add((str(_address(address)), int(port, 16)))
    return found
