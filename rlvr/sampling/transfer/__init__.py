"""Weights from the trainer to vLLM samplers in buckets, never through files.

Split by the process each piece runs in:

- ``wire``: the bucket format both ends share (tensors packed into one flat byte buffer);
- ``sender``: the trainer's end, ``WeightSender``, which drives every sampler through vLLM's
  weight-sync control plane (``SyncClient``: ``LLMClient`` for a colocated engine,
  ``rlvr.sampling.server.SamplerHTTP`` for a server) and hands the buckets to a transport;
- ``receiver``: the end inside vLLM's workers, a vLLM weight-transfer backend named ``rlvr``
  (registered in every vLLM process by the ``vllm.general_plugins`` entry point
  ``rlvr.sampling.transfer.receiver:register``), which hands each bucket to the same transport;
- one module per transport, each with a ``Sender`` and a ``Receiver`` (``base`` says what they
  do): ``broadcast`` (a collective group, gloo on CPU, NCCL on GPU) and ``shared`` (two shared
  memory buffers, for samplers on the trainer's host and CPU).

Adding a transport is one module and one line in ``TRANSPORTS``. The recipe's
``sampling.sync_transport`` names one of them, or ``auto``: the first in ``TRANSPORTS`` whose
``usable`` says yes. The trainer-side export (ZeRO-3 gathers, LoRA merge, Hugging Face names) is
the trainer's: ``rlvr.training.policy``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rlvr import RlvrError

# name -> module; ``auto`` takes the first usable one, in this order
TRANSPORTS = {
    "shared": "rlvr.sampling.transfer.shared",
    "broadcast": "rlvr.sampling.transfer.broadcast",
}
BACKEND = "rlvr"  # the vLLM weight-transfer backend's name (``weight_transfer_config``)


def transport(name: str) -> ModuleType:
    """The module of transport ``name`` (its ``Sender``, ``Receiver``, ``usable``, ``NEEDS``)."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown weight-sync transport {name!r}; known: {', '.join(TRANSPORTS)}")
    return importlib.import_module(TRANSPORTS[name])


def choose_transport(choice: str, *, on_cpu: bool, local: bool) -> str:
    """The transport for ``sampling.sync_transport: choice`` when the samplers run on CPU or GPU,
    on this host (``local``) or not: ``auto`` is the first usable one; a named one that cannot
    serve these samplers is refused with what it needs."""
    if choice == "auto":
        return next(name for name in TRANSPORTS if transport(name).usable(on_cpu=on_cpu, local=local))
    if not transport(choice).usable(on_cpu=on_cpu, local=local):
        raise RlvrError(f"sampling.sync_transport: {choice} needs {transport(choice).NEEDS}; use auto or another transport")
    return choice
