"""rlvr.sampling.transfer without vLLM: packing tensors into flat buckets, the gloo group between
processes, the transport registry, and ``WeightSender`` end to end against fake samplers whose
workers are threads or processes that receive through the transports' own ``Receiver``, as
``RlvrWeightTransferEngine.receive_weights`` does inside vLLM."""

from __future__ import annotations

import pytest
import torch

from rlvr.sampling.transfer import transport
from rlvr.sampling.transfer.wire import ALIGN, TensorMeta, bucket_size, buckets, pack, unpack
from helpers.sampling_transfer import as_bytes, same_bits, mixed_weights


# ---- pack / unpack --------------------------------------------------------------------------------

def test_pack_unpack_round_trip_is_bit_exact_for_every_dtype_and_shape():
    weights = mixed_weights()
    assert not weights[6][1].is_contiguous() and not weights[7][1].is_contiguous()
    buffer, metas = pack(weights)
    assert buffer.dtype == torch.uint8 and buffer.dim() == 1
    assert [m.name for m in metas] == [n for n, _ in weights]
    assert [m.shape for m in metas] == [tuple(t.shape) for _, t in weights]
    assert metas[2].dtype == "bfloat16" and metas[3].dtype == "float16" and metas[4].dtype == "int64"
    out = unpack(buffer, metas)
    assert [n for n, _ in out] == [n for n, _ in weights]
    for (name, original), (_, view) in zip(weights, out):
        assert same_bits(original, view), name


