"""TRL's conversational data as TRL takes it: the checks that run `rlvr` or other processes end to
end (the e2e ring; the others: tests/unit/test_recipe_trl_data.py)."""

from __future__ import annotations



from helpers.recipe_trl_data import TRL_ROWS, trl_recipe

def test_rlvr_validate_data_reads_a_trl_dataset_and_refuses_a_repr_in_one_line(tmp_path, rlvr_cmd):
    from helpers import one_line_error

    trl_recipe(tmp_path, TRL_ROWS)
    out = rlvr_cmd("validate", "--data", tmp_path / "r.yaml")
    assert out.returncode == 0 and "train: " in out.stdout and "ok (dataset" in out.stdout, out.stdout + out.stderr
    trl_recipe(tmp_path, TRL_ROWS, {"template": "Solve: {{prompt}}"})
    one_line_error(rlvr_cmd("validate", "--data", tmp_path / "r.yaml"),
                   "prompt field {{prompt}}: column 'prompt' holds chat messages")


def test_training_on_a_trl_dataset_shows_the_turns_and_gives_trl_rewards_messages(tmp_path, tiny_model):
    import rlvr.api

    seen = []

    def exact(prompts, completions, **kwargs):  # as written for TRL
        seen.extend(prompts)
        return [float(c[0]["content"].strip() == s) for c, s in zip(completions, kwargs["solution"])]

    recipe = {"name": "trl", "task": {"name": "sums", "options": {}}, "rewards": {"exact": 1.0},
              "model": {"name": str(tiny_model)}, "sampling": {"backend": "hf", "max_tokens": 4, "num_generations": 2},
              "trainer": {"steps": 2, "rollout_batch_size": 4, "micro_batch_size": 4, "samples_every": 1}}
    result = rlvr.api.train(recipe, rewards={"exact": exact}, tasks={"sums": TRL_ROWS}, output_dir=tmp_path / "run")
    assert seen and all(p[0] == {"role": "system", "content": "Reply with a number."} and p[1]["role"] == "user"
                        for p in seen)
    shown = result.samples(1)[0]["prompt"]
    assert "<|im_start|>user\nWhat is" in shown and "{'role'" not in shown
