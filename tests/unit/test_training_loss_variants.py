"""The policy-loss variants (``algorithm.policy_loss``: ppo, gspo, cispo) and Dr. GRPO's constant
normalisation (``loss_aggregation: seq_mean_token_sum_norm``), against their papers' formulas on
numbers worked out by hand in the comments; the recipe options that choose them; and the learner
with each (its skipping of zero-advantage sequences is covered in tests/integration/test_training_learner.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import yaml
from pydantic import ValidationError

from rlvr import RlvrError
from rlvr.recipe.load import load_recipe
from rlvr.recipe.spec import AlgorithmConfig
from rlvr.training.learner import loss_bounds
from rlvr.training.losses import aggregate, cispo_loss, gspo_loss, policy_loss, surrogate_loss

ROOT = Path(__file__).resolve().parents[2]
e = math.exp


def grad_of(fn, logp, *args):
    """(per-token loss, clip_low, clip_high, d sum(loss * mask) / d logp) of ``fn(logp, *args)``;
    the mask is the ``mask`` keyword (padding carries no gradient)."""
    logp = logp.clone().requires_grad_()
    mask = args[-1]["mask"]
    loss, low, high = fn(logp, *args[:-1], **args[-1])
    (loss * mask).sum().backward()
    return loss.detach(), low, high, logp.grad


# ---------------------------------------------------------------------------------------------- GSPO
# Two sequences x 3 tokens, old log-probs 0, so logp is each token's log-ratio:
#   seq 0: log-ratios (0.3, -0.1, 0.1), all three tokens count:
#          s_0 = exp((0.3 - 0.1 + 0.1) / 3) = e^0.1 = 1.105171,
#          the geometric mean of the token ratios (e^0.3 * e^-0.1 * e^0.1)^(1/3).
#   seq 1: log-ratios (-0.2, 0.0, 5.0), the third token is padding (mask 0) and is left out:
#          s_1 = exp((-0.2 + 0.0) / 2) = e^-0.1 = 0.904837 (with the padding it would be e^1.6).
# Bounds eps_low 0.05, eps_high 0.08: the sequence ratio is clipped to [0.95, 1.08].
GSPO_OLD = torch.zeros(2, 3)
GSPO_LOGP = torch.tensor([[0.3, -0.1, 0.1], [-0.2, 0.0, 5.0]])
GSPO_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
S0, S1 = e(0.1), e(-0.1)


def gspo(logp, advantages, bounds):
    return grad_of(gspo_loss, logp, GSPO_OLD, advantages, dict(mask=GSPO_MASK, bounds=bounds))


def test_gspo_sequence_ratio_is_the_geometric_mean_of_the_token_ratios():
    # Wide bounds (nothing clipped), A = (-1, 1): loss_i = -A_i * s_i on every token of sequence i.
    loss, low, high, _ = gspo(GSPO_LOGP, torch.tensor([-1.0, 1.0]), (0.5, 0.5))
    geo0 = (e(0.3) * e(-0.1) * e(0.1)) ** (1 / 3)
    geo1 = (e(-0.2) * e(0.0)) ** (1 / 2)
    assert geo0 == pytest.approx(S0) and geo1 == pytest.approx(S1)
    assert loss[0].tolist() == pytest.approx([geo0] * 3, rel=1e-6)
    assert loss[1, :2].tolist() == pytest.approx([-geo1] * 2, rel=1e-6)
    assert not low.any() and not high.any()


@pytest.mark.parametrize("case", ["clipped", "not_clipped"])
def test_gspo_clips_the_sequence_on_the_side_of_its_advantage(case):
    """GSPO: loss_i = -min(s_i A_i, clip(s_i, 0.95, 1.08) A_i) on each token of sequence i."""
    if case == "clipped":
        # seq 0: s_0 = 1.105 > 1.08 with A = +2 -> -2 * 1.08 = -2.16, no gradient, clip_high.
        # seq 1: s_1 = 0.905 < 0.95 with A = -1 -> +1 * 0.95 = 0.95, no gradient, clip_low.
        adv = torch.tensor([2.0, -1.0])
        want_loss = [[-2.16] * 3, [0.95] * 2]
        want_grad = [[0.0] * 3, [0.0, 0.0, 0.0]]
        want_low, want_high = [[False] * 3, [True] * 3], [[True] * 3, [False] * 3]
    else:
        # Same ratios, opposite advantages: the pessimistic min keeps the unclipped term.
        # seq 0: A = -2 -> max(2 * 1.105171, 2 * 1.08) = 2.210342; d/dlogp_t = -A * s_0 = 2.210342.
        # seq 1: A = +1 -> max(-0.904837, -0.95) = -0.904837; d/dlogp_t = -A * s_1 = -0.904837.
        adv = torch.tensor([-2.0, 1.0])
        want_loss = [[2 * S0] * 3, [-S1] * 2]
        want_grad = [[2 * S0] * 3, [-S1, -S1, 0.0]]  # the padding token carries no gradient
        want_low, want_high = [[False] * 3] * 2, [[False] * 3] * 2
    loss, low, high, grad = gspo(GSPO_LOGP, adv, (0.05, 0.08))
    assert loss[0].tolist() == pytest.approx(want_loss[0], rel=1e-6)
    assert loss[1, :2].tolist() == pytest.approx(want_loss[1], rel=1e-6)
    assert grad.tolist() == [pytest.approx(row, rel=1e-6, abs=0.0) for row in want_grad]
    assert low.tolist() == want_low and high.tolist() == want_high


def test_gspo_is_sequence_level_where_ppo_is_token_level():
    adv = torch.tensor([2.0, 0.0])
    # Bounds [0.95, 1.08], A_0 = +2. The token ratios of seq 0 are e^0.3 = 1.35, e^-0.1 = 0.905,
    # e^0.1 = 1.105: PPO clips tokens 0 and 2 (above 1.08) and keeps token 1 (d = -2 * 0.904837);
    # GSPO clips the sequence (s_0 = 1.105 > 1.08): no token of it has a gradient.
    _, _, _, g_gspo = gspo(GSPO_LOGP, adv, (0.05, 0.08))
    g_ppo = grad_of(lambda lp, old, a, mask, bounds: policy_loss(lp, old, a, bounds), GSPO_LOGP, GSPO_OLD, adv,
                    dict(mask=GSPO_MASK, bounds=(0.05, 0.08)))[3]
    assert g_ppo[0].tolist() == pytest.approx([0.0, -2 * e(-0.1), 0.0], rel=1e-6)
    assert g_gspo[0].tolist() == [0.0, 0.0, 0.0]
    # Bounds [0.8, 1.2]: token 0's own ratio 1.35 is outside (PPO: no gradient there), but the
    # sequence's 1.105 is inside, so GSPO gives every token d = -A * s_0 = -2.210342.
    _, _, _, g_gspo = gspo(GSPO_LOGP, adv, (0.2, 0.2))
    g_ppo = grad_of(lambda lp, old, a, mask, bounds: policy_loss(lp, old, a, bounds), GSPO_LOGP, GSPO_OLD, adv,
                    dict(mask=GSPO_MASK, bounds=(0.2, 0.2)))[3]
    assert g_ppo[0].tolist() == pytest.approx([0.0, -2 * e(-0.1), -2 * e(0.1)], rel=1e-6)
    assert g_gspo[0].tolist() == pytest.approx([-2 * S0] * 3, rel=1e-6)


def test_gspo_token_level_advantages():
    # GSPO-token: s_it = sg[s_i] * exp(logp_t - sg[logp_t]) has the value s_i, so each token is
    # clipped by its sequence's ratio against its own advantage. Bounds [0.95, 1.08]; seq 0
    # (s_0 = 1.105 > 1.08) with A = (1, -1, 2): tokens of A > 0 are clipped (loss -1.08 * A, no
    # gradient), the token of A < 0 is not (loss 1.105171, d = -A * s_0 = +1.105171).
    adv = torch.tensor([[1.0, -1.0, 2.0], [0.5, -0.5, 9.0]])
    # seq 1 (s_1 = 0.905 < 0.95): A = +0.5 keeps -0.5 * s_1 (d = -0.452419); A = -0.5 is clipped at
    # 0.95 (loss 0.475, no gradient).
    loss, low, high, grad = gspo(GSPO_LOGP, adv, (0.05, 0.08))
    assert loss[0].tolist() == pytest.approx([-1.08, S0, -2.16], rel=1e-6)
    assert loss[1, :2].tolist() == pytest.approx([-0.5 * S1, 0.475], rel=1e-6)
    assert grad.tolist() == [pytest.approx([0.0, S0, 0.0], rel=1e-6), pytest.approx([-0.5 * S1, 0.0, 0.0], rel=1e-6)]
    assert high[0].tolist() == [True, False, True] and low[1, :2].tolist() == [False, True]
    # One advantage per sequence, given per token, is the same loss and gradient.
    a = torch.tensor([-2.0, 1.0])
    for x, y in zip(gspo(GSPO_LOGP, a, (0.05, 0.08)), gspo(GSPO_LOGP, a.unsqueeze(-1).expand(2, 3), (0.05, 0.08))):
        assert torch.equal(x, y)


def test_gspo_token_form_has_the_papers_sequence_level_gradient():
    """With one advantage per sequence and seq_mean_token_mean aggregation, the GSPO-token loss is
    the paper's J = (1/G) sum_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t (logp - old)) taken
    as a function of logp (no stop-gradient), in value and gradient."""
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(6, 5, generator=gen) * 3
    old = logp + 0.15 * torch.randn(6, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0],
                         [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.7, -0.3])
    bounds = (0.04, 0.05)

    a = logp.clone().requires_grad_()
    s = torch.exp(((a - old) * mask).sum(-1) / mask.sum(-1))
    paper = -torch.minimum(s * adv, s.clamp(1 - bounds[0], 1 + bounds[1]) * adv).mean()
    paper.backward()
    b = logp.clone().requires_grad_()
    tok, low, high = gspo_loss(b, old, adv, mask, bounds)
    ours = aggregate(tok, mask, "seq_mean_token_mean", float(mask.sum()), 6.0)
    ours.backward()
    ours, paper = ours.detach(), paper.detach()
    clipped = (low | high)[:, 0]
    assert 0 < int(clipped.sum()) < 6  # both kinds of sequence are in the test
    assert float(ours) == pytest.approx(float(paper), rel=1e-6)
    torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7)
    assert torch.all(b.grad[clipped] == 0)  # a clipped sequence: no gradient through any token
    assert torch.all((b.grad[~clipped] != 0) == (mask[~clipped] > 0))  # the others: through every real token


# --------------------------------------------------------------------------------------------- CISPO
# seq 0: logp (-0.5, -2.5, -1.0), old (-1.0, -2.0, -1.1): ratios r = e^0.5 = 1.648721, e^-0.5 =
#        0.606531, e^0.1 = 1.105171; A = +2.
# seq 1: logp (-0.2, -3.0, -7.0), old (-0.2, -2.0, 0.0), third token padding: r = 1, e^-1 =
#        0.367879; A = -1.
# loss_t = -sg[clip(r_t, 1 - eps_low, 1 + eps_high)] * A * logp_t;  d loss_t / d logp_t = -A * w_t.
CISPO_LOGP = torch.tensor([[-0.5, -2.5, -1.0], [-0.2, -3.0, -7.0]])
CISPO_OLD = torch.tensor([[-1.0, -2.0, -1.1], [-0.2, -2.0, 0.0]])
CISPO_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
CISPO_ADV = torch.tensor([2.0, -1.0])


def cispo(bounds):
    return grad_of(cispo_loss, CISPO_LOGP, CISPO_OLD, CISPO_ADV, dict(mask=CISPO_MASK, bounds=bounds))


def test_cispo_with_both_bounds():
    # [0.8, 1.28]: w = (1.28, 0.8, 1.105171) and (1.0, 0.8).
    loss, low, high, grad = cispo((0.2, 0.28))
    # seq 0: -2 * w * logp = (-2 * 1.28 * -0.5, -2 * 0.8 * -2.5, -2 * 1.105171 * -1) = (1.28, 4.0, 2.210342)
    # seq 1: +1 * w * logp = (1.0 * -0.2, 0.8 * -3.0) = (-0.2, -2.4)
    assert loss[0].tolist() == pytest.approx([1.28, 4.0, 2 * e(0.1)], rel=1e-6)
    assert loss[1, :2].tolist() == pytest.approx([-0.2, -2.4], rel=1e-6)
    # The weight is detached: d/dlogp = -A * w (token 2 of seq 0 would get 0 if the gradient went
    # through w as well: -A * (w + logp * w) = -2 * (1.105 - 1.105)).
    assert grad.tolist() == [pytest.approx([-2.56, -1.6, -2 * e(0.1)], rel=1e-6), pytest.approx([1.0, 0.8, 0.0])]
    assert high.tolist() == [[True, False, False], [False, False, False]]
    assert low.tolist() == [[False, True, False], [False, True, False]]  # not the padding


def test_cispo_without_a_lower_bound():
    # eps_low None (MiniMax-M1): w = (1.28, 0.606531, 1.105171) and (1.0, 0.367879).
    loss, low, high, grad = cispo((None, 0.28))
    assert loss[0].tolist() == pytest.approx([1.28, 2 * 2.5 * e(-0.5), 2 * e(0.1)], rel=1e-6)
    assert loss[1, :2].tolist() == pytest.approx([-0.2, -3.0 * e(-1.0)], rel=1e-6)
    assert grad.tolist() == [pytest.approx([-2.56, -2 * e(-0.5), -2 * e(0.1)], rel=1e-6),
                             pytest.approx([1.0, e(-1.0), 0.0], rel=1e-6)]
    assert not low.any() and high.tolist() == [[True, False, False], [False, False, False]]


def test_cispo_keeps_the_gradient_ppo_clips_away():
    # PPO with the same bounds drops token 0 of seq 0 (r = 1.65 > 1.28, A > 0) and token 1 of seq 1
    # (r = 0.368 < 0.8, A < 0); CISPO keeps both, with the clipped weights 1.28 and 0.8.
    ppo = grad_of(lambda lp, old, a, mask, bounds: policy_loss(lp, old, a, bounds), CISPO_LOGP, CISPO_OLD,
                  CISPO_ADV, dict(mask=CISPO_MASK, bounds=(0.2, 0.28)))[3]
    _, _, _, ours = cispo((0.2, 0.28))
    assert ppo[0, 0] == 0 and ppo[1, 1] == 0
    assert float(ours[0, 0]) == pytest.approx(-2.56) and float(ours[1, 1]) == pytest.approx(0.8)


# ------------------------------------------------------------------------------ the advantage 0 is 0
@pytest.mark.parametrize("kind, bounds", [("ppo", None), ("ppo", (0.2, 0.28)), ("gspo", (3e-4, 4e-4)),
                                          ("cispo", (None, 0.28)), ("cispo", (0.2, 0.28))])
def test_zero_advantage_gives_exactly_zero_loss_and_gradient(kind, bounds):
    """What lets the learner skip such sequences: exactly 0, even with ratios far out of bounds."""
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(3, 6, generator=gen) * 4
    old = logp + torch.randn(3, 6, generator=gen)  # ratios from ~0.1 to ~10
    mask = torch.ones(3, 6)
    mask[2, 4:] = 0
    adv = torch.tensor([0.0, 1.5, 0.0])
    a = logp.clone().requires_grad_()
    loss, low, high = surrogate_loss(kind, a, old, adv, mask, bounds)
    (loss * mask).sum().backward()
    assert torch.all(loss[[0, 2]] == 0) and torch.all(a.grad[[0, 2]] == 0)
    assert not (low | high)[[0, 2]].any()
    assert bool(a.grad[1].abs().sum() > 0) or bool((low | high)[1].all())  # the other sequence trains, or is clipped


# ------------------------------------------------------------------------------------ ppo is unchanged
def old_policy_loss(logp, old_logp, advantages, clip):
    """rlvr's policy loss before the variants, kept verbatim to compare with."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    if clip is None:
        zeros = torch.zeros_like(logp, dtype=torch.bool)
        return unclipped, zeros, zeros
    eps_low, eps_high = clip
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return (torch.maximum(unclipped, clipped), (ratio < 1.0 - eps_low) & (advantages < 0),
            (ratio > 1.0 + eps_high) & (advantages > 0))


