"""Evaluation: pass@1, unbiased pass@k (Chen et al. 2021), maj@k, per-subject breakdowns.

``evaluate_with`` runs on a sampler the caller already has (the trainer's, before and after
training); ``evaluate`` is ``rlvr eval``: it loads the model into a sampler of its own.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from . import RlvrError
from .plugins import Registry
from .recipe import Recipe, data_dir
from .rewards import bind_rewards, score_batch


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def majority_correct(answers: Sequence[str | None], passed: Sequence[bool]) -> bool:
    """maj@k: is the most common extracted answer (ties: first seen) a passing one?"""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return any(p for a, p in zip(answers, passed) if a == winner)


def eval_rows(recipe: Recipe, registry: Registry) -> list[dict]:
    ref = recipe.eval_task
    rows = []
    for row in registry.task(ref.name).load(recipe.eval_split, data_dir=data_dir(), **ref.options):
        rows.append(row)
        if recipe.eval.limit and len(rows) >= recipe.eval.limit:
            break
    if not rows:
        raise RlvrError(f"task {ref.name!r} split {recipe.eval_split!r} has no rows")
    return rows


def _answer_of(info: dict) -> str | None:
    for key in ("pred", "prediction", "answer", "extracted"):
        if info.get(key) is not None:
            return str(info[key])
    return None


def evaluate_with(recipe: Recipe, registry: Registry, sampler, tokenizer, *, rank: int = 0, world: int = 1,
                  rows: list[dict] | None = None, keep_samples: bool = False) -> dict[str, Any]:
    """Sample, score and summarise the eval split. Ranks split the prompts; counts are summed."""
    from .engine import render_prompt

    rows = rows if rows is not None else eval_rows(recipe, registry)
    ev = recipe.eval
    n = max(ev.k)
    temperature = ev.temperature if n == 1 else (ev.temperature or 1.0)
    mine = list(range(rank, len(rows), world))
    prompts = [render_prompt(tokenizer, recipe.eval_prompt, rows[i]) for i in mine]
    outs = sampler.generate(prompts, n=n, temperature=temperature, top_p=recipe.sampling.top_p,
                            max_tokens=ev.max_tokens or recipe.sampling.max_tokens, seed=12345 + rank) if mine else []
    rewards = bind_rewards(recipe.rewards, registry)
    correctness = ev.correctness_reward or next(iter(recipe.rewards))
    flat = [c for group in outs for c in group]
    flat_rows = [rows[i] for i in mine for _ in range(n)]
    flat_prompts = [tokenizer.decode(p) for p in prompts for _ in range(n)]
    scored = score_batch(rewards, flat_prompts, [c.text for c in flat], [c.token_ids for c in flat], flat_rows) if flat else None
    per_prompt = []
    for j, i in enumerate(mine):
        values = scored.values[correctness][j * n : (j + 1) * n]
        infos = scored.infos[correctness][j * n : (j + 1) * n]
        passed = [v is not None and v >= ev.pass_threshold for v in values]
        per_prompt.append({
            "index": i,
            "passed": passed,
            "unscorable": sum(v is None for v in values),
            "maj": majority_correct([_answer_of(x) for x in infos], passed),
            "samples": [{"completion": c.text, "reward": scored.total[j * n + m], "correct": passed[m],
                         "reward_info": {name: scored.infos[name][j * n + m] for name in scored.names}}
                        for m, c in enumerate(flat[j * n : (j + 1) * n])] if keep_samples else None,
        })
    # sums over ranks
    ks = ev.k
    local = [len(per_prompt), sum(p["passed"][0] for p in per_prompt)]
    local += [sum(pass_at_k(n, sum(p["passed"]), k) for p in per_prompt) for k in ks]
    local += [sum(p["maj"] for p in per_prompt), sum(p["unscorable"] for p in per_prompt)]
    if world > 1:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(local, dtype=torch.float64)
        dist.all_reduce(tensor)
        local = tensor.tolist()
    total = local[0]
    result: dict[str, Any] = {
        "n": int(total),
        "samples_per_prompt": n,
        "temperature": temperature,
        "accuracy": local[1] / total if total else 0.0,
        **{f"pass@{k}": local[2 + j] / total if total else 0.0 for j, k in enumerate(ks)},
        "unscorable": int(local[-1]),
    }
    if n > 1:
        result[f"maj@{n}"] = local[-2] / total if total else 0.0
    result["_rows"] = rows
    result["_per_prompt"] = per_prompt
    return result


def breakdown(rows: list[dict], per_prompt: list[dict], key: str) -> dict[str, dict]:
    groups: dict[str, list] = defaultdict(list)
    for p in per_prompt:
        groups[str(rows[p["index"]].get(key, ""))].append(p["passed"][0])
    return {g: {"n": len(v), "pass@1": sum(v) / len(v)} for g, v in sorted(groups.items())}


def evaluate(recipe: Recipe, registry: Registry, output_dir: Path) -> dict[str, Any]:
    """``rlvr eval``: load the model into a sampler, evaluate, write reports."""
    import torch

    from .models import resolve_model
    from .sampling import HFSampler, VLLMSampler, model_max_len

    rows = eval_rows(recipe, registry)
    model_path = resolve_model(recipe.model.name)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    max_tokens = recipe.eval.max_tokens or recipe.sampling.max_tokens
    if recipe.sampling.backend == "vllm":
        longest = max(len(tokenizer(recipe.eval_prompt.template.format(**r))["input_ids"]) for r in rows[:200])
        limit = model_max_len(model_path)
        if limit and longest + max_tokens > limit:
            raise RlvrError(f"eval prompts of up to {longest} tokens plus max_tokens {max_tokens} exceed the model's "
                            f"context of {limit} tokens: lower eval.max_tokens")
        sampler = VLLMSampler(model_path, max_model_len=2 * longest + 256 + max_tokens, seed=0,
                              gpu_memory_utilization=recipe.sampling.gpu_memory_utilization,
                              cpu_kvcache_gib=recipe.sampling.cpu_kvcache_gib, in_process=True,
                              on_cpu=not torch.cuda.is_available(), dtype=recipe.sampling.dtype)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_path)
        sampler = HFSampler(lambda: model, tokenizer, synced=False)
    result = evaluate_with(recipe, registry, sampler, tokenizer, rows=rows, keep_samples=True)
    per_prompt = result.pop("_per_prompt")
    result.pop("_rows")
    for key in ("subject", "level"):
        if key in rows[0]:
            result[f"by_{key}"] = breakdown(rows, per_prompt, key)
    result.update(model=recipe.model.name, recipe=recipe.name, task=recipe.eval_task.name, split=recipe.eval_split)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "report.json").write_text(json.dumps(result, indent=2))
    with open(output_dir / "samples.jsonl", "w") as f:
        for p in per_prompt:
            row = rows[p["index"]]
            f.write(json.dumps({"id": row.get("id") or row.get("task_id"), "samples": p["samples"]}, default=str) + "\n")
    (output_dir / "report.md").write_text(_markdown(result))
    print(_markdown(result))
    sampler.close()
    return result


def _markdown(result: dict) -> str:
    keys = [k for k in result if k.startswith(("pass@", "maj@"))]
    lines = [f"| model | task | split | n | {' | '.join(keys)} |", "|" + "---|" * (4 + len(keys))]
    lines.append(f"| {result['model']} | {result['task']} | {result['split']} | {result['n']} | "
                 + " | ".join(f"{100 * result[k]:.1f}" for k in keys) + " |")
    for key in ("by_subject", "by_level"):
        if key in result:
            lines += ["", f"| {key[3:]} | n | pass@1 |", "|---|---|---|"]
            lines += [f"| {g} | {v['n']} | {100 * v['pass@1']:.1f} |" for g, v in result[key].items()]
    return "\n".join(lines) + "\n"
