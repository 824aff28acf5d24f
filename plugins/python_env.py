"""The ``python`` environment: a Python tool for tool-integrated reasoning (ToRA/ReTool style).

The policy writes a fenced ```` ```python ```` block; its turn ends at the block's closing
fence (the stop string ``"\\n```\\n"``), the block runs in the code sandbox, and what it printed
comes back inline, right after the fence, as an output block::

    ```python
    print(sum(range(10)))
    ```
    ```output
    45
    ```

and the policy goes on. A turn that does not end at a fence is the policy's answer: the
episode ends there.

Decisions, and why:

- Stop string ``"\\n```\\n"``: stop strings are plain substrings, and ``"\\n```"`` alone would
  also end the turn at the *opening* fence ``"\\n```python"``; a fence on a line of its own
  never opens a python block. It does open a block without a language, so the stop can fire
  there too: a turn that ends at a fence which closes no python block (the opening of a bare
  block, the end of a ```` ```bash ```` block) gets an empty reply and the policy goes on;
  the environment keeps the text since its last reply, so a block may span such turns. Only
  blocks tagged ``python``/``py``/``python3``/``py3`` run.
- State across cells: each call runs the episode's earlier cells first, their output
  discarded, in the same process (the sandbox's ``exec`` mode), then the new cell. Nothing
  lives between calls (no kernel per episode to hold, leak or lose with a worker; any worker
  of the shared pool serves any call), at the cost of re-running earlier cells: the per-call
  ``timeout_s`` covers the replay, and ``max_calls`` bounds it. Cells that timed out, crashed,
  flooded their output or ended the process are not replayed (they would do it again); one
  that raised is, as a kernel keeps what a failed cell did before it raised. ``random`` is
  seeded once per episode, so replays draw what the first run drew.
- Output: stdout and stderr interleaved (one pipe), the first ``max_output_chars``
  characters and a marker when there was more; an exception adds its last traceback line,
  a timeout or crash says so. Control characters (NUL, terminal escape sequences, lone
  carriage returns, DEL, C1) and invisible format characters (bidi overrides, zero-width
  characters, tag characters, line separators) come back escaped as visible text (``\\x1b``,
  ``\\u202e``; ``rlvr.kit.escape_controls``), and text that spells a special token
  (``<|im_start|>system``) comes back as those characters, never as the token (the episode
  runner tokenizes replies as text), so a cell cannot smuggle chat structure, hidden text or
  terminal control into the policy's context or the logs.
  Replies are inline (``Reply.role`` None), as ToRA trains them.
- Metrics per call (``Reply.metrics``): ``tool_calls`` 1; ``tool_errors`` 1 when the cell did
  not run to its end without an exception (timeouts, crashes and refusals included);
  ``tool_timeouts`` 1 for a timeout. Calls past ``max_calls`` or past the episode's sandbox
  time (``episode_timeout_s``) are refused with a line that says so, and count as errors.
  Sandbox time is each call's wall time as the host measured it, whatever the call did: a
  cell that crashed, or took its worker down, is charged the seconds it held the worker.
- ``state`` (the rewards' ``env_state``): every cell sent (``cells``), its formatted output
  (``outputs``), its status (``statuses``: the sandbox's ``ok``, ``error``, ``timeout``,
  ``crashed``, ``exited``, ``output_limit``, or ``refused``), the metric totals and
  ``sandbox_seconds``.

One sandbox pool per process and isolation level is shared by all episodes
(``rlvr_plugins.sandbox.get_sandbox``); see that module for what it protects against.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le

from rlvr import hookimpl
from rlvr import Reply

from .sandbox import DEFAULT_MEMORY_MB, Isolation, Job, Result, get_sandbox

__all__ = ["PythonEnv", "make_python_env", "fenced_blocks", "rlvr_register_environments"]

STOP = ("\n```\n",)
PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})
MAX_OUTPUT_BYTES = 1 << 20  # a cell printing more is stopped there (it only ever shows max_output_chars)
REPLAYED = frozenset({"ok", "error"})  # statuses of cells that ran to their end or to an exception



@hookimpl
def rlvr_register_environments(register: Any) -> None:
    register("python", make_python_env,
             description="Python tool: ```python blocks run in the code sandbox, their output comes back inline")


def make_python_env(
    row: dict,
    *,
    timeout_s: Annotated[float, Gt(0), Le(600)] = 5.0,
    episode_timeout_s: Annotated[float, Gt(0), Le(86400)] = 30.0,
    max_output_chars: Annotated[int, Ge(1), Le(1 << 20)] = 1000,
    memory_mb: Annotated[int, Ge(64)] = DEFAULT_MEMORY_MB,
    isolation: Isolation = "bwrap",
    max_calls: Annotated[int, Ge(1), Le(1000)] = 16,
) -> PythonEnv:
    """A Python tool: each ```python block the policy closes runs in the sandbox, after the
    episode's earlier blocks; its output comes back inline.

    ``timeout_s``: wall seconds per call (earlier cells' replay included);
    ``episode_timeout_s``: sandbox seconds per episode, after which calls are refused;
    ``max_output_chars``: characters of output shown per call; ``memory_mb``: address space
    per call; ``max_calls``: calls per episode, after which calls are refused."""
    return PythonEnv(timeout_s=float(timeout_s), episode_timeout_s=float(episode_timeout_s),
                     max_output_chars=int(max_output_chars), memory_mb=int(memory_mb), isolation=isolation,
                     max_calls=int(max_calls))


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag (lower case, "" for none), its code, whether its
    closing fence was seen, and the offset just past that fence (the text's end if open)."""

    lang: str
    code: str
    closed: bool
    end: int


_OPEN = re.compile(r"^ {0,3}(`{3,})[ \t]*([^`\s]*)[^`]*$")
_CLOSE = re.compile(r"^ {0,3}(`{3,})[ \t]*$")


def fenced_blocks(text: str) -> list[Block]:
    """The backtick-fenced blocks of ``text``, in order (CommonMark's rule: a fence is a line
    of its own, closed by a bare fence at least as long as the opening one)."""
    blocks: list[Block] = []
    current: tuple[str, int, list[str]] | None = None  # lang, fence length, code lines
    pos = 0
    lines = text.split("\n")
    for index, line in enumerate(lines):
        pos += len(line) + (index < len(lines) - 1)
        bare = line.rstrip("\r")
        if current is None:
            match = _OPEN.match(bare)
            if match:
                current = (match.group(2).lower(), len(match.group(1)), [])
            continue
        match = _CLOSE.match(bare)
        if match and len(match.group(1)) >= current[1]:
            blocks.append(Block(current[0], "".join(current[2]), True, pos))
            current = None
        else:
            current[2].append(line + "\n")
    if current is not None:
        blocks.append(Block(current[0], "".join(current[2]), False, len(text)))
    return blocks


class PythonEnv:
    """One episode of the ``python`` tool (see the module docstring)."""

    stop = STOP

    def __init__(self, *, timeout_s: float = 5.0, episode_timeout_s: float = 30.0, max_output_chars: int = 1000,
                 memory_mb: int = DEFAULT_MEMORY_MB, isolation: str = "bwrap", max_calls: int = 16) -> None:
        self.timeout_s, self.episode_timeout_s = timeout_s, episode_timeout_s
        self.max_output_chars, self.memory_mb = max_output_chars, memory_mb
        self.isolation, self.max_calls = isolation, max_calls
        self.seed = secrets.randbits(31)
        self._pending = ""  # the policy's text since the last reply that was not empty
        self._replay: list[str] = []  # earlier cells, run before each new one
        self.cells: list[str] = []
        self.outputs: list[str] = []
        self.statuses: list[str] = []
        self.totals = {"tool_calls": 0, "tool_errors": 0, "tool_timeouts": 0}
        self.sandbox_seconds = 0.0

    @property
    def state(self) -> dict:
        return {"cells": list(self.cells), "outputs": list(self.outputs), "statuses": list(self.statuses),
                **self.totals, "sandbox_seconds": round(self.sandbox_seconds, 4)}

    def step(self, turn: str) -> Reply:
        text = self._pending + turn
        blocks = fenced_blocks(text)
        last = blocks[-1] if blocks else None
        if last is not None and last.closed and last.lang in PYTHON_TAGS and not text[last.end:].strip():
            self._pending = ""
            status, output = self._call(last.code)
            self.cells.append(last.code)
            self.statuses.append(status)
            self.outputs.append(output)
            metrics = {"tool_calls": 1, "tool_errors": int(status != "ok"), "tool_timeouts": int(status == "timeout")}
            for key, value in metrics.items():
                self.totals[key] += value
            lead = "" if text.endswith("\n") else "\n"
            return Reply(text=f"{lead}```output\n{output}\n```\n", metrics=metrics)
        if text.rstrip().endswith("```"):  # the stop fired at a fence that closes no python block
            self._pending = text
            return Reply()
        return Reply(done=True)

    def _call(self, code: str) -> tuple[str, str]:
        """Run ``code`` after the earlier cells: (status, the output as the policy sees it)."""
        if len(self.cells) >= self.max_calls:
            return "refused", f"Tool call limit reached ({self.max_calls} per episode): the code was not run."
        left = self.episode_timeout_s - self.sandbox_seconds
        if left <= 0:
            return "refused", "Time limit for this episode reached: the code was not run."
        timeout = min(self.timeout_s, left)
        keep = 4 * self.max_output_chars  # bytes: at least that many characters of UTF-8
        job = Job(program=code, mode="exec", setup=list(self._replay), timeout=timeout, memory_mb=self.memory_mb,
                  max_output=max(MAX_OUTPUT_BYTES, keep), keep_output=keep, seed=self.seed)
        result = get_sandbox(self.isolation).run(job)
        self.sandbox_seconds += result.elapsed
        if result.status in REPLAYED:
            self._replay.append(code)
        return result.status, self._format(result, job)

    def _format(self, result: Result, job: Job) -> str:
        text = result.output
        if len(text) > self.max_output_chars or result.output_bytes > job.keep_output:
            text = text[: self.max_output_chars]
            sep = "" if text.endswith("\n") else "\n"
            text += f"{sep}[... output truncated: the first {self.max_output_chars} characters shown]"
        text = text.rstrip("\n")
        note = {
            "ok": "",
            "error": result.message,
            "timeout": f"Timeout: the code did not finish within {job.timeout:g} seconds and was stopped.",
            "crashed": f"Crashed: the code was killed ({result.message})"
                       + ("; it may have used too much memory." if "SIGKILL" in result.message else "."),
            "exited": f"Exited: {result.message}.",
            "output_limit": f"Output limit: the code printed over {job.max_output} bytes and was stopped.",
        }.get(result.status, f"Sandbox failure ({result.status}): {result.message}")
        return f"{text}\n{note}" if text and note else text or note
