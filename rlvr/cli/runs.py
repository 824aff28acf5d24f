"""The ``rlvr`` commands that load a model and leave a run behind: ``train``, ``eval``, ``pool``,
``sampler``, and the ones that read a run or an evaluation: ``compare``, ``plot``, ``samples``.
Torch, vLLM and DeepSpeed load inside them only."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from rlvr import RlvrError
from rlvr.cli.common import Int, cli, cli_registry, load_resolved, recipe_options
from rlvr.models.hub import check_model_at_hand
from rlvr.recipe.rows import check_rows, training_parts
from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS
from rlvr.sampling.auth import SECRET_ENV, SECRET_FILE_ENV, required_secret


@cli.command()
@click.argument("recipe")
@recipe_options
@click.option("--max-steps", type=Int(min=1), default=None,
              help="Stop after this many steps (overrides trainer.steps).")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --output-dir.")
@click.option("--model", default=None,
              help="Model to train (hub id, alias, model folder, or a LoRA run's final/ adapter).")
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
    registry = cli_registry()
    rec = load_resolved(recipe, list(overrides), profile, registry, settings)
    check_rows(rec, registry, training_parts(rec))  # every row it will read, before any model loads
    check_model_at_hand(rec.model.name)
    output_dir = output_dir or Path("runs") / rec.name
    check_folder_target(output_dir, "--output-dir", private=True)
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
@click.option("--model", default=None,
              help="Model to evaluate (hub id, alias, model folder, or a LoRA run's final/ adapter).")
@click.option("--split", default=None, help="Split to evaluate on (default: the recipe's eval split).")
@click.option("--limit", type=Int(min=1), default=None, help="Evaluate on the first N problems.")
@click.option("--k", "ks", default=None, help="Comma-separated k for pass@k, e.g. 1,4,8.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--verbose", is_flag=True, help="Also show vLLM's and other libraries' output (always in "
              "OUTPUT_DIR/eval.log).")
@recipe_options
def eval_cmd(recipe, model, split, limit, ks, output_dir, verbose, overrides, profile):
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
    registry = cli_registry()
    rec = load_resolved(recipe, list(overrides), profile, registry, settings)
    check_rows(rec, registry, ("eval",))
    check_model_at_hand(rec.model.name)
    output_dir = output_dir or Path("runs") / f"eval-{rec.name}"
    check_folder_target(output_dir, "--output-dir", private=True)
    from rlvr.evaluation.evaluate import evaluate, report_markdown
    from rlvr.runs.logs import RunOutput

    with RunOutput(output_dir, rank=0, verbose=verbose, total_steps=0, name="eval", announce=False):
        result = evaluate(rec, registry, output_dir)
    click.echo(report_markdown(result))


@cli.command()
@click.argument("recipe")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The pool file (JSONL) to write, for data.pool_file.")
@click.option("--model", default=None,
              help="Model to measure (hub id, alias, model folder, or a LoRA run's final/ adapter).")
@click.option("--k", type=Int(min=2), default=None, help="Samples per prompt (default: sampling.num_generations).")
@click.option("--limit", type=Int(min=1), default=None, help="The first N train prompts (default: data.train_limit).")
@click.option("--extend", is_flag=True, help="Keep the prompts --output already lists (measured with the same "
              "task, split and --k) and measure only the others of the first --limit: a pool grows, or an "
              "interrupted one goes on, without measuring a prompt twice.")
@click.option("--verbose", is_flag=True, help="Also show vLLM's and other libraries' output (always in the log "
              "beside the pool file, OUTPUT.log).")
@recipe_options
def pool(recipe, output_path, model, k, limit, extend, verbose, overrides, profile):
    """Measure each train prompt's pass rate over K samples drawn as training draws them, for data.pool_file.

    A new --output is written each time about 1,024 more samples are scored, so an interrupted
    pool keeps what it finished (go on with --extend); a file that was there is replaced only by
    the whole pool.
    """
    from rlvr.runs.outputs import check_folder_target

    check_folder_target(output_path.parent, f"--output {output_path}: folder")
    # data.pool_file is what this writes: the recipe may name it before it exists
    settings = [("data.pool_file", None), ("data.pool_pass_range", None)] + ([("model.name", model)] if model else [])
    registry = cli_registry()
    rec = load_resolved(recipe, list(overrides), profile, registry, settings)
    from rlvr.evaluation.evaluate import build_pool, pool_recipe

    check_rows(pool_recipe(rec, k, limit), registry, ("eval",))  # the train rows it measures
    check_model_at_hand(rec.model.name)
    from rlvr.runs.logs import RunOutput

    with RunOutput(output_path.parent, rank=0, verbose=verbose, total_steps=0, name=output_path.name, announce=False):
        n = build_pool(rec, registry, output_path, k=k, limit=limit, extend=extend)
    how = f" ({n['measured_now']} measured now, {n['kept']} kept)" if extend else ""
    click.echo(f"{n['prompts']} prompts x {n['samples_per_prompt']} samples{how}: {n['learnable']} learnable, "
               f"{n['always_passed']} always passed, {n['never_passed']} never passed -> {output_path}")


@cli.command()
@click.argument("recipe")
@recipe_options
@click.option("--model", default=None, help="Model to serve (hub id, alias, model folder, or a LoRA run's final/ "
              "adapter): the one the trainer starts from (its --model).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on: 127.0.0.1 this node "
              "only; 0.0.0.0 (or one of this node's addresses) lets trainers on other nodes reach it.")
@click.option("--port", type=Int(1, 65535), default=None, help="Port to listen on (default: sampling.server.port, "
              "else 8000).")
@click.option("--secret-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File whose first line is the secret (default: $RLVR_SAMPLER_SECRET, else the file "
              "$RLVR_SAMPLER_SECRET_FILE names).")
@click.option("--print-command", is_flag=True, help="Print the command line, with the environment it needs "
              "(the secret left out), instead of running it.")
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where the sampler's output goes (default: sampler-PORT.log in the current folder).")
@click.option("--verbose", is_flag=True, help="Show the sampler's output (vLLM's) here instead of in --log-file.")
def sampler(recipe, overrides, profile, model, host, port, secret_file, print_command, log_file, verbose):
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
    registry = cli_registry()
    rec = load_resolved(recipe, list(overrides), profile, registry, settings)
    check_model_at_hand(rec.model.name)
    if not SAMPLER_BACKENDS[rec.sampling.backend].serves:
        raise RlvrError(f"{recipe}: a sampler runs vLLM, but the recipe's sampling.backend is "
                        f"{rec.sampling.backend!r} (its trainer samples by itself)")
    if not print_command:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise RlvrError("rlvr sampler needs vLLM: install rlvr[cpu] or rlvr[gpu]")
    from rlvr.sampling.server import sampler_launch

    port = port or rec.sampling.server.port or 8000
    log_file = None if verbose or print_command else (log_file or Path(f"sampler-{port}.log"))
    if log_file is not None:  # before the model loads; never through a link: it may have been planted
        from rlvr.kit import open_append

        log_fd = open_append(log_file, "--log-file")
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
               f"http://{where}:{port}" + (f"; its output goes to {log_file}" if log_file else ""), err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if log_file is not None:  # the server's (vLLM's) output to the log: the terminal keeps the line above
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
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


@cli.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--also", nargs=2, multiple=True, type=click.Path(path_type=Path), metavar="BEFORE AFTER",
              help="More samples of the same two models: another pair of evaluations, drawn with another "
              "--set eval.seed=N; each problem's samples are pooled with the first pair's. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def compare(before, after, also, as_json):
    """Compare two evaluations of the same problems (`rlvr eval --output-dir` folders), problem by
    problem: the change in pass@1 with its 95% interval and p-value, and a sign test."""
    from rlvr.evaluation.compare import compare_evaluations, describe

    result = compare_evaluations([before, *(b for b, _ in also)], [after, *(a for _, a in also)])
    click.echo(json.dumps(result, indent=2) if as_json else describe(result))


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
