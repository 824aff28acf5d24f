"""Checkpoints: DeepSpeed's (weights, optimizer) plus each rank's RNG state and prompt-stream
position (and prompt-pool state), for an exact ``--resume``; and the final model as a plain
transformers folder.

A checkpoint folder is data, never code: ``--resume`` reads rlvr's own files as JSON and
DeepSpeed's with ``torch.load(weights_only=True)`` (see :func:`weights_only_loads`), so a
tampered folder is refused instead of running what its pickles name."""

from __future__ import annotations

import json
import pickle
import random
import re
import shutil
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr import RlvrError
from rlvr.kit import write_replacing
from rlvr.kit.data import parse_json
from rlvr.kit.files import modes_follow_umask
from rlvr.models.adapters import ADAPTER_CONFIG, save_adapter
from rlvr.runs.logs import signal_notice
from rlvr.runs.outputs import run_outputs_in
from rlvr.training.pool import check_state as check_pool_state


@dataclass
class TrainState:
    step: int = 0  # the next step to run
    pool: dict | None = None  # the prompt pool's state (rlvr.training.pool) a resumed run continues from


def check_output_dir(output_dir: Path, resume: bool) -> None:
    """A new run never writes into another run's folder (its metrics would go on after the old
    rows, its TensorBoard file beside theirs); ``--resume`` needs a checkpoint to continue from.
    Logs and the user's own files do not count (``rlvr.runs.outputs.RUN_OUTPUTS``)."""
    checkpoint = (output_dir / "checkpoints" / "latest").exists()
    found = run_outputs_in(output_dir)
    if checkpoint and not resume:
        raise RlvrError(f"{output_dir} already holds a run: pass --resume to continue it, "
                        "or choose another --output-dir")
    where = "--resume: " if resume else ""
    if found and not checkpoint and any((output_dir / "final" / f).is_file() for f in ("config.json", ADAPTER_CONFIG)):
        raise RlvrError(f"{where}{output_dir} holds a finished run without checkpoints (trainer.final_checkpoint: "
                        f"none removes them): choose another --output-dir; to train its model further, start "
                        f"from it with --model {output_dir / 'final'}")
    if found and not checkpoint:
        raise RlvrError(f"{where}{output_dir} holds the output of a run ({', '.join(found[:4])}) that has no "
                        "checkpoint to resume: the steps it logged were not saved; choose another --output-dir, "
                        "or remove that run's files first")
    if resume and not checkpoint:
        raise RlvrError(f"--resume: no checkpoint in {output_dir / 'checkpoints'}")


class RunStopped(KeyboardInterrupt):
    """Training stopped on SIGINT or SIGTERM; the message says what ``--resume`` will continue
    from. A KeyboardInterrupt, so that a notebook shows the cell interrupted as it would be."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum  # the CLI exits with 128 + signum


def resume_note(ckpt_dir: Path) -> str:
    """Which checkpoint ``--resume`` would continue from, in words."""
    try:
        tag = latest_tag(ckpt_dir)
    except (OSError, RlvrError):
        return "there is no checkpoint yet, so --resume cannot continue this run (the steps logged were not saved)"
    return f"the same command with --resume continues from {ckpt_dir / tag}"


class StopRequest:
    """SIGINT and SIGTERM while inside :func:`stop_requests`: the first asks training to stop after
    the step in progress, saving a checkpoint; a second stops at once (:class:`RunStopped`)."""

    def __init__(self, ckpt_dir: Path):
        self.ckpt_dir, self.signum = ckpt_dir, None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame) -> None:
        """Nothing here logs: the notice goes out by ``signal_notice`` (the main thread may be
        inside a write to the log)."""
        import signal

        name = signal.Signals(signum).name
        if self.signum is not None:
            self.release()
            raise RunStopped(f"stopped at once ({name}): {resume_note(self.ckpt_dir)}", signum)
        self.signum = signum
        again = "Ctrl-C" if signum == signal.SIGINT else f"a second {name}"
        signal_notice(f"{name}: stopping after this step, then saving a checkpoint; {again} again to stop now")

    def install(self) -> None:
        """Outside the main thread (signals reach only it), or where a signal is ignored (a
        background job), nothing changes."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(sig)
            if previous is not signal.SIG_IGN and previous is not None:
                self._previous[sig] = signal.signal(sig, self._handle)

    def release(self) -> None:
        """The handlers there were before: a signal from now on acts as it did."""
        import signal

        while self._previous:
            sig, handler = self._previous.popitem()
            signal.signal(sig, handler)

    def agreed(self) -> bool:
        """Does any rank stop here? Every rank calls it at the same step and gets the same answer."""
        from rlvr.models.distributed import reduce_sums

        return reduce_sums({"stop_requested": float(self.signum is not None)})["stop_requested"] > 0

    def stopped(self, step: int, total: int) -> RunStopped:
        """What a run that stopped after ``step`` (its checkpoint saved) raises."""
        import signal

        signum = self.signum or signal.SIGINT  # another rank's signal
        return RunStopped(f"stopped after step {step} of {total} ({signal.Signals(signum).name}): "
                          f"{resume_note(self.ckpt_dir)}", signum)


