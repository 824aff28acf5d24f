"""Records the loss and gradients of fixed rollout batches through the engine's update as it was
at commit caa2949 (``rlvr/training/engine.py:train``, the section from "sequences for training" to the
PPO-epoch loop, transcribed line for line with one rank and DeepSpeed replaced by a fake engine
that has DeepSpeed's loss scaling and accumulation boundaries and applies plain SGD).

Run once to write ``engine_reference.json``; ``tests/test_learner.py`` feeds the same batches
through ``rlvr.training.learner`` and compares. Kept for provenance: the values are not recomputed.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from rlvr.training.algo import rloo_advantages, shortest_correct_penalty
from rlvr.training.forward import completion_logits, plan_micro_batches
from rlvr.training.losses import aggregate, kl_estimate, policy_loss, token_logprobs_and_entropy

HERE = Path(__file__).resolve().parent

# Two prompts x K=4; lengths vary so the micro-batch plan, padding and prompt sharing all matter.
PROMPTS = [[5, 9, 13, 2, 7], [3, 8, 21, 34, 11, 6, 4]]
COMPLETIONS = [
    ([12, 14, 16, 2], False), ([40, 41], False), ([7, 7, 7, 7, 7, 7, 7, 7, 7], True), ([50], False),
    ([60, 61, 62], False), ([70, 71, 72, 73, 74, 75], True), ([80, 1], False), ([90, 91, 92, 93, 2], False),
]
REWARDS = [1.0, 0.0, 0.5, None, 1.0, 0.0, 1.0, 0.25]
K, MICRO, PAD = 4, 4, 0

CASES = {
    "clip_ppo2_kl_loss_k3_token_mean": dict(
        clip=(0.2, 0.28), ppo_epochs=2, beta=0.05, estimator="k3", target="loss",
        aggregation="token_mean", normalize="none", length_penalty=None, mask_truncated=False),
    "kl_reward_k1_length_penalty_mask_truncated_seq_sum_group_std": dict(
        clip=None, ppo_epochs=1, beta=0.1, estimator="k1", target="reward",
        aggregation="seq_mean_token_sum", normalize="group_std", length_penalty=(0.1, 1.0), mask_truncated=True),
    "no_kl_seq_mean_token_mean_batch_std_no_sharing": dict(
        clip=(0.2, 0.2), ppo_epochs=1, beta=0.0, estimator="k3", target="loss",
        aggregation="seq_mean_token_mean", normalize="batch_std", length_penalty=None, mask_truncated=False,
        share_prompts=False),
}
SGD_LR = 0.5


def tiny_models():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      tie_word_embeddings=False, pad_token_id=PAD)
    torch.manual_seed(0)
    policy = LlamaForCausalLM(cfg)
    torch.manual_seed(1)
    ref = LlamaForCausalLM(cfg)
    with torch.no_grad():  # a reference near the policy, so KL is small but not zero
        for p, q in zip(ref.parameters(), policy.parameters()):
            p.copy_(q + 0.02 * p)
    policy.config.use_cache = ref.config.use_cache = False
    return policy, ref


class FakeEngine:
    """DeepSpeed's engine as the old loop used it: backward divides by the accumulation steps,
    step() applies the update at accumulation boundaries (here plain SGD, recording gradients)."""

    def __init__(self, module, grad_accum):
        self.module, self.grad_accum, self.micro_steps = module, grad_accum, 0
        self.records = []

    def __call__(self, **kw):
        return self.module(**kw)

    def backward(self, loss):
        (loss / self.grad_accum).backward()

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.grad_accum == 0

    def step(self):
        if self.is_gradient_accumulation_boundary():
            grads = {n: p.grad.detach().clone() for n, p in self.module.named_parameters() if p.grad is not None}
            self.records.append(grads)
            with torch.no_grad():
                for p in self.module.parameters():
                    if p.grad is not None:
                        p.sub_(SGD_LR * p.grad)
                        p.grad = None
        self.micro_steps += 1

    def get_global_grad_norm(self):
        return None


def summarize(grad: torch.Tensor) -> dict:
    """A gradient tensor as its norm, its sum and every 29th element (the JSON stays small)."""
    flat = grad.flatten().double()
    return {"norm": float(flat.norm()), "sum": float(flat.sum()), "every29": flat[::29].tolist()}


def old_update(case: dict):
    """The old engine's update section, one rank, names as they were."""
    policy, ref_model = tiny_models()
    n_seq = len(COMPLETIONS)
    completions = [SimpleNamespace(token_ids=ids, truncated=tr) for ids, tr in COMPLETIONS]
    seq_prompts = [PROMPTS[i // K] for i in range(n_seq)]
    rewards_all = list(REWARDS)
    k = K
    world = 1
    device = torch.device("cpu")
    share_prompts = case.get("share_prompts", True)
    per_rank = n_seq
    grad_accum = per_rank // MICRO
    engine = FakeEngine(policy, grad_accum)
    kl_cfg = SimpleNamespace(beta=case["beta"], estimator=case["estimator"], target=case["target"])
    if kl_cfg.beta == 0:
        ref_model = None
    algo = SimpleNamespace(ppo_epochs=case["ppo_epochs"], normalize_advantages=case["normalize"],
                           mask_truncated=case["mask_truncated"], loss_aggregation=case["aggregation"])
    lengths = [len(c.token_ids) for c in completions]
    truncated = [c.truncated for c in completions]
    rewards_for_adv = list(rewards_all)
    if case["length_penalty"] is not None:
        weight, threshold = case["length_penalty"]
        correct = [r is not None and r >= threshold for r in rewards_all]
        pen = shortest_correct_penalty(lengths, correct, k, weight)
        rewards_for_adv = [None if r is None else r + p for r, p in zip(rewards_for_adv, pen)]
    plan = plan_micro_batches([len(p) for p in seq_prompts], lengths, k, MICRO, share_prompts)

    def forward(module, idx, want_entropy=False):
        logits, targets, resp_mask = completion_logits(
            module, [seq_prompts[i] for i in idx], [completions[i].token_ids for i in idx],
            pad_id=PAD, device=device, share_prompts=share_prompts,
        )
        logp, ent = token_logprobs_and_entropy(logits, targets, want_entropy)
        return logp, resp_mask.float(), ent

    old_logps, ref_logps, kl_seq = {}, {}, [0.0] * n_seq
    need_old = algo.ppo_epochs > 1
    kl_in_reward = kl_cfg.beta > 0 and kl_cfg.target == "reward"
    with torch.no_grad():
        for idx in plan:
            if need_old or kl_in_reward:
                lp, mask, _ = forward(engine, idx)
            if need_old:
                old_logps[idx[0]] = lp
            if kl_cfg.beta > 0:
                ref_logps[idx[0]] = forward(ref_model, idx)[0]
                if kl_in_reward:
                    kl_tok = kl_estimate(lp, ref_logps[idx[0]], kl_cfg.estimator)
                    for j, i in enumerate(idx):
                        kl_seq[i] = float((kl_tok[j] * mask[j]).sum())
    if kl_in_reward:
        rewards_for_adv = [None if r is None else r - kl_cfg.beta * kl for r, kl in zip(rewards_for_adv, kl_seq)]
    advantages, adv_mask, gstats = rloo_advantages(rewards_for_adv, k, algo.normalize_advantages)
    seq_weight = [float(m) for m in adv_mask]
    if algo.mask_truncated:
        seq_weight = [0.0 if tr else w for w, tr in zip(seq_weight, truncated)]
    local_tokens = sum(len(c.token_ids) * w for c, w in zip(completions, seq_weight))
    local_seqs = sum(seq_weight)
    num_tokens, num_seqs = float(local_tokens), float(local_seqs)
    scale = grad_accum * world
    clip = case["clip"]
    sums = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_low": 0.0, "clip_high": 0.0, "tokens": 0.0}
    epoch_losses = []
    for epoch in range(algo.ppo_epochs):
        epoch_loss = 0.0
        for idx in plan:
            logp, resp_mask, ent = forward(engine, idx, want_entropy=epoch == 0)
            mask = resp_mask * torch.tensor([seq_weight[i] for i in idx], device=device).unsqueeze(-1)
            old = old_logps[idx[0]] if need_old else logp.detach()
            adv = torch.tensor([advantages[i] for i in idx], device=device, dtype=torch.float32)
            tok_loss, c_low, c_high = policy_loss(logp, old, adv, clip)
            if kl_cfg.beta > 0:
                kl_tok = kl_estimate(logp, ref_logps[idx[0]], kl_cfg.estimator)
                if kl_cfg.target == "loss":
                    tok_loss = tok_loss + kl_cfg.beta * kl_tok
                if epoch == 0:
                    sums["kl"] += float((kl_tok.detach() * resp_mask).sum())
            loss = aggregate(tok_loss, mask, algo.loss_aggregation, num_tokens, num_seqs)
            engine.backward(loss * scale)
            engine.step()
            epoch_loss += float(loss.detach())
            if epoch == 0:
                sums["loss"] += float(loss.detach())
                sums["entropy"] += float((ent * resp_mask).sum())
                sums["clip_low"] += float((c_low.float() * mask).sum())
                sums["clip_high"] += float((c_high.float() * mask).sum())
                sums["tokens"] += float(resp_mask.sum())
        epoch_losses.append(epoch_loss)
    return {
        "advantages": advantages,
        "epoch_losses": epoch_losses,
        "sums": sums,
        "grads": [{name: summarize(g) for name, g in rec.items()} for rec in engine.records],
    }


if __name__ == "__main__":
    out = {"provenance": "tests/data/record_engine_reference.py on rlvr commit caa2949 (the engine before the split)",
           "prompts": PROMPTS, "completions": COMPLETIONS, "rewards": REWARDS, "k": K, "micro": MICRO,
           "sgd_lr": SGD_LR, "cases": {}}
    for name, case in CASES.items():
        out["cases"][name] = {"config": case, **old_update(case)}
    (HERE / "engine_reference.json").write_text(json.dumps(out))
    print("wrote", HERE / "engine_reference.json", (HERE / "engine_reference.json").stat().st_size, "bytes")
