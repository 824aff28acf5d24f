"""The trainer's end of a weight sync: ``WeightSender`` drives every sampler through vLLM's
weight-sync control plane (``init_weight_transfer_engine``, ``start_weight_update``,
``update_weights``, ``finish_weight_update``: methods of ``LLM``, and HTTP routes of ``vllm
serve`` in dev mode) and hands the buckets to its transport. ``make_sender`` is the one factory
the colocated sampler (``rlvr.sampling.samplers.VLLMSampler``) and the server sampler
(``rlvr.sampling.server.ServerSampler``) use."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch

from rlvr.sampling.transfer import choose_transport, transport
from rlvr.sampling.transfer.base import SyncClient, on_each
from rlvr.sampling.transfer.wire import buckets


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


class _Partial:
    """A client whose every bucket says its sync sends only the weights that changed."""

    def __init__(self, client: SyncClient):
        self.client = client

    def update_weights(self, update_info):
        self.client.update_weights({**update_info, "complete": False})


class WeightSender:
    """The trainer's sender to every worker of every sampler in ``clients``.

    ``workers[i]`` is how many vLLM workers sampler ``i`` runs (tensor x pipeline x data
    parallel). Every step: ``send(weights)`` on the sender; trainer ranks that are not the sender
    drain their weight iterator instead (ZeRO-3 gathers are collective).
    """

    def __init__(self, clients: Sequence[SyncClient], workers: Sequence[int], *, transport_name: str = "broadcast",
                 bucket_bytes: int = 64 << 20, timeout_s: float = 600.0, device: torch.device | None = None,
                 address: str = "127.0.0.1"):
        self.clients, self.workers = list(clients), list(workers)
        self.transport_name, self.bucket_bytes = transport_name, bucket_bytes
        self.end = transport(transport_name).Sender(bucket_bytes=bucket_bytes, timeout_s=timeout_s,
                                                    device=device or torch.device("cpu"), address=address)
        self.connected = False
        self.version = 0

    def init_info(self, index: int, options: dict[str, Any]) -> dict[str, Any]:
        """Client ``index``'s ``init_info``: its workers' ranks in the transfer, and the transport's options."""
        return dict(transport=self.transport_name, rank_offset=1 + sum(self.workers[:index]),
                    world_size=1 + sum(self.workers), options=options)

    def connect(self) -> None:
        self.end.connect(self.clients, self.workers, self.init_info)
        self.connected = True

    def send(self, weights: Iterable[tuple[str, torch.Tensor]], complete: bool = True) -> dict[str, float]:
        """Push every tensor; returns bytes and bucket counts for the step's metrics. ``complete``
        False: ``weights`` are only those that changed, and the samplers keep the others
        (``rlvr.sampling.transfer.receiver.unsent_kept``)."""
        if not self.connected:
            self.connect()
        on_each(self.clients, lambda c: c.start_weight_update())
        clients = self.clients if complete else [_Partial(c) for c in self.clients]
        sent, count = self.end.send(clients, buckets(weights, self.bucket_bytes))
        self.version += 1
        on_each(self.clients, lambda c: c.finish_weight_update(str(self.version)))
        return {"sync_bytes": float(sent), "sync_buckets": float(count)}

    def close(self) -> None:
        self.end.close()
        self.connected = False


def make_sender(clients: Sequence[SyncClient], workers: Sequence[int], *, choice: str, on_cpu: bool, local: bool,
                bucket_bytes: int, timeout_s: float = 600.0, device: torch.device | None = None,
                address: str = "127.0.0.1") -> WeightSender:
    """The sender for ``sampling.sync_transport: choice`` to samplers on CPU or GPU, on this host
    (``local``) or not (``rlvr.sampling.transfer.choose_transport``)."""
    return WeightSender(clients, workers, transport_name=choose_transport(choice, on_cpu=on_cpu, local=local),
                        bucket_bytes=bucket_bytes, timeout_s=timeout_s, device=device, address=address)
