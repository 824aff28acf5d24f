"""The learner (rlvr.training.learner) on the recorded reference batches and tiny models of
tests/data/record_engine_reference.py, with the optimizer side in plain torch: shared by
tests/integration/test_training_learner.py, test_training_loss_variants.py and test_training_importance_sampling.py."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from rlvr.recipe.spec import AlgorithmConfig
from rlvr.sampling.samplers import Completion
from rlvr.training.learner import Learner
from rlvr.training.rollout import Rollout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
import record_engine_reference as ref  # noqa: E402 - the recording script's batches and tiny models


class SGDBackend:
    """The learner's optimizer side in plain torch: accumulate, then SGD; records each step's gradients."""

    def __init__(self, model):
        self.policy = self.module = model
        self.lr, self.records, self.backwards = None, [], 0

    def backward(self, loss, *, last=False):
        loss.backward()
        self.backwards += 1

    def step(self) -> float:
        grads = {n: p.grad.detach().clone() for n, p in self.module.named_parameters() if p.grad is not None}
        self.records.append((self.lr, grads))
        with torch.no_grad():
            for p in self.module.parameters():
                if p.grad is not None:
                    p.sub_(self.lr * p.grad)
                    p.grad = None
        return float(torch.nn.utils.get_total_norm(list(grads.values())))

    def set_lr(self, lr):
        self.lr = lr


# Group 0 has no reward variance (every advantage 0); in group 1 the 0.5 gets advantage exactly 0
# (0.5 - mean(1, 0, 0.5)); a truncated sequence under mask_truncated has weight 0.
SKIP_REWARDS = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.5]


def skip_rollout() -> Rollout:
    """The reference batch with SKIP_REWARDS and seeded sampler log-probs."""
    gen = torch.Generator().manual_seed(3)
    completions = [Completion("", list(ids), truncated, logprobs=(-torch.rand(len(ids), generator=gen) - 0.5).tolist())
                   for ids, truncated in ref.COMPLETIONS]
    return Rollout(group_size=ref.K, prompt_ids=ref.PROMPTS, completions=completions, rewards=list(SKIP_REWARDS),
                   reward_values={})


def run_update(algo: AlgorithmConfig, skip: bool, rollout: Rollout | None = None, is_mode: str = "none"):
    """One update of the tiny policy (beside its reference model) on ``rollout``, skip_rollout()'s
    by default: the learner's stats, and the backend with each optimizer step's gradients."""
    policy, reference_model = ref.tiny_models()
    backend = SGDBackend(policy)
    learner = Learner(backend, algo, micro_batch_size=2, temperature=1.0, pad_id=ref.PAD, device=torch.device("cpu"),
                      share_prompts=True, ref_model=reference_model, is_mode=is_mode, skip_zero_advantage=skip)
    stats = learner.update(rollout or skip_rollout(), lr=ref.SGD_LR).sums
    return stats, backend
