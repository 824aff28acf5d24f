"""One RLOO policy update from a ``Rollout``.

reward shaping (length penalty; KL in the reward) -> leave-one-out advantages -> micro-batch
plan -> old and reference log-probs -> ``ppo_epochs`` passes of policy loss + KL, one optimizer
step each. All log-probs are taken at the sampling temperature (logits / T), the distribution the
completions were drawn from. The optimizer side (DeepSpeed, or anything with the ``Backend``
methods) applies the gradients; the learner never sees ranks except through one sum of the
loss normalisers, so a batch's loss is the same mean whatever the split over ranks and
micro-batches.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import torch

from rlvr.runs.metrics import add_sums, reduce_sums
from rlvr.training.algo import rloo_advantages, shortest_correct_penalty
from rlvr.training.forward import completion_logits, plan_micro_batches
from rlvr.training.losses import aggregate, importance_weights, kl_estimate, policy_loss, token_logprobs_and_entropy
from rlvr.training.rollout import Rollout


class Backend(Protocol):
    """The optimizer side of training (``rlvr.training.policy.DeepSpeedBackend`` in ``rlvr train``)."""

    policy: Callable[..., Any]  # runs the policy's forward pass (the DeepSpeed engine)
    module: torch.nn.Module  # the policy model itself (a peft model under LoRA)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradient of ``loss``, this micro-batch's share of the batch loss."""

    def step(self) -> float:
        """Apply the accumulated gradient (clipped), clear it, return its norm."""

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next ``step`` calls."""


def shape_rewards(rewards: Sequence[float | None], lengths: Sequence[int], group_size: int,
                  length_penalty) -> list[float | None]:
    """Rewards as advantages see them: plus the shortest-correct length penalty when configured."""
    if length_penalty is None:
        return list(rewards)
    correct = [r is not None and r >= length_penalty.correct_threshold for r in rewards]
    penalty = shortest_correct_penalty(lengths, correct, group_size, length_penalty.weight)
    return [None if r is None else r + p for r, p in zip(rewards, penalty)]


def is_correction_mode(configured: str, *, sampler_dtype: str, trainer_dtype: str, max_staleness: int = 0) -> str:
    """The importance-sampling correction a run uses: ``auto`` is ``tis`` when the sampler's
    distribution is known to differ from the trainer's (another dtype, or older weights), else
    ``none``."""
    if configured != "auto":
        return configured
    return "tis" if sampler_dtype != trainer_dtype or max_staleness > 0 else "none"


def behaviour_logprobs(completions: Sequence, like: torch.Tensor) -> torch.Tensor:
    """The sampler's per-token log-probs of ``completions``, laid out as ``like`` ([B, C], zeros
    after each completion's end)."""
    out = torch.zeros(like.shape, dtype=torch.float32)
    for row, c in enumerate(completions):
        if c.logprobs is None:
            raise ValueError("importance sampling needs the sampler's log-probs of every completion")
        out[row, : len(c.logprobs)] = torch.tensor(c.logprobs, dtype=torch.float32)
    return out.to(like.device)


def policy_mask(mask: torch.Tensor, token_masks: Sequence[list[int] | None]) -> torch.Tensor:
    """The completion mask ``[B, C]`` with an episode's environment tokens (0 in its
    ``Completion.mask``) taken out: only the policy's own tokens are trained on."""
    if all(m is None for m in token_masks):
        return mask
    out = mask.clone()
    for row, m in enumerate(token_masks):
        if m is not None:
            out[row, : len(m)] *= torch.tensor(m, dtype=out.dtype, device=out.device)
    return out


def sequence_weights(keep: Sequence[bool], truncated: Sequence[bool], mask_truncated: bool) -> list[float]:
    """1.0 for sequences the loss counts: a baseline exists, and not truncated when masked."""
    return [float(k and not (mask_truncated and t)) for k, t in zip(keep, truncated)]


