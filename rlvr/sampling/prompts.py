"""Prompts: a recipe's prompt rendered over dataset rows, once each, and the padding every batch
of token ids shares (the trainer's forward pass, the transformers sampler).

A rendered prompt keeps its token ids (what the sampler and the trainer see) and its text (what
rewards see), so a prompt sampled K times is tokenized and decoded once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from rlvr import RlvrError
from rlvr.kit.tools import tools_prompt
from rlvr.recipe.template import conversation_column, prompt_messages, prompt_text, render, row_conversation

if TYPE_CHECKING:
    from rlvr.sampling.samplers import Completion


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    text: str
    # The conversation rendered through the chat template (TRL's rewards get it as their prompt,
    # as TRL gives a conversational dataset's); None when the prompt is plain text.
    messages: list[dict] | None = None
    # prompt.response_prefix: the start of the answer, prefilled (the last tokens of ``ids``)
    prefix: str = ""


def render_prompt(tokenizer, prompt_cfg, row: dict, tools: Sequence[dict] = ()) -> list[int]:
    """Prompt token ids: ``{{column}}`` fields of ``system`` and ``template`` filled from the row,
    after the recipe's worked examples (``shots``) as earlier turns, then wrapped in the
    tokenizer's chat template (unless the recipe turns it off); a template that is one column of
    chat messages is that conversation (``rlvr.recipe.template.prompt_messages``). ``tools``: the
    JSON schemas of the tools the model may call (``with_tools``)."""
    return _render(tokenizer, prompt_cfg, row, tools)[0] + prefix_ids(tokenizer, prompt_cfg)


def _render(tokenizer, prompt_cfg, row: dict, tools: Sequence[dict] = (), native: bool | None = None
            ) -> tuple[list[int], list[dict] | None]:
    """(token ids up to the answer's start, the messages rendered or None for plain text)."""
    if not prompt_cfg.chat_template or tokenizer.chat_template is None:
        if prompt_cfg.chat_template and row_conversation(prompt_cfg.template, row) is not None:
            raise RlvrError(f"column {conversation_column(prompt_cfg.template)!r} holds chat messages, but the "
                            "model's tokenizer has no chat template to render them: use a model that has one")
        text = prompt_text(prompt_cfg, row)
        if tools:
            text = f"{tools_prompt(tools)}\n\n{text}"
        return tokenizer(text, add_special_tokens=True)["input_ids"], None
    messages = prompt_messages(prompt_cfg, row)
    extra = {}
    if tools:
        if native is None:
            native = template_renders_tools(tokenizer)
        if native:
            extra["tools"] = list(tools)
        else:
            messages = with_tools(messages, tools)
    # As TRL: a prompt ending with the assistant's turn is continued, any other gets the generation prompt.
    go_on = messages[-1]["role"] == "assistant"
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=not go_on, continue_final_message=go_on,
                                        tokenize=True, **extra)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids), messages


_PROBE = {"type": "function", "function": {"name": "rlvr_probe_7f3a", "description": "probe",
                                           "parameters": {"type": "object", "properties": {}}}}


