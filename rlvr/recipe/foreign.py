"""TRL's and verl's names for rlvr's settings, so an unknown key written in their words gets the
right hint: ``trainer.learning_rate`` (or a bare ``learning_rate``, anywhere) is "did you mean
trainer.lr? (TRL's learning_rate)", not the closest spelling of some other setting.

TRL's keys (``GRPOConfig``/``RLOOConfig`` and the ``TrainingArguments`` they extend) are flat
and match wherever they are written; verl's are dotted paths from the config's root and match
that whole path (``actor_rollout_ref.actor.optim.lr``), however it is nested. Each entry names
the rlvr settings it becomes, and a note where the two do not mean the same thing;
``tests/unit/test_recipe_key_hints.py`` checks every entry against the schema, so the table cannot rot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Foreign:
    targets: tuple[str, ...]  # rlvr's settings (dotted); empty where rlvr has none
    note: str = ""  # how it maps, where not one for one


def _f(*targets: str, note: str = "") -> Foreign:
    return Foreign(targets, note)


ONE_STEP = ("one optimizer step per trainer.rollout_batch_size completions, their gradients accumulated over "
            "micro-batches of trainer.micro_batch_size; algorithm.ppo_epochs for more passes")

TRL: dict[str, Foreign] = {
    "learning_rate": _f("trainer.lr"),
    "beta": _f("algorithm.kl.beta"),
    "num_generations": _f("sampling.num_generations"),
    "gradient_accumulation_steps": _f("trainer.rollout_batch_size", "trainer.micro_batch_size", note=ONE_STEP),
    "per_device_train_batch_size": _f("trainer.micro_batch_size", note="sequences per forward/backward pass"),
    "generation_batch_size": _f("trainer.rollout_batch_size", note="completions per step, all ranks"),
    "steps_per_generation": _f("trainer.rollout_batch_size", "algorithm.ppo_epochs", note=ONE_STEP),
    "num_iterations": _f("algorithm.ppo_epochs"),
    "max_steps": _f("trainer.steps"),
    "num_train_epochs": _f("trainer.steps", note="rlvr counts optimizer steps: an epoch is the train prompts "
                                                 "x sampling.num_generations / trainer.rollout_batch_size"),
    "save_steps": _f("trainer.save_every"),
    "save_total_limit": _f("trainer.keep_last"),
    "eval_steps": _f("trainer.eval_every"),
    "eval_strategy": _f("trainer.eval_every"),
    "eval_on_start": _f("trainer.eval_at_start"),
    "logging_steps": _f("trainer.samples_every", note="every step's metrics go to metrics.jsonl and "
                                                      "trainer.report_to; samples every trainer.samples_every"),
    "log_completions": _f("trainer.samples_every", "trainer.samples_groups"),
    "num_completions_to_print": _f("trainer.samples_groups"),
    "max_prompt_length": _f("data.max_prompt_tokens"),
    "max_completion_length": _f("sampling.max_tokens"),
    "warmup_steps": _f("trainer.warmup_steps"),
    "warmup_ratio": _f("trainer.warmup_steps", note="in steps: the ratio x trainer.steps"),
    "lr_scheduler_type": _f("trainer.schedule", note="constant, linear or cosine"),
    "weight_decay": _f("trainer.weight_decay"),
    "optim": _f("trainer.optimizer", note="adamw (torch's fused AdamW) or adamw_8bit (8-bit moments, "
                                          "for TRL's adamw_8bit, adamw_bnb_8bit, adamw_torch_8bit)"),
    "max_grad_norm": _f("trainer.max_grad_norm"),
    "seed": _f("trainer.seed", "data.seed"),
    "temperature": _f("sampling.temperature"),
    "top_p": _f("sampling.top_p"),
    "top_k": _f(note="rlvr samples with sampling.temperature and sampling.top_p only"),
    "epsilon": _f("algorithm.clip.eps_low", note="PPO's clip is algorithm.clip: {eps_low, eps_high}"),
    "epsilon_high": _f("algorithm.clip.eps_high"),
    "loss_type": _f("algorithm.loss_aggregation", note="grpo is seq_mean_token_mean, bnpo and dapo token_mean, "
                                                       "dr_grpo seq_mean_token_sum_norm"),
    "scale_rewards": _f("algorithm.normalize_advantages", note="group is group_std, batch batch_std"),
    "importance_sampling_level": _f("algorithm.policy_loss", note="sequence is gspo"),
    "mask_truncated_completions": _f("algorithm.mask_truncated"),
    "reward_weights": _f("rewards", note="each reward's weight: rewards: {name: weight}"),
    "vllm_importance_sampling_correction": _f("algorithm.is_correction.mode"),
    "vllm_importance_sampling_cap": _f("algorithm.is_correction.cap"),
    "use_vllm": _f("sampling.backend"),
    "vllm_mode": _f("sampling.mode"),
    "vllm_gpu_memory_utilization": _f("sampling.gpu_memory_utilization"),
    "vllm_server_base_url": _f("sampling.server.urls"),
    "report_to": _f("trainer.report_to"),
    "output_dir": _f(note="give the run's folder on the command line: rlvr train RECIPE --output-dir DIR"),
    "gradient_checkpointing": _f("model.gradient_checkpointing"),
    "bf16": _f("model.dtype"),
    "fp16": _f("model.dtype"),
    "torch_dtype": _f("model.dtype"),
    "model_name_or_path": _f("model.name"),
    "dataset_name": _f("task", note="task: {name: dataset, options: {hub: ID, columns: [...]}}"),
    "lora_r": _f("model.lora.r"),
    "lora_alpha": _f("model.lora.alpha"),
    "lora_dropout": _f("model.lora.dropout"),
    "lora_target_modules": _f("model.lora.target_modules"),
}

_ACTOR, _ROLLOUT, _MODEL = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "actor_rollout_ref.model."
VERL: dict[str, Foreign] = {
    _ACTOR + "optim.lr": _f("trainer.lr"),
    _ACTOR + "optim.weight_decay": _f("trainer.weight_decay"),
    _ACTOR + "optim.lr_warmup_steps": _f("trainer.warmup_steps"),
    _ACTOR + "optim.lr_warmup_steps_ratio": _f("trainer.warmup_steps", note="in steps: the ratio x trainer.steps"),
    _ACTOR + "grad_clip": _f("trainer.max_grad_norm"),
    _ACTOR + "ppo_mini_batch_size": _f("trainer.rollout_batch_size", note=ONE_STEP),
    _ACTOR + "ppo_micro_batch_size_per_gpu": _f("trainer.micro_batch_size"),
    _ACTOR + "ppo_max_token_len_per_gpu": _f("trainer.micro_batch_tokens",
                                             note="always on when set (verl's use_dynamic_bsz); tokens through "
                                                  "the model, a shared prompt once"),
    _ACTOR + "use_dynamic_bsz": _f("trainer.micro_batch_tokens"),
    _ACTOR + "ppo_epochs": _f("algorithm.ppo_epochs"),
    _ACTOR + "clip_ratio": _f("algorithm.clip.eps_low", "algorithm.clip.eps_high"),
    _ACTOR + "clip_ratio_low": _f("algorithm.clip.eps_low"),
    _ACTOR + "clip_ratio_high": _f("algorithm.clip.eps_high"),
    _ACTOR + "use_kl_loss": _f("algorithm.kl.target", note="loss, with algorithm.kl.beta above 0"),
    _ACTOR + "kl_loss_coef": _f("algorithm.kl.beta"),
    _ACTOR + "kl_loss_type": _f("algorithm.kl.estimator", note="low_var_kl is k3"),
    _ACTOR + "loss_agg_mode": _f("algorithm.loss_aggregation", note="the same modes, with _ for -"),
    _ACTOR + "policy_loss.loss_mode": _f("algorithm.policy_loss"),
    _ACTOR + "fsdp_config.param_offload": _f("trainer.offload_params"),
    _ACTOR + "fsdp_config.optimizer_offload": _f("trainer.offload_optimizer"),
    _MODEL + "path": _f("model.name"),
    _MODEL + "enable_gradient_checkpointing": _f("model.gradient_checkpointing"),
    _MODEL + "lora_rank": _f("model.lora.r"),
    _MODEL + "lora_alpha": _f("model.lora.alpha"),
    _MODEL + "target_modules": _f("model.lora.target_modules"),
    _ROLLOUT + "n": _f("sampling.num_generations"),
    _ROLLOUT + "name": _f("sampling.backend"),
    _ROLLOUT + "temperature": _f("sampling.temperature"),
    _ROLLOUT + "top_p": _f("sampling.top_p"),
    _ROLLOUT + "response_length": _f("sampling.max_tokens"),
    _ROLLOUT + "gpu_memory_utilization": _f("sampling.gpu_memory_utilization"),
    _ROLLOUT + "val_kwargs.n": _f("eval.k"),
    _ROLLOUT + "val_kwargs.temperature": _f("eval.temperature"),
    _ROLLOUT + "multi_turn.max_assistant_turns": _f("environment.max_turns"),
    "algorithm.kl_ctrl.kl_coef": _f("algorithm.kl.beta", note="in the reward: algorithm.kl.target: reward"),
    "algorithm.use_kl_in_reward": _f("algorithm.kl.target"),
    "algorithm.adv_estimator": _f("algorithm.normalize_advantages", note="rlvr's advantage is RLOO's "
                                  "leave-one-out baseline; group_std scales it as GRPO does"),
    "algorithm.norm_adv_by_std_in_grpo": _f("algorithm.normalize_advantages"),
    "data.train_batch_size": _f("trainer.rollout_batch_size", note="verl counts prompts, rlvr completions: "
                                                                   "prompts x sampling.num_generations"),
    "data.max_prompt_length": _f("data.max_prompt_tokens"),
    "data.max_response_length": _f("sampling.max_tokens"),
    "data.train_files": _f("task", note="task: {name: dataset, options: {path: FILE, columns: [...]}}"),
    "data.val_files": _f("eval.task"),
    "data.filter_overlong_prompts": _f("data.overlong_prompts"),
    "data.truncation": _f("data.overlong_prompts"),
    "trainer.total_training_steps": _f("trainer.steps"),
    "trainer.total_epochs": _f("trainer.steps", note="rlvr counts optimizer steps"),
    "trainer.save_freq": _f("trainer.save_every"),
    "trainer.test_freq": _f("trainer.eval_every"),
    "trainer.val_before_train": _f("trainer.eval_at_start"),
    "trainer.max_actor_ckpt_to_keep": _f("trainer.keep_last"),
    "trainer.logger": _f("trainer.report_to"),
    "trainer.project_name": _f("name"),
    "trainer.experiment_name": _f("name"),
    "trainer.default_local_dir": _f(note="give the run's folder on the command line: rlvr train RECIPE --output-dir DIR"),
    "trainer.n_gpus_per_node": _f(note="rlvr uses the ranks it is launched with (deepspeed, torchrun)"),
    "trainer.nnodes": _f(note="rlvr uses the ranks it is launched with (deepspeed, torchrun)"),
    "custom_reward_function.path": _f("rewards", note='rewards: {"module:function": weight}'),
    "reward_model.reward_manager": _f("rewards"),
}


def _leaves(value: Any, prefix: str) -> list[str]:
    """Dotted paths of the leaves of loaded YAML under ``prefix`` (``prefix`` itself for a leaf)."""
    if isinstance(value, Mapping) and value:
        return [path for key, item in value.items() for path in _leaves(item, f"{prefix}.{key}")]
    return [prefix]


def foreign_hint(loc: tuple, value: Any) -> str | None:
    """The hint for an unknown key at ``loc`` (its place, as pydantic gives it) holding ``value``
    when TRL or verl call it that: ``"did you mean trainer.lr? (TRL's learning_rate)"``; else None."""
    where = ".".join(map(str, loc))
    for path in [where, *_leaves(value, where)]:  # verl's whole path, written nested or dotted
        if path in VERL:
            return _hint(VERL[path], f"verl's {path}")
    name = str(loc[-1]) if loc else ""
    return _hint(TRL[name], f"TRL's {name}") if name in TRL else None


def _hint(foreign: Foreign, theirs: str) -> str:
    note = f": {foreign.note}" if foreign.note else ""
    if not foreign.targets:
        return f"{theirs} has no rlvr setting{note}"
    return f"did you mean {', '.join(foreign.targets)}? ({theirs}{note})"
