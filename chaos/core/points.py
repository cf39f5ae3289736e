"""Crash points: ``(file, line, n-th hit)`` for each executable statement a worker iteration reaches.

A clean run of the iteration is recorded with a line tracer; every line event in the traced code
becomes a point, and a line reached twice (a loop, a retry) gives two points. "Executable
statement" is coverage.py's notion, read with its parser, so crash coverage means what line
coverage means in a coverage report.

>>> point = Point("/src/engine/_worker.py", 57, 2, "run_once")
>>> point.id
'_worker.run_once:L57#2'
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType, FrameType
from typing import Any, Callable, Iterable

from chaos.core.content import wal_digest

# While a recorder or a killer traces an iteration, a thread keeps the interpreter until it waits
# (on a queue, a lock, a file) or this long has passed, instead of Python's 5 ms: the iteration's
# threads then take turns only where the code hands over, in the recording and in the kill alike,
# so a point on a thread that has just handed its work to another is reached in the same state in
# both. (An iteration's threads that compute without waiting for this long still take turns.)
SWITCH_INTERVAL_S = 1.0

__all__ = ["SWITCH_INTERVAL_S", "WARM_FILES_MAX", "CommitCounter", "Point", "Recorder", "Killer", "DurableState", "statement_lines", "warm", "function_lines", "pause_classes", "crash_classes"]


@dataclass(frozen=True, order=True)
class Point:
    file: str
    line: int
    hit: int
    function: str = field(compare=False)

    @property
    def id(self) -> str:
        return f"{_stem(self.file)}.{self.function}:L{self.line}#{self.hit}"


@lru_cache(maxsize=None)
def _stem(path: str) -> str:
    """A file's name without directory and suffix: the first part of a point's id."""
    return os.path.splitext(os.path.basename(path))[0]


@lru_cache(maxsize=None)
def statement_lines(path: str) -> frozenset[int]:
    """The executable statement lines of a source file, as coverage.py counts them."""
    # Imported here: only a recording parses, and a process that only kills and recovers (a
    # matrix worker, every process it forks) is then smaller by coverage's modules.
    from coverage.parser import PythonParser

    parser = PythonParser(filename=path)
    parser.parse_source()
    return frozenset(parser.statements)


# Parsing a file for its statement lines takes a few milliseconds; a matrix records dozens of
# families, each in a child of its own, and each child would parse every file it reaches again.
WARM_FILES_MAX = 400


def warm(paths: Iterable[str]) -> int:
    """Parse the Python files under ``paths`` (files or directories) now, in this process, so
    that every child forked after finds their statement lines parsed. A tree of more than
    :data:`WARM_FILES_MAX` files is left to the children, which parse only what they reach.
    Returns how many files were parsed."""
    files: list[str] = []
    for path in paths:
        if os.path.isfile(path) and path.endswith(".py"):
            files.append(path)
        for root, _, names in os.walk(path) if os.path.isdir(path) else ():
            files.extend(os.path.join(root, name) for name in names if name.endswith(".py"))
            if len(files) > WARM_FILES_MAX:
                return 0
    for file in files:
        try:
            statement_lines(os.path.abspath(file))
        except Exception:  # not Python, unreadable: the recording meets it, or not, as before
            continue
    return len(files)


def function_lines(code: CodeType) -> frozenset[int]:
    """The statement lines a function's own bytecode (and its nested functions') can execute.

    The ``def`` line itself is left out: it runs when the function is *defined*, not when it is
    called, so no kill inside the call can land on it.
    """
    lines: set[int] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        own = {line for _, _, line in current.co_lines() if line is not None}
        if current.co_name != "<lambda>" and len(own) > 1:
            own.discard(current.co_firstlineno)
        lines |= own
        stack.extend(c for c in current.co_consts if isinstance(c, CodeType))
    return frozenset(lines & statement_lines(code.co_filename))


class _Scope:
    """Decides, once per code object, whether its lines are crash points."""

    def __init__(self, paths: Iterable[str], only: Iterable[CodeType] | None) -> None:
        self.prefixes = tuple(os.path.abspath(p) + (os.sep if os.path.isdir(p) else "") for p in paths)
        self.only = None if only is None else frozenset(only)
        self._cache: dict[CodeType, bool] = {}

    def __call__(self, code: CodeType) -> bool:
        inside = self._cache.get(code)
        if inside is None:
            if self.only is not None:
                inside = code in self.only
            else:
                inside = os.path.abspath(code.co_filename).startswith(self.prefixes)
            self._cache[code] = inside
        return inside


class Recorder:
    """Records every line event in scope, in order, during a ``with`` block (restores the tracer),
    on the thread that enters it and on the threads started meanwhile.

    ``observe`` names what else to note at each point, just before its line runs (what a kill
    there would leave): ``name -> callable``, each result kept in ``observed[name]``. The crash
    matrix observes the durable state (:class:`DurableState`); random histories the segments
    between durable writes; fault plans the jobs' committed states.

    ``on_exception`` (a :class:`chaos.core.raises.RaiseNoter`) is told of each exception event in
    a traced frame and in the frames of the code it ``watches()`` (the user's, traced for that
    only): the run of a family without any fault notes there where the user's code raised (the
    tracer :func:`chaos.core.raises.watch_raises` would need is this one), so that a family
    failing without any fault names the user's line.
    """

    def __init__(self, paths: Iterable[str], only: Iterable[CodeType] | None = None, between: Callable[[], bool] | None = None,
                 observe: dict[str, Callable[[], Any]] | None = None,
                 on_exception: Any = None) -> None:
        self.scope = _Scope(paths, only)
        self.on_exception = on_exception
        self.observe = dict(observe or {})
        self.observed: dict[str, list[Any]] = {name: [] for name in self.observe}
        self.points: list[Point] = []
        # For each point: was the worker between transactions there (holding no write lock)?
        self.between: list[bool] = []
        self._between = between
        # For each point: how many visible operations (see :meth:`tick`) had finished before it.
        self.ops: list[int] = []
        self._ops = 0
        self.codes: set[CodeType] = set()
        self._counts: Counter[tuple[str, int]] = Counter()
        self._previous: Any = None
        self._previous_threads: Any = None
        self._active = False
        self._lock = threading.Lock()

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self._active and self.scope(frame.f_code):
            self.codes.add(frame.f_code)
            return self._local
        if self._active and self.on_exception is not None and self.on_exception.watches(frame.f_code):
            frame.f_trace_lines = False  # not a point: only where it raises is wanted
            return self._raises
        return None

    def _raises(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "exception" and self._active:
            self.on_exception(frame, arg[1])  # type: ignore[misc]
        return self._raises

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not self._active:
            return None
        if event == "line":
            # One point at a time, whichever thread reaches it: an observer that waits on a file
            # (a SQLite read) lets another thread run, which must neither add its point in between
            # nor move on past its next line before this point's state is read.
            with self._lock:
                code = frame.f_code
                key = (code.co_filename, frame.f_lineno)
                self._counts[key] += 1
                self.points.append(Point(code.co_filename, frame.f_lineno, self._counts[key], code.co_name))
                self.between.append(self._between() if self._between is not None else True)
                self.ops.append(self._ops)
                for name, fn in self.observe.items():
                    self.observed[name].append(fn())
        elif event == "exception" and self.on_exception is not None:
            self.on_exception(frame, arg[1])
        return self._local

    def watch_transactions(self, between: Callable[[], bool]) -> None:
        """From now on, note at each point whether ``between()`` (no transaction open) holds."""
        self._between = between

    def tick(self, *_: Any) -> None:
        """Count one visible operation: a statement sent to a database, a read or move of the
        clock, a call into the world. Hook it to whatever the iteration can observe or change."""
        self._ops += 1

    def __enter__(self) -> "Recorder":
        # Threads the iteration starts are traced too (the engine's step thread): a point may be
        # on any of them. A thread still running after the block records nothing more.
        self._previous, self._previous_threads = sys.gettrace(), threading.gettrace()
        self._switch_s = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._active = True
        threading.settrace(self._global)
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._active = False
        sys.settrace(self._previous)
        threading.settrace(self._previous_threads)
        sys.setswitchinterval(self._switch_s)


def pause_classes(ops: list[int]) -> list[int]:
    """For each point, the first point of its class: the points with no visible operation
    between them.

    A worker frozen at any point of a class has done the same visible operations and no other:
    what another process sees of it (the database, the locks it holds, the world's ledger, the
    clock) is the same, and once resumed it runs only its own computation, which observes
    nothing, until the class's last point. So a pause at any point of a class ends as a pause at
    its first one does. (A kill too, but the crash matrix still kills at every point.)

    >>> pause_classes([0, 0, 1, 1, 1, 3])
    [0, 0, 2, 2, 2, 5]
    >>> pause_classes([])
    []
    """
    first: dict[int, int] = {}
    return [first.setdefault(count, i) for i, count in enumerate(ops)]


def crash_classes(durable: list[Any]) -> list[int]:
    """For each point, the first point of its crash class: the run of consecutive points with the
    same durable state (see :class:`DurableState`).

    A SIGKILL leaves exactly the durable state of its moment: files as they were committed, the
    world's ledger, the shared clock. Nothing else survives the process, and the recovery runs in
    a fresh one, so a kill anywhere in a class leaves the same files and ends as a kill at its
    first point does.

    >>> crash_classes([(1, 5), (1, 5), (2, 5), (2, 5), (1, 5)])
    [0, 0, 2, 2, 4]
    >>> crash_classes([])
    []
    """
    out: list[int] = []
    for i, state in enumerate(durable):
        out.append(out[-1] if i and state == durable[i - 1] else i)
    return out


class CommitCounter:
    """A value that changes whenever a commit lands in a SQLite file, read without letting another
    thread of the iteration run.

    In WAL mode it is the file's WAL index header (the ``-shm`` file, mapped into memory), which
    every commit rewrites: reading memory keeps the interpreter, where a statement on a connection
    would let it go while sqlite3 waits on the file, and another thread (the engine's step thread,
    between two of its own lines) would run meanwhile. In another journal mode it is ``PRAGMA
    data_version`` on a connection of its own. Raises :class:`sqlite3.DatabaseError` if the file is
    not a SQLite database.
    """

    WAL_INDEX_HEADER_BYTES = 48  # SQLite's WalIndexHdr: iChange, mxFrame, nPage, checksums, salts

    def __init__(self, path: str) -> None:
        import mmap
        import sqlite3

        # Kept open: the WAL index lives as long as a connection to the file does.
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._view: Any = None
        try:
            self._conn.execute("PRAGMA data_version").fetchone()
            if self._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal" and os.path.isfile(path + "-shm"):
                with open(path + "-shm", "rb") as f:
                    self._view = mmap.mmap(f.fileno(), self.WAL_INDEX_HEADER_BYTES, access=mmap.ACCESS_READ)
        except BaseException:
            self._conn.close()
            raise

    def __call__(self) -> Any:
        if self._view is not None:
            return self._view[: self.WAL_INDEX_HEADER_BYTES]
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
        self._conn.close()


class DurableState:
    """What a SIGKILL would leave, as a value that changes whenever it does: the commit counter
    (:class:`CommitCounter`) of each SQLite file in a scenario's directory, and the shared clock.
    Read at every point of a recording, and so never letting another thread run meanwhile: the
    state noted at a point is the state of that instant, even while the engine's step thread is
    between two of its own lines.

    Where the engine keeps anything the harness cannot watch (its database on a server, files that
    are not SQLite databases), every call returns a new value: every point is its own class.

    Each new value's content is noted too, in ``contents``: what the files hold for the next
    process to open them (:func:`chaos.core.content.wal_digest`) and the clock, or None where that
    cannot be named (a file not in WAL mode, a commit landing while it was read). Two scenarios
    whose states have the same content leave the same thing to a recovery.
    """

    SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")

    def __init__(self, directory: str, db: str, clock: Any) -> None:
        import sqlite3

        self.directory = directory
        self.clock = clock
        self._unique = 0
        self._counters: list[CommitCounter] = []
        self._known: set[str] = set()
        self._paths = (db, os.path.join(directory, "world.db"))
        self.contents: dict[Any, tuple[Any, ...] | None] = {}
        for path in self._paths:
            if not os.path.isfile(path):
                self.close()
                return
            try:
                self._counters.append(CommitCounter(path))
            except sqlite3.DatabaseError:  # not a SQLite file
                self.close()
                return
            self._known |= {os.path.basename(path) + suffix for suffix in self.SQLITE_SUFFIXES}
        if not self.settled():
            self.close()

    def __call__(self) -> Any:
        if not self._counters:
            self._unique += 1
            return ("unwatched", self._unique)
        value = tuple(counter() for counter in self._counters) + (self.clock.peek(),)
        if value not in self.contents:
            content = tuple(wal_digest(path) for path in self._paths) + (value[-1],)
            # A commit that landed while the files were read (on a thread already inside SQLite)
            # leaves a content of no one moment.
            same = tuple(counter() for counter in self._counters) + (self.clock.peek(),) == value
            self.contents[value] = content if same and None not in content else None
        return value

    def settled(self) -> bool:
        """Whether the directory holds only the watched files. Asked once the iteration has run
        (listing a directory lets other threads run, so it is not asked at every point): a file
        the engine left anywhere else makes every point noted meanwhile its own class."""
        return bool(self._counters) and self._known.issuperset(os.listdir(self.directory))

    @staticmethod
    def unwatched(count: int) -> list[Any]:
        """``count`` states that each differ from every other: every point its own class."""
        return [("unwatched", i) for i in range(count)]

    def close(self) -> None:
        for counter in self._counters:
            counter.close()
        self._counters = []


def _spellings_of(path: str) -> frozenset[str]:
    """``path`` with its ``..`` folded, and the file of every loaded module that is the same file
    by its real path (another spelling of it: a symlink, a relative ``sys.path`` entry)."""
    spellings = {path, os.path.normpath(path)}
    real = os.path.realpath(path)
    base = os.path.basename(path)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == base and file not in spellings and os.path.realpath(file) == real:
            spellings |= {file, os.path.normpath(file)}
    return frozenset(spellings)


class Killer:
    """Calls ``on_hit`` just before the chosen point's line executes (then stops tracing)."""

    def __init__(self, paths: Iterable[str], point: Point, on_hit: Callable[[], None], only: Iterable[CodeType] | None = None) -> None:
        self.scope = _Scope(paths, only)
        self.target = (point.file, point.line)
        # The process that recorded the point may have imported its module by another spelling of
        # its path than this one (``tests/../examples/x.py``, a symlink), and a code object's
        # ``co_filename`` is the importing process's spelling: see _is_target_file.
        self._spellings = _spellings_of(point.file)
        self.hit = point.hit
        self.on_hit = on_hit
        self.reached = False
        self._count = 0
        self._previous: Any = None
        self._previous_threads: Any = None
        self._active = False
        self._holds: dict[CodeType, bool] = {}
        self._lock = threading.Lock()

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        # Only a frame whose own bytecode has the target line is traced line by line: every
        # other frame runs at full speed (a function's nested functions are code objects of
        # their own). This is most of what a scenario costs before its kill.
        if not self._active:
            return None
        code = frame.f_code
        holds = self._holds.get(code)
        if holds is None:
            holds = self._holds[code] = (
                self._is_target_file(code.co_filename)
                and self.scope(code)
                and any(line == self.target[1] for _, _, line in code.co_lines())
            )
        return self._local if holds else None

    def _is_target_file(self, filename: str) -> bool:
        """Whether ``filename`` (a ``co_filename``) is the point's file, however either is spelled.

        Asked while the iteration is traced, so it makes no system call: one would let another
        thread of the iteration run here, where it did not in the recording (see
        :data:`SWITCH_INTERVAL_S`). The spellings of loaded modules' files were resolved before.
        """
        return filename in self._spellings or os.path.normpath(filename) in self._spellings

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not self._active:
            return None
        if event == "line" and frame.f_lineno == self.target[1] and self._holds.get(frame.f_code):
            with self._lock:  # the worker's thread and its step thread may both reach the line
                self._count += 1
                hit = self._count == self.hit and self._active
                if hit:
                    self.reached, self._active = True, False
            if hit:
                sys.settrace(self._previous if threading.current_thread() is threading.main_thread() else None)
                frame.f_trace = None
                self.on_hit()
        return self._local

    def __enter__(self) -> "Killer":
        self._previous, self._previous_threads = sys.gettrace(), threading.gettrace()
        self._switch_s = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._active = True
        threading.settrace(self._global)
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._active = False
        sys.settrace(self._previous)
        threading.settrace(self._previous_threads)
        sys.setswitchinterval(self._switch_s)
