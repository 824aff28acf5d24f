"""The ``rlvr`` command. Light at import: torch, vLLM and DeepSpeed load only inside
``train``, ``eval`` and ``model pull``; bad input (click's usage errors included) exits 2 with
one line, no traceback. ``--output`` files are written through :mod:`rlvr.runs.outputs`."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import click

from rlvr import RlvrError, __version__
from rlvr.sampling.auth import SECRET_ENV, SECRET_FILE_ENV, required_secret


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# `score --workers 1000` once forked 1000 processes; more than 4 per CPU only adds contention.
MAX_WORKERS = 4 * _cpus()
MAX_BATCH_SIZE = 100_000


class _Int(click.IntRange):
    """click.IntRange, named "integer" in messages ("'x' is not a valid integer")."""

    name = "integer"


class _OneLineUsageError(click.ClickException):
    """A click usage error (bad option value, unknown command) as our one line, exit 2."""

    exit_code = 2

    def __init__(self, error: click.UsageError):
        super().__init__(error.format_message())
        self.command_path = error.ctx.command_path if error.ctx else "rlvr"

    def show(self, file=None) -> None:
        message = " ".join(self.format_message().split())
        click.echo(f"rlvr: error: {message} (see '{self.command_path} --help')", err=True)


def _one_line_usage(fn):
    """Run ``fn``; a usage error it raises becomes :class:`_OneLineUsageError` (bare ``rlvr``
    still prints its help)."""
    try:
        return fn()
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.UsageError as exc:
        raise _OneLineUsageError(exc) from None


class _Group(click.Group):
    def make_context(self, info_name, args, parent=None, **extra):
        return _one_line_usage(lambda: super(_Group, self).make_context(info_name, args, parent, **extra))

    def invoke(self, ctx):
        try:
            return _one_line_usage(lambda: super(_Group, self).invoke(ctx))
        except RlvrError as exc:
            click.echo(f"rlvr: error: {' '.join(str(exc).split())}", err=True)
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
    from rlvr.host.registry import load_registry

    return load_registry()


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins(as_json):
    """List plugins with their versions and the hooks, tasks, rewards and environments each supplies."""
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


@cli.command()
def tasks():
    """List registered tasks, one a line, with the plugin that supplies each."""
    for spec in sorted(_registry().tasks.values(), key=lambda s: s.name):
        click.echo(f"{spec.name:<14} {spec.plugin:<12} columns: {', '.join(spec.columns)}  - {spec.description}")


@cli.command()
def environments():
    """List registered multi-turn environments, with their plugin and options."""
    import inspect

    for spec in sorted(_registry().environments.values(), key=lambda s: s.name):
        params = inspect.signature(spec.fn).parameters.values()
        options = [f"{p.name}={p.default!r}" for p in params if p.kind is p.KEYWORD_ONLY]
        click.echo(f"{spec.name:<14} {spec.plugin:<12} options: {', '.join(options) or '-'}  - {spec.description}")


@cli.command()
def rewards():
    """List registered rewards: plugin, columns, optional columns, and options with their
    defaults and the values they accept."""
    for spec in sorted(_registry().rewards.values(), key=lambda s: s.name):
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
@_recipe_options
@click.option("--data", is_flag=True, help="Also read the first rows of the train and eval splits (and, under "
              "data.max_prompt_tokens, measure every prompt).")
def validate(recipes, overrides, profile, data):
    """Check recipes fully (names, columns, batch shapes) without loading a model.

    Every variant is checked: the recipe as given and with each of its profiles."""
    from rlvr.kit.data import data_dir
    from rlvr.recipe.load import recipe_profiles

    registry = _registry()
    for path in recipes:
        recipe = _load_resolved(path, list(overrides), profile, registry)
        if data:
            from rlvr.recipe.resolve import peek_rows

            peek_rows(recipe, registry, data_dir())
            if recipe.data.max_prompt_tokens:
                from rlvr.sampling.prompts import check_prompt_lengths

                for note in check_prompt_lengths(recipe, registry):
                    click.echo(f"{path}: {note}")
        profiles = recipe_profiles(path)
        for other in [None, *profiles]:
            if other != profile:
                _load_resolved(path, list(overrides), other, registry)
        checked = f"; checked with profiles: {', '.join(profiles)}" if profiles else ""
        click.echo(f"{path}: ok ({recipe.task.name}, rewards: {', '.join(recipe.rewards)}, "
                   f"{recipe.prompts_per_step} prompts x {recipe.sampling.num_generations} samples a step{checked})")


def _load_resolved(path, overrides: list[str], profile: str | None, registry, settings=None):
    """load_recipe + resolve; a name that does not resolve is reported with the recipe's path and
    profile (load_recipe's own errors already carry them)."""
    from rlvr.recipe.load import load_recipe
    from rlvr.recipe.resolve import resolve

    recipe = load_recipe(path, overrides, profile, settings)
    try:
        resolve(recipe, registry)
    except RlvrError as exc:
        where = f"{path} (profile {profile!r})" if profile else str(path)
        raise RlvrError(f"{where}: {exc}") from None
    return recipe


@cli.command()
@click.option("--reward", "reward_name", required=True, help="A registered reward name.")
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL (or .jsonl.gz) records, each with 'completion' and the reward's columns.")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the scored records; '-' for stdout. A file is replaced only when all "
              "went well; a FIFO or device is written to as a stream; a symlink is written through.")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="A reward option.")
