"""The process groups rlvr's commands create: kept to this host when the run is, destroyed on every way out;
and the one collective the rest of rlvr needs: named sums combined over ranks (``reduce_sums``).

A process group left to the interpreter's exit is torn down in whatever order Python frees
things: NCCL then warns "destroy_process_group() was not called before program exit, which can
leak resources", and its communicators may hang the exit. ``rlvr train`` creates the default
group (``init_default_group``, which DeepSpeed then adopts); an in-process vLLM engine
(``rlvr eval``, a one-rank ``rlvr train``) creates one if none exists and does not always destroy it.

A run leaves nothing of this behind, so that ``rlvr.api.train`` and ``rlvr.api.evaluate`` can run again and
again in one Python process (a notebook, a sweep): DeepSpeed keeps module-level references to the
groups it adopted or made (its clone of the world group, ...) and torch wraps ``sys.excepthook`` at
every ``init_process_group``; ``process_group_scope`` drops the one and restores the other, and
``environment_scope`` puts back the variables a run sets in ``os.environ``.

What listens where. torch's ``TCPStore`` serves on every interface whatever host it is given, and
gloo binds the address the host name resolves to (a LAN address on many machines), so by default a
one-process run would be reachable from the network. A run whose ranks all run on this host
(``spans_hosts`` is false) keeps to loopback instead: a world of one rendezvous in memory (no
listener at all); several ranks started with MASTER_ADDR/MASTER_PORT by a launcher without a store
of its own (DeepSpeed's) meet at a store rank 0 serves on 127.0.0.1 only; gloo and NCCL sockets
bind the loopback interface (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` ``lo``, inherited by the
vLLM processes the run starts) unless the user named an interface. torchrun serves the store itself
(on every interface: torch's launcher, not rlvr). A run across hosts binds the interfaces the user
names in ``GLOO_SOCKET_IFNAME`` (CPU) or ``NCCL_SOCKET_IFNAME`` (GPU); its store, which the other
hosts must reach, is torch's.

Named sums. A rank's figures (a step's, an evaluation's, a stop request) travel as a mapping of
name to number: ``reduce_sums`` combines each over ranks by its name, as ``add_sums`` combines two
mappings on one rank: added, or the largest for names ending in ``_max`` (``is_maximum``).
"""

from __future__ import annotations

import math
import os
import socket
import sys
import zlib
from contextlib import contextmanager
from typing import Iterator, Mapping

