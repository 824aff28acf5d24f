"""The ``rlvr`` command. Light at import: torch, vLLM and DeepSpeed load only inside
``train``, ``eval`` and ``model pull``; bad input exits 2 with one line, no traceback."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click

from . import RlvrError, __version__


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RlvrError as exc:
            click.echo(f"rlvr: error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("rlvr: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlvr")
def cli():
    """rlvr: reinforcement learning with verifiable rewards (RLOO, DeepSpeed, vLLM).

    \b
    Quick start:
      rlvr validate tasks/demo.yaml
      rlvr train tasks/demo.yaml --output-dir runs/demo
      rlvr eval tasks/gsm8k.yaml --model runs/demo/final --limit 100
    """


def _recipe_options(fn):
    fn = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe setting.")(fn)
    fn = click.option("--profile", default=None, help="Apply one of the recipe's profiles (e.g. cpu).")(fn)
    return fn


def _registry():
    from .plugins import load_registry

    return load_registry()


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins(as_json):
    """List plugins with their versions and the hooks, tasks and rewards each supplies."""
    from .plugins import get_plugin_manager, load_registry, plugin_source

    pm = get_plugin_manager()
    registry = load_registry(pm)
    rows = []
    for plugin in pm.get_plugins():
        name, version = plugin_source(pm, plugin)
        rows.append(
            {
                "name": name,
                "version": version,
                "hooks": sorted(h.name for h in pm.get_hookcallers(plugin) or []),
                "tasks": sorted(t.name for t in registry.tasks.values() if t.plugin == name),
                "rewards": sorted(r.name for r in registry.rewards.values() if r.plugin == name),
            }
        )
    rows.sort(key=lambda r: r["name"])
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']} ({row['version']})")
        click.echo(f"  hooks: {', '.join(row['hooks'])}")
        if row["tasks"]:
            click.echo(f"  tasks: {', '.join(row['tasks'])}")
        if row["rewards"]:
            click.echo(f"  rewards: {', '.join(row['rewards'])}")


@cli.command()
def tasks():
    """List registered tasks, one a line, with the plugin that supplies each."""
    for spec in sorted(_registry().tasks.values(), key=lambda s: s.name):
        click.echo(f"{spec.name:<14} {spec.plugin:<12} columns: {', '.join(spec.columns)}  - {spec.description}")


@cli.command()
def rewards():
    """List registered rewards, one a line, with the plugin that supplies each."""
    for spec in sorted(_registry().rewards.values(), key=lambda s: s.name):
        cols = ", ".join(spec.columns) or "-"
        opts = ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) or "-"
        click.echo(f"{spec.name:<12} {spec.plugin:<12} columns: {cols}  options: {opts}  - {spec.description}")


@cli.command()
@click.argument("recipes", nargs=-1, required=True)
@_recipe_options
@click.option("--data", is_flag=True, help="Also read the first rows of the train and eval splits (and, under "
              "data.max_prompt_tokens, measure every prompt).")
def validate(recipes, overrides, profile, data):
    """Check recipes fully (names, columns, batch shapes) without loading a model."""
    from .recipe import data_dir, load_recipe, resolve

    registry = _registry()
    for path in recipes:
        recipe = load_recipe(path, list(overrides), profile)
        resolve(recipe, registry)
        if data:
            from .recipe import peek_rows

            peek_rows(recipe, registry, data_dir())
            if recipe.data.max_prompt_tokens:
                from .prompts import check_prompt_lengths

                for note in check_prompt_lengths(recipe, registry):
                    click.echo(f"{path}: {note}")
        click.echo(f"{path}: ok ({recipe.task.name}, rewards: {', '.join(recipe.rewards)}, "
                   f"{recipe.prompts_per_step} prompts x {recipe.sampling.num_generations} samples a step)")


@cli.command()
@click.option("--reward", "reward_name", required=True, help="A registered reward name.")
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="A reward option.")
@click.option("--workers", type=int, default=None, help="Worker processes for rewards that take them.")
@click.option("--batch-size", type=int, default=256, show_default=True)
def score(reward_name, input_path, output_path, options, workers, batch_size):
    """Score completions in a JSONL file with one reward.

    Each input line has ``completion`` plus the columns the reward needs. The output has the
    same records in the same order, with ``reward`` (null when unscorable) and ``reward_info``.
    """
    from .data import read_jsonl
    from .plugins import did_you_mean
    from .recipe import parse_overrides
    from .rewards import BoundReward, score_batch

    spec = _registry().reward(reward_name)
    opts = dict(parse_overrides(list(options)))
    for key in opts:
        if key not in spec.options:
            raise RlvrError(f"reward {reward_name!r} has no option {key!r}{did_you_mean(key, spec.options)}")
    if workers is not None:
        if "workers" not in spec.options:
            raise RlvrError(f"reward {reward_name!r} does not take --workers")
        opts["workers"] = workers
    if not input_path.is_file():
        raise RlvrError(f"input not found: {input_path}")
    if input_path.resolve() == output_path.resolve():
        raise RlvrError("--output must differ from --input")
    reward = BoundReward(spec, 1.0, opts)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename at the end: a failed run leaves the old output intact.
    fd, tmp = tempfile.mkstemp(prefix=f".{output_path.name}.", dir=output_path.parent)
    count = scored = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            batch: list[dict] = []

            def flush():
                nonlocal scored
                for i, row in enumerate(batch):
                    if not isinstance(row.get("completion"), str):
                        raise RlvrError(f"{input_path}: record {count - len(batch) + i + 1} has no string 'completion'")
                result = score_batch(
                    [reward],
                    [str(r.get("prompt", "")) for r in batch],
                    [r["completion"] for r in batch],
                    [r.get("completion_ids") for r in batch],
                    batch,
                )
                for row, value, info in zip(batch, result.values[reward_name], result.infos[reward_name]):
                    out.write(json.dumps({**row, "reward": value, "reward_info": info}, ensure_ascii=False) + "\n")
                    scored += value is not None
                batch.clear()

            for row in read_jsonl(input_path):
                batch.append(row)
                count += 1
                if len(batch) >= batch_size:
                    flush()
            if batch:
                flush()
        os.replace(tmp, output_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    click.echo(f"scored {scored}/{count} records with {reward_name!r} -> {output_path}", err=True)


@cli.command()
@click.argument("recipe")
@_recipe_options
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps (overrides trainer.steps).")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --output-dir.")
@click.option("--model", default=None, help="Model to train (hub id, folder, or alias).")
@click.option("--verbose", is_flag=True, help="Also show vLLM's, DeepSpeed's and other libraries' output "
              "(always kept in OUTPUT_DIR/train.log).")
def train(recipe, overrides, profile, max_steps, output_dir, resume, model, verbose):
    """Train a model on a recipe with RLOO."""
    from .recipe import load_recipe, resolve

    overrides = list(overrides)
    if model:
        overrides.append(f"model.name={model}")
    if max_steps is not None:
        if max_steps < 1:
            raise RlvrError("--max-steps must be at least 1")
        overrides.append(f"trainer.steps={max_steps}")
    rec = load_recipe(recipe, overrides, profile)
    registry = _registry()
    resolve(rec, registry)
    output_dir = output_dir or Path("runs") / rec.name
    from .engine import train as run_training

    run_training(rec, registry, output_dir, resume=resume, verbose=verbose)


@cli.command(name="eval")
@click.argument("recipe")
@click.option("--model", default=None, help="Model to evaluate (hub id, folder, or alias).")
@click.option("--split", default=None)
@click.option("--limit", type=int, default=None)
@click.option("--k", "ks", default=None, help="Comma-separated k for pass@k, e.g. 1,4,8.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@_recipe_options
def eval_cmd(recipe, model, split, limit, ks, output_dir, overrides, profile):
    """Evaluate a model on a recipe's eval split: pass@1, pass@k, maj@k."""
    from .recipe import load_recipe, resolve

    overrides = list(overrides)
    if model:
        overrides.append(f"model.name={model}")
    if split:
        overrides.append(f"eval.split={split}")
    if limit is not None:
        overrides.append(f"eval.limit={limit}")
    if ks:
        overrides.append(f"eval.k=[{ks}]")
    rec = load_recipe(recipe, overrides, profile)
    registry = _registry()
    resolve(rec, registry)
    from .evaluate import evaluate

    evaluate(rec, registry, output_dir or Path("runs") / f"eval-{rec.name}")


@cli.group()
def model():
    """Fetch models that need no hub."""


@model.command()
@click.argument("name")
def pull(name):
    """Fetch a model by alias into the user cache (e.g. smollm2-135m-instruct)."""
    from .models import pull_model

    click.echo(str(pull_model(name)))


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def plot(run_dir, output):
    """Write a PNG of reward, KL and length curves from RUN_DIR/metrics.jsonl."""
    from .plotting import plot_metrics

    click.echo(str(plot_metrics(run_dir, output)))


def main():
    cli()


if __name__ == "__main__":
    main()
