"""The ``broadcast`` transport: one collective group of the trainer's sender (rank 0) and every
worker of every sampler (at the rank offset the sender gives each sampler); one broadcast per
bucket. gloo on CPU, NCCL on GPU; the group is built from a TCP store apart from any default
group the trainer has, served on the address the sender was given only, under a key prefix
made new for each connection and given to the samplers through their guarded routes (a stranger
who reaches the port cannot pose as one of the group's ranks)."""

from __future__ import annotations

import datetime
import secrets
import socket
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable, Sequence

import torch

from rlvr.kit.device import device_policy, synchronize
from rlvr.models.distributed import LOOPBACK, is_loopback, listen
from rlvr.sampling.transfer.base import SyncClient, alongside
from rlvr.sampling.transfer.wire import TensorMeta, bucket_size, pack, update_info

NEEDS = "nothing: any sampler, any host, CPU or GPU"


def usable(*, on_cpu: bool, local: bool) -> bool:
    return True


def open_group(address: str, port: int, rank: int, world: int, timeout_s: float, device: torch.device,
               *, prefix: str = "rlvr-weight-sync", listening: socket.socket | None = None):
    """A process group of ``world`` ranks outside ``torch.distributed``'s default group.

    Rank 0 serves the rendezvous store on ``listening`` (from ``listen``): ``TCPStore`` given
    only an address would listen on every interface. ``prefix`` names this group's keys in the
    store."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    if rank == 0:
        if listening is None:
            raise ValueError("open_group: rank 0 serves the store on a socket from listen()")
        store = dist.TCPStore(address, port, world, is_master=True, timeout=timeout, wait_for_workers=False,
                              master_listen_fd=listening.detach())  # the store owns the socket now
    else:
        store = dist.TCPStore(address, port, world, is_master=False, timeout=timeout)
    store = dist.PrefixStore(prefix, store)
    if device_policy().dist_backend(device) == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world, options), store
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    options._devices = [gloo_device(address, sender=rank == 0)]
    return dist.ProcessGroupGloo(store, rank, world, options), store


def gloo_device(address: str, *, sender: bool):
    """Where a rank's gloo sockets listen: the group's ``address`` on the sender (the trainer
    listens only where it was told), loopback on a sampler's worker when that address is
    loopback; else gloo's default (``GLOO_SOCKET_IFNAME``, or the address the host name resolves to)."""
    import torch.distributed as dist

    loopback = is_loopback(address)
    if sender or loopback:
        return dist.ProcessGroupGloo.create_device(hostname=LOOPBACK if loopback else address)
    return dist.ProcessGroupGloo.create_default_device()


def close_group(group) -> None:
    """Shut a group of ``open_group`` down (NCCL asks for it explicitly, or warns at exit; gloo's
    threads go with the last reference, which the caller drops)."""
    if group is not None and type(group).__name__ == "ProcessGroupNCCL":
        group.shutdown()


def broadcast(group, buffer: torch.Tensor) -> None:
    group.broadcast(buffer, 0).wait()
    synchronize(buffer)


class Sender:
    """Rank 0 of the group: ``connect`` opens it with every worker, ``send`` broadcasts each bucket
    while the clients' ``update_weights`` calls have their workers receive it."""

    def __init__(self, *, bucket_bytes: int, timeout_s: float, device: torch.device, address: str):
        self.timeout_s, self.device, self.address = timeout_s, device, address
        self.group: Any = None
        self.store: Any = None

    def connect(self, clients: Sequence[SyncClient], workers: Sequence[int], init_info: Callable[..., dict]) -> None:
        listening = listen(self.address)
        port, key = listening.getsockname()[1], f"rlvr-weight-sync-{secrets.token_hex(16)}"
        options = dict(master_address=self.address, master_port=port, timeout_s=self.timeout_s, group_key=key)
        world = 1 + sum(workers)
        pool = ThreadPoolExecutor(len(clients) + 1)  # the workers block in the rendezvous, as we do
        try:
            calls = [pool.submit(c.init_weight_transfer_engine, init_info(i, options)) for i, c in enumerate(clients)]
            joined = pool.submit(open_group, self.address, port, 0, world, self.timeout_s, self.device,
                                 prefix=key, listening=listening)
            # a sampler that refuses (wrong secret, no such route) fails the call at once: say so
            # then, not after the rendezvous times out waiting for its workers
            wait([*calls, joined], return_when=FIRST_EXCEPTION)
            for call in calls:
                if call.done() and call.exception() is not None:
                    raise call.exception()
            self.group, self.store = joined.result()
            for call in calls:
                call.result()
        finally:
            pool.shutdown(wait=False)

    def send(self, clients: Sequence[SyncClient], parts: Iterable[list[tuple[str, torch.Tensor]]]) -> tuple[int, int]:
        sent = count = 0
        for part in parts:
            buffer, metas = pack(part, self.device)
            info = update_info(metas)
            alongside(clients, lambda c: c.update_weights(info), lambda: broadcast(self.group, buffer))
            sent, count = sent + buffer.numel(), count + 1
        return sent, count

    def close(self) -> None:
        """Drop the group before the interpreter exits: a gloo group still alive then can abort
        the process at exit ("terminate called without an active exception", status -6)."""
        close_group(self.group)
        self.group = self.store = None


class Receiver:
    """One worker's end: joins the group at its rank, receives one bucket per ``receive``."""

    def __init__(self, options: dict[str, Any], *, rank: int, world: int, device: torch.device):
        self.device = device
        self.group, self.store = open_group(options["master_address"], options["master_port"], rank, world,
                                            options["timeout_s"], device, prefix=options["group_key"])

    def receive(self, metas: Sequence[TensorMeta], options: dict[str, Any]) -> torch.Tensor:
        buffer = torch.empty(bucket_size(metas), dtype=torch.uint8, device=self.device)
        broadcast(self.group, buffer)
        return buffer

    def close(self) -> None:
        close_group(self.group)
        self.group = self.store = None
