"""The scorer of the ``reward_model`` reward: which models can be one (checked without loading
them), loading one once per process and (model, device, dtype), formatting and cutting a
(prompt, completion) pair to its tokens, batched forward passes, and what a head's logits say.

A scorer is a ``*ForSequenceClassification`` model of this module's own: eval mode, no parameter
requiring grad, run under ``torch.inference_mode``; nothing else holds it.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, Sequence

from rlvr import RlvrError
from rlvr.kit import cache_dir, on_close_shared, one_line
from rlvr.kit.device import device_policy, empty_cache

__all__ = ["NAME", "Scorer", "Unfit", "load_scorer", "forget_scorers", "model_problem", "locate",
           "architecture_problem", "label_value", "resolve_device"]

NAME = "reward_model"


def model_problem(name: str) -> str | None:
    """Why ``name`` cannot be a scorer, found without loading anything (a local folder's
    config.json is read); None when it may be one (a hub id is checked when its config arrives)."""
    try:
        where = locate(name)
    except RlvrError as exc:
        return str(exc)
    folder = Path(where)
    if not folder.is_dir():
        return None
    config = folder / "config.json"
    if not config.is_file():
        return f"model folder {name}: no config.json in it (not a transformers model folder)"
    try:
        architectures = json.loads(config.read_text()).get("architectures")
    except (OSError, ValueError, AttributeError) as exc:
        return f"model folder {name}: config.json cannot be read ({one_line(exc, 120)})"
    problem = architecture_problem(architectures, name)
    if problem:
        return problem
    if not any(folder.glob("*.safetensors")) and any(folder.glob(p) for p in ("*.bin", "*.pt", "*.pth", "*.ckpt")):
        return (f"model folder {name} holds pickled weights only; rlvr loads safetensors (unpickling can run "
                "code): convert it where you trust it, e.g. "
                "from_pretrained(...).save_pretrained(folder, safe_serialization=True)")
    return None


def locate(name: str) -> str:
    """A folder or hub id transformers can load: ``name`` as a folder, a pulled rlvr alias (the
    folder ``rlvr model pull`` writes, in rlvr's cache), or a hub id. ``RlvrError`` otherwise."""
    if not name:
        raise RlvrError("no model given: set the option model to a folder, a hub id (org/name) or a pulled rlvr alias")
    folder = Path(name).expanduser()
    if folder.is_dir():
        return str(folder)
    if name.startswith((".", "/", "~")):
        raise RlvrError(f"model folder not found: {name}")
    if "/" not in name:
        pulled = cache_dir() / "models" / name  # rlvr.models.pull.model_dir(alias)
        if (pulled / "config.json").is_file():
            return str(pulled)
        raise RlvrError(f"model {name!r} is not a folder, a hub id (org/name) or a pulled rlvr alias "
                        f"(`rlvr model pull {name}`)")
    return name


def architecture_problem(architectures: Any, name: str) -> str | None:
    """Why a config's ``architectures`` is not a sequence classifier; None when it is one."""
    names = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
    if any(a.endswith("ForSequenceClassification") for a in names):
        return None
    if not names:
        return (f"model {name}: its config.json names no architecture; a scorer's names a *ForSequenceClassification "
                "(else its score head would be loaded random)")
    kind = " (a causal LM: it has no score head)" if any(a.endswith("ForCausalLM") for a in names) else ""
    return (f"model {name} is a {names[0]}{kind}, not a sequence classifier: give a reward model whose config names "
            "a *ForSequenceClassification architecture")


def label_value(logits: Sequence[float], index: int | None, output: str) -> float:
    """What a head's ``logits`` say: one logit (``index`` None) as itself or its sigmoid; of
    several, the softmax probability of ``logits[index]``, or (``output == "logit"``) its
    log-odds, ``logits[index]`` minus the log-sum-exp of the others."""
    if index is None:
        x = float(logits[0])
        return _sigmoid(x) if output == "probability" else x
    others = [float(v) for i, v in enumerate(logits) if i != index]
    top = max(others)  # so that the sum below is at least 1
    rest = top + math.log(sum(math.exp(v - top) for v in others))
    log_odds = float(logits[index]) - rest
    return log_odds if output == "logit" else _sigmoid(log_odds)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# --------------------------------------------------------------------------- the scorer


# Cutting tokens from the prompt's start and rendering again usually fits in one round (a cut
# inside a character or a merge can leave a token or two over): a bound, not an expected count.
CUT_ROUNDS = 16


class Unfit(Exception):
    """A pair that cannot be made to fit ``max_length`` by cutting its prompt."""


class Scorer:
    """A loaded sequence classifier and its tokenizer, scoring pairs (one lock: one call at a time)."""

    def __init__(self, model: Any, tokenizer: Any, name: str):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.labels = [str(model.config.id2label.get(i, f"LABEL_{i}")) for i in range(model.config.num_labels)]
        self.pad_id = config.pad_token_id  # None: transformers cannot pool a padded row, so one row a batch
        self.templated = getattr(tokenizer, "chat_template", None) is not None
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self.lock = threading.Lock()

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def label_index(self, positive_label: int | str) -> int | None:
        """The head's positive label (None for a single-label head); ``RlvrError`` when there is none."""
        n, known = len(self.labels), ", ".join(f"{i}: {name}" for i, name in enumerate(self.labels))
        if positive_label == "auto":
            if n > 2:
                raise RlvrError(f"{NAME}: the scorer has {n} labels ({known}): set positive_label")
            return None if n == 1 else 1
        if isinstance(positive_label, int):
            if not 0 <= positive_label < n:
                raise RlvrError(f"{NAME}: positive_label {positive_label} is not a label of the scorer ({known})")
        elif positive_label in self.labels:
            positive_label = self.labels.index(positive_label)
        else:
            raise RlvrError(f"{NAME}: positive_label {positive_label!r} is not a label of the scorer ({known})")
        return None if n == 1 else positive_label

    def encode(self, turns: tuple[list[dict], bool], completion: str, max_length: int) -> tuple[list[int], int]:
        """The pair's token ids and how many prompt tokens were cut to fit ``max_length`` (the
        package's docstring says how); ``Unfit`` when the completion alone does not fit."""
        messages, chat = turns
        limit = min(max_length, self.max_positions or max_length)
        ids, cut = self._render(messages, chat, completion), 0
        for _ in range(CUT_ROUNDS):
            if len(ids) <= limit:
                return ids, cut
            messages, removed = self._cut_left(messages, len(ids) - limit)
            if not removed:
                raise Unfit(f"the completion alone takes {len(ids)} tokens, more than max_length {limit}")
            cut += removed
            ids = self._render(messages, chat, completion)
        raise Unfit(f"the prompt could not be cut to fit max_length {limit}")

    def _render(self, messages: list[dict], chat: bool, completion: str) -> list[int]:
        if self.templated:
            text = self.tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": completion}],
                                                      tokenize=False)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        prompt = "\n\n".join(m["content"] for m in messages)
        text = prompt + ("\n\n" if chat and prompt else "") + completion
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def _cut_left(self, messages: list[dict], tokens: int) -> tuple[list[dict], int]:
        """``messages`` less ``tokens`` tokens of text from their start: whole turns first (never
        the last one, which may only become empty), then the start of the next; and how many went."""
        kept, removed = [dict(m) for m in messages], 0
        while tokens > 0 and kept:
            ids = self.tokenizer(kept[0]["content"], add_special_tokens=False)["input_ids"]
            if len(ids) <= tokens and len(kept) > 1:
                kept.pop(0)
            elif ids:
                kept[0]["content"] = self.tokenizer.decode(ids[min(tokens, len(ids)):])
            else:
                break
            removed, tokens = removed + min(len(ids), tokens), tokens - min(len(ids), tokens)
            if len(kept) == 1 and not kept[0]["content"]:
                break
        return kept, removed

    def score(self, turns: Sequence[tuple[list[dict], bool]], completions: Sequence[str], *, batch_size: int,
              max_length: int, output: str, positive_label: int | str) -> list[tuple[float | None, dict]]:
        """(value, info) per pair, None with ``info["why"]`` for a pair that could not be scored."""
        index = self.label_index(positive_label)
        kind = ("probability" if index is not None else "logit") if output == "auto" else output
        out: list[tuple[float | None, dict]] = [(None, {})] * len(completions)
        with self.lock:
            encoded: dict[int, tuple[list[int], int]] = {}
            for i, (pair, completion) in enumerate(zip(turns, completions)):
                try:
                    encoded[i] = self.encode(pair, completion, max_length)
                except Unfit as exc:
                    out[i] = (None, {"why": str(exc)})
                except Exception as exc:  # noqa: BLE001 - a template or tokenizer that chokes on this record
                    out[i] = (None, {"why": f"cannot format or tokenize it: {one_line(exc, 200)}"})
            order = sorted(encoded, key=lambda i: len(encoded[i][0]))
            size = batch_size if self.pad_id is not None else 1
            for start in range(0, len(order), size):
                chunk = order[start:start + size]
                for i, logits in zip(chunk, self._logits_isolated([encoded[i][0] for i in chunk])):
                    ids, cut = encoded[i]
                    if isinstance(logits, str):
                        out[i] = (None, {"why": f"the scorer's forward pass failed: {logits}"})
                        continue
                    info = {"output": kind, "tokens": len(ids)}
                    if index is not None:
                        info["label"] = self.labels[index]
                    if cut:
                        info["prompt_tokens_cut"] = cut
                    out[i] = (label_value(logits, index, kind), info)
        return out

    def _logits_isolated(self, rows: list[list[int]]) -> list[list[float] | str]:
        """Each row's logits; when the batch's forward pass fails, each row alone, so that only
        the rows that fail alone get their error (a string)."""
        try:
            return self._logits(rows)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory on a long batch
            if len(rows) == 1:
                return [one_line(exc, 200)]
            self._free_cache()
        return [self._logits_isolated([row])[0] for row in rows]

    def _logits(self, rows: list[list[int]]) -> list[list[float]]:
        import torch

        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id if self.pad_id is not None else 0, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):  # right-padded: every row keeps the positions it has alone
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[r, : len(row)] = 1
        with torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
        return logits.float().cpu().tolist()

    def _free_cache(self) -> None:
        empty_cache(self.device)


