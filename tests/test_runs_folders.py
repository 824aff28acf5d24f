"""A run folder tells the truth: a new run never writes into another run's folder, ``--resume``
says when there is nothing to resume, and the files of a run share one mode (the umask's)."""

import json
import os
import stat
from types import SimpleNamespace

import pytest

from helpers import one_line_error, run_rlvr
from rlvr import RlvrError
from rlvr.kit.files import modes_follow_umask
from rlvr.runs.outputs import RUN_OUTPUTS, run_outputs_in
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


def with_checkpoint(folder):
    (folder / "checkpoints" / "step8").mkdir(parents=True)
    (folder / "checkpoints" / "latest").write_text("step8")


@pytest.mark.parametrize("name", ["metrics.jsonl", "samples.jsonl", "eval.jsonl", "eval_before.rank0.json",
                                  "summary.json", "curves.png", "tensorboard", "final", "checkpoints", "wandb"])
def test_a_new_run_refuses_a_folder_holding_any_run_output(tmp_path, name):
    if "." in name:
        (tmp_path / name).write_text("{}\n")
    else:
        (tmp_path / name).mkdir()
    assert run_outputs_in(tmp_path) == [name]
    with pytest.raises(RlvrError, match="no checkpoint to resume: the steps it logged were not saved") as err:
        check_output_dir(tmp_path, resume=False)
    assert name in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(RlvrError, match="^--resume: .* no checkpoint to resume"):
        check_output_dir(tmp_path, resume=True)


def test_a_run_with_a_checkpoint_is_continued_with_resume_only(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    with_checkpoint(tmp_path)
    with pytest.raises(RlvrError, match="already holds a run: pass --resume to continue it, or choose another"):
        check_output_dir(tmp_path, resume=False)
    check_output_dir(tmp_path, resume=True)


def test_logs_and_the_users_own_files_do_not_make_a_run(tmp_path):
    """A run that failed before writing anything but its log may be started again (the log is
    appended to); files of the user's own are left alone and allowed."""
    for name in ("train.log", "train.rank1.log", "sampler-0.log", "notes.txt", "recipe.yaml"):
        (tmp_path / name).write_text("mine\n")
    check_output_dir(tmp_path, resume=False)
    check_output_dir(tmp_path / "missing", resume=False)
    with pytest.raises(RlvrError, match=r"^--resume: no checkpoint in .*checkpoints$"):
        check_output_dir(tmp_path, resume=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "recipe.yaml", "sampler-0.log", "train.log",
                                                         "train.rank1.log"]


def test_every_file_the_engine_names_is_a_run_output():
    """The names rlvr.training.engine (with its report and held-out evaluator) and the logs it uses
    write into a run folder are all listed (a new file a run writes must be added to RUN_OUTPUTS,
    or to the logs this test knows of)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "rlvr"
    sources = "".join((root / p).read_text() for p in ("training/engine.py", "training/report.py", "evaluation/held_out.py",
                                                       "runs/tracking.py", "runs/plotting.py"))
    written = set(re.findall(r'(?:output_dir|folder) / f?"([\w.{}]+)"', sources))
    logs = {"train.log"}
    patterns = [re.compile(p.replace(".", r"\.").replace("*", ".*")) for p in RUN_OUTPUTS]
    for name in written - logs:
        name = re.sub(r"\{[^}]*\}", "0", name)
        assert any(p.fullmatch(name) for p in patterns), name
    assert {"metrics.jsonl", "samples.jsonl", "eval.jsonl", "summary.json", "final", "tensorboard"} <= {
        re.sub(r"\{[^}]*\}", "0", n) for n in written}


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("saved, expected", [("bfloat16", "bfloat16"), ("float16", "float16"), (None, "float32")])
def test_final_dtype_model_is_the_base_models_own(tmp_path, saved, expected):
    from rlvr.training.checkpoint import final_dtype

    config = {"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 1, **({"dtype": saved} if saved else {})}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert final_dtype("model", str(tmp_path)) == expected
    assert final_dtype("float32", str(tmp_path)) == "float32"


def test_a_finished_run_without_checkpoints_is_not_offered_to_resume(tmp_path):
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    for resume in (False, True):
        with pytest.raises(RlvrError, match="holds a finished run without checkpoints .* --model "):
            check_output_dir(tmp_path, resume=resume)


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


def test_modes_follow_the_umask_and_links_are_left_alone(tmp_path):
    folder = tmp_path / "final"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "model.safetensors").chmod(0o600)
    (folder / "config.json").write_text("{}")
    (folder / "config.json").chmod(0o644)
    outside = tmp_path / "secret"
    outside.write_text("private\n")
    outside.chmod(0o600)
    (folder / "link").symlink_to(outside)
    old = os.umask(0o027)
    try:
        modes_follow_umask(folder, "final model")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in folder.iterdir() if not p.is_symlink()}
    assert modes == {"model.safetensors": 0o640, "config.json": 0o640}
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600


@pytest.mark.slow  # builds a small transformers model
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


@pytest.fixture
def sigint_as_python_has_it():
    """SIGINT as an interactive Python has it (a suite started in the background, or under nohup,
    runs with it ignored, which stop_requests rightly keeps), and as it was afterwards."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_first_signal_asks_to_stop_and_a_second_stops_at_once(tmp_path, sigint_as_python_has_it):
    """What Ctrl-C does during training, without training: the handlers are the previous ones
    again afterwards (a notebook's KeyboardInterrupt still works), whatever happened inside."""
    import signal

    from rlvr.training.checkpoint import RunStopped, stop_requests

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_requests(tmp_path / "checkpoints") as stop:
        assert not stop.agreed()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM and stop.agreed()
        with pytest.raises(RunStopped, match="stopped at once .*no checkpoint yet") as err:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):  # the handler runs between bytecodes of this thread
                pass
        assert err.value.signum == signal.SIGINT
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with_checkpoint(tmp_path)
    with stop_requests(tmp_path / "checkpoints") as stop:
        os.kill(os.getpid(), signal.SIGINT)
        stopped = stop.stopped(8, 24)
    assert isinstance(stopped, KeyboardInterrupt) and stopped.signum == signal.SIGINT
    assert str(stopped) == (f"stopped after step 8 of 24 (SIGINT): the same command with --resume continues from "
                            f"{tmp_path / 'checkpoints' / 'step8'}")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_an_ignored_signal_stays_ignored_and_other_threads_change_nothing(tmp_path, sigint_as_python_has_it):
    import signal
    import threading

    from rlvr.training.checkpoint import stop_requests

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with stop_requests(tmp_path) as stop:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGINT) == stop._handle
    finally:
        signal.signal(signal.SIGTERM, previous)
    seen = []

    def in_thread():
        with stop_requests(tmp_path):
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGINT)]


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


@pytest.mark.slow  # trains a tiny model three times
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


@pytest.mark.slow  # two CPU ranks under torchrun
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
