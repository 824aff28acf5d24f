"""Prompt templates: ``{{column}}`` fields over a dataset row; every other character is literal.

The field syntax, and why it is not ``str.format``'s, is ``rlvr.kit.template``'s (a judge's rubric
has it too); :func:`fields` enforces it, so a mistake fails at ``rlvr validate``. Here: a field is
a column of the row, and its value must be text.

A column that holds chat messages (TRL's conversational format: a list of ``{"role", "content"}``
mappings) is a conversation, not text: a template that is exactly that one field (``"{{prompt}}"``)
takes it as the prompt's turns (:func:`conversation_column`, :func:`check_messages`); inside other
text it is refused, as is any list or mapping, which would reach the model as its Python repr.
"""

from __future__ import annotations

from typing import Any, Mapping

from rlvr import RlvrError
from rlvr.kit.template import FIELD, FIELD_HELP, FIELD_NAME, fields, fill

__all__ = ["fields", "render", "FIELD_HELP", "ROLES", "check_messages", "messages", "conversation_column",
           "row_conversation", "prompt_messages", "prompt_text", "check_prompt_row"]


def render(text: str, row: Mapping[str, Any]) -> str:
    """``text`` with each ``{{column}}`` replaced by ``str(row[column])``, in one pass; a list or
    mapping value is refused (its Python repr is no prompt)."""

    def value(name: str) -> str:
        try:
            value = row[name]
        except KeyError:
            raise RlvrError(f"prompt field {{{{{name}}}}}: the row has no column {name!r}") from None
        if isinstance(value, (list, tuple, Mapping)):
            raise RlvrError(_not_text(name, value))
        return str(value)

    return fill(text, value)


ROLES = ("system", "user", "assistant", "tool")


def _not_text(column: str, value: Any) -> str:
    if isinstance(value, (list, tuple)) and any(isinstance(m, Mapping) for m in value):
        return (f"prompt field {{{{{column}}}}}: column {column!r} holds chat messages, which a template shows only "
                f"as the whole prompt: write template: \"{{{{{column}}}}}\" (its turns, through the chat template)")
    return (f"prompt field {{{{{column}}}}}: column {column!r} is a {type(value).__name__}, not text: it would reach "
            f"the model as its Python repr (give the task a text column for it)")


def _content(content: Any) -> str | None:
    """A message's text: a string, or TRL's list of ``{"type": "text", "text": ...}`` parts joined
    by newlines (as vLLM joins them); None when it is neither."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)) and all(isinstance(p, Mapping) and p.get("type") == "text"
                                                  and isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    return None


def _check(value: Any) -> tuple[list[dict] | None, str | None]:
    """(the messages with text content, None) or (None, what is wrong with them)."""
    if not isinstance(value, (list, tuple)):
        return None, f"is a {type(value).__name__}, not a list of messages"
    if not value:
        return None, "is an empty list of messages"
    out = []
    for i, message in enumerate(value, 1):
        if not isinstance(message, Mapping):
            return None, f"message {i} is a {type(message).__name__}, not {{\"role\": ..., \"content\": ...}}"
        extra = sorted(set(map(str, message)) - {"role", "content"})
        if extra:
            return None, f"message {i} has {extra[0]!r}: rlvr reads a message's role and content only"
        role = message.get("role")
        if role not in ROLES:
            return None, f"message {i} has role {role!r}, not one of {', '.join(ROLES)}"
        text = _content(message.get("content"))
        if text is None:
            parts = message.get("content")
            kinds = {p.get("type") for p in parts if isinstance(p, Mapping)} - {"text"} \
                if isinstance(parts, (list, tuple)) else set()
            why = f"a {sorted(map(str, kinds))[0]!r} part (rlvr trains on text only)" if kinds else \
                f"content {type(parts).__name__}, not a string or a list of {{\"type\": \"text\", \"text\": ...}} parts"
            return None, f"message {i} ({role}) has {why}"
        out.append({"role": role, "content": text})
    if out[-1]["role"] == "system":
        return None, "ends with a system message: a prompt ends with a user or tool turn (or an assistant turn to continue)"
    return out, None


def check_messages(value: Any) -> str | None:
    """What is wrong with a column value used as a conversation prompt, or None when it is one:
    a non-empty list of ``{"role", "content"}`` mappings, role one of :data:`ROLES`, content a
    string or a list of ``{"type": "text", "text": ...}`` parts, last role not system (as TRL:
    user or tool ends with the generation prompt, assistant is continued). The reason reads after
    the column's name: ``f"column 'prompt' {reason}"``."""
    return _check(value)[1]