_SCORERS: dict[tuple, Scorer | RlvrError] = {}
_SCORERS_LOCK = threading.Lock()


def load_scorer(model: str, device: str = "auto", dtype: str = "auto") -> Scorer:
    """The scorer of ``model`` on ``device`` in ``dtype``, loaded on first use in this process
    and kept; a scorer that could not be loaded fails the same way again without a new try."""
    key = (model, device, dtype)
    with _SCORERS_LOCK:
        if key not in _SCORERS:
            on_close_shared(forget_scorers)
            try:
                _SCORERS[key] = _load(model, device, dtype)
            except RlvrError as exc:
                _SCORERS[key] = exc
        found = _SCORERS[key]
    if isinstance(found, RlvrError):
        raise RlvrError(str(found))
    return found


def _load(name: str, device: str, dtype: str) -> Scorer:
    problem = model_problem(name)
    if problem:
        raise RlvrError(f"{NAME}: {problem}")
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    where, target = locate(name), resolve_device(device)
    precision = getattr(torch, device_policy().reward_model_dtype(dtype, device))
    try:
        config = AutoConfig.from_pretrained(where)
        problem = architecture_problem(getattr(config, "architectures", None), name)
        if problem:  # a hub id's config, checked before its weights are fetched
            raise RlvrError(f"{NAME}: {problem}")
        tokenizer = AutoTokenizer.from_pretrained(where)
        model, loading = AutoModelForSequenceClassification.from_pretrained(
            where, config=config, dtype=precision, use_safetensors=True, output_loading_info=True)
    except RlvrError:
        raise
    except Exception as exc:  # noqa: BLE001 - no hub, a broken folder, a class this transformers lacks, ...
        raise RlvrError(f"{NAME}: model {name!r} cannot be loaded: {one_line(exc, 200)}") from None
    missing = list(loading.get("missing_keys") or [])
    if missing:
        raise RlvrError(f"{NAME}: model {name!r} has no weights for {missing[0]}"
                        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: they would be random")
    model.to(target).eval().requires_grad_(False)
    return Scorer(model, tokenizer, name)


def resolve_device(device: str) -> Any:
    """``device`` as a torch device (``rlvr.kit.device.DevicePolicy.reward_model_device``):
    ``auto`` is CUDA when there is one (the calling process's current device once it has set one,
    else the ``LOCAL_RANK``-th), else the CPU."""
    try:
        return device_policy().reward_model_device(device)
    except ValueError as exc:
        raise RlvrError(f"{NAME}: {exc}") from None


def forget_scorers() -> None:
    """Drop the scorers loaded in this process (and the failures kept): the end of a run."""
    with _SCORERS_LOCK:
        _SCORERS.clear()
