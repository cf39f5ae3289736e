"""GitHub Actions annotations: one ``::error`` workflow command per finding group, at the user's line.

Under GitHub Actions (``GITHUB_ACTIONS=true``) ``python -m chaos matrix`` and the pytest plugin
print, for each headline (a way the families fail without any fault) and each finding of
:mod:`chaos.core.findings`, one line GitHub turns into an error on the diff: at the user's line
where the world's ledger knows it (``sent from invoices/unsafe.py:25``), else at the crash point's
line, titled with the invariant, the fix and the replay command in the message. Known findings
(a file of ``python -m chaos baseline``) are left out.

>>> error_command("invoices/unsafe.py:25", None, "crashgate outbox-at-least-once", "sent twice,\\nonce too many")
'::error file=invoices/unsafe.py,line=25,title=crashgate outbox-at-least-once::sent twice,%0Aonce too many'
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping

from chaos.core.findings import KnownKey, findings, headlines

__all__ = ["annotations", "error_command", "on_github_actions", "shown_path"]


def on_github_actions(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs as a step of a GitHub Actions job (which sets ``GITHUB_ACTIONS=true``)."""
    return environ.get("GITHUB_ACTIONS") == "true"


def annotations(report: Any, known: Iterable[KnownKey] = (), *, family_replay: Callable[[str], str] | None = None) -> list[str]:
    """GitHub Actions workflow commands: one ``::error`` per finding group of ``report`` (a
    :class:`chaos.MatrixReport`, or one built from the plugin's records), at the user's line where
    the world's ledger knows it, else at the point's line. ``family_replay``: the command that
    replays a family without any fault, added to a headline's message (the command line has none)."""
    known = set(known)
    out = []
    for head in headlines(report):
        if all((family, "", head.invariant, head.cause) in known for family in head.families):
            continue
        message = f"{head.example} ({len(head.families)} families); fix: {head.fix}"
        if family_replay is not None:
            message += f"; replay: {family_replay(head.families[0])}"
        out.append(error_command(head.where, None, f"crashgate {head.invariant} (without any fault)", message))
    for f in findings(report, known=known):
        out.append(error_command(f.where, f.first.point, f"crashgate {f.invariant}",
                                 f"{f.example} ({f.points} points); fix: {f.fix}; replay: {f.first.replay}"))
    return out


def error_command(where: str, point: Any, title: str, message: str) -> str:
    """One ``::error`` command, escaped as GitHub's workflow commands want: at ``where``
    (``path:line``), else at ``point``'s file and line (a :class:`chaos.core.points.Point`), else
    at no line."""
    def data(value: str) -> str:
        return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(value: str) -> str:
        return data(value).replace(":", "%3A").replace(",", "%2C")

    if where:
        path, _, line = where.rpartition(":")
        location = f"file={prop(path)},line={line},"
    elif point is not None:
        location = f"file={prop(shown_path(point.file))},line={point.line},"
    else:
        location = ""
    return f"::error {location}title={prop(title)}::{data(message)}"


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it (as GitHub and a reader want it)."""
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd) else path
