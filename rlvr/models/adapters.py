"""LoRA adapter folders: what a LoRA run's ``final/`` holds, and how every ``--model`` loads one.

A LoRA run saves its adapter as a PEFT folder (``adapter_config.json``,
``adapter_model.safetensors``: megabytes, not the base model's gigabytes), its tokenizer, and
``rlvr_adapter.json`` naming the base model as the recipe named it (an alias, a hub id, or a
folder as an absolute path), so that the folder can be handed to someone whose cache holds the
alias elsewhere. PEFT and anything built on it load the folder as it is
(``PeftModel.from_pretrained``; its ``base_model_name_or_path`` is the base's folder on the
machine that trained it).

rlvr itself loads an adapter folder wherever it takes a model (``rlvr eval/train/sampler
--model``, the Python API) as the base model with the adapter merged in: the merged copy is made
once, in the base model's own dtype, under ``<cache>/merged/`` (keyed by the adapter's bytes and
its base), and reused; the :data:`KEEP_MERGED` most recently used copies are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from rlvr import RlvrError

ADAPTER_NOTE = "rlvr_adapter.json"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
KEEP_MERGED = 3

log = logging.getLogger("rlvr.models.adapters")


def is_adapter_folder(folder: Path) -> bool:
    """A PEFT adapter folder rather than a whole model's (which has a ``config.json``)."""
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def base_name(name: str) -> str:
    """How an adapter's note names the base model the recipe named ``name``: aliases and hub ids
    as they are, a folder by its absolute path (the note must mean the same from any directory)."""
    from rlvr.models.pull import MODELS

    folder = Path(name).expanduser()
    if name in MODELS or not folder.is_dir():
        return name
    return str(folder.resolve())


def adapter_base(folder: Path) -> str:
    """The base model of the adapter folder ``folder``: its rlvr note's name, else PEFT's
    ``base_model_name_or_path``; one line when neither can be read."""
    for file, key in ((ADAPTER_NOTE, "base"), (ADAPTER_CONFIG, "base_model_name_or_path")):
        path = folder / file
        if not path.is_file():
            continue
        try:
            value = json.loads(path.read_text()).get(key)
        except (ValueError, UnicodeDecodeError, AttributeError):
            raise RlvrError(f"adapter folder {folder}: {file} is not a JSON object") from None
        if isinstance(value, str) and value.strip():
            return value
    raise RlvrError(f"adapter folder {folder}: neither {ADAPTER_NOTE} nor {ADAPTER_CONFIG} names its base model")


def check_adapter_folder(folder: Path) -> str:
    """Refuse an adapter folder rlvr would not load (pickled weights, none, no base named, a base
    that is the folder itself); its base model's name."""
    if not (folder / ADAPTER_WEIGHTS).is_file():
        pickled = sorted(p.name for p in folder.glob("adapter_model.*"))
        if pickled:
            raise RlvrError(f"adapter folder {folder} holds pickled weights ({pickled[0]}); rlvr loads safetensors "
                            "only (unpickling can run code): save it again with safe_serialization=True")
        raise RlvrError(f"adapter folder {folder}: no {ADAPTER_WEIGHTS} in it")
    base = adapter_base(folder)
    if Path(base).expanduser().resolve() == folder.resolve():
        raise RlvrError(f"adapter folder {folder} names itself as its base model")
    return base


def root_base(folder: Path, limit: int = 8) -> str:
    """The model at the end of an adapter folder's chain of bases (an adapter trained on a LoRA
    run's ``final/`` names that folder as its base): a name that is not an adapter folder. Each
    folder is checked (:func:`check_adapter_folder`); a loop, or more than ``limit`` links, is one line."""
    seen = [folder.resolve()]
    while True:
        base = check_adapter_folder(Path(seen[-1]))
        path = Path(base).expanduser()
        if not (path.is_dir() and is_adapter_folder(path)):
            return base
        if path.resolve() in seen or len(seen) >= limit:
            chain = " -> ".join(map(str, [*seen, path.resolve()]))
            why = "form a loop" if path.resolve() in seen else f"go on past {limit} adapters"
            raise RlvrError(f"adapter folder {folder}: its base models {why} ({chain})")
        seen.append(path.resolve())


def merged_copy(folder: Path, base: str, base_path: str, *, pull: bool = True) -> str:
    """The folder of the adapter ``folder``'s base model (``base``, :func:`check_adapter_folder`'s;
    loaded from ``base_path``) with the adapter merged in, made on first use (rank 0 and ``rlvr``
    commands; ``pull=False``, for the ranks that follow, only finds it)."""
    from rlvr.kit.data import cache_dir

    digest = hashlib.sha256()
    for part in (folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS):
        digest.update(part.read_bytes())
    digest.update(base.encode())
    target = cache_dir() / "merged" / digest.hexdigest()[:20]
    if (target / "config.json").is_file():
        os.utime(target)  # most recently used
        return str(target)
    if not pull:
        raise RlvrError(f"adapter folder {folder}: its merged copy {target} is not there")
    log.info(f"merging the adapter {folder} into its base model {base} (once; kept in {target})")
    merge_into(folder, base_path, target)
    _forget_old_copies(target.parent)
    return str(target)


def merge_into(folder: Path, base_path: str, target: Path) -> None:
    """Write the base model at ``base_path`` with the adapter ``folder`` merged in to ``target``,
    in the base's own dtype, with the adapter folder's tokenizer (the base's when it has none);
    whole or not at all."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.pull import save_model

    base = AutoModelForCausalLM.from_pretrained(base_path, dtype="auto", use_safetensors=True)
    try:
        merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    except (ValueError, KeyError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RlvrError(f"adapter folder {folder} does not fit its base model {base_path}: {first[:200]}") from None
    has_tokenizer = (folder / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(str(folder) if has_tokenizer else base_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    save_model(merged, tokenizer, target)


def _forget_old_copies(merged_dir: Path) -> None:
    copies = sorted((p for p in merged_dir.iterdir() if p.is_dir() and not p.name.endswith(".partial")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in copies[KEEP_MERGED:]:
        shutil.rmtree(old, ignore_errors=True)


def save_adapter(module, tokenizer, folder: Path, base: str) -> None:
    """A peft ``module``'s adapter as a PEFT folder at ``folder``, with ``tokenizer`` and the note
    naming ``base`` (:func:`base_name`)."""
    from rlvr.kit import write_replacing

    module.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    write_replacing(folder / ADAPTER_NOTE, json.dumps({"base": base_name(base)}, indent=2) + "\n")


__all__ = ["ADAPTER_NOTE", "adapter_base", "check_adapter_folder", "is_adapter_folder", "merged_copy", "root_base",
           "save_adapter"]
