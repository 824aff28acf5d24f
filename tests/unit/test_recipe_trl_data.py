"""TRL's conversational data as TRL takes it: a column of chat messages is the prompt's turns,
rendered through the chat template, never its Python repr; TRL rewards get the prompts as
messages."""

from __future__ import annotations

import pytest

from helpers.recipe_trl_data import TRL_ROWS, trl_recipe

from rlvr import RlvrError
from rlvr.recipe.template import check_messages, conversation_column, messages, render

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]


@pytest.mark.parametrize("value, problem", [
    ("What is 2 + 2?", "is a str, not a list of messages"),
    ([], "is an empty list of messages"),
    (["hi"], "message 1 is a str"),
    ([{"role": "human", "content": "hi"}], "role 'human', not one of system, user, assistant, tool"),
    ([{"role": "user", "content": 3}], "message 1 (user) has content int"),
    ([{"role": "user", "content": [{"type": "image", "image": "x.png"}]}], "a 'image' part (rlvr trains on text only)"),
    ([{"role": "user", "content": "hi", "tool_calls": []}], "message 1 has 'tool_calls'"),
    ([{"role": "system", "content": "Be brief."}], "ends with a system message"),
])
def test_check_messages_names_what_is_wrong(value, problem):
    assert problem in check_messages(value)
    with pytest.raises(RlvrError, match="^column 'prompt' "):
        messages(value)


def test_messages_keep_roles_and_join_text_parts():
    assert check_messages(CHAT) is None
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
             {"role": "assistant", "content": "Let me"}]
    assert messages(parts) == [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "Let me"}]


def test_a_template_that_is_one_field_takes_the_column_whole():
    assert conversation_column("{{prompt}}") == conversation_column(" {{ prompt }}\n") == "prompt"
    assert conversation_column("Q: {{prompt}}") is None and conversation_column("{{a}}{{b}}") is None


@pytest.mark.parametrize("value, message", [
    (CHAT, 'holds chat messages, which a template shows only as the whole prompt: write template: "{{prompt}}"'),
    (["a", "b"], "is a list, not text: it would reach the model as its Python repr"),
    ({"a": 1}, "is a dict, not text"),
])
def test_a_list_inside_other_text_is_refused_not_shown_as_a_repr(value, message):
    with pytest.raises(RlvrError) as err:
        render("Answer this: {{prompt}}", {"prompt": value})
    assert message in str(err.value) and "\n" not in str(err.value)


# -- a TRL dataset through the `dataset` task, validation and prompt rendering ---------------------

import json  # noqa: E402

from rlvr.host.registry import load_registry  # noqa: E402
from rlvr.recipe.load import load_recipe  # noqa: E402
from rlvr.recipe.resolve import load_rows, resolve  # noqa: E402
from rlvr.recipe.spec import PromptConfig  # noqa: E402
from rlvr.recipe.template import check_prompt_row, prompt_messages  # noqa: E402
from rlvr.sampling.prompts import render_all  # noqa: E402