def messages(value: Any, column: str = "prompt") -> list[dict]:
    """A conversation column's value as messages with string content (text parts joined);
    ``RlvrError`` naming ``column`` when :func:`check_messages` refuses it."""
    out, problem = _check(value)
    if problem:
        raise RlvrError(f"column {column!r} {problem}")
    return out


def conversation_column(text: str) -> str | None:
    """The column a template takes whole (``"{{prompt}}"``, blanks around it aside), or None: such a
    template over a column of chat messages is that conversation."""
    m = FIELD.fullmatch(text.strip())
    name = FIELD_NAME.fullmatch(m.group(1)) if m else None
    return name.group(1) if name else None


# TRL's columns that hold an answer, not a prompt: a prompt-completion dataset's completion, a
# preference dataset's chosen and rejected, and a language-modeling dataset's whole conversation
# (its answer last).
ANSWER_COLUMNS = ("completion", "chosen", "rejected", "messages")


def row_conversation(template: str, row: Mapping[str, Any]) -> list[dict] | None:
    """The row's chat messages when ``template`` takes a column whole and the row holds a list
    there (checked: ``RlvrError`` naming the column), else None (the template is text). One of
    TRL's answer columns (:data:`ANSWER_COLUMNS`) ending with the assistant's turn is refused: as
    a prompt it would be continued, its answer shown."""
    column = conversation_column(template)
    if column is None or not isinstance(row.get(column), (list, tuple)):
        return None
    turns = messages(row[column], column)
    if column in ANSWER_COLUMNS and turns[-1]["role"] == "assistant":
        raise RlvrError(f"column {column!r} ends with the assistant's answer (TRL's {column!r} column), which the "
                        "model would be shown and asked to continue: the prompt is the turns before the answer, "
                        "in a 'prompt' column, and the answer a column a reward reads")
    return turns


def prompt_messages(prompt, row: Mapping[str, Any]) -> list[dict]:
    """The conversation a row's prompt is, for the chat template: ``prompt.system``, then the
    worked examples (``prompt.shots``) as earlier turns, then the rendered template as the user
    turn, or the row's own messages when the template is one column of them (its own system
    message first, where ``prompt.system`` would be: giving both is refused)."""
    system = [{"role": "system", "content": render(prompt.system, row)}] if prompt.system else []
    shots = [turn for shot in prompt.shots for turn in ({"role": "user", "content": shot.user},
                                                        {"role": "assistant", "content": shot.assistant})]
    turns = row_conversation(prompt.template, row)
    if turns is None:
        return system + shots + [{"role": "user", "content": render(prompt.template, row)}]
    if turns[0]["role"] == "system":
        if system:
            raise RlvrError(f"column {conversation_column(prompt.template)!r} starts with its own system message and "
                            "prompt.system gives another: drop prompt.system (or the rows' system messages)")
        system, turns = turns[:1], turns[1:]
    return system + shots + turns


def prompt_text(prompt, row: Mapping[str, Any]) -> str:
    """A row's prompt without a chat template: the system text, each worked example as
    "user\n\nassistant\n\n", then the rendered template. A column of chat messages has no plain
    form here (it would need a format rlvr invents): refused."""
    column = conversation_column(prompt.template)
    if column is not None and isinstance(row.get(column), (list, tuple)):
        raise RlvrError(f"column {column!r} holds chat messages, which are rendered only through the model's chat "
                        "template: set prompt.chat_template: true, with a model whose tokenizer has one")
    system = render(prompt.system, row) if prompt.system else None
    return ((system + "\n\n" if system else "") + "".join(f"{s.user}\n\n{s.assistant}\n\n" for s in prompt.shots)
            + render(prompt.template, row))


def check_prompt_row(prompt, row: Mapping[str, Any]) -> None:
    """Everything about a row's prompt that can be checked without the tokenizer (fields, chat
    messages, ``prompt.system`` against the row's own): ``RlvrError`` when it cannot be rendered."""
    prompt_messages(prompt, row) if prompt.chat_template else prompt_text(prompt, row)
