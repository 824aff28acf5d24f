"""Checkpoints are data, never code: rlvr's rank state is JSON, DeepSpeed's files are read with
``torch.load(weights_only=True)`` and a short allow-list of DeepSpeed's own classes. A tampered
checkpoint (a pickle that would run code) is refused with one line and runs nothing."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

# One DeepSpeed engine on one gloo rank, ZeRO-2 so that optimizer states are files of their own
# (the ones holding DeepSpeed's classes). `save DIR` trains a step and checkpoints it;
# `resume DIR...` builds the same engine and resumes from each folder in turn, printing the outcome
# (one process for every case below: each start costs seconds of imports and DeepSpeed's setup).
SCRIPT = textwrap.dedent('''
    import json, os, random, sys
    from pathlib import Path
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch, deepspeed
    from transformers import LlamaConfig, LlamaForCausalLM
    from rlvr import RlvrError
    from rlvr.models.distributed import process_group_scope
    from rlvr.training.checkpoint import TrainState, deepspeed_safe_globals, load_checkpoint, save_checkpoint
    from rlvr.training.engine import distributed_env
    from rlvr.training.policy import without_shm_inference_op
    from rlvr.training.pool import PromptPool

    mode, ckpt_dir = sys.argv[1], Path(sys.argv[2])
    distributed_env()
    without_shm_inference_op()  # as rlvr's ranks start
    with process_group_scope():
        deepspeed.init_distributed(dist_backend="gloo")
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)
        config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
                  "zero_allow_untested_optimizer": True, "steps_per_print": 10**9}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), optimizer=optimizer,
                                          config=config)
        if mode == "save":
            ids = torch.randint(0, 64, (4, 8))
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            engine.step()
            random.seed(7)
            torch.manual_seed(7)
            pool = PromptPool(10, 0, retire_after=1)
            for index in pool.take(5):
                pool.record(index, [float(index % 2)] * 4)
            save_checkpoint(engine, ckpt_dir, TrainState(step=1), rank=0, data_position=5, keep_last=2,
                            pool=pool.state())
            print("POOL", json.dumps(pool.state()))
            allowed = {f"{c.__module__}.{c.__qualname__}" for c in deepspeed_safe_globals()}
            found = {name for f in (ckpt_dir / "step1").glob("*.pt")
                     for name in torch.serialization.get_unsafe_globals_in_checkpoint(f)}
            print("GLOBALS", json.dumps({"found": sorted(found), "allowed": sorted(allowed)}))
            print("EXPECT", random.random(), torch.rand(1).item())
        else:  # each checkpoints folder in turn, named by its parent folder (a refusal loads nothing)
            for ckpt_dir in map(Path, sys.argv[2:]):
                case = ckpt_dir.parent.name
                try:
                    state, position = load_checkpoint(engine, ckpt_dir, rank=0)
                except RlvrError as exc:
                    print(case, "REFUSED", exc)
                    continue
                print(case, "RESUMED", state.step, position, random.random(), torch.rand(1).item())
                print(case, "POOL", json.dumps(state.pool))
''')


def run_script(tmp_path, *args) -> subprocess.CompletedProcess:
    script = tmp_path / "ds_checkpoint.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=600)


def line(done: subprocess.CompletedProcess, tag: str) -> str:
    found = [row[len(tag) + 1:] for row in done.stdout.splitlines() if row.startswith(tag + " ")]
    assert found, (done.stdout[-2000:], done.stderr[-3000:])
    return found[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real DeepSpeed 0.19.8 checkpoint written by rlvr, and what a faithful resume must draw."""
    folder = tmp_path_factory.mktemp("ds")
    done = run_script(folder, "save", folder / "checkpoints")
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "checkpoints", json.loads(line(done, "GLOBALS")), line(done, "EXPECT"), json.loads(line(done, "POOL"))


def malicious_pickle(path: pathlib.Path, marker: pathlib.Path) -> None:
    """A torch.save file that creates ``marker`` when unpickled."""

    class Payload:
        def __reduce__(self):
            return (pathlib.Path.touch, (marker,))

    torch.save({"module": Payload()}, path)


