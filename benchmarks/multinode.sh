#!/usr/bin/env bash
# DeepSpeed's multi-node launcher (pdsh over ssh), run for real on ONE machine.
#
#   benchmarks/multinode.sh          # set up, then train 2 steps twice (hf, then vLLM server mode)
#   benchmarks/multinode.sh setup    # only the set-up and a `pdsh ... hostname` check
#
# Two "nodes" are this machine under two names (rlvr-node1, rlvr-node2 -> 127.0.0.1), reached
# by ssh, one trainer rank on each (hostfile `slots=1`), gloo on CPU. DeepSpeed's runner takes
# the path it takes on a cluster: ssh check, master address from `ssh <first host> hostname -I`,
# `pdsh -w rlvr-node1,rlvr-node2` running deepspeed.launcher.launch on each "node", environment
# from .deepspeed_env.
#
# THIS SCRIPT MODIFIES THE SYSTEM (run as root, Debian/Ubuntu); each step is skipped when done:
#   - apt-get installs openssh-server, openssh-client and pdsh;
#   - /etc/hosts gets "127.0.0.1 rlvr-node1" and "127.0.0.1 rlvr-node2" (names that resolve already are left);
#   - root gets an ssh key ~/.ssh/id_ed25519 (only if it has none) authorized for itself
#     (~/.ssh/authorized_keys);
#   - /etc/ssh/ssh_config.d/rlvr-multinode.conf turns host-key checking off for those two names;
#   - sshd is started (and left running).
# Nothing is written into the checkout or over ~/.deepspeed_env: the hostfile, .deepspeed_env,
# the tiny model, the recipe and the runs go to a temporary folder (kept, printed at the end),
# and DeepSpeed runs from there (it reads .deepspeed_env from ~ and from its working folder).
#
# Needs `make install` first (.venv). Environment knobs:
#   MULTINODE_DIR  the work folder (default: a new mktemp -d folder)
#   MASTER_ADDR_ARG  passed as `--master_addr` (default: none, DeepSpeed asks the first host)
#   WAIT_FOR_IDLE  1 (default): before training, wait (poll 60 s, at most 40 min) until no
#                  `rlvr train|bench_trl|bench_sync` process runs on this machine
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
PY="$VENV/bin/python"
NODES=(rlvr-node1 rlvr-node2)
MODE="${1:-all}"

say() { printf '\n== %s\n' "$*"; }
# Print a command, run it, print how long it took.
run() {
    printf '+ %s\n' "$*"
    local start=$SECONDS
    "$@"
    printf '  (%d s)\n' $((SECONDS - start))
}

[[ "$MODE" == all || "$MODE" == setup ]] || { echo "usage: $0 [all|setup]" >&2; exit 2; }
[[ $EUID -eq 0 ]] || { echo "run as root: this script installs packages and starts sshd" >&2; exit 2; }
[[ -x "$PY" && -x "$VENV/bin/deepspeed" ]] || { echo "no $VENV with deepspeed: run \`make install\` first" >&2; exit 2; }

# ---- set-up (idempotent) -------------------------------------------------------------------

say "packages: sshd, ssh, pdsh"
if command -v sshd >/dev/null && command -v ssh >/dev/null && command -v pdsh >/dev/null; then
    echo "already installed"
else
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        openssh-server openssh-client pdsh
fi

say "host names ${NODES[*]} -> 127.0.0.1"
for node in "${NODES[@]}"; do
    # getent, not grep: the name may already resolve some other way (DNS, an older line)
    if getent hosts "$node" >/dev/null; then
        echo "$node resolves: $(getent hosts "$node")"
    else
        run sh -c "echo '127.0.0.1 $node' >> /etc/hosts"
    fi
done

say "root's ssh key, authorized for itself"
mkdir -p -m 700 ~/.ssh
[[ -f ~/.ssh/id_ed25519 ]] || run ssh-keygen -q -t ed25519 -N "" -f ~/.ssh/id_ed25519
touch ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys
if grep -qxF "$(cat ~/.ssh/id_ed25519.pub)" ~/.ssh/authorized_keys; then
    echo "already authorized"
else
    run sh -c "cat ~/.ssh/id_ed25519.pub >> ~/.ssh/authorized_keys"
fi

say "no host-key prompts for ${NODES[*]}"
SSH_DROPIN=/etc/ssh/ssh_config.d/rlvr-multinode.conf
if [[ -f "$SSH_DROPIN" ]]; then
    echo "$SSH_DROPIN exists"