@pytest.mark.parametrize("clip", [None, (0.2, 0.28), (0.05, 0.5)])
@pytest.mark.parametrize("token_adv", [False, True])
def test_ppo_is_the_old_policy_loss(clip, token_adv):
    gen = torch.Generator().manual_seed(2)
    logp = -torch.rand(5, 7, generator=gen) * 3
    old = logp + 0.4 * torch.randn(5, 7, generator=gen)
    mask = (torch.rand(5, 7, generator=gen) > 0.2).float()
    adv = torch.randn(5, 7, generator=gen) if token_adv else torch.randn(5, generator=gen)
    outs = []
    for fn in (lambda lp: surrogate_loss("ppo", lp, old, adv, mask, clip), lambda lp: old_policy_loss(lp, old, adv, clip)):
        a = logp.clone().requires_grad_()
        loss, low, high = fn(a)
        (loss * mask).sum().backward()
        outs.append((loss.detach(), low, high, a.grad))
    if clip:
        assert outs[1][1].any() and outs[1][2].any()  # the clip bites in this test
    for x, y in zip(*outs):
        assert torch.equal(x, y)


def test_loss_bounds_follow_the_recipe():
    assert loss_bounds(AlgorithmConfig()) is None
    assert loss_bounds(AlgorithmConfig(clip={"eps_low": 0.1, "eps_high": 0.3})) == (0.1, 0.3)
    gspo_algo = AlgorithmConfig(policy_loss="gspo", gspo={"eps_low": 3e-4, "eps_high": 4e-4}, ppo_epochs=2)
    assert loss_bounds(gspo_algo) == (3e-4, 4e-4)
    assert loss_bounds(AlgorithmConfig(policy_loss="cispo", cispo={"eps_high": 2.0}, ppo_epochs=4)) == (None, 2.0)
    with pytest.raises(ValueError, match="unknown policy loss"):
        surrogate_loss("grpo", GSPO_LOGP, GSPO_OLD, torch.ones(2), GSPO_MASK, (0.1, 0.1))


