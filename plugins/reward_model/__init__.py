"""The ``reward_model`` reward: a trained scorer (a sequence-classification model, such as a
reward model trained on preference pairs) rates each (prompt, completion) pair.

- **The scorer**: a local folder, a hub id (``org/name``) or a pulled rlvr alias, whose
  config names a ``*ForSequenceClassification`` architecture; safetensors only, no remote code.
  A folder that is missing, has no config, names another architecture (a causal LM: no score
  head) or holds pickled weights only is refused in one line when the options are checked
  (``rlvr validate``), before any weights load; a hub id's config is checked the same way when it
  is fetched, still before its weights.
- **Formatting**: with the scorer's own chat template when its tokenizer has one: the prompt's
  messages (or its text as the user's turn) then the completion as the assistant's turn,
  tokenized without extra special tokens (the template writes them). Without a template, the
  prompt's text followed by the completion (a chat prompt's turns joined by blank lines, and a
  blank line before the completion), with the tokenizer's special tokens.
- **Length**: at most ``max_length`` tokens (and never more than the scorer's
  ``max_position_embeddings``). A longer pair loses tokens from the left of the prompt: its
  earliest turns go first, then the start of the turn that remains; the completion is never cut.
  A pair whose completion alone does not fit is unscorable (``None``, with the reason).
- **Output**: a single-label head's logit (``output: auto`` or ``logit``; ``probability`` is its
  sigmoid). A head of 2 or more labels gives the softmax probability of ``positive_label``
  (``auto``: label 1 of a 2-label head; an index or a label name of the config's ``id2label``);
  ``output: logit`` is that probability's log-odds, the positive label's logit minus the
  log-sum-exp of the others (so its sigmoid is the probability).
- **Running**: in batches of ``batch_size`` (sorted by length, right-padded: a row's score does
  not depend on its batch), under ``torch.inference_mode`` with the model in eval mode and no
  parameter requiring grad. The scorer is a model object of this package's own, loaded once per
  process and (model, device, dtype): the trainer never sees it, so it is never trained and never
  synced into the sampler. ``placement: process`` (the default) holds it in a worker process of
  its own (``rlvr.kit.DeadlinePool``, fed lists of strings, getting floats back);
  ``placement: inline`` loads it in the calling process.
- **Normalisation** (``normalize: running``): each score x becomes (x - mean) / std, the mean
  and population standard deviation (Welford) of every score this reward produced in this
  process, the batch's own included; until ``warmup`` scores have been seen, x - mean only.
  ``clip: [low, high]`` bounds the result, after normalisation.
- **Failures**: a record that cannot be formatted or tokenized, or whose forward pass fails, is
  ``None`` with its reason in ``info["why"]``; the others are scored. A scorer that cannot be had
  raises ``RlvrError`` (the runner reports it per record; training stops after
  ``trainer.max_unscored_steps`` steps that scored nothing).

The scorer itself (loading, formatting, forward passes) is ``scorer.py``; this module is the
reward, its options, normalisation and the worker process. docs/rewards.md ("Rewards from a
trained scorer") documents it for users.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Annotated, Any, Literal, Sequence

from annotated_types import Ge, Gt
from pydantic import AfterValidator

from rlvr import RlvrError, Score, hookimpl
from rlvr.kit import DeadlinePool, PoolBroken, completion_text, on_close_shared, one_line

from .scorer import NAME, forget_scorers, load_scorer, model_problem

__all__ = ["reward_model", "rlvr_register_rewards", "RunningStats", "normalize_scores", "prompt_turns",
           "start_worker", "score_in_worker", "close"]

WORKER = "rlvr_plugins.reward_model"  # the module the worker process imports


@hookimpl
def rlvr_register_rewards(register: Any) -> None:
    register(NAME, reward_model,
             description="a trained scorer (a sequence-classification model) rates each (prompt, completion): "
                         "its logit, or the probability of its positive label")


# --------------------------------------------------------------------------- option checks


def _checked_model(name: str) -> str:
    problem = model_problem(name)
    if problem:
        raise ValueError(problem)
    return name


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def _checked_device(device: str) -> str:
    if not _DEVICE.fullmatch(device):
        raise ValueError("a device is auto, cpu, cuda or cuda:N")
    return device


def _checked_clip(bounds: tuple[float, ...]) -> tuple[float, ...]:
    """``()`` (no bounds, the default) or ``(low, high)`` with ``low <= high``."""
    if not bounds:
        return ()
    if len(bounds) != 2:
        raise ValueError("clip is [low, high]")
    low, high = bounds
    if low > high:
        raise ValueError(f"the low bound {low:g} is above the high bound {high:g}")
    return low, high


ModelName = Annotated[str, AfterValidator(_checked_model)]
Device = Annotated[str, AfterValidator(_checked_device)]
Clip = Annotated[tuple[float, ...], AfterValidator(_checked_clip)]
Placement = Literal["process", "inline"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Output = Literal["auto", "logit", "probability"]
Normalize = Literal["none", "running"]


# --------------------------------------------------------------------------- the reward


def reward_model(
    prompts: list[Any],
    completions: list[Any],
    *,
    model: ModelName = "",
    placement: Placement = "process",
    device: Device = "auto",
    dtype: Dtype = "auto",
    batch_size: Annotated[int, Ge(1)] = 8,
    max_length: Annotated[int, Ge(8)] = 4096,
    output: Output = "auto",
    positive_label: int | str = "auto",
    normalize: Normalize = "none",
    warmup: Annotated[int, Ge(1)] = 32,
    clip: Clip = (),
    timeout: Annotated[float, Gt(0)] = 600.0,
) -> list[Score]:
    """A trained scorer's rating of each (prompt, completion): see the module docstring.

    In TRL's convention, so that a chat prompt arrives as its messages (not the policy's rendering
    of them) and can be formatted with the scorer's own chat template."""
    problem = model_problem(model)
    if problem:
        raise RlvrError(f"{NAME}: {problem}")
    low, high = _checked_clip(tuple(clip)) or (-math.inf, math.inf)
    if not completions:
        return []
    turns = [prompt_turns(p) for p in prompts]
    texts = [completion_text(c) for c in completions]
    request = {"model": model, "device": device, "dtype": dtype, "batch_size": batch_size, "max_length": max_length,
               "output": output, "positive_label": positive_label}
    if placement == "inline":
        rated = load_scorer(model, device, dtype).score(turns, texts, **_scoring(request))
    else:
        rated = _score_in_process(request, turns, texts, timeout)
    if normalize == "running":
        rated = _normalized(rated, _stats((model, output, str(positive_label))), warmup)
    return [_clipped(value, info, low, high) for value, info in rated]


