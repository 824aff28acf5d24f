"""`rlvr plot`: reward, KL and completion-length curves from metrics.jsonl as one PNG."""

from __future__ import annotations

import json
from pathlib import Path

from . import RlvrError


def plot_metrics(run_dir: Path, output: Path | None = None) -> Path:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise RlvrError(f"no metrics.jsonl in {run_dir}")
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    if not rows:
        raise RlvrError(f"{path} has no rows yet")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    panels = [("reward_mean", "reward"), ("kl", "KL"), ("completion_len_mean", "completion length (tokens)"),
              ("zero_variance_frac", "zero-variance groups")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (key, title) in zip(axes, panels):
        ax.plot(steps, [r.get(key) for r in rows], marker=".")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    output = Path(output) if output else Path(run_dir) / "curves.png"
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return output
