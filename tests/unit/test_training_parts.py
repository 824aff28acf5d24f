"""The engine's parts without a model: the prompt stream, rollouts with a fake sampler (dynamic
sampling, refills on several ranks), metrics by name, the LR schedule, the DeepSpeed config,
prompt fitting and padding, the sampler's context rule."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from rlvr import RlvrError, Score
from rlvr.host.registry import RewardSpec
from rlvr.models.distributed import add_sums, reduce_sums
from rlvr.models.tokens import pad_batch
from rlvr.recipe.spec import DynamicSamplingConfig, Recipe, SamplingConfig, TrainerConfig
from rlvr.rewards.runner import BoundReward
from rlvr.runs.metrics import StuckReward, step_line, step_row
from rlvr.sampling.prompts import Prompt, fit_prompts
from rlvr.sampling.samplers import (Completion, context_length, cpu_kv_cache_bytes, kv_cache_bytes,
                                    sampler_sequences)
from rlvr.training.policy import build_optimizer, deepspeed_config, effective_zero_stage, lr_multiplier
from rlvr.training.report import rollout_sums
from rlvr.training.rollout import PromptStream, Rollout, RolloutProducer, zero_variance


# ---------------------------------------------------------------------------- prompt stream
def test_stream_one_rank_is_an_epoch_wise_shuffle():
    stream = PromptStream(10, seed=3)
    first, second = stream.take(10), stream.take(10)
    assert sorted(first) == sorted(second) == list(range(10)) and first != second
    assert stream.position == 20
    again = PromptStream(10, seed=3, position=10)  # resuming mid-run continues the same order
    assert again.take(10) == second


def test_stream_ranks_read_disjoint_shards_of_one_order():
    single = PromptStream(12, seed=5).take(12)
    ranks = [PromptStream(12, seed=5, rank=r, world=3) for r in range(3)]
    taken = [s.take(4) for s in ranks]
    assert sorted(i for t in taken for i in t) == list(range(12))  # an epoch, split three ways
    assert taken[1] == single[1::3]
    # a rank that refills (dynamic sampling) reads further along its own shard only
    assert ranks[2].take(2) == PromptStream(12, seed=5).take(24)[12 + 2 :: 3][:2]


# ---------------------------------------------------------------------------- rollouts
class FakeSampler:
    """Completion text = the prompt's first id, so a reward can depend on the prompt."""

    def __init__(self):
        self.calls = []

    def generate(self, prompt_ids, *, n, temperature, top_p, max_tokens, seed=None, logprobs=False):
        self.calls.append([p[0] for p in prompt_ids])
        return [[Completion(str(p[0]), [p[0], j], truncated=j == 0) for j in range(n)] for p in prompt_ids]

    def load_weights(self, weights, complete=True):
        pass

    def close(self):
        pass


def reward(fn, name="r"):
    spec = RewardSpec(name, fn, "", "test", "0", (), (), {}, False)
    return BoundReward(spec)


def by_prompt(prompts, completions, completion_ids):
    """Prompts 0-4 give every sample 1.0 (no signal); the others 0/1 by sample."""
    return [1.0 if int(c) < 5 else float(ids[1] % 2) for c, ids in zip(completions, completion_ids)]


def producer(sampler, rows=10, groups=2, k=4, dynamic=False, rounds=3, rank=0, world=1, rewards=None):
    prompts = SimpleNamespace(rows=[{"i": i} for i in range(rows)],
                              prompts=[Prompt([i, 100], f"prompt {i}") for i in range(rows)])
    return RolloutProducer(sampler, rewards or [reward(by_prompt)], prompts,
                           PromptStream(rows, seed=0, rank=rank, world=world), groups=groups,
                           sampling=SamplingConfig(num_generations=k),
                           dynamic_sampling=DynamicSamplingConfig(enabled=dynamic, max_rounds=rounds), seed=0, rank=rank)


