"""The outside world of the demo and the soak, on loopback: an effect receiver and a document source.

One small HTTP server (``http.server``, a thread per connection) on ``127.0.0.1`` in a process of
its own, which the chaos monkey never kills: it is the world the workers talk to, not part of the
system under test.

* ``POST /effects`` is an **idempotent receiver**: it records every request in its ledger (a
  SQLite file) and applies one effect per ``Idempotency-Key``, in one transaction. Every
  ``drop_every``-th new key has its first response dropped (the connection closes after the effect
  was applied), as when a reply is lost on the network: the sender cannot tell that from a failed
  delivery, so it sends again, and only the key keeps the effect from being applied twice.
* ``GET /documents/<source>`` serves the document the ``fetch`` step reads. The first fetch of
  every ``fail_every``-th document answers 503, so the engine's retry path runs in every demo.
* ``GET /stats`` answers the document source's counters as JSON.

The checks read the ledger (:func:`deliveries`), never the server's memory.

>>> import tempfile, os, urllib.request
>>> ledger = os.path.join(tempfile.mkdtemp(), "receiver.db")
>>> with ReceiverProcess.start(ledger, drop_every=0) as receiver:
...     urllib.request.urlopen(receiver.documents_url + "/doc-1", timeout=5).read()[:13]
b'Report doc-1\\n'
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from engine import decode_idempotency_key
from engine import generated_document

from chaos.core.ledger_file import open_ledger
from chaos.core.world import Delivery

__all__ = ["ReceiverProcess", "ReceiverNotStarted", "deliveries", "receiver_figures", "DROP_EVERY_DEFAULT", "FAIL_EVERY_DEFAULT"]

HOST = "127.0.0.1"
DROP_EVERY_DEFAULT = 50
FAIL_EVERY_DEFAULT = 100
BODY_BYTES_MAX = 1_000_000
BODY_READ_TIMEOUT_S = 30.0
CONTENT_LENGTH = re.compile(r"[0-9]{1,12}")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
PARENT_CHECK_S = 1.0

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS request (
        seq INTEGER PRIMARY KEY, key TEXT NOT NULL, kind TEXT, payload TEXT, at REAL NOT NULL,
        applied INTEGER NOT NULL, answered INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS effect (key TEXT PRIMARY KEY, kind TEXT, payload TEXT, at REAL NOT NULL)",
)
SEEN_KEY = "SELECT 1 FROM request WHERE key = ? LIMIT 1"
COUNT_KEYS = "SELECT COUNT(DISTINCT key) FROM request"
APPLY_ONCE = "INSERT INTO effect (key, kind, payload, at) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"
# The planted bug of the demo's own test: a receiver that applies whatever arrives.
APPLY_ALWAYS = "INSERT OR REPLACE INTO effect (key, kind, payload, at) VALUES (?, ?, ?, ?)"
RECORD_REQUEST = "INSERT INTO request (key, kind, payload, at, applied, answered) VALUES (?, ?, ?, ?, ?, ?)"
SELECT_REQUESTS = "SELECT seq, key, kind, applied FROM request ORDER BY seq"
FIGURES = (
    "SELECT COUNT(*), COALESCE(SUM(applied), 0), COUNT(DISTINCT key), COALESCE(SUM(1 - answered), 0) FROM request"
)


class _Ledger:
    """The receiver's record of what arrived, shared by the server's connection threads."""

    def __init__(self, path: str, *, dedupe: bool, drop_every: int) -> None:
        self.conn = open_ledger(path, SCHEMA, synchronous="FULL")  # what arrived is never lost
        self.dedupe = dedupe
        self.drop_every = drop_every
        self.keys_seen = self.conn.execute(COUNT_KEYS).fetchone()[0]
        self.lock = threading.Lock()

    def receive(self, key: str, kind: str | None, payload: str) -> bool:
        """Record the request and apply its effect (once per key); return whether to answer."""
        with self.lock:
            conn = self.conn
            # One transaction: an effect applied without its request's record (or the reverse)
            # would make the ledger lie about what arrived.
            conn.execute("BEGIN IMMEDIATE")
            try:
                new_key = conn.execute(SEEN_KEY, (key,)).fetchone() is None
                if new_key:
                    self.keys_seen += 1
                answer = not (new_key and self.drop_every > 0 and self.keys_seen % self.drop_every == 1 % self.drop_every)
                applied = conn.execute(APPLY_ONCE if self.dedupe else APPLY_ALWAYS, (key, kind, payload, time.time())).rowcount == 1
                conn.execute(RECORD_REQUEST, (key, kind, payload, time.time(), applied, answer))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return answer


class _Documents:
    """The fetch step's source: the first fetch of every ``fail_every``-th document answers 503."""

    def __init__(self, fail_every: int) -> None:
        self.fail_every = fail_every
        self.seen: set[str] = set()
        self.served = 0
        self.refused = 0
        self.lock = threading.Lock()

    def fetch(self, source: str) -> str | None:
        with self.lock:
            first = source not in self.seen
            self.seen.add(source)
            if first and self.fail_every > 0 and len(self.seen) % self.fail_every == 0:
                self.refused += 1
                return None
            self.served += 1
        return generated_document(source)


