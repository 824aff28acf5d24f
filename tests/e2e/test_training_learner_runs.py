"""The policy update (rlvr.training.learner) on fixed batches with a tiny model and a plain-torch
optimizer side: the checks that run `rlvr` or other processes end to end (the e2e ring; the others:
tests/integration/test_training_learner.py, tests/unit/test_training_learner_pure.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))


# The same update through DeepSpeed on two ranks (gloo), with and without skipping: rank 0's
# rollout has groups without variance (fewer micro-batches), rank 1's has none (so rank 0 runs
# null micro-batches to keep ZeRO's collectives in step). Prints a checksum of the weights after.
DEEPSPEED_SCRIPT = '''
import os, sys
os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch, deepspeed
sys.path.insert(0, sys.argv[2])
import record_engine_reference as ref
from rlvr.models.distributed import process_group_scope
from rlvr.recipe.spec import AlgorithmConfig, TrainerConfig
from rlvr.sampling.samplers import Completion
from rlvr.training.learner import Learner
from rlvr.training.policy import DeepSpeedBackend, deepspeed_config, without_shm_inference_op
from rlvr.training.rollout import Rollout

without_shm_inference_op()  # as rlvr's ranks start
with process_group_scope():
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    for zero in map(int, sys.argv[1].split(",")):
        for skip in (False, True):  # each a fresh model, optimizer and engine
            policy, _ = ref.tiny_models()
            trainer = TrainerConfig(rollout_batch_size=16, micro_batch_size=2, zero_stage=zero)
            # eps 1e-4: a gradient entry that is 0 but for rounding (|g| ~ 1e-9, summed in another order
            # with skipping) moves by g/eps * lr, not by a whole lr of its sign as at eps 1e-8
            optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2, eps=1e-4)
            engine, *_ = deepspeed.initialize(model=policy, model_parameters=policy.parameters(), optimizer=optimizer,
                                              config=deepspeed_config(trainer, world=2, zero_stage=zero, bf16=False,
                                                                      fp16=False))
            backend = DeepSpeedBackend(engine, world=2, own_grad_norm=zero == 0)
            rewards = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.5] if rank == 0 else [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
            completions = [Completion("", list(ids), truncated) for ids, truncated in ref.COMPLETIONS]
            rollout = Rollout(group_size=ref.K, prompt_ids=ref.PROMPTS, completions=completions, rewards=rewards,
                              reward_values={})
            learner = Learner(backend, AlgorithmConfig(ppo_epochs=2), micro_batch_size=2, temperature=1.0,
                              pad_id=ref.PAD, device=torch.device("cpu"), share_prompts=True, skip_zero_advantage=skip)
            stats = learner.update(rollout, lr=1e-2).sums
            flat = torch.cat([p.detach().double().flatten() for p in engine.module.parameters()])
            mode = "skip" if skip else "all"
            with open(os.path.join(sys.argv[3], f"rank{rank}-zero{zero}-{mode}.txt"), "w") as f:  # a file per rank
                f.write(" ".join(map(repr, [rank, stats["skipped_seqs"], flat.sum().item(), flat.abs().sum().item(),
                                            flat.pow(2).sum().item()])))
            engine.destroy()
            del engine, backend, learner, optimizer, policy
'''


STAGES = (0, 2)


@pytest.fixture(scope="module")
def two_rank_updates(tmp_path_factory):
    """Every stage's update with and without skipping, in one launch of two DeepSpeed ranks under
    torchrun (a launch takes 20-35 s of imports and start-up): {(zero, mode): [rank 0's, rank 1's]}."""
    import os
    import socket
    import subprocess

    folder = tmp_path_factory.mktemp("ds_skip")
    script = folder / "ds_skip.py"
    script.write_text(DEEPSPEED_SCRIPT)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(port), str(script),
                           ",".join(map(str, STAGES)), str(DATA), str(folder)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {(zero, mode): [(folder / f"rank{r}-zero{zero}-{mode}.txt").read_text().split() for r in (0, 1)]
            for zero in STAGES for mode in ("all", "skip")}


@pytest.mark.longer(600, reason="two DeepSpeed ranks under torchrun, every stage with and without skipping (60 s alone)")
@pytest.mark.parametrize("zero", STAGES)
def test_deepspeed_update_is_the_same_with_skipping_on_two_ranks(two_rank_updates, zero):
    results = {mode: two_rank_updates[zero, mode] for mode in ("all", "skip")}
    assert [float(r[1]) for r in results["all"]] == [0.0, 0.0]
    assert float(results["skip"][0][1]) >= 5 and float(results["skip"][1][1]) == 0  # rank 0 skips, rank 1 cannot
    for with_all, skipped in zip(results["all"], results["skip"]):
        for a, b in zip(with_all[2:], skipped[2:]):
            assert float(b) == pytest.approx(float(a), rel=1e-6), (with_all, skipped)
