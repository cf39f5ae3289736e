"""A throwaway PostgreSQL server, started from the installed server binaries, for tests and the soak.

It runs ``initdb`` and ``pg_ctl`` into a fresh temporary directory, listens on a free loopback
port (and on a unix socket inside that directory, never the system one), and is stopped and
deleted by :meth:`TemporaryPostgres.stop`. Durability against the machine's crash is switched off
(``fsync=off``), which makes each test faster: the machine does not crash during a test. A crash
of the server itself (``pg_ctl restart -m immediate``, a killed postmaster) loses nothing it
acknowledged, since every commit is written to the write-ahead log in the operating system's
cache before it returns (``synchronous_commit = on``): a soak may restart it under its workers.
Never point it at data you want to keep.

Its superuser is a superuser of the machine in all but name (``COPY ... TO PROGRAM`` runs any
command as the server's account), so nobody connects without its password: a random one, made
for each server, checked with ``scram-sha-256`` on the socket and on TCP alike (no ``trust``
line), and kept in a libpq password file (mode 0600, inside the server's 0700 directory) that
the URLs name with ``passfile=``. The password itself never appears in a URL, a command line or
a message. Another account of the machine can neither read the password file nor reach the
socket.

The server must not outlive the process that started it: a SIGKILL or an unhandled SIGTERM
skips :meth:`~TemporaryPostgres.stop`, and the server would run on, with its directory, until
the machine restarts. So a small watchdog process, started with the server, waits for its
owner's death (a pidfd where the kernel has them) and then stops the server at once and deletes
its directory; a normal stop() ends the watchdog first.

PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` user if it
exists (Debian's package creates it), else as ``nobody``; the temporary directory is given to
that user.

>>> with TemporaryPostgres() as server:               # doctest: +SKIP
...     url = server.create_database("scratch")
...     url.startswith("postgresql://crashgate@127.0.0.1:"), "passfile=" in url
(True, True)
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
from typing import Any

__all__ = ["TemporaryPostgres", "ServerUnavailable", "ServerStateError", "find_server_bindir", "SUPERUSER"]

SUPERUSER = "crashgate"
START_TIMEOUT_S = 60
START_TRIES_MAX = 3  # a free port can be taken between choosing it and binding it: try again
LOG_TAIL_CHARS_MAX = 2000
DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Settings for a server whose data is thrown away: no fsync, small memory, loopback only. Commits
# still wait for their write-ahead log to be written (not flushed): a server crash loses nothing.
SETTINGS = (
    "listen_addresses = '127.0.0.1'",
    "fsync = off",
    "synchronous_commit = on",
    "full_page_writes = off",
    "shared_buffers = 16MB",
    "max_connections = 200",
    "max_locks_per_transaction = 128",
    "log_min_messages = warning",
)
RUN_AS_ROOT_CANDIDATES = ("postgres", "nobody")
PASSWORD_BYTES = 32  # of randomness in the superuser's password (secrets.token_urlsafe)
PASSFILE_NAME = "pgpass"  # the clients' libpq password file, in the server's directory
PWFILE_NAME = "initdb.pw"  # initdb reads the password from it; deleted once initdb is done
# Who may connect, and how: the superuser only, with its password, on the socket and on loopback
# TCP. Nothing is trusted: another account of this machine must not become the superuser.
HBA = (
    "local all {user} scram-sha-256",
    "host all {user} 127.0.0.1/32 scram-sha-256",
)
WATCHDOG_POLL_S = 1.0  # how often the watchdog checks that the server's directory still exists
WATCHDOG_STOP_WAIT_S = 10.0  # how long it waits for the server to exit after SIGQUIT before SIGKILL
WATCHDOG_EXIT_WAIT_S = 5.0  # how long stop() waits for the watchdog to exit after SIGTERM


# The watchdog (run with ``python -I -S -c``: the standard library only, no site, no environment).
# Arguments: the owner's pid, the server's directory, its data directory, the poll period and how
# long to wait for the server to exit. It waits for the owner's death: a pidfd becomes readable
# when it exits, and where there is none the watchdog polls its parent (the owner, until it dies:
# a pid compared with getppid() cannot have been reused by another process). A directory that
# disappears means the owner stopped the server itself. Then: SIGQUIT to the postmaster (what
# ``pg_ctl stop -m immediate`` sends; pg_ctl refuses to run as root), SIGKILL if it lingers, and
# the directory deleted. A pg_ctl start orphaned by its owner's death may still be starting the
# server: a few passes catch it.
WATCHDOG_SCRIPT = r"""
import os, select, shutil, signal, sys, time
owner, directory, data_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
poll_s, stop_wait_s = float(sys.argv[4]), float(sys.argv[5])

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is dead (an init that reaps nothing keeps it)
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True

def postmaster():
    try:
        with open(os.path.join(data_dir, "postmaster.pid")) as f:
            pid = int(f.readline())
    except (OSError, ValueError):
        return None
    try:  # a stale pid file may name another process by now: the postmaster runs in its data directory
        if os.readlink(f"/proc/{pid}/cwd") != os.path.realpath(data_dir):
            return None
    except FileNotFoundError:
        return None
    except OSError:
        pass
    return pid if alive(pid) else None

