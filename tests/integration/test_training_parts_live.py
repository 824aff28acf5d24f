"""The engine's parts without a model: the checks that start worker pools or loopback services, or
build a tiny model in-process (the integration ring; the others: tests/unit/test_training_parts.py)."""

from __future__ import annotations


# ---------------------------------------------------------------------------- LoRA sampling
def test_lora_adapters_merged_for_sampling_give_the_same_samples_and_weights_come_back(tiny_model):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.lora import merged_adapters
    from rlvr.sampling.samplers import HFSampler

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # an adapter that changes the outputs
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    prompts = [tok("What is 2+3?")["input_ids"], tok("Name a colour.")["input_ids"]]
    ids = torch.tensor([prompts[0]])
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        with merged_adapters(model):
            merged = model(input_ids=ids).logits
            assert any(m.merged for m in model.modules() if hasattr(m, "merged") and hasattr(m, "base_layer"))
        with model.disable_adapter():
            base = model(input_ids=ids).logits
    assert torch.allclose(merged, unmerged, atol=1e-5) and not torch.allclose(base, unmerged, atol=1e-3)
    expected = [model.generate(input_ids=torch.tensor([p]), do_sample=False, max_new_tokens=6,
                               pad_token_id=tok.eos_token_id)[0, len(p):].tolist() for p in prompts]
    groups = HFSampler(lambda: model, tok, synced=False).generate(prompts, n=1, temperature=0.0, top_p=1.0,
                                                                   max_tokens=6)
    assert [g[0].token_ids for g in groups] == [e[: len(g[0].token_ids)] for g, e in zip(groups, expected)]
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name  # bit for bit, not W + BA - BA
    assert not any(getattr(m, "merged", False) for m in model.modules() if hasattr(m, "base_layer"))


def test_merged_adapters_restore_bfloat16_weights_exactly():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.models.lora import merged_adapters

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj"],
                                                              task_type="CAUSAL_LM")).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(5):
        with merged_adapters(model):
            pass
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
