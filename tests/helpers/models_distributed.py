"""What tests/e2e/test_models_distributed.py, tests/integration/test_models_distributed_live.py share."""

import socket

PRIVATE = "10.77.0.1"


# run "$@" in the namespace, with the host name at PRIVATE there
IN_PRIVATE_NETWORK = ("ip link set lo up && ip addr add {address}/32 dev lo && mount --bind {hosts} /etc/hosts "
                      "&& exec \"$@\"")


def in_private_network(command: list[str], tmp_path) -> list[str]:
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{PRIVATE} {socket.gethostname()}\n")
    return ["unshare", "--user", "--map-root-user", "--net", "--mount", "sh", "-c",
            IN_PRIVATE_NETWORK.format(address=PRIVATE, hosts=hosts), "sh", *map(str, command)]