def test_rollout_groups_and_per_reward_values():
    sampler = FakeSampler()
    out = producer(sampler).produce(0)
    assert out.rounds == 1 and len(out.prompt_ids) == 2 and len(out.completions) == 8
    assert out.seq_prompts[:4] == [out.prompt_ids[0]] * 4 and out.truncated == [True, False, False, False] * 2
    assert out.reward_values["r"] == out.rewards and out.reward_names == ["r"]
    assert [c.token_ids[0] for c in out.completions[:4]] == [out.prompt_ids[0][0]] * 4


def test_dynamic_sampling_refills_zero_variance_groups_from_the_stream():
    sampler = FakeSampler()
    out = producer(sampler, groups=3, dynamic=True, rounds=5).produce(0)
    kept = [p[0] for p in out.prompt_ids]
    assert len(kept) == 3 and all(i >= 5 for i in kept)  # only groups with signal
    assert not any(zero_variance(out.rewards[g * 4 : (g + 1) * 4]) for g in range(3))
    assert out.rounds == len(sampler.calls) > 1
    assert [len(c) for c in sampler.calls[1:]] == [3 - n for n in _kept_after_each(sampler.calls)[:-1]]


def _kept_after_each(calls):
    kept, out = 0, []
    for call in calls:
        kept += sum(i >= 5 for i in call)
        out.append(kept)
    return out


def test_dynamic_sampling_keeps_whatever_the_last_round_gives():
    always_equal = reward(lambda p, c, ids: [0.5] * len(c))
    sampler = FakeSampler()
    out = producer(sampler, groups=2, dynamic=True, rounds=2, rewards=[always_equal]).produce(0)
    assert out.rounds == 2 and len(out.prompt_ids) == 2 and len(sampler.calls) == 2


@pytest.mark.parametrize("rank", [0, 1])
def test_refills_on_several_ranks_come_from_the_ranks_own_shard(rank):
    sampler = FakeSampler()
    prod = producer(sampler, rows=40, groups=2, dynamic=True, rounds=4, rank=rank, world=2)
    prod.produce(0)
    shard = PromptStream(40, seed=0, rank=rank, world=2).take(prod.stream.position)
    assert [i for call in sampler.calls for i in call] == shard


def test_a_raising_reward_is_counted_not_fatal():
    def broken(prompts, completions, completion_ids):
        raise ValueError("boom")

    out = producer(FakeSampler(), rewards=[reward(by_prompt), reward(broken, "broken")]).produce(0)
    assert out.rewards == [None] * 8 and out.reward_errors == 8


def test_a_response_prefix_is_part_of_every_answer_the_rewards_see_but_not_of_the_sampled_tokens():
    seen = []

    def record(prompts, completions, completion_ids):
        seen.extend(zip(completions, completion_ids))
        return [float(c.endswith("1")) for c in completions]

    prod = producer(FakeSampler(), rewards=[reward(record)])
    prod.prompts.prompts[:] = [Prompt([i, 100], f"prompt {i}", None, "```python\n") for i in range(10)]
    out = prod.produce(0)
    assert seen and all(text.startswith("```python\n") for text, _ in seen)
    assert all(c.text.startswith("```python\n") and len(c.token_ids) == 2 for c in out.completions)
    assert [ids for _, ids in seen] == [c.token_ids for c in out.completions]  # what was sampled, no more


def test_a_response_prefix_is_rendered_after_the_generation_prompt(smollm_path):
    from transformers import AutoTokenizer

    from rlvr.recipe.spec import PromptConfig
    from rlvr.sampling.prompts import render_all, with_prefix

    tok = AutoTokenizer.from_pretrained(smollm_path)
    plain, prefixed = (render_all(tok, PromptConfig(template="{{q}}", response_prefix=pre), [{"q": "Add 2 and 3."}])[0]
                       for pre in ("", "<think>\n"))
    tail = tok("<think>\n", add_special_tokens=False)["input_ids"]
    assert prefixed.ids == plain.ids + tail and prefixed.prefix == "<think>\n" and plain.prefix == ""
    assert prefixed.text.endswith("assistant\n<think>\n")
    groups = with_prefix([[Completion("5</think>", [1], False)], [Completion("x", [2], False)]], [prefixed, plain])
    assert [[c.text for c in g] for g in groups] == [["<think>\n5</think>"], ["x"]]
    with pytest.raises(ValueError, match="response_prefix works on single answers"):
        Recipe.model_validate({"name": "t", "task": "arithmetic", "rewards": {"math": {}}, "environment": "python",
                               "prompt": {"response_prefix": "<think>"}})


