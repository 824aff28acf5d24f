"""What a step leaves: its row in ``metrics.jsonl`` (and the trackers), its console line, its samples.

``StepReport`` is called once a step with the rollout and the learner's ``Update``: it adds this
rank's sums of both (``rollout_sums`` and ``Update.sums``) over ranks, turns them into the row
(``rlvr.runs.metrics.step_row``) and writes it, and every ``trainer.samples_every`` steps writes the
first groups of the rollout (``sample_records``) to ``samples.jsonl``. ``rlvr.runs`` gets plain
numbers and records: what a rollout holds is known here.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from rlvr.models.distributed import reduce_sums
from rlvr.recipe.spec import Recipe
from rlvr.runs.logs import RunOutput
from rlvr.runs.metrics import MetricsLog, StuckReward, UnscoredSteps, step_line, step_row
from rlvr.runs.samples import Decode, SamplesLog, turns
from rlvr.runs.tracking import Trackers
from rlvr.training.learner import Update
from rlvr.training.rollout import Rollout


class StepReport:
    """What a step leaves: its row in ``metrics.jsonl`` (and TensorBoard), its line on the
    console, the stuck-reward warning, one line on what the rewards could not score (``RlvrError``
    after ``trainer.max_unscored_steps`` steps that scored nothing), and every
    ``trainer.samples_every`` steps its samples."""

    def __init__(self, recipe: Recipe, world: int, rank: int, out: RunOutput, tokenizer, trackers: list[str]):
        """``trackers``: the names ``check_trackers`` gave for ``trainer.report_to``."""
        t, folder = recipe.trainer, out.path.parent
        self.recipe, self.world, self.out, self.decode = recipe, world, out, tokenizer.decode
        self.metrics = MetricsLog(folder / "metrics.jsonl", enabled=rank == 0)
        self.samples = SamplesLog(folder / "samples.jsonl", every=t.samples_every, groups=t.samples_groups,
                                  enabled=rank == 0, last=t.steps)
        self.stuck = StuckReward(t.stuck_reward_steps, recipe.task_reward, enabled=rank == 0)
        self.unscored = UnscoredSteps(t.max_unscored_steps)
        self.weighted = [name for name, entry in recipe.rewards.items() if entry.weight != 0]
        self.trackers = Trackers(trackers, output_dir=folder, project=recipe.name,
                                 config=recipe.model_dump(mode="json"), enabled=rank == 0)

    def truncate_to(self, done: int) -> None:
        """A run resumed after ``done`` steps redoes the ones after it."""
        self.metrics.truncate_to(done)
        self.samples.truncate_to(done)

    def __call__(self, step: int, rollout: Rollout, update: Update, times: dict, *, lr: float) -> None:
        """``step``: the loop's index (from 0); every record numbers it from 1. ``lr``: the rate the
        optimizer really used."""
        task = (self.recipe.task_reward, self.recipe.eval.pass_threshold)
        sums = reduce_sums({**rollout_sums(rollout, task), **update.sums})
        row = step_row(step + 1, sums, world=self.world, reward_names=rollout.reward_names, times=times, lr=lr,
                       grad_norm=update.grad_norm, staleness=step - rollout.policy_version)
        self.metrics.write(row)
        self.trackers.log(row)
        self.out.step(step_line(row, self.recipe.trainer.steps))
        self.stuck.update(row, [c.text for c in rollout.completions])
        if self.samples.due(step + 1):
            self.samples.write(sample_records(step + 1, rollout, update.advantages, self.decode, self.samples.groups))
        self.unscored.update(step + 1, sums["reward_n"], rollout.unscored.line(), rollout.unscored.line(self.weighted))


def rollout_sums(rollout: Rollout, task: tuple[str, float] | None = None) -> dict[str, float]:
    """A rollout's contribution to the step's sums (rewards, lengths, per-reward values, the
    rewards' own metrics).

    ``task``: (the task reward's name, its pass threshold): counts the samples that did the task
    (``task_pass`` of ``task_n`` scorable) and its largest raw value (``task_reward_max``)."""
    scored = [r for r in rollout.rewards if r is not None]
    lengths = rollout.lengths
    sums = {
        "reward_sum": sum(scored), "reward_sq": sum(r * r for r in scored), "reward_n": len(scored),
        "reward_errors": rollout.reward_errors, "seqs": len(lengths), "len_sum": sum(lengths),
        "len_max": max(lengths, default=0), "truncated": sum(rollout.truncated), "rounds": rollout.rounds,
    }
    for name in rollout.reward_names:
        values = [v for v in rollout.reward_values[name] if v is not None]
        sums[f"reward/{name}/sum"], sums[f"reward/{name}/n"] = sum(values), len(values)
    if task is not None:
        name, threshold = task
        values = [v for v in rollout.reward_values[name] if v is not None]
        sums.update(task_pass=sum(v >= threshold for v in values), task_n=len(values),
                    task_reward_max=max(values, default=-math.inf))
    sums.update(rollout.reward_metrics)  # the rewards' own figures (Score.metrics), by name
    if rollout.episodes is not None:
        sums.update(rollout.episodes)
    if rollout.pool is not None:  # the prompt pool's (data.pool): pool_prompts, pool_active, ...
        sums.update(rollout.pool)
    return sums


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def sample_records(step: int, rollout: Rollout, advantages: Sequence[float] | None, decode: Decode,
                   groups: int) -> list[dict]:
    """Records of the first ``groups`` groups of ``rollout`` at ``step`` (numbered from 1), with each
    completion's ``advantages`` entry when given (the records ``rlvr.runs.samples`` describes)."""
    k = rollout.group_size
    infos = rollout.reward_infos or {}
    out = []
    for i, c in enumerate(rollout.completions[: groups * k]):
        g = i // k
        out.append({
            "step": step, "group": g, "sample": i % k, "prompt": decode(rollout.prompt_ids[g]),
            "turns": turns(c.text, c.token_ids, c.mask, decode),
            "rewards": {name: _finite_or_none(values[i]) for name, values in rollout.reward_values.items()},
            "reasons": {name: values[i] for name, values in infos.items() if values[i]},
            "total": _finite_or_none(rollout.rewards[i]),
            "advantage": None if advantages is None else round(float(advantages[i]), 6),
            "truncated": c.truncated,
        })
    return out