else
    # A drop-in of its own (Debian's ssh_config includes ssh_config.d/*.conf), scoped to the
    # two names: the user's own ~/.ssh/config is not touched.
    cat > "$SSH_DROPIN" <<EOF
# written by rlvr benchmarks/multinode.sh: two names of this machine, used as two "nodes"
Host ${NODES[*]}
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
EOF
    echo "wrote $SSH_DROPIN"
fi

say "sshd"
if ssh -o BatchMode=yes -o ConnectTimeout=5 "${NODES[0]}" true 2>/dev/null; then
    echo "sshd answers"
else
    [[ -f /etc/ssh/ssh_host_ed25519_key ]] || run ssh-keygen -A
    mkdir -p /run/sshd  # privilege-separation folder; no systemd here to make it
    run /usr/sbin/sshd   # daemonizes; left running on purpose
    for _ in $(seq 20); do
        ssh -o BatchMode=yes -o ConnectTimeout=5 "${NODES[0]}" true 2>/dev/null && break
        sleep 0.5
    done
fi

say "pdsh over ssh to both nodes (what DeepSpeed's runner will do)"
run env PDSH_RCMD_TYPE=ssh pdsh -w "$(IFS=,; echo "${NODES[*]}")" hostname

[[ "$MODE" == setup ]] && exit 0

# ---- work folder: hostfile, .deepspeed_env, tiny model, recipe ------------------------------

WORK="${MULTINODE_DIR:-$(mktemp -d /tmp/rlvr-multinode.XXXXXX)}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
MARK="RLVR_MULTINODE_RUN=$WORK"  # in every process the runs start (through .deepspeed_env): for clean-up
say "work folder $WORK"

printf '%s slots=1\n' "${NODES[@]}" > "$WORK/hostfile"

# pdsh starts each node's launcher in a fresh ssh login: only what DeepSpeed exports reaches it
# (PYTHON*, MLFLOW*, MV2*, UCX* variables, PYTHONPATH=<working folder>, and .deepspeed_env). So:
# the CPU accelerator, one thread per rank (2 ranks share this machine), the venv's bin first on
# PATH (the ranks run the venv's python already: DeepSpeed starts `sys.executable` remotely),
# and the clean-up mark.
cat > "$WORK/.deepspeed_env" <<EOF
DS_ACCELERATOR=cpu
OMP_NUM_THREADS=1
PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HF_HUB_OFFLINE=1
$MARK
EOF
if [[ -f ~/.deepspeed_env ]]; then
    echo "note: DeepSpeed also reads your ~/.deepspeed_env (first; this run's $WORK/.deepspeed_env wins on shared keys)"
fi

# The tiny model: a random-init 2-layer Llama with SmolLM2's tokenizer (as tests/conftest.py).
if [[ ! -f "$WORK/tiny-model/config.json" ]]; then
    run "$PY" - "$WORK/tiny-model" <<'EOF'
import sys

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rlvr.models.hub import resolve_model

folder = sys.argv[1]
tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                  tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
torch.manual_seed(0)
LlamaForCausalLM(cfg).save_pretrained(folder)
tok.save_pretrained(folder)
EOF
fi

# tests/test_training_engine.py's RECIPE with the built-in math reward (tasks/demo.yaml's) instead of a
# test plugin: 4 prompts x 4 samples a step, 8 completions per rank. A random-init model scores 0
# on every sample (no advantage, no gradient from the reward), so the KL term is k1 in the loss:
# its gradient is not 0 even where the policy equals the reference, so step 0 changes the weights
# and step 1 shows whether they reached the sampler.
cat > "$WORK/tiny.yaml" <<EOF
name: tiny-multinode
task: {name: arithmetic, options: {size: 64}}
prompt: {template: "{{question}}", system: "Answer in \\\\boxed{}."}
rewards:
  math: {weight: 1.0, options: {extract: auto}}
model: {name: $WORK/tiny-model}
sampling: {backend: hf, num_generations: 4, max_tokens: 12}
trainer: {steps: 2, rollout_batch_size: 16, micro_batch_size: 4, lr: 1.0e-3, schedule: linear, zero_stage: 2, save_every: 1, keep_last: 2}
algorithm: {clip: {eps_low: 0.2, eps_high: 0.28}, ppo_epochs: 2, kl: {beta: 0.1, estimator: k1, target: loss}}
EOF

# ---- clean-up: every process whose environment carries this run's mark ----------------------