# ---------------------------------------------------------------------------- metrics
def test_reduce_sums_without_ranks_is_identity():
    assert reduce_sums({"a": 1.5, "b_max": 2}) == {"a": 1.5, "b_max": 2}


def test_add_sums_adds_and_keeps_the_largest_maximum():
    assert add_sums(None, {"a": 1.0, "len_max": 3.0}) == {"a": 1.0, "len_max": 3.0}
    assert add_sums({"a": 1.0, "len_max": 3.0}, {"a": 2.0, "len_max": 2.0, "b": 1.0}) == \
        {"a": 3.0, "len_max": 3.0, "b": 1.0}


def test_step_row_from_sums():
    rollout = Rollout(group_size=2, prompt_ids=[[1], [2]],
                      completions=[Completion("", [1] * n, n == 4) for n in (2, 4, 3, 3)],
                      rewards=[1.0, 0.0, None, 0.5], reward_values={"m": [1.0, 0.0, None, 1.0]},
                      reward_errors=1, rounds=2)
    sums = rollout_sums(rollout)
    assert sums["len_max"] == 4 and sums["truncated"] == 1 and sums["reward/m/n"] == 3
    update = {"loss": 0.25, "kl": 2.0, "kl_measured": 1.0, "entropy": 6.0, "clip_low": 1.0, "clip_high": 0.0,
              "tokens": 12.0, "groups": 2, "zero_variance": 1, "too_few_scorable": 0, "unscorable": 1}
    row = step_row(4, {**sums, **update}, world=2, reward_names=["m"],
                   times={"generate": 2.0, "step": 5.0}, lr=1e-5, grad_norm=0.7)
    assert row["reward_mean"] == pytest.approx(0.5) and row["reward_std"] == pytest.approx(math.sqrt(1.25 / 3 - 0.25))
    assert row["kl"] == pytest.approx(2 / 12) and row["entropy"] == 0.5 and row["clip_low_frac"] == pytest.approx(1 / 12)
    assert row["completion_len_mean"] == 3.0 and row["truncated_frac"] == 0.25 and row["zero_variance_frac"] == 0.5
    assert row["reward/m"] == pytest.approx(2 / 3) and row["sampling_rounds"] == 1.0 and row["tokens_per_s"] == 6.0
    assert row["time_step"] == 5.0 and row["lr"] == 1e-5 and row["reward_errors"] == 1
    assert step_line(row, 10).startswith("step 4/10  reward 0.500") and "kl 0.1667" in step_line(row, 10)
    unmeasured = step_row(4, {**sums, **update, "kl": 0.0, "kl_measured": 0.0}, world=2, reward_names=["m"],
                          times={"generate": 2.0, "step": 5.0}, lr=1e-5, grad_norm=0.7)
    assert math.isnan(unmeasured["kl"]) and " kl " not in step_line(unmeasured, 10)  # beta = 0: not a flat 0


