"""What the sandbox is asked and what it answers, on the host: ``Job`` (one program,
its tests or cases, its limits; sent to a worker as plain data) and ``Result`` (its
verdict, with the program's text escaped by ``escape_controls``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.kit import escape_controls  # the sandbox's results are escaped as everything else rlvr shows

from .limits import DEFAULT_KEEP_OUTPUT, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, GRACE

JOB_MODES = ("call", "io", "exec")


@dataclass
class Job:
    """One program and its tests.

    ``mode="call"``: ``program`` is loaded in the candidate process; ``tests`` are
    code units run by the tester (each assert counted; a pass needs every non-constant
    assert statement to run at least once, and tests without one are ``invalid_test``),
    after ``trusted`` code (a prompt's helpers, MBPP setup code) has run in the tester. ``entry_point``,
    if given, is always bound to the candidate's function of that name.
    ``mode="io"``: ``program`` runs as ``__main__`` once per ``(stdin, expected)``
    case; the stripped stdout must equal the stripped expected text and the exit
    code be 0. ``timeout`` (wall seconds) and ``memory_mb`` (address space) apply
    to each program run; more than ``max_output`` bytes of stdout+stderr fail it.

    ``mode="exec"`` (a tool call: nothing is graded): the ``setup`` cells, then
    ``program``, run as ``__main__`` in one process and one namespace, the setup
    cells' output discarded and an exception ending its own cell only (a notebook
    kernel's session, replayed: nothing persists between jobs). ``Result.output`` is
    what the program wrote to stdout and stderr (one pipe, lines in order), its first
    ``keep_output`` bytes; ``Result.output_bytes`` counts all of it. Status ``ok``,
    ``error`` (it raised: ``message`` is the exception's last traceback line),
    ``exited`` (it ended the process itself, e.g. ``os._exit``), ``timeout``,
    ``crashed`` (killed by a signal, e.g. out of memory) or ``output_limit`` (more
    than ``max_output`` bytes: stopped there); the output comes back in every case.
    ``seed`` (if set) seeds ``random`` before the setup cells, so that replays draw
    what the first run drew.
    """

    program: str
    mode: str = "call"
    tests: list[str] = field(default_factory=list)
    trusted: str = ""
    entry_point: str | None = None
    cases: list[tuple[str, str]] = field(default_factory=list)
    partial: bool = False
    timeout: float = DEFAULT_TIMEOUT
    memory_mb: int = DEFAULT_MEMORY_MB
    max_output: int = DEFAULT_MAX_OUTPUT
    setup: list[str] = field(default_factory=list)
    keep_output: int = DEFAULT_KEEP_OUTPUT
    seed: int | None = None

    def to_wire(self) -> dict:
        if self.mode not in JOB_MODES:
            raise ValueError(f"unknown job mode {self.mode!r}")
        return {"mode": self.mode, "program": str(self.program), "tests": [str(t) for t in self.tests],
                "trusted": str(self.trusted or ""), "entry_point": self.entry_point,
                "cases": [[str(i), str(o)] for i, o in self.cases], "partial": bool(self.partial),
                "timeout": float(self.timeout), "memory_mb": int(self.memory_mb),
                "max_output": int(self.max_output), "setup": [str(c) for c in self.setup],
                "keep_output": max(0, min(int(self.keep_output), int(self.max_output))),
                "seed": None if self.seed is None else int(self.seed)}

    def budget(self) -> float:
        runs = len(self.cases) if self.mode == "io" else 1
        return max(runs, 1) * (float(self.timeout) + GRACE + 5.0) + 10.0


@dataclass(frozen=True)
class Result:
    """``status``: passed, failed, error (raised / did not load), timeout, crashed,
    output_limit, invalid_test (the tests themselves are broken) or sandbox_error;
    in exec mode ok instead of passed and failed, exited besides (see ``Job``).
    ``output`` and ``output_bytes``: exec mode only. ``output`` and ``message``
    have their control characters escaped (``escape_controls``); ``output_bytes``
    counts the bytes the program wrote. ``elapsed``: wall seconds of the run,
    measured on the host."""

    status: str
    passed: int
    total: int
    message: str
    elapsed: float
    isolation: str
    output: str = ""
    output_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "ok")

