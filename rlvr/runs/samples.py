"""What the model wrote during training: ``samples.jsonl`` beside ``metrics.jsonl``, and the
terminal view of it (``rlvr samples RUN``).

Every ``trainer.samples_every`` steps, the first ``trainer.samples_groups`` groups of the step's
rollout (rank 0's) go to ``samples.jsonl``, one record per completion (training makes them:
``rlvr.training.report.sample_records``; this module writes, reads and shows plain records)::

    {"step": 4, "group": 0, "sample": 3, "prompt": "...", "turns": [{"role": "policy",
     "text": "...", "trained": true}, {"role": "environment", "text": "...", "trained": false}],
     "rewards": {"math": 1.0, "tool_call": 1.0}, "reasons": {"math": {...}}, "total": 1.2,
     "advantage": 0.54, "truncated": false}

An episode's completion is cut into turns where its token mask changes: the policy's own
tokens (trained on) and the environment's replies (not trained on). A plain completion is one
policy turn. Steps are numbered as in ``metrics.jsonl`` and on the console (from 1).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from rlvr.kit import escape_controls, open_append
from rlvr.runs.metrics import keep_steps, step_rows

Decode = Callable[[Sequence[int]], str]


def turns(text: str, token_ids: Sequence[int], mask: Sequence[int] | None, decode: Decode) -> list[dict]:
    """A completion's turns: runs of equal mask values decoded separately (1: the policy's,
    0: the environment's); without a mask, the whole text is one policy turn."""
    if mask is None:
        return [{"role": "policy", "text": text, "trained": True}]
    out, start = [], 0
    for end in range(1, len(token_ids) + 1):
        if end == len(token_ids) or mask[end] != mask[start]:
            own = bool(mask[start])
            out.append({"role": "policy" if own else "environment", "text": decode(token_ids[start:end]),
                        "trained": own})
            start = end
    return out


class SamplesLog:
    """``samples.jsonl``: the records of every ``every``-th step and of the ``last`` (none when
    ``every`` is 0), written by rank 0; a resumed run first drops what it will write again. The
    last step's are always there, so a run shorter than ``every`` steps still shows what it wrote."""

    def __init__(self, path: Path, *, every: int, groups: int, enabled: bool, last: int | None = None):
        self.path, self.every, self.groups, self.enabled = Path(path), every, groups, enabled and every > 0
        self.last = last

    def due(self, step: int) -> bool:
        """``step`` numbered from 1."""
        return self.enabled and (step % self.every == 0 or step == self.last)

    def write(self, records: Iterable[Mapping]) -> None:
        if not self.enabled:
            return
        with open(open_append(self.path, "samples"), "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")

    def truncate_to(self, done: int) -> None:
        """Keep the records of steps 1 to ``done``."""
        if self.enabled and self.path.exists():
            keep_steps(self.path, done)


def read_samples(path: Path) -> list[dict]:
    """The records of a run's ``samples.jsonl`` (lines cut short by a kill are left out)."""
    return [record for _, record in step_rows(path)]


def format_records(records: Sequence[Mapping], width: int | None = None) -> str:
    """``records`` as the terminal shows them: a header per sample (step, group, rewards,
    advantage), then each turn, indented, the environment's marked as not trained on. What the
    model (or anyone who wrote the file) put there is shown, never acted on: control sequences
    and invisible format characters are written out (``escape_controls``)."""
    width = width or max(60, min(120, shutil.get_terminal_size((100, 20)).columns))
    lines: list[str] = []
    last_prompt = None
    for r in records:
        if (r["step"], r["group"]) != last_prompt:
            last_prompt = (r["step"], r["group"])
            lines += ["", f"=== step {r['step']}, group {r['group']} " + "=" * 20, "prompt:"]
            lines += _indent(escape_controls(str(r["prompt"])), width)
        scores = "  ".join(f"{name} {_fmt(v)}" for name, v in r["rewards"].items())
        advantage = "" if r.get("advantage") is None else f"  advantage {r['advantage']:+.3f}"
        cut = "  (truncated)" if r.get("truncated") else ""
        lines += ["", f"--- sample {r['sample']}: total {_fmt(r['total'])}  ({scores}){advantage}{cut}"]
        for turn in r["turns"]:
            lines.append(f"  [{turn['role']}{'' if turn['trained'] else ', not trained on'}]")
            lines += _indent(escape_controls(str(turn["text"])), width, "    ")
        for name, info in r.get("reasons", {}).items():
            why = info.get("why") if isinstance(info, dict) else info
            if why:
                lines.append(f"  {name}: {why}")
    return escape_controls("\n".join(lines).lstrip("\n"))  # names, reasons: from the file too


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _indent(text: str, width: int, pad: str = "  ") -> list[str]:
    out = []
    for line in text.splitlines() or [""]:
        out += textwrap.wrap(line, width - len(pad), initial_indent=pad, subsequent_indent=pad,
                             replace_whitespace=False, drop_whitespace=False) or [pad.rstrip()]
    return out
