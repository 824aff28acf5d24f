"""The tensor side of RLOO: per-token log-probs, the policy losses (REINFORCE/PPO, GSPO, CISPO),
KL estimators, and loss aggregation. Pure functions, tested against hand-computed numbers.

Shapes: ``[B, T]`` for per-token values of B responses padded to T tokens; ``mask`` is 1
on response tokens that count and 0 on padding.

Each policy loss is declared once, torch-free, in ``rlvr.recipe.loss_variants.POLICY_LOSSES``
(name, bounds section, rules: what the recipe schema and the learner read); its function here
registers under that name with ``@register_policy_loss(name)``, and ``surrogate_loss`` dispatches
on it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable

import torch
import torch.nn.functional as F

from rlvr.recipe.loss_variants import POLICY_LOSSES


def token_logprobs_and_entropy(logits: torch.Tensor, tokens: torch.Tensor, want_entropy: bool = True):
    """log p(tokens[t] | ...) from logits aligned with tokens ([B, T, V], [B, T] -> [B, T]), and
    when asked the entropy of each position's distribution ([B, T], without gradient), from one
    log-softmax over the vocabulary (float32 for stable sums under bf16 training)."""
    logp_all = F.log_softmax(logits.float(), dim=-1)
    logp = torch.gather(logp_all, -1, tokens.unsqueeze(-1)).squeeze(-1)
    if not want_entropy:
        return logp, None
    with torch.no_grad():
        ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent


def head_logprobs(hidden: torch.Tensor, head, tokens: torch.Tensor, mask: torch.Tensor, *,
                  temperature: float = 1.0, want_entropy: bool = True, chunk_tokens: int = 256,
                  frozen_dtype: torch.dtype | None = None):
    """What :func:`token_logprobs_and_entropy` gives for ``head(hidden) / temperature``, without
    ever holding the logits of the whole batch: the output head runs on the real tokens only
    (``mask``), ``chunk_tokens`` at a time, in the head's own dtype (the hidden states are cast to
    it: bfloat16 under DeepSpeed's bf16 mode, float32 over autocast's float32 weights), and its
    logits go to float32 one chunk at a time.
    ``[B, T, H]`` hidden states, ``[B, T]`` tokens and mask -> ``[B, T]`` log-probs (0 on
    padding) and entropies (without gradient) or None.

    A head that is not trained (LoRA; any frozen head held whole on this rank) goes through
    :func:`frozen_head_logprobs`: the gradient with respect to the hidden states is formed in the
    same pass as the log-probs, two head matmuls a token instead of three. A trained head's
    chunk logits are recomputed in the backward pass instead of being kept. ``frozen_dtype``: the
    dtype a head that is not trained computes in, whatever its weights' (bfloat16 for a trainer
    under bfloat16 autocast, where the rest of the model computes in it too); its logits still go to
    float32 for the log-softmax."""
    from torch.utils.checkpoint import checkpoint

    real = mask.bool()
    frozen = frozen_head(head)
    dtype = frozen_dtype if frozen and frozen_dtype is not None else head_dtype(head, hidden.dtype)
    h, t = hidden[real].to(dtype), tokens[real]
    zeros = torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
    if h.shape[0] and frozen:
        bias = getattr(head, "bias", None)
        logp, entropy = frozen_head_logprobs(h, head.weight.to(dtype), None if bias is None else bias.to(dtype), t,
                                             temperature=temperature, want_entropy=want_entropy,
                                             chunk_tokens=chunk_tokens)
        out = zeros.masked_scatter(real, logp)
        return out, (zeros.masked_scatter(real, entropy) if want_entropy else None)
    parts, entropies = [], []
    for a in range(0, h.shape[0], chunk_tokens):
        args = (h[a : a + chunk_tokens], t[a : a + chunk_tokens], head, temperature, want_entropy)
        lp, ent = checkpoint(_head_chunk, *args, use_reentrant=False) if torch.is_grad_enabled() \
            else _head_chunk(*args)
        parts.append(lp)
        entropies.append(ent)
    logp = zeros.masked_scatter(real, torch.cat(parts)) if parts else zeros
    if not want_entropy:
        return logp, None
    return logp, (zeros.masked_scatter(real, torch.cat(entropies)) if parts else zeros)


def frozen_head(head) -> bool:
    """Whether ``head`` is a plain linear layer whose weights get no gradient and are held whole
    here (not partitioned by ZeRO-3), so :func:`frozen_head_logprobs` may read them directly."""
    if not isinstance(head, torch.nn.Linear):
        return False
    params = [head.weight] + ([head.bias] if head.bias is not None else [])
    return not any(p.requires_grad or hasattr(p, "ds_id") for p in params)


class _Precomputed(torch.autograd.Function):
    """``value`` (computed without autograd) as a function of ``x`` whose gradient is
    ``grad_output * jacobian`` row by row: each row of ``value`` depends on its row of ``x`` alone."""

    @staticmethod
    def forward(ctx, x, value, jacobian):
        ctx.save_for_backward(jacobian)
        return value.clone()

    @staticmethod
    def backward(ctx, grad_output):
        (jacobian,) = ctx.saved_tensors
        return (grad_output.unsqueeze(-1) * jacobian).to(jacobian.dtype), None, None


def frozen_head_logprobs(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, tokens: torch.Tensor, *,
                         temperature: float = 1.0, want_entropy: bool = True, chunk_tokens: int = 256):
    """log p(``tokens`` | ``h``) under the logits ``(h @ weight.T + bias) / temperature`` of a head
    that is not trained, ``[N, H]`` -> ``[N]`` float32, and the entropies (without gradient).

    Each token's log-prob depends on its own hidden state only, and its gradient is
    ``(onehot(token) - softmax) @ weight / temperature``: that row is formed while the chunk's
    logits are at hand, and the backward pass multiplies it by the incoming gradient. So the head
    runs twice a token (logits, and that product) where recomputing the logits in the backward
    pass runs it three times, and the vocabulary-wide work happens in two buffers reused chunk
    after chunk (fresh ones cost page faults on a CPU). The gradient equals autograd's through the
    logits up to rounding; the head's own parameters get none."""
    n, dtype = h.shape[0], weight.dtype
    grad = torch.is_grad_enabled() and h.requires_grad
    rows = max(1, min(chunk_tokens or n, n))
    logits = torch.empty(rows, weight.shape[0], dtype=torch.float32, device=h.device)
    probs = torch.empty_like(logits)
    low = torch.empty(rows, weight.shape[0], dtype=dtype, device=h.device) if dtype != torch.float32 else None
    logp = torch.empty(n, dtype=torch.float32, device=h.device)
    entropy = torch.empty(n, dtype=torch.float32, device=h.device) if want_entropy else None
    jacobian = torch.empty(n, weight.shape[1], dtype=dtype, device=h.device) if grad else None
    with torch.no_grad():
        for a in range(0, n, rows):
            hc, tc = h[a : a + rows].detach(), tokens[a : a + rows].unsqueeze(-1)
            m = hc.shape[0]
            z, p = logits[:m], probs[:m]
            out = z if low is None else low[:m]  # the head's logits in its own dtype, as head(h) gives them
            if bias is None:
                torch.mm(hc, weight.t(), out=out)
            else:
                torch.addmm(bias, hc, weight.t(), out=out)
            if low is not None:
                z.copy_(out)
            if temperature != 1.0:
                z.div_(temperature)
            z.sub_(z.amax(-1, keepdim=True))
            torch.exp(z, out=p)
            total = p.sum(-1, keepdim=True)
            z.sub_(total.log())  # z: log-softmax
            p.div_(total)  # p: softmax
            logp[a : a + m] = z.gather(-1, tc).squeeze(-1)
            if want_entropy:
                entropy[a : a + m] = -torch.bmm(p.unsqueeze(1), z.unsqueeze(2)).view(m)
            if grad:
                p.neg_().scatter_add_(-1, tc, torch.ones_like(tc, dtype=p.dtype))  # onehot - softmax
                if low is None:
                    torch.mm(p, weight, out=jacobian[a : a + m])
                else:
                    low[:m].copy_(p)
                    torch.mm(low[:m], weight, out=jacobian[a : a + m])
        if grad and temperature != 1.0:
            jacobian.div_(temperature)
    if grad:
        logp = _Precomputed.apply(h, logp, jacobian)
    return logp, entropy


