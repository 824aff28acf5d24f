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


# ------------------------------------------------- a head that is not trained: two head matmuls, not three
def _lora(arch: str, dtype=torch.float32):
    from peft import LoraConfig, get_peft_model

    model = _model(arch).to(dtype)
    torch.manual_seed(1)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                                             task_type="CAUSAL_LM"))
    with torch.no_grad():  # B starts at 0: give the adapters something to carry
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


def _lora_rollout():
    """Two prompts x 4 completions of mixed lengths, each group with a gradient."""
    from rlvr.sampling.samplers import Completion
    from rlvr.training.rollout import Rollout

    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13]]
    comps = [[20, 21, 22, 23], [30], [24, 25, 26], [40, 41, 42, 43, 44, 45], [31, 32, 33], [26, 27], [46, 47], [50]]
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    return Rollout(4, prompts, [Completion("", c, False) for c in comps], rewards, {"r": rewards})


class _Recorder:
    """A learner backend that keeps the gradient of the update instead of stepping."""

    def __init__(self, model):
        self.policy = self.module = model
        self.grads = None

    def backward(self, loss, *, last):
        loss.backward()

    def step(self):
        self.grads = {n: p.grad.clone() for n, p in self.module.named_parameters() if p.grad is not None}
        self.module.zero_grad(set_to_none=True)
        return 0.0

    def set_lr(self, lr):
        pass


@pytest.mark.parametrize("arch", ["qwen2", "llama"])  # llama: the head is the (frozen) tied embedding
@pytest.mark.parametrize("chunk", [4, 1000])
def test_a_frozen_heads_update_equals_the_full_logits_one(arch, chunk):
    """A LoRA update through the frozen head's precomputed gradient (``frozen_head_logprobs``):
    the same loss, entropy, clip figures and LoRA gradients as from the model's full logits,
    to 1e-6 in float32, over two PPO epochs (old log-probs, ratios and clipping in play)."""
    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training.forward import output_head
    from rlvr.training.learner import Learner
    from rlvr.training.losses import frozen_head

    rollout = _lora_rollout()
    algo = AlgorithmConfig(ppo_epochs=2, clip={"eps_low": 0.01, "eps_high": 0.01})
    results = []
    for chunk_tokens in (0, chunk):  # 0: log-probs from the model's logits
        model = _lora(arch)
        assert frozen_head(output_head(model))
        backend = _Recorder(model)
        learner = Learner(backend, algo, micro_batch_size=3, temperature=0.7, pad_id=0, device="cpu",
                          share_prompts=True, logprob_chunk_tokens=chunk_tokens)
        update = learner.update(rollout, lr=0.0)
        results.append((update.sums, backend.grads))
    (want_sums, want_grads), (sums, grads) = results
    assert want_grads and set(grads) == set(want_grads) and all("lora_" in n for n in grads)
    for key in ("loss", "entropy", "clip_low", "clip_high", "tokens"):
        assert sums[key] == pytest.approx(want_sums[key], rel=1e-6, abs=1e-6), key  # sums over 20 tokens
    for name, g in want_grads.items():
        assert torch.allclose(grads[name], g, atol=1e-6, rtol=0), (name, (grads[name] - g).abs().max())


def test_a_frozen_bfloat16_head_gives_autograds_gradient():
    """A frozen head held in bfloat16 (DeepSpeed's bf16 mode under LoRA): log-probs, entropies
    and the hidden states' gradient as autograd gives them through the head's float32 logits."""
    from rlvr.training.losses import frozen_head_logprobs, token_logprobs_and_entropy

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 300, bias=True).to(torch.bfloat16).requires_grad_(False)
    h = torch.randn(11, 16).to(torch.bfloat16).requires_grad_()
    tokens, g = torch.randint(0, 300, (11,)), torch.randn(11)
    want, want_ent = token_logprobs_and_entropy(head(h).float() / 0.6, tokens)
    (want * g).sum().backward()
    want_grad, h.grad = h.grad.clone(), None
    logp, ent = frozen_head_logprobs(h, head.weight, head.bias, tokens, temperature=0.6, chunk_tokens=4)
    (logp * g).sum().backward()
    assert torch.allclose(logp, want, atol=1e-5) and torch.allclose(ent, want_ent, atol=1e-4)
    assert h.grad.dtype == torch.bfloat16
    assert torch.allclose(h.grad.float(), want_grad.float(), atol=2e-2, rtol=2e-2)