marked_pids() {
    local pid
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [[ $pid == "$$" ]] && continue
        tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" | grep -qxF "$MARK" && echo "$pid"
    done
    return 0
}
cleanup() {
    local pids
    pids="$(marked_pids)"
    [[ -z "$pids" ]] && return 0
    echo "cleaning up processes of this run: $(echo $pids)"
    kill -TERM $pids 2>/dev/null || true
    sleep 5
    pids="$(marked_pids)"
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null || true
    return 0
}
trap cleanup EXIT

# ---- wait until the machine is free of other trainings --------------------------------------

wait_for_idle() {
    [[ "${WAIT_FOR_IDLE:-1}" == 1 ]] || return 0
    local waited=0
    while pgrep -f "rlvr train|bench_trl|bench_sync" >/dev/null; do
        if (( waited >= 2400 )); then
            echo "gave up: other trainings still running after 40 min:" >&2
            pgrep -af "rlvr train|bench_trl|bench_sync" >&2
            exit 3
        fi
        echo "waiting for other trainings to end ($((waited / 60)) min so far): $(pgrep -f "rlvr train|bench_trl|bench_sync" | tr '\n' ' ')"
        sleep 60
        waited=$((waited + 60))
    done
}

# ---- the two runs ---------------------------------------------------------------------------

# $1: output folder, $2: server|colocate. Exactly 2 rows in metrics.jsonl, steps 0 and 1; a
# gradient at step 0; both ranks wrote (rank 1's log, both ZeRO optimizer shards); in server mode
# the sampler held the trainer's weights at every step (importance weights 1, mismatch ~0: step 1
# samples after the broadcast of step 0's update).
check_run() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
from pathlib import Path

out, mode = Path(sys.argv[1]), sys.argv[2]
rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
steps = [r["step"] for r in rows]
assert steps == [1, 2], f"{out}: steps {steps}, want [1, 2]"
for r in rows:
    print(f"  step {r['step']}: loss {r['loss']:+.5f}  kl {r['kl']:.2e}  grad_norm {r['grad_norm']:.4f}  "
          f"reward_mean {r['reward_mean']}  mismatch_k3 {r.get('mismatch_k3', 0):.1e}  "
          f"is_weight_mean {r.get('is_weight_mean', 1):.6f}  time_step {r['time_step']:.1f} s")
assert rows[0]["grad_norm"] > 0, "no gradient at step 0"
assert rows[1]["kl"] != 0, "step 0 did not move the policy away from the reference"
assert (out / "train.rank1.log").is_file(), "rank 1 wrote no log"
shards = sorted(p.name for p in (out / "checkpoints" / "step2").glob("zero_pp_rank_*_optim_states.pt"))
assert len(shards) == 2, f"want 2 ZeRO optimizer shards (one per rank), got {shards}"
if mode == "server":
    for r in rows:
        assert abs(r["is_weight_mean"] - 1) < 2e-3 and r["mismatch_k3"] < 1e-4, f"sampler weights stale: {r}"
print(f"  {out}: steps {steps}, 2 ranks ({', '.join(shards)}): ok")
EOF
}

train() {  # $1: run name, $2: server|colocate; the rest: --set overrides
    local name=$1 mode=$2 sets=() kv
    shift 2
    for kv in "$@"; do sets+=(--set "$kv"); done
    local master=()
    [[ -n "${MASTER_ADDR_ARG:-}" ]] && master=(--master_addr "$MASTER_ADDR_ARG")
    wait_for_idle
    say "run $name: $*"
    rm -rf "$WORK/$name"
    # From the work folder: DeepSpeed reads ./.deepspeed_env and each node `cd`s to this folder.
    (cd "$WORK" && run timeout 1200 "$VENV/bin/deepspeed" --hostfile "$WORK/hostfile" "${master[@]}" \
        --no_local_rank --module rlvr.cli train "$WORK/tiny.yaml" --output-dir "$WORK/$name" "${sets[@]}")
    check_run "$WORK/$name" "$mode"
    local left
    left="$(marked_pids)"
    if [[ -n "$left" ]]; then
        echo "processes left behind by run $name:" >&2
        for pid in $left; do echo "  $pid $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null)" >&2; done
        exit 1
    fi
    echo "  no process of run $name left"
}

train run-hf colocate "sampling.backend=hf"
train run-server server "sampling.backend=vllm" "sampling.mode=server"

say "both runs passed; everything is in $WORK (hostfile, .deepspeed_env, tiny.yaml, run-hf, run-server; $(du -sh "$WORK" | cut -f1): remove it when done)"
