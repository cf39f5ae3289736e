"""What a SQLite database in WAL mode holds for the next process to open it, as a digest, read
without letting another thread of the process run.

A process killed at some point leaves its database as its last commit left it: each page is the
newest copy of it among the WAL's committed frames (up to ``mxFrame`` in the WAL index header),
else the page in the database file. :func:`wal_digest` reads exactly that (the page size, the
number of pages, the number of committed frames, then every page) and returns its digest, so two
databases with the same digest look the same to whoever opens them next, whatever the history of
their WAL files (a WAL restarted after a checkpoint has new random salts, which are left out).

Everything is read with the interpreter held: libc's ``pread`` through :mod:`ctypes` (a
``PyDLL``, which keeps the GIL) and a hash fed in pieces too small for :mod:`hashlib` to let it
go. A recording reads it at a point while the engine's other threads wait to run (see
:class:`chaos.core.points.DurableState`).

>>> import os, sqlite3, tempfile
>>> def db(directory, rows):
...     conn = sqlite3.connect(os.path.join(directory, "x.db"), isolation_level=None)
...     conn.execute("PRAGMA journal_mode=WAL")
...     conn.execute("CREATE TABLE t (v)")
...     for v in rows:
...         conn.execute("INSERT INTO t VALUES (?)", (v,))
...     return conn, wal_digest(os.path.join(directory, "x.db"))
>>> with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b, tempfile.TemporaryDirectory() as c:
...     (ca, da), (cb, db_), (cc, dc) = db(a, [1, 2]), db(b, [1, 2]), db(c, [1, 3])
...     (da == db_, da == dc, da is not None)
(True, False, True)

With no commit in the WAL yet (a database checkpointed and reopened), the file is the state:

>>> with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
...     for directory, v in ((a, 1), (b, 2)):
...         conn, _ = db(directory, [v])
...         conn.close()  # the last connection checkpoints the WAL into the file
...     digests = []
...     for directory in (a, b):
...         conn = sqlite3.connect(os.path.join(directory, "x.db"), isolation_level=None)
...         _ = conn.execute("SELECT * FROM t").fetchall()
...         digests.append(wal_digest(os.path.join(directory, "x.db")))
...         conn.close()
...     digests[0] != digests[1] and None not in digests
True
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct

__all__ = ["wal_digest"]

WAL_HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
WAL_INDEX_HEADER_BYTES = 48  # one copy of SQLite's WalIndexHdr; the -shm file starts with two
HASH_PIECE_BYTES = 2047  # hashlib lets go of the interpreter for 2048 bytes and more
DB_HEADER_BYTES = 100

_LIBC = ctypes.PyDLL(None, use_errno=True)  # libc, called without releasing the GIL
_LIBC.open.argtypes = (ctypes.c_char_p, ctypes.c_int)
_LIBC.open.restype = ctypes.c_int
_LIBC.pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
_LIBC.pread.restype = ctypes.c_ssize_t
_LIBC.close.argtypes = (ctypes.c_int,)
_LIBC.close.restype = ctypes.c_int
_LIBC.lseek.argtypes = (ctypes.c_int, ctypes.c_long, ctypes.c_int)
_LIBC.lseek.restype = ctypes.c_long

# WalIndexHdr: iVersion, unused, iChange (u32), isInit, bigEndCksum (u8), szPage (u16), mxFrame,
# nPage (u32), then checksums and salts; in the machine's byte order.
_INDEX = struct.Struct("=IIIBBHII")
_FRAME_PAGE = struct.Struct(">I")
_DB_PAGE_SIZE = struct.Struct(">H")


def wal_digest(path: str) -> str | None:
    """The digest of what ``path`` holds for the next process to open it; None where that cannot
    be read as such (not in WAL mode, no WAL index yet, the index's two header copies differing
    because a commit is writing them)."""
    index = _read(path + "-shm", 0, 2 * WAL_INDEX_HEADER_BYTES)
    if index is None or len(index) < 2 * WAL_INDEX_HEADER_BYTES or index[:WAL_INDEX_HEADER_BYTES] != index[WAL_INDEX_HEADER_BYTES:]:
        return None
    _, _, _, is_init, _, size_code, frames, pages = _INDEX.unpack_from(index)
    if not is_init:
        return None
    if not frames:
        # No commit in the WAL yet: the index names neither the page size nor the size; the file
        # itself is the state, its header giving the page size.
        header = _read(path, 0, DB_HEADER_BYTES)
        size = _size(path)
        if header is None or len(header) < DB_HEADER_BYTES or size is None:
            return None
        size_code = _DB_PAGE_SIZE.unpack_from(header, 16)[0]
        page_size = 65536 if size_code == 1 else size_code
        if not page_size or size % page_size:
            return None
        pages = size // page_size
    else:
        page_size = 65536 if size_code == 1 else size_code
    newest: dict[int, int] = {}  # page number -> offset of its newest committed frame's page
    wal = _read(path + "-wal", WAL_HEADER_BYTES, frames * (FRAME_HEADER_BYTES + page_size)) if frames else b""
    if wal is None or len(wal) < frames * (FRAME_HEADER_BYTES + page_size):
        return None
    for n in range(frames):
        start = n * (FRAME_HEADER_BYTES + page_size)
        newest[_FRAME_PAGE.unpack_from(wal, start)[0]] = start + FRAME_HEADER_BYTES
    base = _read(path, 0, pages * page_size)
    if base is None:
        return None
    digest = hashlib.blake2b(struct.pack(">IIII", page_size, pages, frames, len(newest)), digest_size=20)
    view_wal, view_base = memoryview(wal), memoryview(base)
    for page in range(1, pages + 1):
        at = newest.get(page)
        data = view_wal[at : at + page_size] if at is not None else view_base[(page - 1) * page_size : page * page_size]
        if len(data) != page_size:
            return None  # a page neither committed to the WAL nor in the file: not a state to name
        for piece in range(0, page_size, HASH_PIECE_BYTES):
            digest.update(data[piece : piece + HASH_PIECE_BYTES])
    return digest.hexdigest()


def _size(path: str) -> int | None:
    """The length of ``path`` in bytes, or None if it cannot be opened; with the interpreter held."""
    fd = _LIBC.open(os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        return None
    try:
        size = _LIBC.lseek(fd, 0, os.SEEK_END)
        return size if size >= 0 else None
    finally:
        _LIBC.close(fd)


def _read(path: str, offset: int, size: int) -> bytes | None:
    """Up to ``size`` bytes of ``path`` from ``offset`` (fewer at its end), or None if it cannot
    be opened; with the interpreter held throughout."""
    fd = _LIBC.open(os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        return None
    try:
        buffer = ctypes.create_string_buffer(size)
        done = 0
        while done < size:
            got = _LIBC.pread(fd, ctypes.byref(buffer, done), size - done, offset + done)
            if got <= 0:
                break
            done += got
        return buffer.raw[:done]
    finally:
        _LIBC.close(fd)