def prompt_turns(prompt: Any) -> tuple[list[dict[str, str]], bool]:
    """A prompt as (turns, chat): its messages as plain {"role", "content"} strings (chat True),
    or its text as one user turn (chat False)."""
    if isinstance(prompt, (list, tuple)):
        return [{"role": str(m.get("role", "user")), "content": completion_text(m.get("content"))}
                for m in prompt if isinstance(m, dict)], True
    return [{"role": "user", "content": completion_text(prompt)}], False


def _scoring(request: dict) -> dict:
    return {k: request[k] for k in ("batch_size", "max_length", "output", "positive_label")}


def _clipped(value: float | None, info: dict, low: float, high: float) -> Score:
    if value is None:
        return Score(None, info)
    bounded = min(max(value, low), high)
    return Score(bounded, {**info, "clipped": True} if bounded != value else info)


# --------------------------------------------------------------------------- normalisation


class RunningStats:
    """Count, mean and population variance of every value seen (Welford's algorithm, float64)."""

    def __init__(self) -> None:
        self.count, self.mean, self._m2 = 0, 0.0, 0.0

    def update(self, values: Sequence[float]) -> None:
        for x in values:
            self.count += 1
            delta = x - self.mean
            self.mean += delta / self.count
            self._m2 += delta * (x - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self._m2 / self.count) if self.count else 0.0


STD_FLOOR = 1e-6  # a std below this (all scores equal) divides as this


def normalize_scores(stats: RunningStats, values: Sequence[float], warmup: int) -> list[float]:
    """``values`` added to ``stats``, then each as (x - mean) / max(std, STD_FLOOR) with the
    updated mean and std; while ``stats`` has seen fewer than ``warmup`` values, x - mean only."""
    stats.update(values)
    scale = max(stats.std, STD_FLOOR) if stats.count >= warmup else 1.0
    return [(x - stats.mean) / scale for x in values]


_STATS: dict[tuple, RunningStats] = {}
_STATS_LOCK = threading.Lock()


