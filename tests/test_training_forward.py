"""Prompt-shared forward passes give the logits and gradients of full-sequence passes."""

import pytest
import torch


def _model(arch: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    common = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    if arch == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common)).float()
    return LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True, **common)).float()


# Three prompts of different lengths, each with several completions of different lengths,
# interleaved so that groups are not contiguous; one completion is a single token.
PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [5, 6, 7], [14, 15], [8, 9, 10, 11, 12, 13], [5, 6, 7], [14, 15]]
COMPLETIONS = [[20, 21, 22, 23], [30], [24, 25], [40, 41, 42, 43, 44, 45], [31, 32, 33], [26], [46, 47]]


def _logprobs(model, share, prompts=PROMPTS, completions=COMPLETIONS):
    from rlvr.training.forward import completion_logits
    from rlvr.training.losses import token_logprobs_and_entropy

    logits, ids, mask = completion_logits(model, prompts, completions, pad_id=0, device="cpu", share_prompts=share)
    return token_logprobs_and_entropy(logits, ids, want_entropy=False)[0] * mask, mask


@pytest.mark.parametrize("arch", [pytest.param("llama", marks=pytest.mark.slow), "qwen2"])  # llama: ~6 s
def test_shared_prompt_forward_matches_full_forward(arch):
    model = _model(arch)
    plain, mask_a = _logprobs(model, share=False)
    shared, mask_b = _logprobs(model, share=True)
    assert torch.equal(mask_a, mask_b)
    assert mask_a.sum() == sum(len(c) for c in COMPLETIONS)
    assert torch.allclose(plain, shared, atol=1e-5), (plain - shared).abs().max()
    # and each row equals that sequence run alone, with no padding at all
    for b, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS)):
        alone, _ = _logprobs(model, share=False, prompts=[p], completions=[c])
        assert torch.allclose(alone[0], plain[b, : len(c)], atol=1e-5)


