"""An outbox sender that POSTs each effect as JSON with an ``Idempotency-Key`` header.

The receiver must dedupe on that key: the outbox delivers at least once, so the same key can
arrive twice after a crash between delivering and marking.

Only a 2xx answer to the POST is a delivery. A redirect is not one: following it would turn the
POST into a GET without its body (301, 302, 303) or send the effect somewhere the sender was never
told to send it, so a 3xx fails the send, naming the status and the ``Location``, and the row stays
unsent until the receiver url is corrected.

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

import base64
import json
import urllib.parse
from typing import Any

from ._errors import BadRequest, ConnectionFailed, InvalidInput, RateLimited, ServerError

__all__ = ["HttpSender", "encode_idempotency_key", "decode_idempotency_key", "RESPONSE_BYTES_MAX"]

# Printable ASCII but "%" (the escape character itself): what a key may carry as it is.
KEY_SAFE_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")

# How much of a 2xx answer's body is read before the connection is closed: the status is the
# answer, the body only lets the receiver finish its reply, and a receiver that streams without end
# must not keep the sender reading.
RESPONSE_BYTES_MAX = 64 * 1024

# How much of a redirect's Location is quoted in last_error (a hostile receiver could send 64 KiB).
LOCATION_CHARS_MAX = 200


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
    """POST ``{"kind": ..., "payload": ...}`` to ``url``; raise a typed error unless it answers 2xx.

    A ``user:password@`` in ``url`` is sent as HTTP Basic authentication. The sender talks to the
    receiver directly (no proxy) and never follows a redirect.
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = check_receiver_url(url)
        self.timeout_s = timeout_s
        parts = urllib.parse.urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._authorization = _basic_authorization(parts)

    def send(self, key: str, kind: str, payload: Any) -> None:
        # Imported on the first send: http.client brings email and ssl, about 3 MB that every
        # process importing the engine would otherwise carry (a crash matrix forks hundreds of
        # them, and a fork costs in proportion to the memory it copies).
        import http.client

        body = json.dumps({"kind": kind, "payload": payload}, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": encode_idempotency_key(key)}
        if self._authorization:
            headers["Authorization"] = self._authorization
        connection_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = connection_class(self._host, self._port, timeout=self.timeout_s)
        try:
            connection.request("POST", self._target, body=body, headers=headers)
            response = connection.getresponse()
            status = response.status
            if 200 <= status < 300:
                response.read(RESPONSE_BYTES_MAX)
                return
            self._refuse(status, response.getheader("Location"), response.getheader("Retry-After"))
        except (http.client.HTTPException, OSError) as exc:
            raise ConnectionFailed(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        finally:
            connection.close()

    def _refuse(self, status: int, location: str | None, retry_after: str | None) -> None:
        """Raise the error a non-2xx ``status`` means for the row: retried later, never marked sent."""
        if 300 <= status < 400:
            shown = "no Location" if location is None else f"Location: {location[:LOCATION_CHARS_MAX]!r}"
            raise BadRequest(
                f"{status} redirect from {self.url} ({shown}): a redirect is not a delivery, the effect was not "
                "sent; point the receiver url at the address that accepts the POST"
            )
        if status == 429:
            raise RateLimited(f"429 from {self.url}", float(retry_after) if retry_after else None)
        if status >= 500:
            raise ServerError(f"{status} from {self.url}", status)
        raise BadRequest(f"{status} from {self.url}")


def _basic_authorization(parts: urllib.parse.SplitResult) -> str | None:
    """The ``Authorization`` header a url's ``user:password@`` asks for, if it has one."""
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
