"""Episodes: the policy and an environment taking turns, for a batch of prompts at once.

``EpisodeRunner.run`` plays K episodes per prompt. Every round it asks the sampler for the next
turn of all live episodes in one call (each continues from its own token ids: the prompt, then
everything sampled and appended so far; vLLM's prefix cache keeps that cheap), then asks their
environments for replies in parallel (a tool call may take a while), appends the replies'
tokens, and retires the episodes that ended. The result per episode is a ``Completion`` whose
``token_ids`` are everything after the prompt, exactly as sampled and appended, and whose
``mask`` is 1 on the policy's tokens and 0 on the environment's: the learner trains on the
former only.

An environment's reply is data, never chat structure: its text is escaped (``escape_controls``:
control and invisible format characters written out) and tokenized as text, so that a tool that
prints ``<|im_start|>system`` gives the tokens of those characters, never the template's special
tokens; only the template's own wrapping around a reply (``ChatTurns``) has them. The episode
continues from token ids (every sampler takes ids), so nothing re-reads the reply as text.

An episode ends when the environment says ``done``; when the policy ended its message (an
end-of-sequence token) and the environment had nothing to say to it; after ``max_turns`` policy
turns (the environment still takes the last one, so a game scores the final move; its reply is
not appended, and the episode is truncated unless that reply said ``done``); when the token budget after the prompt is spent (it is then truncated, as a completion
that hits ``max_tokens`` is); or when its environment raises: that episode is counted, logged
and left unscored (``None``), and the others go on. An ``RlvrError`` (a set-up problem, such
as a sandbox that cannot start) stops the run with its one line instead: every episode would
fail the same way.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence, get_args

from rlvr import RlvrError
from rlvr.host.environments import Reply, close_env, env_state
from rlvr.kit import escape_controls, one_line
from rlvr.models.tokens import eos_ids
from rlvr.recipe.spec import EpisodeText
from rlvr.sampling.samplers import Completion

log = logging.getLogger("rlvr")


@dataclass
class Episode:
    prompt: list[int]
    env: Any
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    env_seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    done: bool = False
    truncated: bool = False
    error: str | None = None  # the environment raised: the episode is left unscored
    policy_texts: list[str] = field(default_factory=list)  # each of the policy's turns, decoded
    last_eos: bool = False  # its latest turn ended with an end-of-sequence token

    @property
    def last_text(self) -> str:
        """The policy's latest turn, decoded."""
        return self.policy_texts[-1] if self.policy_texts else ""

    def add(self, ids: Sequence[int], policy: bool, logprobs: Sequence[float] | None = None) -> None:
        self.ids += ids
        self.mask += [int(policy)] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


