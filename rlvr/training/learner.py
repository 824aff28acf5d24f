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

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import torch

from rlvr.models.distributed import add_sums, reduce_sums
from rlvr.recipe.loss_variants import POLICY_LOSSES
from rlvr.training.algo import rloo_advantages, shortest_correct_penalty
from rlvr.training.forward import completion_hidden, completion_logits, micro_batch_cost, output_head, plan_micro_batches
from rlvr.training.losses import (aggregate, frozen_head, head_logprobs, importance_weights, kl_estimate,
                                  surrogate_loss, token_logprobs_and_entropy)
from rlvr.training.rollout import Rollout

log = logging.getLogger("rlvr.training.learner")


class Backend(Protocol):
    """The optimizer side of training (``rlvr.training.policy.DeepSpeedBackend`` in ``rlvr train``)."""

    policy: Callable[..., Any]  # runs the policy's forward pass (the DeepSpeed engine)
    module: torch.nn.Module  # the policy model itself (a peft model under LoRA)

    def backward(self, loss: torch.Tensor, *, last: bool) -> None:
        """Accumulate the gradient of ``loss``, this micro-batch's share of the batch loss;
        ``last``: no other micro-batch comes before the next ``step``."""

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
    if any(c.logprobs is None for c in completions):
        raise ValueError("importance sampling needs the sampler's log-probs of every completion")
    rows = {row: torch.tensor(c.logprobs, dtype=torch.float32, device=like.device) for row, c in enumerate(completions)}
    return _stack(rows, range(len(completions)), like.float())


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


def loss_bounds(algorithm) -> tuple | None:
    """The clip bounds of ``algorithm.policy_loss``, from the section its declaration names
    (``rlvr.recipe.loss_variants``): ppo's ``clip`` (None: REINFORCE), gspo's sequence-ratio
    bounds, cispo's importance-weight bounds (``eps_low`` None: no lower bound)."""
    return POLICY_LOSSES[algorithm.policy_loss].bounds(algorithm)


def sequence_weights(keep: Sequence[bool], truncated: Sequence[bool], mask_truncated: bool) -> list[float]:
    """1.0 for sequences the loss counts: a baseline exists, and not truncated when masked."""
    return [float(k and not (mask_truncated and t)) for k, t in zip(keep, truncated)]


@dataclass
class Update:
    """What one update did, as the step's report needs it."""

    sums: dict[str, float]  # this rank's sums (loss, kl, entropy, clip_*, tokens, groups, ...), by name
    grad_norm: float  # the last optimizer step's gradient norm (0.0 when no step was taken)
    advantages: list[float]  # per sequence of the rollout: what the samples written beside the metrics show


