"""The sdist: the whole project, whose tests run from it as they run from the checkout.

Goal: a packager (a distribution, a mirror, a user without Git) who downloads the sdist gets what
the checkout has: the tests with their helper modules, the fault plans, the examples, the docs.
Method: build the sdist from the checkout (``python -m build --sdist``, in the backend's own
isolated environment), compare its files with the files git tracks, then unpack it and collect its
tests with pytest, with PYTHONPATH on the unpacked tree so that its own code is imported: no
collection error, and as many tests as the checkout collects.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import NamedTuple

import pytest

from builds import BUILD_TIMEOUT_S, ROOT, RUN_TIMEOUT_S, clean_env, run, source_tree_lock, warnings_in
from pg_fixtures import require

# Tracked files that only serve a Git checkout.
NOT_SHIPPED = frozenset({".gitignore"})
COLLECTED = re.compile(r"^(\d+) tests? collected", re.M)


class Built(NamedTuple):
    sdist: Path
    log: str  # what the build printed, the backend's warnings included


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    require(None if importlib.util.find_spec("build") else "the build package is not installed (pip install -e '.[test]' installs it)")
    out = tmp_path_factory.mktemp("sdist")
    with source_tree_lock():
        build = run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT)], cwd=out, timeout=BUILD_TIMEOUT_S)
    sdists = list(out.glob("crashgate-*.tar.gz"))
    assert len(sdists) == 1, sdists
    return Built(sdists[0], build.stdout + build.stderr)


def _members(sdist: Path) -> set[str]:
    """The sdist's files, relative to its top folder (crashgate-VERSION/)."""
    with tarfile.open(sdist) as tar:
        return {member.name.split("/", 1)[1] for member in tar.getmembers() if member.isfile()}


def _tracked() -> set[str] | None:
    """The files git tracks in this checkout, or None where the tests run outside one (from an sdist)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except FileNotFoundError:
        return None
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != ROOT:
        return None
    return set(run(["git", "ls-files"], cwd=ROOT).stdout.splitlines())


def _collected(tree: Path) -> int:
    """How many tests pytest collects in ``tree``, importing that tree's own code; a collection
    error fails the test with pytest's output."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=tree, env=clean_env(pythonpath=tree), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    tail = out.stdout[-3000:] + out.stderr[-3000:]
    assert out.returncode == 0, f"collecting the tests in {tree} exited {out.returncode}\n{tail}"
    assert " error" not in out.stdout.splitlines()[-1], tail
    count = COLLECTED.search(out.stdout)
    assert count is not None, tail
    return int(count.group(1))


def test_the_sdist_builds_without_a_warning(built):
    warnings = warnings_in(built.log)
    assert warnings == [], "the sdist's build warned:\n" + "\n".join(warnings)


def test_the_sdist_holds_every_file_git_tracks_with_the_license(built):
    tracked = _tracked()
    if tracked is None:
        pytest.skip(f"{ROOT} is not a git checkout: no list of the project's files to compare the sdist with")
    missing = sorted(tracked - NOT_SHIPPED - _members(built.sdist))
    assert missing == [], f"the sdist lacks {len(missing)} tracked files (add their kind to MANIFEST.in): {missing[:20]}"
    assert "LICENSE" in _members(built.sdist)


@pytest.mark.slow
def test_the_unpacked_sdist_collects_every_test_of_the_checkout_with_its_own_code(built, tmp_path):
    with tarfile.open(built.sdist) as tar:
        # The "data" filter (Python 3.11.4 on) refuses links and paths out of the folder.
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (tree,) = tmp_path.glob("crashgate-*")
    where = run([sys.executable, "-c", "import chaos, engine; print(chaos.__file__); print(engine.__file__)"],
                cwd=tree, env=clean_env(pythonpath=tree)).stdout.split()
    for path in where:
        assert Path(path).resolve().is_relative_to(tree.resolve()), f"imported {path}, not the unpacked sdist's code in {tree}"

    from_sdist = _collected(tree)
    from_checkout = _collected(ROOT)
    assert from_sdist == from_checkout, f"the sdist collects {from_sdist} tests, the checkout {from_checkout}"
