"""Experiment trackers (``trainer.report_to``): every step's metrics row, numbered as everywhere
else (from 1), to TensorBoard, Weights & Biases or trackio (local-first, wandb's API).

Each named tracker must be installed: ``check_trackers`` refuses a missing one with one line,
before any model loads. Without ``report_to`` (None), TensorBoard is used when it is installed
and nothing otherwise. Only rank 0 reports. The project is the recipe's name, the run the
output folder's name, the configuration the whole recipe.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr import RlvrError
from rlvr.kit.text import install_line

# tracker -> (its module, what installs it: rlvr's extra of that name, at the version it is tested with)
TRACKERS = {name: (name, install_line(name)) for name in ("wandb", "trackio")}
TRACKERS["tensorboard"] = ("tensorboard", "pip install tensorboard")  # a dependency of rlvr's


def _installed(name: str) -> bool:
    return importlib.util.find_spec(TRACKERS[name][0]) is not None


def check_trackers(names: Sequence[str] | None) -> list[str]:
    """The trackers a run reports to: ``names`` (each must be installed, else a one-line
    ``RlvrError`` saying how to install it), or with None TensorBoard when it is installed."""
    if names is None:
        return ["tensorboard"] if _installed("tensorboard") else []
    for name in names:
        if name not in TRACKERS:
            raise RlvrError(f"trainer.report_to: unknown tracker {name!r}; one of {', '.join(TRACKERS)}")
        if not _installed(name):
            raise RlvrError(f"trainer.report_to names {name!r}, which is not installed: {TRACKERS[name][1]}; "
                            "or leave it out of trainer.report_to")
    return list(dict.fromkeys(names))


class Trackers:
    """The run's trackers: ``log(row)`` after each step, ``close()`` at the end."""

    def __init__(self, names: Sequence[str], *, output_dir: Path, project: str, config: Mapping[str, Any],
                 enabled: bool = True):
        self.names, self.backends = list(names) if enabled else [], {}
        output_dir = Path(output_dir)
        for name in self.names:
            if name == "tensorboard":
                from torch.utils.tensorboard import SummaryWriter

                self.backends[name] = SummaryWriter(str(output_dir / "tensorboard"))
            elif name == "wandb":
                import wandb

                self.backends[name] = wandb.init(project=project, name=output_dir.name, config=dict(config),
                                                 dir=str(output_dir), resume="allow")
            elif name == "trackio":
                import trackio

                trackio.init(project=project, name=output_dir.name, config=dict(config), resume="allow", embed=False)
                self.backends[name] = trackio

    def log(self, row: Mapping[str, Any]) -> None:
        step = int(row["step"])
        scalars = {k: float(v) for k, v in row.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        for name, backend in self.backends.items():
            if name == "tensorboard":
                for key, value in scalars.items():
                    backend.add_scalar(key, value, step)
                backend.flush()
            else:  # wandb's run and trackio share log(metrics, step=)
                backend.log(scalars, step=step)

    def close(self) -> None:
        for name, backend in self.backends.items():
            backend.close() if name == "tensorboard" else backend.finish()
        self.backends = {}
