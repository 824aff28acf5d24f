"""Run a test's function again as an ordinary user, when the suite runs as root: what drops
privileges or sandboxes must hold both ways.

``as_ordinary_user(path, function, *args)`` runs ``function(*args)`` of the test module at ``path``
in a child process that first drops to an unused uid with no groups, and returns what it
returned (through JSON). The child makes a mount namespace of its own where ``/root`` (which may
hold the interpreter, mode 0700) is a traversable tmpfs with the interpreter's prefix bound back
into it: on machines where Python lives under ``/root``, only root could start it otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

# Runs in the child: argv is uid, the interpreter's prefix, the module's path, the function, its
# arguments as JSON; prints the function's result as JSON on its last line.
AS_USER = r'''
import ctypes, importlib, json, os, sys
uid, prefix, path, function, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
libc = ctypes.CDLL(None, use_errno=True)
def check(ret, what):
    if ret != 0:
        raise OSError(ctypes.get_errno(), what)
check(libc.unshare(0x00020000), "unshare")
check(libc.mount(None, b"/", None, 0x4000 | 0x40000, None), "private")
if prefix.startswith("/root/"):
    held = os.open(prefix, os.O_PATH)
    check(libc.mount(b"tmpfs", b"/root", b"tmpfs", 0, b"mode=755"), "tmpfs /root")
    os.makedirs(prefix)
    check(libc.mount(("/proc/self/fd/%d" % held).encode(), prefix.encode(), None, 0x1000, None), "bind prefix")
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
os.environ["HOME"] = "/tmp"
os.chdir("/tmp")
sys.path[:0] = [os.path.dirname(path), os.path.dirname(os.path.dirname(path))]  # the module, tests/ (helpers)
module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
print(json.dumps(getattr(module, function)(*args)))
'''

# The users a test of privileges runs as: the suite's own, and an ordinary one when that is root.
USERS = ["as-run", "ordinary"] if os.geteuid() == 0 else ["as-run"]


def as_ordinary_user(path: str, function: str, *args: Any, timeout_s: float = 600) -> Any:
    """``function(*args)`` of the module at ``path``, run as an unused uid (the suite runs as root)."""
    assert os.geteuid() == 0, "only root can become another user"
    prefix = os.path.realpath(sys.base_prefix)
    proc = subprocess.run([sys.executable, "-c", AS_USER, str(unused_uid()), prefix, str(path), function,
                           json.dumps(args)], capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def unused_uid() -> int:
    """A uid no process runs as and no user database names."""
    import pwd

    for uid in range(0x6F000000 + os.getpid() % 4096, 0x6FFFFFFF):
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        if not any(entry.isdigit() and _owner(entry) == uid for entry in os.listdir("/proc")):
            return uid
    raise AssertionError("no unused uid")


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
