"""The TextArena bridge's own tests: `pytest examples/rlvr-textarena`. Offline, no model: the
episodes are played by scripted policies through rlvr's EpisodeRunner, on the demo model's
tokenizer and chat template."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr import RlvrError
from rlvr.sampling.episodes import EpisodeRunner
from rlvr.host.registry import get_plugin_manager, load_registry
from rlvr.sampling.samplers import Completion
from rlvr_textarena import TESTED, Game, textarena_environment, textarena_task

HERE = Path(__file__).resolve().parents[1]
RLVR = str(Path(sys.executable).parent / "rlvr")
GTN = "GuessTheNumber-v0"


def rlvr(*args):
    return subprocess.run([RLVR, *map(str, args)], capture_output=True, text=True, timeout=300)


def rows(split, **options):
    return list(textarena_task(split, data_dir=None, **options))


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from rlvr.models.hub import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))


# --------------------------------------------------------------------------- registration, rows


def test_rlvr_discovers_the_task_and_the_environment():
    registry = load_registry(get_plugin_manager())
    task = registry.task("textarena")
    assert task.plugin == "textarena" and task.splits == ("train", "test")
    assert task.columns == ("id", "env_id", "seed", "question")
    assert registry.environment("textarena").plugin == "textarena"
    out = rlvr("environments")
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("textarena") for line in out.stdout.splitlines())


def test_listing_plugins_does_not_import_textarena():
    code = (
        "import sys\n"
        "from rlvr.cli.main import cli\n"
        "for args in (['plugins', '--json'], ['tasks'], ['environments']):\n"
        "    try:\n"
        "        cli(args, standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('textarena', 'nltk', 'openai', 'chess') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_rows_name_a_game_and_a_seed_and_show_its_opening():
    train, test = rows("train", size=30), rows("test", size=30)
    assert [r["id"] for r in train[:2]] == ["textarena/GuessTheNumber-v0/train/0", "textarena/GuessTheNumber-v0/train/1"]
    assert {r["env_id"] for r in train + test} == {GTN}
    assert not {r["seed"] for r in train} & {r["seed"] for r in test}  # splits never share a seed
    assert len({r["seed"] for r in train}) == 30
    assert rows("train", size=30) == train and rows("test", size=30) == test  # deterministic
    assert rows("train", size=3, seed=10)[0]["seed"] == 10 and rows("test", size=3, seed=10)[0]["seed"] == 11
    opening = train[0]["question"]
    assert opening.startswith("You are Player 0. You are playing Guess The Number.")
    assert "between 1 and 20 within 10 turns" in opening and opening.endswith("Enter your guess.")
    # a board game's opening carries its board too
    (hanoi,) = rows("train", env_id="TowerOfHanoi-v0", size=1)
    assert "Tower of Hanoi with 3 disks" in hanoi["question"] and "A: [3, 2, 1]" in hanoi["question"]


def test_dealing_games_leaves_the_process_random_stream_alone():
    random.seed(1234)
    expected = [random.random() for _ in range(3)]
    random.seed(1234)
    rows("train", env_id="Minesweeper-v0-small", size=5)  # TextArena reseeds `random` in every reset
    Game("Minesweeper-v0-small", 3).play("[2 2]")  # and places mines with it on the first move
    assert [random.random() for _ in range(3)] == expected


def test_a_game_plays_the_same_whatever_other_games_draw_meanwhile():
    alone = Game("Minesweeper-v0-small", 5)
    first_alone = alone.play("[2 2]")[1]
    crowded = Game("Minesweeper-v0-small", 5)
    other = Game("Minesweeper-v0-small", 6)  # reseeds `random` after `crowded` was dealt
    other.play("[0 0]")
    random.random()
    assert crowded.play("[2 2]")[1] == first_alone


@pytest.mark.parametrize("env_id", TESTED)
def test_every_tested_game_deals_from_its_seed_and_takes_a_move(env_id):
    (row,) = rows("train", env_id=env_id, size=1)
    assert row["question"].strip() and Game(env_id, row["seed"]).opening == row["question"]
    env = textarena_environment(row)
    assert tuple(env.stop) == ()
    reply = env.step("I am not sure what to do.")  # no valid move in any of these games
    assert env.state["turns"] == 1 and env.state["env_id"] == env_id
    assert reply.done or (reply.role == "user" and reply.text.strip())


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("env_id", ["TicTacToe-v0", "Poker-v0", "SecretMafia-v0"])
def test_multi_player_games_are_refused_by_the_task_and_the_environment(env_id):
    with pytest.raises(RlvrError) as err:
        textarena_task("train", data_dir=None, env_id=env_id, size=5)  # at the call, before any row
    message = str(err.value)
    assert f"TextArena env {env_id!r} is not a single-player game" in message
    assert "GuessTheNumber-v0" in message and "Mastermind-v0" in message and "\n" not in message
    with pytest.raises(RlvrError, match="is not a single-player game"):
        textarena_environment({"env_id": env_id, "seed": 0})


def test_unknown_games_and_rows_without_a_game_are_refused():
    with pytest.raises(RlvrError, match=r"unknown TextArena env 'GuessTheNumbr-v0' \(did you mean 'GuessTheNumber-v0'"):
        textarena_task("train", data_dir=None, env_id="GuessTheNumbr-v0")
    with pytest.raises(RlvrError, match="needs the row's env_id"):
        textarena_environment({"question": "hi"})
    with pytest.raises(RlvrError, match="splits train and test"):
        textarena_task("validation", data_dir=None)


def test_games_run_by_a_hosted_llm_are_refused(monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(RlvrError, match=r"^TextArena env 'TwentyQuestions-v0' could not be created: ValueError: "
                                        r"OpenRouter API key not found"):
        textarena_task("train", data_dir=None, env_id="TwentyQuestions-v0")
    monkeypatch.setenv("OPENROUTER_API_KEY", "not-a-key")  # with a key it would call OpenRouter every turn
    with pytest.raises(RlvrError, match=r"'GuessWho-v0' asks a hosted LLM \(OpenRouterAgent\) to run the game; "
                                        r"rlvr-textarena plays offline single-player games only"):
        textarena_task("train", data_dir=None, env_id="GuessWho-v0")


@pytest.mark.parametrize("env_id", ["Countdown-v0", "Slitherlink-v0-raw"])
def test_games_broken_in_this_textarena_are_refused(env_id):
    with pytest.raises(RlvrError, match=f"'{env_id}' is broken in textarena 0.7.4 .it swaps the arguments"):
        textarena_task("train", data_dir=None, env_id=env_id)


def test_word_games_without_nltk_data_fail_with_one_line_and_download_nothing(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "textarena.envs.Hangman.env", raising=False)
    calls = []
    monkeypatch.setattr(nltk.downloader.Downloader, "download", lambda *a, **k: calls.append(a) or True)
    with pytest.raises(RlvrError) as err:
        textarena_task("train", data_dir=None, env_id="Hangman-v0", size=2)
    assert str(err.value) == (
        "TextArena env 'Hangman-v0' needs nltk data that is not installed here (words); rlvr-textarena never "
        "downloads during a run: install it once with `python -m nltk.downloader words`")
    assert calls == [] and nltk.download.__module__.startswith("nltk")  # nltk's own download is back


def test_a_row_whose_question_is_not_the_games_opening_is_refused():
    (row,) = rows("train", size=1)
    with pytest.raises(RlvrError, match="not the opening of TextArena env 'GuessTheNumber-v0' dealt with seed 0"):
        textarena_environment({**row, "question": "Guess a number from 1 to 100."})


# --------------------------------------------------------------------------- episodes


class GamePolicy:
    """A sampler that plays by reading the transcript: ``move(guesses, hints)`` gets the guesses
    made so far and the game's replies to them, and returns the next message's text."""

    def __init__(self, tok, prompts, move):
        self.tok, self.prompts, self.move, self.calls = tok, [tuple(p) for p in prompts], move, 0

    def generate(self, prompt_ids, *, n, temperature, top_p, max_tokens, seed=None, logprobs=False, stop=()):
        assert n == 1 and tuple(stop) == ()
        self.calls += 1
        limits = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompt_ids)
        out = []
        for ids, limit in zip(prompt_ids, limits):
            prompt = next(p for p in self.prompts if tuple(ids[: len(p)]) == p)
            text = self.tok.decode(ids[len(prompt):])
            turns = re.findall(r"(.*?)<\|im_end\|>\n<\|im_start\|>user\n(.*?)<\|im_end\|>", text, re.S)
            tokens = self.tok.encode(self.move([g for g, _ in turns], [h for _, h in turns]),
                                     add_special_tokens=False) + [self.tok.eos_token_id]
            out.append([Completion("", tokens[:limit], truncated=len(tokens) > limit)])
        return out


def bisect(guesses, hints, low=1, high=20):
    for guess, hint in zip(guesses, hints):
        number = int(re.findall(r"\[(\d+)\]", guess)[-1])
        if "higher" in hint:
            low = number + 1
        elif "lower" in hint:
            high = number - 1
    return f"Between {low} and {high}, so I guess [{(low + high) // 2}]."


def play(tok, table, move, *, n=1, max_turns=12, max_tokens=1024, options=None):
    prompts = []
    for r in table:
        ids = tok.apply_chat_template([{"role": "user", "content": r["question"]}], add_generation_prompt=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    runner = EpisodeRunner(textarena_environment, options or {}, tokenizer=tok, max_turns=max_turns,
                           max_tokens=max_tokens, eos_ids=[tok.eos_token_id])
    policy = GamePolicy(tok, prompts, move)
    groups, states, sums = runner.run(policy, table, prompts, n=n, temperature=1.0, top_p=1.0, max_tokens=64)
    return prompts, [c for g in groups for c in g], states, sums


def target(row):
    return Game(row["env_id"], row["seed"]).raw.game_number


def test_binary_search_wins_every_game(tok):
    table = rows("train", size=6)
    prompts, completions, states, sums = play(tok, table, bisect, n=2)
    assert len(completions) == len(states) == 12
    for state in states:
        assert state["reward"] == 1.0 and state["won"] and state["finished"] and state["textarena_reward"] == 1.0
        assert 1 <= state["turns"] <= 5 and state["invalid_moves"] == 0
        assert state["game_info"]["reason"] == "Congratulations! You guessed the correct number."
    for row, state, c in zip([r for r in table for _ in range(2)], states, completions):
        assert c.text.strip().endswith(f"[{target(row)}].") and not c.truncated
    assert len({target(r) for r in table}) > 1  # different deals, all won
    assert sums["env/won"] == 12 and sums["env/finished"] == 12 and sums["env_errors"] == 0


def test_the_games_replies_are_user_chat_messages(tok):
    table = rows("test", size=1)
    prompts, (c,), (state,), _ = play(tok, table, bisect)
    assert state["turns"] >= 2  # at least one reply to look at
    # the whole episode is the chat the model's template renders from its messages
    messages = [{"role": "user", "content": table[0]["question"]}]
    guesses, hints = [], []
    while len(guesses) < state["turns"]:
        guesses.append(bisect(guesses, hints))
        messages.append({"role": "assistant", "content": guesses[-1]})
        if len(guesses) < state["turns"]:
            low_high = "higher" if int(guesses[-1].split("[")[1][:-2]) < target(table[0]) else "lower"
            hints.append(f"The target number is {low_high}.")
            messages.append({"role": "user", "content": hints[-1]})
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assert tok.decode(prompts[0] + c.token_ids) + "\n" == rendered
    # the game's tokens are not the policy's
    policy_text = tok.decode([t for t, m in zip(c.token_ids, c.mask) if m], skip_special_tokens=True)
    assert policy_text == "".join(guesses) and "target number" not in policy_text


def test_invalid_moves_lose_with_the_games_reward(tok):
    table = rows("train", size=2)
    _, completions, states, sums = play(tok, table, lambda guesses, hints: "Hmm, maybe ten?")
    for state, c in zip(states, completions):
        # TextArena allows one invalid move; the second ends the game with its reward for no
        # progress (no guess made: 0)
        assert state["turns"] == 2 and state["invalid_moves"] == 2 and state["finished"] and not state["won"]
        assert state["reward"] == 0.0 and state["textarena_reward"] == 0.0
        assert state["game_info"]["invalid_move"] is True
        assert state["game_info"]["reason"].startswith("Invalid Move: Invalid move format.")
        assert "You attempted an invalid move." in c.text  # the first one was answered
    assert sums["env/invalid_moves"] == 4 and sums["env/won"] == 0


def test_running_out_of_guesses_scores_the_last_guess_and_win_mode_scores_zero(tok):
    table = rows("train", size=3)

    def far(guesses, hints, number):
        wrong = [k for k in range(1, 21) if k != number]
        return f"[{wrong[len(guesses)]}]"

    for score in ("textarena", "win"):
        for row in table:
            number = target(row)
            _, (c,), (state,), _ = play(tok, [row], lambda g, h: far(g, h, number), options={"score": score})
            last = [k for k in range(1, 21) if k != number][10]
            # "within 10 turns", says the game, but it checks its limit before counting the turn: 11
            assert state["turns"] == 11 and state["finished"] and not state["won"] and state["invalid_moves"] == 0
            assert state["textarena_reward"] == pytest.approx(1 - abs(last - number) / 19)
            assert state["reward"] == (state["textarena_reward"] if score == "textarena" else 0.0)
            assert state["game_info"]["reason"].startswith("The turn limit has been reached.")


def test_an_episode_cut_before_the_game_ends_gets_the_unfinished_reward(tok):
    row = next(r for r in rows("train", size=20) if target(r) not in (10, 5, 15, 2, 7, 12, 18))  # not in 3 guesses
    _, (c,), (state,), sums = play(tok, [row], bisect, max_turns=3, options={"unfinished_reward": -0.5})
    # the game took the third move too (the host steps the last turn), then the episode was cut
    assert state["turns"] == 3 and not state["finished"] and not state["won"]
    assert state["reward"] == -0.5 and state["textarena_reward"] is None and c.truncated
    assert sums["env/finished"] == 0


def test_long_observations_are_cut():
    (row,) = rows("train", env_id="TowerOfHanoi-v0", size=1)
    env = textarena_environment(row, max_observation_chars=10)
    reply = env.step("[A C]")
    assert reply.text.startswith(reply.text[:10]) and re.search(r"\n\[\.\.\. \d+ more characters cut\]$", reply.text)
    assert len(reply.text.split("\n[...")[0]) == 10


def test_a_game_with_nothing_new_to_say_still_asks_for_a_move(monkeypatch):
    (row,) = rows("train", size=1)
    env = textarena_environment(row)
    monkeypatch.setattr(env.game, "play", lambda move: (False, ""))
    reply = env.step("[3]")
    assert reply.text == "Your move." and reply.role == "user" and not reply.done


def test_a_reward_that_is_not_a_number_fails_the_episode_not_the_run():
    game = Game(GTN, 0)
    game.play("no")
    assert game.play("no")[0]  # the second invalid move ends it
    game.raw.state.rewards = {0: "Bad action."}  # what textarena 0.7.4's broken games leave there
    with pytest.raises(ValueError, match="ended the game with reward 'Bad action.', not a number"):
        game.outcome()


# --------------------------------------------------------------------------- recipe


def test_the_recipe_validates_with_its_rows():
    recipe = HERE / "guess_the_number.yaml"
    out = rlvr("validate", "--data", recipe)
    assert out.returncode == 0, out.stderr
    assert "ok (textarena, rewards: environment" in out.stdout and "profiles: cpu" in out.stdout
    bad = rlvr("validate", "--data", recipe, "--set", "task.options.env_id=TicTacToe-v0")
    assert bad.returncode == 2 and bad.stderr.startswith("rlvr: error: ")
    assert "'TicTacToe-v0' is not a single-player game" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
