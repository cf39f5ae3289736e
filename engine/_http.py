"""An outbox sender that POSTs each effect as JSON with an ``Idempotency-Key`` header.

The receiver must dedupe on that key: the outbox delivers at least once, so the same key can
arrive twice after a crash between delivering and marking.

Each request has one deadline, ``timeout_s`` after it starts, for the connection, the request and
the answer together: a receiver that trickles its reply a byte at a time, or says nothing, fails the
send with :class:`~engine.StepTimeout` once the deadline passes, and the row records it.

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
import io
import json
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from ._clock import Clock, SystemClock
from ._errors import BadRequest, ConnectionFailed, InvalidInput, RateLimited, ServerError, StepTimeout
from ._redact import redact_url
from ._retry import RETRY_AFTER_S_MAX, parse_retry_after

if TYPE_CHECKING:
    import socket

__all__ = ["HttpSender", "encode_idempotency_key", "decode_idempotency_key", "RESPONSE_BYTES_MAX"]

# Printable ASCII but "%" (the escape character itself): what a key may carry as it is.
KEY_SAFE_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")

# How much of a 2xx answer's body is read before the connection is closed: the status is the
# answer, the body only lets the receiver finish its reply, and a receiver that streams without end
# must not keep the sender reading.
RESPONSE_BYTES_MAX = 64 * 1024

# How much of a header (a redirect's Location, a Retry-After) is quoted in last_error: a hostile
# receiver could send 64 KiB.
HEADER_CHARS_MAX = 200


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
    shown = redact_url(url)  # the url's password and query values are never echoed
    if not url.startswith(("http://", "https://")):
        raise InvalidInput(f"receiver url {shown!r} must start with http:// or https://, {example}")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise InvalidInput(f"receiver url {shown!r} holds a space or a control character; percent-encode it, {example}")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # raises for a port that is not a number from 0 to 65535
    except ValueError as exc:
        # urlsplit's message quotes the text it read as a port, which may be part of a password.
        detail = "its port or its user:password@ cannot be read" if "@" in url else str(exc)
        raise InvalidInput(f"receiver url {shown!r} is malformed ({detail}), {example}") from None
    if not parts.hostname:
        raise InvalidInput(f"receiver url {shown!r} names no host, {example}")
    return url


class HttpSender:
    """POST ``{"kind": ..., "payload": ...}`` to ``url``; raise a typed error unless it answers 2xx.

    A ``user:password@`` in ``url`` is sent as HTTP Basic authentication. The sender talks to the
    receiver directly (no proxy) and never follows a redirect. A 429's ``Retry-After``, in seconds
    or as an HTTP-date (counted from ``clock``), becomes :attr:`RateLimited.retry_after_s`.
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, clock: Clock | None = None) -> None:
        self.url = check_receiver_url(url)
        self.shown_url = redact_url(url)  # what every message names: no password, no query values
        self.timeout_s = timeout_s
        self.clock = clock or SystemClock()
        parts = urllib.parse.urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._authorization = _basic_authorization(parts)

    def send(self, key: str, kind: str, payload: Any) -> None:
        body = json.dumps({"kind": kind, "payload": payload}, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": encode_idempotency_key(key)}
        if self._authorization:
            headers["Authorization"] = self._authorization
        # Imported on the first send: http.client brings email and ssl, about 3 MB that every
        # process importing the engine would otherwise carry (a crash matrix forks hundreds of
        # them, and a fork costs in proportion to the memory it copies).
        import http.client

        try:
            status, location, retry_after = self._post(body, headers)
        except TimeoutError as exc:  # before OSError: socket.timeout is one
            raise StepTimeout(
                f"{self.shown_url}: no complete answer within {self.timeout_s:g} s (connect, send and read together); "
                "the effect may or may not have been applied and is sent again later"
            ) from exc
        except (http.client.HTTPException, OSError) as exc:
            raise ConnectionFailed(f"{self.shown_url}: {type(exc).__name__}: {exc}") from exc
        if not 200 <= status < 300:
            self._refuse(status, location, retry_after)

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str | None, str | None]:
        """POST ``body``; ``(status, Location, Retry-After)`` of the answer, all within one deadline.

        The deadline is real elapsed time (``time.monotonic``), not the injected clock: it bounds
        how long this process waits on a socket, which a fake clock cannot shorten.
        """
        import http.client
        import socket

        deadline = _Deadline(self.timeout_s)
        raw = socket.create_connection((self._host, self._port or (443 if self._https else 80)), timeout=deadline.remaining_s())
        try:
            if self._https:
                import ssl

                raw.settimeout(deadline.remaining_s())  # the handshake as a whole waits at most this long
                raw = ssl.create_default_context().wrap_socket(raw, server_hostname=self._host)
            connection_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = connection_class(self._host, self._port)
            stream = _DeadlineSocket(raw, deadline)
            connection.sock = stream  # type: ignore[assignment]  # set, so never connect()ed
            connection.request("POST", self._target, body=body, headers=headers)
            response = connection.getresponse()
            if stream.ended:
                # http.client ends the header block at the end of the stream as at a blank line: an
                # answer cut inside its headers (a receiver that crashed while answering) would
                # read as complete. It is not an answer, so nothing is marked sent on it.
                raise ConnectionResetError("the receiver closed the connection inside its answer's status line and headers")
            if 200 <= response.status < 300:
                # The status line and headers are the answer: the effect was applied. The body is
                # read (bounded in size and by the deadline) only to let the receiver finish.
                try:
                    response.read(RESPONSE_BYTES_MAX)
                except (http.client.HTTPException, OSError):
                    pass
            return response.status, response.getheader("Location"), response.getheader("Retry-After")
        finally:
            raw.close()

    def _refuse(self, status: int, location: str | None, retry_after: str | None) -> None:
        """Raise the error a non-2xx ``status`` means for the row: retried later, never marked sent."""
        if 300 <= status < 400:
            shown = "no Location" if location is None else f"Location: {redact_url(location)[:HEADER_CHARS_MAX]!r}"
            raise BadRequest(
                f"{status} redirect from {self.shown_url} ({shown}): a redirect is not a delivery, the effect was not "
                "sent; point the receiver url at the address that accepts the POST"
            )
        if status == 429:
            wait_s = parse_retry_after(retry_after, now=self.clock.now())
            if wait_s is not None:
                why = f"Retry-After honoured, at most {RETRY_AFTER_S_MAX:g} s"
            elif retry_after is not None:
                why = f"Retry-After {retry_after[:HEADER_CHARS_MAX]!r} not understood: the usual backoff"
            else:
                why = "no Retry-After: the usual backoff"
            raise RateLimited(f"429 from {self.shown_url} ({why})", wait_s)
        if status >= 500:
            raise ServerError(f"{status} from {self.shown_url}", status)
        raise BadRequest(f"{status} from {self.shown_url}")


