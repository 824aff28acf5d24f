"""On a CUDA machine, what the CPU tests hold under CUDA's rules, on the card itself: the device
policy's decisions for this card, the log-probs of a bfloat16 output head, and the learner's paths
on a bfloat16 model. Marked ``gpu``: an expected skip without CUDA (tests/helpers/rings.py), run
when a GPU is lent (benchmarks/gpu_check.py covers training end to end there)."""

from __future__ import annotations

import pytest
import torch

from rlvr.kit.device import device_policy
from rlvr.training.losses import head_logprobs, token_logprobs_and_entropy

pytestmark = pytest.mark.gpu


def test_the_policy_of_this_card():
    policy = device_policy()
    assert policy.cuda and policy.cuda_rules and policy.device().type == "cuda"
    assert policy.bf16 == torch.cuda.is_bf16_supported(including_emulation=False)
    assert policy.trainer_dtype("auto") == ("bfloat16" if policy.bf16 else "float32")
    assert policy.dist_backend() == "nccl"


@pytest.mark.parametrize("chunk", [3, 256])
def test_a_bfloat16_head_on_the_card(chunk):
    torch.manual_seed(0)
    cuda = torch.device("cuda")
    head = torch.nn.Linear(16, 50, bias=False).to(cuda, torch.bfloat16)
    hidden = torch.randn(2, 5, 16, device=cuda).requires_grad_()
    tokens = torch.randint(0, 50, (2, 5), device=cuda)
    mask = torch.ones(2, 5, device=cuda)
    logp, ent = head_logprobs(hidden, head, tokens, mask, chunk_tokens=chunk)
    want, want_ent = token_logprobs_and_entropy(head(hidden.detach().to(torch.bfloat16)).float(), tokens)
    assert logp.dtype == torch.float32 and torch.allclose(logp, want, atol=1e-5)
    assert torch.allclose(ent, want_ent, atol=1e-4)
    logp.sum().backward()
    assert torch.isfinite(hidden.grad).all() and torch.isfinite(head.weight.grad).all()


@pytest.mark.parametrize("chunk", [0, 4])
def test_the_learners_log_probs_of_a_bfloat16_model_on_the_card(chunk):
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.training.learner import Learner

    torch.manual_seed(0)
    cuda = torch.device("cuda")
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(cuda, torch.bfloat16)
    learner = Learner(None, None, micro_batch_size=2, temperature=1.0, pad_id=0, device=cuda,
                      share_prompts=False, ref_model=model, logprob_chunk_tokens=chunk)
    prompts, completions = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]
    logp, mask, ent = learner.logprobs(model, prompts, completions, want_entropy=True)
    assert logp.dtype == torch.float32 and logp.device.type == "cuda" and torch.isfinite(logp).all()
    assert torch.allclose(learner._reference(prompts, completions), logp)
