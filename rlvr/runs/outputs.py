"""Writing a command's ``--output`` without damaging what was there.

What a path names decides how it is written:

- ``-``: standard output.
- an existing file that is not a regular file (a FIFO, ``/dev/null``, a terminal,
  ``/dev/stdout``): written to as a stream, never replaced or removed.
- a symlink to a regular file: written *through*: the new content replaces the link's
  target atomically and the link stays as it was. A dangling symlink is refused.
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
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from rlvr import RlvrError

_LIVE_TEMPORARIES: set[str] = set()
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def is_stream(path: str | os.PathLike) -> bool:
    """``-`` or an existing file (followed through symlinks) that is neither a regular file nor a
    folder: a FIFO, a device, a terminal. Written in place."""
    if str(path) == "-":
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


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


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no other way to read it; put it back at once
    os.umask(mask)
    return mask


def _target(path: Path, option: str) -> Path:
    """The regular file to replace: ``path`` itself, or the file a symlink points to."""
    if path.is_symlink():
        real = Path(os.path.realpath(path))
        if not real.exists():
            raise RlvrError(f"{option} {path} is a symlink to {real}, which does not exist; give the file itself")
        return real
    return path


def check_folder_target(path: str | os.PathLike, option: str) -> None:
    """Refuse, before any work, a folder path that cannot be created: it or one of its parents
    is an existing file (``--output-dir results.json/run``)."""
    ancestor = Path(path)
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        where = "" if ancestor == Path(path) else f": {ancestor}"
        raise RlvrError(f"{option} {path}{where} is a file, not a folder")


def _make_parent(target: Path, option: str) -> None:
    parent = target.parent
    check_folder_target(parent, f"{option} {target}: folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RlvrError(f"{option} {target}: cannot create folder {parent}: {exc.strerror}") from None


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
    if is_stream(path):
        try:
            f = open(path, mode, encoding=encoding)
        except OSError as exc:
            raise RlvrError(f"cannot write {option} {path}: {exc.strerror}") from None
        with f:
            yield f
        return
    target = _target(path, option)
    if target.is_dir():
        raise RlvrError(f"{option} {path} is a folder")
    _make_parent(target, option)
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    # No signal between creating the temporary file and registering it for removal.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        _LIVE_TEMPORARIES.add(tmp)
    except OSError as exc:
        raise RlvrError(f"cannot write {option} {path}: {exc.strerror}") from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    try:
        os.fchmod(fd, stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
        if old and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
            try:  # root replacing another user's file: keep it theirs
                os.fchown(fd, old.st_uid, old.st_gid)
            except OSError:
                pass
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
        os.replace(tmp, target)
    finally:
        _LIVE_TEMPORARIES.discard(tmp)
        if os.path.exists(tmp):
            os.unlink(tmp)


def _remove_temporaries_and_exit(signum: int, frame) -> None:
    for tmp in list(_LIVE_TEMPORARIES):
        try:
            os.unlink(tmp)
        except OSError:
            pass
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
