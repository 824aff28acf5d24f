"""A secret is the user's, for a host, and goes nowhere else (rlvr.kit.http.user_secret: the checks
that run `rlvr` or other processes end to end (the e2e ring; the others:
tests/integration/test_kit_http_secrets.py, tests/unit/test_kit_http_secrets_pure.py)."""

from __future__ import annotations

import pytest

from helpers import one_line_error, run_rlvr
from helpers.kit_http_secrets import TRIAL

SECRET = "the-users-own-secret-0123456789abcdef"


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


def test_the_trials_recipe_is_refused_by_validate_in_one_line(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text(TRIAL.format(reward="judge", options="{base_url: 'http://127.0.0.1:9/v1', secret_env: HF_TOKEN}"))
    one_line_error(run_rlvr("validate", path, cwd=tmp_path),
                   "reward 'judge' option secret_env: a recipe does not choose where a secret is read from")


def test_the_command_line_gives_secrets_and_refuses_bad_ones_in_one_line(tmp_path, secret_file):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TRIAL.format(reward="http", options="{url: 'http://127.0.0.1:9/score'}"))
    out = run_rlvr("validate", recipe, "--secret", f"127.0.0.1:9={secret_file}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    one_line_error(run_rlvr("validate", recipe, "--secret", "127.0.0.1:9=missing.secret", cwd=tmp_path),
                   "option url: 'http://127.0.0.1:9/score': the secret for 127.0.0.1:9: cannot read the secret file "
                   "missing.secret")
    one_line_error(run_rlvr("validate", recipe, "--secret", "a=b,c=d", cwd=tmp_path),
                   "one HOST=FILE per --secret")
