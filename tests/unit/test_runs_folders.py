"""A run folder tells the truth: a new run never writes into another run's folder, ``--resume``
says when there is nothing to resume, and the files of a run share one mode (the umask's)."""

import json
import os

import pytest

from rlvr import RlvrError
from rlvr.runs.outputs import RUN_OUTPUTS, run_outputs_in
from rlvr.training.checkpoint import check_output_dir


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

    root = Path(__file__).resolve().parents[2] / "rlvr"
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


@pytest.mark.parametrize("saved, expected", [("bfloat16", "bfloat16"), ("float16", "float16"), (None, "float32")])
def test_final_dtype_model_is_the_base_models_own(tmp_path, saved, expected):
    from rlvr.training.checkpoint import final_dtype

    config = {"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 1, **({"dtype": saved} if saved else {})}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert final_dtype("model", str(tmp_path), str(tmp_path)) == expected
    assert final_dtype("float32", str(tmp_path), str(tmp_path)) == "float32"


def test_final_dtype_model_of_an_alias_is_the_upstream_models_not_the_pulls(tmp_path):
    """The pulled Qwen 0.5B and SmolLM2 folders are float32 (de-quantized GGUF); their models are bfloat16."""
    from rlvr.training.checkpoint import final_dtype

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "dtype": "float32"}))
    for alias in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"):
        assert final_dtype("model", alias, str(tmp_path)) == "bfloat16"
        assert final_dtype("float16", alias, str(tmp_path)) == "float16"


def test_a_finished_run_without_checkpoints_is_not_offered_to_resume(tmp_path):
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    for resume in (False, True):
        with pytest.raises(RlvrError, match="holds a finished run without checkpoints .* --model "):
            check_output_dir(tmp_path, resume=resume)


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


def test_the_stop_notice_reaches_log_and_terminal_when_the_signal_lands_inside_a_write_to_the_log(
        tmp_path, monkeypatch, sigint_as_python_has_it):
    """Ctrl-C while the main thread writes to the log (its buffered file locked): the notice is
    written at once to the log and the terminal, and nothing is logged from the handler. Logging
    there was a reentrant write to the same file: a "Logging error" in the log, and no notice."""
    import io
    import logging
    import signal

    from rlvr.runs import logs
    from rlvr.training.checkpoint import stop_requests

    log_r, log_w = os.pipe()
    term_r, term_w = os.pipe()
    monkeypatch.setattr(logs, "_NOTICE_FDS", (log_w, term_w))

    class SignalMidWrite(io.RawIOBase):  # the signal arrives while the buffered writer holds its lock
        def writable(self):
            return True

        def write(self, data):
            if not raised:
                raised.append(True)
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(100):  # the handler runs between bytecodes of this thread
                    pass
            return len(data)

    class Recorded(logging.StreamHandler):
        def handleError(self, record):
            errors.append(record.getMessage())

    raised, errors = [], []
    handler = Recorded(io.TextIOWrapper(io.BufferedWriter(SignalMidWrite()), write_through=True))
    logger = logging.getLogger("rlvr.training")
    logger.addHandler(handler)
    try:
        with stop_requests(tmp_path / "checkpoints") as stop:
            logger.warning("a line of the step in progress")
            assert raised and stop.signum == signal.SIGINT
    finally:
        logger.removeHandler(handler)
    assert errors == []
    notice = "SIGINT: stopping after this step, then saving a checkpoint; Ctrl-C again to stop now"
    assert os.read(term_r, 4096).decode() == notice + "\n"  # a pipe: no escape to clear the bar's line
    logged = os.read(log_r, 4096).decode()
    assert logged.endswith(f" rlvr.training WARNING: {notice}\n") and logged.count("\n") == 1, logged
    for fd in (log_r, log_w, term_r, term_w):
        os.close(fd)


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
