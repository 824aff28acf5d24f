"""Multi-turn environments: what a plugin implements, and how the host runs episodes with it.

An episode starts from one prompt row. The policy takes a turn (generation until one of the
environment's ``stop`` strings, an end-of-sequence token or the token budget), the environment
replies (``Environment.step`` returns a ``rlvr.Reply``), the reply's tokens are appended, and so on
until the environment says ``done``, ``max_turns`` policy turns were taken, or the budget of
tokens after the prompt is spent. The episode becomes one ``Completion`` whose ``token_ids``
are everything after the prompt, exactly as sampled and appended (the policy's tokens are never
decoded and encoded again), and whose ``mask`` marks the policy's own tokens: the only ones the
loss, the KL term, the entropy and the length penalties count.

A plugin registers an environment with ``register(name, make, description=None)`` from the
``rlvr_register_environments`` hook; ``make(row, **options)`` builds one environment per
episode from the prompt row (a dict of the task's columns) and the recipe's
``environment.options`` (``make``'s keyword-only parameters with defaults, checked like a
reward's options).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from rlvr import Reply  # the hook API's: a plugin imports it from rlvr


class Environment(Protocol):
    """One episode's environment, built by the registered ``make(row, **options)``.

    ``stop``: strings that end the policy's turn (the string stays in the turn); the turn also
    ends at the model's end-of-sequence token. ``step(turn)`` gets the text of the policy's
    latest turn (decoded from its tokens) and returns the ``Reply``. ``state`` (optional): a
    dict the rewards receive as the ``env_state`` column once the episode has ended (a reward
    opts in with a keyword-only ``env_state=None`` parameter); ``state["reward"]`` is what the
    built-in ``environment`` reward returns. ``close()`` (optional) releases what the
    environment holds; the host calls it once per episode, also when the episode failed.
    """

    stop: Sequence[str]

    def step(self, turn: str) -> Reply: ...


def env_state(env: Any) -> dict:
    """The environment's ``state`` for the rewards (a copy; ``{}`` when it keeps none)."""
    state = getattr(env, "state", None)
    return dict(state) if isinstance(state, Mapping) else {}


def close_env(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        close()
