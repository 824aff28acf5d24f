"""Rewards read from a multi-turn episode's environment state (``rlvr.host.environments``):
``environment``, the environment's own verdict (``state["reward"]``), for recipes whose
environment scores its episodes; ``tool_call``, whether the episode ran a tool cell, a shaped
reward that gets a model which rarely calls its tool past the cold start."""

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


def tool_call(prompts, completions, completion_ids, *, env_state=None, require_output: bool = True):
    """1.0 when the episode ran at least one tool cell to its end (status ``ok``) and, with
    ``require_output``, that cell printed something; else 0.0. Unscorable without an episode
    state that lists its cells' ``statuses`` (the ``python`` environment's).

    A shaped reward: it pays for the form of a tool call, not for its use, so a policy can
    collect it with ``print(1)``. Weigh it well below the task reward (e.g. 0.2 beside 1.0):
    then a correct answer always outranks a call, and the call only breaks the ties of a group
    whose answers are all wrong, which is what a cold start needs."""
    out = []
    for state in env_state if env_state is not None else [None] * len(completions):
        statuses = state.get("statuses") if isinstance(state, dict) else None
        if not isinstance(statuses, list):
            why = "no environment in the recipe" if state is None else "the environment lists no tool cells"
            out.append(Score(None, {"why": why}))
            continue
        outputs = state.get("outputs") or [""] * len(statuses)
        ran = [s == "ok" and (not require_output or bool(str(o).strip())) for s, o in zip(statuses, outputs)]
        out.append(Score(float(any(ran)), {"calls": len(statuses), "ran": sum(ran)}))
    return out


@hookimpl
def rlvr_register_rewards(register):
    register("environment", environment, gold=())
    register("tool_call", tool_call, gold=())
