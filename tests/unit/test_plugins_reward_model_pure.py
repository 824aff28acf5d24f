"""The ``reward_model`` reward on tiny random-init sequence classifiers saved into tmp folders: the
checks that need no process, socket or model (the unit ring; the others:
tests/integration/test_plugins_reward_model.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rlvr_plugins import reward_model as rm
from rlvr_plugins.reward_model import scorer as rs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """This module's tests run on one torch thread; the modules after it get back the count they had."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CPU = {"placement": "inline", "device": "cpu", "dtype": "float32"}


@pytest.fixture(autouse=True)
def fresh_state():
    yield
    rm.close()  # no scorer, worker or running statistics leaks into the next test


def test_label_value_by_hand():
    assert rs.label_value([0.3], None, "logit") == 0.3
    assert rs.label_value([0.0], None, "probability") == 0.5
    assert rs.label_value([-1000.0], None, "probability") == 0.0  # no overflow
    logits = [1.0, 2.0, 4.0]
    p = np.exp(logits) / np.exp(logits).sum()
    assert rs.label_value(logits, 2, "probability") == pytest.approx(p[2])
    assert rs.label_value(logits, 0, "logit") == pytest.approx(math.log(p[0] / (1 - p[0])))
    assert rs.label_value([0.5, 2.5], 1, "logit") == pytest.approx(2.0)
    assert rs.label_value([0.0, 1000.0], 1, "logit") == 1000.0  # no underflow
    assert rs.label_value([0.0, 1000.0], 0, "probability") == 0.0


def test_running_normalisation_by_hand():
    stats = rm.RunningStats()
    assert rm.normalize_scores(stats, [1.0, 2.0, 3.0], warmup=5) == [-1.0, 0.0, 1.0]  # warming up: centred only
    z = rm.normalize_scores(stats, [4.0, 10.0], warmup=5)  # 5 seen: mean 4, std sqrt(50 / 5)
    assert z == pytest.approx([0.0, 6 / math.sqrt(10)])
    assert rm.normalize_scores(rm.RunningStats(), [5.0, 5.0, 5.0], warmup=1) == [0.0, 0.0, 0.0]
    rng = np.random.default_rng(0)
    xs = 1e6 + rng.normal(size=1000)  # Welford keeps the small spread under a large offset
    big = rm.RunningStats()
    for chunk in np.split(xs, 10):
        big.update(chunk.tolist())
    assert big.count == 1000
    assert big.mean == pytest.approx(xs.mean(), rel=1e-12) and big.std == pytest.approx(xs.std(), rel=1e-9)


def test_an_empty_batch_loads_nothing(monkeypatch):
    # (a process placement's worker would be a process: the unit ring's guard fails the test on its start)
    monkeypatch.setattr(rs, "_load", lambda *a, **k: pytest.fail("weights were loaded"))
    assert rm.reward_model([], [], model="org/a-hub-id-never-fetched", **CPU) == []
    assert rm.reward_model([], [], model="org/a-hub-id-never-fetched", placement="process") == []
