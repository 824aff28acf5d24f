"""Held-out evaluation during training: before, every ``trainer.eval_every`` steps, and after.

``Evaluator`` runs ``evaluate_with`` on the trainer's own sampler (idle, with the newest weights),
appends each result to the run's ``eval.jsonl`` and pairs every evaluation after the first with
the "before" one, problem by problem (``rlvr.evaluation.compare``), across a resume too (each
rank keeps its "before" pass rates in ``eval_before.rank<r>.json``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlvr.evaluation.compare import counted, describe, paired_change, paired_sums, percent
from rlvr.evaluation.evaluate import evaluate_with
from rlvr.kit import open_append, write_replacing
from rlvr.kit.data import parse_json
from rlvr.models.distributed import reduce_sums
from rlvr.recipe.spec import Recipe
from rlvr.rewards.runner import BoundReward
from rlvr.sampling.prompts import PromptSet

log = logging.getLogger("rlvr.evaluation")


@dataclass
class Evaluator:
    """Held-out evaluation on the trainer's sampler; rank 0 appends to ``eval.jsonl``."""

    recipe: Recipe
    rewards: list[BoundReward]
    sampler: Any
    prompts: PromptSet
    rank: int
    world: int
    output_dir: Path
    quiesce: Callable[[], object]  # called first: the sampler idle, holding the newest weights
    episodes: Any = None  # the recipe's rlvr.sampling.episodes.EpisodeRunner, if it names an environment
    first: list[float] | None = None  # this rank's per-problem pass rates in the "before" evaluation

    def __call__(self, tag: str, step: int) -> dict:
        self.quiesce()
        result, per_prompt = evaluate_with(self.recipe, self.rewards, self.sampler, self.prompts, rank=self.rank,
                                           world=self.world, episodes=self.episodes)
        rates = [p["pass_rate"] for p in per_prompt]
        line = f"eval ({tag}, step {step}): accuracy {percent(result['accuracy'])} on {counted(result['n'], 'prompt')}"
        if tag == "before":
            self.first = rates
            self._keep_first(per_prompt, rates)
        elif self.first is not None:  # the same problems, one by one: beyond noise?
            change = paired_change(reduce_sums(paired_sums(self.first, rates)))
            result["change_from_before"] = change
            line += f"; from before: {describe(change)}"
        if self.rank == 0:
            with open(open_append(self.output_dir / "eval.jsonl", "eval log"), "a", encoding="utf-8") as f:
                f.write(json.dumps({"tag": tag, "step": step, **result}) + "\n")
            log.info(line)
        return result

    def _settings(self) -> dict:
        ev = self.recipe.eval
        return {"problems": len(self.prompts.rows), "samples": max(ev.k), "temperature": ev.temperature,
                "seed": ev.seed, "max_tokens": self.recipe.eval_tokens}

    def _keep_first(self, per_prompt: list[dict], rates: list[float]) -> None:
        """Each rank writes its problems' "before" pass rates (JSON, by problem index), so that a
        resumed run, on any number of ranks, still pairs its evaluations with them."""
        write_replacing(self.output_dir / f"eval_before.rank{self.rank}.json", json.dumps(
            {"settings": self._settings(), "rates": {str(p["index"]): r for p, r in zip(per_prompt, rates)}}))

    def kept_first(self) -> list[float] | None:
        """For a resumed run: this rank's problems' "before" rates from the files ``_keep_first``
        wrote, or None when they are missing, unreadable or were evaluated with other settings
        (said in the log). Every rank reads the same files, so all ranks agree on whether to pair
        (the pairing reduces over ranks)."""
        kept: dict[str, float] = {}
        for path in sorted(self.output_dir.glob("eval_before.rank*.json")):
            try:
                data = parse_json(path.read_text())
            except (OSError, ValueError):
                return None
            if data.get("settings") != self._settings():
                if self.rank == 0:
                    log.info(f"{path.name} was evaluated with other eval settings: not paired with it")
                return None
            kept.update(data.get("rates", {}))
        if len(kept) != len(self.prompts.rows):
            return None
        mine = [str(i) for i in range(self.rank, len(self.prompts.rows), self.world)]  # as evaluate_with splits them
        return [kept[i] for i in mine] if all(i in kept for i in mine) else None
