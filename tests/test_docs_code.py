"""Every command and Python example in README.md and docs/**/*.md runs, and does what the page says.

Goal: a reader who copies a block gets what the page promises. Method: each page is a test; its
fenced blocks run in order in one fresh folder (or in the checkout, for a block marked so), each
`bash` block as a script with ``set -e``, each `python` block as a script. An HTML comment right
above a block steers it (the markers are listed in docs/explanation/docs.md): ``file NAME`` writes
the block to a file instead, ``expect TEXT`` and ``exit N`` check the outcome, ``checkout`` runs it
in the repository, ``needs postgresql`` skips it (fails under CI=true) without a server to start,
``skip: REASON`` leaves it out. Blocks that are not commands carry another info
string (``text`` for output and synopses, ``toml``); a block with no info string is an error, so
that nothing is left out by accident. The blocks not run are a test of their own, one per block,
each with its reason, so a reader of the test output sees every one.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pg_fixtures import require

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN_KINDS = ("bash", "python")
OTHER_KINDS = ("text", "toml")
BLOCK_TIMEOUT_S = 240
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.M | re.S)
MARKER = re.compile(r"^<!-- docs-test: (file|expect|exit|checkout|needs|skip)(?::?\s+(.*?))? -->$")
NEEDS = ("postgresql",)  # what a block may need; without it the page skips (fails under CI=true)


@dataclass
class Block:
    page: Path
    line: int
    kind: str
    code: str
    file: str | None = None
    expect: list[str] = field(default_factory=list)
    exit: int = 0
    checkout: bool = False
    needs: list[str] = field(default_factory=list)
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks with the markers on the lines right above each."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        block = Block(page, line, match.group(1), match.group(2))
        above = text[: match.start()].split("\n")[:-1]
        while above and MARKER.match(above[-1]):
            what, value = MARKER.match(above.pop()).groups()
            if what == "file":
                block.file = value
            elif what == "expect":
                block.expect.append(value)
            elif what == "exit":
                block.exit = int(value)
            elif what == "checkout":
                block.checkout = True
            elif what == "needs":
                assert value in NEEDS, f"{page}:{line}: 'docs-test: needs {value}': one of {', '.join(NEEDS)}"
                block.needs.append(value)
            else:
                block.skip = value or ""
        found.append(block)
    return found


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # `python` is this interpreter
    return env


def _missing(need: str) -> str | None:
    """Why a block's need is not met here, or None."""
    assert need == "postgresql", need
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install -e '.[test]')"
    if not (shutil.which("pg_ctl") or glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")):
        return "the PostgreSQL server binaries are not installed (Debian: apt-get install postgresql)"
    return None


def _run(block: Block, folder: Path) -> None:
    for need in block.needs:
        reason = _missing(need)
        require(None if reason is None else f"{block.where} needs {need}: {reason}")
    cwd = ROOT if block.checkout else folder
    if block.kind == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    else:
        command = [sys.executable, "-c", block.code]
    out = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    shown = f"{block.where}: exit {out.returncode}\n--- stdout\n{out.stdout[-3000:]}\n--- stderr\n{out.stderr[-3000:]}"
    assert out.returncode == block.exit, f"expected exit {block.exit}; {shown}"
    for text in block.expect:
        assert text in out.stdout + out.stderr, f"{text!r} not in the output; {shown}"


def _runs(block: Block) -> bool:
    return block.kind in RUN_KINDS and block.skip is None and not block.file


PAGES_WITH_CODE = [page for page in PAGES if any(_runs(b) for b in blocks(page))]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_and_python_example_on_the_page_runs(page, tmp_path):
    for block in blocks(page):
        if block.file:  # a file the next blocks use (a module, pyproject.toml, a plan)
            target = tmp_path / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            continue
        if _runs(block):
            _run(block, tmp_path)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.where)
def test_every_block_says_what_it_is(block):
    allowed = RUN_KINDS + OTHER_KINDS
    assert block.kind in allowed, f"{block.where}: a fenced block needs an info string, one of {', '.join(allowed)} (got {block.kind!r})"
    if block.kind not in RUN_KINDS:
        assert not (block.expect or block.skip is not None), f"{block.where}: a marker on a {block.kind} block, which never runs"


NOT_RUN = [b for b in ALL_BLOCKS if b.kind in RUN_KINDS and b.skip is not None]


@pytest.mark.parametrize("block", NOT_RUN, ids=lambda b: f"{b.where} ({b.skip})")
def test_a_command_that_is_not_run_says_why(block):
    reason = block.skip or ""
    assert len(reason.split()) >= 4, f"{block.where}: 'docs-test: skip:' needs a reason a reader can check, e.g. which test runs it instead"


def test_the_docs_run_most_of_their_commands():
    ran = [b for b in ALL_BLOCKS if _runs(b)]
    assert len(ran) >= len(NOT_RUN), f"{len(NOT_RUN)} blocks are not run and only {len(ran)} are: show short forms that run"