def _content_length(values: list[str]) -> int | None:
    """The body's length in bytes, or None for a header that is not one plain decimal number.

    ``int()`` alone raised on ``abc`` (a traceback on the receiver's stderr and no reply) and
    accepts what HTTP does not (``+5``, ``1_000``, other scripts' digits); two different values
    leave the body's end ambiguous. No header is a length of 0.

    >>> _content_length(["12"]), _content_length([]), _content_length(["1e3"]), _content_length(["5", "6"])
    (12, 0, None, None)
    """
    if not values:
        return 0
    if len(set(values)) != 1 or not CONTENT_LENGTH.fullmatch(values[0].strip()):
        return None
    return int(values[0])


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    # A client that sends fewer bytes than its Content-Length would hold the connection's thread
    # forever; the base class ends such a request quietly on this socket timeout.
    timeout = BODY_READ_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a line per request would drown the demo's own output

    def _reply(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path != "/effects":
            return self._reply(404, b'{"error": "POST effects to /effects"}')
        key = self.headers.get("Idempotency-Key")
        key = decode_idempotency_key(key) if key else key  # the sender percent-encodes what a header cannot hold
        length = _content_length(self.headers.get_all("Content-Length") or [])
        if length is None:
            return self._reply(400, b'{"error": "Content-Length must be one decimal number of bytes"}')
        if not key or not 0 < length <= BODY_BYTES_MAX:
            return self._reply(400, b'{"error": "an Idempotency-Key header and a JSON body are required"}')
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            return self._reply(400, b'{"error": "the body is not JSON"}')
        kind = body.get("kind") if isinstance(body, dict) else None
        payload = json.dumps(body.get("payload") if isinstance(body, dict) else body, sort_keys=True)
        if self.server.ledger.receive(key, kind, payload):
            self._reply(200, b'{"ok": true}')
        else:
            self.close_connection = True  # the reply is "lost": the sender sees a dropped connection

    def do_GET(self) -> None:
        if self.path == "/stats":
            docs = self.server.documents
            return self._reply(200, json.dumps({"served": docs.served, "refused": docs.refused}).encode())
        prefix = "/documents/"
        if not self.path.startswith(prefix) or len(self.path) == len(prefix):
            return self._reply(404, b'{"error": "GET /documents/<source>"}')
        text = self.server.documents.fetch(urllib.parse.unquote(self.path[len(prefix):]))
        if text is None:
            return self._reply(503, b'{"error": "try again later"}')
        self._reply(200, text.encode(), "text/plain; charset=utf-8")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ledger: _Ledger
    documents: _Documents


def serve(ledger_path: str, *, dedupe: bool, drop_every: int, fail_every: int, parent_pid: int | None = None) -> None:
    """Serve until SIGTERM (or the parent's death); print ``port N`` once listening."""
    server = _Server((HOST, 0), _Handler)
    server.ledger = _Ledger(ledger_path, dedupe=dedupe, drop_every=drop_every)
    server.documents = _Documents(fail_every)
    print(f"port {server.server_address[1]}", flush=True)
    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(server, parent_pid), daemon=True).start()
    server.serve_forever(poll_interval=0.2)


