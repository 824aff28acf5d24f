"""`rlvr plot`: reward, KL and completion-length curves from metrics.jsonl as one PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlvr import RlvrError
from rlvr.kit.data import parse_json

PANELS = [("reward_mean", "reward"), ("kl", "KL"), ("completion_len_mean", "completion length (tokens)"),
          ("zero_variance_frac", "zero-variance groups")]


def read_metrics(path: Path) -> list[dict]:
    """The rows of metrics.jsonl that have a numeric ``step``, in file order.

    Lines cut short by a kill, rows that are not objects and rows without a step are skipped;
    a file with none left is an error (one line), as is one that cannot be read.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise RlvrError(f"{path}: cannot read: {exc.strerror}") from None
    rows = []
    for line in text.splitlines():
        try:
            row = parse_json(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and _number(row.get("step")) is not None:
            rows.append(row)
    if not rows:
        raise RlvrError(f"{path} has no rows with a numeric 'step' yet")
    return rows


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def plot_metrics(run_dir: Path, output: Path | str | None = None) -> Path | str:
    """Write the curves to ``output`` (default RUN_DIR/curves.png; ``-``: stdout) in the format its
    suffix names (png without one); rlvr.runs.outputs decides how the file is written."""
    from rlvr.runs.outputs import check_folder_target, open_output

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise RlvrError(f"no metrics.jsonl in {run_dir}")
    rows = read_metrics(path)
    output = output if output is not None else Path(run_dir) / "curves.png"
    if str(output) != "-":  # the cheap refusals before matplotlib loads (a second)
        if Path(output).is_dir():
            raise RlvrError(f"--output {output} is a folder")
        check_folder_target(Path(output).parent, f"--output {output}: folder")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2))
    try:
        kind = Path(str(output)).suffix.lstrip(".").lower() or "png"
        supported = fig.canvas.get_supported_filetypes()
        if str(output) == "-":
            kind = "png"
        elif kind not in supported:
            raise RlvrError(f"--output {output}: cannot write .{kind} images; use one of: "
                            f"{', '.join('.' + k for k in sorted(supported))}")
        steps = [_number(r["step"]) for r in rows]
        for ax, (key, title) in zip(axes, PANELS):
            values = [_number(r.get(key)) for r in rows]
            if all(v is None for v in values):  # e.g. KL when algorithm.kl.beta is 0: say so, draw no 0s
                ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="0.4")
            else:
                ax.plot(steps, [math.nan if v is None else v for v in values], marker=".")
            ax.set_title(title)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        with open_output(output, binary=True) as f:
            fig.savefig(f, format=kind, dpi=100)
    finally:
        plt.close(fig)
    return output
