"""A throwaway PostgreSQL server, started from the installed server binaries, for tests and the soak.

It runs ``initdb`` and ``pg_ctl`` into a fresh temporary directory, listens on a free loopback
port (and on a unix socket inside that directory, never the system one), and is stopped and
deleted by :meth:`TemporaryPostgres.stop`. Durability is switched off (``fsync=off``): the server
is never killed, only the clients are, so a crash test loses nothing to it, and each test runs
faster. Never point it at data you want to keep.

PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` user if it
exists (Debian's package creates it), else as ``nobody``; the temporary directory is given to
that user.

>>> with TemporaryPostgres() as server:               # doctest: +SKIP
...     url = server.create_database("scratch")
...     url.startswith("postgresql://crashgate@127.0.0.1:")
True
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from typing import Any

__all__ = ["TemporaryPostgres", "ServerUnavailable", "ServerStateError", "find_server_bindir", "SUPERUSER"]

SUPERUSER = "crashgate"
START_TIMEOUT_S = 60
START_TRIES_MAX = 3  # a free port can be taken between choosing it and binding it: try again
LOG_TAIL_CHARS_MAX = 2000
DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
# Settings for a server whose data is thrown away: no fsync, small memory, loopback only.
SETTINGS = (
    "listen_addresses = '127.0.0.1'",
    "fsync = off",
    "synchronous_commit = off",
    "full_page_writes = off",
    "shared_buffers = 16MB",
    "max_connections = 200",
    "max_locks_per_transaction = 128",
    "log_min_messages = warning",
)
RUN_AS_ROOT_CANDIDATES = ("postgres", "nobody")


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

    def url(self, dbname: str = "postgres") -> str:
        if self.port is None:
            raise ServerStateError("url(): the server is not running; start() it first (or use it as a context manager)")
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

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
        self.dir = tempfile.mkdtemp(prefix="crashgate-pg-", dir=self.parent)
        try:
            if self._run_as is not None:
                os.chown(self.dir, self._run_as.pw_uid, self._run_as.pw_gid)
            self._run(
                "initdb", "-D", self.data_dir, "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
                "--locale=C", "--no-sync", "--no-instructions",
            )
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

    def restart(self) -> None:
        """Start the server again on the same data directory and port, after it died (its
        processes were killed): it recovers from its write-ahead log first."""
        self._started_dir("restart()")
        self._run("pg_ctl", "-D", self.data_dir, "-l", self.log_path, "-w", "-t", str(START_TIMEOUT_S), "start")

    def stop(self) -> None:
        """Stop the server at once (its data is thrown away) and delete its directory."""
        if self.dir is None:
            return
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
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        self.port = None


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