@contextmanager
def stop_requests(ckpt_dir: Path):
    """A :class:`StopRequest` installed while inside; the previous handlers come back on the way out."""
    request = StopRequest(ckpt_dir)
    request.install()
    try:
        yield request
    finally:
        request.release()


RANK_STATE_FORMAT = 2  # 1: pickled ``rng_rank{r}.pt`` files, which --resume no longer reads


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rlvr_rank{rank}.json"


def _old_rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rng_rank{rank}.pt"


@dataclass(frozen=True)
class RankState:
    """What one rank needs beyond DeepSpeed's files to go on exactly where it stopped."""

    step: int
    data_position: int
    python_rng: tuple  # random.getstate(): (version, 625 ints, gauss_next)
    torch_rng: list[int]  # torch.get_rng_state() as bytes
    pool: dict | None = None  # PromptPool.state() under data.pool (absent from older files: None)


def encode_rank_state(state: RankState) -> dict:
    """``state`` as JSON data: nothing in a checkpoint we write is unpickled to resume."""
    version, internal, gauss_next = state.python_rng
    data = {"format": RANK_STATE_FORMAT, "step": state.step, "data_position": state.data_position,
            "python_rng": [version, list(internal), gauss_next], "torch_rng": list(state.torch_rng)}
    if state.pool is not None:
        data["pool"] = state.pool
    return data


def decode_rank_state(data: Any) -> RankState:
    """The inverse of :func:`encode_rank_state`; ValueError when ``data`` is not one."""
    if not isinstance(data, dict) or data.get("format") != RANK_STATE_FORMAT:
        raise ValueError(f"not an rlvr rank state of format {RANK_STATE_FORMAT}")
    step, position, python_rng, torch_rng = (data.get(k) for k in ("step", "data_position", "python_rng", "torch_rng"))
    if not all(type(v) is int and v >= 0 for v in (step, position)):
        raise ValueError("step and data_position must be non-negative integers")
    if not (isinstance(torch_rng, list) and all(type(b) is int and 0 <= b < 256 for b in torch_rng)):
        raise ValueError("torch_rng must be a list of bytes")
    if not (isinstance(python_rng, list) and len(python_rng) == 3 and isinstance(python_rng[1], list)):
        raise ValueError("python_rng must be [version, [ints], gauss_next]")
    python_state = (python_rng[0], tuple(python_rng[1]), python_rng[2])
    try:
        random.Random().setstate(python_state)  # checked on a scratch generator, not the global one
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"python_rng: {exc}") from None
    pool = data.get("pool")
    if pool is not None:
        check_pool_state(pool)
        if pool["position"] != position:
            raise ValueError(f"pool: position {pool['position']} is not data_position {position}")
    return RankState(step, position, python_state, torch_rng, pool)


def write_json_atomic(path: Path, data: dict) -> None:
    """A kill mid-write leaves the old file or none, never half of one."""
    write_replacing(path, json.dumps(data))


def save_checkpoint(engine, ckpt_dir: Path, state: TrainState, *, rank: int, data_position: int, keep_last: int,
                    pool: dict | None = None) -> None:
    """``data_position`` (and ``pool``, the prompt pool's state) as of the last batch trained.
    Frozen parameters (a LoRA run's base model) are left out: the base is the model the run
    names, loaded again on ``--resume``; the checkpoint holds what training changes."""
    import torch
    import torch.distributed as dist

    tag = f"step{state.step}"
    folder = ckpt_dir / tag
    # DeepSpeed writes `latest` after the weights and optimizer: a kill mid-save keeps the old one.
    # The per-rank files go first so a checkpoint that `latest` names always has them.
    folder.mkdir(parents=True, exist_ok=True)
    rank_state = RankState(state.step, data_position, random.getstate(), torch.get_rng_state().tolist(), pool)
    write_json_atomic(_rank_file(folder, rank), encode_rank_state(rank_state))
    dist.barrier()
    frozen = _has_frozen(engine.module)
    with frozen_left_out(engine) if frozen else nullcontext():
        engine.save_checkpoint(str(ckpt_dir), tag=tag, exclude_frozen_parameters=frozen)
    dist.barrier()
    if rank == 0:
        tags = sorted((p for p in ckpt_dir.glob("step*") if p.is_dir()), key=lambda p: int(p.name[4:]))
        for old in tags[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)