def head_dtype(head, default: torch.dtype) -> torch.dtype:
    """The dtype of ``head``'s floating-point weights (``default`` when it has none)."""
    for p in head.parameters():
        if p.is_floating_point():
            return p.dtype
    return default


def _head_chunk(h: torch.Tensor, t: torch.Tensor, head, temperature: float, want_entropy: bool):
    logits = head(h).float()
    if temperature != 1.0:
        logits = logits / temperature
    norm = torch.logsumexp(logits, -1)
    logp = logits.gather(-1, t.unsqueeze(-1)).squeeze(-1) - norm
    if not want_entropy:
        return logp, None
    with torch.no_grad():
        entropy = norm - (torch.softmax(logits, -1) * logits).sum(-1)
    return logp, entropy


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi (Schulman's k1, k2, k3).

    k1 = log r', k2 = (log r')^2 / 2, k3 = (r - 1) - log r, with r = ref/pi and log r' = -log r.
    k1 is unbiased but can be negative; k3 is unbiased and non-negative; k2 is biased, low variance.
    """
    log_ratio = logp - ref_logp  # log pi/ref
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.pow(2)
    if estimator == "k3":
        # Clamp: exp of a large negative log-ratio is harmless, of a large positive one overflows.
        neg = (-log_ratio).clamp(max=20.0)
        return neg.exp() - 1.0 - neg
    raise ValueError(f"unknown KL estimator {estimator!r} (k1, k2, k3)")


# fn(logp, old_logp, advantages, mask, bounds) -> (per-token loss, clipped_low, clipped_high)
LossFn = Callable[..., tuple]
_POLICY_LOSS_FNS: dict[str, LossFn] = {}
POLICY_LOSS_FNS = MappingProxyType(_POLICY_LOSS_FNS)  # name -> its function, read-only


def register_policy_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Decorator: the function of policy loss ``name`` (declared in ``POLICY_LOSSES``), called as
    ``fn(logp, old_logp, advantages, mask, bounds)`` and returning the per-token loss and where
    clipping bit (low, high). ``bounds`` is never None when the declaration ``needs_bounds``."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"policy loss {name!r} is not declared in rlvr.recipe.loss_variants.POLICY_LOSSES")

    def register(fn: LossFn) -> LossFn:
        if name in _POLICY_LOSS_FNS:
            raise ValueError(f"policy loss {name!r} is registered twice: {_POLICY_LOSS_FNS[name].__name__}, {fn.__name__}")
        _POLICY_LOSS_FNS[name] = fn
        return fn
    return register


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip: tuple[float, float] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token policy-gradient loss and where clipping bit (low, high).

    ``advantages`` is [B] or [B, T]. Without ``clip`` this is REINFORCE with a baseline:
    ``-A * ratio`` whose gradient at ratio=1 is ``-A * grad log p``. With ``clip=(eps_low,
    eps_high)`` it is PPO's pessimistic objective with DAPO's decoupled clip range.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    if clip is None:
        zeros = torch.zeros_like(logp, dtype=torch.bool)
        return unclipped, zeros, zeros
    eps_low, eps_high = clip
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    clipped_low = (ratio < 1.0 - eps_low) & (advantages < 0)
    clipped_high = (ratio > 1.0 + eps_high) & (advantages > 0)
    return loss, clipped_low, clipped_high


@register_policy_loss("ppo")
def ppo_loss(logp, old_logp, advantages, mask, bounds):
    """:func:`policy_loss` in the registry's signature (PPO is per token: no mask needed)."""
    return policy_loss(logp, old_logp, advantages, bounds)


