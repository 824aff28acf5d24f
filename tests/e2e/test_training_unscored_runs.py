"""Every run tells the truth about what its rewards could not score: the checks that run `rlvr` or
other processes end to end (the e2e ring; the others: tests/unit/test_training_unscored.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import RLVR, run_rlvr

PLUGIN = '''
from rlvr import hookimpl

def even_tokens(prompts, completions, completion_ids):
    """Share of even token ids: varies between samples of a random model."""
    return [sum(t % 2 == 0 for t in ids) / max(1, len(ids)) for ids in completion_ids]

def judge_down(prompts, completions, completion_ids):
    """A shaping term whose service is down: it raises on every call."""
    raise ConnectionError("the judge is down")

def down_on_rank1(prompts, completions, completion_ids):
    """Raises on the second rank of a torchrun launch only."""
    import os

    if os.environ.get("RANK") == "1":
        raise ConnectionError("the judge is down on rank 1")
    return [0.0] * len(completions)

def odd_only(prompts, completions, completion_ids):
    """Scores every other record."""
    return [1.0 if i % 2 else None for i in range(len(completions))]

@hookimpl
def rlvr_register_rewards(register):
    register("even_tokens", even_tokens)
    register("judge_down", judge_down)
    register("odd_only", odd_only)
    register("down_on_rank1", down_on_rank1)
'''


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """A throwaway plugin package on PYTHONPATH, found through a real entry point."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "rlvr_unscored.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "rlvr_unscored-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlvr-unscored\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[rlvr]\nunscored = rlvr_unscored\n")
    return {**os.environ, "PYTHONPATH": str(root), "RLVR_LOAD_PLUGINS": "tasks,unscored"}


def test_rlvr_score_that_scored_nothing_fails_and_keeps_the_output(plugin_env, tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"completion": f"c{i}"}) + "\n" for i in range(5)))
    dst.write_text("precious\n")
    out = run_rlvr("score", "--reward", "judge_down", "--input", src, "--output", dst, env=plugin_env)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "rlvr: error: scored none of the 5 records: reward 'judge_down' could not score 5 of 5 records "
        "(ConnectionError: the judge is down)"]
    assert dst.read_text() == "precious\n"
    out = run_rlvr("score", "--reward", "odd_only", "--input", src, "--output", dst, env=plugin_env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines() == [  # one summary line, however many batches
        "rlvr: reward 'odd_only' could not score 3 of 5 records (returned None)",
        f"scored 2/5 records with 'odd_only' -> {dst}"]


RECIPE = """
name: tiny
task: {{name: arithmetic, options: {{size: 64}}}}
prompt: {{template: "{{{{question}}}}"}}
rewards:
  even_tokens: 1.0
  judge_down: 0.1
model: {{name: {model}}}
sampling: {{backend: hf, num_generations: 4, max_tokens: 8, dtype: float32}}
trainer: {{steps: 4, rollout_batch_size: 8, micro_batch_size: 8, lr: 1.0e-3, save_every: 10, max_unscored_steps: 2,
           samples_every: 0}}
"""


def test_a_failing_shaping_reward_stops_the_run_or_is_skipped(tmp_path, tiny_model, plugin_env):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE.format(model=tiny_model))
    stopped = subprocess.run([RLVR, "train", recipe, "--output-dir", tmp_path / "stopped"], env=plugin_env,
                             capture_output=True, text=True, timeout=600)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("rlvr: error: no sample could be scored in 2 consecutive steps, so nothing was trained: "
                           "reward 'judge_down' could not score 8 of 8 samples (ConnectionError: the judge is down)")
    assert "Traceback" not in stopped.stderr
    assert "step 1: no sample could be scored: reward 'judge_down'" in stopped.stderr
    rows = [json.loads(line) for line in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["optimizer_steps"], r["unscorable"]) for r in rows] == [(1, 0, 8), (2, 0, 8)]
    assert not (tmp_path / "stopped" / "final").exists()

    # skip: the rewards that scored, as TRL sums them; the failures are still said once a step
    skipped = subprocess.run([RLVR, "train", recipe, "--output-dir", tmp_path / "skipped", "--set",
                              "when_unscored=skip", "--set", "trainer.steps=2"],
                             env=plugin_env, capture_output=True, text=True, timeout=600)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "skipped" / "metrics.jsonl").read_text().splitlines()]
    assert [r["unscorable"] for r in rows] == [0, 0] and all(r["optimizer_steps"] > 0 for r in rows), rows
    assert all(r["trained_tokens"] > 0 for r in rows)
    said = [line for line in skipped.stderr.splitlines() if "could not score" in line]
    assert said == [f"step {s}: reward 'judge_down' could not score 8 of 8 samples (ConnectionError: the judge is "
                    "down)" for s in (1, 2)]


