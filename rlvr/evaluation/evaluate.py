"""Evaluation: pass@1, unbiased pass@k (Chen et al. 2021), maj@k, per-subject breakdowns.

``evaluate_with`` runs on a sampler the caller already has (the trainer's, before and after
training); ``evaluate`` is ``rlvr eval``: it loads the model into a sampler of its own.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rlvr import RlvrError
from rlvr.evaluation.compare import counted, percent
from rlvr.host.registry import Registry
from rlvr.kit import write_replacing
from rlvr.models.distributed import process_group_scope, reduce_sums
from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS
from rlvr.recipe.spec import Recipe
from rlvr.rewards.runner import BoundReward, bind_rewards
from rlvr.rewards.scored import sample_and_score
from rlvr.runs.logs import ProgressLog
from rlvr.runs.metrics import reward_metrics
from rlvr.sampling.episodes import episode_runner
from rlvr.sampling.prompts import PromptSet, load_prompt_set

log = logging.getLogger("rlvr.evaluation")


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


def _answer_of(info: dict) -> str | None:
    for key in ("pred", "prediction", "answer", "extracted"):
        if info.get(key) is not None:
            return str(info[key])
    return None


def evaluate_with(recipe: Recipe, rewards: Sequence[BoundReward], sampler, eval_set: PromptSet, *, rank: int = 0,
                  world: int = 1, keep_samples: bool = False, episodes=None, progress_label: str | None = None,
                  require_scores: bool = False) -> tuple[dict[str, Any], list[dict]]:
    """Sample, score and summarise the eval prompts: (summary, this rank's per-prompt results).
    Ranks split the prompts; the summary's counts are summed over ranks. With ``episodes`` (an
    ``rlvr.sampling.episodes.EpisodeRunner``) each sample is an episode, and the summary has its
    tool figures; the rewards' own metrics (``Score.metrics``) are in it as ``reward/<reward>/<key>``,
    as in a step's row. With ``progress_label`` a line is logged at each tenth of the samples drawn.
    What the rewards could not score is logged in one line; with ``require_scores`` an evaluation
    whose correctness reward scored no sample (of any rank) raises ``RlvrError`` naming it and why:
    its accuracy would be a 0 that measured nothing."""
    ev = recipe.eval
    n = max(ev.k)
    temperature = ev.temperature if n == 1 else (ev.temperature or 1.0)
    mine = list(range(rank, len(eval_set.rows), world))
    prompts = [eval_set.prompts[i] for i in mine]
    options: dict[str, Any] = dict(temperature=temperature, top_p=recipe.sampling.top_p, max_tokens=recipe.eval_tokens,
                                   seed=ev.seed + rank)
    if progress_label and mine and episodes is None:  # asked for only then: a sampler of one's own need not take it
        options["progress"] = ProgressLog(progress_label, len(prompts) * n, log)
    correctness = recipe.task_reward
    batch = sample_and_score(sampler, rewards, prompts, [eval_set.rows[i] for i in mine], n=n, episodes=episodes,
                             unscore=[correctness], **options)
    scored, unscored = batch.scores, batch.scores.unscored()
    per_prompt = []
    for i, group in zip(mine, batch.groups()):
        values, infos = group.values[correctness], group.infos[correctness]
        passed = [v is not None and v >= ev.pass_threshold for v in values]
        per_prompt.append({
            "index": i,
            "passed": passed,
            "pass_rate": sum(passed) / n,  # its pass@1
            "unscorable": sum(v is None for v in values),
            "maj": majority_correct([_answer_of(x) for x in infos], passed),
            "samples": [{"completion": c.text, "reward": group.total[m], "correct": passed[m],
                         "reward_info": {name: group.infos[name][m] for name in scored.names}}
                        for m, c in enumerate(group.completions)] if keep_samples else None,
        })
    ks = ev.k
    local = {"n": len(per_prompt), "pass@1": sum(p["pass_rate"] for p in per_prompt),
             "maj": sum(p["maj"] for p in per_prompt), "unscorable": sum(p["unscorable"] for p in per_prompt),
             "reward_sum": sum(r for r in scored.total if r is not None),
             "reward_n": sum(r is not None for r in scored.total)}
    local.update({f"pass@{k}": sum(pass_at_k(n, sum(p["passed"]), k) for p in per_prompt) for k in ks})
    if batch.episodes is not None:  # the episodes' figures, summed over ranks (their time apart)
        local.update({name: v for name, v in batch.episodes.items() if name != "time_env"})
    local.update(scored.metrics)  # the rewards' own (Score.metrics), summed over ranks too
    total = reduce_sums(local)
    count = total["n"]
    if require_scores and count and total["unscorable"] == count * n:
        why = unscored.line([correctness])
        raise RlvrError(f"evaluation scored none of its {int(count * n)} samples with {correctness!r}"
                        + (f": {why}" if why else ""))
    if unscored.counts or unscored.env_failed:
        log.warning(f"evaluation: {unscored.line()}")
    result: dict[str, Any] = {
        "n": int(count),
        "samples_per_prompt": n,
        "temperature": temperature,
        "seed": ev.seed,
        "accuracy": total["pass@1"] / count if count else 0.0,
        **{f"pass@{k}": total[f"pass@{k}"] / count if count else 0.0 for k in ks},
        "unscorable": int(total["unscorable"]),
        # the weighted total of every reward, shaping included, beside the task metric above
        "reward_mean": total["reward_sum"] / total["reward_n"] if total["reward_n"] else None,
    }
    if n > 1:
        result[f"maj@{n}"] = total["maj"] / count if count else 0.0
    result.update(reward_metrics(total))  # reward/<reward>/<key>, as in metrics.jsonl
    if episodes is not None:
        result["episodes"] = episode_report(total)
    if eval_set.dropped:
        result["dropped_overlong_prompts"] = eval_set.dropped
    return result, per_prompt


def episode_report(total: dict[str, float]) -> dict[str, float]:
    """Per-episode means of the summed episode figures (``rlvr.sampling.episodes.episode_sums``)."""
    count = total["episodes"] or 1.0
    out = {"episodes": int(total["episodes"]), "turns_mean": total["env_turns"] / count,
           "turns_max": int(total["env_turns_max"]), "policy_tokens_mean": total["env_policy_tokens"] / count,
           "env_tokens_mean": total["env_tokens"] / count, "env_seconds_mean": total["env_seconds"] / count,
           "env_errors": int(total["env_errors"])}
    out.update({k[len("env/"):] + "_mean": v / count for k, v in sorted(total.items()) if k.startswith("env/")})
    return out


def breakdown(rows: list[dict], per_prompt: list[dict], key: str) -> dict[str, dict]:
    groups: dict[str, list] = defaultdict(list)
    for p in per_prompt:
        groups[str(rows[p["index"]].get(key, ""))].append(p["pass_rate"])
    return {g: {"n": len(v), "pass@1": sum(v) / len(v)} for g, v in sorted(groups.items())}


@contextmanager
def _own_sampler(recipe: Recipe, registry: Registry, select: Callable[[PromptSet], PromptSet] | None = None
                 ) -> Iterator[tuple[PromptSet, Callable[..., tuple[dict, list[dict]]] | None]]:
    """The recipe's eval split and ``measure(prompts, keep_samples, label)``, which evaluates
    prompts of it with the model loaded into a sampler of its own (closed when the block ends).
    ``select``: the part of the split to evaluate; when that is empty, no model loads and
    ``measure`` is None."""
    from rlvr.kit.device import device_policy
    from rlvr.models.hub import load_tokenizer, local_folder, resolve_model
    from rlvr.models.tokens import untrained_tokens_note
    from rlvr.sampling.samplers import make_sampler

    model_path = resolve_model(recipe.model.name)
    notes = [device_policy().emulated_bf16("auto", recipe.sampling.dtype),
             untrained_tokens_note(recipe.model.name, local_folder(recipe.model.name) or model_path)
             if recipe.environment else None]
    for note in filter(None, notes):
        log.warning(note)
    tokenizer = load_tokenizer(model_path, recipe.model.name)
    eval_set = load_prompt_set(recipe, registry, tokenizer, split="eval")
    if select is not None:
        eval_set = select(eval_set)
        if not eval_set.rows:
            yield eval_set, None
            return
    model = None
    if SAMPLER_BACKENDS[recipe.sampling.backend].live:  # it samples from a model object: this one
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_path, use_safetensors=True)
    new_tokens = max(recipe.eval_tokens, recipe.episode_tokens if recipe.environment else 0)
    # an in-process vLLM engine creates the default process group: it goes however we leave
    with process_group_scope():
        sampler = make_sampler(recipe, model_path, longest_prompt=eval_set.longest, max_new_tokens=new_tokens,
                               seed=0, eval_rows=len(eval_set.rows), get_model=lambda: model, tokenizer=tokenizer)
        try:
            rewards = bind_rewards(recipe.rewards, registry, conversational=recipe.eval_prompt.chat_template,
                                   when_unscored=recipe.when_unscored, max_abs=recipe.max_abs_reward)
            episodes = episode_runner(recipe, registry, tokenizer, model_path)

            def measure(prompts: PromptSet, keep_samples: bool, label: str) -> tuple[dict, list[dict]]:
                return evaluate_with(recipe, rewards, sampler, prompts, keep_samples=keep_samples, episodes=episodes,
                                     progress_label=label, require_scores=True)
            yield eval_set, measure
        finally:
            sampler.close()  # vLLM tears its own groups down first


def evaluate(recipe: Recipe, registry: Registry, output_dir: Path) -> dict[str, Any]:
    """``rlvr eval``: load the model into a sampler, evaluate, write reports."""
    with _own_sampler(recipe, registry) as (eval_set, measure):
        result, per_prompt = measure(eval_set, True, "eval")
    rows = eval_set.rows
    for key in ("subject", "level"):
        if key in rows[0]:
            result[f"by_{key}"] = breakdown(rows, per_prompt, key)
    result.update(model=recipe.model.name, recipe=recipe.name, task=recipe.eval_task.name, split=recipe.eval_split)
    write_replacing(output_dir / "report.json", json.dumps(result, indent=2))
    write_replacing(output_dir / "samples.jsonl", "".join(
        json.dumps({"id": rows[p["index"]].get("id") or rows[p["index"]].get("task_id"), "samples": p["samples"]},
                   default=str) + "\n" for p in per_prompt))
    write_replacing(output_dir / "report.md", report_markdown(result))
    log.info(f"{recipe.eval_task.name} {recipe.eval_split}: accuracy {percent(result['accuracy'])} on "
             f"{counted(result['n'], 'prompt')}; report in {output_dir}")
    return result


def pool_recipe(recipe: Recipe, k: int | None = None, limit: int | None = None) -> Recipe:
    """The recipe whose "evaluation" measures what training draws: the train task, prompt and split
    (its first ``limit`` rows, default ``data.train_limit``), ``k`` samples a prompt (default
    ``sampling.num_generations``) at the training temperature, top-p and token budget."""
    s = recipe.sampling
    measured = recipe.eval.model_copy(update=dict(
        task=None, prompt=None, split=recipe.data.train_split, limit=limit or recipe.data.train_limit,
        k=[k or s.num_generations], temperature=s.temperature, max_tokens=s.max_tokens))
    return recipe.model_copy(update={"eval": measured})


POOL_SAVE_SAMPLES = 1024  # `rlvr pool` writes its file each time about this many more samples are scored


def build_pool(recipe: Recipe, registry: Registry, output: Path, k: int | None = None,
               limit: int | None = None, extend: bool = False) -> dict[str, Any]:
    """``rlvr pool``: each train prompt's pass rate over ``k`` samples, written to ``output`` as a
    pool file (``rlvr.recipe.pool_file``) for ``data.pool_file``; returns a summary. The prompts
    are measured in parts of about ``POOL_SAVE_SAMPLES`` samples. A new file (or one ``extend``
    adds to) is rewritten after each part, so an interrupted pool keeps what it measured and
    ``extend`` goes on from there; a file that was there is replaced only by the whole pool. With
    ``extend`` the prompts ``output`` already lists are kept, not measured again; the file lists
    old and new in the split's order."""
    from rlvr.recipe.pool_file import pool_record
    from rlvr.runs.outputs import open_output

    measured = pool_recipe(recipe, k, limit)
    task, split, n = recipe.task.name, recipe.data.train_split, measured.eval.k[0]
    kept = _pool_to_extend(output, task, split, n) if extend else []
    records, temperature = list(kept), measured.eval.temperature or 1.0
    # a file that was there is replaced only by a whole pool, unless --extend adds to it; a stream once
    save_parts = extend or (str(output) != "-" and not output.exists())
    with _own_sampler(measured, registry, _unmeasured(kept) if kept else None) as (prompts, measure):
        size = max(1, POOL_SAVE_SAMPLES // n)
        for start in range(0, len(prompts.rows) if measure else 0, size):
            part = _prompts_at(prompts, range(start, min(start + size, len(prompts.rows))))
            last = start + size >= len(prompts.rows)
            label = "pool" if start == 0 and last else \
                f"pool, prompts {start + 1}-{start + len(part.rows)} of {len(prompts.rows)}"
            result, per_prompt = measure(part, False, label)
            temperature = result["temperature"]
            records += [pool_record(task, split, part.position(p["index"]), part.rows[p["index"]], p["passed"])
                        for p in per_prompt]
            records.sort(key=lambda r: r["index"])
            if save_parts or last:
                with open_output(output) as f:
                    f.writelines(json.dumps(r, default=str) + "\n" for r in records)
    rates = [r["pass_rate"] for r in records]
    summary = {"prompts": len(records), "samples_per_prompt": n, "temperature": temperature,
               "never_passed": sum(r == 0 for r in rates),
               "always_passed": sum(r == 1 for r in rates), "learnable": sum(0 < r < 1 for r in rates),
               "mean_pass_rate": sum(rates) / len(rates) if rates else 0.0}
    if extend:
        summary.update(measured_now=len(records) - len(kept), kept=len(kept))
    if prompts.dropped:
        summary["dropped_overlong_prompts"] = prompts.dropped
    return summary


def _prompts_at(prompts: PromptSet, places: Sequence[int], dropped: int = 0) -> PromptSet:
    """The prompts at ``places`` of a prompt set, with their places in the split."""
    return PromptSet([prompts.rows[i] for i in places], [prompts.prompts[i] for i in places], dropped,
                     [prompts.position(i) for i in places])


def _pool_to_extend(output: Path, task: str, split: str, n: int) -> list[dict]:
    """The records of the pool file ``--extend`` adds to (none when it does not exist yet), held
    against what this measures: the same task, split and samples a prompt."""
    from rlvr.recipe.pool_file import read_pool_file

    if str(output) == "-" or (output.exists() and not output.is_file()):
        raise RlvrError(f"--extend: --output {output} must be a pool file (or a new name), not a stream")
    if not output.exists():
        return []
    records = read_pool_file(output, label="--extend")
    for record in records:
        if (record["task"], record["split"], record.get("n")) != (task, split, n):
            raise RlvrError(f"--extend: {output} measured task {record['task']!r} split {record['split']!r} with "
                            f"{record.get('n')} samples a prompt, but this measures task {task!r} split {split!r} "
                            f"with {n}: give the same recipe and --k, or another --output")
    return records


def _unmeasured(records: Sequence[dict]) -> Callable[[PromptSet], PromptSet]:
    """The part of a prompt set the pool ``records`` do not list (matched as ``data.pool_file``
    matches them: by id when every record has one, else by place in the split)."""
    from rlvr.recipe.pool_file import by_id, row_id

    named = by_id(records)
    known = {r["id"] if named else r["index"] for r in records}

    def select(prompts: PromptSet) -> PromptSet:
        return _prompts_at(prompts, [i for i, row in enumerate(prompts.rows)
                                     if (row_id(row) if named else prompts.position(i)) not in known],
                           prompts.dropped)
    return select


def report_markdown(result: dict) -> str:
    keys = [k for k in result if k.startswith(("pass@", "maj@"))]
    lines = [f"| model | task | split | n | {' | '.join(keys)} |", "|" + "---|" * (4 + len(keys))]
    lines.append(f"| {result['model']} | {result['task']} | {result['split']} | {result['n']} | "
                 + " | ".join(f"{100 * result[k]:.1f}" for k in keys) + " |")
    for key in ("by_subject", "by_level"):
        if key in result:
            lines += ["", f"| {key[3:]} | n | pass@1 |", "|---|---|---|"]
            lines += [f"| {g} | {v['n']} | {100 * v['pass@1']:.1f} |" for g, v in result[key].items()]
    return "\n".join(lines) + "\n"
