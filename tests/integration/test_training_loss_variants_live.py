"""The policy-loss variants (``algorithm.policy_loss``: the checks that start worker pools or
loopback services, or build a tiny model in-process (the integration ring; the others:
tests/unit/test_training_loss_variants.py)."""

from __future__ import annotations

import pytest
import torch
from rlvr.recipe.spec import AlgorithmConfig


# ---------------------------------------------------------------------------------------- the learner
VARIANTS = {
    "gspo": {"policy_loss": "gspo", "gspo": {"eps_low": 0.2, "eps_high": 1.0}},
    "cispo": {"policy_loss": "cispo", "cispo": {"eps_high": 1e-3}},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_learner_first_epoch_is_reinforce_then_the_variant_departs(variant):
    """The first epoch starts at ratio 1, where all three losses have REINFORCE's gradient; the
    second moves the ratios (SGD with lr 0.5) and the variant's bounds bite: another gradient than
    PPO without clipping."""
    from helpers.learner import run_update

    plain, plain_backend = run_update(AlgorithmConfig(ppo_epochs=2), skip=True)
    ours, ours_backend = run_update(AlgorithmConfig(ppo_epochs=2, **VARIANTS[variant]), skip=True)
    (_, g_plain), (_, g_ours) = plain_backend.records[0], ours_backend.records[0]
    for name, grad in g_plain.items():
        torch.testing.assert_close(g_ours[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    (_, g_plain), (_, g_ours) = plain_backend.records[1], ours_backend.records[1]
    diff = max(float((g_ours[n] - g).abs().max()) for n, g in g_plain.items())
    assert diff > 1e-4
    assert ours["skipped_seqs"] == plain["skipped_seqs"] >= 5
