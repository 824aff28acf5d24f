"""``sampling.hf_static_cache``: the checks that run `rlvr` or other processes end to end (the e2e
ring; the others: tests/integration/test_sampling_hf_static.py)."""

from __future__ import annotations

import pytest

from rlvr.recipe.spec import Recipe


def test_static_is_off_under_zero3_across_ranks_and_refused_for_vllm():
    from rlvr.sampling.samplers import HFSampler

    assert not HFSampler(lambda: None, None, synced=True, static_cache=True).static_cache
    base = {"name": "t", "task": "arithmetic", "rewards": {"math": 1.0}}
    assert Recipe.model_validate({**base, "sampling": {"backend": "hf", "hf_static_cache": True}}).sampling.hf_static_cache
    with pytest.raises(ValueError, match="sampling.hf_static_cache is the hf backend's, not vllm's"):
        Recipe.model_validate({**base, "sampling": {"backend": "vllm", "hf_static_cache": True}})
