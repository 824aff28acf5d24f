"""rlvr.sampling.transfer without vLLM: packing tensors into flat buckets, the gloo group between
processes, the transport registry, and ``WeightSender`` end to end against fake samplers whose
workers are threads or processes that receive through the transports' own ``Receiver``, as
``RlvrWeightTransferEngine.receive_weights`` does inside vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from rlvr.models.distributed import listen
from rlvr.sampling.transfer import transport
from rlvr.sampling.transfer.broadcast import broadcast, open_group
from rlvr.sampling.transfer.sender import WeightSender
from rlvr.sampling.transfer.wire import ALIGN, TensorMeta, bucket_size, buckets, metas_of_info, pack, unpack

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes (bit-exact comparison: NaN payloads and -0.0 included)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(as_bytes(a), as_bytes(b))


def mixed_weights(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    """Every dtype a model ships, odd byte sizes (none a multiple of ALIGN), a 0-d scalar, an
    empty tensor, values float comparison would miss (NaN, -0.0, inf), and non-contiguous views."""
    g = torch.Generator().manual_seed(seed)
    special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf"), 1e-40])
    wide = torch.randn(6, 5, generator=g)
    return [
        ("f32", torch.randn(3, 7, generator=g)),
        ("special", special),
        ("bf16", torch.randn(5, 3, generator=g).to(torch.bfloat16)),
        ("f16.scalar", torch.tensor(-2.5, dtype=torch.float16)),
        ("i64", torch.randint(-(2**62), 2**62, (3, 1, 2), generator=g, dtype=torch.int64)),
        ("empty", torch.empty(0, 4)),
        ("transposed", wide.t()),  # strides (1, 5)
        ("strided", torch.randn(11, generator=g).to(torch.bfloat16)[::3]),  # stride 3
        ("expanded", torch.randn(1, 3, generator=g).to(torch.float16).expand(4, 3)),  # stride 0
        ("f32.scalar", torch.tensor(3.25)),
    ]


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


# ---- a real broadcast between two processes -------------------------------------------------------

RECEIVER = textwrap.dedent("""
    import json, sys, torch
    from rlvr.sampling.transfer.broadcast import broadcast, open_group
    from rlvr.sampling.transfer.wire import TensorMeta, bucket_size, unpack

    port, spec, out = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    group, store = open_group("127.0.0.1", port, 1, 2, 20.0, torch.device("cpu"))
    received = {}
    for bucket in spec:
        metas = [TensorMeta(n, d, tuple(s)) for n, d, s in bucket]
        buffer = torch.empty(bucket_size(metas), dtype=torch.uint8)
        broadcast(group, buffer)
        received.update({n: t.clone() for n, t in unpack(buffer, metas)})
    del group, store  # a gloo group alive at exit can abort the process
    torch.save(received, out)
