"""Token batches and end-of-sequence ids, as sampling and training both need them."""

from __future__ import annotations

from typing import Iterable, Sequence



def pad_batch(rows: Iterable[Sequence[int]], pad: int, *, left: bool, width: int | None = None):
    """``(ids, mask)`` LongTensors ``[B, width]``: rows padded with ``pad`` on the left (prompts,
    so they end where generation starts) or the right (completions); mask 1 on real tokens."""
    import torch

    rows = [list(r) for r in rows]
    width = max((len(r) for r in rows), default=0) if width is None else width
    ids, mask = [], []
    for r in rows:
        fill = [pad] * (width - len(r))
        ids.append(fill + r if left else r + fill)
        mask.append([0] * len(fill) + [1] * len(r) if left else [1] * len(r) + [0] * len(fill))
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)


def eos_ids(tokenizer, model=None) -> list[int]:
    """The tokens that end the policy's message: the tokenizer's end-of-sequence token and the
    model's generation config's (chat models often name a second one). ``model``: a loaded model,
    a model folder, or None (the tokenizer's alone)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    if model is None:
        extra = None
    elif isinstance(model, str):
        try:
            from transformers import GenerationConfig

            extra = GenerationConfig.from_pretrained(model).eos_token_id
        except (OSError, ValueError):
            extra = None
    else:
        config = getattr(model, "generation_config", None)
        extra = config.eos_token_id if config is not None else None
    ids += extra if isinstance(extra, list) else [extra] if extra is not None else []
    return sorted(set(ids))
