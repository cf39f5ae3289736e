"""Where a call or an effect came from: the user's own line, as a finding points at it.

The harness, the reference engine and Python's installation are passed over, and so are the
adapter's files (``glue``) unless the step itself lives there: what is left is the user's step.

>>> import os
>>> shown(os.path.join(os.getcwd(), "steps.py"))
'steps.py'
"""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
import sys
import threading

import engine

__all__ = ["NOT_THE_USERS", "origin", "shown"]

_HARNESS_AND_ENGINE = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (sys.modules["chaos"], engine)
)
# Where a call or a delivery was made from: the first frame outside the harness, the engine and
# Python's installation (its library and site-packages: pytest's frames above a forked child),
# which is the user's step, as "path:line", relative to the working directory.
NOT_THE_USERS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (json, sqlite3, threading))


def origin(glue: tuple[str, ...] = ()) -> str:
    """The user's line that led here ("" when only the harness and the engine did: an outbox
    sender's delivery, the harness's own calls).

    The user's code is the run of frames nearest to the call that are neither the harness's, nor
    the reference engine's, nor Python's installation: the innermost of them outside ``glue``
    (the adapter's module, which only bridges an engine to the world), or the innermost glue frame
    where the step itself lives in the adapter's module. Frames further out (past the engine's
    loop, the harness, a test calling it) are not looked at.
    """
    frame = inspect.currentframe()
    candidate = ""
    try:
        while frame is not None:
            path = frame.f_code.co_filename
            library = path.startswith(_HARNESS_AND_ENGINE + NOT_THE_USERS) or path.startswith("<")
            if library:
                if candidate:
                    return candidate  # the run of the user's frames ended: only glue was in it
            elif path not in glue:
                return f"{shown(path)}:{frame.f_lineno}"
            elif not candidate:
                candidate = f"{shown(path)}:{frame.f_lineno}"
            frame = frame.f_back
        return candidate
    finally:
        del frame


def shown(path: str) -> str:
    """``path`` relative to the working folder where it lies in it (a user's line as a reader wants it)."""
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path
