"""Recipes: YAML files naming a task, a prompt, weighted rewards and training/eval settings.

Loading a recipe never imports torch, vLLM or DeepSpeed: ``rlvr validate`` resolves every
name and checks every number before any model is touched.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import RlvrError
from .options import option_checker
from .plugins import Registry, did_you_mean
from .template import fields


class Strict(BaseModel):
    # allow_inf_nan=False: "nan" or "1e999" in a float field is refused, not trained with.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class TaskRef(Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class DataConfig(Strict):
    train_split: str = "train"
    eval_split: str = "test"
    train_limit: int | None = Field(default=None, ge=1)
    seed: int = 0
    # Prompts (after system prompt and chat template) longer than this are dropped and counted,
    # or refused (also by `rlvr validate --data`); the sampler's context is sized from the
    # longest prompt kept. None: keep all, and size the context from the longest.
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    overlong_prompts: Literal["drop", "error"] = "drop"


class PromptConfig(Strict):
    # {{column}} fields over the task's columns; every other brace is literal (rlvr/template.py).
    template: str
    system: str | None = None
    chat_template: bool = True
    # Columns a reward checks against (its gold answer) that the prompt may show all the same.
    gold_in_prompt: list[str] = Field(default_factory=list)


class RewardEntry(Strict):
    weight: float = 1.0
    options: dict[str, Any] = Field(default_factory=dict)
    # reward parameter -> dataset column, when the names differ
    columns: dict[str, str] = Field(default_factory=dict)


class ModelConfig(Strict):
    name: str = "smollm2-135m-instruct"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    gradient_checkpointing: bool = False
    lora: LoraConfig | None = None

    @field_validator("name")
    @classmethod
    def _local_folder_exists(cls, value: str) -> str:
        # Checked here, not when the model loads minutes later. Aliases and hub ids (org/name)
        # are not paths and need no network to pass.
        if not value.strip():
            raise ValueError("empty model name: give an alias, a hub id (org/name) or a folder")
        if looks_like_path(value) and not os.path.isdir(os.path.expanduser(value)):
            raise ValueError(
                f"no model folder at {value!r} (a name starting with /, ./, ../ or ~, or with more "
                "than one /, is a local folder; hub ids look like org/name)"
            )
        return value


def looks_like_path(name: str) -> bool:
    """A model name that can only be a local folder: hub ids are ``name`` or ``org/name``."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or name.count("/") > 1


class LoraConfig(Strict):
    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


def _is_base_url(url: str) -> bool:
    """``http(s)://host[:port][/]``: where a sampler answers, nothing after it."""
    from urllib.parse import urlparse

    try:
        parts = urlparse(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in 0..65535
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and bool(parts.hostname) and parts.path in ("", "/")
            and not (parts.query or parts.fragment or parts.params or any(c.isspace() for c in url)))


class ServerConfig(Strict):
    """``sampling.mode: server``: vLLM in processes of its own (``rlvr.server``)."""

    # Sampler processes rank 0 starts; trainer rank r sends its prompts to sampler r % count.
    count: int = Field(default=1, ge=1, le=64)
    # Running samplers to use instead of starting any (each started with `rlvr sampler RECIPE`).
    urls: list[str] = Field(default_factory=list)
    # GPUs (CUDA ids) or, on CPU, cores the sampler processes run on, shared out evenly; none: all.
    devices: list[int] = Field(default_factory=list)
    port: int = Field(default=0, ge=0, le=65535)  # first port (then port + 1, ...); 0: free ports
    timeout_s: float = Field(default=600.0, gt=0)  # deadline of every request and every weight-sync collective
    start_timeout_s: float = Field(default=900.0, gt=0)  # deadline for a started sampler to answer


