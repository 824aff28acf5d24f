"""What runs inside the code sandbox's jail. One worker is four kinds of process:

- F, the fork server (``server``): one job at a time from the host (fds 0/1), one
  result back;
- Z, the zygote (``zygote``), forked from F before any job; with namespaces it runs as
  pid 1 of a user and pid namespace of its own and forks the candidates;
- C, a candidate (``candidate``), one per program run: forked by Z ahead of time as a
  "spare", pid 1 of a fresh pid namespace, then handed a program;
- T, the tester (``tester``), forked from F, persistent: runs each job's tests against C.

Besides them: ``wire``, the framing and value encoding of every channel (the host's
too), ``cage``, the Linux primitives they confine themselves with, and ``report``, how
F turns what it saw of a run into a result.

These modules' sources, with ``..limits``, are shipped into the jail and executed there
by a bare ``python -I`` (``launch.BOOTSTRAP``) as ``rlvr_sandbox.jail.<module>`` and
``rlvr_sandbox.limits``, where neither ``rlvr``, ``rlvr_plugins`` nor the project's
environment exists. So they import the standard library, each other (``.wire``) and
``..limits`` only, relatively -- never a host module. Nothing here runs on import: the
host imports ``wire`` for the framing. This file holds no code and is not shipped.
"""