@register_policy_loss("gspo")
def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    bounds: tuple[float, float],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GSPO (Zheng et al. 2025): PPO's pessimistic objective on the sequence's ratio
    ``s_i = exp(mean_t (logp - old_logp))`` over its ``mask`` tokens (the geometric mean of the
    token ratios), clipped to ``[1 - eps_low, 1 + eps_high]`` for the whole sequence.

    Per token in the GSPO-token form: ``s_it = sg[s_i] * exp(logp_t - sg[logp_t])`` has the value
    ``s_i`` and the gradient ``s_i * grad logp_t``, so ``advantages`` may be [B] or [B, T]; with
    one advantage per sequence and ``seq_mean_token_mean`` aggregation it is the paper's
    sequence-level gradient exactly. A sequence clipped on the side of its advantage gives no
    gradient through any of its tokens. Indicators: per token, where its sequence was clipped.
    """
    eps_low, eps_high = bounds
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    mask = mask.to(logp.dtype)
    with torch.no_grad():
        log_seq = ((logp - old_logp) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
        seq_ratio = log_seq.exp()
    ratio = seq_ratio * torch.exp(logp - logp.detach())
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(unclipped, clipped)
    clipped_low = ((seq_ratio < 1.0 - eps_low) & (advantages < 0)).expand(loss.shape)
    clipped_high = ((seq_ratio > 1.0 + eps_high) & (advantages > 0)).expand(loss.shape)
    return loss, clipped_low, clipped_high


@register_policy_loss("cispo")
def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    bounds: tuple[float | None, float],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1, 2025): ``-sg[clip(r_t, 1 - eps_low, 1 + eps_high)] * A * logp_t`` with
    ``r_t = exp(logp_t - old_logp_t)``. The importance weight is clipped and detached; the
    gradient ``-w_t * A * grad logp_t`` flows through every token (none is dropped, unlike PPO's
    clip). ``eps_low`` None: no lower bound (MiniMax-M1's choice). The loss *value* is
    ``-w * A * logp``, not PPO's ``-A * ratio``: only its gradient compares. Indicators: tokens of
    non-zero advantage whose weight was clipped below (``r < 1 - eps_low``) or above."""
    eps_low, eps_high = bounds
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    low = None if eps_low is None else 1.0 - eps_low
    with torch.no_grad():
        ratio = torch.exp(logp - old_logp)
        weight = ratio.clamp(min=low, max=1.0 + eps_high)
        bites = (advantages != 0) & (mask > 0)
        clipped_low = (ratio < low) & bites if low is not None else torch.zeros_like(bites)
        clipped_high = (ratio > 1.0 + eps_high) & bites
    return -advantages * weight * logp, clipped_low, clipped_high


