"""The recipe schema: every section and setting a recipe may have, with its default and range.

Strict: an unknown key, a wrong type, a number out of range or not finite is refused when the
recipe loads (``rlvr.recipe.load``), and the batch shapes are checked against each other. The
names a recipe gives (task, rewards, environment) are checked by ``rlvr.recipe.resolve``.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rlvr import RlvrError
from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS, SamplerBackendName, backends_that
from rlvr.recipe.loss_variants import AGGREGATIONS, POLICY_LOSSES, AggregationName, PolicyLossName
from rlvr.recipe.template import fields


class Strict(BaseModel):
    # allow_inf_nan=False: "nan" or "1e999" in a float field is refused, not trained with.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class TaskRef(Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class PoolConfig(Strict):
    """``data.pool``: a group whose rewards are all equal trains nothing; prompts whose last groups were
    all like that are retired (skipped) for a while."""

    enabled: bool = False
    # Retire a prompt after this many consecutive groups all solved (or all failed). 2: one such
    # group is often luck (K=4 at a 50% pass rate: 1 in 8), two in a row rarely (1 in 64).
    retire_after: int = Field(default=2, ge=1)
    # Epochs a retired prompt sits out (times its rank's stream passes it by) before it is drawn
    # again; None: never (until every prompt of a rank is retired).
    revisit_after: int | None = Field(default=2, ge=1)
    # A zero-variance group whose reward (the weighted total) is at least this is "solved", else
    # "failed"; None: eval.pass_threshold.
    pass_threshold: float | None = None


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
    # The learnable-prompt pool (rlvr.training.pool; docs/training.md): stop drawing prompts whose
    # last groups were all solved or all failed, and draw them again some epochs later.
    pool: PoolConfig = Field(default_factory=PoolConfig)
    # Train only on the prompts of a pool file (`rlvr pool`) whose pass rate is in pool_pass_range
    # ([lo, hi], inclusive; None: 0 < rate < 1, prompts neither always nor never solved). A
    # relative path is read from the recipe's folder, as the dataset task's path is, or from the
    # current folder when --set gave it (resolve.py).
    pool_file: str | None = None
    pool_pass_range: tuple[float, float] | None = None

    @field_validator("pool", mode="before")
    @classmethod
    def _pool_shorthand(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _pool_file(self) -> DataConfig:
        if self.pool_file is not None and not self.pool_file.strip():
            raise ValueError("pool_file: give a file written by `rlvr pool`, or leave it out")
        if self.pool_pass_range is not None:
            lo, hi = self.pool_pass_range
            if self.pool_file is None:
                raise ValueError("pool_pass_range needs pool_file (the pass rates come from it)")
            if not 0 <= lo <= hi <= 1:
                raise ValueError(f"pool_pass_range [{lo}, {hi}]: want 0 <= lo <= hi <= 1")
        return self


class Shot(Strict):
    user: str
    assistant: str


class PromptConfig(Strict):
    # {{column}} fields over the task's columns; every other brace is literal (rlvr/recipe/template.py).
    # Exactly one field over a column of chat messages (TRL's conversational format) is that
    # conversation. Default: the task's `prompt` column, as TRL reads a dataset (text or messages).
    template: str = "{{prompt}}"
    system: str | None = None
    chat_template: bool = True
    # Columns a reward checks against (its gold answer) that the prompt may show all the same.
    gold_in_prompt: list[str] = Field(default_factory=list)
    # Worked examples shown before the question, as earlier chat turns (few-shot): literal text,
    # no {{column}} fields. Without a chat template: "user\n\nassistant\n\n" each, after the system text.
    # Train and eval rows whose rendered question is a shot's are left out (rlvr.sampling.prompts).
    shots: list[Shot] = Field(default_factory=list)
    # Text the answer starts with (prefilled after the generation prompt; literal, no fields): the
    # model continues it, and rewards, samples and logs see the answer with it, as EvalPlus's
    # "```python\n" or an R1-style "<think>". It is prompt, never trained on. Not with environments.
    response_prefix: str = ""


# What a sample a weighted reward could not score (it raised, returned None, NaN or the wrong
# count) counts as: "void" leaves the sample's total unscorable (no gradient from it), "skip"
# sums the rewards that scored it, each with its weight (TRL's nansum), "zero" counts the reward
# as 0. docs/rewards.md, "When a reward cannot score".
WhenUnscored = Literal["void", "skip", "zero"]


class RewardEntry(Strict):
    weight: float = 1.0
    options: dict[str, Any] = Field(default_factory=dict)
    # reward parameter -> dataset column, when the names differ
    columns: dict[str, str] = Field(default_factory=dict)
    when_unscored: WhenUnscored | None = None  # default: the recipe's when_unscored
    # A value beyond ±max_abs is refused as the reward's error (None): default the recipe's max_abs_reward
    max_abs: float | None = Field(default=None, gt=0, allow_inf_nan=False)


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
    """``sampling.mode: server``: vLLM in processes of its own (``rlvr.sampling.server``)."""

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
    backend: SamplerBackendName = "vllm"  # what each can do: rlvr.recipe.sampler_backends
    # colocate: vLLM beside each trainer rank (one engine per rank). server: vLLM in processes of
    # its own, shared by the trainer ranks (sampling.server).
    mode: Literal["colocate", "server"] = "colocate"
    server: ServerConfig = Field(default_factory=ServerConfig)
    # Weights travel to vLLM by collective broadcast in buckets of this many MiB (in-process
    # vLLM receives the tensors themselves).
    sync_bucket_mb: int = Field(default=64, ge=1, le=65536)
    # How buckets reach a sampler in another process: broadcast = a gloo (CPU) / NCCL (GPU)
    # collective; shared = two bucket buffers in shared memory, for samplers on the trainer's host
    # and CPU (a memory copy instead of a socket); auto = shared where it applies, else broadcast.
    sync_transport: Literal["auto", "broadcast", "shared"] = "auto"
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
    # vLLM: fraction of accelerator memory it may take (GPU). On CPU its KV cache is RAM, held from
    # the start: GiB, or auto = what the largest generate call of the run needs (a step's
    # prompts x K, or the eval prompts x max(eval.k)), from the model's config.
    gpu_memory_utilization: float = Field(default=0.3, gt=0, le=1)
    cpu_kvcache_gib: Literal["auto"] | float = "auto"
    # The sampler's weights: "auto" = bfloat16 on GPUs and on CPUs with bf16 instructions
    # (AVX512-BF16/AMX), float32 on other CPUs, where vLLM's bf16 matmuls run ~5x slower.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # The hf backend: a static key/value cache, prompts left-padded to a multiple of 64 tokens so
    # that a step's shapes repeat; on a GPU transformers then compiles the decoding step (CUDA
    # graphs), which eager decoding, launch-bound, is not. Off under ZeRO-3 on several ranks.
    hf_static_cache: bool = False

    @field_validator("cpu_kvcache_gib", mode="before")
    @classmethod
    def _auto_or_gib(cls, value):
        if value == "auto" or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
            return value
        raise ValueError(f"must be auto or a number of GiB above 0, not {value!r}")


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


class GSPOConfig(Strict):
    # GSPO clips the sequence's ratio (the geometric mean of its token ratios) to
    # [1 - eps_low, 1 + eps_high]; a mean ratio moves far less than a token's, so the range is far
    # narrower than PPO's: the GSPO paper uses eps_low 3e-4, eps_high 4e-4. No defaults: say them.
    eps_low: float = Field(gt=0, lt=1)
    eps_high: float = Field(gt=0)


class CISPOConfig(Strict):
    # CISPO clips each token's importance weight to [1 - eps_low, 1 + eps_high] and detaches it;
    # no token loses its gradient. None: no lower bound (MiniMax-M1 tuned eps_high only).
    eps_low: float | None = Field(default=None, ge=0)
    eps_high: float = Field(gt=0)


class AlgorithmConfig(Strict):
    normalize_advantages: Literal["none", "group_std", "batch_std"] = "none"
    # The variants, their bounds sections and rules: rlvr.recipe.loss_variants (docs/training.md,
    # "Loss variants"). A variant with bounds of its own has its section here, beside gspo's.
    policy_loss: PolicyLossName = "ppo"
    clip: ClipConfig | None = None
    gspo: GSPOConfig | None = None
    cispo: CISPOConfig | None = None
    ppo_epochs: int = Field(default=1, ge=1)
    loss_aggregation: AggregationName = "token_mean"
    # seq_mean_token_sum_norm (Dr. GRPO): each sequence's token sum is divided by this constant
    # (Dr. GRPO: the generation budget, sampling.max_tokens) and averaged over sequences.
    loss_norm_tokens: int | None = Field(default=None, ge=1)
    kl: KLConfig = Field(default_factory=KLConfig)
    length_penalty: LengthPenaltyConfig | None = None
    mask_truncated: bool = False
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    is_correction: ISCorrectionConfig = Field(default_factory=ISCorrectionConfig)

    @model_validator(mode="after")
    def _loss_options(self) -> AlgorithmConfig:
        kind, loss = self.policy_loss, POLICY_LOSSES[self.policy_loss]
        for other in POLICY_LOSSES.values():  # another variant's own section
            if other.section not in (None, "clip", loss.section) and getattr(self, other.section) is not None:
                raise ValueError(f"algorithm.{other.section} is set but policy_loss is {kind}: "
                                 f"set policy_loss: {other.name}, or drop algorithm.{other.section}")
        if loss.needs_bounds and getattr(self, loss.section) is None:
            raise ValueError(f"policy_loss {kind} needs its bounds: algorithm.{loss.section}: {loss.example}")
        if loss.section != "clip" and self.clip is not None:
            own = f"clips with algorithm.{loss.section}" if loss.section else "does not clip"
            raise ValueError(f"algorithm.clip is PPO's token clip; policy_loss {kind} {own}: drop algorithm.clip")
        if loss.multi_epoch and self.ppo_epochs < 2:
            raise ValueError(f"policy_loss {kind} with ppo_epochs 1 is plain REINFORCE (its ratio is exactly 1): "
                             "set ppo_epochs >= 2, or use policy_loss: ppo")
        reads_norm = AGGREGATIONS[self.loss_aggregation].norm_tokens
        if reads_norm and self.loss_norm_tokens is None:
            raise ValueError(f"loss_aggregation {self.loss_aggregation} needs loss_norm_tokens "
                             "(Dr. GRPO: the generation budget, e.g. sampling.max_tokens)")
        if not reads_norm and self.loss_norm_tokens is not None:
            readers = " or ".join(a.name for a in AGGREGATIONS.values() if a.norm_tokens)
            raise ValueError(f"loss_norm_tokens is read only by loss_aggregation {readers}, "
                             f"not {self.loss_aggregation}: drop it or change the aggregation")
        return self


class TrainerConfig(Strict):
    steps: int = Field(default=100, ge=1)
    rollout_batch_size: int = Field(default=32, ge=1, description="completions per step")
    micro_batch_size: int = Field(default=8, ge=1, description="sequences per forward/backward")
    # Run each distinct prompt once per micro-batch and its K completions on its cached keys and
    # values: same loss and gradient, fewer tokens. Off under gradient checkpointing (transformers
    # drops the key/value cache then).
    share_prompts: bool = True
    # Sequences whose advantage is exactly 0 add nothing to the loss or the gradient (unless KL
    # is in the loss): not forwarded at all. Same gradient, less compute; off only to compare.
    skip_zero_advantage: bool = True
    # Log-probs from the final hidden states through the output head this many tokens at a time
    # (padding left out), never the whole batch's full-vocabulary logits; 0: the model's logits.
    # 256: 0.78x the peak memory of full logits in the same time (benchmarks/bench_logprobs.py).
    logprob_chunk_tokens: int = Field(default=256, ge=0)
    # What one more micro-batch costs, in tokens through the model: micro-batches (at most
    # micro_batch_size sequences) are cut where the padding saved is worth more. None: 64 on CPU,
    # 512 on GPU; a large number keeps micro-batches full.
    micro_batch_overhead_tokens: int | None = Field(default=None, ge=0)
    # At most this many tokens through the model in one micro-batch (prompt, completions and
    # padding; a longer sequence goes alone): memory that does not grow with the longest
    # completions, and micro-batches cut where they are long rather than at a fixed count.
    # None: micro_batch_size alone decides.
    micro_batch_tokens: int | None = Field(default=None, ge=1)
    lr: float = Field(default=1e-6, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    warmup_steps: int = Field(default=0, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    max_grad_norm: float = Field(default=1.0, gt=0)
    zero_stage: Literal[0, 1, 2, 3] = 2
    # adamw: torch's AdamW, float32 moments (8 bytes a parameter). adamw_8bit: the same update
    # with both moments held in 8 bits and rounded stochastically (about 2 bytes a parameter:
    # rlvr.training.optim), for full fine-tuning where memory is short; not with offload_optimizer,
    # which runs DeepSpeed's CPU Adam.
    optimizer: Literal["adamw", "adamw_8bit"] = "adamw"
    offload_optimizer: bool = False
    offload_params: bool = False
    seed: int = 0
    save_every: int = Field(default=50, ge=1)
    keep_last: int = Field(default=2, ge=1)
    # What a finished run keeps of its checkpoints once final/ is written: full (the last one,
    # weights and optimizer: `--resume --max-steps N` trains on exactly) or none (checkpoints/
    # removed; train further from final/ with --model in a new folder).
    final_checkpoint: Literal["full", "none"] = "full"
    # The dtype of final/'s full weights: model = the base model's own (its config's dtype; for
    # an alias the upstream model's, bfloat16 for all of them), whatever dtype the trainer held
    # them in (float32 master weights on CPU); or the one named here. A LoRA adapter keeps the
    # dtype it was trained in (it is megabytes).
    final_dtype: Literal["model", "float32", "bfloat16", "float16"] = "model"
    # LoRA: final/ is the adapter (a PEFT folder, megabytes; `--model RUN/final` loads it merged
    # into its base). true: also final/merged/, the base with the adapter merged in (final_dtype).
    save_merged: bool = False
    eval_every: int | None = Field(default=None, ge=1)
    eval_at_start: bool = False  # held-out accuracy before training (written to eval.jsonl)
    eval_at_end: bool = False
    # Warn when the task reward (eval.correctness_reward, else the first) has been 0 or less for
    # every sample of this many consecutive steps: a format the reward does not read. 0: never.
    stuck_reward_steps: int = Field(default=5, ge=0)
    # Stop the run (exit status 2) when no sample of this many consecutive steps could be scored:
    # such steps train nothing. 0: never stop.
    max_unscored_steps: int = Field(default=3, ge=0)
    # Every this many steps the first samples_groups groups of the step's rollout (rank 0's) go to
    # OUTPUT_DIR/samples.jsonl, per turn for episodes (`rlvr samples RUN` prints them). 0: never.
    samples_every: int = Field(default=4, ge=0)
    samples_groups: int = Field(default=2, ge=1)
    # Trackers that get every step's metrics (rlvr/runs/tracking.py); each must be installed.
    # None: TensorBoard when it is installed.
    report_to: list[Literal["tensorboard", "wandb", "trackio"]] | None = None


class EvalConfig(Strict):
    split: str | None = None  # default: data.eval_split
    limit: int | None = Field(default=None, ge=1)
    k: list[int] = Field(default_factory=lambda: [1])
    temperature: float = Field(default=0.0, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)
    pass_threshold: float = 1.0  # a sample "passes" when its correctness reward is >= this
    # The samples' seed: another seed draws samples independent of the first evaluation's, which
    # `rlvr compare` pools with them (more samples a problem, a narrower interval).
    seed: int = Field(default=12345, ge=0)
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


EpisodeText = Literal["transcript", "policy", "final_turn"]


class EnvironmentConfig(Strict):
    """A multi-turn environment (``rlvr_register_environments``): each sample is an episode."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(default=4, ge=1, le=1000)  # policy turns per episode
    # Tokens after the prompt per episode, the policy's and the environment's; default
    # sampling.max_tokens (each policy turn is also capped at sampling.max_tokens).
    max_tokens: int | None = Field(default=None, ge=1)
    # Functions the model may call with JSON arguments: registered tool names (`rlvr tools`) or
    # module:function references. Their schemas are rendered into the prompt by the model's chat
    # template (tools=); the environment (one whose make takes `tools`, e.g. `tools`) runs the calls.
    tools: list[str] = Field(default_factory=list)
    # The text the rewards read of an episode: `transcript` (all after the prompt, the environment's
    # replies included), `policy` (the policy's turns, one per line) or `final_turn` (its last turn).
    # A tool's output can pay a reward that reads "the last number" of the transcript; not the others.
    score: EpisodeText = "transcript"