class SamplingConfig(Strict):
    backend: Literal["vllm", "hf"] = "vllm"
    # colocate: vLLM beside each trainer rank (one engine per rank). server: vLLM in processes of
    # its own, shared by the trainer ranks (sampling.server).
    mode: Literal["colocate", "server"] = "colocate"
    server: ServerConfig = Field(default_factory=ServerConfig)
    # Weights travel to vLLM by collective broadcast in buckets of this many MiB (in-process
    # vLLM receives the tensors themselves).
    sync_bucket_mb: int = Field(default=64, ge=1, le=65536)
    num_generations: int = Field(default=8, ge=2, description="K samples per prompt")
    # 0: sample, then train, then sync (synchronous). N >= 1: the next step's samples are drawn
    # while the trainer trains, from weights at most N optimizer steps old (vLLM only: the HF
    # sampler is the live model being trained).
    max_staleness: int = Field(default=0, ge=0)
    # The trainer's log-probs are taken at this temperature too (logits / T), so the loss, KL
    # and entropy refer to the distribution that was sampled.
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int = Field(default=256, ge=1)
    # vLLM: fraction of accelerator memory (on CPU: of RAM) it may take; KV cache GiB on CPU.
    gpu_memory_utilization: float = Field(default=0.3, gt=0, le=1)
    cpu_kvcache_gib: int = Field(default=2, ge=1)
    # The sampler's weights: "auto" = bfloat16 on GPUs and on CPUs with bf16 instructions
    # (AVX512-BF16/AMX), float32 on other CPUs, where vLLM's bf16 matmuls run ~5x slower.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"


class ClipConfig(Strict):
    # The ratio is clipped to [1 - eps_low, 1 + eps_high]: eps_low >= 1 leaves no lower bound.
    eps_low: float = Field(default=0.2, ge=0, lt=1)
    eps_high: float = Field(default=0.28, ge=0)


class KLConfig(Strict):
    beta: float = Field(default=0.0, ge=0)
    estimator: Literal["k1", "k2", "k3"] = "k3"
    target: Literal["reward", "loss"] = "loss"


class LengthPenaltyConfig(Strict):
    kind: Literal["shortest_correct"] = "shortest_correct"
    weight: float = Field(default=0.1, ge=0)
    correct_threshold: float = 1.0


class DynamicSamplingConfig(Strict):
    enabled: bool = False
    max_rounds: int = Field(default=3, ge=1)


class ISCorrectionConfig(Strict):
    # Importance sampling against the sampler's own log-probs (the behaviour policy): tis = per-token
    # weights min(w, cap); mis = sequences whose geometric-mean ratio leaves [1/cap, cap] are masked;
    # auto = tis when the sampler's dtype differs from the trainer's, else none.
    mode: Literal["auto", "none", "tis", "mis"] = "auto"
    cap: float = Field(default=2.0, gt=1)


class AlgorithmConfig(Strict):
    normalize_advantages: Literal["none", "group_std", "batch_std"] = "none"
    clip: ClipConfig | None = None
    ppo_epochs: int = Field(default=1, ge=1)
    loss_aggregation: Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"] = "token_mean"
    kl: KLConfig = Field(default_factory=KLConfig)
    length_penalty: LengthPenaltyConfig | None = None
    mask_truncated: bool = False
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    is_correction: ISCorrectionConfig = Field(default_factory=ISCorrectionConfig)


