"""A scripted HTTP receiver on 127.0.0.1 for the outbox sender's tests: it answers each request as
told (any status, headers trickled a byte at a time, a silent pause, a reset) and records what it
received and what it applied.

It speaks HTTP over a raw socket rather than through ``http.server``, because the behaviours under
test are the ones a well-behaved server never shows: a reply trickled byte by byte, a connection
reset in the middle of a request. "Applied" means what a real receiver would mean by it: the whole
POST body arrived and the receiver's 2xx status line and headers were written out in full.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Reply", "Received", "ScriptedReceiver"]

# Requests larger than this are not what the sender sends; the receiver stops reading there.
REQUEST_BYTES_MAX = 1_000_000
# How long a handler waits for the sender's request before it gives up on the connection.
REQUEST_WAIT_S = 30.0


@dataclass(frozen=True)
class Reply:
    """How the receiver answers one request.

    ``reset`` is ``"before_body"`` (the connection is reset once the headers arrived, before the
    body is read), ``"after_body"`` (the body is read, then the connection is reset with no
    answer) or ``"mid_answer"`` (half the status line and headers, then a reset). ``delay_s`` is a
    silence after the body, before the answer; ``trickle_s`` the pause before each byte of the
    status line and headers; ``body_trickle_s`` the same for the body. ``interim`` sends a
    ``100 Continue`` before the answer.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    reset: str | None = None
    delay_s: float = 0.0
    trickle_s: float = 0.0
    body_trickle_s: float = 0.0
    interim: bool = False


@dataclass
class Received:
    """One request as the receiver saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    complete: bool  # the whole body (Content-Length bytes) arrived
    applied: bool = False  # complete, answered 2xx, and the status line and headers written in full
    answer_error: str | None = None


@dataclass
class ScriptedReceiver:
    """A threaded receiver; ``script(path)`` gives the :class:`Reply` for each request.

    >>> with ScriptedReceiver(lambda path: Reply(204)) as receiver:
    ...     receiver.url.startswith("http://127.0.0.1:")
    True
    """

    script: Callable[[str], Reply]
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.lock = threading.Lock()
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._handle(self.request)

        # Non-daemon handler threads, joined by close(): what a handler records is final once
        # the receiver is closed (stop ends every pause and trickle at once).
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = False
        self.server.block_on_close = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/effects"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> "ScriptedReceiver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()  # ends every pause and trickle at once
        self.server.shutdown()
        self.server.server_close()

    def applied(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.applied]

    # -- one connection ---------------------------------------------------------------------------
    def _handle(self, sock: socket.socket) -> None:
        sock.settimeout(REQUEST_WAIT_S)
        reader = sock.makefile("rb")
        try:
            request_line = reader.readline(65536).decode("latin-1").split()
            headers: dict[str, str] = {}
            while True:
                line = reader.readline(65536).decode("latin-1")
                if line in ("\r\n", "\n", ""):
                    break
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        except OSError:
            return
        if len(request_line) < 2:
            return
        method, path = request_line[0], request_line[1]
        reply = self.script(path)
        if reply.reset == "before_body":
            self._record(Received(method, path, headers, b"", complete=False))
            _reset(sock)
            return
        length = min(int(headers.get("content-length", "0")), REQUEST_BYTES_MAX)
        try:
            body = reader.read(length) if length else b""
        except OSError:
            body = b""
        received = Received(method, path, headers, body, complete=len(body) == length)
        self._record(received)
        if reply.reset == "after_body":
            _reset(sock)
            return
        if reply.delay_s and self.stop.wait(reply.delay_s):
            return
        self._answer(sock, reply, received)

    def _answer(self, sock: socket.socket, reply: Reply, received: Received) -> None:
        head = f"HTTP/1.1 {reply.status} Scripted\r\n"
        for name, value in reply.headers + (("Content-Length", str(len(reply.body))), ("Connection", "close")):
            head += f"{name}: {value}\r\n"
        data = (head + "\r\n").encode("latin-1")
        if reply.interim:
            data = b"HTTP/1.1 100 Continue\r\n\r\n" + data
        head_written = False
        try:
            if _peer_closed(sock):
                received.answer_error = "the sender hung up before the answer"
                return
            if reply.reset == "mid_answer":
                _write(sock, data[: len(data) // 2], reply.trickle_s, self.stop)
                _reset(sock)
                return
            _write(sock, data[:-1], reply.trickle_s, self.stop)
            with self.lock:  # set before the last byte: the sender may act on the answer as soon as it has it
                received.applied = received.complete and 200 <= reply.status < 300
            _write(sock, data[-1:], reply.trickle_s, self.stop)
            head_written = True
            _write(sock, reply.body, reply.body_trickle_s, self.stop)
        except OSError as exc:
            with self.lock:
                received.answer_error = f"{type(exc).__name__}: {exc}"
                received.applied = received.applied and head_written
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _record(self, received: Received) -> None:
        with self.lock:
            self.received.append(received)


def _write(sock: socket.socket, data: bytes, trickle_s: float, stop: threading.Event) -> None:
    """Send ``data``, one byte at a time with ``trickle_s`` before each when trickling; raise
    :class:`OSError` when the sender has gone or the receiver is closing."""
    if not trickle_s:
        sock.sendall(data)
        return
    for index in range(len(data)):
        if stop.wait(trickle_s):
            raise ConnectionAbortedError("the receiver is closing")
        sock.sendall(data[index:index + 1])


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the sender has closed its end (a FIN or a reset is waiting), without reading data."""
    timeout = sock.gettimeout()
    sock.setblocking(False)  # with a timeout set, recv would first wait for data to arrive
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashed or overloaded server does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
