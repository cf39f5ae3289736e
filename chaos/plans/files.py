"""``python -m chaos plans init [DIR]``: copy the shipped fault plans into a project.

Each copy names its target, the reference engine (:data:`COPY_HEADER`): the plans are written for
the reference workflow, and in a project whose ``chaos_target`` is its own workflow, or whose
``fault_plans/`` holds plans of its own, the plugin would otherwise check them against that
workflow, whose steps and states they do not name (a collection error each). To gate your own
workflow with one, change its steps and states to yours and delete its ``target`` line.

The plans in the repository's top-level ``fault_plans/`` are installed with the package as
``chaos/fault_plans/*.toml`` (a build mapping in ``pyproject.toml``: the repository keeps one copy,
which its own tests collect). From a checkout that was not installed, the top-level folder is used.

>>> import tempfile, os
>>> with tempfile.TemporaryDirectory() as tmp:
...     target = os.path.join(tmp, "fault_plans")
...     first = copy_plans(target)
...     try:
...         copy_plans(target)
...     except PlansExist:
...         print("refused: the plans are there already")
refused: the plans are there already
>>> first == sorted(p.name for p in shipped_plans())
True
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import tomllib
from pathlib import Path

from chaos.adapter import REFERENCE_TARGET
from chaos.core.whole_file import remove_partial, write_partial

__all__ = ["add_arguments", "run", "shipped_plans", "copy_plans", "PlansExist", "PLAN_DIR", "COPY_HEADER"]

PLAN_DIR = "fault_plans"  # the plugin collects *.toml only from folders of this name
PLANS_MAX = 1_000  # a sanity bound on the files copied by one command

# What every copied plan starts with: its target, so that it runs on the reference engine in any project.
COPY_HEADER = (
    "# Copied by `python -m chaos plans init`: written for the reference workflow (fetch, extract, verify,\n"
    "# deliver), so it runs on the reference engine whatever your chaos_target is. To gate a workflow of\n"
    "# your own with it, change its steps and states to your workflow's and delete the target line.\n"
    f'target = "{REFERENCE_TARGET}"\n\n'
)

DESCRIPTION = (
    "Copy the fault plans that ship with crashgate into DIR (default ./fault_plans), where pytest's "
    "crashgate plugin collects them: each states its lesson and names its target, the reference engine "
    "(whatever the project's chaos_target), beside any plans of the project's own. Existing files are "
    "never overwritten unless --force is given."
)


class PlansExist(FileExistsError):
    """Some of the plans are already in the folder; nothing was copied."""


def _chaos_dir() -> Path:
    # The package's own folder, wherever the module defining this function lives inside it.
    spec = importlib.util.find_spec("chaos")
    assert spec is not None and spec.origin is not None, "the chaos package has no location"
    return Path(spec.origin).parent


def shipped_plans() -> list[Path]:
    """The shipped plans: ``chaos/fault_plans/`` when installed, else the checkout's ``fault_plans/``."""
    package = _chaos_dir()
    for folder in (package / PLAN_DIR, package.parent / PLAN_DIR):
        plans = sorted(folder.glob("*.toml"))
        if plans:
            assert len(plans) <= PLANS_MAX, f"{len(plans)} plans in {folder}: more than {PLANS_MAX}"
            return plans
    return []


