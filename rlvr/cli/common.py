"""What every ``rlvr`` subcommand shares: the click group (one-line errors, exit 2; Ctrl-C exits
130), the recipe options, and loading a recipe checked against the plugin host."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from rlvr import RlvrError, __version__


def leave(code) -> NoReturn:
    """Exit with ``code`` as :func:`sys.exit` would, without the interpreter's teardown: after a
    run that teardown collects and frees every object torch, transformers and vLLM made, which
    took 2.5 s after an HF run and 6 s after a vLLM one here, and changes nothing a user has.
    What a normal exit does first still happens: non-daemon threads are waited for (and
    concurrent.futures' pools shut down), then the atexit handlers run (logging closes its files,
    multiprocessing and rlvr's worker pools stop their children, the sampler's server stops)."""
    import atexit
    import threading

    threading._shutdown()  # what the interpreter calls first on exit  # noqa: SLF001
    atexit._run_exitfuncs()  # noqa: SLF001
    if code is None or isinstance(code, int):
        status = code or 0
    else:  # sys.exit("message"): the message, status 1
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(status)


class Int(click.IntRange):
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
        except KeyboardInterrupt as exc:  # a training run stopped on a signal says what --resume will use
            message = " ".join(str(exc).split())
            click.echo(f"rlvr: interrupted: {message}" if message else "rlvr: interrupted", err=True)
            sys.exit(128 + getattr(exc, "signum", 2))  # 130 for SIGINT, 143 for SIGTERM


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


def _remember_allowed(ctx, param, value):
    ctx.meta["rlvr.allow_modules"] = tuple(value)


def _take_secrets(ctx, param, value):
    """``--secret HOST=FILE`` entries join ``RLVR_SECRETS`` (over its entries for the same host), in
    this process's environment: the rewards read it there, and launched ranks inherit it."""
    if not value:
        return
    from rlvr.kit.http import SECRETS_ENV, secret_sources

    try:
        given = {}
        for entry in value:
            if "," in entry:
                raise ValueError(f"{entry.partition('=')[0]}: one HOST=FILE per --secret (a path with a comma "
                                 "cannot be given)")
            given.update(secret_sources(entry))
        merged = {**secret_sources(), **given}
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    os.environ[SECRETS_ENV] = ",".join(f"{k}={v}" for k, v in merged.items())


def secret_option(fn):
    """``--secret HOST=FILE`` (repeatable): the user's secret for a service's host (rlvr.kit.http)."""
    return click.option("--secret", multiple=True, metavar="HOST[:PORT]=FILE", expose_value=False,
                        callback=_take_secrets,
                        help="The bearer secret a reward sends to HOST (and only there): the first line of FILE, or "
                        "env:VARIABLE; repeatable; also RLVR_SECRETS (comma-separated). A recipe never names one.")(fn)


def _remember_unsandboxed(ctx, param, value):
    ctx.meta["rlvr.allow_unsandboxed"] = bool(value)


def allow_module_option(fn):
    """``--allow-module NAME``: read by :func:`cli_registry` (rlvr.host.imports)."""
    return click.option("--allow-module", multiple=True, metavar="MODULE", expose_value=False,
                        callback=_remember_allowed,
                        help="Let a module:function reward or tool import MODULE (and its submodules), although it "
                        "is not in the recipe's folder or the current folder; repeatable; also RLVR_ALLOW_MODULES "
                        "(comma-separated). The standard library is always refused.")(fn)


def allow_unsandboxed_option(fn):
    """``--allow-unsandboxed``: read by :func:`cli_registry` (rlvr.kit.trust)."""
    return click.option("--allow-unsandboxed", is_flag=True, expose_value=False, callback=_remember_unsandboxed,
                        help="Let the recipe run model-written code or tool calls outside the sandbox, with your "
                        "rights (isolation: process, run: process); also RLVR_ALLOW_UNSANDBOXED=1.")(fn)


def recipe_options(fn):
    fn = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe setting.")(fn)
    fn = click.option("--profile", default=None, help="Apply one of the recipe's profiles (e.g. cpu).")(fn)
    return secret_option(allow_unsandboxed_option(allow_module_option(fn)))


def cli_registry():
    """The plugins' registry, its references allowed what ``--allow-module`` names, and code outside
    the sandbox when ``--allow-unsandboxed`` says so."""
    from rlvr.host.imports import ImportPolicy
    from rlvr.host.registry import load_registry

    registry = load_registry()
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx else {}
    registry.imports = ImportPolicy(allowed=meta.get("rlvr.allow_modules", ()),
                                    unsandboxed=meta.get("rlvr.allow_unsandboxed", False))
    return registry


def load_resolved(path, overrides: list[str], profile: str | None, registry, settings=None, import_code=True):
    """load_recipe + resolve; a name that does not resolve is reported with the recipe's path and
    profile (load_recipe's own errors already carry them). A module:function reward is imported
    only from where rlvr.host.imports allows (the recipe's folder among them), and only with
    ``import_code``."""
    from rlvr.recipe.load import load_recipe
    from rlvr.recipe.resolve import resolve

    from rlvr.models.hub import check_model_name
    from rlvr.runs.tracking import check_trackers

    recipe = load_recipe(path, overrides, profile, settings)
    registry.use_recipe(path)
    try:
        resolve(recipe, registry, import_code)
        check_model_name(recipe.model.name)
        check_trackers(recipe.trainer.report_to)
    except RlvrError as exc:
        where = f"{path} (profile {profile!r})" if profile else str(path)
        raise RlvrError(f"{where}: {exc}") from None
    return recipe
