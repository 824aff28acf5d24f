"""The process groups rlvr's commands create, destroyed on every way out.

A process group left to the interpreter's exit is torn down in whatever order Python frees
things: NCCL then warns "destroy_process_group() was not called before program exit, which can
leak resources", and its communicators may hang the exit. ``rlvr train`` creates the default
group (DeepSpeed's ``init_distributed``); an in-process vLLM engine (``rlvr eval``, a one-rank
``rlvr train``) creates one if none exists and does not always destroy it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


def destroy_process_group() -> None:
    """Destroy the default process group if it is still alive; a no-op otherwise, so every exit
    path may call it (vLLM's own shutdown may have destroyed it already)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def process_group_scope() -> Iterator[None]:
    """A default process group created inside (by us, DeepSpeed or vLLM) is destroyed on leaving,
    however it is left: normally, on an RlvrError, on Ctrl-C. One that existed before is left alone."""
    import torch.distributed as dist

    existed = dist.is_available() and dist.is_initialized()
    try:
        yield
    finally:
        if not existed:
            destroy_process_group()