class Learner:
    def __init__(self, backend: Backend, algorithm, *, micro_batch_size: int, temperature: float, pad_id: int,
                 device, share_prompts: bool, ref_model: torch.nn.Module | None = None, is_mode: str = "none",
                 skip_zero_advantage: bool = True, logprob_chunk_tokens: int = 256, micro_batch_overhead: int = 0,
                 cpu_autocast: bool = False, micro_batch_tokens: int | None = None):
        """``ref_model`` None with ``algorithm.kl.beta > 0`` means the reference is the policy with
        its LoRA adapters disabled. ``is_mode`` (none, tis, mis) weights the loss against the
        sampler's log-probs; when completions carry them, the mismatch is measured in any mode.
        ``skip_zero_advantage``: do not forward sequences that carry no gradient (see ``update``).
        ``logprob_chunk_tokens``: log-probs from the final hidden states through the output head
        that many tokens at a time, never the batch's full-vocabulary logits (0: the model's logits).
        ``micro_batch_overhead``: what one more micro-batch costs, in tokens through the model;
        above 0, micro-batches are cut where that saves more padding (``plan_micro_batches``).
        ``micro_batch_tokens``: at most that many tokens through the model in a micro-batch of
        two or more sequences (None: no limit but ``micro_batch_size``).
        ``cpu_autocast``: the model's forward (and so its backward) in bfloat16 under
        ``torch.autocast`` on CPU, trained weights and optimizer in float32; the output head of
        the chunked log-probs runs outside autocast, in bfloat16 when it is not trained (LoRA) and
        in its weights' dtype when it is (float32 there, bfloat16 under DeepSpeed's bf16 mode),
        and its logits go to float32 before the log-softmax."""
        self.backend, self.algo, self.micro = backend, algorithm, micro_batch_size
        self.temperature, self.pad_id, self.device = temperature, pad_id, device
        self.share_prompts, self.ref_model, self.is_mode = share_prompts, ref_model, is_mode
        self.skip_zero_advantage = skip_zero_advantage
        self.chunk_tokens, self.overhead, self.max_tokens = logprob_chunk_tokens, micro_batch_overhead, micro_batch_tokens
        self._head_makes_logits: dict[int, bool] = {}
        self.cpu_autocast = cpu_autocast
        # head_logprobs' frozen_dtype: under the CPU's autocast a frozen head computes in bfloat16,
        # when the policy's own head is frozen (LoRA); a trained head computes in float32, and so
        # then does a frozen reference's, so that the KL compares like with like
        self.frozen_head_dtype = torch.bfloat16 if cpu_autocast else None

    def _frozen_dtype(self) -> torch.dtype | None:
        policy = getattr(self.backend, "policy", None)
        return self.frozen_head_dtype if policy is None or frozen_head(output_head(policy)) else None

    def _autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16) if self.cpu_autocast else nullcontext()

    def logprobs(self, module, prompts, completions, want_entropy: bool = False):
        """Per-token log-probs [B, C] at the sampling temperature, the completion mask, and
        (when asked) the entropy per position."""
        if self.chunk_tokens and self._head_makes_logits.get(id(module), True):
            with self._autocast():
                hidden, targets, mask, (h_last, logits_last) = completion_hidden(
                    module, prompts, completions, pad_id=self.pad_id, device=self.device,
                    share_prompts=self.share_prompts)
            head = output_head(module)
            if id(module) not in self._head_makes_logits:  # once per model: its head alone makes its logits
                with torch.no_grad(), self._autocast():  # as the model computed them
                    same = torch.allclose(head(h_last).float(), logits_last.float(), rtol=1e-3, atol=1e-3)
                self._head_makes_logits[id(module)] = same
                if not same:
                    log.warning("the model's logits are not its output head's alone (soft-capping or scaling?): "
                                "log-probs come from its full logits")
                    return self.logprobs(module, prompts, completions, want_entropy)
            logp, entropy = head_logprobs(hidden, head, targets, mask, temperature=self.temperature,
                                          want_entropy=want_entropy, chunk_tokens=self.chunk_tokens,
                                          frozen_dtype=self._frozen_dtype())
            return logp, mask.float(), entropy
        with self._autocast():
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

    def _plan(self, seqs: Sequence[int], prompt_lens: Sequence[int], rollout: Rollout) -> list[list[int]]:
        """Micro-batches (lists of sequence numbers) over the sequences ``seqs``."""
        seqs = list(seqs)
        if not seqs:
            return []
        local = plan_micro_batches([prompt_lens[i] for i in seqs], [rollout.lengths[i] for i in seqs],
                                   [i // rollout.group_size for i in seqs], self.micro, self.share_prompts,
                                   overhead=self.overhead, max_tokens=self.max_tokens)
        return [[seqs[j] for j in chunk] for chunk in local]

    def _old_and_ref(self, plan, prompts, completions, masks, old: dict, ref: dict, *, want_old: bool,
                     want_ref: bool) -> list[float]:
        """Fill ``old`` (the policy's log-probs before the update) and ``ref`` (the reference's)
        for the sequences of ``plan`` that lack them, without gradient; returns each sequence's
        summed KL estimate (0 where not computed)."""
        kl_seq = [0.0] * len(prompts)
        with torch.no_grad():
            for idx in plan:
                todo = [i for i in dict.fromkeys(idx) if (want_old and i not in old) or (want_ref and i not in ref)]
                if not todo:
                    continue
                batch = ([prompts[i] for i in todo], [completions[i] for i in todo])
                lp = rp = None
                if want_old:
                    lp, mask, _ = self.logprobs(self.backend.policy, *batch)
                    mask = policy_mask(mask, [masks[i] for i in todo])
                if want_ref:
                    rp = self._reference(*batch)
                if lp is not None and rp is not None:
                    per_seq = (kl_estimate(lp, rp, self.algo.kl.estimator) * mask).sum(-1).tolist()
                for row, i in enumerate(todo):
                    length = len(completions[i])
                    if lp is not None:
                        old[i] = lp[row, :length]
                    if rp is not None:
                        ref[i] = rp[row, :length]
                    if lp is not None and rp is not None:
                        kl_seq[i] = per_seq[row]
        return kl_seq

    def _forward_tokens(self, plan, prompt_lens, completion_lens, group: Sequence[int]) -> dict[str, float]:
        """Tokens one pass over ``plan`` puts through the model (padding included) and the real
        tokens among them (with prompt sharing a group's prompt counts once per micro-batch)."""
        through = real = 0
        for idx in plan:
            through += micro_batch_cost(idx, prompt_lens, completion_lens, group, self.share_prompts)
            prompts = {group[i]: i for i in idx}.values() if self.share_prompts else idx
            real += sum(prompt_lens[i] for i in prompts) + sum(completion_lens[i] for i in idx)
        return {"forward_tokens": float(through), "real_tokens": float(real)}

    def update(self, rollout: Rollout, lr: float) -> Update:
        """Train on one rollout; returns the ``Update``: sums over this rank's tokens (loss, kl,
        entropy, clip_low, clip_high (in the last epoch), tokens; ``is_*`` and ``mismatch_k3`` when
        the completions carry the sampler's log-probs), group counts, what was skipped and padded;
        the last step's grad norm; each sequence's advantage.

        A sequence whose advantage is exactly 0 (or whose weight is 0) adds exactly 0 to the loss
        and to the gradient when the loss has no other term, whichever ``algorithm.policy_loss`` (ppo,
        gspo, cispo all multiply by the advantage): with ``skip_zero_advantage`` it is not forwarded
        at all, nor are its old or reference log-probs taken. Every normaliser is computed over the
        whole batch as before, so the gradient is the same. With KL in the loss
        every sequence carries gradient and nothing is skipped (``skip_blocked_by_kl``). The
        figures per token (entropy, clipping, importance weights) are over the trained tokens.
        """
        algo, kl = self.algo, self.algo.kl
        k, n = rollout.group_size, len(rollout.completions)
        prompts, completions = rollout.seq_prompts, [c.token_ids for c in rollout.completions]
        prompt_lens = [len(p) for p in prompts]
        rewards = shape_rewards(rollout.rewards, rollout.policy_lengths, k, algo.length_penalty)
        masks = [c.mask for c in rollout.completions]  # episodes: the environment's tokens are not trained on
        need_old = algo.ppo_epochs > 1
        kl_in_reward = kl.beta > 0 and kl.target == "reward"
        kl_in_loss = kl.beta > 0 and kl.target == "loss"
        old: dict[int, torch.Tensor] = {}  # per sequence, over its completion tokens
        ref: dict[int, torch.Tensor] = {}
        if kl_in_reward:  # the reward needs every sequence's KL before the advantages exist
            kl_seq = self._old_and_ref(self._plan(range(n), prompt_lens, rollout), prompts, completions, masks,
                                       old, ref, want_old=True, want_ref=True)
            rewards = [None if r is None else r - kl.beta * v for r, v in zip(rewards, kl_seq)]
        advantages, keep, groups = rloo_advantages(rewards, k, algo.normalize_advantages)
        weights = sequence_weights(keep, rollout.truncated, algo.mask_truncated)
        skip = self.skip_zero_advantage and not kl_in_loss
        trained = [i for i in range(n) if not skip or (weights[i] != 0.0 and advantages[i] != 0.0)]
        plan = self._plan(trained, prompt_lens, rollout)
        # Normalisers over the whole batch; ranks agree on one number of micro-batches (a rank
        # with fewer runs a null micro-batch: collectives stay aligned, the gradient is unchanged).
        norm = reduce_sums({"tokens": sum(l * w for l, w in zip(rollout.policy_lengths, weights)),
                            "seqs": sum(weights), "micro_batches_max": float(max(1, len(plan))),
                            "trained_seqs": float(len(trained))})
        # No rank has a sequence with gradient: no forward and no optimizer step. AdamW on a zero
        # gradient is not a no-op: its momentum replays the last update (docs/training.md).
        epochs = 0 if skip and norm["trained_seqs"] == 0 else algo.ppo_epochs
        skipped = sorted(set(range(n)) - set(trained))
        counted_batches = len(plan)  # the micro-batches after these are null ones
        missing = int(norm["micro_batches_max"]) - counted_batches if epochs else 0
        assert skipped or not missing, "a rank that trains every sequence has the most micro-batches"
        plan += [skipped[:1]] * missing
        if need_old or kl_in_loss:
            self._old_and_ref(plan, prompts, completions, masks, old, ref, want_old=need_old, want_ref=kl_in_loss)
        bounds = loss_bounds(algo)
        stats = dict.fromkeys(("loss", "kl", "entropy", "clip_low", "clip_high", "tokens"), 0.0)
        stats["kl_measured"] = float(kl.beta > 0)  # else the row's kl is NaN: not measured, not 0
        if kl_in_reward:  # measured on every sequence: the skipped ones' from the pass above
            stats["kl"] = float(sum(kl_seq[i] for i in skipped))
        # Importance weights between the sampler (behaviour) and the policy this update starts
        # from; they multiply the whole per-token loss, PPO's clipped ratio included (decoupled PPO).
        measure_is = self.is_mode != "none" or all(c.logprobs is not None for c in rollout.completions)
        is_weights: list[torch.Tensor] = []
        self.backend.set_lr(lr)
        grad_norm = 0.0
        for epoch in range(epochs):
            first = epoch == 0
            for j, idx in enumerate(plan):
                counted = j < counted_batches
                logp, resp_mask, entropy = self.logprobs(self.backend.policy, [prompts[i] for i in idx],
                                                         [completions[i] for i in idx], want_entropy=first)
                resp_mask = policy_mask(resp_mask, [masks[i] for i in idx])
                mask = resp_mask * torch.tensor([weights[i] for i in idx], device=self.device).unsqueeze(-1)
                adv = torch.tensor([advantages[i] for i in idx], device=self.device, dtype=torch.float32)
                proximal = _stack(old, idx, logp) if need_old else logp.detach()
                tok_loss, c_low, c_high = surrogate_loss(algo.policy_loss, logp, proximal, adv, resp_mask, bounds)
                if kl.beta > 0:
                    kl_tok = kl_estimate(logp, _stack(ref, idx, logp), kl.estimator)
                    if kl_in_loss:
                        tok_loss = tok_loss + kl.beta * kl_tok
                    if first and counted:
                        stats["kl"] += float((kl_tok.detach() * resp_mask).sum())
                if measure_is:
                    if first:
                        behaviour = behaviour_logprobs([rollout.completions[i] for i in idx], logp)
                        w, is_stats = importance_weights(proximal, behaviour, resp_mask, self.is_mode,
                                                         algo.is_correction.cap)
                        is_weights.append(w)
                        if counted:
                            stats = add_sums(stats, is_stats)
                    tok_loss = tok_loss * is_weights[j]
                loss = aggregate(tok_loss, mask, algo.loss_aggregation, norm["tokens"], norm["seqs"], algo.loss_norm_tokens)
                if not counted:
                    loss = loss * 0.0  # a null micro-batch: its (zero) gradient only keeps ranks in step
                self.backend.backward(loss, last=j == len(plan) - 1)
                if first and counted:
                    stats["loss"] += float(loss.detach())
                    stats["entropy"] += float((entropy * resp_mask).sum())
                    stats["tokens"] += float(resp_mask.sum())
                if epoch == algo.ppo_epochs - 1 and counted:  # the first epoch's ratios are all 1
                    stats["clip_low"] += float((c_low.float() * mask).sum())
                    stats["clip_high"] += float((c_high.float() * mask).sum())
            grad_norm = self.backend.step()  # one optimizer step per epoch over the batch
        forward = self._forward_tokens(plan, prompt_lens, rollout.lengths, [i // k for i in range(n)])
        sums = {**stats, "optimizer_steps": float(epochs), "groups": groups.groups, "zero_variance": groups.zero_variance,
                "too_few_scorable": groups.too_few_scorable, "unscorable": groups.unscorable,
                "skipped_seqs": float(n - len(trained)), "skip_blocked_by_kl": float(kl_in_loss and self.skip_zero_advantage),
                **forward}
        return Update(sums, grad_norm, advantages)


def _stack(per_seq: dict[int, torch.Tensor], idx: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    """The stored per-sequence values of ``idx`` as rows of a tensor shaped like ``like`` [B, C]
    (zeros after each sequence's end)."""
    out = torch.zeros(like.shape, dtype=like.dtype, device=like.device)
    for row, i in enumerate(idx):
        values = per_seq[i][: like.shape[1]]
        out[row, : len(values)] = values
    return out
