"""Secrets in urls are never stored or shown: a password, a query string's values, a ``password=``.

A receiver url may carry its credentials (``http://user:secret@host/effects``, ``?token=...``),
and an error naming the url would otherwise copy them into ``outbox.last_error``, which ``status``
prints and which anyone reading the database sees. So every url the engine writes into a message
goes through :func:`redact_url`, every error text it stores or shows through
:func:`redact_secrets`. A query string's values are all hidden, not only those with secret-looking
names: a webhook's signature is as often ``?sig=`` or ``?k=`` as ``?token=``.

>>> redact_url("http://user:s3cret@127.0.0.1:8080/effects?token=abc&v=2")
'http://user:***@127.0.0.1:8080/effects?token=***&v=***'
>>> redact_secrets("ConnectionFailed: http://u:pw@h/x: refused; dsn host=db password=pw")
'ConnectionFailed: http://u:***@h/x: refused; dsn host=db password=***'
"""

from __future__ import annotations

import re

__all__ = ["redact_url", "redact_secrets", "HIDDEN"]

HIDDEN = "***"

# A url as it appears inside a text: a scheme, "://", then everything up to a space or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# key=value pairs that name a secret, outside urls too (a libpq connection string, a log line).
_SECRET_PAIR = re.compile(r"(?i)\b(password|passwd|pwd|secret|token|api_?key|access_token|auth)=([^\s&'\";]+)")


def redact_url(url: str) -> str:
    """``url`` with its userinfo password and every query value replaced by ``***``.

    Works on malformed urls too (it only splits text), so a url refused as malformed can still be
    named in the error that refuses it.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The userinfo ends at the last "@" before the path: a password may hold an unencoded "?" or
    # "#" (a malformed url, still to be named without it), never a "/" before the host.
    slash = rest.find("/")
    head = rest if slash < 0 else rest[:slash]
    if "@" in head:
        userinfo, host = head.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = f"{userinfo.split(':', 1)[0]}:{HIDDEN}"
        rest = f"{userinfo}@{host}{rest[len(head):]}"
    before, qmark, query = rest.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        pairs = [f"{p.split('=', 1)[0]}={HIDDEN}" if "=" in p else p for p in query.split("&")]
        rest = f"{before}?{'&'.join(pairs)}{hash_}{fragment}"
    return f"{scheme}://{rest}"


def redact_secrets(text: str) -> str:
    """``text`` with every url in it redacted (:func:`redact_url`) and every ``password=...``-like
    pair's value hidden."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}={HIDDEN}", text)
