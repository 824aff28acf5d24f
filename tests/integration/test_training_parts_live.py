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


def _qv_gate_lora(dtype=None, **config):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = get_peft_model(Qwen2ForCausalLM(cfg), LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                             target_modules=["q_proj", "v_proj", "gate_proj"], **config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    return model.to(dtype) if dtype else model


def test_lora_weights_exported_merged_one_at_a_time_are_peft_s_merge():
    """``exported_weights`` of a LoRA model: the merge peft makes, tensor by tensor, without
    touching the model; in the sampler's dtype; changed only: every weight of the modules holding
    adapters (k and o beside q and v, up and down beside gate: vLLM loads a packed layer whole), no
    norm, embedding or head."""
    import torch

    from rlvr.training.policy import exported_weights

    model = _qv_gate_lora()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    got = dict(exported_weights(model, zero3=False))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # untouched
    model.merge_adapter()
    expected = {n.removeprefix("base_model.model.").replace(".base_layer.", "."): p.detach().clone()
                for n, p in model.named_parameters() if "lora_" not in n}
    model.unmerge_adapter()
    assert got.keys() == expected.keys()
    for name, tensor in got.items():
        assert torch.allclose(tensor, expected[name], atol=1e-6, rtol=0), name
    assert not torch.equal(got["model.layers.0.self_attn.q_proj.weight"], before[
        "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"])  # the adapters are in it

    half = dict(exported_weights(model, zero3=False, dtype=torch.bfloat16, changed_only=True))
    assert {t.dtype for t in half.values()} == {torch.bfloat16}
    assert sorted(half) == sorted(n for n in expected if ".self_attn." in n or ".mlp." in n)
    assert "model.layers.1.self_attn.k_proj.bias" in half and "model.layers.1.mlp.down_proj.weight" in half
    for name, tensor in half.items():
        assert torch.equal(tensor, got[name].to(torch.bfloat16)), name


def test_lora_sync_sends_changed_weights_only_where_it_merges_them_itself():
    """``sync_weights``: changed only when asked (``complete=False``) and LoRA is merged as the
    weights go; whole, through peft's merge, for adapters it does not merge itself (DoRA here);
    in the sampler's dtype."""
    import torch

    from rlvr.training.policy import sync_weights

    class Taking:
        weights_dtype = torch.bfloat16

        def load_weights(self, weights, complete=True):
            self.names, self.complete = [n for n, t in weights if t.dtype == torch.bfloat16], complete

    sampler = Taking()
    model = _qv_gate_lora()
    sync_weights(model, sampler, lora=True, zero3=False)
    assert sampler.complete and "lm_head.weight" in sampler.names and len(sampler.names) == 2 * 12 + 3
    sync_weights(model, sampler, lora=True, zero3=False, complete=False)
    assert not sampler.complete and len(sampler.names) == 2 * 10
    dora = _qv_gate_lora(use_dora=True)
    sync_weights(dora, sampler, lora=True, zero3=False, complete=False)
    assert sampler.complete and len(sampler.names) == 2 * 12 + 3
    assert not any(getattr(m, "merged", False) for m in dora.modules())


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
