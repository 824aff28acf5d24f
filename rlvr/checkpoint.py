"""Checkpoints: DeepSpeed's (weights, optimizer) plus each rank's RNG state and prompt-stream
position, for an exact ``--resume``; and the final model as a plain transformers folder."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import RlvrError


@dataclass
class TrainState:
    step: int = 0  # the next step to run


def check_output_dir(ckpt_dir: Path, resume: bool) -> None:
    """A new run never writes over an old one; ``--resume`` needs one to continue."""
    exists = (ckpt_dir / "latest").exists()
    if exists and not resume:
        raise RlvrError(f"{ckpt_dir.parent} already holds a run: pass --resume to continue it, "
                        "or choose another --output-dir")
    if resume and not exists:
        raise RlvrError(f"--resume: no checkpoint in {ckpt_dir}")


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rng_rank{rank}.pt"


def save_checkpoint(engine, ckpt_dir: Path, state: TrainState, *, rank: int, data_position: int, keep_last: int) -> None:
    import torch
    import torch.distributed as dist

    tag = f"step{state.step}"
    folder = ckpt_dir / tag
    # DeepSpeed writes `latest` after the weights and optimizer: a kill mid-save keeps the old one.
    # The per-rank files go first so a checkpoint that `latest` names always has them.
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"python": random.getstate(), "torch": torch.get_rng_state(), "data_position": data_position},
               _rank_file(folder, rank))
    dist.barrier()
    engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state={"train_state": state.__dict__.copy()})
    dist.barrier()
    if rank == 0:
        tags = sorted((p for p in ckpt_dir.glob("step*") if p.is_dir()), key=lambda p: int(p.name[4:]))
        for old in tags[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(engine, ckpt_dir: Path, *, rank: int) -> tuple[TrainState, int]:
    """Restore weights, optimizer and this rank's RNG; returns the state and the rank's data position."""
    import torch

    _, client = engine.load_checkpoint(str(ckpt_dir))
    saved = dict(client["train_state"])
    position = saved.pop("data_position", 0)  # where checkpoints kept one position for all ranks
    state = TrainState(**saved)
    path = _rank_file(ckpt_dir / f"step{state.step}", rank)
    if not path.exists():
        raise RlvrError(f"--resume: {path} is missing (was the run started with another number of ranks?)")
    rank_state = torch.load(path, weights_only=False)
    random.setstate(rank_state["python"])
    torch.set_rng_state(rank_state["torch"])
    return state, rank_state.get("data_position", position)


def save_final(engine, tokenizer, folder: Path, *, rank: int, zero3: bool, lora: bool) -> None:
    """A plain transformers folder that `rlvr eval --model` (and vLLM) can load."""
    module = engine.module
    if lora:
        module = module.merge_and_unload()
    if zero3:
        state = engine._zero3_consolidated_16bit_state_dict()  # noqa: SLF001 - DeepSpeed's documented way
    else:
        state = module.state_dict()
    if rank == 0:
        module.save_pretrained(folder, state_dict=state)
        tokenizer.save_pretrained(folder)
