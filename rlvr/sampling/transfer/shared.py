"""The ``shared`` transport, for samplers on the trainer's host and CPU: the trainer packs each
bucket into one of two buffers in anonymous shared memory (``memfd_create``) while the samplers
load the other, and the samplers map them through ``/proc/<pid>/fd/<fd>`` and copy each bucket
out (vLLM holds on to the tensors it loads until their layer is whole). No group, no socket:
``update_weights`` names the buffer. Nothing is written to a file system, so neither a small
``/dev/shm`` (64 MiB in a default Docker container) nor a crash leaves anything behind, and the
memory is at most two buckets (the largest tensor, if larger)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence

import torch

from rlvr.sampling.transfer.base import SyncClient, on_each
from rlvr.sampling.transfer.wire import TensorMeta, bucket_size, metas_of, pack, update_info

NEEDS = "every sampler on the trainer's host and on CPU"
SHARED_PATH = re.compile(r"/proc/\d+/fd/\d+")  # where SharedBuffers are mapped from


def usable(*, on_cpu: bool, local: bool) -> bool:
    return on_cpu and local and hasattr(os, "memfd_create")


def map_shared(path: str, nbytes: int) -> torch.Tensor:
    """``nbytes`` of the file at ``path`` as a uint8 tensor, mapped shared: writes through one
    mapping are seen through every other, in any process."""
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


class SharedBuffers:
    """The sender's bucket buffers, used in turn, each grown to the largest bucket it carried."""

    def __init__(self, bucket_bytes: int, slots: int = 2):
        self.fds = [os.memfd_create(f"rlvr-weight-sync-{i}", os.MFD_CLOEXEC) for i in range(slots)]
        self.sizes = [0] * slots
        self.views: list[torch.Tensor | None] = [None] * slots
        self.bucket_bytes = bucket_bytes
        self.turn = 0

    def next(self, nbytes: int) -> tuple[torch.Tensor, str]:
        """The next slot in turn, grown to ``nbytes`` if smaller, and the path others map it by."""
        i = self.turn % len(self.fds)
        self.turn += 1
        if self.sizes[i] < nbytes:
            self.sizes[i] = max(nbytes, self.bucket_bytes)
            os.ftruncate(self.fds[i], self.sizes[i])
            self.views[i] = map_shared(f"/proc/self/fd/{self.fds[i]}", self.sizes[i])
        return self.views[i], f"/proc/{os.getpid()}/fd/{self.fds[i]}"

    def close(self) -> None:
        self.views = [None] * len(self.fds)
        for fd in self.fds:
            os.close(fd)
        self.fds = []


class Sender:
    """Packs each bucket into the next shared buffer while the samplers load the previous one."""

    def __init__(self, *, bucket_bytes: int, timeout_s: float, device: torch.device, address: str):
        self.bucket_bytes = bucket_bytes
        self.buffers: SharedBuffers | None = None

    def connect(self, clients: Sequence[SyncClient], workers: Sequence[int], init_info: Callable[..., dict]) -> None:
        self.buffers = SharedBuffers(self.bucket_bytes)  # no group: the workers map a buffer at its first bucket
        on_each(list(enumerate(clients)), lambda ic: ic[1].init_weight_transfer_engine(init_info(ic[0], {})))

    def send(self, clients: Sequence[SyncClient], parts: Iterable[list[tuple[str, torch.Tensor]]]) -> tuple[int, int]:
        sent = count = 0
        pool = ThreadPoolExecutor(len(clients))
        try:
            loading: list = []
            for part in parts:
                view, path = self.buffers.next(bucket_size(metas_of(part)))
                buffer, metas = pack(part, out=view)
                for f in loading:  # the buffer before this one is free again once they return
                    f.result()
                info = update_info(metas, path=path, nbytes=view.numel())
                loading = [pool.submit(c.update_weights, info) for c in clients]
                sent, count = sent + buffer.numel(), count + 1
            for f in loading:
                f.result()
        finally:
            pool.shutdown(wait=False)
        return sent, count

    def close(self) -> None:
        if self.buffers is not None:
            self.buffers.close()
            self.buffers = None


class Receiver:
    """One worker's end: maps each buffer the sender names (its first use, or when it grew)."""

    def __init__(self, options: dict[str, Any], *, rank: int, world: int, device: torch.device):
        self.mapped: dict[str, torch.Tensor] = {}  # path -> the sender's buffer

    def receive(self, metas: Sequence[TensorMeta], options: dict[str, Any]) -> torch.Tensor:
        path, size = options["path"], options["nbytes"]
        if not SHARED_PATH.fullmatch(path):  # a sender's SharedBuffers, nothing else
            raise ValueError(f"rlvr weight transfer: not a shared buffer: {path!r}")
        if path not in self.mapped or self.mapped[path].numel() < size:  # first use, or grown
            self.mapped[path] = map_shared(path, size)
        # a copy: vLLM's layerwise reload keeps the tensors it is given until their layer is
        # whole (attention layers: until finish_weight_update), and the sender reuses this
        # buffer two buckets on
        return self.mapped[path][: bucket_size(metas)].clone()

    def close(self) -> None:
        self.mapped.clear()