# --------------------------------------------------------------------------- Dr. GRPO's normalisation
VALUES = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 4.0, 4.0]])
AGG_MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])


def test_dr_grpo_divides_token_sums_by_a_constant():
    # Token sums 3, 3, 12 over L = 4 and G = 3 sequences: (3 + 3 + 12) / (4 * 3) = 1.5.
    got = aggregate(VALUES, AGG_MASK, "seq_mean_token_sum_norm", 6.0, 3.0, norm_tokens=4)
    assert float(got) == pytest.approx(1.5)
    split = sum(aggregate(VALUES[i : i + 1], AGG_MASK[i : i + 1], "seq_mean_token_sum_norm", 6.0, 3.0, 4)
                for i in range(3))
    assert float(split) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="norm_tokens"):
        aggregate(VALUES, AGG_MASK, "seq_mean_token_sum_norm", 6.0, 3.0)


def test_dr_grpo_weighs_every_token_the_same_whatever_the_lengths():
    """d loss / d value per token: 1 / (L G) for Dr. GRPO's constant; 1 / (|y_i| G) for
    seq_mean_token_mean (GRPO's length bias); 1 / N_batch for token_mean (a batch's own count)."""
    def weights(mode, norm=None):
        v = VALUES.clone().requires_grad_()
        aggregate(v, AGG_MASK, mode, 6.0, 3.0, norm).backward()
        return v.grad

    def close(got, want):
        torch.testing.assert_close(got, torch.tensor(want), rtol=1e-6, atol=0.0)

    close(weights("seq_mean_token_sum_norm", 4), [[1 / 12, 1 / 12, 0], [1 / 12, 0, 0], [1 / 12] * 3])
    close(weights("seq_mean_token_sum"), [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0], [1 / 3] * 3])
    close(weights("seq_mean_token_mean"), [[1 / 6, 1 / 6, 0], [1 / 3, 0, 0], [1 / 9] * 3])
    close(weights("token_mean"), [[1 / 6, 1 / 6, 0], [1 / 6, 0, 0], [1 / 6] * 3])


