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


@pytest.mark.parametrize("arch", [pytest.param("llama"), "qwen2"])  # llama: ~6 s
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
