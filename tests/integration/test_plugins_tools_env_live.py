"""The ``tools`` environment (rlvr_plugins.tools_env): the checks that start worker pools or
loopback services, or build a tiny model in-process (the integration ring; the others:
tests/e2e/test_plugins_tools_env_runs.py, tests/unit/test_plugins_tools_env.py)."""

from __future__ import annotations

import time

import pytest
from rlvr_plugins.tools_env import make_tools_env

from rlvr import RlvrError
from rlvr.kit.tools import tool_from_function
from helpers.plugins_tools_env import call
import re
from rlvr_plugins.environment_reward import tool_call
from helpers.episodes import ScriptedPolicy
from rlvr.recipe.spec import PromptConfig
from rlvr.sampling.episodes import EpisodeRunner
from rlvr.sampling.episodes import episode_rows

RUNS = ["sandbox", "process"]


@pytest.mark.parametrize("run", RUNS)
def test_a_call_runs_and_its_result_comes_back_as_a_tool_message(tools, run):
    env = make_tools_env({}, tools=tools, run=run)
    reply = env.step("Let me look it up.\n" + call("lookup", key="beta") + call("calculator", expression="48213*9187"))
    assert reply.role == "tool" and not reply.done
    assert list(reply.text) == ["42", "442932831"]
    assert reply.metrics == {"tool_calls": 2}
    assert env.step("The value is 42.") .done
    assert [(c["name"], c["status"], c["result"]) for c in env.state["calls"]] == [
        ("lookup", "ok", 42), ("calculator", "ok", 442932831)]


def test_parser_auto_runs_a_call_the_default_answers_as_untagged(tools):
    """`parser: auto`, the recipe's choice, reads a JSON call without `<tool_call>` tags and runs
    it; the default (hermes, the format the prompt taught) answers it as invalid, not run."""
    turn = '{"name": "lookup", "arguments": {"key": "beta"}}'
    reply = make_tools_env({}, tools=tools, run="process", parser="auto").step(turn)
    assert list(reply.text) == ["42"] and reply.metrics == {"tool_calls": 1}
    strict = make_tools_env({}, tools=tools, run="process").step(turn)
    assert list(strict.text)[0].startswith("Error: invalid call (untagged): a call goes between <tool_call>")
    assert strict.metrics == {"tool_calls": 1, "tool_invalid": 1, "tool_invalid_untagged": 1}


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name, arguments, status, words", [
    ("lookup", {"key": "gamma"}, "error", "raised KeyError"),
    ("nap", {"seconds": 30}, "timeout", "did not finish within 2 seconds"),
    ("spin", {}, "timeout", "did not finish within 2 seconds"),
    ("odd", {}, "error", "returned set, which JSON cannot hold"),
    ("nan", {}, "error", "returned float, which JSON cannot hold"),
    ("big", {"n": 10_000_000}, "error", "over the limit of 2000"),
])
def test_a_function_that_fails_answers_the_model_with_an_error_and_is_counted(tools, run, name, arguments, status,
                                                                              words):
    env = make_tools_env({}, tools=tools, run=run, timeout_s=2.0)
    start = time.monotonic()
    reply = env.step(call(name, **arguments))
    assert time.monotonic() - start < 20
    (text,) = reply.text
    assert text.startswith("Error: ") and words in text, text
    assert reply.metrics["tool_errors"] == 1 and reply.metrics.get("tool_timeouts", 0) == (status == "timeout")
    assert env.state["calls"][0]["status"] == status
    # the episode goes on: the next call runs
    assert list(env.step(call("lookup", key="alpha")).text) == ["17"]


