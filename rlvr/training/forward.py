"""Policy forward passes over (prompt, completion) pairs, returning logits for the completion tokens.

RLOO samples K completions per prompt, so a micro-batch holds the same prompt several times.
``completion_logits(..., share_prompts=True)`` runs each distinct prompt through the model once,
keeps its key/value cache (with autograd), copies the cache rows to every completion of that
prompt, and runs only the completion tokens on top. The logits, and so the loss and its
gradient, are the same as running every sequence in full (up to float rounding; tested), at a
fraction of the prompt tokens' cost: with K=8, 34-token prompts and ~40-token completions
that is ~40% fewer tokens through the model.
"""

from __future__ import annotations

from typing import Sequence


def plan_micro_batches(
    prompt_lens: Sequence[int], completion_lens: Sequence[int], group_size: int, micro: int, share_prompts: bool
) -> list[list[int]]:
    """Split sequences ``0..n-1`` (consecutive runs of ``group_size`` share a prompt) into
    micro-batches of at most ``micro``, ordered to put the fewest tokens through the model.

    Without prompt sharing a micro-batch costs ``B * (longest prompt + longest completion)``,
    so sorting by length is best. With sharing it costs ``U * longest prompt + B * longest
    completion`` (U distinct prompts): keeping groups together minimises U, sorting by
    length minimises completion padding; we take whichever of the two costs less.
    """
    n = len(prompt_lens)
    total = [prompt_lens[i] + completion_lens[i] for i in range(n)]
    by_length = sorted(range(n), key=lambda i: (total[i], i))
    if not share_prompts:
        return [by_length[a : a + micro] for a in range(0, n, micro)]
    groups = range(-(-n // group_size))
    group_len = [max(total[g * group_size : (g + 1) * group_size]) for g in groups]
    by_group = sorted(range(n), key=lambda i: (group_len[i // group_size], i // group_size, total[i], i))

    def cost(order: list[int]) -> int:
        out = 0
        for a in range(0, n, micro):
            chunk = order[a : a + micro]
            distinct = len({i // group_size for i in chunk})
            out += distinct * max(prompt_lens[i] for i in chunk) + len(chunk) * max(completion_lens[i] for i in chunk)
        return out

    best = min((by_group, by_length), key=cost)  # ties: groups together
    return [best[a : a + micro] for a in range(0, n, micro)]


def completion_logits(
    module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    pad_id: int,
    device,
    share_prompts: bool = True,
):
    """Logits ``[B, C, V]`` whose row ``b``, position ``t`` predicts ``completions[b][t]``, plus
    the completion token ids ``[B, C]`` and a 0/1 mask ``[B, C]`` (C = longest completion).

    Prompts are left-padded, completions right-padded, positions count real tokens only, so a
    sequence's logits do not depend on what else is in the batch.
    """
    import torch

    from rlvr.models.tokens import pad_batch

    width = max(max(len(c) for c in completions), 1)
    comp_ids, comp_mask = pad_batch(completions, pad_id, left=False, width=width)
    comp_ids, comp_mask = comp_ids.to(device), comp_mask.to(device)
    if not share_prompts:
        p_ids, p_mask = pad_batch(prompts, pad_id, left=True)
        p_ids, p_mask = p_ids.to(device), p_mask.to(device)
        ids = torch.cat([p_ids, comp_ids], 1)
        attn = torch.cat([p_mask, comp_mask], 1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out = module(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=width + 1)
        return out.logits[:, :-1, :], comp_ids, comp_mask

    # Distinct prompts, in order of first appearance; row b of the batch uses prompt owner[b].
    first: dict[tuple[int, ...], int] = {}
    owner = [first.setdefault(tuple(p), len(first)) for p in prompts]
    unique = list(first)
    p_ids, p_mask = pad_batch(unique, pad_id, left=True)
    p_ids, p_mask = p_ids.to(device), p_mask.to(device)
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
    out = module(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True, logits_to_keep=1)
    select = torch.tensor(owner, device=device)
    first_logits = out.logits[:, -1:, :].index_select(0, select)  # predicts completion token 0
    if width == 1:
        return first_logits, comp_ids, comp_mask
    cache = out.past_key_values
    cache.reorder_cache(select)  # index_select on every layer's keys/values: gradients flow back
    # Feed completion tokens 0..C-2; their logits predict tokens 1..C-1.
    attn = torch.cat([p_mask.index_select(0, select), comp_mask], 1)[:, :-1]
    lengths = p_mask.sum(-1).index_select(0, select)
    pos = lengths.unsqueeze(1) + torch.arange(width - 1, device=device).unsqueeze(0)
    out = module(
        input_ids=comp_ids[:, :-1], attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True
    )
    return torch.cat([first_logits, out.logits], 1), comp_ids, comp_mask
