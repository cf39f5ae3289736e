"""Files the harness writes for a user (a report, the fault plans) appear whole or not at all.

Writing a file in place leaves what was written so far when the disk fills up or the process
dies: ``plans init`` on a full disk left a 0-byte plan, which the plugin then collected. So each
file is written to a temporary name in the same folder (a rename is atomic only within one file
system), flushed to the disk, and renamed over its path; if anything fails the temporary is
removed and the path is as it was. The new file gets the mode the old one had, or what the umask
leaves of 0666, as a file opened with ``open(path, "w")`` would (a temporary file is 0600).

>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> write_whole(os.path.join(folder, "a.txt"), b"all of it\\n")
>>> os.listdir(folder), open(os.path.join(folder, "a.txt")).read()
(['a.txt'], 'all of it\\n')
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

__all__ = ["write_whole", "write_partial", "remove_partial", "new_file_mode", "PARTIAL_SUFFIX"]

# Not .toml, not .html: neither the plugin nor a browser takes a half-written file for the real one.
PARTIAL_SUFFIX = ".partial"
UMASK_DEFAULT = 0o022


def write_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (see the module's docstring)."""
    partial = write_partial(path, data)
    try:
        os.replace(partial, path)
    except BaseException:
        remove_partial(partial)
        raise


def write_partial(path: str | os.PathLike[str], data: bytes) -> str:
    """Write ``data`` to a new temporary file beside ``path`` and return its name, for the caller
    to ``os.replace`` over ``path`` (several files can then be renamed together, after every one
    was written). Nothing is left behind if this raises."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, partial = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), new_file_mode(path))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # renamed before its blocks reach the disk, a power cut can leave an empty file
    except BaseException:
        remove_partial(partial)
        raise
    return partial


def remove_partial(partial: str) -> None:
    """Remove a temporary of :func:`write_partial` (one already renamed or removed is no error)."""
    with contextlib.suppress(OSError):
        os.unlink(partial)


def new_file_mode(path: str | os.PathLike[str]) -> int:
    """The mode the file at ``path`` gets: the old file's, else what the umask leaves of 0666."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        pass
    try:  # read, not set and reset: os.umask would change it for every thread meanwhile
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = UMASK_DEFAULT
    return 0o666 & ~umask