class Recipe(Strict):
    name: str
    description: str = ""
    task: TaskRef
    data: DataConfig = Field(default_factory=DataConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    rewards: dict[str, RewardEntry]
    when_unscored: WhenUnscored = "void"  # for the rewards that do not set their own
    max_abs_reward: float = Field(default=1e6, gt=0, allow_inf_nan=False)  # for the rewards that do not set max_abs
    model: ModelConfig = Field(default_factory=ModelConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    # The dotted keys the command line (--set) or the Python API's overrides set: a relative path
    # given there is read from the current folder, as any path on a command line; one written in
    # the recipe, from the recipe's folder (rlvr.recipe.resolve).
    _given_outside: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def given_outside(self, key: str) -> bool:
        """Whether ``key`` (or a section holding it) was set by ``--set`` or an API override."""
        return any(key == k or key.startswith(k + ".") for k in self._given_outside)
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
        if t.optimizer != "adamw" and t.offload_optimizer:
            raise ValueError(f"trainer.optimizer {t.optimizer} with trainer.offload_optimizer: offloading runs "
                             "DeepSpeed's own CPU Adam; drop one of the two")
        if t.save_merged and not self.model.lora:
            raise ValueError("trainer.save_merged is for model.lora runs (a full run's final/ is the whole model)")
        srv = self.sampling.server
        backend = SAMPLER_BACKENDS[self.sampling.backend]
        if self.sampling.mode == "server" and not backend.serves:
            raise ValueError(f"sampling.mode: server needs sampling.backend: {backends_that('serves')} "
                             f"({backend.name}: {backend.summary})")
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
        if self.sampling.hf_static_cache and self.sampling.backend != "hf":
            raise ValueError(f"sampling.hf_static_cache is the hf backend's, not {self.sampling.backend}'s")
        if self.sampling.max_staleness and backend.live:
            raise ValueError(f"sampling.max_staleness >= 1 needs sampling.backend: {backends_that('live', False)} (the {backend.name} sampler generates "
                             "with the very weights being trained, so it cannot run ahead)")
        if self.environment and (self.prompt.response_prefix or (self.eval.prompt and self.eval.prompt.response_prefix)):
            raise ValueError("prompt.response_prefix works on single answers, not on an environment's episodes")
        return self

    @property
    def episode_tokens(self) -> int:
        """Tokens a sample may have after its prompt: one completion, or a whole episode."""
        env = self.environment
        return env.max_tokens or self.sampling.max_tokens if env else self.sampling.max_tokens

    @property
    def eval_tokens(self) -> int:
        """New tokens per eval sample: ``eval.max_tokens``, else ``sampling.max_tokens``."""
        return self.eval.max_tokens or self.sampling.max_tokens

    @property
    def task_reward(self) -> str:
        """The reward that says whether a sample did the task (``eval.correctness_reward``, else
        the first reward): its raw value against ``eval.pass_threshold`` is the task accuracy,
        in training's metrics and in every evaluation, beside the weighted total."""
        return self.eval.correctness_reward or next(iter(self.rewards))

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
    for i, shot in enumerate(prompt.shots):
        for role in ("user", "assistant"):
            if fields(getattr(shot, role)):
                raise RlvrError(f"prompt.shots[{i}].{role}: shots are literal text, without {{{{column}}}} fields")
    for where, text in (("template", prompt.template), ("system", prompt.system or "")):
        try:
            found.update(fields(text, columns))
        except RlvrError as exc:
            raise RlvrError(f"prompt.{where}: {exc}") from None
    return found


ModelConfig.model_rebuild()