class Learner:
    def __init__(self, backend: Backend, algorithm, *, micro_batch_size: int, temperature: float, pad_id: int,
                 device, share_prompts: bool, ref_model: torch.nn.Module | None = None, is_mode: str = "none"):
        """``ref_model`` None with ``algorithm.kl.beta > 0`` means the reference is the policy with
        its LoRA adapters disabled. ``is_mode`` (none, tis, mis) weights the loss against the
        sampler's log-probs; when completions carry them, the mismatch is measured in any mode."""
        self.backend, self.algo, self.micro = backend, algorithm, micro_batch_size
        self.temperature, self.pad_id, self.device = temperature, pad_id, device
        self.share_prompts, self.ref_model, self.is_mode = share_prompts, ref_model, is_mode

    def logprobs(self, module, prompts, completions, want_entropy: bool = False):
        """Per-token log-probs [B, C] at the sampling temperature, the completion mask, and
        (when asked) the entropy per position."""
        logits, targets, mask = completion_logits(module, prompts, completions, pad_id=self.pad_id,
                                                  device=self.device, share_prompts=self.share_prompts)
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logp, entropy = token_logprobs_and_entropy(logits, targets, want_entropy)
        return logp, mask.float(), entropy

    def _reference(self, prompts, completions) -> torch.Tensor:
        if self.ref_model is not None:
            return self.logprobs(self.ref_model, prompts, completions)[0]
        with self.backend.module.disable_adapter():
            return self.logprobs(self.backend.policy, prompts, completions)[0]

    def update(self, rollout: Rollout, lr: float) -> dict[str, float]:
        """Train on one rollout; returns sums over this rank's tokens (loss, kl, entropy,
        clip_low, clip_high, tokens; ``is_*`` and ``mismatch_k3`` when the completions carry the
        sampler's log-probs), group counts and the last step's grad norm."""
        algo, kl = self.algo, self.algo.kl
        k, n = rollout.group_size, len(rollout.completions)
        prompts, completions = rollout.seq_prompts, [c.token_ids for c in rollout.completions]
        # Loss normalisers are global, so the plan changes no gradient; old and reference
        # log-probs are kept per micro-batch of this plan.
        plan = plan_micro_batches([len(p) for p in prompts], rollout.lengths, k, self.micro, self.share_prompts)
        batches = [([prompts[i] for i in idx], [completions[i] for i in idx]) for idx in plan]
        rewards = shape_rewards(rollout.rewards, rollout.policy_lengths, k, algo.length_penalty)
        masks = [c.mask for c in rollout.completions]  # episodes: the environment's tokens are not trained on
        need_old = algo.ppo_epochs > 1
        kl_in_reward = kl.beta > 0 and kl.target == "reward"
        old, ref, kl_seq = [], [], [0.0] * n
        with torch.no_grad():
            for idx, batch in zip(plan, batches):
                if need_old or kl_in_reward:
                    lp, mask, _ = self.logprobs(self.backend.policy, *batch)
                    mask = policy_mask(mask, [masks[i] for i in idx])
                    old.append(lp)
                if kl.beta > 0:
                    ref.append(self._reference(*batch))
                if kl_in_reward:
                    per_seq = (kl_estimate(lp, ref[-1], kl.estimator) * mask).sum(-1)
                    for i, value in zip(idx, per_seq.tolist()):
                        kl_seq[i] = value
        if kl_in_reward:
            rewards = [None if r is None else r - kl.beta * v for r, v in zip(rewards, kl_seq)]
        advantages, keep, groups = rloo_advantages(rewards, k, algo.normalize_advantages)
        weights = sequence_weights(keep, rollout.truncated, algo.mask_truncated)
        norm = reduce_sums({"tokens": sum(l * w for l, w in zip(rollout.policy_lengths, weights)),
                            "seqs": sum(weights)})
        clip = (algo.clip.eps_low, algo.clip.eps_high) if algo.clip else None
        stats = dict.fromkeys(("loss", "kl", "entropy", "clip_low", "clip_high", "tokens"), 0.0)
        # Importance weights between the sampler (behaviour) and the policy this update starts
        # from; they multiply the whole per-token loss, PPO's clipped ratio included (decoupled PPO).
        measure_is = self.is_mode != "none" or all(c.logprobs is not None for c in rollout.completions)
        is_weights: list[torch.Tensor] = []
        self.backend.set_lr(lr)
        grad_norm = 0.0
        for epoch in range(algo.ppo_epochs):
            first = epoch == 0
            for j, (idx, batch) in enumerate(zip(plan, batches)):
                logp, resp_mask, entropy = self.logprobs(self.backend.policy, *batch, want_entropy=first)
                resp_mask = policy_mask(resp_mask, [masks[i] for i in idx])
                mask = resp_mask * torch.tensor([weights[i] for i in idx], device=self.device).unsqueeze(-1)
                adv = torch.tensor([advantages[i] for i in idx], device=self.device, dtype=torch.float32)
                proximal = old[j] if need_old else logp.detach()
                tok_loss, c_low, c_high = policy_loss(logp, proximal, adv, clip)
                if kl.beta > 0:
                    kl_tok = kl_estimate(logp, ref[j], kl.estimator)
                    if kl.target == "loss":
                        tok_loss = tok_loss + kl.beta * kl_tok
                    if first:
                        stats["kl"] += float((kl_tok.detach() * resp_mask).sum())
                if measure_is:
                    if first:
                        behaviour = behaviour_logprobs([rollout.completions[i] for i in idx], logp)
                        w, is_stats = importance_weights(proximal, behaviour, resp_mask, self.is_mode,
                                                         algo.is_correction.cap)
                        is_weights.append(w)
                        stats = add_sums(stats, is_stats)
                    tok_loss = tok_loss * is_weights[j]
                loss = aggregate(tok_loss, mask, algo.loss_aggregation, norm["tokens"], norm["seqs"])
                self.backend.backward(loss)
                if first:
                    stats["loss"] += float(loss.detach())
                    stats["entropy"] += float((entropy * resp_mask).sum())
                    stats["clip_low"] += float((c_low.float() * mask).sum())
                    stats["clip_high"] += float((c_high.float() * mask).sum())
                    stats["tokens"] += float(resp_mask.sum())
            grad_norm = self.backend.step()  # one optimizer step per epoch over the batch
        return {**stats, "grad_norm": grad_norm, "groups": groups.groups, "zero_variance": groups.zero_variance,
                "too_few_scorable": groups.too_few_scorable, "unscorable": groups.unscorable}
