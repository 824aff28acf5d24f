"""Model names: hub ids, local folders, and aliases for models that ship on PyPI.

An alias (``smollm2-135m-instruct``, ``qwen2.5-coder-0.5b-instruct``, ...) names a GGUF file
published on PyPI; :mod:`rlvr.models.pull` turns it into a transformers folder in the user cache
the first time it is used.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from rlvr import RlvrError
from rlvr.models.adapters import check_adapter_folder, is_adapter_folder, merged_copy, root_base
from rlvr.models.pull import MODELS as ALIASES
from rlvr.models.pull import model_dir, pull_model


def resolve_model(name: str, pull: bool = True) -> str:
    """A path or hub id transformers and vLLM can load; pulls an alias on first use, and merges
    an adapter folder into its base model on first use (``rlvr.models.adapters``)."""
    if name in ALIASES:
        folder = model_dir(name)
        if not (folder / "config.json").exists():
            if not pull:
                raise RlvrError(f"model {name!r} is not pulled yet: run `rlvr model pull {name}`")
            pull_model(name)
        return str(folder)
    if os.path.isdir(name) or not os.path.isabs(name) and os.path.isdir(os.path.expanduser(name)):
        folder = Path(name).expanduser()
        if is_adapter_folder(folder):  # a LoRA run's final/: its base with the adapter merged in
            base = check_adapter_folder(folder)
            check_model_name(base)
            return merged_copy(folder, base, resolve_model(base, pull=pull), pull=pull)
        return str(folder)
    if name.startswith((".", "/", "~")):
        raise RlvrError(f"model folder not found: {name}")
    return name  # a hub id


KINDS = (f"a model is an alias ({', '.join(ALIASES)}), a folder (a model's, or a LoRA run's adapter), "
         "or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct")


def check_model_name(name: str) -> None:
    """Refuse, before anything loads, a model name that cannot be right: a path to a folder
    that does not exist or is not a transformers model folder, or a bare name (no ``org/``) that
    is not an alias but the start of one or close to one (it would be looked up on the hub).
    Whether a hub id can be had here is :func:`check_model_at_hand`'s (a recipe validates
    anywhere); a hub id that can be reached is checked when loaded (:func:`load_tokenizer`)."""
    if name in ALIASES:
        return
    folder = Path(name).expanduser()
    if folder.is_dir():
        if is_adapter_folder(folder):  # every adapter of its chain checked; then the model at its end
            check_model_name(root_base(folder))
            return
        if not (folder / "config.json").is_file():
            raise RlvrError(f"model folder {name}: no config.json in it (not a transformers model folder)")
        pickled = pickled_weights(folder)
        if pickled:
            raise RlvrError(f"model folder {name} holds pickled weights ({pickled}); rlvr loads safetensors only "
                            "(unpickling can run code): convert it where you trust it, e.g. "
                            "from_pretrained(...).save_pretrained(folder, safe_serialization=True)")
        return
    if name.startswith((".", "/", "~")):
        raise RlvrError(f"model folder not found: {name}")
    close = alias_like(name)
    if close:
        which = f"the alias {close[0]!r}" if len(close) == 1 else f"one of the aliases {', '.join(map(repr, close))}"
        raise RlvrError(f"unknown model {name!r}: did you mean {which}? ({KINDS})")


def check_model_at_hand(name: str) -> None:
    """Before a run (after its rows are checked, before anything loads): refuse a hub id that is
    not in the hub cache while the hub cannot be reached (transformers spent 52 s on retries
    before it said so). Aliases (pulled without the hub) and folders pass."""
    problem = hub_problem(name)
    if problem:
        raise RlvrError(f"{problem} ({KINDS}; a hub id is downloaded once where the hub can be reached)")


def local_folder(name: str) -> Path | None:
    """The folder model ``name`` is read from when it is on this machine, without pulling,
    merging or the network: a pulled alias's, a model folder, a hub id's snapshot in the hub
    cache, an adapter folder's model at the end of its chain of bases (LoRA leaves the
    embeddings as they were); None for anything else."""
    if name in ALIASES:
        folder = model_dir(name)
        return folder if (folder / "config.json").exists() else None
    folder = Path(name).expanduser()
    if folder.is_dir():
        return local_folder(root_base(folder)) if is_adapter_folder(folder) else folder
    config = _cached_config(name)
    return Path(config).parent if config else None


def hub_problem(name: str) -> str | None:
    """Why the model ``name`` cannot be had on this machine now: a hub id not in the hub cache
    while the hub is unreachable or HF_HUB_OFFLINE is set; None for one that can, an alias
    (pulled without the hub) or a folder."""
    folder = Path(name).expanduser()
    if folder.is_dir() and is_adapter_folder(folder):  # a hub id at the end of its chain of bases must be at hand
        return hub_problem(root_base(folder))
    if name in ALIASES or folder.is_dir() or in_hub_cache(name):
        return None
    from rlvr.kit.data import hub_reachable

    if os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0") and hub_reachable():
        return None
    same = [alias for alias, model in ALIASES.items() if model.upstream.lower() == name.lower()]
    instead = f"; the alias {same[0]!r} is this model, pulled without the hub" if same else ""
    return f"model {name!r}: the hub cannot be reached and the hub cache does not hold it{instead}"


def alias_like(name: str) -> list[str]:
    """The aliases a bare ``name`` likely means: those it starts, the alias of the hub model it
    names without its ``org/``, or a near miss; none for a name with ``org/`` or like none."""
    if "/" in name:
        return []
    lowered = name.lower()
    found = [alias for alias, model in ALIASES.items()
             if alias.startswith(lowered) or model.upstream.split("/")[-1].lower() == lowered]
    return found or difflib.get_close_matches(lowered, list(ALIASES), n=1, cutoff=0.75)


def in_hub_cache(repo_id: str) -> bool:
    """Is the hub model ``repo_id``'s config in the local hub cache?"""
    return _cached_config(repo_id) is not None


def _cached_config(repo_id: str) -> str | None:
    """The path of the hub model ``repo_id``'s config in the local hub cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid repo id
        return None
    return config if isinstance(config, str) else None


# Weight files torch writes with pickle; transformers and vLLM fall back to them without safetensors.
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def pickled_weights(folder: Path) -> str | None:
    """The name of a pickled weights file in a model folder that has no ``*.safetensors`` (those
    would be loaded instead), or None. rlvr loads models with ``use_safetensors=True`` and vLLM
    with ``load_format="safetensors"``: this says so in one line before either starts."""
    if any(folder.glob("*.safetensors")):
        return None
    found = sorted(path.name for pattern in PICKLED_WEIGHTS for path in folder.glob(pattern))
    return found[0] if found else None


def load_tokenizer(path: str, name: str | None = None):
    """The tokenizer of a model folder or hub id; one line, not a traceback, when it cannot be
    had (no such hub id, the hub unreachable offline, a broken folder)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RlvrError(f"model {name or path!r} cannot be loaded: {first[:200]}") from None
