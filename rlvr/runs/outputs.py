"""Writing a command's ``--output`` without damaging what was there.

What a path names decides how it is written:

- ``-``: standard output.
- one of this process's own descriptors (``/dev/stdout``, ``/dev/fd/3``, or a link to one):
  written through the descriptor, never opened anew.
- a symlink to anything else: refused with one line (``rlvr.kit.files``: a link another user
  planted would choose the file replaced). A symlinked *folder* on the way is followed only
  where the kernel's ``protected_symlinks`` would follow it.
- an existing file that is not a regular file (a FIFO, ``/dev/null``, a terminal): written to
  as a stream, never replaced or removed.
- a regular file or a new name: written to a temporary file beside it and renamed over it
  at the end, so a failure, SIGINT or SIGTERM leaves the old file exactly as it was. A new
  file's mode follows the umask (``0666 & ~umask``); a replaced file keeps its mode.

Temporary files are registered while they live: :func:`signals_remove_temporaries` removes
them when SIGINT/SIGTERM arrives and exits at once, however long the work in other threads
(rewards, worker pools) would take to notice.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from rlvr import RlvrError
from rlvr.kit.files import open_folder, remove_temporaries, replacing

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/(\d+)/fd)/(\d+)")
_STD_PATHS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def inherited_fd(path: str | os.PathLike) -> int | None:
    """The descriptor number when ``path`` names one of this process's own open descriptors
    (``/dev/stdout``, ``/dev/fd/3``, ``/proc/self/fd/1``, or a symlink to one), else None.

    Such a path is written through the descriptor, never opened anew: when standard output is
    redirected to a regular file (``rlvr score ... --output /dev/stdout > log``), renaming a new
    file over the link's target would leave the shell writing to an unlinked file, and opening
    it with truncation would erase what the shell wrote before.
    """
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on symlink hops
        if current in _STD_PATHS:
            return _STD_PATHS[current]
        m = _FD_PATH.fullmatch(current)
        if m and (m.group(1) is None or int(m.group(1)) == os.getpid()):
            return int(m.group(2))
        if not os.path.islink(current):
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Do two paths name one file (through symlinks and hard links)?"""
    if str(a) == "-" or str(b) == "-":
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_folder_target(path: str | os.PathLike, option: str, *, private: bool = False) -> None:
    """Refuse, before any work, a folder path that cannot be created (it or one of its parents
    is an existing file: ``--output-dir results.json/run``) or that passes a link another user
    planted in a shared folder; ``private``: also one that another user could plant links in
    (``rlvr.kit.open_folder``)."""
    fd = open_folder(path, option, private=private)
    if fd is not None:
        os.close(fd)


# What ``rlvr train`` writes into its folder besides its logs (``train.log`` and the samplers'
# logs are appended to, so a run that failed before writing anything else may be started
# again): rlvr.evaluation.held_out (eval.jsonl, eval_before.rank<r>.json), rlvr.training.engine (final/, summary.json),
# rlvr.training.checkpoint (checkpoints/), rlvr.runs.metrics/samples/plotting (metrics.jsonl,
# samples.jsonl, curves.png) and rlvr.runs.tracking (tensorboard/, wandb/).
RUN_OUTPUTS = ("metrics.jsonl", "samples.jsonl", "eval.jsonl", "eval_before.rank*.json", "summary.json",
               "curves.png", "checkpoints", "final", "tensorboard", "wandb")


def run_outputs_in(folder: str | os.PathLike) -> list[str]:
    """The names in ``folder`` that a training run wrote (:data:`RUN_OUTPUTS`), sorted; [] when
    the folder is missing or holds only logs and files of the user's own."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted({p.name for pattern in RUN_OUTPUTS for p in folder.glob(pattern)})


@contextmanager
def open_output(path: str | os.PathLike, *, binary: bool = False, option: str = "--output") -> Iterator[IO]:
    """An open file for ``path`` per the rules above; the old content is replaced only when the
    ``with`` block ends without an exception."""
    mode = "wb" if binary else "w"
    encoding = None if binary else "utf-8"
    if str(path) == "-":
        stream = sys.stdout.buffer if binary else sys.stdout
        yield stream
        stream.flush()
        return
    path = Path(path)
    fd = inherited_fd(path)
    if fd is not None:  # /dev/stdout & co.: this process's own descriptor, whatever it points at
        try:
            f = os.fdopen(os.dup(fd), mode, encoding=encoding)
        except OSError as exc:
            raise RlvrError(f"cannot write {option} {path}: {exc.strerror}") from None
        with f:
            yield f
        return
    with replacing(path, option) as fd, os.fdopen(fd, mode, encoding=encoding, closefd=False) as f:
        yield f


def _remove_temporaries_and_exit(signum: int, frame) -> None:
    remove_temporaries()
    os.write(2, b"rlvr: interrupted\n")
    # Not sys.exit: reward threads and worker pools would be joined first, which can take as
    # long as the batch. Worker processes die with us (PR_SET_PDEATHSIG, see rlvr.workers).
    os._exit(128 + signum)


@contextmanager
def signals_remove_temporaries() -> Iterator[None]:
    """While inside: SIGINT and SIGTERM remove the live temporary files and exit at once
    (status 130 and 143). Outside the main thread it does nothing."""
    if sys.platform == "win32" or not _in_main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _remove_temporaries_and_exit) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