def latest_tag(ckpt_dir: Path) -> str:
    """The checkpoint ``latest`` names: one of our ``step<N>`` folders, never a path elsewhere."""
    tag = (ckpt_dir / "latest").read_text().strip()
    if not re.fullmatch(r"step\d+", tag) or not (ckpt_dir / tag).is_dir():
        raise RlvrError(f"--resume: {ckpt_dir / 'latest'} names {tag[:80]!r}, not a checkpoint folder of this run")
    return tag


def read_rank_state(folder: Path, rank: int) -> RankState:
    path = _rank_file(folder, rank)
    if not path.exists():
        if _old_rank_file(folder, rank).exists():
            raise RlvrError(f"--resume: {folder} is a checkpoint of an older rlvr format (pickled RNG state), "
                            "which is not loaded because unpickling can run code; start a new run")
        raise RlvrError(f"--resume: {path} is missing (was the run started with another number of ranks?)")
    try:
        state = decode_rank_state(parse_json(path.read_text()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RlvrError(f"--resume: {path} is not a valid rank state ({' '.join(str(exc).split())[:200]})") from None
    if f"step{state.step}" != folder.name:
        raise RlvrError(f"--resume: {path} is for step {state.step}, not {folder.name}")
    return state


def load_checkpoint(engine, ckpt_dir: Path, *, rank: int) -> tuple[TrainState, int]:
    """Restore weights, optimizer and this rank's RNG; returns the state and the rank's data position.
    Every file is read as data: our own as JSON, DeepSpeed's with ``torch.load(weights_only=True)``."""
    import torch

    tag = latest_tag(ckpt_dir)
    saved = read_rank_state(ckpt_dir / tag, rank)  # before DeepSpeed touches the model
    frozen = _has_frozen(engine.module)
    with weights_only_loads(engine) as reads:  # frozen weights were left out (save_checkpoint)
        load_path, _ = engine.load_checkpoint(str(ckpt_dir), tag=tag, load_module_strict=not frozen)
    if load_path is None:
        raise RlvrError(f"--resume: DeepSpeed found no checkpoint in {ckpt_dir / tag}")
    missing = sorted(n for n, p in engine.module.named_parameters() if p.requires_grad and n not in reads.module_keys)
    if missing:  # not strict about the frozen ones, so the trained ones are checked here
        raise RlvrError(f"--resume: {ckpt_dir / tag} lacks {len(missing)} trained tensors of this model "
                        f"({missing[0]}, ...): was the run started with another model.lora?")
    random.setstate(saved.python_rng)
    torch.set_rng_state(torch.tensor(saved.torch_rng, dtype=torch.uint8))
    return TrainState(step=saved.step, pool=saved.pool), saved.data_position


def deepspeed_safe_globals() -> list:
    """The classes of DeepSpeed's own that its checkpoints hold besides tensors and plain data,
    listed with ``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints of
    DeepSpeed 0.19.8 (ZeRO 0/2/3, fp32/bf16/fp16, CPU offload; tests/e2e/test_training_checkpoint.py checks
    the list): loss scalers, the ZeRO stage and flat-buffer fragment addresses in optim_states."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


def load_weights_only(path, map_location=None):
    """``torch.load`` that rebuilds tensors, plain containers and :func:`deepspeed_safe_globals`
    only: a file that names any other callable is refused before anything of it runs."""
    import torch

    with torch.serialization.safe_globals(deepspeed_safe_globals()):
        try:
            return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError:
            raise RlvrError(f"--resume: {path} holds more than tensors and plain data, so it was not loaded "
                            "(altered, or written by another DeepSpeed version)") from None


class _WeightsOnlyLoads:
    """A DeepSpeed checkpoint engine whose reads are :func:`load_weights_only`; the rest is the
    wrapped engine's. DeepSpeed 0.19.8 reads every file of a (non-universal) checkpoint through
    ``engine.checkpoint_engine.load``, and ``TorchCheckpointEngine.load`` calls
    ``torch.load(..., weights_only=False)``: swapping the engine makes the one read that happens
    the safe one (no check-then-load window)."""

    def __init__(self, inner):
        self._inner = inner
        self.module_keys: set[str] = set()  # the model weights the checkpoint held

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def load(self, path: str, map_location=None):
        data = load_weights_only(path, map_location)
        if isinstance(data, dict) and isinstance(data.get("module"), dict):
            self.module_keys |= set(data["module"])
        return data


@contextmanager
def weights_only_loads(engine):
    """DeepSpeed ``engine`` reads checkpoint files as data only while inside; yields the reader,
    whose ``module_keys`` are the model weights read."""
    inner = engine.checkpoint_engine
    engine.checkpoint_engine = reads = _WeightsOnlyLoads(inner)
    try:
        yield reads
    finally:
        engine.checkpoint_engine = inner


def drop_checkpoints(ckpt_dir: Path) -> None:
    """``trainer.final_checkpoint: none``: a finished run's checkpoints go once ``final/`` is
    written; failing to remove them does not fail the run."""
    import logging

    try:
        shutil.rmtree(ckpt_dir)
    except OSError as exc:
        logging.getLogger("rlvr.training").warning(f"could not remove {ckpt_dir}: {exc.strerror}")
        return
    logging.getLogger("rlvr.training").info(f"removed {ckpt_dir} (trainer.final_checkpoint: none)")


FINAL_DTYPES = ("float32", "bfloat16", "float16")


def final_dtype(setting: str, model_name: str, model_path: str) -> str:
    """The dtype ``final/``'s full weights are saved in (``trainer.final_dtype``): for ``model``
    the base model's own, whatever the master weights were: for an alias the upstream model's
    (its pull may have widened it: bfloat16 Qwen de-quantized to float32), else its config's
    ``dtype`` (float32 when it names none)."""
    if setting != "model":
        return setting
    from transformers import AutoConfig

    from rlvr.models.pull import MODELS

    if model_name in MODELS:
        return MODELS[model_name].upstream_dtype
    dtype = getattr(AutoConfig.from_pretrained(model_path), "dtype", None)
    name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
    return name if name in FINAL_DTYPES else "float32"


def cast_state(state: dict, dtype) -> dict:
    """``state``'s floating-point tensors in ``dtype``; tensors that share storage (tied
    embeddings) still share it, so the file keeps one copy."""
    cast: dict[int, Any] = {}
    return {k: cast.setdefault(v.data_ptr(), v.to(dtype)) if v.is_floating_point() else v for k, v in state.items()}


def _has_frozen(module) -> bool:
    return any(not p.requires_grad for p in module.parameters())


@contextmanager
def frozen_left_out(engine):
    """Inside, DeepSpeed ``engine``'s checkpoints hold none of the model's frozen weights, under
    any of their names. DeepSpeed 0.19.8's ``exclude_frozen_parameters`` drops the names
    ``named_parameters()`` gives, which leaves out a tied weight's second name: a LoRA
    checkpoint of Qwen or SmolLM2 kept the frozen embedding matrix as ``lm_head.weight`` (545 MB
    of float32 for Qwen 0.5B)."""
    frozen = {n for n, p in engine.module.named_parameters(remove_duplicate=False) if not p.requires_grad}
    whole = engine.module_state_dict

    def trimmed(*args, **kwargs):
        state = whole(*args, **kwargs)
        for name in frozen:
            state.pop(name, None)
        return state

    engine.module_state_dict = trimmed
    try:
        yield
    finally:
        del engine.module_state_dict


def save_final(engine, tokenizer, folder: Path, *, rank: int, zero3: bool, lora: bool, dtype: str = "float32",
               base: str = "", merged: bool = False) -> None:
    """What `rlvr eval --model` (and vLLM, PEFT) loads, its files' modes what the umask gives a
    new file. Full training: a plain transformers folder, its weights in ``dtype``
    (:func:`final_dtype`). LoRA: the adapter (``rlvr.models.adapters.save_adapter``, naming the
    model ``base``), and in ``merged/`` the base with the adapter merged in, in ``dtype``, when
    ``merged`` (``trainer.save_merged``)."""
    import torch

    module = engine.module
    if lora:
        if rank == 0:
            save_adapter(module, tokenizer, folder, base)
            modes_follow_umask(folder, "final adapter")
            if not merged:  # a merged copy an earlier finish of this run left would not match the adapter
                shutil.rmtree(folder / "merged", ignore_errors=True)
        if not merged:
            return
        module, folder = module.merge_and_unload(), folder / "merged"
    if zero3:
        state = engine._zero3_consolidated_16bit_state_dict()  # noqa: SLF001 - DeepSpeed's documented way
    else:
        state = module.state_dict()
    if rank == 0:
        module.save_pretrained(folder, state_dict=cast_state(state, getattr(torch, dtype)))
        config = module.config.__class__.from_dict(module.config.to_dict())
        config.dtype = dtype  # save_pretrained wrote the module's own (float32 master weights)
        config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        modes_follow_umask(folder, "final model")
