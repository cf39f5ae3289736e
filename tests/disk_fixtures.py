"""Small real file systems for the tests of full and read-only disks: a tmpfs mounted for one test.

Mounting needs root; elsewhere the test skips with one line saying so. A full disk is a real
``ENOSPC`` from the kernel (a file of zeros written until the tmpfs refuses more), never a mock, so
SQLite, ``os.replace`` and the harness meet the error exactly as they would on a user's machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

__all__ = ["mounted_tmpfs", "fill"]

FILL_CHUNK_BYTES = 4096


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"512k"``, ``"2m"``) mounted at the new folder ``path``, unmounted after."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a file system needs root")
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path | str) -> None:
    """Write zeros to ``folder/fill`` until the disk refuses: every later write there fails with ENOSPC."""
    fd = os.open(os.path.join(folder, "fill"), os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * FILL_CHUNK_BYTES):
            pass
    except OSError:  # the disk is full
        pass
    finally:
        os.close(fd)
