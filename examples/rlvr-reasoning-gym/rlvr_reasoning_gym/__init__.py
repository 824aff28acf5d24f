"""reasoning-gym's procedural datasets as an rlvr task, scored by reasoning-gym's own checkers.

One task and one reward, both named ``reasoning_gym``::

    task:
      name: reasoning_gym
      options: {dataset: gsm_symbolic, size: 2000, seed: 0, config: {}}
    rewards:
      reasoning_gym: 1.0

Every puzzle is generated on this machine from the seed (no network, no data dir).
``python -m rlvr_reasoning_gym`` lists the datasets; ``python -m rlvr_reasoning_gym NAME``
shows one's config keys and a sample.

reasoning_gym takes about 2 s to import (it pulls in matplotlib), so it is imported only
inside the task loader and the reward's worker processes, never when rlvr lists plugins.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import io
import json
import math
import os
import sys
import threading
from collections import OrderedDict
from fractions import Fraction
from typing import Annotated, Any, Iterator, Literal, Sequence, get_args

from annotated_types import Ge, Gt

from rlvr import RlvrError, Score, hookimpl
from rlvr.kit import SoftTimeout, completion_text, map_with_deadline, shared_pool, soft_limit, soft_seconds, unfinished

__all__ = [
    "reasoning_gym_task",
    "reasoning_gym_reward",
    "find_answer",
    "dumps_entry",
    "loads_entry",
    "dataset_names",
    "rlvr_register_tasks",
    "rlvr_register_rewards",
]

TASK = "reasoning_gym"
SPLITS = ("train", "test")
# Most reasoning-gym generators seed item i with Random(seed + i): the test split starts
# this far from the train split's seed, so the two use disjoint random streams for any
# size below it.
TEST_SEED_OFFSET = 10_000_019
ExtractMode = Literal["answer_tag", "boxed", "last_number", "raw"]
EXTRACT_MODES = get_args(ExtractMode)
_RESERVED_CONFIG = ("size", "seed")


# --------------------------------------------------------------------------- entries as JSON
# reasoning-gym metadata holds tuples (ARC boards are compared as tuples of tuples), Fractions,
# dicts with int keys and numpy scalars; plain JSON would turn them into something a scorer
# does not recognise. These tags keep them: {"__tuple__": [...]}, {"__fraction__": "3/4"},
# {"__set__": [...]}, {"__dict__": [[key, value], ...]}.

_TAGS = ("__tuple__", "__set__", "__fraction__", "__dict__")


def _plain(obj: Any) -> Any:
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, str):  # numpy.str_ and other str subclasses
        return str(obj)
    if isinstance(obj, dict):
        if all(type(k) is str for k in obj) and not (len(obj) == 1 and next(iter(obj)) in _TAGS):
            return {k: _plain(v) for k, v in obj.items()}
        return {"__dict__": [[_plain(k), _plain(v)] for k, v in obj.items()]}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, tuple):
        return {"__tuple__": [_plain(v) for v in obj]}
    if isinstance(obj, (set, frozenset)):
        return {"__set__": sorted((_plain(v) for v in obj), key=repr)}
    if isinstance(obj, Fraction):
        return {"__fraction__": str(obj)}
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    item = getattr(obj, "item", None)  # numpy scalars
    if callable(item) and type(obj).__module__ == "numpy":
        return _plain(item())
    tolist = getattr(obj, "tolist", None)  # numpy arrays: kept as lists
    if callable(tolist):
        return _plain(tolist())
    return str(obj)


def _hook(obj: dict) -> Any:
    if len(obj) == 1:
        (key, value), = obj.items()
        if key == "__tuple__":
            return tuple(value)
        if key == "__set__":
            return set(value)
        if key == "__fraction__":
            return Fraction(value)
        if key == "__dict__":
            return {(tuple(k) if isinstance(k, list) else k): v for k, v in value}
    return obj


def dumps_entry(entry: dict) -> str:
    """A reasoning-gym entry as a JSON string that :func:`loads_entry` turns back into it."""
    return json.dumps(_plain(entry), ensure_ascii=False)


def loads_entry(text: str) -> Any:
    return json.loads(text, object_hook=_hook)


# --------------------------------------------------------------------------- datasets


def rg_datasets():
    import reasoning_gym  # noqa: F401 - registers every dataset
    from reasoning_gym.factory import DATASETS

    return DATASETS


def dataset_names() -> list[str]:
    """The reasoning-gym dataset names this task accepts (``composite`` is the ``datasets`` option)."""
    return sorted(name for name in rg_datasets() if name != "composite")


@contextlib.contextmanager
def _quiet():
    """Some generators print (the Brainf*ck interpreter, CodeI/O's sample programs): not on our stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name:
        raise RlvrError(f"{where}: a dataset is a reasoning-gym dataset name, e.g. gsm_symbolic; got {name!r}")
    names = dataset_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        raise RlvrError(
            f"{where}: unknown reasoning-gym dataset {name!r}{hint}; "
            f"{len(names)} datasets, listed by `python -m rlvr_reasoning_gym`"
        )
    return name


def _check_config(name: str, config: Any, where: str) -> dict:
    """The config as a dict of the dataset's own config keys, validated by reasoning-gym."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise RlvrError(f"{where}: config for {name!r} must be a mapping of its config keys, got {config!r}")
    config_cls = rg_datasets()[name][1]
    keys = [f.name for f in dataclasses.fields(config_cls) if f.name not in _RESERVED_CONFIG]
    for key in config:
        if key in _RESERVED_CONFIG:
            raise RlvrError(f"{where}: set {key} as a task option, not in the config of {name!r}")
        if key not in keys:
            close = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RlvrError(
                f"{where}: dataset {name!r} has no config key {key!r}{hint}; keys: {', '.join(keys) or 'none'}"
            )
    try:
        made = config_cls(**config)
        if hasattr(made, "validate"):
            made.validate()
    except Exception as exc:  # noqa: BLE001 - reasoning-gym checks with assert and ValueError
        detail = str(exc) or f"{type(exc).__name__} in its validate()"
        raise RlvrError(f"{where}: invalid config for {name!r} {json.dumps(_plain(config))}: {detail}") from None
    try:
        json.dumps(config)
    except (TypeError, ValueError):
        raise RlvrError(f"{where}: config for {name!r} must hold only plain values (numbers, strings, lists)") from None
    return dict(config)


def _specs(dataset: Any, datasets: Any, config: Any) -> list[tuple[str, float, dict]]:
    """[(name, weight, config)] from the task options, every name and config checked."""
    where = f"task {TASK!r}"
    if dataset is not None and datasets is not None:
        raise RlvrError(f"{where}: give dataset (one) or datasets (a weighted mix), not both")
    if dataset is not None:
        if not isinstance(dataset, str):
            raise RlvrError(f"{where}: dataset is one name (e.g. gsm_symbolic); use datasets for a weighted mix")
        name = check_name(dataset, where)
        return [(name, 1.0, _check_config(name, config, where))]
    if datasets is None:
        raise RlvrError(f"{where}: set option dataset (a reasoning-gym dataset name, e.g. gsm_symbolic) or datasets")
    if config is not None:
        raise RlvrError(f"{where}: with datasets, put each dataset's config in its entry: datasets: [{{name: ..., config: ...}}]")
    if isinstance(datasets, dict):
        items = []
        for name, value in datasets.items():
            items.append({"name": name, **value} if isinstance(value, dict) else {"name": name, "weight": value})
    elif isinstance(datasets, list):
        items = [{"name": d} if isinstance(d, str) else d for d in datasets]
    else:
        raise RlvrError(f"{where}: datasets is a mapping name -> weight, or a list of {{name, weight, config}}")
    if not items:
        raise RlvrError(f"{where}: datasets is empty")
    specs, seen = [], set()
    for item in items:
        if not isinstance(item, dict) or "name" not in item:
            raise RlvrError(f"{where}: each datasets entry needs a name, got {item!r}")
        extra = set(item) - {"name", "weight", "config"}
        if extra:
            raise RlvrError(f"{where}: datasets entry {item['name']!r} has unknown key {sorted(extra)[0]!r}; keys: name, weight, config")
        name = check_name(item["name"], where)
        if name in seen:
            raise RlvrError(f"{where}: dataset {name!r} appears twice in datasets")
        seen.add(name)
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or not math.isfinite(weight):
            raise RlvrError(f"{where}: weight of {name!r} must be a positive number, got {weight!r}")
        specs.append((name, float(weight), _check_config(name, item.get("config"), where)))
    return specs


def _build(specs: list[tuple[str, float, dict]], size: int, seed: int):
    """The reasoning-gym dataset object: one dataset, or a CompositeDataset for a mix."""
    rg_datasets()
    from reasoning_gym.factory import create_dataset

    try:
        with _quiet():
            if len(specs) == 1:
                name, _, config = specs[0]
                return create_dataset(name, size=size, seed=seed, **config)
            from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

            parts = [DatasetSpec(name=n, weight=w, config=dict(c)) for n, w, c in specs]
            return CompositeDataset(CompositeConfig(size=size, seed=seed, datasets=parts))
    except Exception as exc:  # noqa: BLE001 - a generator that cannot start is a config problem
        names = ", ".join(n for n, _, _ in specs)
        raise RlvrError(f"task {TASK!r}: reasoning-gym could not build {names}: {type(exc).__name__}: {exc}") from None


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# Questions of fully generated train splits, by (specs, size, seed): the test split of the same
# options drops what is in there. Kept for the last few option sets only.
_TRAIN_QUESTIONS: OrderedDict[str, frozenset] = OrderedDict()
_TRAIN_LOCK = threading.Lock()


def _train_key(specs, size: int, seed: int) -> str:
    return json.dumps([specs, size, seed], sort_keys=True)


def _remember_train(key: str, digests: frozenset) -> None:
    with _TRAIN_LOCK:
        _TRAIN_QUESTIONS[key] = digests
        _TRAIN_QUESTIONS.move_to_end(key)
        while len(_TRAIN_QUESTIONS) > 4:
            _TRAIN_QUESTIONS.popitem(last=False)


def _train_questions(specs, size: int, seed: int) -> frozenset:
    key = _train_key(specs, size, seed)
    with _TRAIN_LOCK:
        cached = _TRAIN_QUESTIONS.get(key)
    if cached is not None:
        return cached
    ds = _build(specs, size, seed)
    digests = set()
    for index in range(size):
        with _quiet():
            digests.add(_digest(ds[index]["question"]))
    frozen = frozenset(digests)
    _remember_train(key, frozen)
    return frozen


def _rows(specs, split: str, size: int, seed: int, dedup: bool) -> Iterator[dict]:
    split_seed = seed + (TEST_SEED_OFFSET if split == "test" else 0)
    ds = _build(specs, size, split_seed)
    configs = {name: config for name, _, config in specs}
    seen = set(_train_questions(specs, size, seed)) if split == "test" and dedup else None
    train_digests = set() if split == "train" else None
    for index in range(size):
        with _quiet():
            item = ds[index]
        question = str(item["question"])
        if seen is not None:
            digest = _digest(question)
            if digest in seen:
                continue  # in the train split, or already in this one
            seen.add(digest)
        if train_digests is not None:
            train_digests.add(_digest(question))
        metadata = item.get("metadata") or {}
        source = metadata.get("source_dataset") or specs[0][0]
        gold = item.get("answer")
        entry = {**item, "rlvr": {"dataset": source, "config": configs.get(source, {})}}
        yield {
            "id": f"{TASK}/{source}/{split}/{index}",
            "question": question,
            "answer": "" if gold is None else str(gold),
            "entry": dumps_entry(entry),
            "dataset": source,
        }
    if train_digests is not None:
        _remember_train(_train_key(specs, size, seed), frozenset(train_digests))


def reasoning_gym_task(
    split: str,
    *,
    data_dir,
    dataset: str | None = None,
    datasets: Any = None,
    size: int = 1000,
    seed: int = 0,
    config: dict | None = None,
    dedup: bool = True,
) -> Iterator[dict]:
    """reasoning-gym procedural puzzles (options: dataset or datasets, size, seed, config, dedup).

    ``dataset``: a reasoning-gym dataset name (``python -m rlvr_reasoning_gym`` lists them),
    built as ``reasoning_gym.create_dataset(dataset, size=size, seed=..., **config)``.
    ``datasets``: a weighted mix instead, ``{gsm_symbolic: 2, chain_sum: 1}`` or
    ``[{name: chain_sum, weight: 1, config: {max_terms: 4}}]`` (reasoning-gym's CompositeDataset).

    Rows: ``id``, ``question``, ``answer`` (the gold answer as a string; "" for the
    datasets that have no single answer and verify instead), ``dataset`` (the source
    dataset's name) and ``entry`` (the whole reasoning-gym entry, metadata included, as
    JSON; see :func:`loads_entry`), which the ``reasoning_gym`` reward scores against.

    Splits: train is generated with ``seed``, test with ``seed + 10_000_019`` -- disjoint
    random streams for any ``size`` below that. With ``dedup`` (default), the test split
    also drops every question that is in the train split of the same options or earlier
    in the test split, so a question is never both trained on and evaluated, and test has
    at most ``size`` rows (fewer for datasets with a small space of questions). That needs
    the train questions: generated once per process (or reused from this process's train
    load). Items are deterministic for a given seed, size, config and reasoning-gym version.
    """
    del data_dir  # generated, not read
    if split not in SPLITS:
        raise RlvrError(f"task {TASK!r} has splits train and test, not {split!r}")
    for option, value in (("size", size), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise RlvrError(f"task {TASK!r}: {option} must be an integer, got {value!r}")
    if not 1 <= size < TEST_SEED_OFFSET:
        raise RlvrError(f"task {TASK!r}: size must be between 1 and {TEST_SEED_OFFSET - 1}, got {size}")
    if seed < 0:
        raise RlvrError(f"task {TASK!r}: seed must be >= 0, got {seed}")
    if not isinstance(dedup, bool):
        raise RlvrError(f"task {TASK!r}: dedup must be true or false, got {dedup!r}")
    specs = _specs(dataset, datasets, config)  # checked now, not at the first row
    return _rows(specs, split, size, seed, dedup)


# --------------------------------------------------------------------------- reward: host side


def find_answer(text: str, mode: str = "answer_tag") -> str | None:
    """The answer in a completion (after the last ``</think>``), by mode; None when absent.

    ``answer_tag``: the last ``<answer>...</answer>``, stripped (reasoning-gym's convention);
    ``boxed``: the last ``\\boxed{...}``; ``last_number``: the last number; ``raw``: all of it.
    """
    cut = text.rfind("</think>")
    text = text if cut < 0 else text[cut + len("</think>") :]
    if mode == "answer_tag":
        lower = text.lower()
        end = lower.rfind("</answer>")
        start = lower.rfind("<answer>", 0, max(end, 0))
        if end < 0 or start < 0:
            return None
        return text[start + len("<answer>") : end].strip() or None
    if mode == "raw":
        return text.strip() or None
    from rlvr_plugins.math import extract_answer

    if mode == "boxed":
        return extract_answer(text, "boxed")
    if mode == "last_number":
        return extract_answer(text, "last_number")
    raise ValueError(f"unknown extract mode {mode!r}")


def _parse_entry(raw: Any) -> tuple[str, dict, dict] | str:
    """(dataset name, config, reasoning-gym entry) from the ``entry`` column, or why not."""
    if raw is None:
        return "no entry"
    if isinstance(raw, str):
        try:
            entry = loads_entry(raw)
        except (ValueError, TypeError) as exc:
            return f"entry is not valid JSON: {exc}"
    else:
        entry = raw
    if not isinstance(entry, dict) or "question" not in entry or "answer" not in entry:
        return "entry is not a reasoning-gym entry (question, answer, metadata)"
    entry = dict(entry)
    ours = entry.pop("rlvr", None)
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    name = ours.get("dataset") if isinstance(ours, dict) else None
    name = name or metadata.get("source_dataset")
    if not isinstance(name, str) or not name:
        return "entry names no dataset (rlvr.dataset or metadata.source_dataset)"
    config = ours.get("config") if isinstance(ours, dict) else None
    if config is None:
        config = {}
    if not isinstance(config, dict):
        return "entry's rlvr.config is not a mapping"
    return name, config, entry


def _pool(workers: int):
    """The shared checker pool of that size (0: the CPU count clamped to 2..8)."""
    return shared_pool(workers, "rlvr_reasoning_gym:_init_worker", memory_limit_mb=2048)


def reasoning_gym_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    completion_ids: Sequence[Any] | None,
    *,
    entry: Sequence[Any],
    extract: ExtractMode = "answer_tag",
    partial_credit: bool = True,
    timeout: Annotated[float, Gt(0)] = 5.0,
    max_answer_chars: Annotated[int, Ge(1)] = 10_000,
    workers: Annotated[int, Ge(0)] = 0,
) -> list[Score]:
    """reasoning-gym's own score_answer for the row's entry, on the answer in <answer></answer>.

    Options: ``extract`` = "answer_tag" (reasoning-gym's ``<answer>..</answer>``), "boxed",
    "last_number" or "raw" (the whole completion); ``partial_credit`` = keep reasoning-gym's
    fractional scores (e.g. 0.01 for a well-formed wrong answer) or, when false, 1.0 only for
    a full score; ``timeout`` = hard limit in seconds per sample (some scorers run sympy);
    ``max_answer_chars`` = longer answers score 0 unchecked; ``workers`` = checker processes
    (0: automatic). Values: the scorer's value in [0, 1]; 0.0 with a reason when there is no
    answer or the scorer fails on it; None when the entry is missing or unreadable.
    """
    mode = extract  # the option; the module-level helper is find_answer
    if mode not in EXTRACT_MODES:
        raise RlvrError(f"reasoning_gym reward: extract must be one of {', '.join(EXTRACT_MODES)}, got {mode!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise RlvrError(f"reasoning_gym reward: timeout must be a positive number of seconds, got {timeout!r}")
    if len(entry) != len(completions):
        raise RlvrError(f"reasoning_gym reward: {len(completions)} completions but {len(entry)} entries")
    scores: list[Score | None] = [None] * len(completions)
    jobs: list[tuple[int, tuple]] = []
    soft = soft_seconds(timeout)
    for i, (completion, raw) in enumerate(zip(completions, entry)):
        parsed = _parse_entry(raw)
        if isinstance(parsed, str):
            scores[i] = Score(None, {"why": parsed})
            continue
        name, config, rg_entry = parsed
        gold = rg_entry.get("answer")
        info = {"answer": None, "gold": gold, "dataset": name}
        try:
            answer = find_answer(completion_text(completion), mode)
        except Exception as exc:  # noqa: BLE001 - a strange completion scores 0, never raises
            scores[i] = Score(0.0, {**info, "why": f"could not read the completion: {type(exc).__name__}: {exc}"})
            continue
        if answer is None:
            what = {"answer_tag": "no <answer>...</answer>", "boxed": "no \\boxed{}", "last_number": "no number"}
            scores[i] = Score(0.0, {**info, "why": f"{what.get(mode, 'nothing')} in the completion"})
            continue
        info["answer"] = answer
        if len(answer) > int(max_answer_chars):
            scores[i] = Score(0.0, {**info, "answer": answer[:200] + "...", "why": f"answer longer than {max_answer_chars} characters"})
            continue
        try:
            config_json = json.dumps(config, sort_keys=True)
        except (TypeError, ValueError):
            scores[i] = Score(None, {**info, "why": "entry's rlvr.config is not plain JSON"})
            continue
        jobs.append((i, (name, config_json, answer, rg_entry, soft), info))
    if jobs:
        results = map_with_deadline(_pool(int(workers)), _score_item, [job for _, job, _ in jobs],
                                    timeout=float(timeout), reward="reasoning_gym")
        for (i, _, info), result in zip(jobs, results):
            if result.ok:
                value, why = result.value["value"], result.value["why"]
            else:
                value, why = unfinished(result, timeout, "scoring")
            info = {**info, "why": why}
            if value is not None and not partial_credit:
                info["score"] = value
                value = 1.0 if value >= 1.0 - 1e-9 else 0.0
            scores[i] = Score(value, info)
    return scores  # type: ignore[return-value]


# --------------------------------------------------------------------------- reward: worker side

_DATASETS: OrderedDict[tuple[str, str], Any] = OrderedDict()


def _init_worker() -> None:
    """Worker initializer: import reasoning-gym once; its prints go nowhere."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the worker
    import reasoning_gym  # noqa: F401


def _dataset(name: str, config_json: str):
    key = (name, config_json)
    ds = _DATASETS.get(key)
    if ds is None:
        from reasoning_gym.factory import create_dataset

        ds = create_dataset(name, size=1, seed=0, **json.loads(config_json))
        _DATASETS[key] = ds
        while len(_DATASETS) > 64:
            _DATASETS.popitem(last=False)
    else:
        _DATASETS.move_to_end(key)
    return ds


def _score_item(item: tuple) -> dict:
    """In a worker: {"value": float | None, "why": str} for one (dataset, config, answer, entry)."""
    name, config_json, answer, entry, soft = item
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS or name == "composite":
        close = difflib.get_close_matches(name, list(DATASETS), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return {"value": None, "why": f"unknown reasoning-gym dataset {name!r}{hint}"}
    try:
        ds = _dataset(name, config_json)
    except Exception as exc:  # noqa: BLE001 - the entry's config, not the completion
        return {"value": None, "why": f"cannot rebuild dataset {name!r}: {type(exc).__name__}: {exc}"}
    try:
        with soft_limit(soft):  # a BaseException: the scorer's own `except Exception` cannot swallow it
            value = ds.score_answer(answer, entry)
    except SoftTimeout:
        return {"value": 0.0, "why": f"scoring took longer than {soft:.2f} s"}
    except Exception as exc:  # noqa: BLE001 - the scorer choked on this answer
        return {"value": 0.0, "why": f"reasoning-gym's scorer raised {type(exc).__name__}: {str(exc)[:200]}"}
    try:
        value = float(value)
    except (TypeError, ValueError):
        return {"value": None, "why": f"reasoning-gym's scorer returned {value!r}, not a number"}
    if not math.isfinite(value):
        return {"value": None, "why": f"reasoning-gym's scorer returned {value!r}"}
    if value >= 1.0:
        why = "correct"
    elif value > 0:
        why = f"partial credit {value:g} from reasoning-gym's scorer"
    else:
        why = "wrong"
    return {"value": value, "why": why}


# --------------------------------------------------------------------------- registration


@hookimpl
def rlvr_register_tasks(register):
    register(TASK, reasoning_gym_task, columns=["id", "question", "answer", "entry", "dataset"], splits=SPLITS)


@hookimpl
def rlvr_register_rewards(register):
    register(TASK, reasoning_gym_reward)
