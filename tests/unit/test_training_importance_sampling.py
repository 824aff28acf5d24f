"""Importance-sampling correction against the sampler's log-probs (rlvr.training.losses.importance_weights,
the learner's use of it, the mode a run picks)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from rlvr.training.learner import is_correction_mode
from rlvr.training.losses import importance_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))

MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def test_truncated_weights_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.5, 9.0], [-1.0, -1.0, 7.0, 7.0]])
    behaviour = torch.tensor([[-1.0, -3.0, -0.4, 0.0], [-0.2, -1.0, 0.0, 0.0]])
    w, s = importance_weights(trainer, behaviour, MASK, "tis", cap=2.0)
    expected = torch.tensor([[1.0, 2.0, math.exp(-0.1), 0.0], [math.exp(-0.8), 1.0, 0.0, 0.0]])
    assert torch.allclose(w, expected, atol=1e-6)  # e^1 capped at 2; padding weighs 0
    raw = [1.0, math.e, math.exp(-0.1), math.exp(-0.8), 1.0]
    assert s["is_weight"] == pytest.approx(sum(raw)) and s["is_tokens"] == 5 and s["is_capped"] == 1
    assert s["is_weight_max"] == pytest.approx(math.e) and s["is_masked"] == 0 and s["is_seqs"] == 2
    assert s["mismatch_k3"] == pytest.approx(sum(x - 1 - math.log(x) for x in raw), rel=1e-6)


def test_masked_sequences_by_geometric_mean():
    trainer = torch.zeros(2, 4)
    # row 0: log w = +0.5 on 3 tokens (mean 0.5 < log 2: kept); row 1: log w = +1 and +0.6 (mean 0.8 > log 2)
    behaviour = torch.tensor([[-0.5, -0.5, -0.5, 0.0], [-1.0, -0.6, 0.0, 0.0]])
    w, s = importance_weights(trainer, behaviour, MASK, "mis", cap=2.0)
    assert torch.equal(w, torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    assert s["is_masked"] == 1 and s["is_seqs"] == 2
    _, low = importance_weights(behaviour, trainer, MASK, "mis", cap=2.0)  # ratios below 1/cap: masked too
    assert low["is_masked"] == 1


def test_none_measures_without_weighting_and_equal_policies_weigh_one():
    lp = torch.randn(2, 4)
    w, s = importance_weights(lp, lp.clone(), MASK, "none", cap=2.0)
    assert torch.equal(w, MASK) and s["is_weight"] == s["is_tokens"] and s["mismatch_k3"] == 0.0
    for mode in ("tis", "mis"):
        assert torch.equal(importance_weights(lp, lp.clone(), MASK, mode, cap=2.0)[0], MASK)
    with pytest.raises(ValueError, match="unknown importance-sampling correction"):
        importance_weights(lp, lp, MASK, "bogus", cap=2.0)


def test_auto_mode():
    assert is_correction_mode("auto", sampler_dtype="bfloat16", trainer_dtype="float32") == "tis"
    assert is_correction_mode("auto", sampler_dtype="float32", trainer_dtype="float32") == "none"
    assert is_correction_mode("auto", sampler_dtype="float32", trainer_dtype="float32", max_staleness=1) == "tis"
    assert is_correction_mode("mis", sampler_dtype="bfloat16", trainer_dtype="float32") == "mis"
