"""What a run listens on (rlvr.models.distributed): the checks that start worker pools or loopback
services, or build a tiny model in-process (the integration ring; the others:
tests/e2e/test_models_distributed.py)."""

import os
import subprocess
import sys
import textwrap
from helpers.models_distributed import PRIVATE, in_private_network

PROBE = textwrap.dedent('''
    import json, os, socket, sys
    import torch.distributed as dist
    sys.path.insert(0, sys.argv[1])
    from helpers.runs import listening_sockets
    from rlvr.models.distributed import init_default_group, process_group_scope

    out = {"host": socket.gethostbyname(socket.gethostname())}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # torch's defaults
    dist.new_group(backend="gloo")
    out["torch"] = sorted(listening_sockets(os.getpid()))
    dist.destroy_process_group()
    with process_group_scope(1):
        init_default_group("gloo", 0, 1)
        dist.new_group(backend="gloo")
        out["rlvr"] = sorted(listening_sockets(os.getpid()))
    out["after"] = os.environ.get("GLOO_SOCKET_IFNAME")
    print(json.dumps(out))
''')


def test_in_the_private_network_gloo_binds_the_host_names_address_unless_kept_to_loopback(tmp_path):
    """The setting the tests below run in: there torch's defaults listen on PRIVATE (what the
    tests must catch); a run of one keeps its groups to loopback, and leaves the environment as it was."""
    import json

    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": ""}
    done = subprocess.run(in_private_network([sys.executable, script, os.path.dirname(os.path.dirname(__file__))], tmp_path),
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["host"] == PRIVATE
    assert out["torch"] and {a for a, _ in out["torch"]} == {PRIVATE}
    assert out["rlvr"] and {a for a, _ in out["rlvr"]} == {"127.0.0.1"}
    assert out["after"] == ""
