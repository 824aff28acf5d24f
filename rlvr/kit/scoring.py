"""Scoring helpers shared by rewards: length shaping."""

from __future__ import annotations


def soft_overlong_penalty(length: int, max_len: int, cache_len: int) -> float:
    """DAPO's soft overlong punishment on response tokens.

    0 up to ``max_len - cache_len``; then linear down to -1 at ``max_len``; -1 beyond.
    """
    if cache_len < 0 or cache_len > max_len:
        raise ValueError("need 0 <= cache_len <= max_len")
    threshold = max_len - cache_len
    if length <= threshold:
        return 0.0
    if length <= max_len:
        return (threshold - length) / cache_len
    return -1.0