def _exit_with_parent(server: _Server, parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    server.shutdown()


class ReceiverNotStarted(RuntimeError):
    """The receiver's process ended, or said nothing, before it listened (its ledger could not be
    made, on a full or read-only disk): the trial that needs it cannot start."""


def _exit_status(proc: subprocess.Popen) -> int | None:
    try:
        return proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None


def _last_line(log_path: str | None) -> str:
    """``": <the log's last line>"``, or nothing: a full disk leaves the log empty, and the caller
    may remove the folder that holds it, so the reason travels in the message."""
    try:
        with open(log_path or os.devnull, "rb") as log:
            lines = log.read()[-4096:].decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1][:200]}" if lines else ""


class ReceiverProcess:
    """The receiver running in a fresh process; :meth:`start` it, :meth:`stop` it (or ``with``)."""

    def __init__(self, proc: subprocess.Popen, port: int, ledger_path: str) -> None:
        self.proc = proc
        self.port = port
        self.ledger_path = ledger_path

    @classmethod
    def start(
        cls,
        ledger_path: str,
        *,
        dedupe: bool = True,
        drop_every: int = DROP_EVERY_DEFAULT,
        fail_every: int = FAIL_EVERY_DEFAULT,
        log_path: str | None = None,
    ) -> "ReceiverProcess":
        args = [sys.executable, "-m", "chaos.fleet.receiver", "--ledger", ledger_path, "--drop-every", str(drop_every),
                "--fail-every", str(fail_every), "--parent", str(os.getpid())]
        if not dedupe:
            args.append("--no-dedupe")
        log = open(log_path or os.devnull, "ab")
        try:
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=child_env())
        finally:
            log.close()
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline().decode() if ready else ""
        if not line.startswith("port "):
            exited = _exit_status(proc) if ready else None  # its stdout closed: it is exiting, or did
            proc.kill()
            proc.wait()
            why = f"exited with status {exited}" if exited is not None else f"did not listen within {START_TIMEOUT_S:g} s"
            raise ReceiverNotStarted(f"the test receiver {why} (its ledger is {ledger_path}){_last_line(log_path)}")
        return cls(proc, int(line.split()[1]), ledger_path)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/effects"

    @property
    def documents_url(self) -> str:
        return f"http://{HOST}:{self.port}/documents"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://{HOST}:{self.port}/stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> "ReceiverProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def child_env() -> dict[str, str]:
    """The environment of a child process: this checkout first on its import path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def deliveries(ledger_path: str) -> list[Delivery]:
    """Every request the receiver recorded, in arrival order, as the invariants read them."""
    conn = sqlite3.connect(ledger_path, timeout=30)
    try:
        return [Delivery(r[0], r[1], r[2], bool(r[3])) for r in conn.execute(SELECT_REQUESTS)]
    finally:
        conn.close()


def receiver_figures(ledger_path: str) -> dict[str, int]:
    """Requests received, effects applied, distinct keys, replies dropped; and duplicates applied."""
    conn = sqlite3.connect(ledger_path, timeout=30)
    try:
        received, applied, keys, dropped = conn.execute(FIGURES).fetchone()
    finally:
        conn.close()
    return {"requests": received, "applied": applied, "keys": keys, "replies_dropped": dropped,
            "duplicates_applied": applied - keys}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.fleet.receiver", description="The loopback receiver and document source.")
    parser.add_argument("--ledger", required=True, help="SQLite file recording every request")
    parser.add_argument("--drop-every", type=int, default=DROP_EVERY_DEFAULT, help="drop the first reply of every Nth new key (0: never)")
    parser.add_argument("--fail-every", type=int, default=FAIL_EVERY_DEFAULT, help="503 the first fetch of every Nth document (0: never)")
    parser.add_argument("--no-dedupe", action="store_true", help="apply every request (a planted bug)")
    parser.add_argument("--parent", type=int, help="exit when this process is no longer our parent")
    args = parser.parse_args(argv)
    serve(args.ledger, dedupe=not args.no_dedupe, drop_every=args.drop_every, fail_every=args.fail_every, parent_pid=args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