def test_unpack_gives_views_at_aligned_offsets_and_the_buffer_is_as_small_as_alignment_allows():
    weights = mixed_weights()
    buffer, metas = pack(weights)
    expected = sum(-(-t.numel() * t.element_size() // ALIGN) * ALIGN for _, t in weights)
    assert buffer.numel() == bucket_size(metas) == expected
    offsets = []
    for (name, view), meta in zip(unpack(buffer, metas), metas):
        assert view.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr(), name  # a view, no copy
        offsets.append(view.storage_offset() * view.element_size())  # bytes into the buffer
        assert offsets[-1] % ALIGN == 0, (name, offsets[-1])
        assert view.numel() * view.element_size() == meta.nbytes
    assert offsets == sorted(offsets)
    first = unpack(buffer, metas)[0][1]
    buffer[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    assert as_bytes(first)[:4].tolist() == [1, 2, 3, 4]  # writes to the buffer show through


def test_tensor_meta_nbytes():
    assert TensorMeta("a", "bfloat16", (3, 5)).nbytes == 30
    assert TensorMeta("b", "int64", ()).nbytes == 8
    assert TensorMeta("c", "float32", (0, 9)).nbytes == 0


# ---- buckets --------------------------------------------------------------------------------------

def f32(n: int) -> torch.Tensor:
    return torch.zeros(n)


def test_buckets_stay_within_the_limit_keep_order_and_send_an_oversized_tensor_alone():
    sizes = [16, 16, 16, 1000, 16, 3, 16, 16, 200]  # float32: 64 bytes each for 16; 3 -> 12 bytes, counted 64
    weights = [(f"w{i}", f32(n)) for i, n in enumerate(sizes)]
    parts = list(buckets(iter(weights), bucket_bytes=192))
    names = [[n for n, _ in p] for p in parts]
    assert [n for p in names for n in p] == [n for n, _ in weights]  # order kept, nothing lost
    assert names == [["w0", "w1", "w2"], ["w3"], ["w4", "w5", "w6"], ["w7"], ["w8"]]
    for p in parts:
        size = bucket_size(pack(p)[1])
        assert size <= 192 or len(p) == 1, (p, size)


def test_buckets_count_alignment_padding():
    one_byte = [(f"b{i}", torch.zeros(1, dtype=torch.uint8)) for i in range(5)]
    assert [len(p) for p in buckets(one_byte, bucket_bytes=2 * ALIGN)] == [2, 2, 1]
    assert [len(p) for p in buckets(one_byte, bucket_bytes=1)] == [1] * 5
    assert list(buckets([], bucket_bytes=64)) == []


def test_buckets_read_the_weights_lazily():
    """Under ZeRO-3 the weights are gathered as they are read: a bucket must go before the rest is read."""
    read = []

    def weights():
        for i in range(10):
            read.append(i)
            yield f"w{i}", f32(16)

    first = next(buckets(weights(), bucket_bytes=128))
    assert len(first) == 2 and len(read) == 3


def test_shared_transport_is_chosen_only_for_samplers_on_this_hosts_cpu():
    from rlvr import RlvrError
    from rlvr.sampling.transfer import choose_transport

    assert choose_transport("auto", on_cpu=True, local=True) == "shared"
    assert choose_transport("auto", on_cpu=True, local=False) == "broadcast"
    assert choose_transport("auto", on_cpu=False, local=True) == "broadcast"  # GPUs: NCCL
    assert choose_transport("broadcast", on_cpu=True, local=True) == "broadcast"
    with pytest.raises(RlvrError, match="sync_transport: shared needs every sampler on the trainer's host and on CPU"):
        choose_transport("shared", on_cpu=True, local=False)


def test_every_transport_has_both_ends_and_the_recipe_offers_exactly_them():
    """A transport is one module and one line in TRANSPORTS; the recipe's choices follow it."""
    import typing

    from rlvr.recipe.spec import SamplingConfig
    from rlvr.sampling.transfer import TRANSPORTS

    for name in TRANSPORTS:
        module = transport(name)
        assert callable(module.usable) and isinstance(module.NEEDS, str), name
        for end in ("Sender", "Receiver"):
            assert isinstance(getattr(module, end), type), (name, end)
        assert {"connect", "send", "close"} <= set(vars(module.Sender)), name
        assert {"receive", "close"} <= set(vars(module.Receiver)), name
    choices = set(typing.get_args(SamplingConfig.model_fields["sync_transport"].annotation))
    assert choices == {"auto", *TRANSPORTS}
    assert transport("broadcast").usable(on_cpu=False, local=False)  # auto always finds one
    with pytest.raises(ValueError, match="unknown weight-sync transport 'carrier-pigeon'"):
        transport("carrier-pigeon")


def test_zero3_gather_groups_are_the_broadcast_buckets():
    """Parameters are gathered in the groups the broadcast sends (`buckets`): by full size
    (ds_numel), alignment padding counted."""
    import torch

    from rlvr.sampling.transfer.wire import buckets

    params = []
    for i, numel in enumerate([10, 20, 30, 100, 5]):
        p = torch.nn.Parameter(torch.empty(0))  # a ZeRO-3 shard holds nothing locally
        p.ds_numel = numel
        params.append((f"p{i}", p))
    # float32, 64-byte alignment: 10 and 20 elements take 64 + 128 bytes, 30 takes 128
    groups = list(buckets(params, bucket_bytes=256))
    assert [[n for n, _ in g] for g in groups] == [["p0", "p1"], ["p2"], ["p3"], ["p4"]]


def test_reload_warnings_of_layers_without_trainer_parameters_are_dropped():
    import logging

    from rlvr.sampling.transfer.receiver import NotSyncedByDesign

    def record(layer):
        return logging.LogRecord("vllm.model_executor.model_loader.reload.layerwise", logging.WARNING, "layerwise.py",
                                 266, "%s: Failed to load weights", (layer,), None)

    keep = NotSyncedByDesign().filter
    assert not keep(record("RotaryEmbedding")) and not keep(record("ParallelLMHead"))
    assert keep(record("QKVParallelLinear"))  # a layer that should have been synced: still warned about
    other = logging.LogRecord("x", logging.WARNING, "f.py", 1, "%s: Delayed processing", ("RotaryEmbedding",), None)
    assert keep(other)
    # a sync of the changed weights only (LoRA): every layer not sent keeps its weights, quietly
    from rlvr.sampling.transfer.receiver import unsent_kept

    unloaded = logging.LogRecord("vllm.model_executor.model_loader.reload.inplace", logging.WARNING, "inplace.py", 121,
                                 "Following weights were not loaded from checkpoint: %s", ({"norm.weight"},), None)
    with unsent_kept():
        assert not keep(record("QKVParallelLinear")) and not keep(record("RMSNorm")) and not keep(unloaded)
        assert keep(other)
    with unsent_kept(False):
        assert keep(record("QKVParallelLinear")) and keep(unloaded)
    assert keep(record("RMSNorm")) and keep(unloaded) and NotSyncedByDesign.partial == 0
