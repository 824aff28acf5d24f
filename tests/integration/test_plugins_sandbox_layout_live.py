"""The sandbox package's split by where code runs: the checks that start worker pools or loopback
services, or build a tiny model in-process (the integration ring; the others:
tests/unit/test_plugins_sandbox_layout.py)."""

from __future__ import annotations

import json
import subprocess
from rlvr_plugins.sandbox import launch, limits


def test_shipped_sources_load_in_a_bare_interpreter():
    """The bootstrap as the sandbox runs it, minus starting the fork server, in
    the base interpreter with ``rlvr`` and ``rlvr_plugins`` made unimportable."""
    start = '"].main()'
    assert launch.BOOTSTRAP.count(start) == 1
    script = ("import sys\nsys.modules.update(rlvr=None, rlvr_plugins=None)\n"
              + launch.BOOTSTRAP.replace(start, '"]')
              + "import json\nserver = sys.modules['rlvr_sandbox.jail.server']\n"
              + "print(json.dumps([callable(server.main), sys.modules['rlvr_sandbox.limits'].MAX_MESSAGE,"
              + " sorted(m for m in sys.modules if 'rlvr' in m and sys.modules[m] is not None)]))\n")
    done = subprocess.run([launch.interpreter(), "-I", "-c", script], input=launch.bootstrap_input(),
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    callable_, max_message, modules = json.loads(done.stdout)
    assert callable_ and max_message == limits.MAX_MESSAGE
    assert modules == sorted(name for name, _, _ in launch.shipped_sources())
