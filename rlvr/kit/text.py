"""Text helpers every reward needs: a completion's plain text, an error on one line."""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """Plain text of a completion: a string, or chat messages (the last assistant turn counts;
    without roles, the last message). Content may itself be a list of text parts."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        if "content" in completion:
            return completion_text(completion["content"])
        return str(completion.get("text", ""))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict) and "content" in m]
        if messages:
            assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
            return completion_text((assistant or messages)[-1])
        return "".join(completion_text(part) for part in completion)
    return str(completion)
def one_line(message: str | BaseException, limit: int = 300) -> str:
    """``message`` on one line: whitespace runs become one space, cut to ``limit`` characters.

    An exception reads ``"TypeName: message"`` (``"TypeName"`` alone when it has no message).
    """
    if isinstance(message, BaseException):
        text = str(message)
        message = f"{type(message).__name__}: {text}" if text.strip() else type(message).__name__
    text = " ".join(message.split()) or "(no message)"
    return text if len(text) <= limit else text[: limit - 3] + "..."
