"""How the crash matrix shares its points among worker processes, and libfiu's preload refusing
to act where it is not loaded."""

from __future__ import annotations

import pytest

from chaos.core import libfiu
from chaos.matrix.work import CHUNK_POINTS, chunked


@pytest.mark.parametrize("items, jobs", [(202, 2), (5, 2), (1, 4), (CHUNK_POINTS * 3 + 1, 2), (0, 2)])
def test_every_point_is_run_once_and_the_processes_share_them_evenly(items, jobs):
    work = [("crash", f"family-{n % 7}", n, -1) for n in range(items)]
    chunks = chunked(work, jobs)
    assert sorted(item for chunk in chunks for item in chunk) == sorted(work)
    assert all(len(chunk) <= CHUNK_POINTS + 1 for chunk in chunks)
    shares = [sum(len(chunk) for chunk in chunks[n::jobs]) for n in range(jobs)]
    assert max(shares) - min(shares) <= max(1, len(chunks) // jobs), shares
    # every family's points are spread too, not left to one process
    if items >= 100:
        for n in range(jobs):
            assert {item[1] for chunk in chunks[n::jobs] for item in chunk} == {f"family-{k}" for k in range(7)}


def test_an_io_fault_outside_a_process_started_by_fiu_run_is_refused_by_name(monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert not libfiu.preloaded()
    with pytest.raises(RuntimeError, match="the io_error fault runs only in a process started by fiu-run -x"):
        libfiu.enable([("posix/io/rw/pwrite", 5)], "io_error")


def test_without_libfiu_the_reason_says_what_to_install(monkeypatch):
    monkeypatch.setattr(libfiu.shutil, "which", lambda name: None)
    assert libfiu.missing() == libfiu.MISSING and "apt-get install fiu-utils" in libfiu.MISSING
    with pytest.raises(ValueError, match="fiu-utils"):
        libfiu.UnderFiu("chaos.matrix.zygote", None, "/nonexistent", "x")