class TrainerConfig(Strict):
    steps: int = Field(default=100, ge=1)
    rollout_batch_size: int = Field(default=32, ge=1, description="completions per step")
    micro_batch_size: int = Field(default=8, ge=1, description="sequences per forward/backward")
    # Run each distinct prompt once per micro-batch and its K completions on its cached keys and
    # values: same loss and gradient, fewer tokens. Off under gradient checkpointing.
    share_prompts: bool = True
    lr: float = Field(default=1e-6, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    max_grad_norm: float = Field(default=1.0, gt=0)
    zero_stage: Literal[0, 1, 2, 3] = 2
    offload_optimizer: bool = False
    offload_params: bool = False
    seed: int = 0
    save_every: int = Field(default=50, ge=1)
    keep_last: int = Field(default=2, ge=1)
    eval_every: int | None = Field(default=None, ge=1)
    eval_at_start: bool = False  # held-out accuracy before training (written to eval.jsonl)
    eval_at_end: bool = False


class EvalConfig(Strict):
    split: str | None = None  # default: data.eval_split
    limit: int | None = Field(default=None, ge=1)
    k: list[int] = Field(default_factory=lambda: [1])
    temperature: float = Field(default=0.0, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)
    pass_threshold: float = 1.0  # a sample "passes" when its correctness reward is >= this
    correctness_reward: str | None = None  # default: the recipe's first reward
    # Evaluate on another task than the one trained on (e.g. train MBPP, evaluate HumanEval).
    task: TaskRef | None = None
    prompt: PromptConfig | None = None

    @field_validator("task", mode="before")
    @classmethod
    def _task_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("k")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(k < 1 for k in value):
            raise ValueError("k must be a non-empty list of positive integers")
        return sorted(set(value))


class EnvironmentConfig(Strict):
    """A multi-turn environment (``rlvr_register_environments``): each sample is an episode."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(default=4, ge=1, le=1000)  # policy turns per episode
    # Tokens after the prompt per episode, the policy's and the environment's; default
    # sampling.max_tokens (each policy turn is also capped at sampling.max_tokens).
    max_tokens: int | None = Field(default=None, ge=1)


class Recipe(Strict):
    name: str
    description: str = ""
    task: TaskRef
    data: DataConfig = Field(default_factory=DataConfig)
    prompt: PromptConfig
    rewards: dict[str, RewardEntry]
    model: ModelConfig = Field(default_factory=ModelConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    environment: EnvironmentConfig | None = None
    # Named sets of overrides, e.g. a CPU-sized variant: `rlvr train RECIPE --profile cpu`.
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("task", mode="before")
    @classmethod
    def _task_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("environment", mode="before")
    @classmethod
    def _environment_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("rewards", mode="before")
    @classmethod
    def _reward_shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ({"weight": v} if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in value.items()}
        return value

    @field_validator("rewards")
    @classmethod
    def _some_rewards(cls, value: dict) -> dict:
        if not value:
            raise ValueError("name at least one reward")
        if all(entry.weight == 0 for entry in value.values()):
            raise ValueError(
                "every reward has weight 0: the total reward would always be 0; give one a non-zero weight"
            )
        return value

    @model_validator(mode="after")
    def _batch_shapes(self) -> Recipe:
        k, t = self.sampling.num_generations, self.trainer
        if t.rollout_batch_size % k:
            raise ValueError(
                f"trainer.rollout_batch_size ({t.rollout_batch_size}) must be divisible by "
                f"sampling.num_generations ({k}): each prompt gets K samples"
            )
        if t.rollout_batch_size % t.micro_batch_size:
            raise ValueError(
                f"trainer.micro_batch_size ({t.micro_batch_size}) must divide "
                f"trainer.rollout_batch_size ({t.rollout_batch_size})"
            )
        if self.model.lora and t.zero_stage == 3:
            raise ValueError("model.lora with trainer.zero_stage 3 is not supported: use stage 0-2 for LoRA")
        srv = self.sampling.server
        if self.sampling.mode == "server" and self.sampling.backend == "hf":
            raise ValueError("sampling.mode: server needs sampling.backend: vllm (the HF sampler is the trainer's own model)")
        if srv.urls and (srv.devices or srv.port):
            raise ValueError("sampling.server.urls names running samplers: drop sampling.server.devices and .port")
        if srv.devices and len(srv.devices) % (len(srv.urls) or srv.count):
            raise ValueError(f"sampling.server.devices ({len(srv.devices)}) must split evenly over "
                             f"sampling.server.count ({srv.count}) samplers")
        if len(set(srv.devices)) != len(srv.devices) or any(d < 0 for d in srv.devices):
            raise ValueError("sampling.server.devices: distinct device (or core) numbers >= 0")
        for url in srv.urls:
            if not _is_base_url(url):
                raise ValueError(f"sampling.server.urls: {url!r} is not a base address like http://host:8000")
        if len({u.rstrip("/") for u in srv.urls}) != len(srv.urls):
            raise ValueError("sampling.server.urls names a sampler twice")
        if self.sampling.max_staleness and self.sampling.backend == "hf":
            raise ValueError("sampling.max_staleness >= 1 needs sampling.backend: vllm (the HF sampler generates "
                             "with the very weights being trained, so it cannot run ahead)")
        return self

    @property
    def episode_tokens(self) -> int:
        """Tokens a sample may have after its prompt: one completion, or a whole episode."""
        env = self.environment
        return env.max_tokens or self.sampling.max_tokens if env else self.sampling.max_tokens

    @property
    def prompts_per_step(self) -> int:
        return self.trainer.rollout_batch_size // self.sampling.num_generations

    @property
    def eval_task(self) -> TaskRef:
        return self.eval.task or self.task

    @property
    def eval_prompt(self) -> PromptConfig:
        return self.eval.prompt or self.prompt

    @property
    def eval_split(self) -> str:
        return self.eval.split or self.data.eval_split


def template_fields(prompt: PromptConfig, columns: Iterable[str] | None = None) -> set[str]:
    """Dataset columns a prompt's system text and template refer to (``{{column}}``)."""
    found = set()
    for where, text in (("template", prompt.template), ("system", prompt.system or "")):
        try:
            found.update(fields(text, columns))
        except RlvrError as exc:
            raise RlvrError(f"prompt.{where}: {exc}") from None
    return found


ModelConfig.model_rebuild()


class RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: a key given twice in one mapping is an error (naming its
    line), not a silent "last one wins"; and ``1e3``/``1e-6`` are numbers, as in YAML 1.2
    (YAML 1.1 reads a float without a dot as a string, so ``steps: 1e3`` would be refused)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable: the base class reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first given on line {first + 1})", key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """YAML text as Python data, with :class:`RecipeLoader`'s rules."""
    return yaml.load(text, Loader=RecipeLoader)  # noqa: S506 - a SafeLoader subclass