@click.option("--workers", type=_Int(1, MAX_WORKERS), default=None,
              help=f"Worker processes for rewards that take them: 1 to {MAX_WORKERS} (4 per CPU here); "
              "default: the reward's own choice.")
@click.option("--batch-size", type=_Int(1, MAX_BATCH_SIZE), default=256, show_default=True,
              help=f"Records per reward call: 1 to {MAX_BATCH_SIZE}.")
def score(reward_name, input_path, output_path, options, workers, batch_size):
    """Score completions in a JSONL file with one reward.

    Each input line has ``completion`` plus the columns the reward needs. The output has the
    same records in the same order, with ``reward`` (null when unscorable) and ``reward_info``.
    """
    from rlvr.kit import read_jsonl
    from rlvr.kit import completion_text
    from rlvr.recipe.load import parse_overrides
    from rlvr.rewards.runner import BoundReward, score_batch
    from rlvr.runs.outputs import open_output, same_file, signals_remove_temporaries

    spec = _registry().reward(reward_name)
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
    # open_output writes a regular file beside the target and renames it at the end: a failure
    # or a signal leaves the old output as it was (rlvr.runs.outputs); a FIFO or device is streamed to.
    with signals_remove_temporaries(), open_output(output_path) as out:
        batch: list[dict] = []

        def flush():
            nonlocal scored, stringified
            first = count - len(batch) + 1  # the number of batch[0] in the whole input
            for i, row in enumerate(batch):
                if not isinstance(row.get("completion"), (str, list, dict)):
                    raise RlvrError(f"{input_path}: record {first + i} has no 'completion' (a string, or chat "
                                    "messages whose last assistant turn is scored)")
            try:
                result = score_batch(
                    [reward],
                    [str(r.get("prompt", "")) for r in batch],
                    [completion_text(r["completion"]) for r in batch],
                    [r.get("completion_ids") for r in batch],
                    batch,
                    first_record=first,
                )
            except RlvrError as exc:  # a missing column: "record N: ..."
                raise RlvrError(f"{input_path}: {exc}") from None
            for row, value, info in zip(batch, result.values[reward_name], result.infos[reward_name]):
                line, changed = _json_line({**row, "reward": value, "reward_info": info})
                out.write(line)
                scored += value is not None
                stringified += changed
            batch.clear()

        for row in read_jsonl(input_path):
            batch.append(row)
            count += 1
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
    if stringified:
        click.echo(f"rlvr: note: the reward_info of {stringified} records held values that are not JSON; "
                   "they were written as strings", err=True)
    where = "stdout" if str(output_path) == "-" else output_path
    click.echo(f"scored {scored}/{count} records with {reward_name!r} -> {where}", err=True)


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


@cli.command()
@click.argument("recipe")
@_recipe_options
@click.option("--max-steps", type=_Int(min=1), default=None,
              help="Stop after this many steps (overrides trainer.steps).")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --output-dir.")
@click.option("--model", default=None, help="Model to train (hub id, folder, or alias).")
@click.option("--verbose", is_flag=True, help="Also show vLLM's, DeepSpeed's and other libraries' output "
              "(always kept in OUTPUT_DIR/train.log).")
def train(recipe, overrides, profile, max_steps, output_dir, resume, model, verbose):
    """Train a model on a recipe with RLOO."""
    from rlvr.runs.outputs import check_folder_target

    settings = []  # taken as given, not read as YAML: `--model 1e3` is a name
    if model is not None:
        settings.append(("model.name", model))
    if max_steps is not None:
        settings.append(("trainer.steps", max_steps))
    registry = _registry()
    rec = _load_resolved(recipe, list(overrides), profile, registry, settings)
    output_dir = output_dir or Path("runs") / rec.name
    check_folder_target(output_dir, "--output-dir")
    if rec.sampling.mode == "server" and rec.sampling.server.urls:
        from rlvr.sampling.server import running_samplers_secret

        running_samplers_secret()  # before any model loads
    from rlvr.training.engine import train as run_training

    run_training(rec, registry, output_dir, resume=resume, verbose=verbose)


