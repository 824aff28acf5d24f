"""The ``tools`` environment (rlvr_plugins.tools_env): hostile and malformed calls, functions
that hang, raise, flood or return what JSON cannot hold, in the sandbox and in worker
processes; whole episodes on real chat templates (SmolLM2's, and Qwen2.5's from tests/data)
with their masks; the call records the rewards see; recipes and the Python API naming tools."""

from __future__ import annotations

import json

import pytest
from rlvr_plugins.environment_reward import tool_call
from rlvr_plugins.tools_env import make_tools_env

from rlvr import RlvrError
from rlvr.kit.tools import tool_from_function
from rlvr.recipe.spec import PromptConfig
from helpers.plugins_tools_env import call


@pytest.mark.parametrize("turn, kind", [
    ("<tool_call>{\"name\": \"lookup\", \"arguments\": {\"key\": </tool_call>", "bad_json"),
    ("<tool_call>{\"name\": \"lookup\", \"arguments\": {\"key\": ", "unclosed"),
    # by default the format the prompt taught: a call without its tags is not run (nor an answer)
    ('{"name": "lookup", "arguments": {"key": "alpha"}}', "untagged"),
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


def test_a_turn_without_a_call_is_the_answer(tools):
    reply = make_tools_env({}, tools=tools).step("The answer is \\boxed{42}.")
    assert reply.done and not reply.text


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
