"""Headless Chromium for the tests that check what a page really shows (the HTML report, the docs).

Without Chromium such a test skips, saying what to install; under ``CI=true`` it fails instead,
since CI must not pass without rendering the page.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pg_fixtures import require

CHROMIUM_TIMEOUT_S = 120


def chromium() -> str:
    """The Chromium binary; skips (or fails under CI=true) when there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(None if found else "chromium is not installed (Debian: apt-get install chromium); .ci/run installs it")
    assert found is not None
    return found


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with a profile of its own and nothing fetched from the network."""
    command = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=True)