def _parse_ks(text: str) -> list[int]:
    """``--k 1,4,8`` as [1, 4, 8]; anything else is a one-line error."""
    ks = []
    for part in text.split(","):
        try:
            k = int(part.strip())
        except ValueError:
            raise RlvrError(f"--k expects comma-separated positive integers, e.g. 1,4,8; got {text!r}") from None
        if k < 1:
            raise RlvrError(f"--k: each k must be at least 1, got {k}")
        ks.append(k)
    return ks


@cli.command(name="eval")
@click.argument("recipe")
@click.option("--model", default=None, help="Model to evaluate (hub id, folder, or alias).")
@click.option("--split", default=None, help="Split to evaluate on (default: the recipe's eval split).")
@click.option("--limit", type=_Int(min=1), default=None, help="Evaluate on the first N problems.")
@click.option("--k", "ks", default=None, help="Comma-separated k for pass@k, e.g. 1,4,8.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@_recipe_options
def eval_cmd(recipe, model, split, limit, ks, output_dir, overrides, profile):
    """Evaluate a model on a recipe's eval split: pass@1, pass@k, maj@k."""
    from rlvr.runs.outputs import check_folder_target

    settings = []  # taken as given, not read as YAML: `--split 2024` is a split name
    if model is not None:
        settings.append(("model.name", model))
    if split is not None:
        settings.append(("eval.split", split))
    if limit is not None:
        settings.append(("eval.limit", limit))
    if ks is not None:
        settings.append(("eval.k", _parse_ks(ks)))
    registry = _registry()
    rec = _load_resolved(recipe, list(overrides), profile, registry, settings)
    output_dir = output_dir or Path("runs") / f"eval-{rec.name}"
    check_folder_target(output_dir, "--output-dir")
    from rlvr.evaluation.evaluate import evaluate

    evaluate(rec, registry, output_dir)


@cli.command()
@click.argument("recipe")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The pool file (JSONL) to write, for data.pool_file.")
@click.option("--model", default=None, help="Model to measure (hub id, folder, or alias).")
@click.option("--k", type=_Int(min=2), default=None, help="Samples per prompt (default: sampling.num_generations).")
@click.option("--limit", type=_Int(min=1), default=None, help="The first N train prompts (default: data.train_limit).")
@_recipe_options
def pool(recipe, output_path, model, k, limit, overrides, profile):
    """Measure each train prompt's pass rate over K samples drawn as training draws them, for data.pool_file."""
    from rlvr.runs.outputs import check_folder_target

    check_folder_target(output_path.parent, f"--output {output_path}: folder")
    # data.pool_file is what this writes: the recipe may name it before it exists
    settings = [("data.pool_file", None), ("data.pool_pass_range", None)] + ([("model.name", model)] if model else [])
    registry = _registry()
    rec = _load_resolved(recipe, list(overrides), profile, registry, settings)
    from rlvr.evaluation.evaluate import build_pool

    n = build_pool(rec, registry, output_path, k=k, limit=limit)
    click.echo(f"{n['prompts']} prompts x {n['samples_per_prompt']} samples: {n['learnable']} learnable, "
               f"{n['always_passed']} always passed, {n['never_passed']} never passed -> {output_path}")


@cli.command()
@click.argument("recipe")
@_recipe_options
@click.option("--model", default=None, help="Model to serve (hub id, folder, or alias): the one the trainer starts "
              "from (its --model).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on: 127.0.0.1 this node "
              "only; 0.0.0.0 (or one of this node's addresses) lets trainers on other nodes reach it.")
@click.option("--port", type=_Int(1, 65535), default=None, help="Port to listen on (default: sampling.server.port, "
              "else 8000).")
@click.option("--secret-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File whose first line is the secret (default: $RLVR_SAMPLER_SECRET, else the file "
              "$RLVR_SAMPLER_SECRET_FILE names).")
@click.option("--print-command", is_flag=True, help="Print the command line, with the environment it needs "
              "(the secret left out), instead of running it.")
def sampler(recipe, overrides, profile, model, host, port, secret_file, print_command):
    """Run one vLLM sampler for a recipe, in the foreground (Ctrl-C stops it).

    Start one on each node that should sample, then train with sampling.mode: server and
    sampling.server.urls naming them. The sampler loads the model and sizes its context from the
    recipe's prompts as `rlvr train` does: give it the trainer's recipe, --profile, --set and --model.

    \b
    Closed to strangers: it listens on 127.0.0.1 unless --host says otherwise, and answers only
    requests that carry a shared secret (16 characters or more), on every route, and only the
    routes rlvr uses. Give it the secret in RLVR_SAMPLER_SECRET or in a file (--secret-file, or
    RLVR_SAMPLER_SECRET_FILE), never on the command line; every trainer rank needs the same secret
    (RLVR_SAMPLER_SECRET or RLVR_SAMPLER_SECRET_FILE in its environment).
    Make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'
    """
    if not host.strip():
        raise RlvrError("--host: give an address to listen on, e.g. 127.0.0.1 or 0.0.0.0")
    secret = None  # checked before the model loads
    if not print_command:
        secret = required_secret("rlvr sampler needs a secret", f": set {SECRET_ENV} or {SECRET_FILE_ENV}, or pass "
                                 "--secret-file; make one with python3 -c 'import secrets; print(secrets.token_urlsafe(32))'",
                                 secret_file)
    settings = [("model.name", model)] if model is not None else []  # taken as given, as in train
    registry = _registry()
    rec = _load_resolved(recipe, list(overrides), profile, registry, settings)
    if rec.sampling.backend != "vllm":
        raise RlvrError(f"{recipe}: a sampler runs vLLM, but the recipe's sampling.backend is "
                        f"{rec.sampling.backend!r} (its trainer samples by itself)")
    if not print_command:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise RlvrError("rlvr sampler needs vLLM: install rlvr[cpu] or rlvr[gpu]")
    from rlvr.sampling.server import sampler_launch

    port = port or rec.sampling.server.port or 8000
    command, env = sampler_launch(rec, registry, host=host, port=port)
    if print_command:  # the secret stays out of the line, and out of anything it is pasted into
        env.pop(SECRET_ENV, None)
        click.echo(_shell_line(command, env, keep=(SECRET_ENV,)))
        click.echo(f"rlvr: set {SECRET_ENV} where you run this line: the sampler refuses every request without it",
                   err=True)
        return
    env[SECRET_ENV] = secret
    import socket

    where = socket.gethostname() if host in ("0.0.0.0", "::") else host
    click.echo(f"rlvr: sampler for {rec.name} on port {port}; trainers name it in sampling.server.urls as "
               f"http://{where}:{port}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:  # the process becomes the server: Ctrl-C and other signals reach vLLM itself, its status is ours
        os.execve(command[0], command, env)
    except OSError as exc:
        raise RlvrError(f"cannot start the sampler ({command[0]}): {exc.strerror}") from None


def _shell_line(command: list[str], env: dict[str, str], keep: tuple[str, ...] = ()) -> str:
    """``env [-u NAME]... [NAME=VALUE]... COMMAND``, shell-quoted: the command with the variables
    it needs changed from this environment (set, or removed); those in ``keep`` are left as the
    shell that runs the line has them."""
    import shlex

    unset = [arg for name in sorted(os.environ) if name not in env and name not in keep for arg in ("-u", name)]
    assigned = [f"{name}={value}" for name, value in sorted(env.items()) if os.environ.get(name) != value]
    return shlex.join(["env", *unset, *assigned, *command])


@cli.group()
def model():
    """Fetch models that need no hub."""


@model.command()
@click.argument("name")
def pull(name):
    """Fetch a model by alias into the user cache (e.g. smollm2-135m-instruct)."""
    from rlvr.models.hub import pull_model

    click.echo(str(pull_model(name)))


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Image to write (default RUN_DIR/curves.png; its suffix picks the format, e.g. .svg; "
              "'-': PNG to stdout). A file is replaced only when the image is complete.")
def plot(run_dir, output):
    """Write a PNG of reward, KL and length curves from RUN_DIR/metrics.jsonl."""
    from rlvr.runs.outputs import signals_remove_temporaries
    from rlvr.runs.plotting import plot_metrics

    with signals_remove_temporaries():
        written = plot_metrics(run_dir, output)
    if str(written) != "-":
        click.echo(str(written))


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--step", type=int, default=None, help="The step to show (default: the last with samples).")
@click.option("--group", "groups", type=int, multiple=True, help="Only this group (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many samples.")
def samples(run_dir, step, groups, limit):
    """Print what the model wrote during training (RUN_DIR/samples.jsonl), turn by turn:
    the policy's text, the tool's output, each reward and the advantage."""
    from rlvr.runs.samples import format_records, read_samples

    path = run_dir / "samples.jsonl"
    if not path.is_file():
        raise RlvrError(f"{path}: no samples (a run writes them every trainer.samples_every steps)")
    records = read_samples(path)
    steps = sorted({r["step"] for r in records})
    if not steps:
        raise RlvrError(f"{path}: no samples in it yet")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise RlvrError(f"{path}: no samples of step {step}; steps with samples: {_ranges(steps)}")
    chosen = [r for r in records if r["step"] == step and (not groups or r["group"] in groups)]
    click.echo(format_records(chosen[:limit]))


def _ranges(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers[:10]) + (f", ... {numbers[-1]}" if len(numbers) > 10 else "")


def main():
    cli()


if __name__ == "__main__":
    main()