def surrogate_loss(
    kind: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    bounds: tuple | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The per-token loss and clip indicators (low, high) of ``algorithm.policy_loss`` ``kind``,
    from its registered function: ``ppo`` (:func:`policy_loss`; ``bounds`` None: REINFORCE with a
    baseline), ``gspo`` (:func:`gspo_loss`) or ``cispo`` (:func:`cispo_loss`). Every one of them
    is exactly 0, with a zero gradient, where the advantage is 0."""
    fn = _POLICY_LOSS_FNS.get(kind)
    if fn is None:
        raise ValueError(f"unknown policy loss {kind!r} ({', '.join(_POLICY_LOSS_FNS)})")
    if bounds is None and POLICY_LOSSES[kind].needs_bounds:
        raise ValueError(f"policy loss {kind!r} needs its clip bounds")
    return fn(logp, old_logp, advantages, mask, bounds)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, num_tokens: float, num_seqs: float,
              norm_tokens: float | None = None) -> torch.Tensor:
    """Sum of this micro-batch's share of a batch-level mean.

    ``num_tokens`` and ``num_seqs`` count the whole batch (all micro-batches, all ranks),
    so micro-batch losses add up to exactly the batch mean whatever the split:

    - token_mean: every response token of the batch weighs the same (DAPO);
    - seq_mean_token_sum: per-response token sums, averaged over responses;
    - seq_mean_token_sum_norm: the same divided by the constant ``norm_tokens`` (Dr. GRPO: the
      token sum over a fixed length L, not over any sequence's or batch's own token count);
    - seq_mean_token_mean: per-response token means, averaged over responses (GRPO paper).
    """
    mask = mask.to(values.dtype)
    if mode == "token_mean":
        return (values * mask).sum() / max(num_tokens, 1.0)
    per_seq = (values * mask).sum(-1)
    if mode == "seq_mean_token_sum":
        return per_seq.sum() / max(num_seqs, 1.0)
    if mode == "seq_mean_token_sum_norm":
        if not norm_tokens or norm_tokens <= 0:
            raise ValueError("seq_mean_token_sum_norm needs norm_tokens > 0 (algorithm.loss_norm_tokens)")
        return per_seq.sum() / (float(norm_tokens) * max(num_seqs, 1.0))
    if mode == "seq_mean_token_mean":
        return (per_seq / mask.sum(-1).clamp(min=1.0)).sum() / max(num_seqs, 1.0)
    raise ValueError(f"unknown loss aggregation {mode!r}")


def importance_weights(
    logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights correcting for the sampler (behaviour policy) not being the trainer's
    policy, and sums describing the mismatch. No gradient flows through the weights.

    ``logp`` is the trainer's log-prob of the sampled tokens under the policy the update starts
    from (the proximal policy), ``behaviour_logp`` the sampler's, both at the sampling
    temperature. With ``w = exp(logp - behaviour_logp)`` per token:

    - ``tis`` (truncated IS): weight ``min(w, cap)``;
    - ``mis`` (masked IS): weight 1 for sequences whose geometric-mean ratio
      ``exp(mean_t log w)`` lies in ``[1/cap, cap]``, 0 for the others (length-independent,
      unlike the product of the token ratios);
    - ``none``: weight 1 (the sums are still computed: they measure the mismatch).

    Sums over ``mask`` tokens: ``is_weight`` (of w), ``is_tokens``, ``is_capped`` (tokens with
    w > cap), ``is_masked`` (sequences masked), ``is_seqs``, ``mismatch_k3`` (k3 estimate of
    KL(sampler || trainer) from the sampler's samples: ``w - 1 - log w``), and ``is_weight_max``.
    """
    mask = mask.to(torch.float32)
    with torch.no_grad():
        log_w = ((logp.float() - behaviour_logp.float()) * mask).clamp(-20.0, 20.0)
        w = log_w.exp()
        tokens = mask.sum(-1)
        if mode == "tis":
            weights = w.clamp(max=cap)
            masked = torch.zeros_like(tokens, dtype=torch.bool)
        elif mode == "mis":
            seq_log = log_w.sum(-1) / tokens.clamp(min=1.0)
            masked = (seq_log.abs() > torch.log(torch.tensor(cap))) & (tokens > 0)
            weights = (~masked).float().unsqueeze(-1).expand_as(w)
        elif mode == "none":
            weights = torch.ones_like(w)
            masked = torch.zeros_like(tokens, dtype=torch.bool)
        else:
            raise ValueError(f"unknown importance-sampling correction {mode!r} (none, tis, mis)")
        on = mask > 0
        stats = {
            "is_weight": float((w * mask).sum()),
            "is_tokens": float(mask.sum()),
            "is_capped": float(((w > cap) & on).sum()),
            "is_masked": float(masked.sum()),
            "is_seqs": float((tokens > 0).sum()),
            "mismatch_k3": float(((w - 1.0 - log_w) * mask).sum()),
            "is_weight_max": float(w[on].max()) if bool(on.any()) else 0.0,
        }
    return weights * mask, stats
