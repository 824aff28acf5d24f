"""Rewards read from a multi-turn episode's environment state (``rlvr.host.environments``):
``environment``, the environment's own verdict (``state["reward"]``), for recipes whose
environment scores its episodes; ``tool_call``, whether the episode ran a tool cell (``python``)
or made a valid call that returned (``tools``), a shaped reward that gets a model which rarely
calls its tool past the cold start."""

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


def tool_call(prompts, completions, completion_ids, *, env_state=None, expected_tool=None,
              require_output: bool = True):
    """1.0 when the episode made a tool call that ran to its end, else 0.0; a shaping term.

    With the ``python`` environment: a cell with status ``ok`` (and, with ``require_output``,
    that printed something). With the ``tools`` environment: a valid call whose function
    returned (and, with ``require_output``, returned something other than ``None`` or ``""``),
    to the tool the row's ``expected_tool`` column names when the task has that column (a name,
    or a list of names any of which will do). Unscorable without an episode state that lists
    its cells or calls.

    It pays for the form of a tool call, not for its use, so a policy can collect it with
    ``print(1)`` or any valid call. Weigh it well below the task reward (e.g. 0.2 beside 1.0):
    then a correct answer always outranks a call, and the call only breaks the ties of a group
    whose answers are all wrong, which is what a cold start needs."""
    states = env_state if env_state is not None else [None] * len(completions)
    wanted = expected_tool if expected_tool is not None else [None] * len(states)
    out = []
    for state, expected in zip(states, wanted):
        calls = state.get("calls") if isinstance(state, dict) else None
        statuses = state.get("statuses") if isinstance(state, dict) else None
        if isinstance(calls, list):
            out.append(_called(calls, expected, require_output))
            continue
        if not isinstance(statuses, list):
            why = "no environment in the recipe" if state is None else "the environment lists no tool cells or calls"
            out.append(Score(None, {"why": why}))
            continue
        outputs = state.get("outputs") or [""] * len(statuses)
        ran = [s == "ok" and (not require_output or bool(str(o).strip())) for s, o in zip(statuses, outputs)]
        out.append(Score(float(any(ran)), {"calls": len(statuses), "ran": sum(ran)}))
    return out


def _called(calls: list, expected, require_output: bool) -> Score:
    """The ``tools`` environment's records: did a valid call (to ``expected``) return?"""
    names = None if expected is None else {expected} if isinstance(expected, str) else set(expected)
    good = [c for c in calls if c.get("status") == "ok" and (names is None or c.get("name") in names)
            and (not require_output or c.get("result") not in (None, ""))]
    info = {"calls": len(calls), "ran": sum(c.get("status") == "ok" for c in calls)}
    invalid = [f"{c.get('kind')}: {c.get('reason')}" for c in calls if not c.get("valid", True)]
    if invalid:
        info["invalid"] = invalid[:3]
    if names is not None:
        info["expected"] = sorted(names)
    return Score(float(bool(good)), info)


@hookimpl
def rlvr_register_rewards(register):
    register("environment", environment, gold=())
    register("tool_call", tool_call, gold=())
