"""The sampler's front door (rlvr.sampling.front) against a stand-in for vLLM on a Unix socket: the
checks that need no process, socket or model (the unit ring; the others:
tests/integration/test_sampling_front.py)."""

import pytest

from rlvr.sampling.front import connection_caps


@pytest.mark.parametrize("limit, waiting, admitted", [(20000, 1024, 9456), (1024, 240, 360), (100, 9, 13), (10, 8, 8)])
def test_connection_caps_stay_below_the_file_limit(limit, waiting, admitted):
    assert connection_caps(limit) == (waiting, admitted)
    if limit > 64:
        assert waiting + 2 * admitted < limit