def test_shared_prompt_forward_gives_the_same_gradient():
    grads = []
    for share in (False, True):
        model = _model("llama")
        logp, mask = _logprobs(model, share=share)
        weights = torch.linspace(-1.0, 2.0, logp.shape[0]).unsqueeze(1)  # stand-in advantages
        (logp * weights * mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        assert g.abs().sum() > 0, name
        assert torch.allclose(g, grads[1][name], atol=1e-5, rtol=1e-4), name


def test_all_single_token_completions():
    model = _model("llama")
    plain, _ = _logprobs(model, False, PROMPTS[:3], [[1], [2], [3]])
    shared, _ = _logprobs(model, True, PROMPTS[:3], [[1], [2], [3]])
    assert plain.shape == (3, 1)
    assert torch.allclose(plain, shared, atol=1e-5)


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


@pytest.mark.parametrize("share", [True, False])
def test_plan_cuts_where_padding_costs_more_than_a_micro_batch(share):
    """With an overhead per micro-batch, the length-sorted order is cut at the least total cost,
    found exactly (checked against every way to cut it), in micro-batches of at most ``micro``."""
    import itertools
    import random

    from rlvr.training.forward import _cut_at_least_cost, micro_batch_cost, plan_micro_batches

    rng = random.Random(0)
    for _ in range(30):
        n, micro, overhead = rng.randint(1, 9), rng.randint(1, 5), rng.choice([1, 8, 40])
        prompts = [rng.randint(20, 40) for _ in range(n)]
        comps = [rng.randint(1, 64) for _ in range(n)]
        groups = [rng.randint(0, 2) for _ in range(n)]
        order = sorted(range(n), key=lambda i: (prompts[i] + comps[i], i))

        def cost(plan):
            return sum(micro_batch_cost(c, prompts, comps, groups, share) + overhead for c in plan)

        best = min(cost([order[a:b] for a, b in zip((0,) + cuts, cuts + (n,))])
                   for k in range(n) for cuts in itertools.combinations(range(1, n), k)
                   if all(b - a <= micro for a, b in zip((0,) + cuts, cuts + (n,))))
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


# ------------------------------------------------- log-probs without the batch's full-vocabulary logits
def _chunked(model, share, temperature, chunk, want_entropy=True):
    from rlvr.training.forward import completion_hidden, output_head
    from rlvr.training.losses import head_logprobs

    hidden, ids, mask, (h_last, logits_last) = completion_hidden(model, PROMPTS, COMPLETIONS, pad_id=0, device="cpu",
                                                                 share_prompts=share)
    assert torch.allclose(output_head(model)(h_last), logits_last, atol=1e-6)  # the head alone makes the logits
    return head_logprobs(hidden, output_head(model), ids, mask, temperature=temperature, want_entropy=want_entropy,
                         chunk_tokens=chunk) + (mask,)


def _full(model, share, temperature):
    from rlvr.training.forward import completion_logits
    from rlvr.training.losses import token_logprobs_and_entropy

    logits, ids, mask = completion_logits(model, PROMPTS, COMPLETIONS, pad_id=0, device="cpu", share_prompts=share)
    logp, entropy = token_logprobs_and_entropy(logits / temperature, ids, want_entropy=True)
    return logp * mask, entropy * mask, mask


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("share", [True, False])
def test_chunked_head_logprobs_equal_the_full_logits_ones(arch, share):
    """Same log-probs, entropies and gradient as from the model's logits (float32, 1e-5), with
    chunks smaller than the batch and larger than it."""

    def gradients(model, logp, mask):
        weights = torch.linspace(-1.0, 2.0, logp.shape[0]).unsqueeze(1)  # stand-in advantages
        (logp * weights * mask).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    model = _model(arch)
    expected_logp, expected_entropy, mask = _full(model, share, temperature=0.7)
    expected_grads = gradients(model, expected_logp, mask)
    for chunk in (5, 1000):
        model = _model(arch)
        logp, entropy, mask = _chunked(model, share, temperature=0.7, chunk=chunk)
        assert torch.allclose(logp, expected_logp, atol=1e-5), (logp - expected_logp).abs().max()
        assert torch.allclose(entropy, expected_entropy, atol=1e-5), (entropy - expected_entropy).abs().max()
        assert float((logp.detach() * (1 - mask)).abs().sum()) == 0.0  # nothing on padding
        grads = gradients(model, logp, mask)
        for name, g in expected_grads.items():
            assert torch.allclose(grads[name], g, atol=1e-5, rtol=1e-4), name


def test_a_model_whose_logits_are_not_its_head_falls_back_to_its_logits():
    """Soft-capped logits (or any change after the head) are noticed on the first call: the
    learner warns once and takes log-probs from the model's logits."""
    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training.learner import Learner

    model = _model("qwen2")
    plain = Learner(None, AlgorithmConfig(), micro_batch_size=8, temperature=1.0, pad_id=0, device="cpu",
                    share_prompts=True, logprob_chunk_tokens=0)
    with torch.no_grad():
        expected, _, _ = plain.logprobs(model, PROMPTS, COMPLETIONS)
    original = model.forward

    def capped(*args, **kwargs):
        out = original(*args, **kwargs)
        out.logits = 2.0 * out.logits  # a scale after the head (Cohere's logit_scale, say)
        return out

    chunked = Learner(None, AlgorithmConfig(), micro_batch_size=8, temperature=1.0, pad_id=0, device="cpu",
                      share_prompts=True, logprob_chunk_tokens=4)
    with torch.no_grad():
        ok, mask, _ = chunked.logprobs(model, PROMPTS, COMPLETIONS)
        expected = expected * mask  # the model's logits give values on padding too; they count nowhere
        assert torch.allclose(ok, expected, atol=1e-5)
        model.forward = capped
        other = Learner(None, AlgorithmConfig(), micro_batch_size=8, temperature=1.0, pad_id=0, device="cpu",
                        share_prompts=True, logprob_chunk_tokens=4)
        capped_logp, _, _ = other.logprobs(model, PROMPTS, COMPLETIONS)
        reference, _, _ = plain.logprobs(model, PROMPTS, COMPLETIONS)
    assert other._head_makes_logits[id(model)] is False
    assert torch.allclose(capped_logp, reference, atol=1e-6)
    assert not torch.allclose(capped_logp * mask, expected, atol=1e-3)
