"""What a run listens on (rlvr.models.distributed): loopback only when it keeps to this host, whatever
the host name resolves to.

Each run here goes into namespaces of its own (``unshare``: user, network, mount) where the host
name resolves to ``PRIVATE``, an address only that namespace has (added to its own loopback
device; /etc/hosts replaced by a bind mount inside it): there gloo's default would bind that
address, as it binds a LAN address on a machine whose host name resolves to one. The test reads
every LISTEN socket of the run's processes from /proc while it runs."""

import ipaddress
import os
import subprocess
import sys
import textwrap
import time


import pytest

from helpers import RLVR
from helpers.runs import listening_sockets, make_run, rows, sampler_pids
from helpers.models_distributed import PRIVATE, in_private_network

def watch(proc: subprocess.Popen, pids) -> dict[int, set[tuple[str, int]]]:
    """Every listening socket ``pids()`` (the run's processes) held while ``proc`` ran."""
    seen: dict[int, set[tuple[str, int]]] = {}
    while proc.poll() is None:
        for pid in pids():
            seen.setdefault(pid, set()).update(listening_sockets(pid))
        time.sleep(0.1)
    return seen


def train_watched(command: list, out, env: dict, tmp_path) -> dict[int, set[tuple[str, int]]]:
    """Run a 2-step training ``command`` in the private network; every socket its processes (those
    with ``RLVR_TEST_RUN`` = ``out``) listened on, after checking that it trained and none was off loopback."""
    # As root of the private user namespace, torch names its compile caches after root: keep them
    # out of /tmp/torchinductor_root, which a real root's runs own (its precompiled headers go to
    # /tmp/torchinductor_$USER whatever TORCHINDUCTOR_CACHE_DIR says).
    user = f"rlvr-test-{os.getuid()}"
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "USER": user, "LOGNAME": user}
    proc = subprocess.Popen(in_private_network(command, tmp_path), env={**env, "RLVR_TEST_RUN": str(out)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        seen = watch(proc, lambda: sampler_pids(out))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert [r["step"] for r in rows(out)] == [1, 2]
    assert not_loopback(seen) == {}, seen
    return seen


def not_loopback(seen: dict[int, set[tuple[str, int]]]) -> dict[int, set]:
    wrong = {pid: {s for s in sockets if not ipaddress.ip_address(s[0]).is_loopback} for pid, sockets in seen.items()}
    return {pid: sockets for pid, sockets in wrong.items() if sockets}


@pytest.mark.longer(600, reason="starts vLLM's server and trains through it (83 s alone)")
def test_a_one_process_run_in_server_mode_listens_only_on_loopback(tmp_path, tiny_model, test_plugin):
    """`rlvr train` (a world of one) with a vLLM sampler of its own, weights by gloo broadcast:
    the trainer (default group, weight-sync store and gloo), the sampler's front door, vLLM's
    engine and worker (vLLM's gloo groups, the weight-sync gloo) listen on loopback only."""
    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="vllm")
    out = tmp_path / "run"
    env.pop("GLOO_SOCKET_IFNAME", None)
    command = [RLVR, "train", recipe, "--output-dir", out, "--set", "sampling.mode=server",
               "--set", "sampling.sync_transport=broadcast"]
    seen = train_watched(command, out, env, tmp_path)
    listeners = {pid for pid, sockets in seen.items() if sockets}
    assert len(listeners) >= 3, seen  # trainer, sampler API server, vLLM's worker: each seen listening
    # the sampler the run started wrote its log in the run's folder, and was stopped at the run's end
    assert (out / "sampler-0.log").exists() and sampler_pids(out) == []


def test_two_ranks_on_one_host_listen_only_on_loopback(tmp_path, tiny_model, test_plugin):
    """Two ranks started as DeepSpeed's launcher starts them (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT; no store of the launcher's): rank 0 serves the rendezvous on
    loopback only, and every gloo socket binds loopback."""
    recipe, env = make_run(tmp_path, tiny_model, test_plugin)
    out = tmp_path / "run"
    env = {**env, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    env.pop("GLOO_SOCKET_IFNAME", None)
    launcher = tmp_path / "launch.py"
    launcher.write_text(textwrap.dedent(f'''
        import os, subprocess, sys
        ranks = [subprocess.Popen([{RLVR!r}, "train", {str(recipe)!r}, "--output-dir", {str(out)!r}],
                                  env={{**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                       "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "{PRIVATE}", "MASTER_PORT": "29541"}})
                 for r in range(2)]
        sys.exit(max(abs(p.wait()) for p in ranks))
    '''))
    seen = train_watched([sys.executable, launcher], out, env, tmp_path)
    assert any(port == 29541 for sockets in seen.values() for _, port in sockets), seen  # rank 0's store, seen
