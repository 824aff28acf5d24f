"""Importance-sampling correction against the sampler's log-probs
(rlvr.training.losses.importance_weights, the learner's use of it, the mode a run picks): the checks
that start worker pools or loopback services, or build a tiny model in-process (the integration
ring; the others: tests/unit/test_training_importance_sampling.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from rlvr.recipe.spec import AlgorithmConfig
from rlvr.sampling.samplers import Completion
from rlvr.training.learner import Learner
from rlvr.training.rollout import Rollout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
import record_engine_reference as ref  # noqa: E402
from helpers.learner import SGDBackend  # noqa: E402


def _rollout(behaviour: list[list[float]] | None) -> Rollout:
    completions = [Completion("", list(ids), truncated, None if behaviour is None else behaviour[i])
                   for i, (ids, truncated) in enumerate(ref.COMPLETIONS)]
    return Rollout(group_size=ref.K, prompt_ids=ref.PROMPTS, completions=completions, rewards=list(ref.REWARDS),
                   reward_values={})


def _update(mode: str, behaviour, clip=None, epochs: int = 1):
    policy, _ = ref.tiny_models()
    backend = SGDBackend(policy)
    algo = AlgorithmConfig(clip=clip, ppo_epochs=epochs, is_correction={"mode": mode, "cap": 2.0})
    learner = Learner(backend, algo, micro_batch_size=ref.MICRO, temperature=1.0, pad_id=ref.PAD,
                      device=torch.device("cpu"), share_prompts=True, is_mode=mode)
    stats = learner.update(_rollout(behaviour), lr=ref.SGD_LR).sums
    return stats, backend.records[0][1], learner


def _trainer_logprobs() -> list[list[float]]:
    policy, _ = ref.tiny_models()
    learner = Learner(SGDBackend(policy), AlgorithmConfig(), micro_batch_size=ref.MICRO, temperature=1.0,
                      pad_id=ref.PAD, device=torch.device("cpu"), share_prompts=True)
    prompts = [ref.PROMPTS[i // ref.K] for i in range(len(ref.COMPLETIONS))]
    with torch.no_grad():
        lp, mask, _ = learner.logprobs(policy, prompts, [list(ids) for ids, _ in ref.COMPLETIONS])
    return [lp[i, : int(mask[i].sum())].tolist() for i in range(len(prompts))]


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_same_weights_same_dtype_change_nothing(mode):
    """Sampler and trainer hold the same weights: every weight is 1 (to 1e-5) and the gradient
    is the uncorrected one."""
    behaviour = _trainer_logprobs()
    stats, grads, _ = _update(mode, behaviour, clip={"eps_low": 0.2, "eps_high": 0.28})
    _, plain, _ = _update("none", None, clip={"eps_low": 0.2, "eps_high": 0.28})
    assert stats["is_weight"] / stats["is_tokens"] == pytest.approx(1.0, abs=1e-5)
    assert stats["is_weight_max"] == pytest.approx(1.0, abs=1e-5) and stats["mismatch_k3"] < 1e-8
    for name, g in plain.items():
        assert torch.allclose(grads[name], g, rtol=1e-5, atol=1e-7), name


def test_truncated_weights_scale_each_tokens_gradient():
    """With the sampler's log-probs shifted by a known amount per sequence, the tis gradient equals
    the uncorrected gradient of a loss whose tokens are weighted min(exp(shift), cap)."""
    exact = _trainer_logprobs()
    shifts = [0.3 * ((i % 5) - 2) for i in range(len(exact))]  # log w per token: -0.6 .. 0.6 (capped at log 2)
    behaviour = [[x - s for x in row] for row, s in zip(exact, shifts)]
    stats, grads, _ = _update("tis", behaviour)
    assert stats["is_capped"] == 0 and stats["is_weight_max"] == pytest.approx(math.exp(0.6), rel=1e-4)
    # REINFORCE loss is linear in the per-token weight: the same update with the advantages of
    # each sequence scaled by its weight gives the same gradient.
    scaled = Rollout(group_size=ref.K, prompt_ids=ref.PROMPTS, rewards=list(ref.REWARDS), reward_values={},
                     completions=[Completion("", list(ids), t) for ids, t in ref.COMPLETIONS])
    policy, _ = ref.tiny_models()
    backend = SGDBackend(policy)
    learner = Learner(backend, AlgorithmConfig(), micro_batch_size=ref.MICRO, temperature=1.0, pad_id=ref.PAD,
                      device=torch.device("cpu"), share_prompts=True)
    from rlvr.training import learner as learner_module

    original = learner_module.rloo_advantages

    def weighted(rewards, k, normalize):
        adv, keep, groups = original(rewards, k, normalize)
        return [a * math.exp(s) for a, s in zip(adv, shifts)], keep, groups

    learner_module.rloo_advantages = weighted
    try:
        learner.update(scaled, lr=ref.SGD_LR)
    finally:
        learner_module.rloo_advantages = original
    for name, g in backend.records[0][1].items():
        assert torch.allclose(grads[name], g, rtol=1e-4, atol=1e-7), name


def test_mode_without_sampler_logprobs_fails_loudly():
    with pytest.raises(ValueError, match="needs the sampler's log-probs"):
        _update("tis", None)
