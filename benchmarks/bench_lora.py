"""LoRA sampling with the adapters merged vs unmerged: transformers ``generate`` time.

SmolLM2-135M-Instruct (fp32, this machine's CPU threads) with a LoRA adapter (r 16 on the
attention projections, the recipe default) samples 8 prompts x 4 completions of 32 new
tokens, with the adapters merged into the base weights (what rlvr's HF sampler does,
``rlvr.models.lora.merged_adapters``) and unmerged (peft's forward: base plus adapter
matmuls), alternating, best of ``--rounds``; the full model without LoRA as the anchor::

    .venv/bin/python benchmarks/bench_lora.py
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext


def main() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.hub import resolve_model
    from rlvr.models.lora import merged_adapters

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    path = resolve_model(a.model)
    tok = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                      task_type="CAUSAL_LM")).eval()
    prompts = tok([f"What is {i} + {2 * i}?" for i in range(8)], return_tensors="pt", padding=True, padding_side="left")

    def seconds(m, merge) -> float:
        torch.manual_seed(0)
        start = time.perf_counter()
        with merge(m), torch.no_grad():
            m.generate(**prompts, do_sample=True, max_new_tokens=32, min_new_tokens=32, num_return_sequences=4,
                       pad_token_id=tok.eos_token_id)
        return time.perf_counter() - start

    sides = {"no LoRA": (base, lambda m: nullcontext()), "LoRA merged": (model, merged_adapters),
             "LoRA unmerged": (model, lambda m: nullcontext())}
    best = dict.fromkeys(sides, float("inf"))
    seconds(base, lambda m: nullcontext())  # warm-up
    for _ in range(a.rounds):
        for name, (m, merge) in sides.items():
            best[name] = min(best[name], seconds(m, merge))
    for name, s in best.items():
        print(f"{name:<14} {s:6.2f} s  {s / best['no LoRA']:.2f}x the model without LoRA")


if __name__ == "__main__":
    main()
