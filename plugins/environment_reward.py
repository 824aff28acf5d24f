"""The environment's own verdict as a reward: ``state["reward"]`` of a multi-turn episode's
environment (``rlvr.host.environments``), for recipes whose environment scores its episodes."""

from __future__ import annotations

from rlvr import Score, hookimpl


def environment(prompts, completions, completion_ids, *, env_state=None):
    """The episode's environment's own score (its state["reward"]); unscorable without one."""
    out = []
    for state in env_state if env_state is not None else [None] * len(completions):
        value = state.get("reward") if isinstance(state, dict) else None
        if value is None:
            why = "no environment in the recipe" if state is None else "the environment gave no reward"
            out.append(Score(None, {"why": why}))
        else:
            out.append(Score(float(value)))
    return out


@hookimpl
def rlvr_register_rewards(register):
    register("environment", environment, gold=())