# Settings a recipe may write in short form, and their long form: `task: gsm8k` is
# `task: {name: gsm8k}`, `rewards: {format: 0.1}` is `rewards: {format: {weight: 0.1}}`.
def _long_form(keys: tuple[str, ...], value: Any) -> dict | None:
    if keys in (("task",), ("eval", "task")) and isinstance(value, str):
        return {"name": value}
    if len(keys) == 2 and keys[0] == "rewards" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"weight": value}
    return None


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise RlvrError(f"--set {dotted}: empty name between dots")
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        long_form = _long_form(tuple(keys[: depth + 1]), child)
        if long_form is not None:  # --set task.options.size=3 when the recipe says `task: gsm8k`
            child = node[key] = long_form
        if not isinstance(child, dict):
            raise RlvrError(f"--set {dotted}: {'.'.join(keys[: depth + 1])} is {child!r}, not a section")
        node = child
    node[keys[-1]] = value


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """``KEY=VALUE`` strings as (key, value) pairs, each value read as YAML (``1e-6`` a number,
    ``[1, 4]`` a list, ``{r: 4}`` a mapping; what is not YAML stays a string)."""
    out = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise RlvrError(f"--set expects key=value (e.g. trainer.lr=1e-6), got {pair!r}")
        try:
            value = load_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        out.append((key.strip(), value))
    return out


