"""What this CPU can do, and what rlvr's trainer and sampler make of it, in one run.

Three tables, each figure measured here (nothing is taken from elsewhere):

1. **The machine**: the CPU's bf16 flags, matrix-multiply GFLOP/s in float32 and bfloat16 at
   the model's own shapes (a micro-batch's tokens through an MLP projection, through the output
   head) and at 2048^3, and memory read bandwidth. bfloat16 is first probed at 512^3; where it
   runs at under a quarter of float32's rate it is emulated (no ``avx512_bf16``/``amx_bf16``),
   the big shapes are skipped (2048^3 takes a minute there) and the probe's rate is printed.
2. **The trainer**: one ``Learner.update`` (rlvr's own, as ``rlvr train`` runs it) on a rollout
   shaped like GSM8K's at ``--profile cpu-0.5b`` (``--groups`` prompts of ~110 tokens x 8
   completions of 150-350 tokens, 40% rewarded), in the dtype ``model.dtype: auto`` picks here,
   for LoRA (r 16 on every projection) and full fine-tuning, with fused AdamW as
   ``rlvr.training.policy.build_policy`` hands DeepSpeed (``--modes full-8bit``: full
   fine-tuning with ``trainer.optimizer: adamw_8bit``; the optimizer's state is measured in
   bytes, beside the process's peak RSS). Per phase: the update's forward
   (model, log-probs and loss), backward, optimizer step, and what one pass without gradient
   would add (the old log-probs of ``ppo_epochs`` > 1, or a reference pass at beta > 0: rlvr
   skips both at ``ppo_epochs: 1`` and beta 0, as the recipe runs). Trained tokens/s, the
   FLOPs a trained token costs (2 x the weights' multiply-adds a token forward, as many again
   for the backward to the activations, and again for the weights' gradients under full
   fine-tuning; attention scores left out) and the achieved share of the measured matmul rate.
   Beside each, as ratios, the same update with one change undone: the output head's log-probs
   recomputed in the backward pass (how rlvr took them for every head before
   ``frozen_head_logprobs``), peft's own LoRA forward, and (LoRA under bfloat16 autocast) the
   frozen base held in float32 and the frozen head computing in float32, where ``rlvr train``
   holds them in bfloat16 (``hold_frozen_linears``).
3. **The sampler** (``--generation``): rlvr's colocated vLLM sampler (``VLLMSampler``, in this
   process, its KV cache sized as ``rlvr train`` sizes it), tokens/s against the sequences
   decoded together (``--sequences``: GSM8K-like prompts x 8 samples in one call, as a step asks;
   up to ``--gen-tokens`` each, T=1.0), in the dtype ``sampling.dtype: auto`` picks here, and
   the process's peak memory.

Run alone on the machine (each phase uses every core)::

    .venv/bin/python benchmarks/bench_cpu_train.py [--model qwen2.5-coder-0.5b-instruct] [--generation]
    .venv/bin/python benchmarks/bench_cpu_train.py --no-machine --modes '' --generation  # the sampler alone
"""

from __future__ import annotations

import argparse
import random
import resource
import time


