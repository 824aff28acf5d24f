"""Prompt-shared forward passes give the logits and gradients of full-sequence passes."""

import pytest

torch = pytest.importorskip("torch")


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
    plan = plan_micro_batches(prompts, comps, group_size=4, micro=4, share_prompts=True)
    _check_plan(plan, 16, 4)
    assert all(len({i // 4 for i in mb}) == 1 for mb in plan)  # one prompt per micro-batch


def test_plan_sorts_by_length_when_completion_padding_dominates():
    from rlvr.training.forward import plan_micro_batches

    # short prompts; in every group half the completions are short and half are long
    prompts = [3] * 16
    comps = [10, 500, 12, 510] * 4
    for share in (True, False):
        plan = plan_micro_batches(prompts, comps, group_size=4, micro=8, share_prompts=share)
        _check_plan(plan, 16, 8)
        assert max(comps[i] for i in plan[0]) == 12  # all the short ones together
    # uneven tail: 10 sequences in micro-batches of 4
    _check_plan(plan_micro_batches([5] * 10, list(range(10)), 5, 4, True), 10, 4)
