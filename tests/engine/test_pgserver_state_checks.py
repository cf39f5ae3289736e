"""The throwaway PostgreSQL server checks its own state with real checks, not ``assert``: under
``python -O`` a second start() is refused (it would leak the running server) and url() before
start() says what to do."""

import os
import subprocess
import sys

import pytest

from engine.pgserver import find_server_bindir

SCRIPT = r"""
import os, sys
from engine.pgserver import ServerStateError, TemporaryPostgres

server = TemporaryPostgres()
try:
    server.url()
except ServerStateError as exc:
    print("url before start:", exc)
server.start()
first_dir, first_port = server.dir, server.port
try:
    server.start()
    print("second start: accepted")
except ServerStateError as exc:
    print("second start:", exc)
assert_same = (server.dir, server.port) == (first_dir, first_port)
print("same server:", assert_same)
server.stop()
print("removed:", not os.path.exists(first_dir))
"""


@pytest.mark.skipif(find_server_bindir() is None, reason="no PostgreSQL server binaries")
def test_a_second_start_is_refused_under_python_O_and_the_first_server_is_stopped_and_removed():
    out = subprocess.run([sys.executable, "-O", "-c", SCRIPT], capture_output=True, text=True, timeout=180, env=os.environ)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("url before start: ") and "start()" in lines[0]
    assert lines[1].startswith("second start: ") and "already started" in lines[1]
    assert lines[2:] == ["same server: True", "removed: True"]
