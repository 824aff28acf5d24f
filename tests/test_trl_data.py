"""TRL's conversational data as TRL takes it: a column of chat messages is the prompt's turns,
rendered through the chat template, never its Python repr; TRL rewards get the prompts as
messages."""

from __future__ import annotations

import pytest

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