def _format_validation_error(source: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "recipe"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        parent = Recipe
        for part in err["loc"][:-1]:
            field = getattr(parent, "model_fields", {}).get(str(part))
            parent = _model_of(field.annotation) if field else None
            if parent is None:
                break
        hint = did_you_mean(str(err["loc"][-1]), parent.model_fields) if parent else ""
        msg = f"unknown setting{hint}"
    extra = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{source}: {loc}: {msg}{extra}"


def _model_of(annotation: Any):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found:
            return found
    return None


def _merge(base: dict, extra: dict, keys: tuple[str, ...] = ()) -> dict:
    """``extra`` merged into ``base`` section by section; a section ``base`` gives in short form
    (``format: 0.1``) is widened first, so a profile's ``format: {options: ...}`` keeps the weight."""
    out = dict(base)
    for key, value in extra.items():
        here = (*keys, str(key))
        current = out.get(key)
        if isinstance(value, dict):
            current = _long_form(here, current) or current
        out[key] = _merge(current, value, here) if isinstance(value, dict) and isinstance(current, dict) else value
    return out


def _first_non_finite(value: Any, where: str = "") -> str | None:
    """The dotted place of the first nan or infinity in loaded YAML data, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "recipe"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_non_finite(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def recipe_profiles(path: str | os.PathLike) -> list[str]:
    """The names of a recipe file's profiles (for checking each; the file must load)."""
    profiles = _read(Path(path)).get("profiles") or {}
    return [str(name) for name in profiles] if isinstance(profiles, dict) else []


def _read(path: Path) -> dict:
    if not path.is_file():
        if path.exists():  # a folder, /dev/null, a pipe: a recipe may be read more than once
            raise RlvrError(f"{path}: not a recipe file (a regular YAML file)")
        raise RlvrError(f"recipe not found: {path}")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RlvrError(f"{path}:{where}: malformed YAML: {problem}") from None
    except UnicodeDecodeError:
        raise RlvrError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise RlvrError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise RlvrError(f"{path}: a recipe is a YAML mapping (name:, task:, prompt:, rewards:, ...)")
    return data


def load_recipe(
    path: str | os.PathLike,
    overrides: list[str] | None = None,
    profile: str | None = None,
    settings: list[tuple[str, Any]] | None = None,
) -> Recipe:
    """Read, apply a profile, ``--set`` overrides (``KEY=VALUE``, read as YAML) and ``settings``
    (``(key, value)`` pairs taken as they are: command-line options), validate. Bad input raises
    ``RlvrError`` (one line; it names the profile when one is applied)."""
    path = Path(path)
    data = _read(path)
    data.setdefault("name", path.stem)
    source = str(path)
    if profile is not None:
        profiles = data.get("profiles") or {}
        if not isinstance(profiles, dict) or profile not in profiles:
            names = ", ".join(map(str, profiles)) if isinstance(profiles, dict) and profiles else "none"
            choices = map(str, profiles) if isinstance(profiles, dict) else []
            raise RlvrError(f"{path}: no profile {profile!r}{did_you_mean(profile, choices)}; profiles: {names}")
        if not isinstance(profiles[profile], dict):
            raise RlvrError(f"{path}: profiles.{profile} must be a mapping of settings")
        data = _merge(data, profiles[profile])
        source = f"{path} (profile {profile!r})"
    for key, value in [*parse_overrides(overrides or []), *(settings or [])]:
        _set_path(data, key, value)
    bad = _first_non_finite(data)
    if bad:
        raise RlvrError(f"{source}: {bad}: not a finite number (nan and infinities are refused)")
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RlvrError(_format_validation_error(source, exc)) from None


def resolve(recipe: Recipe, registry: Registry) -> None:
    """Check every name in the recipe against what the plugins registered."""
    _check_task(registry, recipe.task, recipe.prompt, [recipe.data.train_split], recipe, "")
    _check_task(registry, recipe.eval_task, recipe.eval_prompt, [recipe.eval_split], recipe, "eval.")
    _check_correctness(recipe)
    if recipe.environment is None and "environment" in recipe.rewards:
        raise RlvrError("reward 'environment' is the score of an episode's environment, but the recipe names no "
                        "environment (add environment: {name: ...}; `rlvr environments` lists them)")
    if recipe.environment is not None:
        env = recipe.environment
        spec = registry.environment(env.name)
        env.options = {**env.options, **_check_options(spec.make, spec.name, "environment", spec.plugin, env.options,
                                                       "environment.options")}


def _check_task(registry: Registry, ref: TaskRef, prompt: PromptConfig, splits: list[str], recipe: Recipe, where: str) -> None:
    task = registry.task(ref.name)
    columns = set(task.columns)
    ref.options = {**ref.options, **_check_task_options(task, ref.options, where)}  # 1e3 -> 1000
    for split in splits:
        if task.splits and split not in task.splits:
            raise RlvrError(
                f"task {task.name!r} has no split {split!r}{did_you_mean(split, task.splits)}; "
                f"it has: {', '.join(task.splits)}"
            )
    _check_prompt(registry, task, prompt, recipe, where)
    for name, entry in recipe.rewards.items():
        spec = registry.reward(name)
        spec.check_options(entry.options)  # names, types, choices and ranges, from the reward's signature
        for param, column in entry.columns.items():
            if param not in spec.columns + spec.optional_columns:
                raise RlvrError(f"rewards.{name}.columns: reward {name!r} takes no column {param!r}")
        for param in spec.columns:
            column = entry.columns.get(param, param)
            if column not in columns:
                raise RlvrError(
                    f"reward {name!r} needs column {column!r} but task {task.name!r} has only: "
                    f"{', '.join(sorted(columns))} (map one with rewards.{name}.columns.{param})"
                )


def _check_prompt(registry: Registry, task, prompt: PromptConfig, recipe: Recipe, where: str) -> None:
    """Fields name the task's columns, the template has one, and no reward's gold is shown."""
    columns = set(task.columns)
    used = template_fields(prompt, columns)
    missing = sorted(used - columns)
    if missing:
        raise RlvrError(
            f"{where}prompt uses {{{{{missing[0]}}}}} but task {task.name!r} has no such column"
            f"{did_you_mean(missing[0], columns)}; columns: {', '.join(sorted(columns))}"
        )
    if not fields(prompt.template):
        raise RlvrError(f"{where}prompt.template has no {{{{column}}}} field: every prompt would be the same "
                        f"(columns: {', '.join(sorted(columns))})")
    gold = {}
    for name, entry in recipe.rewards.items():
        for param in registry.reward(name).gold_columns:
            gold.setdefault(entry.columns.get(param, param), name)
    allowed = set(prompt.gold_in_prompt)
    for column in sorted(allowed - set(gold)):
        raise RlvrError(f"{where}prompt.gold_in_prompt: {column!r} is not a gold column of the recipe's rewards"
                        f" (gold: {', '.join(sorted(gold)) or 'none'})")
    for column in sorted(used & set(gold) - allowed):
        raise RlvrError(
            f"{where}prompt shows {{{{{column}}}}}, the gold answer reward {gold[column]!r} checks against: "
            f"the model would be trained with the answer in its prompt; if that is intended, "
            f"add it to {where}prompt.gold_in_prompt"
        )


def _check_task_options(task, options: dict, where: str) -> dict:
    """A task's options are its loader's keyword-only parameters (but ``data_dir``)."""
    return _check_options(task.load, task.name, "task", task.plugin, options, f"{where}task.options")


def _check_options(fn, name: str, kind: str, plugin: str, options: dict, where: str) -> dict:
    """Options of a task loader or an environment's ``make``: its keyword-only parameters (but
    ``data_dir``), checked from their annotations as reward options are; with ``**kwargs`` it
    takes other names too."""
    params = inspect.signature(fn).parameters
    open_ended = any(p.kind is p.VAR_KEYWORD for p in params.values())
    allowed = {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "data_dir"}
    for option in options:
        if option not in allowed and not open_ended:
            raise RlvrError(
                f"{where}: {kind} {name!r} has no option {option!r}"
                f"{did_you_mean(option, allowed)}; options: {', '.join(allowed) or 'none'}"
            )
    try:
        checker = option_checker(name, fn, allowed, kind=kind)
    except TypeError as exc:
        raise RlvrError(f"plugin {plugin!r}: {kind} {name!r}: {exc}") from None
    try:
        return checker.check({k: v for k, v in options.items() if k in allowed})
    except RlvrError as exc:
        raise RlvrError(f"{where}: {exc}") from None


def _check_correctness(recipe: Recipe) -> None:
    correctness = recipe.eval.correctness_reward
    if correctness is not None and correctness not in recipe.rewards:
        raise RlvrError(
            f"eval.correctness_reward {correctness!r} is not among the recipe's rewards"
            f"{did_you_mean(correctness, recipe.rewards)}"
        )


def data_dir() -> Path:
    """Where offline copies of datasets live: ``RLVR_DATA_DIR`` or the user cache."""
    env = os.environ.get("RLVR_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return cache_dir() / "data"


def cache_dir() -> Path:
    base = os.environ.get("RLVR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlvr"
    )
    return Path(base)


def task_rows(task, ref: TaskRef, split: str, root: Path) -> Iterator[dict]:
    """A task's rows; a loader that raises (a plugin's bug, a missing file) or yields a
    non-mapping becomes one ``RlvrError`` line naming the task, its plugin and the split."""
    where = f"task {task.name!r} (plugin {task.plugin!r}) split {split!r}"
    rows = None
    try:
        rows = iter(task.load(split, data_dir=root, **ref.options))
        for number, row in enumerate(rows, 1):
            if not isinstance(row, Mapping):
                raise RlvrError(f"{where}: row {number} is a {type(row).__name__}, not a mapping of columns")
            yield row
    except RlvrError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's failure, reported as the user sees it
        message = " ".join(str(exc).split()) or "(no message)"
        raise RlvrError(f"{where}: loading failed: {type(exc).__name__}: {message[:300]}") from exc
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()


def load_rows(registry: Registry, ref: TaskRef, split: str, limit: int | None = None) -> list[dict]:
    """The first ``limit`` rows (None: all) of a task's split; an empty split is an error."""
    rows = []
    for row in task_rows(registry.task(ref.name), ref, split, data_dir()):
        rows.append(row)
        if limit and len(rows) >= limit:
            break
    if not rows:
        raise RlvrError(f"task {ref.name!r} split {split!r} has no rows")
    return rows


def peek_rows(recipe: Recipe, registry: Registry, root: Path) -> None:
    """Read the first row of the train and eval splits and check the columns are really there."""
    for ref, split in ((recipe.task, recipe.data.train_split), (recipe.eval_task, recipe.eval_split)):
        task = registry.task(ref.name)
        first = next(task_rows(task, ref, split, root), None)
        if first is None:
            raise RlvrError(f"task {task.name!r} split {split!r} is empty")
        missing = sorted(set(task.columns) - set(first))
        if missing:
            raise RlvrError(f"task {task.name!r} split {split!r}: rows lack column {missing[0]!r}")