def test_task_accuracy_beside_the_total():
    rollout = Rollout(group_size=2, prompt_ids=[[1], [2]], completions=[Completion("", [1], False)] * 4,
                      rewards=[1.2, 0.2, None, 0.0], reward_values={"m": [1.0, 0.0, None, 0.5], "shape": [1, 1, 0, 0]})
    sums = rollout_sums(rollout, ("m", 1.0))
    assert (sums["task_pass"], sums["task_n"], sums["task_reward_max"]) == (1, 3, 1.0)
    update = dict.fromkeys(("loss", "kl", "entropy", "clip_low", "clip_high", "tokens", "groups", "zero_variance",
                            "too_few_scorable", "unscorable"), 0.0)
    row = step_row(1, {**sums, **update}, world=1, reward_names=["m", "shape"], times={"step": 1.0}, lr=1.0,
                   grad_norm=0.0)
    assert row["task_accuracy"] == pytest.approx(1 / 3) and row["reward_mean"] == pytest.approx(1.4 / 3)
    assert "acc 33.3%" in step_line(row, 1)
    assert "task_accuracy" not in step_row(0, {**rollout_sums(rollout), **update}, world=1, reward_names=["m"],
                                           times={}, lr=1.0, grad_norm=0.0)
    # ranks combine the largest task reward by taking the largest
    assert add_sums(sums, {**sums, "task_reward_max": 0.0})["task_reward_max"] == 1.0


def priced(prompts, completions, completion_ids):
    """by_prompt's values, and what a judge would report: sample 0 of a group asks (its seconds the
    prompt's number), the others are cache hits; prompt 7 takes a retry and prompt 9 fails."""
    out = []
    for c, ids in zip(completions, completion_ids):
        value, i = by_prompt(None, [c], [ids])[0], int(c)
        asked = {"requests": 1, "retries": int(i == 7), "failed_requests": int(i == 9), "seconds": float(i),
                 "seconds_mean": float(i), "seconds_max": float(i)}
        out.append(Score(value, {}, asked if ids[1] == 0 else {"cache_hits": 1}))
    return out


def test_a_reward_s_metrics_reach_the_step_row_summed_over_rounds_and_ranks():
    """Score.metrics travel as the rewards' per-reward stats do (runner -> rollout -> rollout_sums ->
    the sums of all ranks -> step_row): every group scored counts, the ones dynamic sampling drew
    again included (their scoring was paid for); ``_max`` is the largest, ``_mean`` the mean over
    the records that reported it, any other name the sum."""
    samplers = [FakeSampler(), FakeSampler()]
    rollouts = [producer(samplers[rank], rows=10, groups=2, dynamic=True, rounds=4, rank=rank, world=2,
                         rewards=[reward(priced, "judge"), reward(by_prompt, "plain")]).produce(0) for rank in (0, 1)]
    asked = [i for sampler in samplers for call in sampler.calls for i in call]  # every group scored, both ranks
    assert len(asked) > sum(len(r.prompt_ids) for r in rollouts)  # groups drawn again were scored too
    totals = add_sums(*(rollout_sums(r) for r in rollouts))  # as reduce_sums adds them over ranks, name by name
    update = dict.fromkeys(("loss", "kl", "entropy", "clip_low", "clip_high", "tokens", "groups", "zero_variance",
                            "too_few_scorable", "unscorable"), 0.0)
    row = step_row(1, {**totals, **update}, world=2, reward_names=["judge", "plain"], times={"step": 1.0}, lr=1.0,
                   grad_norm=0.0)
    assert row["reward/judge/requests"] == len(asked) and row["reward/judge/cache_hits"] == 3 * len(asked)
    assert row["reward/judge/retries"] == asked.count(7) and row["reward/judge/failed_requests"] == asked.count(9)
    assert row["reward/judge/seconds"] == sum(asked) and row["reward/judge/seconds_max"] == max(asked)
    assert row["reward/judge/seconds_mean"] == pytest.approx(sum(asked) / len(asked))  # per request, not per sample
    assert row["reward/plain"] == row["reward/judge"] and not any(k.startswith("reward/plain/") for k in row)
    assert not any(k.startswith("reward_metric") for k in row)  # the sums' own names stay out of the row
    json.dumps(row)  # plain numbers: metrics.jsonl and the trackers take the row as it is
    # a rank whose records reported no seconds at all (every one a cache hit) adds only what it has
    hits = add_sums({"reward_metric/judge/cache_hits": 4.0}, rollout_sums(rollouts[0]))
    mine = [i for call in samplers[0].calls for i in call]
    row = step_row(1, {**hits, **update}, world=2, reward_names=["judge"], times={}, lr=1.0, grad_norm=0.0)
    assert row["reward/judge/cache_hits"] == 4 + 3 * len(mine) and row["reward/judge/requests"] == len(mine)
    assert row["reward/judge/seconds_mean"] == pytest.approx(sum(mine) / len(mine))