@pytest.fixture(scope="module")
def chat_tok(smollm_path):
    """SmolLM2's tokenizer and its ChatML template (``<|im_start|>role\\n...<|im_end|>``)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm_path)


@pytest.mark.parametrize("prompt", [None, {"template": "{{prompt}}"}], ids=["no-template", "template"])
def test_a_conversational_jsonl_validates_and_renders_its_turns(tmp_path, chat_tok, prompt):
    recipe, registry = trl_recipe(tmp_path, TRL_ROWS, prompt), load_registry()
    resolve(recipe, registry)
    rows = load_rows(registry, recipe.task, "train")
    for row in rows:
        check_prompt_row(recipe.prompt, row)
    first = render_all(chat_tok, recipe.prompt, rows[:2])[0]
    question = rows[0]["prompt"][1]["content"]
    assert first.text == (f"<|im_start|>system\nReply with a number.<|im_end|>\n<|im_start|>user\n{question}"
                          "<|im_end|>\n<|im_start|>assistant\n")
    assert first.messages == rows[0]["prompt"] and "{'role'" not in first.text


def test_shots_go_after_the_conversations_system_turn_and_an_assistant_turn_is_continued(chat_tok):
    cfg = PromptConfig(template="{{prompt}}", shots=[{"user": "What is 1 + 1?", "assistant": "2"}])
    row = {"prompt": [*TRL_ROWS[0]["prompt"], {"role": "assistant", "content": "The answer is"}]}
    assert [m["role"] for m in prompt_messages(cfg, row)] == ["system", "user", "assistant", "user", "assistant"]
    text = render_all(chat_tok, cfg, [row])[0].text
    assert text.endswith("<|im_start|>assistant\nThe answer is")  # continued, as TRL does, no new turn


def test_a_conversation_whose_question_is_a_shot_is_left_out():
    from rlvr.sampling.prompts import drop_shot_rows

    cfg = PromptConfig(shots=[{"user": TRL_ROWS[1]["prompt"][1]["content"], "assistant": TRL_ROWS[1]["solution"]}])
    rows, places = drop_shot_rows(cfg, TRL_ROWS[:3], [0, 1, 2])
    assert places == [0, 2] and rows == [TRL_ROWS[0], TRL_ROWS[2]]


@pytest.mark.parametrize("prompt, rows, message", [
    ({"template": "Solve: {{prompt}}"}, TRL_ROWS,
     "row 1: prompt field {{prompt}}: column 'prompt' holds chat messages, which a template shows only as the whole"),
    ({"template": "{{prompt}}", "chat_template": False}, TRL_ROWS,
     "row 1: column 'prompt' holds chat messages, which are rendered only through the model's chat template"),
    ({"template": "{{prompt}}", "system": "Be brief."}, TRL_ROWS,
     "row 1: column 'prompt' starts with its own system message and prompt.system gives another"),
    (None, [{"prompt": [{"from": "human", "value": f"What is {i} + 1?"}], "solution": str(i + 1)} for i in range(20)],
     "column 'prompt' message 1 has 'from': rlvr reads a message's role and content only"),
])
def test_refused_conversations_are_one_line(tmp_path, prompt, rows, message):
    recipe, registry = trl_recipe(tmp_path, rows, prompt), load_registry()
    resolve(recipe, registry)
    with pytest.raises(RlvrError) as err:
        for n, row in enumerate([*load_rows(registry, recipe.task, "train"), *load_rows(registry, recipe.task, "test")]):
            try:
                check_prompt_row(recipe.prompt, row)
            except RlvrError as exc:
                raise RlvrError(f"row {n + 1}: {exc}") from None
    assert message in str(err.value) and "\n" not in str(err.value)


def test_without_a_template_a_task_lacking_a_prompt_column_is_told_what_to_write(tmp_path):
    (tmp_path / "r.yaml").write_text(json.dumps({"name": "g", "task": "gsm8k", "rewards": {"math": 1.0}}))
    with pytest.raises(RlvrError, match="prompt.template is not given, so the prompt is the task's 'prompt' column"):
        resolve(load_recipe(tmp_path / "r.yaml"), load_registry())


def test_a_tokenizer_without_a_chat_template_refuses_a_conversation(chat_tok):
    import copy

    plain = copy.copy(chat_tok)
    plain.chat_template = None
    with pytest.raises(RlvrError, match="the model's tokenizer has no chat template to render them"):
        render_all(plain, PromptConfig(), TRL_ROWS[:1])


# -- TRL's rewards get the prompts as messages ------------------------------------------------------

from rlvr.host.registry import make_reward_spec  # noqa: E402
from rlvr.rewards.runner import BoundReward, score_batch  # noqa: E402


def test_a_trl_reward_gets_prompts_as_messages_and_an_rlvr_reward_their_text(chat_tok):
    seen = {}

    def trl_style(prompts, completions, **kwargs):  # TRL's convention: keywords
        seen["trl"] = prompts, completions
        return [float(c[0]["content"] == s) for c, s in zip(completions, kwargs["solution"])]

    def rlvr_style(prompts, completions, completion_ids, *, solution):  # rlvr's: positional
        seen["rlvr"] = prompts
        return [float(c == s) for c, s in zip(completions, solution)]

    rows = TRL_ROWS[:2]
    prompts = render_all(chat_tok, PromptConfig(), rows)
    rewards = [BoundReward(make_reward_spec(name, fn, plugin="test", version="0"), 1.0, {}, {}, True)
               for name, fn in (("trl", trl_style), ("rlvr", rlvr_style))]
    assert [r.spec.convention for r in rewards] == ["trl", "rlvr"]
    batch = score_batch(rewards, prompts, ["2", "0"], [[1], [2]], rows)
    assert batch.values["trl"] == batch.values["rlvr"] == [1.0, 0.0]
    assert seen["trl"] == ([r["prompt"] for r in rows], [[{"role": "assistant", "content": t}] for t in ("2", "0")])
    assert seen["rlvr"] == [p.text for p in prompts] and all(isinstance(p, str) for p in seen["rlvr"])
    seen["trl"][0][0].append({"role": "user", "content": "changed by the reward"})
    assert len(prompts[0].messages) == 2  # a reward cannot change the prompt the next step shows


def test_plain_prompts_reach_a_trl_reward_as_text():
    seen = []
    reward = BoundReward(make_reward_spec("t", lambda prompts, completions, **kw: seen.extend(prompts) or [1.0],
                                          plugin="test", version="0"), 1.0, {}, {}, False)
    assert score_batch([reward], ["What is 1 + 2?"], ["3"], [[1]], [{}]).values["t"] == [1.0]
    assert seen == ["What is 1 + 2?"]


SCORE_REWARDS = """
from rlvr import Score


