"""Episodes (rlvr.sampling.episodes): the checks that run `rlvr` or other processes end to end (the
e2e ring; the others: tests/integration/test_sampling_episodes_live.py,
tests/unit/test_sampling_episodes.py)."""

from __future__ import annotations

import json

import pytest
from rlvr.sampling.episodes import EpisodeRunner

from helpers.episodes import ScriptedPolicy


@pytest.fixture(scope="module")
def tok(smollm_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm_path)


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_training_on_episodes(tmp_path, tiny_model, test_plugin, backend):
    """`rlvr train` with an environment: several turns per episode with either sampler, the
    environment's tokens are in the sequences and out of the loss; with vLLM its log-probs of the
    policy's tokens, taken turn by turn, are the trainer's over the whole episode."""
    from helpers.runs import assert_sampler_holds_trainer_weights, make_run, train_two_steps

    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend=backend)
    metrics = train_two_steps(recipe, tmp_path / "run", env, "environment.name=ticker", "environment.max_turns=4",
                              "environment.max_tokens=40", "sampling.max_tokens=12", "algorithm.ppo_epochs=1")
    for row in metrics:
        assert 1 < row["env_turns_mean"] <= 2 and row["env_tokens_mean"] > 0 and row["env/tool_calls"] > 0, row
        assert row["policy_tokens_mean"] + row["env_tokens_mean"] == pytest.approx(row["completion_len_mean"])
        assert row["env_errors"] == 0 and row["time_env"] >= 0
    if backend == "vllm":
        assert_sampler_holds_trainer_weights(metrics)


def test_training_with_the_python_environment(tmp_path, tiny_model, test_plugin):
    """Two steps of `rlvr train` with the built-in python tool (a random model writes no code:
    its episodes end at its first turn; the tool itself is exercised above and in
    tests/integration/test_plugins_python_env.py)."""
    from helpers.runs import make_run, train_two_steps

    recipe, env = make_run(tmp_path, tiny_model, test_plugin, backend="hf")
    env["RLVR_LOAD_PLUGINS"] += ",python_env,environment"
    (tmp_path / "cpuinfo").write_text("flags\t\t: fpu avx2 avx512f avx512bw\n")  # a CPU without bf16
    env["RLVR_CPUINFO"] = str(tmp_path / "cpuinfo")
    metrics = train_two_steps(recipe, tmp_path / "run", env, "model.dtype=bfloat16", "environment.name=python",
                              "environment.options={timeout_s: 2.0}", "environment.max_tokens=40",
                              "rewards={even_tokens: 1.0, tool_call: 0.2}", "eval.correctness_reward=tool_call",
                              "trainer.stuck_reward_steps=2", "trainer.samples_every=2")
    assert all(r["env_errors"] == 0 and r["env_turns_mean"] >= 1 and "env/tool_calls" in r for r in metrics)
    # a random model never runs a cell: the task reward (tool_call) is 0 for every sample
    assert [r["task_accuracy"] for r in metrics] == [0.0, 0.0]
    log = (tmp_path / "run" / "train.log").read_text()
    assert log.count("reward stuck at 0: 'tool_call' scored 0 or less for every sample of the last 2 steps") == 1
    assert log.count("model.dtype: bfloat16 on a CPU without bf16 instructions (avx512_bf16, amx_bf16) is emulated") == 1
    assert "never learnt" not in log  # the tiny model's tokens each have a row of their own
    assert "shm_comm" not in log  # DeepSpeed's CPU ranks start without compiling its inference all-reduce
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert {r["step"] for r in samples} == {2} and all(r["rewards"]["tool_call"] == 0.0 for r in samples)


def test_python_tool_episode_end_to_end(tok):
    """The built-in python environment in the episode runner, real sandbox: the cell runs, its
    output comes back inline as environment tokens, and the policy's answer follows."""
    from rlvr_plugins.python_env import make_python_env

    prompt = enc(tok, "What is 0+1+...+9?")
    code = enc(tok, "Let me compute.\n```python\nprint(sum(range(10)))\n```\n")
    answer = enc(tok, "So it is \\boxed{45}.") + [tok.eos_token_id]
    run = EpisodeRunner(make_python_env, {}, tokenizer=tok, max_turns=3, max_tokens=256, eos_ids=[tok.eos_token_id])
    groups, states, sums = run.run(ScriptedPolicy({tuple(prompt): [code, answer]}), [{}], [prompt], n=2,
                                   temperature=1.0, top_p=1.0, max_tokens=64)
    output = enc(tok, "```output\n45\n```\n")
    for c in groups[0]:
        assert c.token_ids == code + output + answer
        assert c.mask == [1] * len(code) + [0] * len(output) + [1] * len(answer)
    assert [s["outputs"] for s in states] == [["45"]] * 2
    assert sums["env/tool_calls"] == 2 and sums["env/tool_errors"] == 0 and sums["env_turns"] == 4
