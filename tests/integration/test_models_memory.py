"""Weights copied out of a mapped safetensors file (rlvr.models.memory), on a model saved here."""

from __future__ import annotations

import gc
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")


def _mapped(folder) -> list[str]:
    return [line for line in open("/proc/self/maps") if str(folder) in line]


def test_views_of_a_mapped_file_are_copied_and_the_file_is_let_go(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from rlvr.models.lora import hold_frozen_linears
    from rlvr.models.memory import mapped_file_ranges, own_mapped_tensors

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, use_safetensors=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    # what the loader hands out in the file's own dtype views the file (transformers' zero-copy load);
    # the linears cast to bfloat16 leave the embeddings and norms viewing it still
    assert _mapped(tmp_path) and mapped_file_ranges()
    hold_frozen_linears(model.requires_grad_(False), torch.bfloat16)
    gc.collect()
    assert _mapped(tmp_path)
    copied = own_mapped_tensors(model)
    gc.collect()
    embedding_and_norms = sum(p.numel() * 4 for n, p in model.named_parameters() if p.dtype == torch.float32)
    assert copied == embedding_and_norms > 0
    assert not _mapped(tmp_path)  # the file's pages went with its last view
    assert own_mapped_tensors(model) == 0
    for name, p in model.named_parameters():
        assert torch.equal(p.float(), before[name].to(p.dtype).float()), name
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        again = model(input_ids=ids).logits.float()
    assert torch.allclose(again, logits, atol=0.1)  # the bfloat16 linears' rounding, nothing else
