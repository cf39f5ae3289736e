"""An outbox sender that POSTs each effect as JSON with an ``Idempotency-Key`` header.

The receiver must dedupe on that key: the outbox delivers at least once, so the same key can
arrive twice after a crash between delivering and marking.

A header holds only Latin-1 and no line break, while a key (``job_id:kind``) may hold any
character. So the header carries the key percent-encoded as UTF-8 (RFC 3986): every byte outside
printable ASCII, and ``%`` itself, becomes ``%XX``. A plain ASCII key without ``%`` travels
unchanged; :func:`decode_idempotency_key` gives any key back exactly.

>>> encode_idempotency_key("doc-1:delivery")
'doc-1:delivery'
>>> encode_idempotency_key("文書:delivery")
'%E6%96%87%E6%9B%B8:delivery'
>>> decode_idempotency_key(encode_idempotency_key("a\\r\\nb 100%"))
'a\\r\\nb 100%'
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from ._errors import BadRequest, ConnectionFailed, InvalidInput, RateLimited, ServerError

__all__ = ["HttpSender", "encode_idempotency_key", "decode_idempotency_key"]

# Printable ASCII but "%" (the escape character itself): what a key may carry as it is.
KEY_SAFE_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def encode_idempotency_key(key: str) -> str:
    """``key`` as an ``Idempotency-Key`` header value: printable ASCII, percent-encoded UTF-8."""
    return urllib.parse.quote(key, safe=KEY_SAFE_CHARS, encoding="utf-8", errors="surrogatepass")


def decode_idempotency_key(value: str) -> str:
    """The key an ``Idempotency-Key`` header value carries (the inverse of :func:`encode_idempotency_key`)."""
    return urllib.parse.unquote(value, encoding="utf-8", errors="surrogatepass")


def check_receiver_url(url: str) -> str:
    """``url`` if a POST can be sent to it; else :class:`InvalidInput` saying what is wrong, before
    any row is sent (a malformed url failed every due effect and pushed its retry back).

    >>> check_receiver_url("http://127.0.0.1:8080/effects")
    'http://127.0.0.1:8080/effects'
    """
    example = "e.g. http://127.0.0.1:8080/effects"
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"receiver url {url!r} must start with http:// or https://, {example}")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise InvalidInput(f"receiver url {url!r} holds a space or a control character; percent-encode it, {example}")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # raises for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise InvalidInput(f"receiver url {url!r} is malformed ({exc}), {example}") from None
    if not parts.hostname:
        raise InvalidInput(f"receiver url {url!r} names no host, {example}")
    return url


class HttpSender:
    """POST ``{"kind": ..., "payload": ...}`` to ``url``; raise a typed error on failure."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = check_receiver_url(url)
        self.timeout_s = timeout_s

    def send(self, key: str, kind: str, payload: Any) -> None:
        # Imported on the first send: urllib.request brings http.client, email and ssl, about 3 MB
        # that every process importing the engine would otherwise carry (a crash matrix forks
        # hundreds of them, and a fork costs in proportion to the memory it copies).
        import urllib.error
        import urllib.request

        body = json.dumps({"kind": kind, "payload": payload}, sort_keys=True).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": encode_idempotency_key(key)},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 429:
                retry_after = exc.headers.get("Retry-After")
                raise RateLimited(f"429 from {self.url}", float(retry_after) if retry_after else None) from exc
            if exc.code >= 500:
                raise ServerError(f"{exc.code} from {self.url}", exc.code) from exc
            raise BadRequest(f"{exc.code} from {self.url}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionFailed(f"{self.url}: {exc}") from exc