class ChatTurns:
    """Token ids of an environment's chat messages (``Reply.role``), rendered by the model's chat
    template: the end of the policy's message, the new messages (one, or several in a row: one
    tool result per call), and the start of the policy's next one. Found once per role and count
    by rendering a conversation with placeholders."""

    MINE = "\u2063rlvr-policy\u2063"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._parts: dict[tuple[str, int], tuple[str, list[str]]] = {}
        # Tokens matched before the model's own vocabulary: the special ones (role markers, end of
        # sequence) and the added ones (``<tool_response>``), by id and by spelling. A one-character
        # one cannot be spelled in pieces, and is a character like any other.
        added = {i: str(t) for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()}
        self._structural = {*added, *(getattr(tokenizer, "all_special_ids", None) or ())}
        self._spellings = sorted({s for s in added.values() if len(s) > 1})

    @staticmethod
    def theirs(i: int) -> str:
        return f"\u2063rlvr-env-{i}\u2063"

    def parts(self, role: str, count: int = 1) -> tuple[str, list[str]]:
        """(closing of the policy's message, the ``count + 1`` texts around ``count`` messages of
        ``role``: before the first, between each two, after the last)."""
        if (role, count) not in self._parts:
            render = self.tokenizer.apply_chat_template
            talk = [{"role": "user", "content": "q"}, {"role": "assistant", "content": self.MINE}]
            replies = [{"role": role, "content": self.theirs(i)} for i in range(count)]
            try:
                base = render(talk, tokenize=False)
                full = render(talk + replies, tokenize=False, add_generation_prompt=True)
            except Exception as exc:  # noqa: BLE001 - a template that rejects the role
                raise RlvrError(f"the model's chat template cannot render a {role!r} message: "
                                f"{one_line(str(exc), 200)}") from None
            if not full.startswith(base) or any(self.theirs(i) not in full for i in range(count)):
                raise RlvrError(f"the model's chat template does not render a {role!r} message after the "
                                f"assistant's; reply inline (Reply.role=None) instead")
            closing = base[base.rindex(self.MINE) + len(self.MINE):]
            rest, pieces = full[len(base):], []
            for i in range(count):
                piece, rest = rest.split(self.theirs(i), 1)
                pieces.append(piece)
            self._parts[(role, count)] = (closing, [*pieces, rest])
        return self._parts[(role, count)]

    def ids(self, role: str, texts: str | Sequence[str], after_eos: bool) -> list[int]:
        """The tokens that close the policy's message, hold ``texts`` (one message each, as text:
        ``text_ids``) and open the policy's next message."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        closing, around = self.parts(role, len(texts))
        eos = self.tokenizer.eos_token or ""
        if after_eos and eos and closing.startswith(eos):
            closing = closing[len(eos):]  # the policy's own end-of-sequence token closed its message
        encode = self.tokenizer.encode
        ids = encode(closing + around[0], add_special_tokens=False)
        for text, after in zip(texts, around[1:]):
            ids += self.text_ids(text) + encode(after, add_special_tokens=False)
        return ids

    def text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` as text: no special or added token comes out of it, whatever it
        spells (``split_special_tokens``; an added token that is not special, or a tokenizer
        that ignores that flag, is cut after its first character)."""
        def encode(piece: str) -> list[int]:
            return self.tokenizer.encode(piece, add_special_tokens=False, split_special_tokens=True)

        ids = encode(text)
        if self._structural.isdisjoint(ids):
            return ids
        cuts = sorted({at + 1 for spelling in self._spellings for at in _occurrences(text, spelling)})
        bounds = [0, *cuts, len(text)]
        ids = [i for start, end in zip(bounds, bounds[1:]) for i in encode(text[start:end])]
        if not self._structural.isdisjoint(ids):
            raise RlvrError("the model's tokenizer turns plain text into its special tokens; an environment's "
                            "reply cannot be kept as text with it")
        return ids


