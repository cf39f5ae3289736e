"""The throwaway PostgreSQL server lets in only who holds its password, and dies with its owner.

Its superuser can run any command as the server's account (``COPY ... TO PROGRAM``), so: no
``trust`` anywhere, a random password checked with scram-sha-256 on TCP and on the socket, kept
in a 0600 file that the URLs name (the password itself is in no URL); another account of the
machine is refused. And a process that started a server and is killed (SIGKILL, or a SIGTERM it
does not handle) leaves no server and no folder behind: its watchdog stops and removes them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid

import pytest

from engine.pgserver import SUPERUSER, TemporaryPostgres, find_server_bindir

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

GONE_WITHIN_S = 30.0  # the watchdog polls every second and waits 10 s at most for the server
CONNECT_TIMEOUT_S = "10"


def _connect_as_nobody_in_particular(**params):
    """A connection attempt with the superuser's name and whatever else is given, and no passfile."""
    return psycopg.connect(user=SUPERUSER, dbname="postgres", connect_timeout=CONNECT_TIMEOUT_S,
                           passfile="/nonexistent", **params)


def test_the_url_names_a_0600_password_file_and_holds_no_password(pg_server):
    url = pg_server.url()
    assert f"passfile={pg_server.passfile}" in url
    mode = stat.S_IMODE(os.stat(pg_server.passfile).st_mode)
    assert mode == 0o600, oct(mode)
    assert stat.S_IMODE(os.stat(pg_server.dir).st_mode) == 0o700  # the socket's folder too
    with open(pg_server.passfile) as f:
        password = f.read().strip().rsplit(":", 1)[1]
    assert len(password) >= 32 and password not in url
    with psycopg.connect(url) as conn:  # the URL is enough for the server's own clients
        assert conn.execute("SELECT current_user").fetchone()[0] == SUPERUSER


def test_no_line_of_the_servers_access_rules_trusts_anyone(pg_server):
    with open(os.path.join(pg_server.data_dir, "pg_hba.conf")) as f:
        rules = [line.split() for line in f if line.strip() and not line.lstrip().startswith("#")]
    assert rules, "an empty pg_hba.conf refuses everyone, which is not what the server means"
    assert {rule[-1] for rule in rules} == {"scram-sha-256"}, rules


@pytest.mark.parametrize("where", ["tcp", "socket"])
def test_without_the_password_the_superuser_is_refused_with_an_authentication_error(pg_server, where):
    host = {"tcp": "127.0.0.1", "socket": pg_server.dir}[where]
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        _connect_as_nobody_in_particular(host=host, port=pg_server.port)
    with pytest.raises(psycopg.OperationalError, match=f'password authentication failed for user "{SUPERUSER}"'):
        _connect_as_nobody_in_particular(host=host, port=pg_server.port, password="not-the-password")


@pytest.fixture
def other_account():
    """A throwaway Unix account of this machine (root only: useradd), deleted afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("creating another local account needs root and useradd")
    name = f"cgprobe{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.mark.parametrize("where", ["tcp", "socket"])
def test_another_local_account_cannot_run_commands_as_the_server(pg_server, other_account, where):
    host = {"tcp": "127.0.0.1", "socket": pg_server.dir}[where]
    psql = os.path.join(find_server_bindir() or "/usr/bin", "psql")
    attempt = subprocess.run(
        [psql, "-w", "-h", host, "-p", str(pg_server.port), "-U", SUPERUSER, "-d", "postgres",
         "-c", "COPY (SELECT 1) TO PROGRAM 'id'"],
        capture_output=True, text=True, timeout=60, cwd="/", user=other_account.pw_uid, group=other_account.pw_gid,
        extra_groups=[], env={"PATH": os.environ.get("PATH", ""), "HOME": "/", "PGCONNECT_TIMEOUT": CONNECT_TIMEOUT_S},
    )
    assert attempt.returncode != 0, f"another account ran a command as the server: {attempt.stdout}"
    expected = {"tcp": "no password supplied", "socket": "Permission denied"}[where]  # the socket's folder is 0700
    assert expected in attempt.stderr, attempt.stderr


OWNER = r"""
import os, sys, time
from engine.pgserver import TemporaryPostgres
server = TemporaryPostgres()
server.start()
with open(os.path.join(server.data_dir, "postmaster.pid")) as f:
    print(server.dir, int(f.readline()), flush=True)
time.sleep(600)
"""


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"  # a zombie nobody reaps is dead too
    except FileNotFoundError:
        return True


@pytest.mark.skipif(find_server_bindir() is None, reason="no PostgreSQL server binaries")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_server_and_its_folder_go_when_the_process_that_started_it_is_killed(sig):
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        line = owner.stdout.readline()
        assert line, "the owner could not start a server"
        directory, postmaster = line.split()[0], int(line.split()[1])
        assert os.path.isdir(directory) and not _dead(postmaster)
        owner.send_signal(sig)
        owner.wait(30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < deadline and not (_dead(postmaster) and not os.path.exists(directory)):
            time.sleep(0.1)
        assert _dead(postmaster), f"the server (pid {postmaster}) outlived its owner by {GONE_WITHIN_S:.0f} s"
        assert not os.path.exists(directory), f"{directory} outlived its owner by {GONE_WITHIN_S:.0f} s"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_normal_stop_ends_the_watchdog_too():
    server = TemporaryPostgres()
    server.start()
    watchdog = server._watchdog
    assert watchdog is not None and watchdog.poll() is None
    server.stop()
    assert watchdog.poll() is not None