def _basic_authorization(parts: urllib.parse.SplitResult) -> str | None:
    """The ``Authorization`` header a url's ``user:password@`` asks for, if it has one."""
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class _Deadline:
    """One request's deadline: what is left of its ``timeout_s``, or :class:`TimeoutError` once spent."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.at = time.monotonic() + timeout_s

    def remaining_s(self) -> float:
        left_s = self.at - time.monotonic()
        if left_s <= 0:
            raise TimeoutError(f"the request's {self.timeout_s:g} s are spent")
        return left_s


class _DeadlineSocket:
    """The connection's socket as ``http.client`` uses it (``sendall``, ``makefile``, ``close``),
    with every send and every read waiting at most until the request's deadline.

    A socket timeout alone bounds each read, not the answer: a receiver that sends one byte per
    second never lets a read time out, and ``http.client`` reads its headers line by line. So each
    read asks the socket for at most one buffer, waiting only for what is left of the deadline.
    """

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock = sock
        self.deadline = deadline
        self.ended = False  # the receiver's end of the stream was read


    def sendall(self, data: bytes) -> None:
        self.sock.settimeout(self.deadline.remaining_s())  # sendall's timeout bounds the whole call
        self.sock.sendall(data)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        pass  # the sender closes the real socket once, after the answer was read


class _DeadlineReader(io.RawIOBase):
    """Reads of a :class:`_DeadlineSocket`, one ``recv`` at a time, each within the deadline."""

    def __init__(self, owner: _DeadlineSocket) -> None:
        self.owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.owner.sock.settimeout(self.owner.deadline.remaining_s())
        count = self.owner.sock.recv_into(buffer)
        if count == 0:
            self.owner.ended = True
        return count