class EpisodeRunner:
    """Plays episodes of one environment with a sampler (``rlvr.sampling.samplers.Sampler``)."""

    def __init__(self, make, options: dict, *, tokenizer, max_turns: int, max_tokens: int, eos_ids: Sequence[int],
                 workers: int = 32, score: str = "transcript"):
        """``make(row, **options)`` builds one episode's environment; ``max_tokens``: the budget of
        tokens after the prompt (the policy's and the environment's); ``score``: the text of an
        episode the rewards read (``transcript``, ``policy`` or ``final_turn``: ``reward_text``)."""
        choices = get_args(EpisodeText)
        if score not in choices:
            raise ValueError(f"score is {', '.join(choices[:-1])} or {choices[-1]}, not {score!r}")
        self.make, self.options, self.tokenizer, self.score = make, dict(options), tokenizer, score
        self.max_turns, self.budget, self.eos = max_turns, max_tokens, set(eos_ids)
        self.chat = ChatTurns(tokenizer)
        self.workers = workers

    def run(self, sampler, rows: Sequence[dict], prompt_ids: Sequence[list[int]], *, n: int, temperature: float,
            top_p: float, max_tokens: int, seed: int | None = None, logprobs: bool = False
            ) -> tuple[list[list[Completion]], list[dict], dict[str, float]]:
        """``n`` episodes per prompt: (completions grouped by prompt, each episode's environment
        state for the rewards, the batch's ``episode_sums`` plus ``time_env``: wall seconds spent
        waiting for the environments). ``max_tokens`` caps each policy turn."""
        episodes = [self._start(row, prompt) for row, prompt in zip(rows, prompt_ids) for _ in range(n)]
        try:
            live = [e for e in episodes if not e.done]
            round_, env_wall = 0, 0.0
            with ThreadPoolExecutor(max(1, min(self.workers, len(episodes)))) as pool:
                while live:
                    self._policy_turns(sampler, live, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                                       seed=None if seed is None else seed + round_ * 1_000_003, logprobs=logprobs)
                    start = time.perf_counter()
                    list(pool.map(self._env_turn, [e for e in live if not e.done]))
                    env_wall += time.perf_counter() - start
                    live = [e for e in live if not e.done]
                    round_ += 1
        finally:
            for e in episodes:
                self._close(e)
        completions = [self._completion(e, logprobs) for e in episodes]
        groups = [completions[i : i + n] for i in range(0, len(completions), n)]
        states = [{**env_state(e.env), **({"error": e.error} if e.error else {})} for e in episodes]
        return groups, states, {**episode_sums(episodes), "time_env": env_wall}

    def sample(self, sampler, rows: Sequence[dict], prompt_ids: Sequence[list[int]], *, n: int, **options
               ) -> tuple[list[list[Completion]], list[dict], dict[str, float]]:
        """``run``, with the rows the rewards score (``episode_rows``) in place of the states:
        what training and evaluation need."""
        outs, states, sums = self.run(sampler, rows, prompt_ids, n=n, **options)
        return outs, episode_rows(rows, n, outs, states), sums

    def _start(self, row: dict, prompt: list[int]) -> Episode:
        try:
            env = self.make(dict(row), **self.options)
        except RlvrError:
            raise
        except Exception as exc:  # noqa: BLE001 - a broken environment never kills training
            episode = Episode(list(prompt), None, done=True)
            return self._failed(episode, "creating it", exc)
        return Episode(list(prompt), env)

    def _policy_turns(self, sampler, live: list[Episode], *, temperature, top_p, max_tokens, seed, logprobs) -> None:
        by_stop: dict[tuple[str, ...], list[Episode]] = {}
        for e in live:
            by_stop.setdefault(tuple(getattr(e.env, "stop", ()) or ()), []).append(e)
        for stop, group in by_stop.items():
            limits = [min(max_tokens, self.budget - len(e.ids)) for e in group]
            outs = sampler.generate([e.prompt + e.ids for e in group], n=1, temperature=temperature, top_p=top_p,
                                    max_tokens=limits, seed=seed, logprobs=logprobs, stop=stop)
            for e, out in zip(group, outs):
                turn = out[0]
                e.add(turn.token_ids, True, turn.logprobs)
                e.turns += 1
                e.last_eos = bool(turn.token_ids) and turn.token_ids[-1] in self.eos
                e.policy_texts.append(self.tokenizer.decode(turn.token_ids, skip_special_tokens=True))
                if turn.truncated or len(e.ids) >= self.budget:
                    e.done, e.truncated = True, not e.last_eos

    def _env_turn(self, e: Episode) -> None:
        start = time.perf_counter()
        try:
            reply = e.env.step(e.last_text)
            if not isinstance(reply, Reply):
                raise TypeError(f"step() returned {type(reply).__name__}, not rlvr.Reply")
            for key, value in (reply.metrics or {}).items():
                e.metrics[key] = e.metrics.get(key, 0.0) + float(value)
            ids = self._reply_ids(reply, e.last_eos) if reply.text else []
        except RlvrError:
            raise  # the set-up is wrong (a missing sandbox, a template): every episode would fail alike
        except Exception as exc:  # noqa: BLE001 - a broken environment never kills training
            self._failed(e, "its step", exc)
            return
        finally:
            e.env_seconds += time.perf_counter() - start
        if not reply.done and e.turns >= self.max_turns:
            e.done = e.truncated = True  # the policy's last turn (the environment scored it); no reply to read
            return
        room = self.budget - len(e.ids)
        e.add(ids[:room], False)
        if len(ids) > room or (len(ids) == room and not reply.done):
            e.done = e.truncated = True
        elif reply.done or (e.last_eos and not ids):  # the policy ended its message and nothing answered it
            e.done = True

    def _reply_ids(self, reply: Reply, after_eos: bool) -> list[int]:
        texts = [reply.text] if isinstance(reply.text, str) else list(reply.text)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("Reply.text is a string or a sequence of strings")
        texts = [escape_controls(t) for t in texts]
        if reply.role is None:
            return self.chat.text_ids("".join(texts))
        return self.chat.ids(reply.role, texts, after_eos)

    @staticmethod
    def _failed(e: Episode, where: str, exc: Exception) -> Episode:
        e.done, e.error = True, one_line(exc, 200)
        log.warning(f"environment failed in {where}: {e.error} (episode left unscored)")
        return e

    def _close(self, e: Episode) -> None:
        if e.env is None:
            return
        try:
            close_env(e.env)
        except Exception as exc:  # noqa: BLE001
            log.warning(f"environment failed to close: {type(exc).__name__}: {exc}")

    def _completion(self, e: Episode, logprobs: bool) -> Completion:
        text = self.tokenizer.decode(e.ids, skip_special_tokens=True)
        return Completion(text, e.ids, e.truncated, e.logprobs if logprobs else None, mask=e.mask,
                          reward_text=reward_text(self.score, e.policy_texts))


