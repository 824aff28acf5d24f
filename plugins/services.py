"""What the rewards that ask a service (``http``, ``judge``) share: their options' types, checked
by ``rlvr validate`` before any model loads (the URL with the proxy the environment names for
it), the secret, and the warning about sending it in clear text.

The secret is never an option's value (a recipe is copied, logged and committed): ``secret_file``
names a file whose first line it is, ``secret_env`` an environment variable that holds it. Both
are read when the options are checked (a missing file or unset variable is a one-line error
there), and again at every call, so a secret rotated in its file is picked up.
"""

from __future__ import annotations

import logging
import threading
from typing import Annotated

from annotated_types import Ge, Gt, Le
from pydantic import AfterValidator

from rlvr.kit.http import check_url, cleartext, proxy_for, read_secret

__all__ = ["Backoff", "Concurrency", "ResponseBytes", "Retries", "SecretEnv", "SecretFile", "Seconds", "Url",
           "secret_for", "service_url"]

log = logging.getLogger("rlvr.rewards.services")


def _secret_file(path: str) -> str:
    read_secret(secret_file=path)
    return path


def _secret_env(name: str) -> str:
    read_secret(secret_env=name)
    return name


def service_url(url: str) -> str:
    """``url`` when rlvr can POST to it (``check_url``) through the proxy the environment names for
    it, if any; else a one-line ``ValueError``: so both are refused before any model loads."""
    check_url(url)
    proxy_for(url)
    return url


Url = Annotated[str, AfterValidator(service_url)]
SecretFile = Annotated[str, AfterValidator(_secret_file)]  # "": none
SecretEnv = Annotated[str, AfterValidator(_secret_env)]  # "": none
Seconds = Annotated[float, Gt(0), Le(3600)]
Retries = Annotated[int, Ge(0), Le(10)]
Backoff = Annotated[float, Ge(0), Le(60)]
Concurrency = Annotated[int, Ge(1), Le(256)]
ResponseBytes = Annotated[int, Ge(1024), Le(1 << 30)]


_warned: set[str] = set()
_warned_lock = threading.Lock()


def secret_for(reward: str, url: str, secret_file: str, secret_env: str) -> tuple[str, str | None]:
    """(the secret to send to ``url``, None), or ("", why it cannot be read now, for the records'
    ``why``): ``secret_file`` first, else ``secret_env``; no secret when neither is given. The
    first time a secret would cross the network unencrypted (plain http to another host), a
    warning says so, once per process and URL."""
    try:
        secret = read_secret(secret_file, secret_env)
    except ValueError as exc:
        return "", f"no secret: {exc}"
    if secret and cleartext(url):
        with _warned_lock:
            first = url not in _warned
            _warned.add(url)
        if first:
            log.warning("%s reward: its secret goes to %s in clear text (http:// to another host); use https://",
                        reward, url.split("?", 1)[0])
    return secret, None
