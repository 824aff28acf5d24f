"""Writing a file a user named, so that no link planted on the way can redirect the write.

A symlink lets whoever made it choose where a write lands: one that user ``nobody`` planted in
a sticky shared folder (``/tmp``) made root's ``--output /tmp/out`` replace a root-only file in a
0700 folder. The kernel's ``protected_symlinks`` cannot stop that (it is often off in
containers, and a link resolved in user space and then renamed over is never followed by the
kernel). So every file rlvr writes by a name goes through here:

- the file itself is never a symlink: it is opened with ``O_NOFOLLOW`` and a symlink is refused
  outright, whoever owns it. rlvr cannot tell a link its user made from one planted under that
  name, and the user can always name the file the link points to;
- its folder is walked one name at a time with ``O_NOFOLLOW``, and a symlink on the way is
  followed only where ``protected_symlinks`` would follow it: outside sticky folders that
  everyone may write, or owned by this user or by that folder's owner;
- every later step is relative to the folder's descriptor (``dir_fd``), so a folder swapped for
  a link after the walk cannot redirect the write;
- a file is replaced through a temporary file created beside it with ``O_EXCL|O_NOFOLLOW`` and
  renamed over the name at the end: a failure leaves the old file exactly as it was.

Not covered: files other libraries write by name (DeepSpeed's checkpoints, ``save_pretrained``);
:func:`open_folder` with ``private=True`` refuses a run folder another user could plant links in.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import stat
from collections import deque
from contextlib import contextmanager
from typing import Iterator

from rlvr import RlvrError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # the kernel's own limit on symlink hops in one path
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_LIVE_TEMPORARIES: dict[tuple[int, str], None] = {}  # (folder descriptor, name), in creation order


def refuse_link(path: str | os.PathLike, what: str) -> RlvrError:
    """The one line for a file name that is a symlink."""
    return RlvrError(f"{what} {os.fspath(path)} is a symlink: rlvr never writes through a link (one another user "
                     "planted would choose the file replaced); name the file itself")


def _check_link(folder_fd: int, name: str, link: os.stat_result, what: str) -> None:
    """The kernel's ``protected_symlinks`` rule, applied whatever the kernel's setting."""
    folder = os.fstat(folder_fd)
    shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
    if shared and link.st_uid not in (os.geteuid(), folder.st_uid):
        raise RlvrError(f"{what}: {name} is a symlink that another user (uid {link.st_uid}) made in a shared "
                        "folder; rlvr does not follow it: name the folder itself")


def _walk(path: str, what: str, create: bool) -> int | None:
    """The descriptor of folder ``path``, reached one name at a time (see the module's notes);
    None when a name on the way does not exist and ``create`` is false."""
    names = deque(path.split("/"))
    fd = os.open("/" if path.startswith("/") else ".", _DIR_FLAGS)
    links = 0
    try:
        while names:
            name = names.popleft()
            if name in ("", "."):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: looked at again below
                names.appendleft(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                _check_link(fd, name, st, what)
                links += 1
                if links > _MAX_LINKS:
                    raise RlvrError(f"{what}: too many levels of symbolic links in {path}")
                target = os.readlink(name, dir_fd=fd)
                names.extendleft(reversed(target.split("/")))
                if target.startswith("/"):
                    os.close(fd)
                    fd = -1
                    fd = os.open("/", _DIR_FLAGS)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise RlvrError(f"{what}: {name} is a file, not a folder")
            inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        return fd
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        raise RlvrError(f"{what}: cannot reach folder {path}: {exc.strerror}") from None
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


def open_folder(path: str | os.PathLike, what: str, *, create: bool = False, private: bool = False) -> int | None:
    """A descriptor of folder ``path`` (close it), walked without following planted links; its
    missing folders are made when ``create``, else the answer is None when one is missing.
    ``private``: refuse a folder another user owns or everyone may write (a run folder, where
    libraries write by name and would follow a link planted there)."""
    path = os.fspath(path) or "."
    fd = _walk(path, what, create)
    if fd is not None and private:
        st = os.fstat(fd)
        if st.st_uid not in (os.geteuid(), 0) or st.st_mode & stat.S_IWOTH:
            os.close(fd)
            whose = f"belongs to uid {st.st_uid}" if st.st_uid not in (os.geteuid(), 0) else "is writable by everyone"
            raise RlvrError(f"{what} {path} {whose}: another user could plant links in it; use a folder of your own")
    return fd


def _split(path: str | os.PathLike, what: str) -> tuple[str, str]:
    folder, name = os.path.split(os.fspath(path))
    if name in ("", ".", ".."):
        raise RlvrError(f"{what} {os.fspath(path)} is a folder")
    return folder or ".", name


def open_append(path: str | os.PathLike, what: str, mode: int = 0o644) -> int:
    """A descriptor appending to ``path`` (a log), made with its folders when missing; a symlink
    is refused."""
    folder, name = _split(path, what)
    folder_fd = open_folder(folder, f"{what} {os.fspath(path)}", create=True)
    try:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                       dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP or _is_link(folder_fd, name):  # in a sticky folder: EACCES
            raise refuse_link(path, what) from None
        raise RlvrError(f"{what} {os.fspath(path)}: {exc.strerror}") from None
    finally:
        os.close(folder_fd)


def _is_link(folder_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


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


def modes_follow_umask(folder: str | os.PathLike, what: str) -> None:
    """Give the regular files in ``folder`` the mode a plain ``open()`` gives a new file
    (``0666 & ~umask``): libraries that write through a private temporary file leave 0600
    (``save_pretrained``'s safetensors), which made the final model the one file of a run that
    others in the user's group could not read. Links in it are left alone, never followed."""
    mode = 0o666 & ~_umask()
    folder_fd = open_folder(folder, what)
    if folder_fd is None:
        return
    try:
        for name in os.listdir(folder_fd):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
            except OSError:  # a link (ELOOP), or gone
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != mode:
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
    finally:
        os.close(folder_fd)


def _temporary(folder_fd: int, name: str) -> tuple[int, str]:
    """A new empty file beside ``name`` (mode 0600 until the caller sets it), registered for
    :func:`remove_temporaries` with no signal in between."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        for _ in range(100):
            tmp = f".{name}.{secrets.token_hex(4)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=folder_fd)
            except FileExistsError:
                continue
            _LIVE_TEMPORARIES[(folder_fd, tmp)] = None
            return fd, tmp
        raise FileExistsError(errno.EEXIST, "no free temporary name")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def remove_temporaries() -> None:
    """Remove the temporary files :func:`replacing` is writing now (for a signal handler that exits)."""
    for folder_fd, tmp in list(_LIVE_TEMPORARIES):
        try:
            os.unlink(tmp, dir_fd=folder_fd)
        except OSError:
            pass


@contextmanager
def replacing(path: str | os.PathLike, what: str) -> Iterator[int]:
    """A descriptor to write ``path`` through, made with its folders when missing. A regular
    file or a new name: a temporary file beside it, renamed over it when the ``with`` block ends
    without an exception (a replaced file keeps its mode and owner; a new one follows the
    umask). An existing FIFO or device: written in place. A symlink or folder: refused."""
    folder, name = _split(path, what)
    folder_fd = open_folder(folder, f"{what} {os.fspath(path)}", create=True)
    try:
        try:
            old = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISLNK(old.st_mode):
            raise refuse_link(path, what)
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise RlvrError(f"{what} {os.fspath(path)} is a folder")
        if old is not None and not stat.S_ISREG(old.st_mode):
            fd = _open_stream(folder_fd, name, path, what)
            if fd is not None:
                try:
                    yield fd
                finally:
                    os.close(fd)
                return
            old = None  # swapped for a regular file meanwhile: replaced like one
        try:
            fd, tmp = _temporary(folder_fd, name)
        except OSError as exc:
            raise RlvrError(f"cannot write {what} {os.fspath(path)}: {exc.strerror}") from None
        try:
            try:
                os.fchmod(fd, stat.S_IMODE(old.st_mode) if old else 0o666 & ~_umask())
                if old and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    try:  # root replacing another user's file: keep it theirs
                        os.fchown(fd, old.st_uid, old.st_gid)
                    except OSError:
                        pass
                yield fd
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        finally:
            _LIVE_TEMPORARIES.pop((folder_fd, tmp), None)
            try:
                os.unlink(tmp, dir_fd=folder_fd)
            except FileNotFoundError:
                pass
    finally:
        os.close(folder_fd)


def _open_stream(folder_fd: int, name: str, path, what: str) -> int | None:
    """``name`` opened to write in place when it is (still) neither a regular file nor a link."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse_link(path, what) from None
        raise RlvrError(f"cannot write {what} {os.fspath(path)}: {exc.strerror}") from None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def write_replacing(path: str | os.PathLike, data: str | bytes, what: str = "file") -> None:
    """``data`` (text as UTF-8) in ``path`` as :func:`replacing` writes it: a kill mid-write leaves
    the old file or none, never half of one."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(path, what) as fd:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
