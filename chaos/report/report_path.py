"""The report's path, checked before the run rather than after it: a folder, a file that is not a
crashgate report, a FIFO, or a place where no file can be created is refused with the fix.

>>> pages_folder("out/report.html")
'out/report_files'
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

__all__ = ["PAGES_SUFFIX", "REPORT_TITLE", "HEAD_BYTES", "check_report_path", "pages_folder"]

PAGES_SUFFIX = "_files"  # the source pages' folder: the index's path without .html, and this

REPORT_TITLE = "<title>crashgate crash report"  # how a report's file begins (after its doctype and head)
HEAD_BYTES = 4096


def check_report_path(path: str) -> None:
    """Refuse, with :class:`ValueError` naming the fix, a report path the run could not write or
    must not overwrite: a folder, a file that is not a crashgate report (a database passed by
    mistake, say), a file where its source pages' folder goes (:func:`pages_folder`), or a place
    where no file can be created. Checked before the run, not after it."""
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder; pass the path of the report's file, e.g. {os.path.join(path, 'crash-report.html')!r}")
    if os.path.lexists(path):
        head = _head_of_regular_file(path)
        if head and REPORT_TITLE.encode() not in head:  # an empty file (touch) holds nothing to lose
            raise ValueError(f"{path!r} exists and is not a crashgate report; it is left as it is: pass another path for the report")
    folder = pages_folder(path)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise ValueError(f"{folder!r}, where the report's source pages go, exists and is not a folder; it is left as it is: "
                         "pass another path for the report")
    directory = os.path.dirname(os.path.abspath(path))
    existing = directory
    while not os.path.isdir(existing):  # the folders that would be created, up to one that exists
        parent = os.path.dirname(existing)
        if parent == existing or os.path.lexists(existing):
            raise ValueError(f"the report's folder {directory!r} cannot be created ({existing!r} is not a folder); pass another path")
        existing = parent
    # A file made and removed at once: the file system says, which a permission check does not
    # (root, /proc). The report is written beside its path and renamed over it, so it is the folder
    # that must take a new file, even where the report exists.
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise ValueError(f"no file can be created in {existing!r} ({exc.strerror}); pass another path for the report") from None


def _head_of_regular_file(path: str) -> bytes:
    """The first bytes of the file at ``path``, refused (:class:`ValueError`) unless it is a regular file.

    Opened without blocking and checked on the open file: reading a FIFO waited for a writer, so
    ``--chaos-report`` naming one hung pytest before any test; a device or a socket is no report
    either, and a link to nothing would be replaced rather than followed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        what = "is a link to nothing" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})"
        raise ValueError(f"{path!r} {what}; pass another path for the report") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path!r} is {_file_kind(mode)}, not a regular file: the report is a file the run writes; "
                             "pass the path of a new file or of an earlier report")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(HEAD_BYTES)
    except OSError as exc:
        raise ValueError(f"{path!r} cannot be read ({exc.strerror}); pass another path for the report") from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    """``stat``'s file type in words (a folder is refused before this is asked)."""
    for test, kind in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "a special file"


def pages_folder(path: str) -> str:
    """The folder of the report's source pages, beside its index: ``out/report.html`` ->
    ``out/report_files`` (as a browser saves a page with what it needs)."""
    root, _ = os.path.splitext(path)
    return root + PAGES_SUFFIX