def test_lora_adds_in_one_matmul_give_peft_outputs_and_gradients():
    """``fuse_lora_adds``: the LoRA layers' outputs and the update's gradients are peft's (1e-6);
    adapters disabled (the KL reference) and merged (sampling) behave as peft's; a layer with
    dropout is left to peft."""
    from peft import LoraConfig, get_peft_model

    from rlvr.models.lora import fuse_lora_adds, merged_adapters
    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training.learner import Learner

    ids = torch.randint(1, 90, (3, 7))
    rollout = _lora_rollout()
    seen = []
    for fuse in (False, True):
        model = _lora("qwen2")
        assert fuse_lora_adds(model) == 6 if fuse else True
        assert {type(m).__name__ for m in model.modules() if hasattr(m, "lora_A")} == \
            ({"FusedAddLoraLinear"} if fuse else {"Linear"})
        with torch.no_grad():
            out = model(input_ids=ids).logits
            with model.disable_adapter():
                base = model(input_ids=ids).logits
            with merged_adapters(model):
                merged = model(input_ids=ids).logits
        backend = _Recorder(model)
        Learner(backend, AlgorithmConfig(kl={"beta": 0.0}), micro_batch_size=3, temperature=0.7, pad_id=0,
                device="cpu", share_prompts=True).update(rollout, lr=0.0)
        seen.append((out, base, merged, backend.grads))
    for want, got in zip(seen[0][:3], seen[1][:3]):
        assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(seen[1][0], seen[1][1], atol=1e-3)  # the adapters do something
    for name, g in seen[0][3].items():
        assert torch.allclose(seen[1][3][name], g, atol=1e-6, rtol=0), name
    with_dropout = get_peft_model(_model("qwen2"), LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.1))
    assert fuse_lora_adds(with_dropout) == 0


# ------------------------------------------------- a LoRA base held in bfloat16 under the CPU's autocast
@pytest.mark.parametrize("arch", ["qwen2", "llama"])  # llama: the head is the tied embedding, kept float32
def test_a_lora_base_held_in_bfloat16_computes_what_autocast_computes(arch):
    """``hold_frozen_linears``: the frozen projections (and an untied head) of a LoRA model in
    bfloat16, adapters, embeddings and norms in float32. Under the CPU's bfloat16 autocast, which
    casts each weight to bfloat16 in every forward anyway, an update gives the same loss and
    adapter gradients as over the float32 base, and the frozen head computes in bfloat16 either way
    (``frozen_dtype``): its log-probs are the float32 head's up to bfloat16's rounding, not equal."""
    from rlvr.models.lora import fuse_lora_adds, hold_frozen_linears
    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training.forward import output_head
    from rlvr.training.learner import Learner

    rollout = _lora_rollout()
    results = []
    for held in (False, True):
        model = _lora(arch)
        fuse_lora_adds(model)
        frozen = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
        cast = hold_frozen_linears(model, torch.bfloat16) if held else 0
        dtypes = {n: p.dtype for n, p in model.named_parameters()}
        backend = _Recorder(model)
        learner = Learner(backend, AlgorithmConfig(), micro_batch_size=3, temperature=0.7, pad_id=0, device="cpu",
                          share_prompts=True, logprob_chunk_tokens=4, cpu_autocast=True)
        update = learner.update(rollout, lr=0.0)
        with torch.no_grad():
            logp, mask, _ = learner.logprobs(model, rollout.prompt_ids[:1], [rollout.completions[0].token_ids])
        results.append((update.sums, backend.grads, logp, cast, frozen, dtypes, output_head(model)))
    (want_sums, want_grads, logp32, *_), (sums, grads, logp16, cast, frozen, dtypes, head) = results
    assert all(d == torch.float32 for n, d in dtypes.items() if "lora_" in n or "norm" in n or "embed" in n)
    assert all(d == torch.bfloat16 for n, d in dtypes.items() if "base_layer" in n or n.endswith("_proj.weight"))
    tied = arch == "llama"
    assert head.weight.dtype == (torch.float32 if tied else torch.bfloat16)
    assert 0 < cast < frozen  # the embeddings (and norms) stay float32
    assert set(grads) == set(want_grads) and all("lora_" in n and g.dtype == torch.float32 for n, g in grads.items())
    for key in ("loss", "entropy", "tokens"):
        assert sums[key] == pytest.approx(want_sums[key], rel=1e-6, abs=1e-6), key
    for name, g in want_grads.items():
        assert torch.allclose(grads[name], g, atol=1e-6, rtol=0), (name, (grads[name] - g).abs().max())
    # the bfloat16 head against a float32 one: the same model, log-probs through the float32 head
    model = _lora(arch)
    learner = Learner(None, AlgorithmConfig(), micro_batch_size=3, temperature=0.7, pad_id=0, device="cpu",
                      share_prompts=True, logprob_chunk_tokens=4, cpu_autocast=False)
    with torch.no_grad():
        exact, _, _ = learner.logprobs(model, rollout.prompt_ids[:1], [rollout.completions[0].token_ids])
    gap = ((logp16 - exact) * mask).abs().max().item()
    assert torch.equal(logp16, logp32) and 0 < gap < 0.1, gap