def copy_of(saved, tmp_path) -> pathlib.Path:
    ckpt_dir = tmp_path / "checkpoints"
    shutil.copytree(saved[0], ckpt_dir)
    return ckpt_dir


def tamper(victim: str):
    def apply(ckpt_dir: pathlib.Path) -> None:
        assert (ckpt_dir / "step1" / victim).exists()
        malicious_pickle(ckpt_dir / "step1" / victim, ckpt_dir.parent / "pwned")
    return apply


def pickled_rank_file(pickled: str):
    def apply(ckpt_dir: pathlib.Path) -> None:
        (ckpt_dir / "step1" / "rlvr_rank0.json").unlink()
        malicious_pickle(ckpt_dir / "step1" / pickled, ckpt_dir.parent / "pwned")
    return apply


def latest_elsewhere(ckpt_dir: pathlib.Path) -> None:
    (ckpt_dir / "latest").write_text("../../elsewhere")


VICTIMS = ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"]
PICKLED = [("rng_rank0.pt", "older rlvr format"),  # a rank file of the old format, the JSON gone
           ("rlvr_rank0.json", "is not a valid rank state")]  # a pickle in place of the JSON
# Each case: a copy of the saved checkpoint, changed so. The untouched copy resumes last: the
# refusals before it must have loaded nothing.
CASES = {**{victim: tamper(victim) for victim in VICTIMS}, **{p: pickled_rank_file(p) for p, _ in PICKLED},
         "latest-elsewhere": latest_elsewhere, "untouched": lambda ckpt_dir: None}


@pytest.fixture(scope="module")
def resumed(saved, tmp_path_factory):
    """Each case's folder and what resuming from it printed (one process for all of them)."""
    root = tmp_path_factory.mktemp("resumes")
    folders = {}
    for case, change in CASES.items():
        folders[case] = copy_of(saved, root / case)
        change(folders[case])
    done = run_script(root, "resume", *folders.values())
    assert done.returncode == 0, done.stderr[-3000:]
    return {case: folder.parent for case, folder in folders.items()}, done


def test_the_allow_list_is_exactly_what_deepspeed_writes(saved):
    """Every global of a real checkpoint is allowed, and every allowed one is really needed."""
    _, globs, *_ = saved
    assert globs["found"], "ZeRO-2 optimizer states name DeepSpeed classes: the check saw none"
    assert set(globs["found"]) <= set(globs["allowed"])
    assert set(globs["allowed"]) - set(globs["found"]) <= {"deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"}  # fp16 only


def test_resume_restores_rng_and_position(saved, resumed):
    folders, done = resumed
    assert line(done, "untouched RESUMED") == f"1 5 {saved[2]}"
    assert json.loads(line(done, "untouched POOL")) == saved[3] and saved[3]["retired"]  # the prompt pool's state, too
    assert not list((folders["untouched"] / "checkpoints" / "step1").glob("*.part"))


@pytest.mark.parametrize("victim", VICTIMS)
def test_a_tampered_deepspeed_file_is_refused_unrun(resumed, victim):
    folders, done = resumed
    refusal = line(done, f"{victim} REFUSED")
    assert victim in refusal and "holds more than tensors and plain data" in refusal
    assert not (folders[victim] / "pwned").exists()


def test_the_payload_is_live(tmp_path):
    """The control: the same file unpickled the old way does run code."""
    marker = tmp_path / "pwned"
    malicious_pickle(tmp_path / "x.pt", marker)
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("pickled, message", PICKLED, ids=["old-format", "in-place-of-json"])
def test_a_pickled_rank_file_is_refused_unrun(resumed, pickled, message):
    folders, done = resumed
    assert message in line(done, f"{pickled} REFUSED")
    assert not (folders[pickled] / "pwned").exists()


def test_latest_must_name_a_checkpoint_of_the_run(resumed):
    _, done = resumed
    assert "not a checkpoint folder of this run" in line(done, "latest-elsewhere REFUSED")
