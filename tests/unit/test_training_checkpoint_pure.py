"""Checkpoints are data, never code: the checks that need no process, socket or model (the unit
ring; the others: tests/e2e/test_training_checkpoint.py)."""

import json
import random

import pytest
import torch

from rlvr.training.checkpoint import RankState, decode_rank_state, encode_rank_state


def test_rank_state_round_trips_through_json():
    random.seed(3)
    random.gauss(0, 1)  # a pending gauss_next: a float in the state
    state = RankState(4, 17, random.getstate(), torch.get_rng_state().tolist())
    back = decode_rank_state(json.loads(json.dumps(encode_rank_state(state))))
    assert back == state
    expected = random.random()
    random.seed(0)
    random.setstate(back.python_rng)
    assert random.random() == expected


@pytest.mark.parametrize("change", [
    lambda d: d.update(format=1),
    lambda d: d.update(step=-1),
    lambda d: d.update(data_position="3"),
    lambda d: d.update(torch_rng=[256]),
    lambda d: d.update(python_rng=[3, [1, 2], None]),
    lambda d: d.update(python_rng="state"),
])
def test_a_bad_rank_state_is_refused(change):
    data = encode_rank_state(RankState(1, 0, random.getstate(), torch.get_rng_state().tolist()))
    change(data)
    with pytest.raises(ValueError):
        decode_rank_state(data)


def test_a_rank_state_that_is_not_a_dict_is_refused():
    with pytest.raises(ValueError):
        decode_rank_state([1, 2, 3])
