"""The ``tools`` environment (rlvr_plugins.tools_env): the checks that run `rlvr` or other processes
end to end (the e2e ring; the others: tests/integration/test_plugins_tools_env_live.py,
tests/unit/test_plugins_tools_env.py)."""

from __future__ import annotations

import json
import textwrap

import pytest
from rlvr_plugins.tool_functions import calculator

from helpers import one_line_error
from rlvr.kit.tools import tool_from_function
from helpers.plugins_tools_env import tools_source_as
import os
from rlvr_plugins.tools_env import make_tools_env
from helpers.ordinary_user import USERS
from helpers.ordinary_user import as_ordinary_user
from helpers.plugins_tools_env import call

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


def test_rlvr_tools_lists_each_tool_and_its_schema(rlvr_cmd):
    listed = rlvr_cmd("tools")
    assert listed.returncode == 0, listed.stderr
    assert "calculator(expression: string, fraction?: boolean)  plugin tools_env" in listed.stdout
    schemas = json.loads(rlvr_cmd("tools", "--json").stdout)
    assert {"type": "function", "function": calculator_schema()} in schemas


def calculator_schema() -> dict:
    return tool_from_function(calculator).schema["function"]


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