def test_which_lora_trainers_hold_their_base_in_bfloat16():
    """Under the CPU's bfloat16 autocast only, with LoRA, not under ZeRO-3 (weights in shards), and
    not when the sampler generates on the live weights outside autocast (``sampling.backend: hf``)."""
    from rlvr.kit.device import DevicePolicy
    from rlvr.recipe.spec import Recipe
    from rlvr.training.policy import frozen_base_bf16

    def recipe(lora=True, backend="vllm", dtype="auto"):
        return Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"math": 1.0},
                                      "model": {"dtype": dtype, "lora": {"r": 4} if lora else None},
                                      "sampling": {"backend": backend}})

    cpu_bf16, cpu = DevicePolicy(cuda=False, cuda_rules=False, bf16=True), DevicePolicy(cuda=False, cuda_rules=False, bf16=False)
    cuda = DevicePolicy(cuda=True, cuda_rules=True, bf16=True)
    assert frozen_base_bf16(recipe(), cpu_bf16, 0) and frozen_base_bf16(recipe(), cpu_bf16, 2)
    assert frozen_base_bf16(recipe(dtype="bfloat16"), cpu, 0)  # pinned: autocast, emulated or not
    assert not frozen_base_bf16(recipe(), cpu, 0)  # auto on a CPU without bf16: float32
    assert not frozen_base_bf16(recipe(lora=False), cpu_bf16, 0)
    assert not frozen_base_bf16(recipe(), cpu_bf16, 3)
    assert not frozen_base_bf16(recipe(backend="hf"), cpu_bf16, 0)
    assert not frozen_base_bf16(recipe(), cuda, 0)  # DeepSpeed's bf16 mode holds every weight in bfloat16


def test_a_frozen_reference_computes_its_head_as_the_trained_policy_does():
    """Full fine-tuning with a KL term under the CPU's autocast: the policy's trained head computes
    in float32, and so does the frozen reference's, so that at the start (the same weights) the
    reference's log-probs are the policy's (to float32's rounding); under LoRA both heads compute
    in bfloat16."""
    import copy

    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training.learner import Learner

    rollout = _lora_rollout()
    prompts, comps = rollout.seq_prompts, [c.token_ids for c in rollout.completions]
    policy = _model("qwen2")
    reference = copy.deepcopy(policy).requires_grad_(False)
    learner = Learner(_Recorder(policy), AlgorithmConfig(kl={"beta": 0.1}), micro_batch_size=8, temperature=0.7,
                      pad_id=0, device="cpu", share_prompts=True, ref_model=reference, cpu_autocast=True)
    with torch.no_grad():
        mine, mask, _ = learner.logprobs(policy, prompts, comps)
        theirs = learner._reference(prompts, comps)
    # float32 both (the frozen path's own softmax against autograd's: rounding only); a bfloat16
    # reference head would differ by about 1e-2
    assert torch.allclose(mine * mask, theirs * mask, atol=1e-5, rtol=0) and learner._frozen_dtype() is None
    lora = Learner(_Recorder(_lora("qwen2")), AlgorithmConfig(), micro_batch_size=8, temperature=0.7, pad_id=0,
                   device="cpu", share_prompts=True, cpu_autocast=True)
    assert lora._frozen_dtype() == torch.bfloat16


def test_lora_adds_under_autocast_skip_peft_s_float32_copy_of_the_input():
    """Under the CPU's bfloat16 autocast the fused LoRA layer hands A the bfloat16 input as it is
    (autocast computes A's product in bfloat16 either way); peft casts it to A's float32 first,
    which writes the activations twice more. Outputs and gradients agree with peft's to bfloat16's
    rounding."""
    from rlvr.models.lora import fuse_lora_adds

    outs, seen = [], []
    for fuse in (False, True):
        model = _lora("qwen2")
        if fuse:
            fuse_lora_adds(model)
        layer = model.base_model.model.model.layers[0].mlp.up_proj
        hook = layer.lora_A["default"].register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
        x = torch.randn(5, 64, dtype=torch.bfloat16, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x)
        y.float().square().sum().backward()
        hook.remove()
        outs.append((y.float(), x.grad.float(), layer.lora_B["default"].weight.grad))
    assert seen == [torch.float32, torch.bfloat16]
    for peft_side, fused_side in zip(*outs):
        assert torch.allclose(fused_side, peft_side, rtol=3e-2, atol=3e-2), (fused_side - peft_side).abs().max()