def _stats(key: tuple) -> RunningStats:
    on_close_shared(close)  # a run's statistics end with it
    with _STATS_LOCK:
        return _STATS.setdefault(key, RunningStats())


def _normalized(rated: list[tuple[float | None, dict]], stats: RunningStats, warmup: int):
    scored = [i for i, (value, _) in enumerate(rated) if value is not None]
    with _STATS_LOCK:
        values = normalize_scores(stats, [rated[i][0] for i in scored], warmup)
        seen, mean, std = stats.count, stats.mean, stats.std
    out = list(rated)
    for i, z in zip(scored, values):
        raw, info = rated[i]
        out[i] = (z, {**info, "raw": raw, "mean": mean, "std": std, "seen": seen})
    return out


# --------------------------------------------------------------------------- placement: process


def start_worker(model: str, device: str, dtype: str) -> None:
    """The worker process's initializer: loads the scorer before the first batch arrives."""
    load_scorer(model, device, dtype)


def score_in_worker(item: dict) -> list[list]:
    """In the worker: [value or None, info] per pair of ``item`` (plain data both ways)."""
    turns = [([dict(m) for m in messages], bool(chat)) for messages, chat in item["turns"]]
    rated = load_scorer(item["model"], item["device"], item["dtype"]).score(turns, item["completions"],
                                                                            **_scoring(item))
    return [[value, info] for value, info in rated]


_POOLS: dict[tuple, DeadlinePool] = {}
_BROKEN: dict[tuple, str] = {}  # (model, device, dtype) -> why its worker could not load it
_POOLS_LOCK = threading.Lock()
START_TIMEOUT_S = 1800.0  # a worker's time to load its scorer (a hub download included)


def _score_in_process(request: dict, turns: list, texts: list[str], timeout: float) -> list[tuple[float | None, dict]]:
    key = (request["model"], request["device"], request["dtype"])
    with _POOLS_LOCK:
        if key in _BROKEN:
            raise RlvrError(_BROKEN[key])
        pool = _POOLS.get(key)
        if pool is None:
            on_close_shared(close)
            pool = _POOLS[key] = DeadlinePool(1, initializer=f"{WORKER}:start_worker", initargs=key,
                                              start_timeout=START_TIMEOUT_S)
    # Batches of similar length, each a task of its own: a batch that overruns ``timeout`` or
    # kills its worker spoils only its own records.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]) + sum(len(m["content"]) for m in turns[i][0]))
    chunks = [order[s:s + request["batch_size"]] for s in range(0, len(order), request["batch_size"])]
    try:
        items = [{**request, "turns": [turns[i] for i in chunk], "completions": [texts[i] for i in chunk]}
                 for chunk in chunks]
        futures = [pool.submit(f"{WORKER}:score_in_worker", item, timeout=timeout) for item in items]
        results = [f.result() for f in futures]
    except PoolBroken as exc:  # the worker could not load the scorer: said once, and not tried again
        message = _worker_error(str(exc).removeprefix("worker initializer failed: "))
        with _POOLS_LOCK:
            _BROKEN[key] = message
            _POOLS.pop(key, None)
        pool.shutdown()
        raise RlvrError(message) from None
    out: list[tuple[float | None, dict]] = [(None, {})] * len(texts)
    for chunk, result in zip(chunks, results):
        if result.ok:
            for i, (value, info) in zip(chunk, result.value):
                out[i] = (value, info)
        elif result.error.startswith("RlvrError: "):
            raise RlvrError(_worker_error(result.error))
        else:
            why = (f"the scorer's process took over {timeout:g} s on this batch and was restarted"
                   if result.status == "timeout" else f"the scorer's process failed: {one_line(result.error, 200)}")
            for i in chunk:
                out[i] = (None, {"why": why})
    return out


def _worker_error(text: str) -> str:
    """An error from the worker as one line: its first line, without the exception's type name."""
    first = text.strip().splitlines()[0] if text.strip() else "the scorer's process failed"
    return first.removeprefix("RlvrError: ")


def close() -> None:
    """Stop the scorers' worker processes, drop the scorers loaded here and the running
    statistics: what ``rlvr.kit.close_shared`` (the end of a run) calls."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
        _BROKEN.clear()
    with _STATS_LOCK:
        _STATS.clear()
    forget_scorers()
    for pool in pools:
        pool.shutdown()
