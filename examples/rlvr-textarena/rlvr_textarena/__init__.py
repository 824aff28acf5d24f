"""TextArena's single-player games as rlvr multi-turn environments, and a task that deals them.

A task and an environment, both named ``textarena``::

    task:
      name: textarena
      options: {env_id: GuessTheNumber-v0, size: 1000}
    prompt:
      template: "{{question}}"          # the game's opening message
    environment: {name: textarena, max_turns: 12, max_tokens: 1024}
    rewards:
      environment: 1.0                  # the game's own reward for player 0

Each task row names a game (``env_id``) and the seed that deals it; ``question`` is what the
player sees once the game is dealt. Each episode deals that game again from the seed, passes
every policy turn to ``env.step`` as the player's move, and answers with the game's new
messages as a user chat message, until the game is over. The state's ``reward`` is TextArena's
reward for the player (see ``textarena_environment``).

Why not TextArena's own observation wrappers: they render the whole history of the game at
every turn, for agents that see one message at a time; an episode's chat already holds the
history, so each reply here carries only the messages that are new since the player's last
move (the player's own move, echoed by the game, left out). The env id's action wrappers
(e.g. ``ActionFormattingWrapper``, which brackets a move that has no brackets) are kept: moves
go through the wrapped env's ``step`` exactly as in TextArena.

TextArena's games seed and draw from Python's process-wide ``random``. Every call into a game
here runs with that game's own saved ``random`` state swapped in, under one lock, so a game
plays the same whatever other episodes or the trainer draw meanwhile, and the trainer's own
``random`` stream is left as it was.

textarena is imported only when a game is dealt, never when rlvr lists plugins.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import numbers
import random
import re
import threading
from typing import Annotated, Any, Iterator, Literal

from annotated_types import Ge

from rlvr import Reply, RlvrError, hookimpl

__all__ = [
    "TESTED",
    "Game",
    "TextArenaEnvironment",
    "textarena_task",
    "textarena_environment",
    "rlvr_register_tasks",
    "rlvr_register_environments",
]

NAME = "textarena"
SPLITS = ("train", "test")
# Single-player games this package's tests play offline with textarena 0.7.4 (README: "Which games").
TESTED = (
    "GuessTheNumber-v0",
    "Mastermind-v0",
    "TowerOfHanoi-v0",
    "Minesweeper-v0-small",
    "Sudoku-v0-very-easy",
    "FifteenPuzzle-v0",
    "GuessTheNumber-v0-hardcore",
    "LightsOut-v0",
    "FrozenLake-v0",
    "PegJump-v0",
    "RushHour-v0",
    "Sokoban-v0",
    "2048-v0-super-easy",
    "LogicPuzzle-v0",
    "Crosswords-v0",
    "Set-v0",
    "Secretary-v0",
    "Bandit-v0",
    "Blackjack-v0",
)
ScoreMode = Literal["textarena", "win"]

# textarena 0.7.4 games that pass State.set_invalid_move(reward, reason) positionally against its
# (reason, reward) signature: an invalid move is answered with a number for its reason, and a
# second one ends the game with text for a reward.
BROKEN = ("Countdown", "Cryptarithm", "Slitherlink", "ThreeCardMonte")
# one game at a time touches what is process-wide: `random`, sys.stdout, nltk.download
_LOCK = threading.RLock()


# --------------------------------------------------------------------------- one game


class _OwnRandom:
    """A game's own state of Python's process-wide ``random``, swapped in around each call."""

    def __init__(self) -> None:
        self.state: Any = None

    @contextlib.contextmanager
    def active(self):
        with _LOCK:
            outer = random.getstate()
            if self.state is not None:
                random.setstate(self.state)
            try:
                yield
            finally:
                self.state = random.getstate()
                random.setstate(outer)


def _nltk_has(resource: str) -> bool:
    import nltk

    for kind in ("corpora", "taggers", "tokenizers", "chunkers", "models", "grammars", "misc", "sentiment"):
        try:
            nltk.data.find(f"{kind}/{resource}")
            return True
        except LookupError:
            continue
    return False


def _nltk_hint(env_id: str, resources: list[str]) -> RlvrError:
    names = " ".join(resources)
    return RlvrError(
        f"TextArena env {env_id!r} needs nltk data that is not installed here ({names}); rlvr-textarena never "
        f"downloads during a run: install it once with `python -m nltk.downloader {names}`"
    )


@contextlib.contextmanager
def _offline(env_id: str):
    """Around every call into a game: no nltk downloads, and nothing printed on rlvr's stdout.

    TextArena's word games call ``nltk.download`` when imported and read the corpora later.
    Here a download of something missing does nothing; the block then fails with one line that
    names everything missing and the command that installs it (nltk's own LookupError, "Resource
    ... not found", becomes that line too). Some games print while dealing ("Generated puzzle in
    1 attempts"): that goes nowhere."""
    import nltk

    missing: list[str] = []

    def offline(info_or_id=None, *args, **kwargs):
        ids = [info_or_id] if isinstance(info_or_id, str) else list(info_or_id or [])
        gone = [str(i) for i in ids if not _nltk_has(str(i))]
        missing.extend(i for i in gone if i not in missing)
        return not gone

    real = nltk.download
    nltk.download = offline
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    except LookupError as exc:
        if type(exc) is not LookupError or "nltk" not in str(exc):
            raise  # a KeyError or IndexError of the game's own, not nltk's "Resource ... not found"
        named = re.findall(r"nltk\.download\('([^']+)'\)", str(exc))
        raise _nltk_hint(env_id, [*missing, *(n for n in named if n not in missing)] or ["(see nltk)"]) from None
    finally:
        nltk.download = real
    if missing:
        raise _nltk_hint(env_id, missing)


def _textarena():
    try:
        import textarena
    except ImportError as exc:
        raise RlvrError(f"textarena is not importable ({exc}); `pip install -e examples/rlvr-textarena` "
                        f"installs the pinned version") from None
    return textarena


def _unsupported(env_id: str, why: str) -> RlvrError:
    return RlvrError(
        f"TextArena env {env_id!r} {why}; rlvr-textarena plays offline single-player games only, e.g. "
        f"{', '.join(TESTED[:6])} (the README lists every tested one)"
    )


def _make(env_id: str):
    """``textarena.make(env_id)``: the env with its registered wrappers."""
    ta = _textarena()
    if not isinstance(env_id, str) or not env_id:
        raise RlvrError(f"a TextArena env id is a registered name such as GuessTheNumber-v0, not {env_id!r}")
    registry = ta.envs.registration.ENV_REGISTRY
    if env_id not in registry:
        close = difflib.get_close_matches(env_id, list(registry), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        raise RlvrError(f"unknown TextArena env {env_id!r}{hint}; e.g. {', '.join(TESTED[:6])}")
    game = str(registry[env_id].entry_point).split(":")[0].split(".")[-2:-1]
    if game and game[0] in BROKEN:
        raise _unsupported(env_id, "is broken in textarena 0.7.4 (it swaps the arguments of set_invalid_move: "
                                   "invalid moves get a number for their reason and end the game with text for "
                                   "a reward)")
    try:
        return ta.make(env_id)
    except RlvrError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a game master that needs an API key
        if type(exc) is LookupError:
            raise  # nltk's data is missing: _offline says which
        raise RlvrError(f"TextArena env {env_id!r} could not be created: {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())[:200]}") from None


def _unwrap(env):
    ta = _textarena()
    while isinstance(env, ta.Wrapper):
        env = env.env
    return env


def render(messages) -> str:
    """A list of TextArena messages ``(sender, text, kind)`` as the player reads them: the
    game's messages in order, one paragraph each; the player's own moves (which the game
    echoes back) left out, since they are already in the chat."""
    ta = _textarena()
    parts = []
    for _, text, kind in messages:
        if kind == ta.ObservationType.PLAYER_ACTION:
            continue
        text = str(text).strip("\n")
        if text.strip():
            parts.append(text)
    return "\n\n".join(parts)


class Game:
    """One TextArena game dealt by ``seed`` to player 0, its only player."""

    def __init__(self, env_id: str, seed: int):
        ta = _textarena()
        self.env_id, self.seed = env_id, seed
        self.rng = _OwnRandom()
        with self.rng.active(), _offline(env_id):
            self.env = _make(env_id)
            self.raw = _unwrap(self.env)
            for attribute in vars(self.raw).values():
                if isinstance(attribute, ta.Agent):
                    raise _unsupported(env_id, f"asks a hosted LLM ({type(attribute).__name__}) to run the game")
            try:
                self.env.reset(num_players=1, seed=seed)
            except AssertionError as exc:  # TextArena's states assert their number of players
                raise _unsupported(env_id, f"is not a single-player game ({' '.join(str(exc).split())[:120]})") from None
            if not isinstance(getattr(self.raw, "state", None), ta.SinglePlayerState):
                raise _unsupported(env_id, "is not a single-player game")
            self.opening = self._observe()

    def _observe(self) -> str:
        player, messages = self.raw.get_observation()
        if player != 0:
            raise RuntimeError(f"TextArena gave the turn to player {player} in a single-player game")
        return render(messages)

    @property
    def errors(self) -> tuple[int, bool]:
        """(invalid moves in a row so far, whether the game ended on one): what TextArena's
        single-player state reports; a move was invalid when either grew."""
        state = self.raw.state
        return int(getattr(state, "error_count", 0) or 0), bool(state.game_info[0].get("invalid_move"))

    def play(self, move: str) -> tuple[bool, str]:
        """Play one move: (whether the game is over, the game's new messages)."""
        with self.rng.active(), _offline(self.env_id):
            done, _ = self.env.step(move)
            return bool(done), ("" if done else self._observe())

    def outcome(self) -> tuple[float | None, dict]:
        """(TextArena's reward for player 0, or None before the game ends; its game info)."""
        state = self.raw.state
        rewards = state.rewards if state.done else None
        info = {k: v for k, v in state.game_info[0].items() if isinstance(v, (str, int, float, bool)) or v is None}
        value = rewards.get(0) if isinstance(rewards, dict) else None
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise ValueError(f"TextArena env {self.env_id!r} ended the game with reward {value!r}, not a number")
        return (None if value is None else float(value)), info


# --------------------------------------------------------------------------- task


def _rows(env_id: str, split: str, size: int, seed: int, first: Game) -> Iterator[dict]:
    offset = 0 if split == "train" else 1
    for index in range(size):
        game_seed = seed + 2 * index + offset
        game = first if index == 0 else Game(env_id, game_seed)
        yield {"id": f"{NAME}/{env_id}/{split}/{index}", "env_id": env_id, "seed": game_seed,
               "question": game.opening}


def textarena_task(
    split: str,
    *,
    data_dir,
    env_id: str = "GuessTheNumber-v0",
    size: Annotated[int, Ge(1)] = 1000,
    seed: Annotated[int, Ge(0)] = 0,
) -> Iterator[dict]:
    """TextArena single-player games dealt by seed (options: env_id, size, seed).

    Rows: ``id``, ``env_id``, ``seed`` (the seed that deals the game) and ``question`` (what the
    player sees once the game is dealt: its rules and, for board games, the board). The train
    split deals seeds ``seed, seed + 2, ...``, the test split ``seed + 1, seed + 3, ...``: no seed
    is in both. Games with few distinct deals repeat (GuessTheNumber-v0 hides one of 20
    numbers behind the same opening message), so disjoint seeds are not disjoint games there.

    The env id is checked when the loader is called (the first game is dealt then): an unknown
    id, a multi-player game or a word game whose nltk data is missing fails at once with one line.
    """
    del data_dir  # dealt, not read
    if split not in SPLITS:
        raise RlvrError(f"task {NAME!r} has splits train and test, not {split!r}")
    for option, value, low in (("size", size, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise RlvrError(f"task {NAME!r}: {option} must be an integer >= {low}, got {value!r}")
    first = Game(env_id, seed + (0 if split == "train" else 1))  # checked now, not at the first row
    return _rows(env_id, split, size, seed, first)


# --------------------------------------------------------------------------- environment


class TextArenaEnvironment:
    """One episode: the row's game, dealt again from its seed; each policy turn is a move."""

    stop = ()  # a turn is a whole message: it ends at the model's end-of-sequence token

    def __init__(self, game: Game, *, max_observation_chars: int, score: str, unfinished_reward: float):
        self.game, self.max_chars, self.score = game, max_observation_chars, score
        self.state: dict[str, Any] = {
            "env_id": game.env_id, "seed": game.seed, "reward": float(unfinished_reward), "finished": False,
            "won": False, "textarena_reward": None, "turns": 0, "invalid_moves": 0, "game_info": {},
        }

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        return text[: self.max_chars] + f"\n[... {len(text) - self.max_chars} more characters cut]"

    def step(self, turn: str) -> Reply:
        if self.state["finished"]:
            raise RuntimeError("the game is already over")
        before = self.game.errors
        done, text = self.game.play(turn)
        after = self.game.errors
        invalid = int(after[0] > before[0] or (after[1] and not before[1]))
        self.state["turns"] += 1
        self.state["invalid_moves"] += invalid
        raw, info = self.game.outcome()
        self.state["game_info"] = info
        if not done:
            # a game that has nothing new to say still expects the player's next move
            return Reply(self._cut(text) or "Your move.", role="user",
                         metrics={"invalid_moves": invalid, "finished": 0, "won": 0})
        won = raw is not None and raw >= 1.0
        self.state.update(finished=True, won=won, textarena_reward=raw)
        if raw is not None:
            self.state["reward"] = raw if self.score == "textarena" else float(won)
        # the outcome is in the state (game_info["reason"]); no closing message to spend tokens on
        return Reply(done=True, metrics={"invalid_moves": invalid, "finished": 1, "won": int(won)})


def _row_game(row: dict) -> tuple[str, int]:
    env_id, seed = row.get("env_id"), row.get("seed")
    if not isinstance(env_id, str) or isinstance(seed, bool) or not isinstance(seed, int):
        raise RlvrError(f"environment {NAME!r} needs the row's env_id (a TextArena env id) and seed (an integer), "
                        f"as the {NAME!r} task's rows have; got env_id={env_id!r}, seed={seed!r}")
    return env_id, seed


def textarena_environment(
    row: dict,
    *,
    max_observation_chars: Annotated[int, Ge(1)] = 4000,
    score: ScoreMode = "textarena",
    unfinished_reward: float = 0.0,
) -> TextArenaEnvironment:
    """A TextArena single-player game, dealt from the row's env_id and seed; the policy's turns are its moves.

    ``score``: what the state's ``reward`` is once the game is over: ``textarena`` (TextArena's
    own reward for the player: 1 for a win; on a loss, most games give the fraction of the
    puzzle done, in [0, 1); a few give -1 for repeated invalid moves) or ``win`` (1.0 for a win,
    else 0.0). ``unfinished_reward``: the reward of an episode that ended before the game did
    (its turns or tokens ran out). ``max_observation_chars``: a reply longer than this is cut.
    The row's ``question``, when present, must be the game's opening: otherwise the prompt
    shows another game than the one played (rows from another textarena version).
    """
    env_id, seed = _row_game(row)
    game = Game(env_id, seed)
    question = row.get("question")
    if isinstance(question, str) and question != game.opening:
        raise RlvrError(f"the row's question is not the opening of TextArena env {env_id!r} dealt with seed {seed}: "
                        f"the rows were made with another textarena version or other options")
    return TextArenaEnvironment(game, max_observation_chars=max_observation_chars, score=score,
                                unfinished_reward=unfinished_reward)


# --------------------------------------------------------------------------- registration


@hookimpl
def rlvr_register_tasks(register):
    register(NAME, textarena_task, columns=["id", "env_id", "seed", "question"], splits=SPLITS)


@hookimpl
def rlvr_register_environments(register):
    register(NAME, textarena_environment)
