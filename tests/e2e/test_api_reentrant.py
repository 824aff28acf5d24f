"""rlvr.api.train and rlvr.api.evaluate again and again in one Python process (a notebook, a sweep): each
run, finished or failed, leaves nothing behind that the next one would trip on or a user would see
(process groups, DeepSpeed's references to them, torch's excepthook, environment variables,
threads, child processes, logging levels and handlers), and a run gives the same numbers whatever
ran before it in the process."""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from pathlib import Path

import pytest

import rlvr.api
from helpers import wait_until
from helpers.api_reentrant import idle_library_worker

ROWS = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(1, 21) for b in range(1, 21)]
RECIPE = {"name": "again", "task": "sums", "prompt": {"template": "{{question}}"},
          "sampling": {"num_generations": 4}, "trainer": {"rollout_batch_size": 8, "micro_batch_size": 4}}


def short(completions, **kwargs):
    """A reward that varies from sample to sample, so that the loss is not 0 and runs can be compared."""
    return [-len(c[0]["content"]) / 100 for c in completions]


def child_pids() -> set[str]:
    pids: set[str] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            pids.update(Path(f"/proc/self/task/{task}/children").read_text().split())
        except OSError:  # a thread that ended meanwhile
            pass
    return pids


def models_alive() -> list[str]:
    """The DeepSpeed engines and transformers models no one can reach any more but that are kept."""
    import gc

    from transformers import PreTrainedModel

    gc.collect()
    return [type(o).__name__ for o in gc.get_objects()
            if type(o).__name__ == "DeepSpeedEngine" or isinstance(o, PreTrainedModel)]


def process_state() -> dict:
    """What a run may set up in this process and must take down again."""
    import torch.distributed as dist

    loggers = [logging.getLogger(), logging.getLogger("rlvr")]
    state = {"process group": dist.is_initialized(), "environment": dict(os.environ), "excepthook": sys.excepthook,
             "logging": [(logger.level, list(logger.handlers)) for logger in loggers],
             "stdout/stderr": [os.fstat(fd).st_ino for fd in (1, 2)]}
    groups, comm = sys.modules.get("deepspeed.utils.groups"), sys.modules.get("deepspeed.comm.comm")
    if groups is not None:  # every group DeepSpeed keeps a reference to (its clone of the world group, ...)
        state["deepspeed groups"] = {name: value for name, value in vars(groups).items()
                                     if name.startswith("_") and name[1:2].isupper() and value and not isinstance(value, str)}
        state["deepspeed mpu"] = groups.mpu
    if comm is not None:
        state["deepspeed backend"] = comm.cdb
    return state


class Leftovers:
    """The process as it was before the first run; ``check`` after each run: what is left."""

    def __init__(self, monkeypatch):
        self.threads = set(threading.enumerate())
        self.started: dict[threading.Thread, str] = {}  # who started each thread since: said when one is left
        start = threading.Thread.start

        def recorded(thread):
            self.started[thread] = "".join(traceback.format_stack(limit=12)[:-1])
            return start(thread)

        monkeypatch.setattr(threading.Thread, "start", recorded)
        self.children = child_pids()
        self.state = process_state()
        self.models = models_alive()

    def check(self, what: str) -> None:
        # a run's model and optimizer are freed with it (vLLM kept the ImportError of a library it
        # lacks, with a traceback whose frames held the run that first imported vLLM)
        assert models_alive() == self.models, what
        now = process_state()
        assert not now["process group"], what
        assert not now.get("deepspeed groups") and now.get("deepspeed mpu") is None, (what, now)
        assert now.get("deepspeed backend") is None, what
        for key in ("environment", "excepthook", "logging", "stdout/stderr"):
            assert now[key] == self.state[key], (what, key, _diff(self.state[key], now[key]))
        # library threads that live as long as the process (tqdm's monitor) are daemons; a run's own go
        assert wait_until(lambda: not self.left_threads(), timeout_s=30), (what, self.describe(self.left_threads()))
        assert wait_until(lambda: child_pids() <= self.children, timeout_s=30), (what, child_pids() - self.children)

    def left_threads(self) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in self.threads and (t.name.startswith("rlvr") or (
            not t.daemon and not idle_library_worker(t)))]

    def describe(self, threads: list[threading.Thread]) -> str:
        frames = sys._current_frames()
        return "\n".join(f"{t.name}, started at\n{self.started.get(t, '?')}  now at\n"
                         + "".join(traceback.format_stack(frames[t.ident])[-6:]) if t.ident in frames else t.name
                         for t in threads)


