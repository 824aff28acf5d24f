"""What tests/integration/test_plugins_http_reward.py, tests/unit/test_plugins_http_reward_pure.py share."""

from helpers.loopback import user_secret
from rlvr_plugins.http_reward import http_reward


def score(url, completions, prompts=None, secret_file="", secret_env="", **options):
    """The reward on ``completions``; with the user's secret for the URL's host when given
    (``--secret HOST:PORT=FILE`` or ``=env:VARIABLE``)."""
    prompts = prompts or [f"p{i}" for i in range(len(completions))]
    options.setdefault("backoff_s", 0.0)
    with user_secret(url, secret_file, secret_env):
        return http_reward(prompts, completions, [None] * len(completions), url=url, **options)
