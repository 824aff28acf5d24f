"""What a training run shows, and where everything else goes.

``RunOutput`` points the process's stdout and stderr (file descriptors 1 and 2, so C++ code,
vLLM's and DeepSpeed's loggers and child processes are caught too) at ``OUTPUT_DIR/train.log``.
The terminal keeps rlvr's own lines, a progress bar and one line a step. With ``verbose`` the
terminal also shows everything the log gets. Ranks other than 0 write ``train.rank<N>.log``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from rlvr.kit import open_append

FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"

# Where signal_notice writes: (the log's fd, the terminal's fd or None). A RunOutput sets them.
_NOTICE_FDS: tuple[int, int | None] = (2, None)


def signal_notice(text: str, *, name: str = "rlvr.training", level: str = "WARNING") -> None:
    """One line to the run's log (as ``FORMAT`` writes it) and the terminal, safe in a signal
    handler: by ``os.write``, not through logging or Python's buffered files. A handler runs
    between two bytecodes of the main thread, which may be inside a write to that very file:
    logging there raised "reentrant call inside <_io.BufferedWriter>", and the line was lost."""
    log_fd, terminal_fd = _NOTICE_FDS
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
    writes = [(log_fd, f"{stamp} {name} {level}: {text}\n" if terminal_fd is not None else text + "\n")]
    if terminal_fd is not None:  # over the progress bar's line, which the bar then draws again below
        writes.append((terminal_fd, ("\r\x1b[2K" if os.isatty(terminal_fd) else "") + text + "\n"))
    for fd, line in writes:
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        except OSError:
            pass


class _ConsoleHandler(logging.Handler):
    """rlvr's log records on the terminal, printed through rich so they stay above the bar."""

    def __init__(self, console):
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.print(record.getMessage(), markup=False, highlight=False, soft_wrap=True)
        except Exception:  # noqa: BLE001 - a closed terminal must not stop training
            self.handleError(record)