def test_stuck_reward_warns_once_per_stretch_of_zero_task_reward():
    stuck = StuckReward(3, "math", enabled=False)
    samples = ["The answer is  #### 18\n"]
    seen = [stuck.update({"task_reward_max": v}, samples) for v in (0.0, 0.0, -1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)]
    assert [s is not None for s in seen] == [False, False, True, False, False, False, False, False, True]
    assert seen[2].startswith("reward stuck at 0: 'math' scored 0 or less for every sample of the last 3 steps")
    assert seen[2].endswith("A sample: 'The answer is #### 18'")
    assert StuckReward(0, "math").update({"task_reward_max": 0.0}) is None
    never = StuckReward(1, "math", enabled=False)  # no scorable sample (NaN) is not evidence of a stuck reward
    assert never.update({"task_reward_max": math.nan}) is None and never.update({"task_reward_max": 0.0})


# ---------------------------------------------------------------------------- schedule and DeepSpeed config
def test_lr_multiplier():
    lr = lambda step, **kw: lr_multiplier(step, **{"warmup": 0, "total": 4, "schedule": "linear", **kw})  # noqa: E731
    assert [lr(s) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]
    assert [lr(s, warmup=2) for s in range(5)] == [0.5, 1.0, 1.0, 0.5, 0.0]
    assert [lr(s, schedule="cosine") for s in (0, 2, 4)] == pytest.approx([1.0, 0.5, 0.0])
    assert {lr(s, schedule="constant", warmup=1) for s in range(1, 4)} == {1.0}
    with pytest.raises(ValueError):
        lr(0, schedule="step")


def test_deepspeed_config_and_stage():
    t = TrainerConfig(rollout_batch_size=32, micro_batch_size=4, zero_stage=2, max_grad_norm=0.5)
    config = deepspeed_config(t, world=2, zero_stage=2, bf16=True, fp16=False)
    assert config["gradient_accumulation_steps"] == 4 and config["train_batch_size"] == 32
    assert config["zero_optimization"] == {"stage": 2} and config["gradient_clipping"] == 0.5
    assert config["bf16"] == {"enabled": True} and "optimizer" not in config and "scheduler" not in config
    offload = TrainerConfig(rollout_batch_size=32, micro_batch_size=4, zero_stage=3, offload_optimizer=True)
    config = deepspeed_config(offload, world=1, zero_stage=3, bf16=False, fp16=False)
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu"} and config["optimizer"]["type"] == "AdamW"
    assert effective_zero_stage(t, 1) == 0 and effective_zero_stage(t, 2) == 2 and effective_zero_stage(offload, 1) == 3


def test_trainer_optimizer_is_built_from_the_recipe():
    import torch

    from rlvr.training.optim import AdamW8bit

    base = {"name": "t", "task": "arithmetic", "prompt": {"template": "{{question}}"}, "rewards": {"exact": 1.0},
            "model": {"name": "m"}}
    params = [torch.nn.Parameter(torch.zeros(4))]
    plain = Recipe.model_validate(base).trainer
    assert plain.optimizer == "adamw" and type(build_optimizer(plain, params)) is torch.optim.AdamW
    small = Recipe.model_validate({**base, "trainer": {"optimizer": "adamw_8bit", "lr": 3e-6, "seed": 5}}).trainer
    opt = build_optimizer(small, params)
    assert isinstance(opt, AdamW8bit) and opt.param_groups[0]["lr"] == 3e-6 and opt.state_dict()["rounding_seed"] == 5
    with pytest.raises(ValueError, match="offload_optimizer"):
        Recipe.model_validate({**base, "trainer": {"optimizer": "adamw_8bit", "offload_optimizer": True}})


