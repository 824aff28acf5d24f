"""What tests/e2e/test_sampling_transfer_runs.py, tests/integration/test_sampling_transfer_live.py, tests/unit/test_sampling_transfer.py share."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from rlvr.sampling.transfer import transport
from rlvr.sampling.transfer.wire import metas_of_info, unpack

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
