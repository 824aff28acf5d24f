"""Prompt-shared forward passes give the logits and gradients of full-sequence passes: the checks
that need no process, socket or model (the unit ring; the others:
tests/integration/test_training_forward.py)."""

import pytest
import torch


def test_logprobs_and_entropy_from_one_softmax():
    import torch.nn.functional as F

    from rlvr.training.losses import token_logprobs_and_entropy

    torch.manual_seed(1)
    logits = torch.randn(3, 5, 11, requires_grad=True)
    tokens = torch.randint(0, 11, (3, 5))
    logp, ent = token_logprobs_and_entropy(logits, tokens)
    assert torch.allclose(logp, F.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1))
    assert torch.allclose(ent, -(F.softmax(logits, -1) * F.log_softmax(logits, -1)).sum(-1))
    assert not ent.requires_grad and logp.requires_grad
    assert token_logprobs_and_entropy(logits, tokens, want_entropy=False)[1] is None
    # uniform logits: entropy log(V)
    flat = token_logprobs_and_entropy(torch.zeros(1, 1, 11), torch.zeros(1, 1, dtype=torch.long))[1]
    assert flat.item() == pytest.approx(torch.log(torch.tensor(11.0)).item())


def _every_cut(order):
    """Every way to cut ``order`` into consecutive non-empty micro-batches."""
    import itertools

    n = len(order)
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            yield [order[a:b] for a, b in zip((0,) + cuts, cuts + (n,))]


def _check_plan(plan, n, micro):
    flat = [i for mb in plan for i in mb]
    assert sorted(flat) == list(range(n)) and all(0 < len(mb) <= micro for mb in plan)


def test_plan_keeps_groups_together_when_prompts_dominate():
    from rlvr.training.forward import plan_micro_batches

    # 4 groups of 4; long prompts, short completions of varied length
    prompts = [200 + g for g in range(4) for _ in range(4)]
    comps = [1, 9, 2, 8, 3, 7, 4, 6, 5, 5, 6, 4, 7, 3, 8, 2]
    plan = plan_micro_batches(prompts, comps, groups=4, micro=4, share_prompts=True)
    _check_plan(plan, 16, 4)
    assert all(len({i // 4 for i in mb}) == 1 for mb in plan)  # one prompt per micro-batch


def test_plan_sorts_by_length_when_completion_padding_dominates():
    from rlvr.training.forward import plan_micro_batches

    # short prompts; in every group half the completions are short and half are long
    prompts = [3] * 16
    comps = [10, 500, 12, 510] * 4
    for share in (True, False):
        plan = plan_micro_batches(prompts, comps, groups=4, micro=8, share_prompts=share)
        _check_plan(plan, 16, 8)
        assert max(comps[i] for i in plan[0]) == 12  # all the short ones together
    # uneven tail: 10 sequences in micro-batches of 4
    _check_plan(plan_micro_batches([5] * 10, list(range(10)), 5, 4, True), 10, 4)


def _random_plan_case(rng, max_micro: int, overheads: list[int], max_completion: int):
    """(n, micro, overhead, prompt lengths, completion lengths, groups, the length-sorted order) of
    a random batch of at most 9 sequences, for the brute-force plan tests."""
    n, micro, overhead = rng.randint(1, 9), rng.randint(1, max_micro), rng.choice(overheads)
    prompts = [rng.randint(20, 40) for _ in range(n)]
    comps = [rng.randint(1, max_completion) for _ in range(n)]
    groups = [rng.randint(0, 2) for _ in range(n)]
    return n, micro, overhead, prompts, comps, groups, sorted(range(n), key=lambda i: (prompts[i] + comps[i], i))


@pytest.mark.parametrize("share", [True, False])
def test_plan_cuts_where_padding_costs_more_than_a_micro_batch(share):
    """With an overhead per micro-batch, the length-sorted order is cut at the least total cost,
    found exactly (checked against every way to cut it), in micro-batches of at most ``micro``."""
    import random

    from rlvr.training.forward import _cut_at_least_cost, micro_batch_cost, plan_micro_batches

    rng = random.Random(0)
    for _ in range(30):
        n, micro, overhead, prompts, comps, groups, order = _random_plan_case(rng, 5, [1, 8, 40], 64)

        def cost(plan):
            return sum(micro_batch_cost(c, prompts, comps, groups, share) + overhead for c in plan)

        best = min(cost(plan) for plan in _every_cut(order) if all(len(c) <= micro for c in plan))
        found = _cut_at_least_cost(order, prompts, comps, groups, micro, share, overhead)
        _check_plan(found, n, micro)
        assert cost(found) == best
        plan = plan_micro_batches(prompts, comps, groups, micro, share, overhead=overhead)
        _check_plan(plan, n, micro)
        assert cost(plan) <= min(cost(found), cost([order[a:a + micro] for a in range(0, n, micro)]))
    # 16 completions of 4 lengths in one micro-batch of 16 pad to the longest; cut by length they do not
    comps = [4, 8, 16, 32] * 4
    one = plan_micro_batches([30] * 16, comps, [0] * 16, 16, share)
    cut = plan_micro_batches([30] * 16, comps, [0] * 16, 16, share, overhead=16)
    assert len(one) == 1 and [sorted({comps[i] for i in mb}) for mb in cut] == [[4, 8], [16], [32]]


@pytest.mark.parametrize("share", [True, False])
def test_micro_batches_sized_by_tokens(share):
    """``max_tokens`` (trainer.micro_batch_tokens): no micro-batch of two or more sequences puts
    more tokens through the model; one longer sequence goes alone; among length-sorted cuts that
    keep both limits the cheapest is found (checked against every way to cut)."""
    import random

    from rlvr.training.forward import _cut_at_least_cost, micro_batch_cost, plan_micro_batches

    rng = random.Random(1)
    for _ in range(40):
        n, micro, overhead, prompts, comps, groups, order = _random_plan_case(rng, 6, [0, 8, 40], 120)
        cap = rng.randint(40, 400)

        def fits(chunk):
            return len(chunk) == 1 or micro_batch_cost(chunk, prompts, comps, groups, share) <= cap

        def cost(plan):
            return sum(micro_batch_cost(c, prompts, comps, groups, share) + overhead for c in plan)

        best = min(cost(p) for p in _every_cut(order) if all(len(c) <= micro and fits(c) for c in p))
        found = _cut_at_least_cost(order, prompts, comps, groups, micro, share, overhead, cap)
        _check_plan(found, n, micro)
        assert all(fits(c) for c in found) and cost(found) == best
        plan = plan_micro_batches(prompts, comps, groups, micro, share, overhead=overhead, max_tokens=cap)
        _check_plan(plan, n, micro)
        assert all(fits(c) for c in plan) and cost(plan) <= cost(found)
    # 8 sequences of 300 tokens after a 100-token prompt: 3 a micro-batch fit in 1,000 tokens
    plan = plan_micro_batches([100] * 8, [300] * 8, [0] * 8, 8, share, max_tokens=1000)
    assert sorted(len(mb) for mb in plan) == ([2, 3, 3] if share else [2, 2, 2, 2])
    assert plan_micro_batches([100] * 3, [5000] * 3, [0] * 3, 8, share, max_tokens=1000) == [[0], [1], [2]]