try:
    pidfd = os.pidfd_open(owner)
except (AttributeError, OSError):
    pidfd = None
while os.getppid() == owner:
    if not os.path.isdir(directory):
        sys.exit(0)
    if pidfd is not None:
        if select.select([pidfd], [], [], poll_s)[0]:
            break  # the owner exited
    else:
        time.sleep(poll_s)
for _ in range(3):
    pid = postmaster()
    if pid is not None:
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + stop_wait_s
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)
    time.sleep(poll_s)
    if not os.path.exists(directory) and postmaster() is None:
        break
"""


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server binaries (``initdb``, ``pg_ctl``) on this machine, or psycopg missing."""


class ServerStateError(RuntimeError):
    """A :class:`TemporaryPostgres` was used out of order (its URL before start(), start() twice).

    A real check rather than an ``assert``: under ``python -O`` a second start() would otherwise
    start another server and lose track of the first, which would run on with nobody to stop it.
    """


def find_server_bindir() -> str | None:
    """The directory holding ``initdb`` and ``pg_ctl``: from PATH, else Debian's newest version."""
    on_path = shutil.which("pg_ctl")
    candidates = [os.path.dirname(os.path.realpath(on_path))] if on_path else []
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(debian, key=lambda d: _version_key(d.split("/")[-2]), reverse=True)
    for bindir in candidates:
        if all(os.access(os.path.join(bindir, exe), os.X_OK) for exe in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


class TemporaryPostgres:
    """A PostgreSQL cluster in a temporary directory; :meth:`url` names a database on it."""

    def __init__(self, *, bindir: str | None = None, parent: str | None = None, settings: tuple[str, ...] = ()) -> None:
        # ``parent``: where the server's directory is made (default: the temporary directory);
        # ``settings``: lines appended after :data:`SETTINGS`, which they override (a later line
        # wins), e.g. ``fsync = on`` for a server whose power is cut (chaos.hostfaults.power_runs).
        self.parent = parent
        self.settings = tuple(settings)
        self.bindir = bindir or find_server_bindir()
        if self.bindir is None:
            raise ServerUnavailable(
                "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; "
                "install them, e.g. `apt-get install postgresql`"
            )
        self.port: int | None = None
        self.dir: str | None = None
        self._run_as = _unprivileged_user()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._owner_pid: int | None = None

    def __enter__(self) -> "TemporaryPostgres":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def data_dir(self) -> str:
        return os.path.join(self._started_dir("data_dir"), "data")

    @property
    def log_path(self) -> str:
        return os.path.join(self._started_dir("log_path"), "server.log")

    @property
    def passfile(self) -> str:
        """The libpq password file (mode 0600) that holds the superuser's password for the clients."""
        return os.path.join(self._started_dir("passfile"), PASSFILE_NAME)

    def url(self, dbname: str = "postgres") -> str:
        """``dbname``'s URL: it names the password file, never the password (a URL is printed,
        logged and passed on command lines, which every account of the machine can read)."""
        if self.port is None:
            raise ServerStateError("url(): the server is not running; start() it first (or use it as a context manager)")
        passfile = urllib.parse.quote(self.passfile, safe="/")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}?passfile={passfile}"

    def _started_dir(self, what: str) -> str:
        if self.dir is None:
            raise ServerStateError(f"{what}: the server has no directory yet; start() it first")
        return self.dir

    def start(self) -> None:
        """initdb into a new temporary directory and start the server on a free loopback port."""
        if self.dir is not None:
            raise ServerStateError(
                f"this server was already started (in {self.dir}, port {self.port}); stop() it before starting it "
                "again, or create another TemporaryPostgres"
            )
        self.dir = tempfile.mkdtemp(prefix="crashgate-pg-", dir=self.parent)  # mode 0700
        try:
            if self._run_as is not None:
                os.chown(self.dir, self._run_as.pw_uid, self._run_as.pw_gid)
            self._start_watchdog()
            self._initdb(secrets.token_urlsafe(PASSWORD_BYTES))
            for attempt in range(START_TRIES_MAX):
                self.port = _free_port()
                with open(os.path.join(self.data_dir, "postgresql.auto.conf"), "a") as conf:
                    conf.write("\n".join((*SETTINGS, *self.settings, f"port = {self.port}", f"unix_socket_directories = '{self.dir}'", "")))
                try:
                    self._run("pg_ctl", "-D", self.data_dir, "-l", self.log_path, "-w", "-t", str(START_TIMEOUT_S), "start")
                    return
                except ServerUnavailable:
                    if attempt + 1 == START_TRIES_MAX or "could not bind" not in self._log_tail():
                        raise
        except BaseException:
            self._remove()
            raise

    def _initdb(self, password: str) -> None:
        """A new cluster whose superuser needs ``password``, and the clients' password file."""
        pwfile = os.path.join(self._started_dir("initdb"), PWFILE_NAME)
        _write_private(pwfile, password + "\n", self._run_as)
        try:
            self._run(
                "initdb", "-D", self.data_dir, "-U", SUPERUSER, "--auth=scram-sha-256", f"--pwfile={pwfile}",
                "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
            )
        finally:
            os.unlink(pwfile)
        with open(os.path.join(self.data_dir, "pg_hba.conf"), "w") as hba:  # initdb's, replaced: ours says it all
            hba.write("".join(line.format(user=SUPERUSER) + "\n" for line in HBA))
        # libpq's format, host:port:database:user:password; token_urlsafe has no ':' or '\\' to escape.
        _write_private(self.passfile, f"*:*:*:{SUPERUSER}:{password}\n", None)

    def _start_watchdog(self) -> None:
        """A process that stops the server and deletes its directory once this process is gone."""
        self._owner_pid = os.getpid()
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", WATCHDOG_SCRIPT, str(self._owner_pid), self._started_dir("watchdog"),
             self.data_dir, str(WATCHDOG_POLL_S), str(WATCHDOG_STOP_WAIT_S)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd="/",  # never inside the directory it deletes (nor on a file system someone unmounts)
            start_new_session=True,  # a Ctrl-C of the owner's terminal is the owner's to handle: stop()
        )

    def _stop_watchdog(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None or self._owner_pid != os.getpid():
            return  # a forked copy of this object: the watchdog is the owner's child, not ours
        watchdog.terminate()
        try:
            watchdog.wait(WATCHDOG_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()

    def restart(self) -> None:
        """Start the server again on the same data directory and port, after it died (its
        processes were killed): it recovers from its write-ahead log first."""
        self._started_dir("restart()")
        self._run("pg_ctl", "-D", self.data_dir, "-l", self.log_path, "-w", "-t", str(START_TIMEOUT_S), "start")

    def crash_restart(self) -> None:
        """Restart the server as a crash would (``pg_ctl restart -m immediate``): every session is
        cut at once, and the server recovers from its write-ahead log before it accepts
        connections again (clients meanwhile hear "the database system is starting up")."""
        self._started_dir("crash_restart()")
        self._run("pg_ctl", "-D", self.data_dir, "-l", self.log_path, "-m", "immediate", "-w", "-t", str(START_TIMEOUT_S), "restart")

    def stop(self) -> None:
        """Stop the server at once (its data is thrown away) and delete its directory."""
        if self.dir is None:
            return
        self._stop_watchdog()
        if os.path.exists(os.path.join(self.data_dir, "postmaster.pid")):
            try:
                self._run("pg_ctl", "-D", self.data_dir, "-m", "immediate", "-w", "stop")
            except ServerUnavailable:
                pass  # it was not running: nothing left to stop
        self._remove()

    def create_database(self, name: str, *, template: str = "template0") -> str:
        """Create database ``name`` (copied from ``template``) and return its URL."""
        psycopg, sql = _psycopg()
        for identifier in (name, template):
            if not DATABASE_NAME.match(identifier):
                raise ValueError(f"database name {identifier!r} must match {DATABASE_NAME.pattern}")
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name``, closing any connection a test left open to it."""
        psycopg, sql = _psycopg()
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # -- helpers ---------------------------------------------------------------------------------
    def _run(self, exe: str, *args: str) -> None:
        if self.bindir is None:  # __init__ refuses a missing bindir; only a caller resetting it gets here
            raise ServerUnavailable("no PostgreSQL server binaries: bindir is not set")
        user = self._run_as
        env = {**os.environ, "LC_ALL": "C"}
        if user is not None:
            env["HOME"] = self.dir or "/"
        proc = subprocess.run(
            [os.path.join(self.bindir, exe), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.dir,
            user=None if user is None else user.pw_uid,
            group=None if user is None else user.pw_gid,
            extra_groups=None if user is None else [],
        )
        if proc.returncode != 0:
            raise ServerUnavailable(
                f"{exe} failed with exit status {proc.returncode}: {(proc.stderr or proc.stdout).strip()}\n{self._log_tail()}"
            )

    def _log_tail(self) -> str:
        try:
            with open(self.log_path) as log:
                return log.read()[-LOG_TAIL_CHARS_MAX:]
        except (OSError, ServerStateError):
            return ""

    def _remove(self) -> None:
        self._stop_watchdog()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        self.port = None


def _write_private(path: str, text: str, owner: pwd.struct_passwd | None) -> None:
    """Create ``path`` with mode 0600 from the start (never readable by others, not even for a
    moment), owned by ``owner`` (None: this process's account)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if owner is not None:
            os.fchown(fd, owner.pw_uid, owner.pw_gid)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _unprivileged_user() -> pwd.struct_passwd | None:
    """None when not root; otherwise the account the server runs as (the server refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in RUN_AS_ROOT_CANDIDATES:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerUnavailable(f"running as root and none of the users {', '.join(RUN_AS_ROOT_CANDIDATES)} exists to run PostgreSQL as")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        from psycopg import sql
    except ImportError as exc:
        raise ServerUnavailable("psycopg is not installed; pip install 'crashgate[postgres]'") from exc
    return psycopg, sql
