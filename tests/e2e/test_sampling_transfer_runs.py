"""rlvr.sampling.transfer without vLLM: the checks that run `rlvr` or other processes end to end
(the e2e ring; the others: tests/integration/test_sampling_transfer_live.py,
tests/unit/test_sampling_transfer.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from rlvr.models.distributed import listen
from rlvr.sampling.transfer.broadcast import broadcast, open_group
from rlvr.sampling.transfer.sender import WeightSender
from rlvr.sampling.transfer.wire import buckets, pack
from helpers.sampling_transfer import CPU, same_bits, mixed_weights, ThreadSampler

ROOT = Path(__file__).resolve().parents[2]


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