""")


@pytest.mark.slow  # spawns processes, waits out deadlines
def test_two_processes_receive_every_bucket_bit_exact(tmp_path):
    weights = mixed_weights(seed=1)
    packed = [pack(p) for p in buckets(weights, bucket_bytes=256)]
    assert len(packed) > 2
    spec = [[[m.name, m.dtype, list(m.shape)] for m in metas] for _, metas in packed]
    listening = listen("127.0.0.1")
    port = listening.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port), json.dumps(spec), str(tmp_path / "got.pt")],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        group, _store = open_group("127.0.0.1", port, 0, 2, 20.0, CPU, listening=listening)
        for buffer, _ in packed:
            broadcast(group, buffer)
        output, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0, output[-2000:]
    received = torch.load(tmp_path / "got.pt")
    assert list(received) == [n for n, _ in weights]
    for name, original in weights:
        assert same_bits(original, received[name]), name


# ---- WeightSender end to end ----------------------------------------------------------------------

class ThreadSampler:
    """A ``SyncClient`` whose ``workers`` receiving ranks are threads of this process; each does
    what ``RlvrWeightTransferEngine`` does in a vLLM worker (the transport's ``Receiver`` at its
    rank offset, one bucket per ``update_weights``, load its views)."""

    def __init__(self, workers: int, log: list, lock: threading.Lock, *, join: bool = True, receive: bool = True):
        self.workers, self.log, self.lock, self.join, self.receive = workers, log, lock, join, receive
        self.init_info: dict | None = None
        self.receivers: list = []
        self.loaded: list[dict[str, torch.Tensor]] = [{} for _ in range(workers)]

    def _note(self, entry) -> None:
        with self.lock:
            self.log.append((id(self), entry))

    def init_weight_transfer_engine(self, init_info):
        self._note("init")
        self.init_info = json.loads(json.dumps(init_info))  # as it reaches a server: JSON
        if not self.join:
            return
        i = self.init_info

        def join(k):
            return transport(i["transport"]).Receiver(i["options"], rank=i["rank_offset"] + k, world=i["world_size"],
                                                      device=CPU)

        with ThreadPoolExecutor(self.workers) as pool:
            self.receivers = list(pool.map(join, range(self.workers)))

    def start_weight_update(self):
        self._note("start")

    def update_weights(self, update_info):
        update_info = json.loads(json.dumps(update_info))  # as it reaches a server: JSON
        self._note(("update", tuple(update_info["names"])))
        if not self.receive:
            return
        metas = metas_of_info(update_info)

        def receive(k):
            buffer = self.receivers[k].receive(metas, update_info["transport"])
            self.loaded[k].update({n: t.clone() for n, t in unpack(buffer, metas)})

        with ThreadPoolExecutor(self.workers) as pool:
            list(pool.map(receive, range(self.workers)))

    def finish_weight_update(self, weight_version=None):
        self._note(("finish", weight_version))


def test_broadcaster_sends_every_bucket_to_every_worker_of_every_sampler():
    log, lock = [], threading.Lock()
    samplers = [ThreadSampler(1, log, lock), ThreadSampler(2, log, lock)]
    sender = WeightSender(samplers, [1, 2], bucket_bytes=256, timeout_s=20.0)
    for step in (1, 2):
        weights = mixed_weights(seed=step)
        expected = list(buckets(weights, 256))
        log.clear()
        figures = sender.send(w for w in weights)  # a generator, as exported_weights gives
        assert figures == {"sync_bytes": float(sum(bucket_size(pack(p)[1]) for p in expected)),
                           "sync_buckets": float(len(expected))}
        assert sender.version == step
        for s in samplers:
            mine = [entry for who, entry in log if who == id(s)]
            updates = [("update", tuple(n for n, _ in p)) for p in expected]
            assert mine == (["init"] if step == 1 else []) + ["start", *updates, ("finish", str(step))]
            for loaded in s.loaded:
                assert list(loaded) == [n for n, _ in weights]
                for name, original in weights:
                    assert same_bits(original, loaded[name]), (step, name)
        kinds = [e if isinstance(e, str) else e[0] for _, e in log]
        at = {k: [i for i, seen in enumerate(kinds) if seen == k] for k in ("start", "update", "finish")}
        # every sampler starts before any bucket goes, and finishes after the last one
        assert max(at["start"]) < min(at["update"]) and max(at["update"]) < min(at["finish"])
    infos = [s.init_info for s in samplers]
    assert [i["rank_offset"] for i in infos] == [1, 2] and {i["world_size"] for i in infos} == {4}
    assert {i["transport"] for i in infos} == {"broadcast"}
    options = [i["options"] for i in infos]
    assert options[0] == options[1] and options[0]["timeout_s"] == 20.0 and options[0]["master_address"] == "127.0.0.1"
    for s in samplers:
        for r in s.receivers:
            r.close()


# ---- shared buffers: the samplers on this host's CPU map the sender's buckets ---------------------

MAPPER = textwrap.dedent("""
    import json, sys, torch
    from rlvr.sampling.transfer.shared import Receiver
    from rlvr.sampling.transfer.wire import metas_of_info, unpack

    end, received = Receiver({}, rank=1, world=2, device=torch.device("cpu")), {}
    for line in sys.stdin:  # one update_info a line, as the worker engine gets it; "done" at the end
        if line.strip() == "done":
            break
        info = json.loads(line)
        metas = metas_of_info(info)
        received.update({n: t.clone() for n, t in unpack(end.receive(metas, info["transport"]), metas)})
        print(len(end.mapped), flush=True)  # the update returns once the bucket is loaded
    torch.save(received, sys.argv[1])
