"""What every transport provides, and the calls the sender makes on all samplers at once.

A transport is a module of ``rlvr.sampling.transfer`` with:

- ``NEEDS``: what it needs, in words (for the line that refuses it), and ``usable(on_cpu, local)``;
- ``Sender(bucket_bytes=, timeout_s=, device=, address=)``: the trainer's end (``SendingEnd``);
- ``Receiver(options, rank=, world=, device=)``: one vLLM worker's end (``ReceivingEnd``), made from the
  ``options`` its sender put into ``init_info``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Protocol, Sequence

import torch

from rlvr.sampling.transfer.wire import TensorMeta


class SyncClient(Protocol):
    """vLLM's weight-sync control plane for one sampler (``LLMClient``; for a server,
    ``rlvr.sampling.server.SamplerHTTP``, whose requests carry the run's secret)."""

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None: ...
    def start_weight_update(self) -> None: ...
    def update_weights(self, update_info: dict[str, Any]) -> None: ...
    def finish_weight_update(self, weight_version: str | None = None) -> None: ...


class SendingEnd(Protocol):
    def connect(self, clients: Sequence[SyncClient], workers: Sequence[int], init_info: Callable[..., dict]) -> None:
        """Make every worker of every client ready to receive: call ``init_weight_transfer_engine``
        on each client with ``init_info(client_index, options)``, ``options`` being what this
        transport's ``Receiver`` is made from."""

    def send(self, clients: Sequence[SyncClient], parts: Iterable[list[tuple[str, torch.Tensor]]]) -> tuple[int, int]:
        """Every bucket of ``parts`` to every worker, each through one ``update_weights`` call on
        every client; returns (bytes, buckets) sent. Returns once every worker has loaded the last."""

    def close(self) -> None: ...


class ReceivingEnd(Protocol):
    def receive(self, metas: Sequence[TensorMeta], options: dict[str, Any]) -> torch.Tensor:
        """The bytes of the bucket ``metas`` describes (``options``: what the sender added to its
        ``update_info``), in a buffer the model may keep."""

    def close(self) -> None: ...


def on_each(items: Sequence[Any], call: Callable[[Any], Any]) -> None:
    """``call`` on every item (a client) at once; the first failure is raised."""
    with ThreadPoolExecutor(len(items)) as pool:
        for f in [pool.submit(call, item) for item in items]:
            f.result()


def alongside(clients: Sequence[SyncClient], call: Callable[[SyncClient], Any], local: Callable[[], Any]) -> None:
    """``call`` on every client while this thread runs ``local`` (its part in a collective)."""
    pool = ThreadPoolExecutor(len(clients))
    try:
        futures = [pool.submit(call, c) for c in clients]
        local()
        for f in futures:
            f.result()
    finally:
        pool.shutdown(wait=False)  # a worker stuck in the collective must not hang us too
