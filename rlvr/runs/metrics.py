"""Step metrics: the row written to ``metrics.jsonl`` (trackers get it too: ``rlvr.runs.tracking``),
and the one line a step prints.

Training's ranks report plain sums (``reward_sum``, ``tokens``, ...), add them up over ranks name
by name (``rlvr.models.distributed.reduce_sums``), and ``step_row`` turns the totals into the
means a user reads. Nothing here knows what a rollout or an update is: only named numbers.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from rlvr import RlvrError
from rlvr.kit import open_append, write_replacing
from rlvr.kit.data import parse_json


def _ratio(a: float, b: float, empty: float = 0.0) -> float:
    return a / b if b else empty


def step_row(step: int, s: Mapping[str, float], *, world: int, reward_names: Iterable[str],
             times: Mapping[str, float], lr: float, grad_norm: float, staleness: int = 0) -> dict:
    """The metrics row of one step from sums over all ranks (the rollout's and the update's:
    ``rlvr.training.report``).
    ``step`` is numbered from 1, as everywhere a run shows steps (console, samples, trackers)."""
    mean = _ratio(s["reward_sum"], s["reward_n"], math.nan)
    row = {
        "step": step,
        "reward_mean": mean,
        "reward_std": math.sqrt(max(0.0, s["reward_sq"] / s["reward_n"] - mean * mean)) if s["reward_n"] else math.nan,
        "zero_variance_frac": _ratio(s["zero_variance"], s["groups"]),
        "too_few_scorable_groups": int(s["too_few_scorable"]),
        "unscorable": int(s["unscorable"]),
        "reward_errors": int(s["reward_errors"]),
        "loss": s["loss"],
        # NaN when nothing was measured (algorithm.kl.beta = 0), not a flat 0
        "kl": _ratio(s["kl"], s["tokens"]) if s.get("kl_measured", 0.0) > 0 else math.nan,
        "clip_low_frac": _ratio(s["clip_low"], s["tokens"]),
        "clip_high_frac": _ratio(s["clip_high"], s["tokens"]),
        "entropy": _ratio(s["entropy"], s["tokens"]),
        "completion_len_mean": _ratio(s["len_sum"], s["seqs"]),
        "completion_len_max": int(s["len_max"]),
        "truncated_frac": _ratio(s["truncated"], s["seqs"]),
        "grad_norm": grad_norm,
        "lr": lr,
        # What the trainer spent: sequences it did not forward (no gradient), the tokens it
        # trained on, and the padding among the tokens it put through the model.
        "skipped_seqs_frac": _ratio(s.get("skipped_seqs", 0.0), s["seqs"]),
        "trained_tokens": int(s["tokens"]),
        "trainer_padded_frac": 1.0 - _ratio(s.get("real_tokens", 0.0), s.get("forward_tokens", 0.0), 1.0),
        # 1 when KL is in the loss: every sequence carries gradient, nothing can be skipped.
        "skip_blocked_by_kl": int(s.get("skip_blocked_by_kl", 0.0) > 0),
        # 0 when no rank had a sequence with gradient (nothing is forwarded, the weights stay).
        "optimizer_steps": int(s.get("optimizer_steps", 0.0) / world),
        **{f"time_{name}": value for name, value in times.items()},
        "tokens_per_s": _ratio(s["len_sum"], times.get("generate", 0.0)),
        "sampling_rounds": s["rounds"] / world,
        "staleness": staleness,  # optimizer steps between the sampler's weights and the trainer's
    }
    for name in ("wait_samples", "wait_weights", "sync"):  # as fractions of the step, too
        if name in times and times.get("step"):
            row[f"{name}_frac"] = times[name] / times["step"]
    for name in reward_names:
        row[f"reward/{name}"] = _ratio(s[f"reward/{name}/sum"], s[f"reward/{name}/n"], math.nan)
    row.update(reward_metrics(s))  # the rewards' own figures (Score.metrics): reward/<reward>/<key>
    if "task_n" in s:  # the task metric (the task reward, raw, against its threshold) beside the total
        row["task_accuracy"] = _ratio(s["task_pass"], s["task_n"], math.nan)
        row["task_reward_max"] = s["task_reward_max"] if s["task_n"] else math.nan
    if "episodes" in s:  # per episode: turns, tokens (the environment's vs the policy's), tool figures
        n = s["episodes"]
        row.update({
            "env_turns_mean": _ratio(s["env_turns"], n), "env_turns_max": int(s["env_turns_max"]),
            "env_tokens_mean": _ratio(s["env_tokens"], n), "policy_tokens_mean": _ratio(s["env_policy_tokens"], n),
            "env_errors": int(s["env_errors"]), "env_seconds_mean": _ratio(s["env_seconds"], n),
        })
        for name in sorted(k for k in s if k.startswith("env/")):
            row[name] = _ratio(s[name], n)
    if "pool_prompts" in s:  # data.pool: prompts drawn from (summed over ranks), the retired shares, revisits
        row.update({
            "pool_size": int(s["pool_active"]),
            "pool_retired_solved_frac": _ratio(s["pool_retired_solved"], s["pool_prompts"]),
            "pool_retired_failed_frac": _ratio(s["pool_retired_failed"], s["pool_prompts"]),
            "pool_revisited": int(s["pool_revisited"]), "pool_readmitted": int(s["pool_readmitted"]),
        })
    if "is_tokens" in s:  # the sampler's log-probs came back: its mismatch with the trainer
        row.update({
            "is_weight_mean": _ratio(s["is_weight"], s["is_tokens"]),
            "is_weight_max": s["is_weight_max"],
            "is_capped_frac": _ratio(s["is_capped"], s["is_tokens"]),
            "is_masked_frac": _ratio(s["is_masked"], s["is_seqs"]),
            "mismatch_k3": _ratio(s["mismatch_k3"], s["is_tokens"]),
        })
    return row


REWARD_METRIC_PREFIX = "reward_metric/"  # the sums rlvr.rewards.runner.metric_sums makes


def reward_metrics(sums: Mapping[str, float]) -> dict[str, float]:
    """The rewards' own figures (``Score.metrics``) from their sums over the step's (or an
    evaluation's) records, all ranks: ``reward/<reward>/<key>`` is the sum of ``key`` over the
    records that reported it; for a key ending in ``_max``, the largest; in ``_mean``, the mean
    over the records that reported it."""
    out = {}
    for name in sorted(sums):
        if not name.startswith(REWARD_METRIC_PREFIX) or name.count("/") != 2:  # not <reward>/<key>/n, a count
            continue
        value = sums[name]
        if name.endswith("_mean"):
            value = _ratio(value, sums.get(name + "/n", 0.0), math.nan)
        out["reward/" + name[len(REWARD_METRIC_PREFIX):]] = value
    return out


def step_line(row: Mapping, total: int) -> str:
    """The one line a step prints."""
    task = f"  acc {100 * row['task_accuracy']:.1f}%" if "task_accuracy" in row else ""
    kl = f"kl {row['kl']:.4f}  " if not math.isnan(row["kl"]) else ""
    return (f"step {row['step']}/{total}  reward {row['reward_mean']:.3f}{task}  len {row['completion_len_mean']:.1f}  "
            f"truncated {row['truncated_frac']:.2f}  zero-var {row['zero_variance_frac']:.2f}  {kl}"
            f"loss {row['loss']:+.4f}  {row['time_step']:.1f} s")


class StuckReward:
    """Warns (once per stretch) when the task reward has stayed at or below 0 for every sample
    of ``patience`` consecutive steps: nothing the policy does earns it, so nothing is learnt;
    most often the answers are in a form the reward does not read."""

    def __init__(self, patience: int, reward: str, enabled: bool = True):
        self.patience, self.reward, self.enabled = patience, reward, enabled
        self.run, self.warned = 0, False

    def update(self, row: Mapping, samples: Sequence[str] = ()) -> str | None:
        """Feed a step's row (and its completions' texts, the first of which the warning shows);
        returns the warning the step it is due (logged when enabled), else None."""
        best = row.get("task_reward_max", math.nan)
        if not self.patience or math.isnan(best) or best > 0:
            self.run, self.warned = 0, False
            return None
        self.run += 1
        if self.run < self.patience or self.warned:
            return None
        self.warned = True
        sample = " ".join(samples[0].split())[:160] if samples else "(none)"
        message = (f"reward stuck at 0: {self.reward!r} scored 0 or less for every sample of the last {self.run} "
                   f"steps; check that the answers are in the form the reward reads. A sample: {sample!r}")
        if self.enabled:
            logging.getLogger("rlvr.training").warning(message)
        return message


class UnscoredSteps:
    """Says in one line what the rewards could not score in a step, and stops the run (``RlvrError``)
    when no sample of ``limit`` consecutive steps could be scored: such a step has no reward to
    learn from, so it trains nothing, and a run of them would end as if it had trained.

    The decision is taken from the step's sums reduced over ranks, so every rank stops at the
    same step; each rank's line (its log; rank 0's on the terminal) names its own failures."""

    def __init__(self, limit: int):
        self.limit, self.run = limit, 0

    def update(self, step: int, scored: float, failures: str, culprits: str) -> str | None:
        """``scored``: samples with a total this step, over all ranks; ``failures``: this rank's
        summary of what failed (``rlvr.rewards.runner.Unscored.line``: the environment of a
        multi-turn episode, every reward), ``culprits``: the environment and the weighted rewards.
        Returns the step's line (logged), None when nothing failed."""
        if scored:
            self.run = 0
            line = f"step {step}: {failures}" if failures else None
        else:
            self.run += 1
            line = f"step {step}: no sample could be scored: {culprits or failures or 'every sample was left unscored'}"
        if line:
            logging.getLogger("rlvr.training").warning(line)
        if not scored and self.limit and self.run >= self.limit:
            raise RlvrError(
                f"no sample could be scored in {self.run} consecutive steps, so nothing was trained: "
                f"{culprits or failures or 'every sample was left unscored'}. Fix the reward or environment that "
                "failed, or let the samples a reward cannot score count without it (when_unscored: skip or zero); "
                "trainer.max_unscored_steps: 0 never stops")
        return line


def step_rows(path: Path) -> list[tuple[str, dict]]:
    """(line, row) for each line of a run's JSONL file (``metrics.jsonl``, ``samples.jsonl``)
    that holds an object with an integer ``step``; a line cut short by a kill is left out."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = parse_json(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            out.append((line, row))
    return out


def keep_steps(path: Path, done: int) -> None:
    """Rewrite ``path`` with only its rows of steps 1 to ``done`` (a run resumed after ``done``
    steps writes the rest again); the file is replaced whole, never left half written."""
    keep = [line for line, row in step_rows(path) if row["step"] <= done]
    write_replacing(path, "".join(line + "\n" for line in keep))


class MetricsLog:
    """metrics.jsonl: exactly one row per step, also across kill -9 and --resume."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled

    def truncate_to(self, done: int) -> None:
        """Keep the rows of steps 1 to ``done`` (a run resumed after ``done`` steps redoes the rest)."""
        if self.enabled and self.path.exists():
            keep_steps(self.path, done)

    def write(self, row: dict) -> None:
        if not self.enabled:
            return
        with open(open_append(self.path, "metrics"), "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
