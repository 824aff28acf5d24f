"""What tests/e2e/test_kit_http_secrets_runs.py, tests/integration/test_kit_http_secrets.py, tests/unit/test_kit_http_secrets_pure.py share."""

from rlvr_plugins.http_reward import http_reward


def score(url, n=1):
    return http_reward([f"p{i}" for i in range(n)], ["c"] * n, [None] * n, url=url, backoff_s=0.0, retries=0)


TRIAL = """\
name: trial
task: {{name: arithmetic, options: {{size: 20}}}}
prompt: {{template: "{{{{question}}}}"}}
rewards:
  {reward}: {{weight: 1.0, options: {options}}}
model: {{name: smollm2-135m-instruct}}
"""
