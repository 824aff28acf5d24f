"""The loss variants a recipe may choose, each declared once: ``POLICY_LOSSES``
(``algorithm.policy_loss``) and ``AGGREGATIONS`` (``algorithm.loss_aggregation``).

A declaration says what the recipe side needs: the name, a one-line summary, which algorithm
section holds the variant's bounds and whether a recipe must give it, and its rules. The schema
(``spec``) takes its choices, its checks and their messages from here, and the learner its clip
bounds (``PolicyLoss.bounds``). Torch-free: ``rlvr validate`` reads it before any model loads. The
tensor maths is ``rlvr.training.losses``, where each policy loss's function registers under its
declared name (``@register_policy_loss("gspo")``); ``tests/unit/test_training_loss_registry.py`` fails when the
schema, these tables and the registered functions do not name the same variants.

A new policy loss: its ``PolicyLoss`` here, its function in ``rlvr.training.losses``, and (when
it has bounds of its own) its options class and ``algorithm.<name>`` field in ``spec``, beside
``gspo``'s; then a test on hand-computed numbers (docs/training.md, "Loss variants").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class PolicyLoss:
    name: str  # algorithm.policy_loss
    summary: str  # one line: what it computes per token
    # The algorithm section holding its bounds (eps_low, eps_high), "clip" for PPO's token clip;
    # None: it has none.
    section: str | None
    # The recipe must give that section (an example for the error when it does not); else a
    # missing section means no bounds (ppo: REINFORCE).
    needs_bounds: bool = False
    example: str = ""
    # Refused with ppo_epochs 1: its ratio is exactly 1 in the first epoch, so it would be REINFORCE.
    multi_epoch: bool = False

    def bounds(self, algorithm: Any) -> tuple | None:
        """``(eps_low, eps_high)`` of ``algorithm``'s section for this loss; None without one."""
        section = getattr(algorithm, self.section) if self.section else None
        return None if section is None else (section.eps_low, section.eps_high)


POLICY_LOSSES: dict[str, PolicyLoss] = {loss.name: loss for loss in (
    PolicyLoss("ppo", "-A * ratio, clipped by `clip` when set (PPO/DAPO), else REINFORCE with the "
               "leave-one-out baseline", section="clip"),
    PolicyLoss("gspo", "the sequence's ratio (the geometric mean of its token ratios), clipped by `gspo`",
               section="gspo", needs_bounds=True, multi_epoch=True,
               example="{eps_low: 3.0e-4, eps_high: 4.0e-4} (the GSPO paper's)"),
    PolicyLoss("cispo", "the clipped, detached importance weight times A * log p, bounds in `cispo`",
               section="cispo", needs_bounds=True, multi_epoch=True,
               example="{eps_high: ...} (eps_low left out: no lower bound, as MiniMax-M1)"),
)}


@dataclass(frozen=True)
class Aggregation:
    name: str  # algorithm.loss_aggregation
    summary: str
    norm_tokens: bool = False  # divides by algorithm.loss_norm_tokens, which the recipe must give


AGGREGATIONS: dict[str, Aggregation] = {mode.name: mode for mode in (
    Aggregation("token_mean", "every response token of the batch weighs the same (DAPO)"),
    Aggregation("seq_mean_token_sum", "per-response token sums, averaged over responses"),
    Aggregation("seq_mean_token_mean", "per-response token means, averaged over responses (GRPO)"),
    Aggregation("seq_mean_token_sum_norm", "token sums over the constant loss_norm_tokens, averaged over "
                "responses (Dr. GRPO)", norm_tokens=True),
)}

# The schema's types: a Literal of the declared names, in declaration order.
PolicyLossName = Literal[tuple(POLICY_LOSSES)]  # type: ignore[valid-type]
AggregationName = Literal[tuple(AGGREGATIONS)]  # type: ignore[valid-type]
