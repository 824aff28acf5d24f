"""The ``tools`` environment (rlvr_plugins.tools_env): hostile and malformed calls, functions
that hang, raise, flood or return what JSON cannot hold, in the sandbox and in worker
processes; whole episodes on real chat templates (SmolLM2's, and Qwen2.5's from tests/data)
with their masks; the call records the rewards see; recipes and the Python API naming tools."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from contextlib import contextmanager

import pytest
from rlvr_plugins.environment_reward import tool_call
from rlvr_plugins.tool_functions import calculator
from rlvr_plugins.tools_env import make_tools_env

from helpers import ROOT, one_line_error
from helpers.episodes import ScriptedPolicy
from helpers.ordinary_user import USERS, as_ordinary_user
from rlvr import RlvrError
from rlvr.kit.tools import tool_from_function
from rlvr.recipe.spec import PromptConfig
from rlvr.sampling.episodes import EpisodeRunner, episode_rows

QWEN_TEMPLATE = (ROOT / "tests" / "data" / "qwen2.5_chat_template.jinja").read_text()

TOOLS_SOURCE = '''
import os
import time

TABLE = {"alpha": 17, "beta": 42}


def lookup(key: str) -> int:
    """The value stored under a key.

    Args:
        key: the key
    """
    return TABLE[key]


def nap(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "awake"


def spin() -> int:
    """Never returns."""
    while True:
        pass


def odd() -> object:
    """Returns what JSON cannot hold."""
    return {1, 2}


def nan() -> float:
    """Returns NaN."""
    return float("nan")


def big(n: int) -> str:
    """A long string."""
    return "x" * n


def chatty() -> int:
    """Prints a lot, returns 7."""
    for _ in range(100000):
        print("noise " * 20)
    return 7


def leave() -> int:
    """Ends its process."""
    os._exit(3)


def hog() -> int:
    """Takes all the memory it can."""
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))


def read(path: str) -> str:
    """Reads a file: a naive tool, trusting its argument.

    Args:
        path: the file
    """
    with open(path) as handle:
        return handle.read()
'''


@contextmanager
def tools_source_as(folder, name: str):
    """TOOLS_SOURCE written to ``folder`` as module ``name``, imported for the block."""
    import importlib
    import sys

    (folder / f"{name}.py").write_text(TOOLS_SOURCE)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def tools_module(tmp_path_factory):
    with tools_source_as(tmp_path_factory.mktemp("tools-module"), "hostile_tools") as module:
        yield module


@pytest.fixture(scope="module")
def tools(tools_module):
    names = ("lookup", "nap", "spin", "odd", "nan", "big", "chatty", "leave", "hog", "read")
    return [tool_from_function(getattr(tools_module, n)) for n in names] + [tool_from_function(calculator)]


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


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


def test_the_sandbox_keeps_a_naive_tool_from_reading_the_host(tools, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret")
    sandboxed = make_tools_env({}, tools=tools, run="sandbox")
    (text,) = sandboxed.step(call("read", path=str(secret))).text
    assert "secret" not in text.replace(str(secret), "") and text.startswith("Error: the tool raised"), text
    # run: process is the user's choice for tools that need the host: there it reads the file
    trusted = make_tools_env({}, tools=tools, run="process")
    assert list(trusted.step(call("read", path=str(secret))).text) == ["the host's secret"]


def tools_in_every_run() -> dict:
    """One turn of four calls (a lookup, the calculator, a read of a file the user can read, a
    call past its timeout) in the sandbox under bwrap and under process isolation, and in worker
    processes: what came back, as whoever runs it (tests/helpers/ordinary_user.py)."""
    import tempfile
    from pathlib import Path

    from rlvr_plugins import sandbox

    folder = Path(tempfile.mkdtemp())
    secret = folder / "secret.txt"
    secret.write_text("the host's secret")
    secret.chmod(0o644)
    found = {}
    with tools_source_as(folder, "own_tools") as own_tools:
        tools = [tool_from_function(getattr(own_tools, n)) for n in ("lookup", "read", "nap")]
        tools.append(tool_from_function(calculator))
        try:
            for run, isolation in (("sandbox", "bwrap"), ("sandbox", "process"), ("process", "bwrap")):
                env = make_tools_env({}, tools=tools, run=run, isolation=isolation, timeout_s=3.0)
                reply = env.step(call("lookup", key="beta") + call("calculator", expression="48213*9187")
                                 + call("read", path=str(secret)) + call("nap", seconds=60))
                found[f"{run}/{isolation}"] = {"texts": list(reply.text),
                                               "statuses": [c["status"] for c in env.state["calls"]]}
        finally:
            sandbox.close_all()
    return {"uid": os.getuid(), "found": found}


@pytest.mark.slow
@pytest.mark.parametrize("user", USERS)
def test_tools_run_the_same_as_root_and_as_an_ordinary_user(user):
    got = tools_in_every_run() if user == "as-run" else as_ordinary_user(__file__, "tools_in_every_run")
    assert (got["uid"] != 0) == (user == "ordinary" or os.geteuid() != 0)
    for where, found in got["found"].items():
        texts = found["texts"]
        assert texts[:2] == ["42", "442932831"] and found["statuses"][:2] == ["ok", "ok"], (where, found)
        assert found["statuses"][3] == "timeout" and "did not finish within 3 seconds" in texts[3], (where, found)
    # bwrap shows the tool no host file, even one its user may read; worker processes read it
    assert got["found"]["sandbox/bwrap"]["texts"][2].startswith("Error: the tool raised"), got
    assert got["found"]["process/bwrap"]["texts"][2] == "the host's secret"


@pytest.mark.parametrize("turn, kind", [
    ("<tool_call>{\"name\": \"lookup\", \"arguments\": {\"key\": </tool_call>", "bad_json"),
    ("<tool_call>{\"name\": \"lookup\", \"arguments\": {}}", "unclosed"),
    ("<tool_call>[\"lookup\"]</tool_call>", "not_a_call"),
    (call("lookup_all"), "unknown_tool"),
    (call("lookup"), "bad_arguments"),
    (call("lookup", key=7), "bad_arguments"),
    (call("lookup", key="alpha", extra=1), "bad_arguments"),
    (call("lookup", key="a" * 10_000), "too_large"),
])
def test_an_invalid_call_is_answered_counted_by_kind_and_recorded_never_run(tools, turn, kind):
    env = make_tools_env({}, tools=tools)
    reply = env.step(turn)
    (text,) = reply.text
    assert text.startswith(f"Error: invalid call ({kind}): "), text
    assert reply.metrics == {"tool_calls": 1, "tool_invalid": 1, f"tool_invalid_{kind}": 1}
    (record,) = env.state["calls"]
    assert record["valid"] is False and record["kind"] == kind and record["status"] == "invalid"
    scored = tool_call([""], [""], [[]], env_state=[env.state])[0]
    assert scored.value == 0.0 and scored.info["invalid"][0].startswith(kind)


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


def test_a_turn_without_a_call_is_the_answer(tools):
    reply = make_tools_env({}, tools=tools).step("The answer is \\boxed{42}.")
    assert reply.done and not reply.text


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


def test_a_lambda_or_closure_is_refused_where_it_cannot_travel():
    def double(x: int) -> int:
        return 2 * x

    tool = tool_from_function(double)
    with pytest.raises(RlvrError, match="not a function at the top level of a module"):
        make_tools_env({}, tools=[tool]).step(call("double", x=2))
    with pytest.raises(RlvrError, match="cannot be sent to a worker process"):
        make_tools_env({}, tools=[tool], run="process").step(call("double", x=2))


def test_the_environment_needs_tools():
    with pytest.raises(RlvrError, match="has no tools"):
        make_tools_env({})


# --- whole episodes on real chat templates ---------------------------------------------------------

@pytest.fixture(scope="module", params=["smollm2", "qwen2.5"])
def chat_tok(request, smollm_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm_path)
    if request.param == "qwen2.5":
        tok.chat_template = QWEN_TEMPLATE
    tok.template_name = request.param
    return tok


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

def test_the_prompt_shows_the_tools_through_the_template_or_the_fallback(chat_tok, tools):
    from rlvr.kit.tools import tools_prompt
    from rlvr.sampling.prompts import _render

    tok = chat_tok
    schemas = [t.schema for t in tools[:1]]
    ids, messages = _render(tok, PromptConfig(system="Be brief.", template="{{question}}"), {"question": "q?"},
                            schemas)
    text = tok.decode(ids)
    if tok.template_name == "qwen2.5":  # Qwen's own words and format
        assert "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" \
               + json.dumps(schemas[0]) + "\n</tools>" in text
        assert messages[0] == {"role": "system", "content": "Be brief."}
    else:  # SmolLM2's template ignores tools=: the fallback, at the end of the system message
        assert messages[0]["content"] == "Be brief.\n\n" + tools_prompt(schemas)
        assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    plain, _ = _render(tok, PromptConfig(template="{{question}}", chat_template=False), {"question": "q?"}, schemas)
    assert tok.decode(plain) == tools_prompt(schemas) + "\n\nq?"


# --- recipes and the Python API ---------------------------------------------------------------------

RECIPE = """
name: t
task: {name: arithmetic, options: {size: 50}}
prompt: {template: "{{question}}"}
environment: {name: tools, tools: TOOLS}
rewards: {math: 1.0, tool_call: 0.2}
model: {name: smollm2-135m-instruct}
"""


def write_recipe(folder, tools, env="tools"):
    text = RECIPE.replace("TOOLS", json.dumps(tools)).replace("name: tools,", f"name: {env},")
    path = folder / "recipe.yaml"
    path.write_text(text)
    return path


def test_a_recipe_names_registered_tools_and_its_own_module_functions(tmp_path, rlvr_cmd):
    (tmp_path / "my_tools.py").write_text(textwrap.dedent('''
        def lookup(key: str) -> int:
            """A lookup."""
            return 1
    '''))
    result = rlvr_cmd("validate", str(write_recipe(tmp_path, ["calculator", "my_tools:lookup"])))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("tools, env, message", [
    (["nope"], "tools", "unknown tool 'nope'"),
    (["os:system"], "tools", "standard library"),
    (["json:dumps"], "tools", "standard library"),
    (["my_tools:missing"], "tools", "has no function 'missing'"),
    (["my_tools:untyped"], "tools", "has no type hint"),
    (["calculator", "my_tools:calculator"], "tools", "both called 'calculator'"),
    (["calculator"], "python", "does not run tools"),
])
def test_a_recipe_with_bad_tools_is_refused_in_one_line_before_a_model_loads(tmp_path, rlvr_cmd, tools, env,
                                                                             message):
    (tmp_path / "my_tools.py").write_text("def untyped(x):\n    return x\n\ndef calculator(e: str) -> str:\n"
                                          "    return e\n")
    one_line_error(rlvr_cmd("validate", str(write_recipe(tmp_path, tools, env))), message)


def test_the_environments_options_do_not_take_tools(tmp_path, rlvr_cmd):
    path = write_recipe(tmp_path, ["calculator"])
    path.write_text(path.read_text().replace("tools: [", "options: {tools: [calculator]}, tools: ["))
    one_line_error(rlvr_cmd("validate", str(path)), "has no option 'tools'")



def test_the_recipe_chooses_what_the_rewards_read_of_an_episode(tmp_path, rlvr_cmd, smollm_path):
    from transformers import AutoTokenizer

    from rlvr.host.registry import load_registry
    from rlvr.recipe.load import load_recipe
    from rlvr.sampling.episodes import episode_runner

    path = write_recipe(tmp_path, ["calculator"])
    path.write_text(path.read_text().replace("tools: [", "score: final_turn, tools: ["))
    runner = episode_runner(load_recipe(path), load_registry(), AutoTokenizer.from_pretrained(smollm_path))
    assert runner.score == "final_turn"
    path.write_text(path.read_text().replace("score: final_turn", "score: last_turn"))
    one_line_error(rlvr_cmd("validate", str(path)), "environment.score")

def lookup_for_api(key: str) -> int:
    """A lookup given to the Python API.

    Args:
        key: the key
    """
    return len(key)


def test_the_python_api_takes_tools_as_trl_does():
    from rlvr.api.python import prepare
    from rlvr.recipe.resolve import recipe_tools

    recipe = {"task": {"name": "arithmetic", "options": {"size": 50}}, "rewards": {"math": 1.0},
              "prompt": {"template": "{{question}}"}, "model": {"name": "smollm2-135m-instruct"}}
    rec, registry = prepare(recipe, None, None, None, None, tools=[lookup_for_api])
    assert rec.environment.name == "tools" and rec.environment.tools == ["lookup_for_api"]
    assert [t.name for t in recipe_tools(rec, registry)] == ["lookup_for_api"]
    with_env = {**recipe, "environment": {"name": "tools", "tools": ["calculator"], "max_turns": 2}}
    rec, registry = prepare(with_env, None, None, None, None, tools={"count": lookup_for_api})
    assert rec.environment.tools == ["calculator", "count"] and rec.environment.max_turns == 2
    assert [t.schema["function"]["name"] for t in recipe_tools(rec, registry)] == ["calculator", "count"]
    with pytest.raises(RlvrError, match="has no name the model could call it by"):
        prepare(recipe, None, None, None, None, tools=[lambda x: x])
    with pytest.raises(RlvrError, match="does not run tools"):
        prepare({**recipe, "environment": "python"}, None, None, None, None, tools=[lookup_for_api])


def test_rlvr_tools_lists_each_tool_and_its_schema(rlvr_cmd):
    listed = rlvr_cmd("tools")
    assert listed.returncode == 0, listed.stderr
    assert "calculator(expression: string, fraction?: boolean)  plugin tools_env" in listed.stdout
    schemas = json.loads(rlvr_cmd("tools", "--json").stdout)
    assert {"type": "function", "function": calculator_schema()} in schemas


def calculator_schema() -> dict:
    return tool_from_function(calculator).schema["function"]
