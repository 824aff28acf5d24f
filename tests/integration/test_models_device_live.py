"""The CUDA decisions in one place (rlvr.kit.device.DevicePolicy), checked as pure functions for the
CPU's rules, CUDA's rules on a CPU and a real CUDA machine: the checks that start worker pools or
loopback services, or build a tiny model in-process (the integration ring; the others:
tests/unit/test_models_device.py)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("chunk", [0, 4])
def test_the_learners_log_probs_of_a_bfloat16_model_with_and_without_chunks(chunk):
    """The learner's two log-prob paths (the head a chunk at a time, and the model's own logits)
    and the reference's on a model held in bfloat16, as DeepSpeed's bf16 mode holds it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.training.learner import Learner

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    learner = Learner(None, None, micro_batch_size=2, temperature=1.0, pad_id=0, device=torch.device("cpu"),
                      share_prompts=False, ref_model=model, logprob_chunk_tokens=chunk)
    prompts, completions = [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10]]
    logp, mask, ent = learner.logprobs(model, prompts, completions, want_entropy=True)
    assert logp.dtype == torch.float32 and torch.isfinite(logp).all() and ent is not None
    ref = learner._reference(prompts, completions)
    assert torch.allclose(ref, logp)
    other = Learner(None, None, micro_batch_size=2, temperature=1.0, pad_id=0, device=torch.device("cpu"),
                    share_prompts=False, logprob_chunk_tokens=4 if chunk == 0 else 0)
    got = other.logprobs(model, prompts, completions)[0]
    assert torch.allclose(got * mask, logp * mask, atol=2e-2)  # bfloat16 logits either way
