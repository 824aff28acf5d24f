"""Run untrusted (model-written) Python and grade it with tests it cannot reach.

What it protects against, with ``isolation="bwrap"`` (the default):

- Faked verdicts. The candidate program runs in its own process; the tests run in
  another one, the *tester*, which never runs candidate code and calls the
  candidate's functions through proxies. Arguments and return values cross a
  socket as JSON of builtin types only (tuples, sets, dicts, bytes tagged) and the
  tester decodes them strictly, so objects with a rigged ``__eq__``, patched
  builtins, frame or ``gc`` walking, ``os._exit(0)``/``SystemExit``, ``atexit``
  hooks, exit codes and text written to any file descriptor never reach the
  decision. The tester reports to the fork server over a socket no candidate ever
  holds; silence, garbage, a dead tester or a dead candidate is a failure. The
  tests and expected outputs are never in the candidate's memory: candidates are
  forked from a zygote that never sees them (program text arrives in a memfd).
  The tester is one process per worker, running each job's tests in a fresh
  namespace; it is replaced every few hundred jobs and whenever it misses a deadline.
- Tests steered by the candidate. The tests' control flow runs on the tester's own
  objects (its builtins, its decoded values); all the candidate can inject is an
  exception raised through a proxy call, and one that means control flow
  (``StopIteration``, which would end a ``map``, ``zip``, ``filter`` or ``iter(f, x)``
  in the test early and leave ``all(...)`` true; ``StopAsyncIteration``,
  ``GeneratorExit``, ``KeyboardInterrupt``, ``SystemExit``) is never raised into the
  tests as itself: the call is a failure, recorded before any test code can catch
  anything. And "passed" needs every counted (non-constant) assert statement of the
  tests to have run at least once, none failing: a loop over nothing, a ``check``
  never called or an early-ended iteration is "failed: N of M asserts ran" (for
  partial credit, each statement that never ran counts as a failed assert); tests
  without a counted assert are an invalid test, never a pass. An assert in a branch
  that does not run for a correct program therefore fails it: write such checks
  without the branch (all 164 HumanEval suites run every assert).
- The host. Each worker is one long-lived ``bwrap`` (bubblewrap) sandbox: new user,
  pid, mount, network, ipc, uts and cgroup namespaces, all capabilities dropped,
  uid 65534, ``--clearenv`` (no parent secrets), a read-only root with only ``/usr``
  (plus the ``/bin``/``/lib`` links) and the interpreter's prefix bound, read-only;
  no ``/etc``, ``/home``, ``/root`` or project directory; no network (a loopback
  device that is down). Inside, the fork server, zygote and tester are not
  dumpable (no ptrace, no ``/proc/<pid>/mem`` or ``/proc/<pid>/fd`` access), and
  every program runs as pid 1 of a pid namespace of its own, in a session and
  process group of its own, with its own SysV IPC namespace, capabilities dropped
  again and ``no_new_privs``: it cannot see or signal anything outside that
  namespace -- ``kill(-1, ...)`` reaches its own processes only, and ``kill(0,
  ...)``/``killpg(getpgrp(), ...)`` its own group only (process groups span pid
  namespaces: without a group of its own, a ``SIGSTOP`` to it would stop the fork
  server and the tester) -- and when it ends the kernel kills everything it left
  behind (``setsid``, double forks, orphans). The only writable places,
  size-capped ``/tmp`` and ``/dev/shm``, are emptied after every program.
- The host's kernel. Nothing in a jail is ever host uid 0: when rlvr runs as root,
  each worker's ``bwrap`` is started (``launch.LAUNCHER``) as a uid of that worker's
  own -- unused, named in no user database, no groups, no capabilities -- so the
  jail's uid 65534 maps to it, and every root-owned file of the host (each sysctl,
  ``/proc/sysrq-trigger``, whatever root-only file sits in a bound folder) is out of
  reach. ``/proc/sys`` and ``/proc/pressure`` are bound read-only over the jail's
  procfs and ``/sys`` is not mounted; a program's own user and mount namespace
  cannot undo that (the read-only binds are locked; a fresh procfs or sysfs is
  refused). A program pinned to a CPU (``pin_cpus``) cannot widen its set: a seccomp
  filter fails ``sched_setaffinity`` (and every system call of a foreign ABI, by
  which it could be reached under another number).
- Resource abuse. rlimits per program (address space, CPU seconds, file size, open
  files, processes, no core dumps), a wall-clock deadline enforced from outside, a
  cap on stdout+stderr bytes, and -- where the cgroup v1 ``pids`` and ``memory``
  controllers are writable (as root) -- a process-count and memory ceiling per
  worker. ``Result.elapsed`` is wall time measured on the host, from handing the
  job over to its result (or to the worker's death): whatever a program does, its
  run is charged at least the time it took.
- Terminal and log injection. Text that comes back from a program (``output``,
  ``message``) has its control characters escaped (``escape_controls``).

Who runs as which uid:

- ``bwrap``, rlvr as root: the jail (bwrap, fork server, zygote, tester, programs) runs
  as the worker's private host uid, 65534 inside; the host process that drives it stays
  root, and so does the launcher until it execs bwrap (joining the cgroups, binding the
  interpreter's prefix where that uid could not reach it, e.g. under ``/root``).
- ``bwrap``, rlvr as an ordinary user: the jail runs as that user (65534 inside).
- ``process``, as root: the fork server, zygote and tester run as root; each program
  runs as the worker's private uid, in the zygote's mount namespace, where ``/proc/sys``,
  ``/sys``, ``/proc/sysrq-trigger`` and ``/proc/pressure`` are read-only (set up before
  it drops to that uid, so it cannot undo it).
- ``process``, as an ordinary user: everything runs as that user, with no mount
  namespace: the kernel's own permissions are what keep the knobs shut (only the
  files it opens to every user open for writing, and writing those sysctls needs
  capabilities the program lacks).

What it does not protect against:

- Kernel bugs reachable from an unprivileged process, and whatever a process can
  do inside namespaces it creates itself. The only seccomp filter is the CPU-pinning
  one: every other system call is open.
- Reads of the bound directories' world-readable files (``/usr``, the interpreter's
  prefix). Nothing else of the host's tree is mounted.
- Channels between programs of one worker that do not affect verdicts: kernel
  keyrings of the sandbox's uid, and CPU-time or cache side channels.
- Tests that are themselves weak (an assert that a wrong answer satisfies, a
  ``try``/``except`` around a candidate call that swallows a plain exception): the
  verdict is exactly as strong as the test code.
- Without writable cgroups (not root, or cgroup v2 only), memory caps are
  per-process rlimits only, which a program can spread across processes.

``isolation="process"`` is the explicit weaker level, and choosing it logs a warning
(once per process) that says what follows: the same fork server, zygote, tester and
proxies (so verdicts still cannot be faked) and the same rlimits, cgroups and output
caps, and each program in a session and process group of its own (``kill(0, ...)``
reaches its own group only; its group is killed after the run), but no namespaces:
the program can read what its uid can read (``/etc/passwd``, world-readable files),
use the network (loopback services included) and, when it escapes its session with
``setsid``, outlive the run unless the pids cgroup is available (it is swept after
every run). ``kill(-1, ...)`` reaches every process of the program's uid, which
without namespaces nothing can narrow: as root, each worker's programs run as a
uid/gid of that worker's own (see ``worker``), so they reach that worker's own
programs only, never another episode's; not as root, programs run as the host's
own user and can signal every process of it, the trainer included.

Candidates see the interpreter's standard library (and its own site-packages), not
the project's virtual environment.

Besides grading (``Job.mode`` "call" and "io"), mode "exec" runs a tool call -- a
code cell of a multi-turn episode after that episode's earlier cells -- and returns
what it printed: the same isolation, rlimits, deadline and cgroup ceilings, and
nothing to fake, since nothing is graded.

Layout: the host side is ``pool`` (``Sandbox`` and the process-wide pools),
``worker`` (one worker: its jail's process, cgroups and uids), ``launch`` (the ``bwrap``
command line and the bootstrap the jail starts with) and ``jobs`` (``Job``, ``Result``).
Everything that runs inside the jail is the ``jail`` package (standard library only;
its docstring names its processes) and the limits both sides share are ``limits``:
those modules' sources, never a host module's, are what is shipped into the sandbox,
as text on the bootstrap's stdin (no file of the host is mounted for them).
"""

from .jobs import JOB_MODES, Job, Result, escape_controls
from .limits import DEFAULT_MAX_OUTPUT, DEFAULT_MAX_PROCS, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT
from .pool import ISOLATION_LEVELS, Isolation, Sandbox, close_all, get_sandbox

__all__ = ["Job", "Result", "Sandbox", "get_sandbox", "escape_controls", "ISOLATION_LEVELS", "Isolation", "JOB_MODES",
           "close_all", "DEFAULT_TIMEOUT", "DEFAULT_MEMORY_MB", "DEFAULT_MAX_OUTPUT", "DEFAULT_MAX_PROCS"]
