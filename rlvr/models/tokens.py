"""Token batches and end-of-sequence ids, as sampling and training both need them, and the
special tokens a model never learnt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

# Two embedding rows closer than this (cosine) are one vector: trained rows of distinct tokens
# are far apart (Qwen2.5-Coder-0.5B's trained special tokens: at most 0.93 from its shared row).
SAME_ROW = 0.999


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


def shared_rows(rows) -> list[bool]:
    """For each row of a ``[n, d]`` tensor: whether another row is the same vector (cosine
    >= ``SAME_ROW``, or both zero). A model's never-trained tokens keep the one row they were
    initialised to (some models zero them), so two distinct tokens that share a row are tokens
    the model cannot tell apart."""
    import torch

    rows = rows.float()
    norms = rows.norm(dim=1)
    zero = norms <= 1e-6 * norms.max().clamp(min=1e-30)
    unit = torch.nn.functional.normalize(rows, dim=1)
    close = ((unit @ unit.T) >= SAME_ROW) | (zero[:, None] & zero[None, :])
    close.fill_diagonal_(False)
    return close.any(dim=1).tolist()


def untrained_template_tokens(folder: str | Path) -> list[str]:
    """The special tokens a local model's chat template writes that the model never learnt:
    added tokens whose input embedding row is shared with other added tokens. The model reads
    them as the same blank and gives them the probability of its unused tokens, so it will not
    write them. Qwen2.5-Coder-0.5B-Instruct's ``<tool_call>`` and ``</tool_call>`` share one
    row with 11 unused vision and box tokens: its template's tool-call tags. Reads the
    tokenizer, the template and a few rows of the embedding from safetensors (one file, or the
    shard an index names), nothing else; [] for anything else (no folder, pickled weights, an
    embedding not named ``...embed_tokens.weight``)."""
    folder = Path(folder)
    try:
        added = {t["id"]: t["content"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]}
    except (OSError, ValueError, KeyError, TypeError):
        return []
    template = _chat_template(folder)
    found = _embedding_file(folder)
    if not template or len(added) < 2 or found is None:
        return []
    import torch
    from safetensors import safe_open

    path, name = found
    with safe_open(str(path), "pt") as weights:
        if name is None:
            names = [k for k in weights.keys() if k.endswith("embed_tokens.weight")]
            if len(names) != 1:
                return []
            name = names[0]
        table = weights.get_slice(name)
        ids = sorted(i for i in added if i < table.get_shape()[0])
        if len(ids) < 2:
            return []
        rows = torch.stack([table[i:i + 1][0] for i in ids])
    return [added[i] for i, shared in zip(ids, shared_rows(rows)) if shared and added[i] in template]


def _embedding_file(folder: Path) -> tuple[Path, str | None] | None:
    """The safetensors file holding the input embedding, and its tensor's name when an index
    says it (``model.safetensors.index.json``: sharded weights); None without either."""
    if (folder / "model.safetensors").is_file():
        return folder / "model.safetensors", None
    try:
        weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        [(name, shard)] = [(k, v) for k, v in weight_map.items() if k.endswith("embed_tokens.weight")]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    path = folder / shard
    return (path, name) if path.is_file() and path.parent == folder else None


def _chat_template(folder: Path) -> str:
    """The chat template's text: ``chat_template.jinja``, else the tokenizer config's."""
    try:
        return (folder / "chat_template.jinja").read_text()
    except OSError:
        pass
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template") or ""
    except (OSError, ValueError, AttributeError):
        return ""
    return template if isinstance(template, str) else json.dumps(template)


def untrained_tokens_note(name: str, folder: str | Path) -> str | None:
    """A one-line note when model ``name`` (at ``folder``) never learnt some of its chat
    template's special tokens, for a multi-turn recipe: None when it learnt them all."""
    tokens = untrained_template_tokens(folder)
    if not tokens:
        return None
    return (f"model {name} never learnt {', '.join(tokens)} of its chat template (their embedding row is "
            "shared with unused tokens): it will not write them, so a tools environment under parser: "
            "hermes will see none of its calls; parser: auto reads the calls it does write")
