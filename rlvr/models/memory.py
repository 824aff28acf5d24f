"""Weights in the process's own memory rather than in a mapped file.

transformers maps a safetensors file into memory and, where the dtype it loads in is the file's,
hands out tensors that are views of that mapping (no copy). Read once, their pages stay resident
and count in the process's memory for as long as any view lives, even after most of the model
was cast to another dtype: a trainer that holds a float32 Qwen2.5-0.5B's LoRA base in bfloat16
kept the whole 2.35 GiB file resident beside its copies because the embeddings and norms, left in
float32, still viewed it. ``own_mapped_tensors`` copies the views that remain into anonymous
memory, so the mapping, and its pages, go.
"""

from __future__ import annotations

import sys


def mapped_file_ranges(suffix: str = ".safetensors") -> list[tuple[int, int]]:
    """Address ranges this process maps from files whose name ends in ``suffix`` (Linux; [] elsewhere)."""
    if not sys.platform.startswith("linux"):
        return []
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and fields[5].endswith(suffix):
                    start, end = fields[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        return []
    return ranges


def own_mapped_tensors(module, suffix: str = ".safetensors") -> int:
    """Replace every parameter and buffer of ``module`` that views a mapped weights file with a
    copy of its own; returns the bytes copied. The values are the same: a
    model's results do not change, its file's pages are released once no view is left."""
    import torch

    ranges = mapped_file_ranges(suffix)
    if not ranges:
        return 0

    def mapped(t: torch.Tensor) -> bool:
        if t.device.type != "cpu" or t.numel() == 0:
            return False
        start = t.untyped_storage().data_ptr()
        return any(lo <= start < hi for lo, hi in ranges)

    copied = 0
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if mapped(tensor):
                tensor.data = tensor.data.clone()
                copied += tensor.numel() * tensor.element_size()
    return copied