def test_the_sandbox_keeps_a_naive_tool_from_reading_the_host(tools, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret")
    sandboxed = make_tools_env({}, tools=tools, run="sandbox")
    (text,) = sandboxed.step(call("read", path=str(secret))).text
    assert "secret" not in text.replace(str(secret), "") and text.startswith("Error: the tool raised"), text
    # run: process is the user's choice for tools that need the host: there it reads the file
    trusted = make_tools_env({}, tools=tools, run="process")
    assert list(trusted.step(call("read", path=str(secret))).text) == ["the host's secret"]


def test_tools_the_sandbox_cannot_load_stop_the_run_with_one_line(tmp_path):
    import sys
    (tmp_path / "rlvr_dependent_tool.py").write_text("import rlvr\n\ndef f() -> int:\n    return 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import rlvr_dependent_tool
        tool = tool_from_function(rlvr_dependent_tool.f)
        with pytest.raises(RlvrError, match="does not load in the sandbox .*No module named 'rlvr'.*run: process"):
            make_tools_env({}, tools=[tool]).step(call("f"))
        assert list(make_tools_env({}, tools=[tool], run="process").step(call("f")).text) == ["1"]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("rlvr_dependent_tool", None)


@pytest.mark.parametrize("name, words", [
    ("chatty", None),  # what a tool prints is not its answer
    ("leave", ("ended without an answer (exited)",)),
    ("hog", ("MemoryError", "ended without an answer")),  # the limit raises, or the kernel kills it
])
def test_in_the_sandbox_a_tool_that_floods_exits_or_runs_out_of_memory_is_an_error(tools, name, words):
    env = make_tools_env({}, tools=tools, timeout_s=10.0, memory_mb=256)
    (text,) = env.step(call(name)).text
    if words is None:
        assert text == "7"
    else:
        assert text.startswith("Error: ") and any(w in text for w in words), text
    assert list(env.step(call("lookup", key="alpha")).text) == ["17"]



def test_calls_past_the_limits_are_refused_with_a_line_saying_so(tools):
    env = make_tools_env({}, tools=tools, max_calls_per_turn=2, max_calls=3)
    texts = list(env.step(call("lookup", key="alpha") * 3).text)
    assert texts[:2] == ["17", "17"] and texts[2] == "Error: not run: at most 2 calls a turn"
    texts = list(env.step(call("lookup", key="beta") * 2).text)
    assert texts[0] == "42" and "limit of 3 calls per episode" in texts[1]
    timed = make_tools_env({}, tools=tools, timeout_s=1.0, episode_timeout_s=1.5)
    first, second, third = timed.step(call("nap", seconds=5) * 3).text
    assert "did not finish within 1 seconds" in first
    assert re.search(r"did not finish within 0\.\d+ seconds", second) or "seconds of tool time are spent" in second
    assert "seconds of tool time are spent" in third
    assert timed.state["tool_errors"] == 3



def test_an_episode_masks_the_tool_messages_and_the_rewards_see_the_calls(chat_tok, tools):
    from rlvr.sampling.prompts import _render

    tok = chat_tok
    schemas = [t.schema for t in tools]
    prompt, _ = _render(tok, PromptConfig(system="Use the tools.", template="{{question}}"), {"question": "q?"},
                        schemas)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    first = tok.encode(call("lookup", key="beta") + call("lookup", key="nope"), add_special_tokens=False) + [eos]
    last = tok.encode("It is \\boxed{42}.", add_special_tokens=False) + [eos]
    policy = ScriptedPolicy({tuple(prompt): [first, last]})
    run = EpisodeRunner(make_tools_env, {"tools": tools}, tokenizer=tok, max_turns=3, max_tokens=400, eos_ids=[eos])
    outs, states, sums = run.run(policy, [{"question": "q?"}], [prompt], n=1, temperature=1.0, top_p=1.0,
                                 max_tokens=100)
    (done,) = outs[0]
    ids, mask = done.token_ids, done.mask
    policy_ids = [i for i, m in zip(ids, mask) if m]
    assert policy_ids == first + last
    reply = tok.decode([i for i, m in zip(ids, mask) if not m])
    if tok.template_name == "qwen2.5":
        assert reply == ("\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n"
                         "Error: the tool raised KeyError: 'nope'\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    else:
        assert reply == ("\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>tool\nError: the tool raised KeyError: "
                         "'nope'<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(prompt + ids).endswith("It is \\boxed{42}.<|im_end|>")
    assert sums["env/tool_calls"] == 2 and sums["env/tool_errors"] == 1
    rows = episode_rows([{"question": "q?", "expected_tool": "lookup"}], 1, outs, states)
    assert [c["status"] for c in rows[0]["env_state"]["calls"]] == ["ok", "error"]
    assert tool_call([""], [""], [[]], env_state=[rows[0]["env_state"]], expected_tool=["lookup"])[0].value == 1.0
    assert tool_call([""], [""], [[]], env_state=[rows[0]["env_state"]], expected_tool=["calculator"])[0].value == 0.0



def test_a_reward_reads_the_transcript_the_policys_turns_or_its_last_turn(chat_tok, tools):
    """environment.score: a reward that takes the last number of the completion is paid by the
    tool's answer in the transcript, and not when it reads only what the policy wrote."""
    from rlvr.host.registry import RewardSpec
    from rlvr.rewards.runner import BoundReward
    from rlvr.rewards.scored import sample_and_score
    from rlvr.sampling.prompts import Prompt, _render

    def last_number(prompts, completions, completion_ids, answer):
        found = [re.findall(r"\d+", c) for c in completions]
        return [float(bool(f) and f[-1] == a) for f, a in zip(found, answer)]

    tok = chat_tok
    prompt, _ = _render(tok, PromptConfig(template="{{question}}"), {"question": "q?"}, [t.schema for t in tools])
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    first = tok.encode("Let me see. " + call("lookup", key="beta"), add_special_tokens=False) + [eos]
    last = tok.encode("I looked it up for you.", add_special_tokens=False) + [eos]
    reward = BoundReward(RewardSpec("last_number", last_number, "", "test", "0", ("answer",), (), {}, False))
    seen = {}
    for score in ("transcript", "policy", "final_turn"):
        run = EpisodeRunner(make_tools_env, {"tools": tools}, tokenizer=tok, max_turns=3, max_tokens=400,
                            eos_ids=[eos], score=score)
        scored = sample_and_score(ScriptedPolicy({tuple(prompt): [first, last]}), [reward],
                                  [Prompt(prompt, "q?")], [{"question": "q?", "answer": "42"}], n=1, episodes=run,
                                  temperature=1.0, top_p=1.0, max_tokens=100)
        (completion,) = scored.completions
        seen[score] = (scored.scores.total[0], completion.reward_text)
        assert "42" in completion.text and completion.mask.count(0) > 0  # the episode itself is the same
        assert scored.rows[0]["env_state"]["calls"][0]["result"] == 42
    assert seen["transcript"] == (1.0, None)  # paid by the tool
    policy_text = tok.decode(first, skip_special_tokens=True) + "\n" + "I looked it up for you."
    assert seen["policy"] == (0.0, policy_text)
    assert seen["final_turn"] == (0.0, "I looked it up for you.")
    with pytest.raises(ValueError, match="transcript, policy or final_turn"):
        EpisodeRunner(make_tools_env, {"tools": tools}, tokenizer=tok, max_turns=3, max_tokens=400, eos_ids=[eos],
                      score="last")
