"""Effects outside the outbox: what a step does to the world without an outbox row, seen at the
process's boundary.

A step that sends its email through its own client (an SMTP library, an HTTP POST, a line
appended to a spool file) sends it again each time a crash makes it run again, and sends it for a
result the engine may never commit. The world's receiver never sees such an email, so no check
that reads the receiver's ledger can. What every such effect does see is the process's boundary:
Python's audit hooks (PEP 578) report each file opened, socket connected, datagram sent and
process started. In a scenario's worker (a forked child, never the test's own process: an audit
hook cannot be removed) :func:`watch` installs one that records, in the world's ledger, each such
event that the user's code caused, at the user's line (the first frame outside the harness, the
engine, Python's library and installed packages), and the invariant ``effects-through-outbox``
fails the run that has any.

What is not an effect is declared, never guessed (:func:`parse_allowed`): ``file:GLOB`` (a cache
folder), ``connect:HOST:PORT`` (a service it only reads from; globs allowed), ``http:HOST:PORT``
(a service it may POST, PUT, PATCH or DELETE to), ``mail:HOST:PORT`` (an SMTP server it may send
to), ``subprocess:GLOB`` (a program): a ``connect:`` entry lets a step connect and read, never
send mail or change a service's state. Reads never count (a file opened to read, a SQLite
database opened read-only, an HTTP GET), nor does what the harness, the engine, the test tools
(coverage, Hypothesis, pytest), imports (``.pyc`` files), logging to a file and ``tempfile``'s
scratch files in the temporary folder do on their own, nor a write into the run's own folder
(the engine's database, the harness's scratch files).

>>> allowed = parse_allowed(["file:/var/cache/app/*", "connect:127.0.0.1:*"])
>>> [str(a) for a in allowed]
['file:/var/cache/app/*', 'connect:127.0.0.1:*']
>>> parse_allowed(["ftp:x"])
Traceback (most recent call last):
...
ValueError: allowed effect 'ftp:x' is not KIND:PATTERN with KIND one of file, connect, http, mail, subprocess; e.g. file:/var/cache/myapp/* or connect:127.0.0.1:8080
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import engine

from chaos.core.origin import shown

__all__ = ["Allowed", "RUN_ENV", "KINDS", "ENTRIES_MAX", "parse_allowed", "allowing", "declared", "watch", "watching", "describe"]

KINDS = ("file", "connect", "http", "mail", "subprocess")
ENTRIES_MAX = 200  # events one process records: a step in a loop is reported, not logged whole
# The audit events that reach the world (Python's audit events table); reads are not among them.
_EVENTS = frozenset({
    "open", "os.remove", "os.rename", "os.truncate", "os.rmdir", "socket.connect", "socket.sendto", "socket.sendmsg",
    "http.client.send", "smtplib.send", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    "sqlite3.connect", "tempfile.mkdtemp",
})
# HTTP methods that only read: a request with one of them is not an effect on its own (its connection may be).
_READS = (b"GET ", b"HEAD ", b"OPTIONS ")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# The harness's folder (this module's package's parent) and the engine's: their frames are not the user's.
_OURS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
              for path in (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + "__init__.py",
                           getattr(engine, "__file__", None) or "") if path)
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_SITE = tuple(p + os.sep for p in {os.path.join(_STDLIB, "site-packages"), os.path.join(_STDLIB, "dist-packages")})
# Library modules whose own writes are not effects: a log file (not a log sent by mail or over the
# network), a scratch file in the temporary folder (not one a step makes in a folder of its own).
_LOGGING = os.path.join(_STDLIB, "logging") + os.sep
_TEMPFILE = os.path.join(_STDLIB, "tempfile.py")
# Test tools that write files of their own from inside a traced frame.
_TOOLS = ("coverage", "hypothesis", "_pytest", "pytest", "pluggy", "xdist", "execnet", "_hypothesis_globals")


@dataclass(frozen=True)
class Allowed:
    """One declared non-effect: ``kind`` (file, connect, subprocess) and a glob ``pattern``."""

    kind: str
    pattern: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.pattern}"

    def allows(self, kind: str, subject: str) -> bool:
        if kind != self.kind:
            return False
        if kind == "file":
            return fnmatch.fnmatch(subject, os.path.abspath(self.pattern)) or fnmatch.fnmatch(subject, self.pattern)
        return fnmatch.fnmatch(subject, self.pattern)


def parse_allowed(entries: Iterable[str]) -> tuple[Allowed, ...]:
    """The allow-list entries ``KIND:PATTERN``; ValueError names an entry that is not one."""
    out = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        kind, _, pattern = entry.partition(":")
        if kind not in KINDS or not pattern:
            raise ValueError(f"allowed effect {entry!r} is not KIND:PATTERN with KIND one of {', '.join(KINDS)}; "
                             "e.g. file:/var/cache/myapp/* or connect:127.0.0.1:8080")
        out.append(Allowed(kind, pattern))
    return tuple(out)


class _Watch:
    """What the hook of this process needs: where to record, what is allowed, whose files bridge."""

    def __init__(self, record: Callable[[str, str], None], roots: tuple[str, ...], allowed: tuple[Allowed, ...],
                 glue: tuple[str, ...]) -> None:
        self.record = record
        self.roots = roots
        self.allowed = allowed
        self.glue = glue
        self.recorded = 0
        # Read once, here: tempfile.gettempdir() takes a lock while it opens files to probe its
        # candidates, and a hook that called it from one of those opens would wait on itself.
        self.temp = os.path.realpath(tempfile.gettempdir())
        self.scratch: tuple[str, ...] = ()  # folders tempfile made in the temporary folder for this process
        self.seen: set[tuple[str, ...]] = set()  # (what, where) recorded by this process: a connection's sends are one effect
        self.busy = threading.local()


_watch: _Watch | None = None
_installed = False
# Off only for the benchmark's side-by-side figure of what watching costs (chaos.matrix.bench).
ENABLED = True
# What the run allows besides the adapter (see allowing): in the environment, so that every process
# of the run has it, forked or started (the matrix's lean worker processes, fiu-run's).
RUN_ENV = "CRASHGATE_RUN_ALLOWED_EFFECTS"


@contextlib.contextmanager
def allowing(entries: Iterable[str]) -> Iterator[tuple[Allowed, ...]]:
    """Within: the scenarios this process runs also allow ``entries`` (``--chaos-allow-effects``)."""
    allowed = parse_allowed(entries)
    before = os.environ.get(RUN_ENV)
    os.environ[RUN_ENV] = ",".join(str(a) for a in allowed)
    try:
        yield allowed
    finally:
        if before is None:
            os.environ.pop(RUN_ENV, None)
        else:
            os.environ[RUN_ENV] = before


def declared() -> tuple[Allowed, ...]:
    """What the run allows besides the adapter (see :func:`allowing`)."""
    return parse_allowed(os.environ.get(RUN_ENV, "").split(","))


def watching() -> bool:
    """Whether this process records effects outside the outbox."""
    return _watch is not None


def watch(record: Callable[[str, str], None], *, roots: Iterable[str], allowed: Iterable[Allowed] = (),
          glue: Iterable[str] = ()) -> None:
    """In a scenario's child: record ``(what, where)`` for each effect the user's code has from now
    on. ``roots``: folders whose files are the run's own; ``glue``: the adapter's files, which
    bridge an engine to the world (the user's line is the step's, past them)."""
    global _watch, _installed
    from chaos.core.process import in_child

    if not in_child():
        raise RuntimeError("effects are watched in a scenario's forked child only: an audit hook cannot be removed")
    if not ENABLED:
        return
    _watch = _Watch(record, tuple(os.path.realpath(r) + os.sep for r in roots), tuple(allowed), tuple(glue))
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _EVENTS:
        return
    w = _watch
    if w is None or getattr(w.busy, "on", False) or w.recorded >= ENTRIES_MAX:
        return
    w.busy.on = True
    try:
        if event == "tempfile.mkdtemp":  # a scratch folder in the temporary folder: what is written there is scratch
            if _in_temp(os.fsdecode(args[0])):
                w.scratch += (os.path.realpath(os.fsdecode(args[0])) + os.sep,)
            return
        found = describe(event, args)
        if found is None:
            return
        kind, subject, what = found
        if kind == "file" and (os.path.realpath(subject).startswith(w.roots + w.scratch) or _not_a_file_effect(subject)):
            return
        if any(a.allows(kind, subject) for a in w.allowed):
            return
        where = _culprit(w.glue, kind, subject)
        if not where or (what, where) in w.seen:
            return
        if kind in ("http", "mail") and ("connect", subject, where) in w.seen:
            return  # the connection it goes over, from the same line, is recorded already: one effect
        w.seen.update({(what, where), (kind, subject, where)})
        w.recorded += 1
        w.record(what, where)
    except Exception:  # the code under test must never fail because the harness looked at it
        pass
    finally:
        w.busy.on = False


def describe(event: str, args: tuple[Any, ...]) -> tuple[str, str, str] | None:
    """``(kind, subject, what was done)`` of an audit event that reaches the world, else None.

    >>> describe("open", ("/srv/sent_emails.txt", "a", os.O_WRONLY | os.O_CREAT | os.O_APPEND))
    ('file', '/srv/sent_emails.txt', "opened '/srv/sent_emails.txt' for append")
    >>> describe("open", ("/srv/orders.json", "r", os.O_RDONLY)) is None
    True
    >>> describe("socket.connect", (None, ("127.0.0.1", 8025)))
    ('connect', '127.0.0.1:8025', 'connected to 127.0.0.1:8025')
    """
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None))[:3]
        if isinstance(path, int) or path is None:
            return None  # an fd already open: its opening was the event
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if not writing:
            return None
        shown = os.path.abspath(os.fsdecode(path))
        how = "append" if (isinstance(mode, str) and "a" in mode) or (isinstance(flags, int) and flags & os.O_APPEND) else "writing"
        return "file", shown, f"opened {shown!r} for {how}"
    if event in ("os.remove", "os.rmdir", "os.truncate"):
        if isinstance(args[0], int):
            return None
        shown = os.path.abspath(os.fsdecode(args[0]))
        verb = {"os.remove": "removed", "os.rmdir": "removed the folder", "os.truncate": "truncated"}[event]
        return "file", shown, f"{verb} {shown!r}"
    if event == "os.rename":
        shown = os.path.abspath(os.fsdecode(args[1]))
        return "file", shown, f"renamed {os.fsdecode(args[0])!r} to {shown!r}"
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        address = _address(args[1] if len(args) > 1 else None)
        if address is None:
            return None
        verb = "connected to" if event == "socket.connect" else "sent a datagram to"
        return "connect", address, f"{verb} {address}"
    if event in ("http.client.send", "smtplib.send"):
        conn, data = args[0], args[1] if len(args) > 1 else b""
        data = data.encode("latin-1", "replace") if isinstance(data, str) else bytes(data) if isinstance(data, (bytes, bytearray)) else b""
        if event == "http.client.send" and (not data[:1].isalpha() or data.startswith(_READS)):
            return None  # a request that only reads, or the rest of one (its body): the request line said what it was
        try:
            address = _address(conn.sock.getpeername())
        except (AttributeError, OSError):
            address = None
        address = address or f"{getattr(conn, 'host', None) or getattr(conn, '_host', '?')}:{getattr(conn, 'port', None) or '?'}"
        if event == "smtplib.send":
            return "mail", address, f"sent mail over SMTP to {address}"
        method = data.split(b" ", 1)[0].decode("ascii", "replace")
        return "http", address, f"sent an HTTP {method} to {address}"
    if event == "sqlite3.connect":
        database = os.fsdecode(args[0]) if isinstance(args[0], (str, bytes, os.PathLike)) else ""
        path, _, query = database.partition("?") if database.startswith("file:") else (database, "", "")
        if not path or path in (":memory:", "file::memory:") or "mode=ro" in query or "immutable=1" in query or "mode=memory" in query:
            return None  # in memory, or opened read-only: nothing reaches the world
        shown = os.path.abspath(path[len("file:"):] if path.startswith("file:") else path)
        return "file", shown, f"opened the SQLite database {shown!r} (its writes reach the world)"
    if event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        program = os.fsdecode(executable) if executable else _first(argv)
        return "subprocess", program, f"started the process {_command(argv)!r}"
    if event == "os.system":
        command = os.fsdecode(args[0])
        return "subprocess", command, f"ran os.system({command!r})"
    if event in ("os.exec", "os.posix_spawn", "os.spawn"):
        path = os.fsdecode(args[1] if event == "os.spawn" else args[0])
        return "subprocess", path, f"started the program {path!r} ({event})"
    return None


def _address(address: Any) -> str | None:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    if isinstance(address, (str, bytes)) and address:
        return f"unix:{os.fsdecode(address)}"
    return None


def _first(argv: Any) -> str:
    if isinstance(argv, (str, bytes)):
        return os.fsdecode(argv).split()[0] if argv.strip() else ""
    try:
        return os.fsdecode(list(argv)[0])
    except (TypeError, IndexError):
        return "?"


def _command(argv: Any) -> str:
    if isinstance(argv, (str, bytes)):
        return os.fsdecode(argv)
    try:
        return " ".join(os.fsdecode(a) for a in argv)
    except TypeError:
        return str(argv)


def _not_a_file_effect(path: str) -> bool:
    """A file no one outside reads as a result: compiled bytecode, the null device."""
    return path.endswith((".pyc", ".pyo")) or (os.sep + "__pycache__" + os.sep) in path or path in (os.devnull, "/dev/tty")


def _exempt(path: str, kind: str, subject: str) -> bool:
    """Whether a frame of Python's library at ``path`` acts on its own behalf: logging writing its
    log file (or the local syslog socket), tempfile making a scratch file in the temporary folder,
    an import writing compiled bytecode."""
    if path.startswith("<frozen importlib"):
        return True
    if path.startswith(_LOGGING):
        return kind == "file" or subject.startswith("unix:")
    if path == _TEMPFILE:
        return kind == "file" and _in_temp(subject)
    return False


def _in_temp(path: str) -> bool:
    """Whether ``path`` lies directly in the temporary folder (where tempfile puts what it is not
    told to put elsewhere): a file given a folder of its own (a mail drop) is no scratch."""
    w = _watch
    real = os.path.realpath(path)
    return w is not None and w.temp in (real, os.path.dirname(real))  # the folder itself: an unnamed file (O_TMPFILE)


def _culprit(glue: tuple[str, ...], kind: str = "", subject: str = "") -> str:
    """The user's line that caused the event being audited ("" when the harness, the engine, a
    test tool, logging or tempfile did it on their own behalf).

    The frames nearest the event that belong to Python's library are passed over; the first one
    past them says whose act it is: the harness's or the engine's (not an effect), a test tool's
    (not an effect), or an installed package's (a client the user called) or the user's own. From
    there outward, the first frame outside Python's installation is the user's line; the adapter's
    files (``glue``) only where the step itself lives there, as :func:`chaos.core.origin.origin` does.
    """
    frame = sys._getframe(2)
    candidate = ""
    owner_seen = False
    try:
        while frame is not None:
            path = frame.f_code.co_filename
            if _exempt(path, kind, subject):
                return ""
            if path.startswith(_OURS):  # before the installation's folders: crashgate may be installed there
                if not owner_seen:
                    return ""  # the harness or the engine, on its own behalf
                if candidate:
                    return candidate
            elif path.startswith(_SITE):
                if not owner_seen and path[len(next(s for s in _SITE if path.startswith(s))):].split(os.sep, 1)[0] in _TOOLS:
                    return ""
                owner_seen = True
            elif path.startswith(_STDLIB) or path.startswith("<"):
                pass
            elif path in glue:
                owner_seen = True
                candidate = candidate or f"{shown(path)}:{frame.f_lineno}"
            else:
                return f"{shown(path)}:{frame.f_lineno}"
            frame = frame.f_back
        return candidate
    finally:
        del frame