def _diff(before, after):
    if isinstance(before, dict):
        return {k: (before.get(k), after.get(k)) for k in {*before, *after} if before.get(k) != after.get(k)}
    return before, after


@pytest.fixture
def small_model(tiny_model, tmp_path):
    """Another random-init model: 3 layers of another width, the same tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_model)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=1024,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(1)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "small")
    tok.save_pretrained(tmp_path / "small")
    return tmp_path / "small"


def settings(model, backend: str, **more) -> dict:
    return {"model.name": model, "sampling.backend": backend, "sampling.max_tokens": 8, "trainer.steps": 2,
            "eval.limit": 4, "eval.max_tokens": 8, "trainer.eval_at_end": True, **more}


def numbers(result) -> list[tuple]:
    """What a step computed, without its timings."""
    return [tuple(row[k] for k in ("reward_mean", "reward_std", "loss", "entropy", "grad_norm", "completion_len_mean"))
            for row in result.metrics()]


def test_runs_one_after_another_in_one_process(tmp_path, tiny_model, small_model, monkeypatch):
    """Train A, train B (another model, a KL reference, a learning-rate schedule), a run that fails
    mid-step, evaluate, train A again: each works, each leaves the process as it found it, and A
    gives the same numbers the second time. (A second rlvr.api.train failed with DeepSpeed's "Group ...
    is not registered": DeepSpeed kept the first run's destroyed groups.)"""
    import rlvr.training.learner as learner

    start = Leftovers(monkeypatch)
    first = rlvr.api.train(RECIPE, overrides=settings(tiny_model, "hf"), rewards={"short": short},
                           tasks={"sums": ROWS}, output_dir=tmp_path / "a")
    start.check("train A")
    assert numbers(first)[0][1] > 0 and first.summary["eval_after"]["n"] == 4  # rewards that vary

    other = settings(small_model, "hf", **{"algorithm.kl.beta": 0.05, "trainer.schedule": "cosine"})
    second = rlvr.api.train(RECIPE, overrides=other, rewards=[short], tasks={"sums": ROWS},
                            output_dir=tmp_path / "b")
    start.check("train B")
    assert len(second.metrics()) == 2 and (second.final_model / "config.json").exists()

    def broken(self, rollout, lr):
        raise RuntimeError("the update broke")

    with monkeypatch.context() as patch:
        patch.setattr(learner.Learner, "update", broken)
        with pytest.raises(RuntimeError, match="the update broke"):
            rlvr.api.train(RECIPE, overrides=settings(tiny_model, "hf"), rewards={"short": short},
                           tasks={"sums": ROWS}, output_dir=tmp_path / "broken")
    start.check("a failed run")

    evaluated = rlvr.api.evaluate(RECIPE, first.final_model, overrides={"sampling.backend": "hf", "eval.limit": 4,
                                                                        "eval.max_tokens": 8},
                                  rewards={"short": short}, tasks={"sums": ROWS}, output_dir=tmp_path / "ev")
    start.check("evaluate")
    assert evaluated.report["n"] == 4

    again = rlvr.api.train(RECIPE, overrides=settings(tiny_model, "hf"), rewards={"short": short},
                           tasks={"sums": ROWS}, output_dir=tmp_path / "a2")
    start.check("train A again")
    assert numbers(again) == numbers(first)
    assert again.summary["eval_after"]["accuracy"] == first.summary["eval_after"]["accuracy"]


@pytest.mark.longer(600, reason="two runs with vLLM one after another in this process (52 s alone)")
def test_vllm_runs_one_after_another_in_one_process(tmp_path, tiny_model, monkeypatch):
    """The in-process vLLM engine (CPU) twice in training and once in evaluation: vLLM destroys
    the process group itself as it shuts down, behind DeepSpeed's back, and sets a dozen variables
    in os.environ (LD_PRELOAD among them) as it starts."""
    start = Leftovers(monkeypatch)
    for name in ("a", "b"):
        result = rlvr.api.train(RECIPE, overrides=settings(tiny_model, "vllm", **{"trainer.eval_at_end": False}),
                                rewards={"short": short}, tasks={"sums": ROWS}, output_dir=tmp_path / name)
        start.check(f"vllm train {name}")
        assert len(result.metrics()) == 2
    evaluated = rlvr.api.evaluate(RECIPE, result.final_model, overrides={"sampling.backend": "vllm", "eval.limit": 4,
                                                                         "eval.max_tokens": 8},
                                  rewards={"short": short}, tasks={"sums": ROWS}, output_dir=tmp_path / "ev")
    start.check("vllm evaluate")
    assert evaluated.report["n"] == 4