""")


class ProcessSampler:
    """A ``SyncClient`` whose one worker is another process (``MAPPER``): it maps the sender's
    shared buffers by the path each update names, as ``RlvrWeightTransferEngine`` does."""

    def __init__(self, out):
        self.out, self.inits, self.mapped = out, [], []
        self.proc = subprocess.Popen([sys.executable, "-c", MAPPER, str(out)], cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def init_weight_transfer_engine(self, init_info):
        self.inits.append(init_info)

    def start_weight_update(self):
        pass

    def update_weights(self, update_info):
        self.proc.stdin.write(json.dumps(update_info) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()[-2000:]
        self.mapped.append(int(line))

    def finish_weight_update(self, weight_version=None):
        pass

    def received(self) -> dict:
        self.proc.stdin.write("done\n")
        self.proc.stdin.close()
        assert self.proc.wait(60) == 0, self.proc.stderr.read()[-2000:]
        return torch.load(self.out)


def test_shared_buffers_reach_another_process_bit_exact_and_grow_for_a_large_tensor(tmp_path):
    weights = mixed_weights(seed=3)
    big = ("big", torch.arange(300, dtype=torch.float32))  # 1,200 bytes: over the 256-byte bucket, alone
    weights = [*weights[:2], big, *weights[2:]]
    expected = list(buckets(weights, 256))
    assert len(expected) > 3
    samplers = [ProcessSampler(tmp_path / "a.pt"), ProcessSampler(tmp_path / "b.pt")]
    sender = WeightSender(samplers, [1, 1], bucket_bytes=256, transport_name="shared")
    try:
        figures = sender.send(w for w in weights)
        assert figures["sync_buckets"] == len(expected)
        for s in samplers:
            assert [i["transport"] for i in s.inits] == ["shared"]  # no group, no rendezvous
            got = s.received()
            assert list(got) == [n for n, _ in weights]
            for name, original in weights:
                assert same_bits(original, got[name]), name
            # two buffers in turn; the one the large tensor went through grew in place (same path)
            assert max(s.mapped) == 2
        sizes = sender.end.buffers.sizes
        assert sizes[0] != sizes[1] and max(sizes) >= 1200
    finally:
        sender.close()
        for s in samplers:
            s.proc.kill()
    assert sender.end.buffers is None


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


@pytest.mark.slow  # spawns processes, waits out deadlines
@pytest.mark.parametrize("join, receive", [(False, False), (True, False)], ids=["never-joins", "never-receives"])
def test_a_sampler_that_does_not_take_part_fails_the_send_at_the_deadline(join, receive):
    timeout_s = 2.0
    sampler = ThreadSampler(1, [], threading.Lock(), join=join, receive=receive)
    sender = WeightSender([sampler], [1], bucket_bytes=1 << 20, timeout_s=timeout_s)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        sender.send(mixed_weights())
    elapsed = time.monotonic() - start
    assert timeout_s * 0.9 <= elapsed < timeout_s + 5, elapsed
    assert "time" in str(err.value).lower(), str(err.value)  # "wait timeout" (store) / "Timed out" (gloo)
    assert sender.version == 0


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


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


def test_the_rendezvous_store_listens_only_on_the_address_it_was_given():
    """TCPStore given only a host name listens on every interface; rank 0's store serves on the
    socket ``listen`` bound (loopback here), so no other host can join or disturb the group."""
    listening = listen("127.0.0.1")
    port = listening.getsockname()[1]
    group, store = open_group("127.0.0.1", port, 0, 1, 5.0, CPU, listening=listening)
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, not 00000000 (0.0.0.0) nor ::
    store.set("k", "v")
    assert store.get("k") == b"v"
    del group, store


def test_each_connection_gets_its_own_group_key():
    """The workers learn the store's key prefix only through the (guarded) init route: a
    stranger who reaches the port cannot pose as one of the group's ranks."""
    log, lock = [], threading.Lock()
    keys = []
    for _ in range(2):
        sampler = ThreadSampler(1, log, lock)
        sender = WeightSender([sampler], [1], bucket_bytes=256, timeout_s=20.0)
        sender.connect()
        keys.append(sampler.init_info["options"]["group_key"])
        sender.close()
        for r in sampler.receivers:
            r.close()
    assert keys[0] != keys[1] and all(k.startswith("rlvr-weight-sync-") and len(k) > 30 for k in keys)


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