# ----------------------------------------------------------------------------------- recipe options
from helpers.recipes import BASE as RECIPE  # noqa: E402 - a minimal valid recipe


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.policy_loss=gspo", "algorithm.ppo_epochs=2"], "policy_loss gspo needs its bounds: algorithm.gspo"),
    (["algorithm.policy_loss=cispo", "algorithm.ppo_epochs=2"], "policy_loss cispo needs its bounds: algorithm.cispo"),
    (["algorithm.policy_loss=gspo", "algorithm.gspo={eps_low: 3.0e-4}", "algorithm.ppo_epochs=2"],
     "algorithm.gspo.eps_high: Field required"),
    (["algorithm.policy_loss=gspo", "algorithm.gspo={eps_low: 3.0e-4, eps_high: 4.0e-4}"],
     "policy_loss gspo with ppo_epochs 1 is plain REINFORCE"),
    (["algorithm.policy_loss=cispo", "algorithm.cispo={eps_high: 2}", "algorithm.ppo_epochs=2", "algorithm.clip={}"],
     "algorithm.clip is PPO's token clip; policy_loss cispo clips with algorithm.cispo"),
    (["algorithm.gspo={eps_low: 3.0e-4, eps_high: 4.0e-4}"], "algorithm.gspo is set but policy_loss is ppo"),
    (["algorithm.policy_loss=dapo"], "algorithm.policy_loss"),
    (["algorithm.policy_loss=gspo", "algorithm.gspo={eps_low: 1, eps_high: 4.0e-4}", "algorithm.ppo_epochs=2"],
     "algorithm.gspo.eps_low"),
    (["algorithm.loss_aggregation=seq_mean_token_sum_norm"], "seq_mean_token_sum_norm needs loss_norm_tokens"),
    (["algorithm.loss_norm_tokens=256"], "loss_norm_tokens is read only by loss_aggregation seq_mean_token_sum_norm"),
])
def test_bad_loss_options_are_one_line(tmp_path, overrides, message):
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE)
    with pytest.raises(RlvrError) as err:
        load_recipe(path, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_docs_loss_variant_snippets_are_valid_algorithm_sections():
    text = (ROOT / "docs" / "training.md").read_text()
    section = text.split("## Loss variants", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) >= 3
    kinds = set()
    for block in blocks:
        algo = AlgorithmConfig(**yaml.safe_load(block)["algorithm"])
        kinds.add((algo.policy_loss, algo.loss_aggregation))
    assert {k for k, _ in kinds} == {"gspo", "cispo", "ppo"}
    assert ("ppo", "seq_mean_token_sum_norm") in kinds
    with pytest.raises(ValidationError):
        AlgorithmConfig(policy_loss="gspo", gspo={"eps_low": 3e-4, "eps_high": 4e-4})  # ppo_epochs 1
