"""What the rewards that ask a service (``http``, ``judge``) share: their options' types, checked
by ``rlvr validate`` before any model loads (the URL with the proxy the environment names for
it, and the user's secret for its host), the secret, and the warning about sending it in clear
text.

A secret is the user's, never the recipe's (a recipe is data people hand each other: one that
named ``~/.git-credentials`` as a secret file and its own URL as the service got the user's token):
the user gives it for a host, ``--secret HOST=FILE`` or ``RLVR_SECRETS``
(``rlvr.kit.http.user_secret``), and it goes to that host only. It is read when the options are
checked (a missing file is a one-line error there), and again at every call, so a secret
rotated in its file is picked up.
"""

from __future__ import annotations

import logging
import threading
from typing import Annotated

from annotated_types import Ge, Gt, Le
from pydantic import AfterValidator

from rlvr.kit.http import check_url, cleartext, proxy_for, user_secret

__all__ = ["Backoff", "Concurrency", "ResponseBytes", "Retries", "Seconds", "Url", "secret_for", "service_url"]

log = logging.getLogger("rlvr.rewards.services")


def service_url(url: str) -> str:
    """``url`` when rlvr can POST to it (``check_url``) through the proxy the environment names for
    it, if any, with the secret the user gave for its host, if any, readable; else a one-line
    ``ValueError``: so all three are refused before any model loads."""
    check_url(url)
    proxy_for(url)
    user_secret(url)
    return url


Url = Annotated[str, AfterValidator(service_url)]
Seconds = Annotated[float, Gt(0), Le(3600)]
Retries = Annotated[int, Ge(0), Le(10)]
Backoff = Annotated[float, Ge(0), Le(60)]
Concurrency = Annotated[int, Ge(1), Le(256)]
ResponseBytes = Annotated[int, Ge(1024), Le(1 << 30)]


_warned: set[str] = set()
_warned_lock = threading.Lock()


def secret_for(reward: str, url: str) -> tuple[str, str | None]:
    """(the secret to send to ``url``, None), or ("", why it cannot be read now, for the records'
    ``why``): the one the user gave for its host; no secret when the user gave none. The first
    time a secret would cross the network unencrypted (plain http to another host), a warning
    says so, once per process and URL."""
    try:
        secret, _ = user_secret(url)
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
