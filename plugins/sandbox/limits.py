"""Limits of the code sandbox, in one place for both of its sides: the host (``pool``,
``worker``, ``jobs``) and the processes inside the jail (``jail``).

This file's source is shipped into the jail with the ``jail`` modules' and run there by
a bare ``python -I``, where nothing of the project exists: constants only, and never an
import outside the standard library (today it needs none).
"""

DEFAULT_TIMEOUT = 10.0  # wall-clock seconds per program run
DEFAULT_MEMORY_MB = 1024  # address space per program run
DEFAULT_MAX_OUTPUT = 8 << 20  # stdout + stderr bytes per program run
DEFAULT_KEEP_OUTPUT = 64 << 10  # exec mode: bytes of that output returned
DEFAULT_MAX_PROCS = 64  # processes + threads per program (pids cgroup)
MAX_FILE_BYTES = 64 << 20  # RLIMIT_FSIZE and the size of the private /tmp
MAX_MESSAGE = 64 << 20  # one framed message on any channel
MESSAGE_LIMIT_TEXT = 300  # characters kept of a failure message
GRACE = 1.0  # seconds the fork server waits past a deadline for the tester's report
NOBODY = 65534  # the uid and gid programs run as inside bwrap (process isolation: a private uid per worker)
TESTER_JOBS = 500  # jobs one tester process serves before it is replaced
TESTER_MEMORY_MB = 4096  # the tester's address space
