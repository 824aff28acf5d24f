"""rlvr.sampling.transfer without vLLM: the checks that start worker pools or loopback services, or
build a tiny model in-process (the integration ring; the others:
tests/e2e/test_sampling_transfer_runs.py, tests/unit/test_sampling_transfer.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import torch

from rlvr.models.distributed import listen
from rlvr.sampling.transfer.broadcast import open_group
from rlvr.sampling.transfer.sender import WeightSender
from rlvr.sampling.transfer.wire import bucket_size, buckets, pack
from helpers.sampling_transfer import CPU, same_bits, mixed_weights, ThreadSampler

ROOT = Path(__file__).resolve().parents[2]


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
