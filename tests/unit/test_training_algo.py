"""The maths, against hand-computed numbers."""

import math

import pytest
import torch

from rlvr.kit import soft_overlong_penalty
from rlvr.training.algo import rloo_advantages, shortest_correct_penalty
from rlvr.training.losses import aggregate, kl_estimate, policy_loss, token_logprobs_and_entropy


def test_rloo_issue_example():
    adv, mask, stats = rloo_advantages([10, 5, 8, 2], 4)
    # A_1 = 10 - (5+8+2)/3 = 5
    assert adv == pytest.approx([5.0, 5 - 20 / 3, 8 - 17 / 3, 2 - 23 / 3])
    assert mask == [True] * 4 and stats.zero_variance == 0


def test_rloo_excludes_unscorable_from_baseline():
    adv, mask, stats = rloo_advantages([1.0, None, 0.0, 0.0], 4)
    assert adv == pytest.approx([1.0, 0.0, -0.5, -0.5])
    assert mask == [True, False, True, True]
    assert stats.unscorable == 1


def test_rloo_counts_degenerate_groups():
    adv, mask, stats = rloo_advantages([1, 1, None, None, 0, 1, None, 5], 2)
    assert stats.groups == 4 and stats.zero_variance == 1 and stats.too_few_scorable == 2
    assert adv[:2] == [0.0, 0.0] and mask[:4] == [True, True, False, False]
    assert adv[4:6] == pytest.approx([-1.0, 1.0]) and mask[6:] == [False, False]


def test_rloo_normalisations():
    adv, _, _ = rloo_advantages([1.0, 0.0], 2, "group_std")
    assert adv == pytest.approx([1 / 0.5, -1 / 0.5], rel=1e-4)
    adv, _, _ = rloo_advantages([2.0, 0.0, 1.0, 1.0], 2, "batch_std")
    # raw [2, -2, 0, 0]: mean 0, std sqrt(2)
    assert adv == pytest.approx([2 / math.sqrt(2), -2 / math.sqrt(2), 0, 0], rel=1e-4)


def test_rloo_rejects_bad_shapes():
    with pytest.raises(ValueError):
        rloo_advantages([1.0, 2.0, 3.0], 2)
    with pytest.raises(ValueError):
        rloo_advantages([1.0], 1)


@pytest.mark.parametrize("length, expected", [(0, 0.0), (80, 0.0), (90, -0.5), (100, -1.0), (150, -1.0)])
def test_soft_overlong(length, expected):
    assert soft_overlong_penalty(length, max_len=100, cache_len=20) == pytest.approx(expected)


def test_shortest_correct_penalty():
    pen = shortest_correct_penalty([10, 20, 30, 5, 7, 9], [True, True, False, False, False, False], 3, weight=0.5)
    assert pen == pytest.approx([0.0, -0.5, 0.0, 0.0, 0.0, 0.0])


def test_token_logprobs_match_log_softmax():
    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
    got, _ = token_logprobs_and_entropy(logits, torch.tensor([[2, 0]]), want_entropy=False)
    assert got[0, 0].item() == pytest.approx(3 - math.log(math.exp(1) + math.exp(2) + math.exp(3)))
    assert got[0, 1].item() == pytest.approx(-math.log(3))


def test_kl_estimators():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    # k3 = r - 1 - log r with r = ref/pi = 0.5
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - 1 - math.log(0.5))
    with pytest.raises(ValueError):
        kl_estimate(logp, ref, "k4")


def test_k3_is_unbiased_for_the_true_kl():
    torch.manual_seed(0)
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    samples = torch.multinomial(p, 200_000, replacement=True)
    est = kl_estimate(p.log()[samples], q.log()[samples], "k3").mean().item()
    true = (p * (p / q).log()).sum().item()
    assert est == pytest.approx(true, abs=5e-3)


def test_policy_loss_gradient_is_reinforce():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, low, high = policy_loss(logp, logp.detach(), torch.tensor([2.0]), None)
    loss.sum().backward()
    assert logp.grad.tolist() == [[-2.0, -2.0]] and not low.any() and not high.any()


def test_policy_loss_clips_asymmetrically():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5]])).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    loss, low, high = policy_loss(logp, old, adv, (0.2, 0.28))
    # ratio 1.5 with A>0: clipped at 1.28; ratio 0.5 with A<0: clipped at 0.8
    assert loss.detach().tolist()[0] == pytest.approx([-1.28, 1.5, -0.5, 0.8])
    assert high.tolist() == [[True, False, False, False]] and low.tolist() == [[False, False, False, True]]
    loss.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.0, 1.5, -0.5, 0.0])


def test_aggregation_modes_add_up_over_micro_batches():
    values = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 4.0, 4.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    tokens, seqs = 6.0, 3.0
    full = {m: aggregate(values, mask, m, tokens, seqs).item() for m in ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean")}
    assert full["token_mean"] == pytest.approx((1 + 2 + 3 + 12) / 6)
    assert full["seq_mean_token_sum"] == pytest.approx((3 + 3 + 12) / 3)
    assert full["seq_mean_token_mean"] == pytest.approx((1.5 + 3 + 4) / 3)
    for mode, expected in full.items():
        split = aggregate(values[:1], mask[:1], mode, tokens, seqs) + aggregate(values[1:], mask[1:], mode, tokens, seqs)
        assert split.item() == pytest.approx(expected)
    with pytest.raises(ValueError):
        aggregate(values, mask, "nope", tokens, seqs)
