"""LoRA adapters merged into their base weights for a while, for sampling at the base model's speed."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def merged_adapters(model) -> Iterator[None]:
    """A peft model's LoRA adapters merged into its base weights inside the block, unmerged after.

    Generation with merged weights runs one matmul per projection instead of three (the
    base weight and the adapter's two factors). The base weights come back exactly: they are
    copied before the merge and copied back after, because ``W + BA - BA`` is not ``W`` in
    floating point (in bfloat16 a merge and unmerge per step would move the frozen weights by
    rounding errors that add up). A model without adapters is left alone.
    """
    import torch

    layers = [m for m in model.modules() if hasattr(m, "base_layer") and hasattr(m, "merge") and hasattr(m, "unmerge")]
    if not layers or not hasattr(model, "merge_adapter"):
        yield
        return
    with torch.no_grad():
        saved = [(m.base_layer.weight, m.base_layer.weight.detach().clone()) for m in layers]
    model.merge_adapter()
    try:
        yield
    finally:
        model.unmerge_adapter()  # peft's own bookkeeping: the layers count as unmerged again
        with torch.no_grad():
            for weight, original in saved:
                weight.copy_(original)
