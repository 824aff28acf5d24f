"""A run folder tells the truth: the checks that run `rlvr` or other processes end to end (the e2e
ring; the others: tests/integration/test_runs_folders_live.py, tests/unit/test_runs_folders.py)."""

import json
import os
import stat
from types import SimpleNamespace

import pytest

from helpers import one_line_error, run_rlvr
from rlvr import RlvrError
from rlvr.training.checkpoint import check_output_dir

TINY = """
name: stops
task: {{name: arithmetic, options: {{size: 64}}}}
prompt: {{template: "{{{{question}}}}"}}
rewards: {{"{reward}": 1.0}}
model: {{name: {model}}}
sampling: {{backend: hf, num_generations: 4, max_tokens: 8, dtype: float32}}
trainer: {{steps: 4, rollout_batch_size: 8, micro_batch_size: 4, lr: 1.0e-3, save_every: 8, keep_last: 1}}
"""


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.fixture
def fake_model(tmp_path):
    """A folder that passes the model-name check: `rlvr train` must refuse before loading it."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize("resume", [False, True])
def test_train_refuses_an_interrupted_runs_folder_in_one_line(tmp_path, fake_model, resume):
    """Ctrl-C before the first checkpoint left metrics: the same command (with or without
    --resume) is refused before any model loads, instead of logging steps 1, 2, 1, 2, 3."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY.format(model=fake_model, reward="format"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (run / "train.log").write_text("log\n")
    out = run_rlvr("train", recipe, "--output-dir", run, *(["--resume"] if resume else []),
                   env={"RLVR_LOAD_PLUGINS": "tasks,format"}, timeout=300)
    one_line_error(out, "no checkpoint to resume: the steps it logged were not saved")
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl", "train.log"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_final_model_has_the_runs_mode_and_the_dtype_asked(tmp_path, dtype):
    import torch
    from safetensors import safe_open
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    from rlvr.training.checkpoint import save_final

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    module = LlamaForCausalLM(cfg)  # float32, as the trainer's master weights are
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, "<unk>")))
    old = os.umask(0o022)
    try:
        save_final(SimpleNamespace(module=module), tokenizer, tmp_path / "final", rank=0, zero3=False, lora=False,
                   dtype=dtype)
    finally:
        os.umask(old)
    files = list((tmp_path / "final").iterdir())
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}, [(p.name, oct(p.stat().st_mode)) for p in files]
    with safe_open(str(tmp_path / "final" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {getattr(torch, dtype)}
        assert "lm_head.weight" not in f.keys()  # tied: one copy
    assert json.loads((tmp_path / "final" / "config.json").read_text())["dtype"] == dtype
    assert module.dtype == torch.float32  # the trainer's module is left as it was
    loaded = LlamaForCausalLM.from_pretrained(tmp_path / "final", dtype="auto")
    assert loaded.dtype == getattr(torch, dtype)
    for name, value in module.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value.to(getattr(torch, dtype))), name


# A reward that takes seconds: a step lasts long enough for a second Ctrl-C to land inside it.
SLOW_REWARD = """
import time

def slow(prompts, completions, completion_ids):
    time.sleep(3)
    return [float(len(ids) % 2) for ids in completion_ids]
"""


def start_training(tmp_path, tiny_model, *args, reward="format"):
    """`rlvr train` in the background with SIGINT as a terminal gives it (a suite started in the
    background runs with SIGINT ignored, which children inherit)."""
    import signal
    import subprocess

    from helpers import RLVR

    recipe = tmp_path / "stops.yaml"
    recipe.write_text(TINY.format(model=tiny_model, reward=reward))
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    env = {**os.environ, "RLVR_LOAD_PLUGINS": "tasks,format"}
    return subprocess.Popen([RLVR, "train", recipe, "--output-dir", tmp_path / "run", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def steps_logged(run):
    path = run / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def test_ctrl_c_saves_a_checkpoint_that_resume_continues_from(tmp_path, tiny_model):
    """Ctrl-C after the first step (the recipe saves every 8 of 4 steps: no checkpoint of its
    own) stops after the step in progress with a checkpoint and says so; --resume then logs
    steps 1..4 exactly once. A second Ctrl-C stops at once and says what --resume has."""
    import signal
    import time

    from helpers import wait_until

    run = tmp_path / "run"
    proc = start_training(tmp_path, tiny_model)
    assert wait_until(lambda: steps_logged(run) or proc.poll() is not None, timeout_s=600)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 130, stderr[-3000:]
    done = steps_logged(run)
    assert done in ([1], [1, 2]), done
    tag = f"step{done[-1]}"
    assert (run / "checkpoints" / "latest").read_text() == tag
    assert "SIGINT: stopping after this step, then saving a checkpoint; Ctrl-C again to stop now" in stderr
    last = stderr.strip().splitlines()[-1]
    assert last == (f"rlvr: interrupted: stopped after step {done[-1]} of 4 (SIGINT): the same command with "
                    f"--resume continues from {run / 'checkpoints' / tag}"), stderr[-3000:]
    assert "Traceback" not in stderr
    assert not (run / "final").exists()

    # the disk settings change nothing the steps compute, so the resumed run tries them
    proc = start_training(tmp_path, tiny_model, "--resume", "--set", "trainer.final_checkpoint=none",
                          "--set", "trainer.final_dtype=bfloat16")
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert steps_logged(run) == [1, 2, 3, 4]
    assert not (run / "checkpoints").exists() and "removed" in (run / "train.log").read_text()
    assert json.loads((run / "final" / "config.json").read_text())["dtype"] == "bfloat16"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (run / "final").iterdir()} == {0o666 & ~current_umask()}
    with pytest.raises(RlvrError, match="holds a finished run without checkpoints"):
        check_output_dir(run, resume=False)

    import shutil

    shutil.rmtree(run)
    proc = start_training(tmp_path, tiny_model, reward="slow_reward:slow")
    assert wait_until(lambda: steps_logged(run) or proc.poll() is not None, timeout_s=600)
    time.sleep(0.5)  # past step 1's end: inside step 2, which scores for 3 s
    proc.send_signal(signal.SIGINT)
    assert wait_until(lambda: proc.poll() is not None or "stopping after this step" in
                      (run / "train.log").read_text(), timeout_s=120)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        "rlvr: interrupted: stopped at once (SIGINT): there is no checkpoint yet, so --resume cannot continue "
        "this run (the steps logged were not saved)"), stderr[-3000:]
    assert steps_logged(run) == [1] and not (run / "checkpoints" / "latest").exists()


def rank_processes(parent: int) -> dict[int, int]:
    """{rank: pid} of the rlvr processes torchrun ``parent`` started (RANK in their environment)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except (OSError, ValueError, IndexError):
            continue
        if b"RANK" in env:
            found[int(env[b"RANK"])] = int(entry)
    return found


def test_ranks_agree_to_stop_when_only_one_is_signalled(tmp_path, tiny_model):
    """SIGINT to rank 1 alone: both ranks stop after the same step and save it together (each
    its own rank state), where one rank stopping alone would hang the other in a collective."""
    import signal
    import subprocess
    import sys
    import time

    from helpers import wait_until

    recipe = tmp_path / "stops.yaml"
    recipe.write_text(TINY.format(model=tiny_model, reward="slow_reward:slow"))
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    run = tmp_path / "run"
    env = {**os.environ, "RLVR_LOAD_PLUGINS": "tasks", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             "29517", "-m", "rlvr.cli", "train", str(recipe), "--output-dir", str(run)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert wait_until(lambda: steps_logged(run) or proc.poll() is not None, timeout_s=600)
    time.sleep(0.5)  # inside step 2, which scores for 3 s
    ranks = rank_processes(proc.pid)
    assert set(ranks) == {0, 1}, ranks
    os.kill(ranks[1], signal.SIGINT)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode != 0
    assert steps_logged(run) == [1, 2], stderr[-3000:]
    assert (run / "checkpoints" / "latest").read_text() == "step2"
    assert {p.name for p in (run / "checkpoints" / "step2").glob("rlvr_rank*.json")} == {"rlvr_rank0.json",
                                                                                     "rlvr_rank1.json"}
    assert stderr.count("stopped after step 2 of 4 (SIGINT): the same command with --resume continues from") == 2