LOOPBACK = "127.0.0.1"
LOOPBACK_INTERFACE = "lo"  # Linux's
SOCKET_INTERFACE_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def spans_hosts(world: int) -> bool:
    """Whether this run's ranks span several hosts (torchrun and DeepSpeed's launcher set
    LOCAL_WORLD_SIZE: the ranks on this host; without it, several ranks may be anywhere)."""
    local = os.environ.get("LOCAL_WORLD_SIZE")
    return world > 1 and (local is None or not local.isdigit() or int(local) < world)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is this host's loopback."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def listen(address: str, port: int = 0) -> socket.socket:
    """A socket listening on ``address`` only (not every interface), on ``port`` (0: one the
    kernel picks, so it cannot be taken between choosing and binding it): a ``TCPStore`` serves
    on it when given it as ``master_listen_fd``."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(128)
    return sock


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing on ``host`` listens on now (for a process that binds it itself, later)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def init_default_group(backend: str, rank: int, world: int) -> None:
    """The default process group, its rendezvous on loopback where the run keeps to this host
    (see the module's docstring); torch's own (``env://``) otherwise."""
    import torch.distributed as dist

    timeout = dist.default_pg_timeout
    if world == 1:
        store = dist.HashStore()
    elif spans_hosts(world) or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=timeout)
        return
    else:
        port = int(os.environ["MASTER_PORT"])
        listening = listen(LOOPBACK, port) if rank == 0 else None
        store = dist.TCPStore(LOOPBACK, port, world, is_master=rank == 0, timeout=timeout, wait_for_workers=False,
                              **({"master_listen_fd": listening.detach()} if listening else {}))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def destroy_process_group() -> None:
    """Destroy the default process group if it is still alive; a no-op otherwise, so every exit
    path may call it (vLLM's own shutdown may have destroyed it already). A group DeepSpeed
    adopted goes through DeepSpeed, which drops its references to it and to the groups it made."""
    import torch.distributed as dist

    comm = sys.modules.get("deepspeed.comm.comm")  # loaded only if this process used DeepSpeed
    if comm is not None and comm.cdb is not None and comm.cdb.is_initialized():
        comm.destroy_process_group()
    elif dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _forget_deepspeed_groups()


def _forget_deepspeed_groups() -> None:
    """DeepSpeed's references to groups already destroyed (by torch directly, e.g. vLLM's shutdown):
    left there, the next ``deepspeed.initialize`` in this process uses them and fails with torch's
    "Group ... is not registered"."""
    groups = sys.modules.get("deepspeed.utils.groups")
    release = getattr(groups, "_release_process_group_references", None)  # DeepSpeed's own (0.19)
    if release is not None:
        release(None)
    elif groups is not None:  # older versions: the clone of the world group every engine uses
        groups._WORLD_GROUP = None


@contextmanager
def process_group_scope(world: int = 1) -> Iterator[None]:
    """A default process group created inside (by us, DeepSpeed or vLLM) is destroyed on leaving,
    however it is left: normally, on an RlvrError, on Ctrl-C. One that existed before is left alone.
    With it go DeepSpeed's hold on it and torch's wrapper of ``sys.excepthook``, and the
    environment is put back as it was (``environment_scope``: vLLM sets a dozen variables as its
    engine starts, ``LD_PRELOAD`` among them). Inside, a run of ``world`` ranks on this host binds
    gloo and NCCL to loopback, in this process and the ones it starts, unless the environment
    names an interface already."""
    import torch.distributed as dist

    existed = dist.is_available() and dist.is_initialized()
    hook, comm = sys.excepthook, sys.modules.get("deepspeed.comm.comm")
    backend = comm.cdb if comm is not None else None
    with environment_scope():
        if not spans_hosts(world):
            os.environ.update({name: LOOPBACK_INTERFACE for name in SOCKET_INTERFACE_VARS if not os.environ.get(name)})
        try:
            yield
        finally:
            if not existed:
                destroy_process_group()
                sys.excepthook = hook  # torch's init_process_group wrapped it (a "[rank0]:" per run)
                comm = sys.modules.get("deepspeed.comm.comm")
                if comm is not None:  # DeepSpeed adopts the next run's group afresh
                    comm.cdb = backend


@contextmanager
def environment_scope() -> Iterator[None]:
    """The variables set in ``os.environ`` inside (a world of one's ``RANK`` and ``MASTER_PORT``,
    ``DS_ACCELERATOR``, what libraries set as they start) are put back as they were on leaving,
    however it is left, so that the next run in this process, or a child process started after,
    does not find them."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for name in [name for name in os.environ if name not in saved]:
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


# ---------------------------------------------------------------------- named sums over ranks
def is_maximum(name: str) -> bool:
    """Figures named ``*_max`` combine by taking the largest (over micro-batches, sampling rounds
    and ranks); every other figure is a sum."""
    return name.endswith("_max")


def add_sums(total: Mapping[str, float] | None, more: Mapping[str, float]) -> dict[str, float]:
    """``total`` and ``more`` combined name by name: added, or the larger for ``*_max`` names."""
    out = dict(total or {})
    for name, value in more.items():
        out[name] = value if name not in out else max(out[name], value) if is_maximum(name) else out[name] + value
    return out


def reduce_sums(stats: Mapping[str, float]) -> dict[str, float]:
    """Each named value combined over ranks as :func:`add_sums` combines it (summed, or the
    largest for ``*_max`` names).

    Values are matched by name, never by position. A rank may lack names another has (an
    environment's own ``env/`` metrics, the importance-sampling figures of micro-batches it did
    not run because it had nothing to train): there each counts as nothing (0, or -inf for a
    maximum). A checksum of the names, reduced first, finds that case; only then are the names
    gathered.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return dict(stats)
    import torch

    names = sorted(stats)
    check = float(zlib.crc32("\0".join(names).encode()))
    spread = torch.tensor([check, -check], dtype=torch.float64)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)  # the largest checksum and minus the smallest
    if spread[0].item() != -spread[1].item():  # the ranks hold different names: take their union
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, names)
        names = sorted({n for ns in gathered for n in ns})
        stats = {n: stats.get(n, -math.inf if is_maximum(n) else 0.0) for n in names}
    maxima = [n for n in names if is_maximum(n)]
    plain = [n for n in names if not is_maximum(n)]
    summed = torch.tensor([float(stats[n]) for n in plain], dtype=torch.float64)
    dist.all_reduce(summed)
    out = dict(zip(plain, summed.tolist()))
    if maxima:
        largest = torch.tensor([float(stats[n]) for n in maxima], dtype=torch.float64)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        out.update(zip(maxima, largest.tolist()))
    return {n: out[n] for n in names}