def copy_plans(directory: str | os.PathLike[str], *, force: bool = False) -> list[str]:
    """Copy every shipped plan into ``directory`` (created if needed); return the names copied.

    Raises :class:`PlansExist` (copying nothing) if any plan is there already and ``force`` is
    false, and :class:`ValueError` for a folder the plugin would not collect.
    """
    target = Path(directory)
    if target.name != PLAN_DIR:
        raise ValueError(
            f"{str(target)!r} is not a folder named {PLAN_DIR}: the crashgate plugin collects plans only from "
            f"folders named {PLAN_DIR}; pass e.g. {str(target / PLAN_DIR)!r}"
        )
    if target.exists() and not target.is_dir():
        raise ValueError(f"{str(target)!r} exists and is not a folder; pass a folder named {PLAN_DIR}")
    plans = shipped_plans()
    if not plans:
        raise ValueError(f"no shipped plans found next to {_chaos_dir()}; reinstall crashgate")
    existing = [p.name for p in plans if os.path.lexists(target / p.name)]
    if existing and not force:
        raise PlansExist(
            f"{len(existing)} {'plan' if len(existing) == 1 else 'plans'} already in {str(target)!r}: {', '.join(existing)}; nothing was copied. "
            "Pass --force to overwrite them, or choose another folder"
        )
    # --force overwrites files, and only files: anything else under a plan's name stops it before a copy.
    blocked = [name for name in existing if not (target / name).is_file() or (target / name).is_symlink()]
    if blocked:
        raise ValueError(f"{str(target)!r} holds {', '.join(blocked)}, which {'is' if len(blocked) == 1 else 'are'} not a plain "
                         "file: --force overwrites only files; nothing was copied: move it away, or choose another folder")
    _write_all(target, plans)
    return [p.name for p in plans]


def _write_all(target: Path, plans: list[Path]) -> None:
    """Every plan whole in ``target``, or nothing new there.

    Each plan is first written under a temporary name in ``target`` and renamed only once all of
    them are written: a full disk left a 0-byte plan (and the ones copied before it), which the
    plugin then collected. On failure the temporaries and any folder this call made are removed.
    """
    made = _missing_folders(target)
    partials: list[tuple[str, Path]] = []
    renamed: list[Path] = []  # new plans in place already (one that --force overwrote is not listed)
    try:
        target.mkdir(parents=True, exist_ok=True)
        for plan in plans:
            partials.append((write_partial(target / plan.name, copied_text(plan)), target / plan.name))
        for partial, path in partials:
            new = not os.path.lexists(path)
            os.replace(partial, path)
            if new:
                renamed.append(path)
    except OSError as exc:
        for partial, _ in partials:
            remove_partial(partial)
        for path in renamed:
            with contextlib.suppress(OSError):
                path.unlink()
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty: a folder that holds anything else is not ours to remove
        raise ValueError(f"cannot write the plans into {str(target)!r} ({exc.strerror or exc}); nothing was left there: "
                         "free disk space, or pass a folder you can write") from None


def copied_text(plan: Path) -> bytes:
    """The shipped plan as ``plans init`` writes it: :data:`COPY_HEADER` (its target) first, unless
    the plan names a target of its own."""
    text = plan.read_bytes()
    if "target" in tomllib.loads(text.decode("utf-8")):
        return text
    return COPY_HEADER.encode("utf-8") + text


def _missing_folders(target: Path) -> list[Path]:
    """The folders ``mkdir(parents=True)`` would make for ``target``, outermost first."""
    missing = []
    folder = target.absolute()
    while not os.path.lexists(folder) and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    """Add ``plans init`` to the ``python -m chaos`` subcommands."""
    plans = sub.add_parser("plans", help="copy the shipped fault plans into your project", description=DESCRIPTION)
    actions = plans.add_subparsers(dest="plans_command", required=True, metavar="init")
    init = actions.add_parser("init", help="copy the shipped plans into DIR", description=DESCRIPTION)
    init.add_argument("directory", nargs="?", default=PLAN_DIR, metavar="DIR",
                      help=f"where to put them, a folder named {PLAN_DIR} (default ./{PLAN_DIR})")
    init.add_argument("--force", action="store_true", help="overwrite plans that are already there")


def run(args: argparse.Namespace) -> int:
    """Run ``plans init``: 0 when copied, 2 (one line on stderr) on bad input or existing files."""
    assert args.plans_command == "init", args.plans_command
    try:
        copied = copy_plans(args.directory, force=args.force)
    except (ValueError, PlansExist, OSError) as exc:
        print(f"error: plans init: {exc}", file=sys.stderr)
        return 2
    for name in copied:
        print(os.path.join(args.directory, name))
    print(f"{len(copied)} fault plans in {args.directory}, written for the reference workflow and naming it as their target; "
          f"run them with: python -m pytest {args.directory} (to gate a workflow of your own with one, change its steps and "
          "states to your workflow's and delete its target line)")
    return 0