def best_seconds(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_gflops(m: int, k: int, n: int, dtype, repeats: int = 3) -> float:
    import torch

    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    return 2 * m * k * n / best_seconds(lambda: a @ b, repeats) / 1e9


def read_gbps() -> float:
    import torch

    x = torch.ones(64 << 20)  # 256 MB of float32
    return 4 * x.numel() / best_seconds(lambda: x.sum()) / 1e9


def machine(config, tokens: int) -> dict:
    """Section 1: flags, matmul rates at the model's shapes, memory bandwidth."""
    import torch

    from rlvr.kit.device import cpu_has_bf16

    flags = open("/proc/cpuinfo").read().split()
    have = [f for f in ("avx512_bf16", "amx_bf16", "avx512f", "avx2") if f in flags]
    print(f"\n## 1. The machine: {torch.get_num_threads()} threads, flags {', '.join(have) or 'none of note'}; "
          f"rlvr's dtype auto here: {'bfloat16' if cpu_has_bf16() else 'float32'}")
    h, inter, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes = {f"{tokens} x {h} -> {inter} (MLP up)": (tokens, h, inter),
              f"{tokens} x {inter} -> {h} (MLP down)": (tokens, inter, h),
              f"256 x {h} -> {vocab} (output head chunk)": (256, h, vocab),
              "2048 x 2048 -> 2048": (2048, 2048, 2048)}
    probe32, probe16 = matmul_gflops(512, 512, 512, torch.float32, 5), matmul_gflops(512, 512, 512, torch.bfloat16, 2)
    emulated = probe16 < probe32 / 4  # emulated: ~1 GFLOP/s against ~100 (a 2048^3 product takes a minute)
    print("| shape | float32 GFLOP/s | bfloat16 GFLOP/s | bf16 / fp32 |\n| --- | --- | --- | --- |")
    rates = {}
    for name, shape in shapes.items():
        fp32 = matmul_gflops(*shape, torch.float32)
        bf16 = None if emulated else matmul_gflops(*shape, torch.bfloat16)
        rates[name] = (fp32, bf16)
        b = f"{bf16:.0f}" if bf16 else f"emulated ({probe16:.1f} at 512^3)"
        print(f"| {name} | {fp32:.0f} | {b} | {bf16 / fp32:.2f}x |" if bf16 else f"| {name} | {fp32:.0f} | {b} | - |")
    bandwidth = read_gbps()
    print(f"memory read: {bandwidth:.1f} GB/s")
    mlp = rates[next(iter(shapes))]
    return {"emulated_bf16": emulated, "mlp_gflops": mlp, "bandwidth": bandwidth}


def rollout_like_gsm8k(groups: int, vocab: int, seed: int = 0, lengths=(150, 350)):
    from rlvr.sampling.samplers import Completion
    from rlvr.training.rollout import Rollout

    rng = random.Random(seed)
    prompts = [[rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(100, 120))] for _ in range(groups)]
    comps = [Completion("", [rng.randrange(1000, 30000) for _ in range(rng.randint(*lengths))], False)
             for _ in range(groups * 8)]
    rewards = [float(rng.random() < 0.4) for _ in comps]
    for g in range(groups):  # every group has a gradient: one right and one wrong at least
        rewards[8 * g], rewards[8 * g + 1] = 1.0, 0.0
    return Rollout(8, prompts, comps, rewards, {"math": rewards})


class TimedBackend:
    """rlvr's learner backend as build_policy's optimizer makes it at ZeRO stage 0 (``optimizer``
    as ``trainer.optimizer`` names it, over the trained parameters), timing its backward and
    optimizer step."""

    def __init__(self, model, optimizer: str = "adamw"):
        from types import SimpleNamespace

        from rlvr.training.policy import build_optimizer

        self.policy = self.module = model
        params = [p for p in model.parameters() if p.requires_grad]
        trainer = SimpleNamespace(optimizer=optimizer, lr=1e-6, weight_decay=0.0, seed=0)
        self.optimizer = build_optimizer(trainer, params)
        self.times = {"backward": 0.0, "optimizer": 0.0}

    def state_gib(self) -> float:
        """What the optimizer holds (its moments), in GiB."""
        import torch

        return sum(t.numel() * t.element_size() for state in self.optimizer.state.values()
                   for t in state.values() if torch.is_tensor(t)) / 2**30

    def backward(self, loss, *, last):
        start = time.perf_counter()
        loss.backward()
        self.times["backward"] += time.perf_counter() - start

    def step(self):
        start = time.perf_counter()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.times["optimizer"] += time.perf_counter() - start
        return 0.0

    def set_lr(self, lr):
        pass


def linear_macs(model) -> tuple[int, int]:
    """(multiply-adds a token of the decoder's linear layers, of the output head), the frozen
    base weights' under LoRA (adapters are a few percent and left out)."""
    import torch

    from rlvr.training.forward import output_head

    head = output_head(model)
    body = sum(m.weight.numel() for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and m is not head and "lora_" not in name)
    return body, head.weight.numel()