def train_two_ranks(recipe, out, env, port: int, *sets: str) -> subprocess.CompletedProcess:
    env = {**env, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           "-m", "rlvr.cli", "train", str(recipe), "--output-dir", str(out)] + [a for kv in sets for a in ("--set", kv)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.longer(600, reason="two DeepSpeed ranks train under torchrun (64 s alone)")
def test_ranks_decide_together_from_the_reduced_counts(tmp_path, tiny_model, plugin_env):
    """The ranks stop at the same step when none scored anything; a rank that scored nothing while
    another did is no reason to stop (it would leave the other waiting in a collective)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE.format(model=tiny_model).replace("micro_batch_size: 8", "micro_batch_size: 4"))
    stopped = train_two_ranks(recipe, tmp_path / "stopped", plugin_env, 29531)
    assert stopped.returncode != 0  # torchrun ends the other rank once one has exited
    assert "rlvr: error: no sample could be scored in 2 consecutive steps" in stopped.stderr, stopped.stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["unscorable"]) for r in rows] == [(1, 8), (2, 8)]

    recipe.write_text(recipe.read_text().replace("judge_down: 0.1", "down_on_rank1: 0.1"))
    one = train_two_ranks(recipe, tmp_path / "one", plugin_env, 29532, "trainer.steps=3")
    assert one.returncode == 0, one.stderr[-4000:]
    rows = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["unscorable"]) for r in rows] == [(1, 4), (2, 4), (3, 4)]  # rank 1's 4 of 8


REDUCE = '''
import json, sys, torch.distributed as dist
from rlvr.models.distributed import reduce_sums
from rlvr.runs.metrics import reward_metrics
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
same = reduce_sums({"a": 1.0 + rank, "len_max": 3.0 * rank})
# rank 1 trained nothing: the figures of the micro-batches it did not run are missing there
mine = {"a": 1.0, "is_tokens": 5.0, "is_weight_max": 1.5} if rank == 0 else {"a": 2.0, "env/x": 4.0}
# a reward's own metrics (rlvr.rewards.runner.metric_sums): rank 0's records were no cache hits
judge = "reward_metric/judge/"
costs = {judge + "seconds_mean": 2.0, judge + "seconds_mean/n": 1.0, judge + "seconds_max": 2.0}
if rank == 1:
    costs = {judge + "seconds_mean": 7.0, judge + "seconds_mean/n": 2.0, judge + "seconds_max": 4.0,
             judge + "cache_hits": 4.0}
print(json.dumps([same, reduce_sums(mine), reward_metrics(reduce_sums(costs))]))
dist.destroy_process_group()
'''


def test_reduce_sums_matches_names_when_a_rank_lacks_some(tmp_path):
    """A rank that had nothing to train lacks its importance-sampling sums: the reduction must not
    abort (gloo: "Received data size doesn't match expected size"), and every rank gets the same."""
    script = tmp_path / "reduce.py"
    script.write_text(REDUCE)
    ranks = [subprocess.Popen([sys.executable, str(script), str(rank), "29533"], stdout=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in ranks]
    assert [p.returncode for p in ranks] == [0, 0]
    assert outs[0] == outs[1] == [{"a": 3.0, "len_max": 3.0},
                                  {"a": 3.0, "env/x": 4.0, "is_tokens": 5.0, "is_weight_max": 1.5},
                                  {"reward/judge/cache_hits": 4.0, "reward/judge/seconds_max": 4.0,
                                   "reward/judge/seconds_mean": 3.0}]