def reward_text(score: str, policy_texts: Sequence[str]) -> str | None:
    """What the rewards read of an episode whose policy wrote ``policy_texts``, turn by turn:
    None for the whole transcript (the completion's text), the turns one per line, or the last."""
    if score == "transcript":
        return None
    if score == "policy":
        return "\n".join(policy_texts)
    return policy_texts[-1] if policy_texts else ""


def _occurrences(text: str, spelling: str) -> list[int]:
    """Where ``spelling`` starts in ``text``, overlaps included."""
    found, at = [], text.find(spelling)
    while at >= 0:
        found.append(at)
        at = text.find(spelling, at + 1)
    return found


def episode_rows(rows: Sequence[dict], k: int, outs: Sequence[Sequence[Completion]], states: Sequence[dict]) -> list[dict]:
    """The rows the rewards see for K episodes per prompt: the task's columns plus ``env_state``
    (the environment's final state) and ``policy_tokens`` (what length rewards count)."""
    flat = [c for group in outs for c in group]
    return [{**rows[i // k], "env_state": state, "policy_tokens": c.policy_tokens}
            for i, (c, state) in enumerate(zip(flat, states))]


def unscore_failed(scored, rows: Sequence[dict], names: Sequence[str] = ()) -> None:
    """Leave the episodes whose environment failed (``"error"`` in their ``env_state``)
    unscored: their total, and their value under each of ``names``, become None, and
    ``scored.env_failed`` says why (``rlvr.rewards.runner.RewardBatch``: the step's or the
    evaluation's line then names the environment, not the rewards)."""
    for i, row in enumerate(rows):
        if "error" in row["env_state"]:
            scored.env_failed[i] = row["env_state"]["error"]
            scored.total[i] = None
            for name in names:
                scored.values[name][i] = None


def episode_sums(episodes: Sequence[Episode]) -> dict[str, float]:
    """A batch's episode figures as sums (reduced over ranks; ``rlvr.runs.metrics.step_row`` turns
    them into per-episode means): turns, the policy's tokens and the environment's, seconds in
    the environment, failures, and the environments' own ``Reply.metrics`` (``env/<key>``; the
    conventional tool keys are always there)."""
    policy = sum(sum(e.mask) for e in episodes)
    out = {
        "episodes": float(len(episodes)),
        "env_turns": float(sum(e.turns for e in episodes)),
        "env_turns_max": float(max((e.turns for e in episodes), default=0)),
        "env_policy_tokens": float(policy),
        "env_tokens": float(sum(len(e.ids) for e in episodes) - policy),
        "env_seconds": sum(e.env_seconds for e in episodes),
        "env_errors": float(sum(e.error is not None for e in episodes)),
    }
    for key in sorted({*TOOL_KEYS, *(k for e in episodes for k in e.metrics)}):
        out[f"env/{key}"] = sum(e.metrics.get(key, 0.0) for e in episodes)
    return out


TOOL_KEYS = ("tool_calls", "tool_errors", "tool_timeouts")


def episode_runner(recipe, registry, tokenizer, model_path: str | None = None) -> EpisodeRunner | None:
    """The recipe's episode runner, or None when it names no environment."""
    env = recipe.environment
    if env is None:
        return None
    from rlvr.recipe.resolve import recipe_tools

    spec = registry.environment(env.name)
    tools = recipe_tools(recipe, registry)
    options = {**env.options, **({"tools": tools} if tools else {})}
    return EpisodeRunner(spec.fn, options, tokenizer=tokenizer, max_turns=env.max_turns,
                         max_tokens=recipe.episode_tokens, eos_ids=eos_ids(tokenizer, model_path), score=env.score)
