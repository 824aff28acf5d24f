"""The policy update (rlvr.training.learner) on fixed batches with a tiny model and a plain-torch
optimizer side: the checks that need no process, socket or model (the unit ring; the others:
tests/e2e/test_training_learner_runs.py, tests/integration/test_training_learner.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr.recipe.spec import LengthPenaltyConfig
from rlvr.training.learner import sequence_weights, shape_rewards

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))


def test_shaping_and_weights():
    penalty = LengthPenaltyConfig(weight=0.5, correct_threshold=1.0)
    # group 1: correct lengths 2 and 6 -> -0.5 on the longer; group 2 has no correct answer
    assert shape_rewards([1.0, 1.0, 0.0, None], [2, 6, 1, 3], 4, penalty) == [1.0, 0.5, 0.0, None]
    assert shape_rewards([1.0, None], [3, 4], 2, None) == [1.0, None]
    assert sequence_weights([True, True, False], [False, True, False], True) == [1.0, 0.0, 0.0]
    assert sequence_weights([True, True, False], [False, True, False], False) == [1.0, 1.0, 0.0]
