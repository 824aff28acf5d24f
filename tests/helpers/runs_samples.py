"""What tests/e2e/test_runs_samples_runs.py, tests/unit/test_runs_samples.py share."""

from rlvr.sampling.samplers import Completion
from rlvr.training.rollout import Rollout

VOCAB = {1: "Let me ", 2: "run.\n```python\nprint(6*7)\n```\n", 3: "```output\n", 4: "42\n```\n", 5: "42", 9: "Q?"}


def decode(ids):
    return "".join(VOCAB[i] for i in ids)


def rollout():
    episode = Completion(decode([1, 2, 3, 4, 5]), [1, 2, 3, 4, 5], False, mask=[1, 1, 0, 0, 1])
    wrong = Completion("41", [5], True)
    return Rollout(group_size=2, prompt_ids=[[9], [9]], completions=[episode, wrong, wrong, episode],
                   rewards=[1.2, None, 0.0, 1.2], reward_values={"math": [1.0, None, 0.0, 1.0], "tool_call": [1, 0, 0, 1]},
                   reward_infos={"math": [{"why": "equal"}, None, {"why": "not equal"}, {}], "tool_call": [None] * 4})