def trl_seen(prompts, completions, **kwargs):
    return [Score(1.0, {"prompt": p, "completion": c}) for p, c in zip(prompts, completions)]


def rlvr_seen(prompts, completions, completion_ids):
    return [Score(1.0, {"prompt": p, "completion": c}) for p, c in zip(prompts, completions)]
"""


def test_rlvr_score_gives_a_records_chat_prompt_as_trl_does(tmp_path, monkeypatch):
    """A record's prompt of chat messages reaches a TRL-convention reward as messages (and its
    completion as the assistant's message, as TRL gives a conversational dataset's), an rlvr one
    as the turns' text; it reached both as its Python repr. A malformed one is one line naming
    the record's file and line."""
    import json

    from click.testing import CliRunner

    from rlvr.cli.main import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "score_seen.py").write_text(SCORE_REWARDS)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]
    records = [{"prompt": chat, "completion": "4"}, {"prompt": "What is 1 + 1?", "completion": "2"}, {"completion": "x"}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def seen(reward):
        out = CliRunner().invoke(cli, ["score", "--reward", f"score_seen:{reward}", "--input", "in.jsonl",
                                       "--output", "out.jsonl"])
        assert out.exit_code == 0, out.output
        return [json.loads(line)["reward_info"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]

    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert seen("trl_seen") == [{"prompt": turns, "completion": [{"role": "assistant", "content": "4"}]},
                                {"prompt": "What is 1 + 1?", "completion": "2"}, {"prompt": "", "completion": "x"}]
    assert [info["prompt"] for info in seen("rlvr_seen")] == ["Be brief.\n\n2+2?", "What is 1 + 1?", ""]
    for bad, problem in (([{"role": "human", "content": "hi"}], "column 'prompt' message 1 has role 'human'"),
                         ({"role": "user", "content": "hi"}, "'prompt' is a dict, not text or a list of chat")):
        (tmp_path / "in.jsonl").write_text(json.dumps(records[1]) + "\n\n" + json.dumps({**records[1], "prompt": bad}))
        out = CliRunner().invoke(cli, ["score", "--reward", "score_seen:trl_seen", "--input", "in.jsonl",
                                       "--output", "out.jsonl"])
        lines = out.output.strip().splitlines()
        assert out.exit_code == 2 and len(lines) == 1 and f"in.jsonl:3: {problem}" in lines[0], out.output


@pytest.mark.parametrize("column", ["messages", "completion"])
def test_trl_s_answer_columns_are_not_prompts(column):
    row = {column: [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]}
    with pytest.raises(RlvrError, match=f"column '{column}' ends with the assistant's answer"):
        check_prompt_row(PromptConfig(template=f"{{{{{column}}}}}"), row)
    row[column] = row[column][:1]  # the turns before the answer are a prompt, whatever the column
    assert prompt_messages(PromptConfig(template=f"{{{{{column}}}}}"), row) == row[column]
