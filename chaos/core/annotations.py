"""GitHub Actions annotations: one ``::error`` workflow command per finding group, at the user's line.

Under GitHub Actions (``GITHUB_ACTIONS=true``) ``python -m chaos matrix`` and the pytest plugin
print, for each headline (a way the families fail without any fault) and each finding of
:mod:`chaos.core.findings`, one line GitHub turns into an error on the diff: at the user's line
where the world's ledger knows it (``sent from invoices/unsafe.py:25``), else at the crash point's
line, titled with the invariant, the fix and the replay command in the message. Known findings
(a file of ``python -m chaos baseline``) are left out.

GitHub attaches an annotation to a file of the repository, named relative to its root; so a file
is named only when it lies in the repository (the git work tree of the working directory, else
pytest's rootdir), outside any installed package, and relative to it. A user's line elsewhere
(site-packages, a temporary folder) gives way to the crash point's file where that one is in the
repository, else to an annotation without a file: never an absolute path.

>>> error_command("invoices/unsafe.py:25", None, "crashgate outbox-at-least-once", "sent twice,\\nonce too many")
'::error file=invoices/unsafe.py,line=25,title=crashgate outbox-at-least-once::sent twice,%0Aonce too many'
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping

from chaos.core.findings import KnownKey, findings, headlines, plural

__all__ = ["annotations", "error_command", "on_github_actions", "shown_path", "repository_root", "repository_path"]

INSTALLED = ("site-packages", "dist-packages")  # folders of installed packages: not the repository's code, even inside it


def on_github_actions(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs as a step of a GitHub Actions job (which sets ``GITHUB_ACTIONS=true``)."""
    return environ.get("GITHUB_ACTIONS") == "true"


def annotations(report: Any, known: Iterable[KnownKey] = (), *, family_replay: Callable[[str], str] | None = None,
                root: str | None = None) -> list[str]:
    """GitHub Actions workflow commands: one ``::error`` per finding group of ``report`` (a
    :class:`chaos.MatrixReport`, or one built from the plugin's records), at the user's line where
    the world's ledger knows it, else at the point's line. ``family_replay``: the command that
    replays a family without any fault, added to a headline's message (the command line has none).
    ``root``: the repository's folder (default :func:`repository_root`)."""
    known = set(known)
    root = root or repository_root()
    out = []
    for head in headlines(report):
        if all((family, "", head.invariant, head.cause) in known for family in head.families):
            continue
        message = f"{head.example} ({plural(len(head.families), 'family', 'families')}); fix: {head.fix}"
        if family_replay is not None:
            message += f"; replay: {family_replay(head.families[0])}"
        out.append(error_command(head.where, None, f"crashgate {head.invariant} (without any fault)", message, root=root))
    for f in findings(report, known=known):
        out.append(error_command(f.where, f.first.point, f"crashgate {f.invariant}",
                                 f"{f.example} ({plural(f.points, 'point')}); fix: {f.fix}; replay: {f.first.replay}", root=root))
    return out


def error_command(where: str, point: Any, title: str, message: str, *, root: str | None = None) -> str:
    """One ``::error`` command, escaped as GitHub's workflow commands want: at ``where``
    (``path:line``, relative to the working directory or absolute), else at ``point``'s file and
    line (a :class:`chaos.core.points.Point`), whichever lies in the repository (``root``, default
    :func:`repository_root`), named relative to it; else at no file."""
    def data(value: str) -> str:
        return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(value: str) -> str:
        return data(value).replace(":", "%3A").replace(",", "%2C")

    root = root or repository_root()
    places = []
    if where:
        path, _, line = where.rpartition(":")
        places.append((path, line))
    if point is not None:
        places.append((point.file, str(point.line)))
    location = ""
    for path, line in places:
        shown = repository_path(path, root)
        if shown is not None:
            location = f"file={prop(shown)},line={line},"
            break
    return f"::error {location}title={prop(title)}::{data(message)}"


def repository_root(start: str | None = None, rootdir: str = "") -> str:
    """The folder GitHub names files relative to: the git work tree that holds ``start`` (default
    the working directory), else ``rootdir`` (pytest's), else ``start``."""
    start = os.path.realpath(start or os.getcwd())
    folder = start
    for _ in range(folder.count(os.sep) + 1):  # at most one step per level up to the file system's root
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return os.path.realpath(rootdir) if rootdir else start


def repository_path(path: str, root: str) -> str | None:
    """``path`` (relative to the working directory, or absolute) relative to the repository's
    folder ``root``, or None where it lies outside it or in an installed package inside it (a
    virtual environment in the work tree).

    >>> repository_path("/usr/lib/python3/site-packages/engine/_sqlstore.py", "/repo") is None
    True
    """
    full = os.path.realpath(os.path.join(os.getcwd(), path))
    relative = os.path.relpath(full, os.path.realpath(root))
    parts = relative.split(os.sep)
    if parts[0] == os.pardir or os.path.isabs(relative) or any(part in INSTALLED for part in parts):
        return None
    return relative


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies under it (as GitHub and a reader want it)."""
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd) else path