def trainer(path: str, mode: str, groups: int, micro: int, dtype, mlp_rate: float, autocast: bool,
            rounds: int) -> None:
    """Section 2, one row pair: ``mode`` lora, full (fused AdamW) or full-8bit (``trainer.optimizer:
    adamw_8bit``)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.kit.device import device_policy
    from rlvr.models.lora import fuse_lora_adds, hold_frozen_linears
    from rlvr.recipe.spec import AlgorithmConfig
    from rlvr.training import losses
    from rlvr.training.learner import Learner

    overhead = device_policy().micro_batch_overhead  # what rlvr train cuts micro-batches by

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True)
    model.config.use_cache = False
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    rollout = rollout_like_gsm8k(groups, model.config.vocab_size)
    body, head = linear_macs(model)
    frozen = losses.frozen_head
    if mode == "lora":
        fuse_lora_adds(model)  # as build_policy does
    held = mode == "lora" and autocast  # build_policy's frozen_base_bf16: the frozen base in bfloat16
    if held:
        hold_frozen_linears(model, torch.bfloat16)
    optimizer = "adamw_8bit" if mode == "full-8bit" else "adamw"
    warm = Learner(TimedBackend(model, optimizer), AlgorithmConfig(kl={"beta": 0.0}), micro_batch_size=micro, temperature=0.7,
                   pad_id=0, device="cpu", share_prompts=True, cpu_autocast=autocast, micro_batch_overhead=overhead)
    warm.update(rollout_like_gsm8k(1, model.config.vocab_size, seed=1, lengths=(20, 40)), lr=0.0)  # first-call costs
    # rlvr as it trains, then each change undone alone: the anchors the ratios compare with
    sides = {"rlvr": (frozen, True, held), "head recomputed": (lambda h: False, True, held)}
    if mode == "lora":
        sides["peft's adds"] = (frozen, False, held)
    if held:  # the base in float32 under autocast, the frozen head computing in float32
        sides["float32 base"] = (frozen, True, False)
    del warm  # and its optimizer's state
    rows = {}
    for side, (head_rule, fused, bf16_base) in [item for _ in range(rounds) for item in sides.items()]:  # alternating
        losses.frozen_head = head_rule
        _set_fused(model, fused)
        if held:
            # float32 as loaded (the values rounded once; the timing is what this is for)
            hold_frozen_linears(model, torch.bfloat16 if bf16_base else torch.float32)
        backend = TimedBackend(model, optimizer)
        learner = Learner(backend, AlgorithmConfig(kl={"beta": 0.0}), micro_batch_size=micro, temperature=0.7,
                          pad_id=0, device="cpu", share_prompts=True, cpu_autocast=autocast,
                          micro_batch_overhead=overhead)
        if held and not bf16_base:
            learner.frozen_head_dtype = None
        start = time.perf_counter()
        update = learner.update(rollout, lr=1e-6)
        total = time.perf_counter() - start
        no_grad = 0.0
        if side == "rlvr" and side not in rows:  # what an old-log-prob or reference pass would add: the same micro-batches, no gradient
            plan = learner._plan(range(len(rollout.completions)), [len(p) for p in rollout.seq_prompts], rollout)
            start = time.perf_counter()
            with torch.no_grad():
                for idx in plan:
                    learner.logprobs(model, [rollout.seq_prompts[i] for i in idx],
                                     [rollout.completions[i].token_ids for i in idx])
            no_grad = time.perf_counter() - start
        if side not in rows or total < rows[side][2]:  # the best of the rounds
            rows[side] = (update.sums, backend.times, total, no_grad or rows.get(side, (0, 0, 0, 0))[3],
                          backend.state_gib())
    losses.frozen_head = frozen
    _set_fused(model, True)
    if held:
        hold_frozen_linears(model, torch.bfloat16)
    sums, times, total, no_grad, state_gib = rows["rlvr"]
    trained, through = sums["tokens"], sums["forward_tokens"]
    passes = 2 if mode == "lora" else 3  # forward, backward to activations, (weights' gradients)
    head_passes = 3 if mode != "lora" or not frozen(_head(model)) else 2
    flops = 2 * (passes * body * through + head_passes * head * trained)
    forward = total - times["backward"] - times["optimizer"]
    ratios = " | ".join(f"{rows[k][2] / total:.2f}x" if k in rows else "-"
                        for k in ("head recomputed", "peft's adds", "float32 base"))
    print(f"| {mode} | {trained:.0f} ({through:.0f}) | {total:.1f} | {forward:.1f} | {times['backward']:.1f} | "
          f"{times['optimizer']:.2f} | {no_grad:.1f} | **{trained / total:.1f}** | {flops / trained / 1e9:.2f} | "
          f"{flops / total / 1e9:.0f} ({flops / total / 1e9 / mlp_rate:.0%}) | {ratios} | {state_gib:.2f} | "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} |", flush=True)
    del model


def _set_fused(model, fused: bool) -> None:
    """LoRA layers adding in one matmul (``fuse_lora_adds``), or back to peft's own forward."""
    from rlvr.models.lora import fuse_lora_adds

    for m in model.modules():
        if type(m).__name__ == "FusedAddLoraLinear" and not fused:
            m.__class__ = type(m).__bases__[0]
        elif hasattr(m, "lora_A") and type(m).__name__ == "Linear" and fused:
            fuse_lora_adds(m)


def _head(model):
    from rlvr.training.forward import output_head

    return output_head(model)


