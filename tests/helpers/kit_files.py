"""What tests/e2e/test_kit_files_runs.py, tests/integration/test_kit_files_live.py, tests/unit/test_kit_files.py share."""

import os
import subprocess
from pathlib import Path


def as_user(uid, *command, **kw):
    """Run ``command`` as ``uid`` (its own group, no others)."""
    return subprocess.run(command, user=uid, group=uid, extra_groups=[], capture_output=True, text=True, **kw)


def private_file(base: Path, owner: int) -> Path:
    """``base/private/secret``: mode 0600 in a 0700 folder, both ``owner``'s."""
    folder = base / f"private-{owner}"
    folder.mkdir(mode=0o700)
    secret = folder / "secret"
    secret.write_text("only the owner may change this\n")
    secret.chmod(0o600)
    os.chown(folder, owner, owner)
    os.chown(secret, owner, owner)
    return secret
