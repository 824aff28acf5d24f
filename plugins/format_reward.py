"""Format reward: does a completion have the expected shape?

Registered as reward ``format``. Needs no dataset column. Checks, each switched
by an option:

- ``think`` (off by default): the completion starts with a non-empty
  ``<think>...</think>`` block (exactly one of each tag). When a string prompt
  already ends with ``<think>`` (a chat template that opens the block for the
  model), the completion only needs the closing tag.
- ``boxed`` (default "one"): "one" = exactly one ``\\boxed{...}`` (closed) in the answer part,
  "any" = at least one, "none" = not checked.
- ``answer_tag``: exactly one non-empty ``<answer>...</answer>`` in the answer part.
- ``trailing_text`` (on by default): nothing but whitespace, closing math delimiters (``$``,
  ``\\]``, ``\\)``), ``*``, a full stop or ``</answer>`` after the final answer (the
  last ``</answer>`` when ``answer_tag`` is on, else the last ``\\boxed{...}``).

The answer part is the text after the last ``</think>`` (or all of it): drafts
inside the reasoning do not count. ``partial=True`` gives the fraction of enabled
checks that pass, else 1.0 only when all pass. ``info["checks"]`` maps each
enabled check to true/false and ``info["why"]`` explains the failures.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Sequence, get_args

from rlvr import RlvrError, Score, hookimpl
from rlvr.kit import boxes, completion_text

__all__ = ["format_reward", "check_format", "rlvr_register_rewards"]

BoxedMode = Literal["one", "any", "none"]
BOXED_MODES = get_args(BoxedMode)

_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# What may follow the final answer: whitespace, closing math delimiters, bold markers, a full
# stop, and the closing answer tag (a box inside <answer>..</answer> ends the text too).
_TRAILING_OK = re.compile(r"(?:\s|\$|\\\]|\\\)|\*|\.|</answer>)*", re.IGNORECASE)


def _think_check(text: str, prefilled: bool) -> tuple[bool, str]:
    body = text.lstrip()
    if prefilled and not body.startswith("<think>"):
        body = "<think>" + body
    if not body.startswith("<think>"):
        return False, "does not start with <think>"
    opens, closes = body.count("<think>"), body.count("</think>")
    if closes == 0:
        return False, "no </think>"
    if opens != 1 or closes != 1:
        return False, f"expected one <think> and one </think>, found {opens} and {closes}"
    thought = body[len("<think>") : body.index("</think>")]
    if not thought.strip():
        return False, "empty <think></think>"
    return True, "ok"


def check_format(
    completion: str,
    *,
    think: bool = True,
    boxed: str = "one",
    answer_tag: bool = False,
    trailing_text: bool = True,
    prompt: str | None = None,
) -> dict[str, tuple[bool, str]]:
    """Run the enabled checks on one completion: {check: (passed, reason)}."""
    results: dict[str, tuple[bool, str]] = {}
    cut = completion.rfind("</think>")
    answer_part = completion if cut < 0 else completion[cut + len("</think>") :]

    if think:
        prefilled = isinstance(prompt, str) and prompt.rstrip().endswith("<think>")
        results["think"] = _think_check(completion, prefilled)

    spans = boxes(answer_part)
    if boxed != "none":
        closed = [b for b in spans if b[1] is not None]
        if len(closed) != len(spans):
            results["boxed"] = (False, "unclosed \\boxed{")
        elif boxed == "one":
            results["boxed"] = (len(spans) == 1, "ok" if len(spans) == 1 else f"expected one \\boxed{{}}, found {len(spans)}")
        else:
            results["boxed"] = (bool(spans), "ok" if spans else "no \\boxed{}")

    answer_end = None
    if answer_tag:
        opens = [m.start() for m in _ANSWER_OPEN.finditer(answer_part)]
        closes = [m for m in _ANSWER_CLOSE.finditer(answer_part)]
        if len(opens) != 1 or len(closes) != 1:
            results["answer_tag"] = (False, f"expected one <answer> and one </answer>, found {len(opens)} and {len(closes)}")
        elif closes[0].start() < opens[0]:
            results["answer_tag"] = (False, "</answer> before <answer>")
        elif not answer_part[opens[0] + len("<answer>") : closes[0].start()].strip():
            results["answer_tag"] = (False, "empty <answer></answer>")
        else:
            results["answer_tag"] = (True, "ok")
        if closes:
            answer_end = closes[-1].end()
    elif spans and spans[-1][1] is not None:
        answer_end = spans[-1][1]

    if trailing_text:
        if answer_end is None:
            what = "</answer>" if answer_tag else "closed \\boxed{}"
            results["trailing_text"] = (False, f"no final answer ({what}) to end the completion")
        else:
            rest = answer_part[answer_end:]
            ok = _TRAILING_OK.fullmatch(rest) is not None
            snippet = rest.strip()[:40]
            results["trailing_text"] = (ok, "ok" if ok else f"text after the final answer: {snippet!r}")
    return results


def format_reward(
    prompts: Sequence[Any] | None,
    completions: Sequence[Any],
    completion_ids: Sequence[Any] | None,
    *,
    think: bool = False,
    boxed: BoxedMode = "one",
    answer_tag: bool = False,
    trailing_text: bool = True,
    partial: bool = True,
) -> list[Score]:
    """Score the shape of each completion (see the module docstring for the checks).

    Defaults: exactly one ``\\boxed{}`` and nothing after it (``think=True`` adds a
    leading ``<think>..</think>``); partial credit = fraction of checks passed.
    """
    if boxed not in BOXED_MODES:
        raise RlvrError(f"format reward: boxed must be one of {', '.join(BOXED_MODES)}, got {boxed!r}")
    enabled = [bool(think), boxed != "none", bool(answer_tag), bool(trailing_text)]
    if not any(enabled):
        raise RlvrError("format reward: every check is disabled (think, boxed, answer_tag, trailing_text)")
    prompt_list = list(prompts) if prompts is not None else [None] * len(completions)
    if len(prompt_list) != len(completions):
        prompt_list = [None] * len(completions)
    scores = []
    for prompt, completion in zip(prompt_list, completions):
        results = check_format(
            completion_text(completion),
            think=bool(think),
            boxed=boxed,
            answer_tag=bool(answer_tag),
            trailing_text=bool(trailing_text),
            prompt=prompt if isinstance(prompt, str) else None,
        )
        passed = sum(ok for ok, _ in results.values())
        value = passed / len(results) if partial else float(passed == len(results))
        failures = [f"{name}: {why}" for name, (ok, why) in results.items() if not ok]
        info: dict[str, Any] = {
            "checks": {name: ok for name, (ok, _) in results.items()},
            "why": "; ".join(failures) or "all checks passed",
        }
        scores.append(Score(value, info))
    return scores


@hookimpl
def rlvr_register_rewards(register):
    register(
        "format",
        format_reward,
        description="shape of the completion: <think>..</think>, one \\boxed{}, <answer> tags, "
        "no text after the answer; partial credit per check",
    )
