"""What tests/e2e/test_evaluation_compare_runs.py, tests/unit/test_evaluation_compare.py share."""

import json


def _write_eval(folder, passed_by_id, task="gsm8k", split="test"):
    folder.mkdir()
    with open(folder / "samples.jsonl", "w") as f:
        for pid, passed in passed_by_id.items():
            f.write(json.dumps({"id": pid, "samples": [{"completion": "x", "correct": p} for p in passed]}) + "\n")
    (folder / "report.json").write_text(json.dumps({"task": task, "split": split, "model": str(folder.name),
                                                    "samples_per_prompt": len(next(iter(passed_by_id.values())))}))
    return folder


def _write_seeded(folder, passed_by_id, seed, model="m", temperature=0.7):
    _write_eval(folder, passed_by_id)
    report = json.loads((folder / "report.json").read_text())
    report.update(seed=seed, model=model, temperature=temperature)
    (folder / "report.json").write_text(json.dumps(report))
    return folder