def generation(path: str, dtype: str, counts: list[int], tokens: int) -> None:
    """Section 3: tokens/s of rlvr's colocated vLLM sampler (``VLLMSampler``, in this process, as
    ``rlvr train`` on one rank makes it) against the sequences decoded together: ``count / 8``
    GSM8K-like prompts x 8 samples each, in one call, as a training step asks."""
    from transformers import AutoTokenizer

    from rlvr.sampling.samplers import VLLMSampler, kv_cache_bytes, model_config

    print(f"\n## 3. The sampler: vLLM in process, {dtype}, up to {tokens} tokens a sequence, T=1.0")
    context = 1024
    start = time.perf_counter()
    sampler = VLLMSampler(path, max_model_len=context, seed=0, gpu_memory_utilization=0.3, in_process=True,
                          on_cpu=True, dtype=dtype,
                          kv_cache_bytes=kv_cache_bytes(model_config(path), context=context, seqs=max(counts),
                                                        dtype=dtype))
    print(f"engine up in {time.perf_counter() - start:.0f} s; process peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB")
    tok = AutoTokenizer.from_pretrained(path)
    question = ("Natalia sold clips to {} of her friends in April, and then she sold half as many clips in May. "
                "How many clips did Natalia sell altogether in April and May?")
    prompts = [tok.apply_chat_template([{"role": "system", "content": "Please reason step by step, and put your final "
                                         "answer within \\boxed{}."}, {"role": "user", "content": question.format(2 * i + 40)}],
                                       add_generation_prompt=True, tokenize=True, return_dict=False)
               for i in range(max(counts) // 8)]
    sampler.generate(prompts[:1], n=1, temperature=1.0, top_p=1.0, max_tokens=8, seed=0)  # warm-up
    print("| sequences (prompts x 8) | seconds | tokens | tokens/s | tokens/s a sequence |\n| --- | --- | --- | --- | --- |")
    for n in counts:
        start = time.perf_counter()
        out = sampler.generate(prompts[: max(1, n // 8)], n=8, temperature=1.0, top_p=1.0, max_tokens=tokens, seed=1)
        seconds = time.perf_counter() - start
        made = sum(len(c.token_ids) for group in out for c in group)
        print(f"| {n} | {seconds:.1f} | {made} | **{made / seconds:.0f}** | {made / seconds / n:.1f} |", flush=True)
    print(f"process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB")
    sampler.close()


def main() -> None:
    import torch
    from transformers import AutoConfig

    from rlvr.kit.device import cpu_has_bf16
    from rlvr.models.hub import resolve_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--groups", type=int, default=1, help="prompts of 8 completions in the trainer's rollout")
    p.add_argument("--micro", type=int, default=8, help="the recipe's trainer.micro_batch_size")
    p.add_argument("--modes", default="lora,full", help="lora, full (fused AdamW), full-8bit (trainer.optimizer: "
                   "adamw_8bit); peak RSS is the process's: run full and full-8bit apart to compare it")
    p.add_argument("--rounds", type=int, default=2, help="updates of each side, alternating; the best counts")
    p.add_argument("--generation", action="store_true", help="also section 3, the sampler")
    p.add_argument("--no-machine", dest="machine", action="store_false", help="skip section 1")
    p.add_argument("--sequences", default="8,16,32,64,128")
    p.add_argument("--gen-tokens", type=int, default=128)
    a = p.parse_args()
    path = str(resolve_model(a.model))
    config = AutoConfig.from_pretrained(path)
    bf16 = cpu_has_bf16()
    facts = machine(config, 8 * 331) if a.machine else {"mlp_gflops": (float("nan"), None)}
    # dtype auto: a bfloat16 trainer on a CPU is autocast over float32 weights (DevicePolicy.autocast)
    dtype, autocast = torch.float32, bf16
    mlp_rate = facts["mlp_gflops"][1] if bf16 and facts["mlp_gflops"][1] else facts["mlp_gflops"][0]
    if a.modes:
        print(f"\n## 2. The trainer: {a.model}, {'bfloat16 autocast' if autocast else 'float32'}, one update of "
              f"{a.groups} x 8 sequences, micro-batches of {a.micro}, ppo_epochs 1, beta 0")
        print("| mode | trained (through) tokens | update s | forward s | backward s | optimizer s | a no-grad pass s "
              "| tokens/s | GFLOP a token | GFLOP/s (of matmul rate) | head recomputed | peft's adds | float32 base "
              "| optimizer state GiB | peak RSS GiB |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    torch.manual_seed(0)
    for mode in filter(None, a.modes.split(",")):
        trainer(path, mode, a.groups, a.micro, dtype, mlp_rate, autocast, a.rounds)
    if a.generation:
        generation(path, "bfloat16" if bf16 else "float32", [int(n) for n in a.sequences.split(",")], a.gen_tokens)


if __name__ == "__main__":
    main()