# ---------------------------------------------------------------------------- prompts and context
def test_fit_prompts_drops_or_refuses_overlong_prompts():
    rows = [{"id": f"r{i}"} for i in range(4)]
    prompts = [Prompt([0] * n, "") for n in (3, 9, 5, 12)]
    kept = fit_prompts(rows, prompts, 8, "drop", "task 't'")
    assert kept.rows == [rows[0], rows[2]] and kept.dropped == 2 and kept.longest == 5
    assert fit_prompts(rows, prompts, None, "drop", "t").longest == 12
    with pytest.raises(RlvrError, match="r1 has a prompt of 9 tokens, over data.max_prompt_tokens 8"):
        fit_prompts(rows, prompts, 8, "error", "task 't'")
    with pytest.raises(RlvrError, match="every prompt"):
        fit_prompts(rows, prompts, 2, "drop", "task 't'")


def test_pad_batch():
    ids, mask = pad_batch([[1, 2, 3], [4]], 0, left=True)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = pad_batch([[1, 2], [4]], 9, left=False, width=3)
    assert ids.tolist() == [[1, 2, 9], [4, 9, 9]] and mask.tolist() == [[1, 1, 0], [1, 0, 0]]


def test_context_length_is_longest_prompt_plus_new_tokens():
    assert context_length(100, 256, 2048) == 356 and context_length(100, 256, None) == 356
    with pytest.raises(RlvrError, match="data.max_prompt_tokens"):
        context_length(1900, 256, 2048)


# ---------------------------------------------------------------------------- layout (more in test_layout.py)
MINIMAL = {"name": "m", "task": {"name": "arithmetic"}, "prompt": {"template": "{{question}}"}, "rewards": {"math": 1.0}}
SMOLLM2_SHAPE = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}