def template_renders_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template shows ``tools=`` (Qwen2.5's does, SmolLM2's ignores
    them): a conversation rendered with a probe tool must name it."""
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}], tools=[_PROBE], tokenize=False,
                                             add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that rejects tools= does not render them
        return False
    return isinstance(text, str) and "rlvr_probe_7f3a" in text


def with_tools(messages: list[dict], tools: Sequence[dict]) -> list[dict]:
    """The fallback for a template that ignores ``tools=``: the tools and how to call them
    (``rlvr.kit.tools.tools_prompt``) at the end of the system message, or as one (the
    template's default system message, if it has one, is then replaced)."""
    block = tools_prompt(tools)
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{block}"}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def prefix_ids(tokenizer, prompt_cfg) -> list[int]:
    """The tokens of ``prompt.response_prefix``, put after the prompt (none when it is empty)."""
    prefix = prompt_cfg.response_prefix
    return tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []


def with_prefix(groups: Sequence[Sequence[Completion]], prompts: Sequence[Prompt]) -> list[list[Completion]]:
    """Each prompt's completions as answers: its ``prefix`` (prefilled, so never sampled) before
    each text, for rewards, samples and logs; token ids stay the sampled ones."""
    return [[replace(c, text=p.prefix + c.text) for c in group] if p.prefix else list(group)
            for group, p in zip(groups, prompts)]


def render_all(tokenizer, prompt_cfg, rows: Sequence[dict], tools: Sequence[dict] = ()) -> list[Prompt]:
    """Every row's prompt, ids, text and messages, rendered once (the response prefix's tokens
    once for all); ``tools``: the schemas of the tools the model may call."""
    out, tail = [], prefix_ids(tokenizer, prompt_cfg)
    native = template_renders_tools(tokenizer) if tools and tokenizer.chat_template is not None else None
    for row in rows:
        ids, messages = _render(tokenizer, prompt_cfg, row, tools, native)
        ids = ids + tail
        out.append(Prompt(ids, tokenizer.decode(ids, skip_special_tokens=False), messages, prompt_cfg.response_prefix))
    return out


@dataclass(frozen=True)
class PromptSet:
    """Rows whose prompts fit the recipe's ``data.max_prompt_tokens``, with their prompts."""

    rows: list[dict]
    prompts: list[Prompt]
    dropped: int  # rows left out for a prompt longer than the limit
    positions: list[int] | None = None  # each row's place in its split, as the task yields it (None: 0, 1, ...)

    def position(self, i: int) -> int:
        return i if self.positions is None else self.positions[i]

    @property
    def longest(self) -> int:
        return max((len(p.ids) for p in self.prompts), default=0)


def fit_prompts(rows: Sequence[dict], prompts: Sequence[Prompt], max_tokens: int | None, on_overlong: str,
                where: str, positions: Sequence[int] | None = None) -> PromptSet:
    """Keep the rows whose prompt has at most ``max_tokens`` tokens (None: all).

    ``on_overlong="drop"`` leaves the others out and counts them; ``"error"`` refuses the first
    one with a one-line error naming it. ``positions``: the rows' places in their split (None:
    0, 1, ...).
    """
    positions = list(range(len(rows))) if positions is None else list(positions)
    if max_tokens is None:
        return PromptSet(list(rows), list(prompts), 0, positions)
    kept_rows, kept, kept_positions = [], [], []
    for i, (row, prompt) in enumerate(zip(rows, prompts)):
        if len(prompt.ids) <= max_tokens:
            kept_rows.append(row)
            kept.append(prompt)
            kept_positions.append(positions[i])
        elif on_overlong == "error":
            name = row.get("id") or row.get("task_id") or f"row {i + 1}"
            raise RlvrError(f"{where}: {name} has a prompt of {len(prompt.ids)} tokens, over data.max_prompt_tokens "
                            f"{max_tokens}: raise it, or set data.overlong_prompts: drop")
    if not kept:
        raise RlvrError(f"{where}: every prompt is longer than data.max_prompt_tokens {max_tokens}")
    return PromptSet(kept_rows, kept, len(rows) - len(kept), kept_positions)


def _words(text: str) -> str:
    return " ".join(text.split())


def _question(prompt_cfg, row: dict) -> str:
    """The row's question: the rendered template, or a conversation's last user turn."""
    turns = row_conversation(prompt_cfg.template, row)
    if turns is None:
        return render(prompt_cfg.template, row)
    return next((m["content"] for m in reversed(turns) if m["role"] == "user"), "")


def drop_shot_rows(prompt_cfg, rows: Sequence[dict], positions: Sequence[int]) -> tuple[list[dict], list[int]]:
    """The rows (and their places) whose question is not one of the recipe's worked examples
    (``prompt.shots``): a shot's question, trained on or evaluated, carries its own answer in the
    prompt, and RL learns to copy it. Questions are compared as rendered, whitespace aside."""
    shown = {_words(shot.user) for shot in prompt_cfg.shots}
    if not shown:
        return list(rows), list(positions)
    keep = [i for i, row in enumerate(rows) if _words(_question(prompt_cfg, row)) not in shown]
    return [rows[i] for i in keep], [positions[i] for i in keep]


def load_prompt_set(recipe, registry, tokenizer, *, split: str) -> PromptSet:
    """The train (``split="train"``) or evaluation rows of a recipe with their rendered prompts,
    after ``data.pool_file`` (train rows only) and ``data.max_prompt_tokens``."""
    from rlvr.recipe.pool_file import select_rows
    from rlvr.recipe.resolve import load_rows, recipe_tools

    if split == "train":
        ref, name, prompt, limit = recipe.task, recipe.data.train_split, recipe.prompt, recipe.data.train_limit
    else:
        ref, name, prompt, limit = recipe.eval_task, recipe.eval_split, recipe.eval_prompt, recipe.eval.limit
    rows = load_rows(registry, ref, name, limit)
    positions = None
    if split == "train" and recipe.data.pool_file is not None:
        positions = select_rows(recipe, rows)
        logging.getLogger("rlvr.sampling.prompts").info(
            f"data.pool_file: training on {len(positions)} of {len(rows)} prompts ({recipe.data.pool_file})")
        rows = [rows[i] for i in positions]
    kept, positions = drop_shot_rows(prompt, rows, range(len(rows)) if positions is None else positions)
    if len(kept) < len(rows):
        logging.getLogger("rlvr.sampling.prompts").info(
            f"{split}: left out {len(rows) - len(kept)} of {len(rows)} prompts whose question is one of "
            "prompt.shots (its answer is in the prompt)")
        if not kept:
            raise RlvrError(f"task {ref.name!r} split {name!r}: every prompt is one of prompt.shots")
    rows = kept
    tools = [t.schema for t in recipe_tools(recipe, registry)]
    return fit_prompts(rows, render_all(tokenizer, prompt, rows, tools), recipe.data.max_prompt_tokens,
                       recipe.data.overlong_prompts, f"task {ref.name!r} split {name!r}", positions)


def check_prompt_lengths(recipe, registry) -> list[str]:
    """``rlvr validate --data`` under ``data.max_prompt_tokens``: render every train and eval
    prompt with the model's tokenizer; refuse (``overlong_prompts: error``) or report drops."""
    from transformers import AutoTokenizer

    from rlvr.models.hub import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(recipe.model.name, pull=False))
    notes = []
    for split in ("train", "eval"):
        kept = load_prompt_set(recipe, registry, tokenizer, split=split)
        notes.append(f"{split}: longest prompt {kept.longest} tokens, {kept.dropped} of "
                     f"{kept.dropped + len(kept.rows)} over data.max_prompt_tokens dropped")
    return notes
