"""What the command line prints: text from the database made safe for a terminal.

A job id or a ``last_error`` is whatever a caller or a failing step put there; printed raw, an
escape sequence in it could clear the screen, retitle the window or fake the lines around it.
:func:`printable` shows every character a terminal would act on as a Python escape instead.

>>> printable("doc-1")
'doc-1'
>>> printable("boom\\x1b[2J\\rok")
'boom\\\\x1b[2J\\\\rok'
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["printable", "one_line", "stdout_closed"]


def printable(value: Any) -> str:
    """``str(value)`` with each non-printable character (controls, bidi overrides, lone surrogates) escaped."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii") for c in text)


def one_line(value: Any) -> str:
    """:func:`printable` on one line: each run of whitespace becomes one space.

    For an error that quotes a library's message: libpq's "connection refused" ends with a line
    break and a tab before its hint, which printed the error on two lines, or escaped mid-sentence.

    >>> one_line('port 1 failed: Connection refused\\n\\tIs the server running?')
    'port 1 failed: Connection refused Is the server running?'
    """
    return printable(" ".join(("" if value is None else str(value)).split()))


def stdout_closed() -> int:
    """The reader of stdout went away (``| head``): not an error. Exit quietly, status 0.

    Python would otherwise report the BrokenPipeError again when it flushes stdout at exit, so
    stdout is pointed at /dev/null first.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout was replaced by something without a file descriptor
        pass
    finally:
        os.close(devnull)
    return 0