class RunOutput:
    """Context manager: redirect output to the run's log file; ``step(row_line)`` / ``close``."""

    def __init__(self, output_dir: Path, *, rank: int, verbose: bool, total_steps: int, name: str = "train",
                 announce: bool = True):
        """``name``: the log is ``OUTPUT_DIR/<name>.log`` (``<name>.rank<N>.log`` on other ranks);
        ``announce``: say so on the terminal first."""
        self.path = Path(output_dir) / (f"{name}.log" if rank == 0 else f"{name}.rank{rank}.log")
        self.rank, self.verbose, self.total, self.announce = rank, verbose, total_steps, announce
        self.bar = self.console = None
        self._tee = None
        self._handlers: list[logging.Handler] = []

    def __enter__(self) -> RunOutput:
        from rich.console import Console

        sys.stdout.flush()
        sys.stderr.flush()
        log_fd = open_append(self.path, "log")
        self._saved = (os.dup(1), os.dup(2))
        self._terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
        if self.verbose:  # everything to both: a thread copies a pipe to the log and the terminal
            read_fd, write_fd = os.pipe()
            self._tee = threading.Thread(target=_copy, args=(read_fd, [log_fd, os.dup(self._saved[1])]), daemon=True)
            self._tee.start()
            target = write_fd
        else:
            target = log_fd
        os.dup2(target, 1)
        os.dup2(target, 2)
        os.close(target)
        root = logging.getLogger()
        self._levels = [(logger, logger.level) for logger in (root, logging.getLogger("rlvr"))]  # put back on exit
        root.setLevel(logging.INFO)
        to_log = logging.StreamHandler(sys.stderr)
        to_log.setFormatter(logging.Formatter(FORMAT))
        self._handlers.append((root, to_log))
        self.console = Console(file=self._terminal, highlight=False)
        if self.rank == 0 and not self.verbose:
            self._handlers.append((logging.getLogger("rlvr"), _ConsoleHandler(self.console)))
        for logger, handler in self._handlers:
            logger.addHandler(handler)
        logging.getLogger("rlvr").setLevel(logging.INFO)
        global _NOTICE_FDS
        self._notice_fds = _NOTICE_FDS
        # verbose: fd 2 is the pipe to both; rank > 0: the terminal is rank 0's
        _NOTICE_FDS = (2, self._terminal.fileno() if self.rank == 0 and not self.verbose else None)
        if self.announce:
            logging.getLogger("rlvr").info(f"rlvr: logging to {self.path}")
        return self

    def start_bar(self, start_step: int) -> None:
        """The progress bar (rank 0, on the terminal)."""
        if self.rank != 0:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("[bold]step {task.completed}/{task.total}"), BarColumn(),
                            TimeElapsedColumn(), TimeRemainingColumn(), console=self.console,
                            redirect_stdout=False, redirect_stderr=False, transient=True,
                            # rich's rate looks back 30 s by default: steps longer than that left
                            # the time remaining at -:--:-- for the whole run; the run's own pace
                            # (from its second step on) is the estimate
                            speed_estimate_period=7 * 24 * 3600)
        self._task = self.bar.add_task("", total=self.total, completed=start_step)
        self.bar.start()

    def step(self, line: str) -> None:
        """One line for a finished step: on the terminal (rank 0) and in the log."""
        logging.getLogger("rlvr.train").info(line)
        if self.bar is not None:
            self.bar.update(self._task, advance=1)

    def stop_bar(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __exit__(self, exc_type, exc, tb) -> None:
        global _NOTICE_FDS
        _NOTICE_FDS = self._notice_fds
        self.stop_bar()
        if exc is not None and not self.verbose:  # the log keeps the whole story; the terminal gets it next
            traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
        for logger, handler in self._handlers:
            logger.removeHandler(handler)
        for logger, level in self._levels:
            logger.setLevel(level)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)  # also closes the pipe's last write ends held as fds 1 and 2
        os.dup2(self._saved[1], 2)
        if self._tee is not None:
            self._tee.join(timeout=5)  # a child still holding the pipe keeps it open; don't wait on it
        for fd in self._saved:
            os.close(fd)
        self._terminal.close()


def _copy(read_fd: int, targets: list[int]) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as source:
        while chunk := source.read(65536):
            for fd in targets:
                try:
                    os.write(fd, chunk)
                except OSError:
                    pass
    for fd in targets:
        os.close(fd)


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 40 s``, ``1 h 5 min``."""
    seconds = round(max(seconds, 0.0))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def progress_line(what: str, done: int, total: int, elapsed: float) -> str:
    """``eval: 2112 of 10552 samples (20%) in 7 min 30 s, about 30 min left`` (the pace so far)."""
    text = f"{what}: {done} of {total} samples ({100 * done // total}%) in {duration(elapsed)}"
    if 0 < done < total:
        left = elapsed * (total - done) / done  # an estimate: whole minutes between a minute and an hour
        text += f", about {round(left / 60)} min left" if 60 <= left < 3600 else f", about {duration(left)} left"
    return text


class ProgressLog:
    """A ``progress`` callback for ``Sampler.generate``: one log line (on rlvr's console and in
    the log) at each tenth of ``total`` samples, once ``quiet_s`` have passed: a sampling that
    takes seconds says nothing, one that takes an hour says how far it is nine times."""

    def __init__(self, what: str, total: int, logger: logging.Logger, *, quiet_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.logger, self.quiet_s, self.clock = what, total, logger, quiet_s, clock
        self.start, self.shown = clock(), 0

    def __call__(self, done: int) -> None:
        tenth = 10 * done // self.total if self.total else 10
        elapsed = self.clock() - self.start
        if self.shown < tenth < 10 and elapsed >= self.quiet_s:
            self.shown = tenth
            self.logger.info(progress_line(self.what, done, self.total, elapsed))