def test_kv_cache_bytes_hold_every_sequence_of_one_call_in_whole_blocks():
    # SmolLM2-135M: 30 layers x 3 KV heads x head_dim 576/9 = 64, keys and values
    per_token_fp32 = 2 * 30 * 3 * 64 * 4  # 46,080 bytes
    # 32 sequences of 134 tokens: 2 blocks of 128 each, plus one spare block
    tokens = (32 * 2 + 1) * 128
    expected = -(-tokens * per_token_fp32 // (1 << 20)) << 20  # whole MiB
    assert kv_cache_bytes(SMOLLM2_SHAPE, context=134, seqs=32, dtype="float32") == expected == 366 << 20
    assert kv_cache_bytes(SMOLLM2_SHAPE, context=128, seqs=32, dtype="float32") == -(-33 * 128 * 46_080 // (1 << 20)) << 20
    # bfloat16 halves it (up to the rounding); head_dim given outright wins over hidden/heads
    assert kv_cache_bytes(SMOLLM2_SHAPE, context=134, seqs=32, dtype="bfloat16") == 183 << 20
    assert kv_cache_bytes({**SMOLLM2_SHAPE, "head_dim": 128}, context=134, seqs=32, dtype="bfloat16") == 366 << 20
    # no num_key_value_heads: multi-head attention, a KV head per head; a multimodal config's text part
    assert kv_cache_bytes({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}, context=1, seqs=1,
                          dtype="float32") == 1 << 20  # 2 x 2 x 4 x 16 x 4 bytes x 256 tokens = 128 KiB -> 1 MiB
    assert kv_cache_bytes({"text_config": SMOLLM2_SHAPE}, context=134, seqs=32, dtype="float32") == 366 << 20
    assert kv_cache_bytes({"num_hidden_layers": 30}, context=134, seqs=32, dtype="float32") is None


def test_sampler_sequences_is_the_largest_call_of_the_run():
    recipe = Recipe.model_validate({**MINIMAL, "trainer": {"rollout_batch_size": 32}, "sampling": {"num_generations": 8},
                                    "eval": {"k": [1, 4]}})
    assert sampler_sequences(recipe, cap=256) == 32  # 4 prompts x 8, no evaluation
    assert sampler_sequences(recipe, eval_rows=5, cap=256) == 32  # 5 x 4 = 20 < 32
    assert sampler_sequences(recipe, eval_rows=100, cap=256) == 256  # 400, vLLM runs at most 256 at once
    assert sampler_sequences(recipe, eval_rows=100, parts=4, cap=256) == 100  # 25 eval prompts x 4 a rank
    assert sampler_sequences(recipe, parts=3, cap=256) == 11  # ceil(32 / 3)


def test_cpu_kv_cache_is_sized_from_the_recipe_or_given(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_SHAPE))
    recipe = Recipe.model_validate({**MINIMAL, "sampling": {"dtype": "float32"}})
    assert recipe.sampling.cpu_kvcache_gib == "auto"
    auto = cpu_kv_cache_bytes(recipe, str(tmp_path), context=134, seqs=32, on_cpu=True)
    assert auto == kv_cache_bytes(SMOLLM2_SHAPE, context=134, seqs=32, dtype="float32")
    assert cpu_kv_cache_bytes(recipe, str(tmp_path), context=134, seqs=32, on_cpu=False) is None  # GPU: memory fraction
    assert cpu_kv_cache_bytes(recipe, str(tmp_path / "none"), context=134, seqs=32, on_cpu=True) == 2 << 30  # no shape
    given = recipe.model_copy(update={"sampling": recipe.sampling.model_copy(update={"cpu_kvcache_gib": 0.5})})
    assert cpu_kv_cache_bytes(given, str(tmp_path), context=134, seqs=32, on_cpu=True) == 1 << 29
    for bad in (0, -1, "big"):
        with pytest.raises(ValueError):
            Recipe.model_validate({**MINIMAL, "sampling": {"cpu_kvcache_gib": bad}})


def test_train_is_a_screen_long():
    import inspect

    from rlvr.training.engine import train

    assert len(inspect.getsource(train).splitlines()) <= 120


def test_the_progress_bar_estimates_the_time_left_from_the_second_step(tmp_path):
    """Steps longer than rich's default 30 s look-back used to leave the estimate at -:--:--."""
    from rlvr.runs.logs import RunOutput

    now = [1000.0]
    with RunOutput(tmp_path, rank=0, verbose=False, total_steps=10) as out:
        out.start_bar(0)
        out.bar.get_time = lambda: now[0]
        task = out.bar._tasks[out._task]
        for _ in range(3):  # three steps of 40 s each
            now[0] += 40.0
            out.bar.update(out._task, advance=1)
        assert task.time_remaining == pytest.approx(7 * 40.0)
        out.stop_bar()


def test_a_deepspeed_extension_built_the_first_time_is_announced_and_not_after(tmp_path, monkeypatch, caplog):
    """The first run with trainer.offload_optimizer waits while DeepSpeed compiles its CPU Adam,
    with nothing on the terminal: rlvr says so first, and says nothing once the build is there."""
    import logging

    from rlvr.training.policy import say_first_build

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="rlvr.training.policy"):
        say_first_build("cpu_adam", "its CPU Adam")
        (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"")
        say_first_build("cpu_adam", "its CPU Adam")
    assert [r.getMessage() for r in caplog.records] == [
        f"DeepSpeed builds its CPU Adam (cpu_adam) once, into {tmp_path / 'cpu_adam'}: "
        "about two minutes on 2 cores; later runs load it"]


def test_cpu_ranks_start_without_deepspeeds_shared_memory_inference_op(monkeypatch):
    """DeepSpeed's CPU process group compiles deepspeed_shm_comm (67 s on 2 cores, again in each
    new environment) for inference_all_reduce alone: rlvr's ranks start without it, and that
    all-reduce is then the process group's."""
    from importlib import import_module

    from rlvr.training.policy import without_shm_inference_op

    backend = import_module("deepspeed.comm.torch")
    monkeypatch.setattr(backend, "build_shm_op", backend.build_shm_op)  # put back after the test
    built = []
    monkeypatch.setattr(backend.get_accelerator(), "create_op_builder", lambda name: built.append(name))
    without_shm_inference_op()
    assert backend.build_shm_op() is None and built == []  # not even asked for
