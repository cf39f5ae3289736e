"""Operating errors of ``python -m engine``: one line naming the input and the fix, exit status 2,
no traceback, and nothing already stored changes (nor is a file created by a command that fails)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading

import pytest

import engine._cli
from disk_fixtures import fill, mounted_tmpfs
from engine import EngineError, FakeClock, SqliteStore, StoreFailed, Worker, default_workflow


def run_cli(*args: str, **options):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120, **options)


def assert_one_line_error(out, *fragments: str) -> str:
    """Exit status 2, nothing on stdout, one line on stderr that holds every fragment."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def fingerprint(path: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)  # reads even on a read-only file system
    try:
        return conn.execute("SELECT id, state, payload, last_error FROM job LEFT JOIN job_payload ON job_id = id ORDER BY id").fetchall()
    finally:
        conn.close()


# -- opening ----------------------------------------------------------------------------------------
def test_a_database_in_a_missing_directory_is_one_line_naming_the_directory(tmp_path):
    db = str(tmp_path / "no" / "such" / "e.db")
    assert_one_line_error(run_cli("submit", "--db", db, "doc-1", "{}"), str(tmp_path / "no" / "such"), "does not exist")
    assert not os.path.exists(tmp_path / "no")


def test_a_directory_given_as_the_database_is_one_line_saying_so(tmp_path):
    for command in (("status",), ("work",), ("submit", "doc-1", "{}")):
        assert_one_line_error(run_cli(command[0], "--db", str(tmp_path), *command[1:]), "is a directory")


def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    for command in (("status",), ("work",), ("submit", "doc-1", "{}")):
        assert_one_line_error(run_cli(command[0], "--db", str(path), *command[1:]), "not a SQLite database", str(path))
    assert path.read_bytes() == before


def test_status_on_a_missing_file_says_so_and_creates_nothing(tmp_path):
    db = str(tmp_path / "typo.db")
    for command in (("status",), ("requeue", "doc-1"), ("cancel", "doc-1"), ("replay", "doc-1", "fetch")):
        assert_one_line_error(run_cli(command[0], "--db", db, *command[1:]), "does not exist", db)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", [("status",), ("replay", "doc-1", "fetch")])
def test_a_read_only_command_on_an_empty_file_leaves_it_empty_in_one_line(tmp_path, command):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    assert_one_line_error(run_cli(command[0], "--db", str(path), *command[1:]), repr(str(path)), "is empty", "submit")
    assert path.read_bytes() == b""
    assert os.listdir(tmp_path) == ["empty.db"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may create a file next to /dev/null")
def test_status_on_dev_null_is_one_line_and_creates_no_journal_beside_it():
    before = set(os.listdir("/dev"))
    try:
        assert_one_line_error(run_cli("status", "--db", "/dev/null"), "'/dev/null'", "not a regular file")
        assert_one_line_error(run_cli("work", "--db", "/dev/null"), "'/dev/null'", "not a regular file")
    finally:
        made = set(os.listdir("/dev")) - before
        for name in made & {"null-journal", "null-wal", "null-shm"}:
            os.unlink(f"/dev/{name}")
    assert not made & {"null-journal", "null-wal", "null-shm"}


@pytest.mark.parametrize("command", [("status",), ("requeue", "doc-1"), ("replay", "doc-1", "fetch")])
def test_a_file_uri_to_a_missing_file_is_checked_like_a_path_and_creates_nothing(tmp_path, command):
    out = run_cli(command[0], "--db", "file:typo.db", *command[1:], cwd=tmp_path)
    assert_one_line_error(out, "'typo.db' does not exist")
    assert os.listdir(tmp_path) == []


def test_a_file_uri_names_the_file_it_points_to(tmp_path):
    """submit creates the file the URI names (not one called 'file:new.db'); status then reads it."""
    assert run_cli("submit", "--db", "file:new.db?cache=private", "doc-1", "{}", cwd=tmp_path).returncode == 0
    assert "new.db" in os.listdir(tmp_path)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("file:")]
    out = run_cli("status", "--db", f"file://{tmp_path / 'new.db'}")
    assert out.returncode == 0, out.stderr
    assert "pending" in out.stdout


def test_a_file_uri_with_a_host_is_one_line(tmp_path):
    assert_one_line_error(run_cli("status", "--db", "file://db.example/e.db", cwd=tmp_path), "'db.example'", "file:/path")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("job, payload", [("doc-1", "{not json"), ("doc-1", "[1, 2]"), ("", "{}"), ("doc-\x1b", '{"a": NaN}')])
def test_a_submit_that_fails_creates_no_database_file(tmp_path, job, payload):
    db = str(tmp_path / "new.db")
    assert_one_line_error(run_cli("submit", "--db", db, job, payload))
    assert os.listdir(tmp_path) == []


def test_a_deleted_wal_file_is_one_line_and_the_worker_does_not_spin(tmp_path):
    db = str(tmp_path / "e.db")
    store = SqliteStore(db)  # held open: its -wal file holds the committed job
    store.submit("doc-1", {"source": "doc-1"}, now=0.0)
    os.remove(db + "-wal")
    try:
        for command in ("status", "work"):
            assert_one_line_error(run_cli(command, "--db", db), db)
    finally:
        store.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes a file of mode 000")
def test_a_database_of_mode_000_is_one_line_naming_the_permission(tmp_path):
    db = str(tmp_path / "e.db")
    SqliteStore(db).close()
    os.chmod(db, 0)
    try:
        assert_one_line_error(run_cli("status", "--db", db), db, "permission")
    finally:
        os.chmod(db, 0o600)


@contextlib.contextmanager
def _tmpfs_with_a_database(path, size: str):
    """A tmpfs of ``size`` at ``path`` holding a closed crashgate database with one job (needs root, else skipped)."""
    with mounted_tmpfs(path, size):
        db = str(path / "e.db")
        store = SqliteStore(db)
        store.submit("doc-1", {"source": "doc-1"}, now=0.0)
        store.close()
        yield db


@pytest.fixture
def read_only_mount(tmp_path):
    """A tmpfs holding a crashgate database, remounted read-only."""
    with _tmpfs_with_a_database(tmp_path / "ro", "4m") as db:
        subprocess.run(["mount", "-o", "remount,ro", os.path.dirname(db)], check=True, capture_output=True)
        yield db


def test_a_database_on_a_read_only_file_system_is_one_line_even_for_status(read_only_mount):
    before = fingerprint(read_only_mount)
    for command in (("status",), ("work",), ("submit", "doc-2", "{}"), ("cancel", "doc-1")):
        assert_one_line_error(run_cli(command[0], "--db", read_only_mount, *command[1:]), read_only_mount, "read-only")
    assert fingerprint(read_only_mount) == before


def test_a_damaged_database_page_is_a_store_failure_not_an_exception_out_of_run_once(tmp_path):
    db = str(tmp_path / "e.db")
    store = SqliteStore(db)
    store.submit_many([(f"doc-{n}", {"source": "x" * 2000}) for n in range(50)], now=0.0)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    with open(db, "r+b") as f:  # overwrite the middle of the file, as a failing disk would
        f.seek(4096 * 5)
        f.write(b"\xff" * 4096 * 5)
    store = SqliteStore(db)
    try:
        result = Worker(store, default_workflow(), clock=FakeClock(1.0), threaded=False).run_once()
        assert result.outcome == "unavailable"
        assert "SQLITE_CORRUPT" in result.error
    finally:
        store.close()


# -- the worker on a failing disk -------------------------------------------------------------------
class FullDisk(SqliteStore):
    """A database whose every write fails with SQLITE_FULL (the fake of a disk that is full)."""

    CLAIMS_MAX = 1_000  # a loop that does not back off is stopped here, so the test fails, not hangs

    claims = 0

    def claim(self, owner, **kwargs):
        self.claims += 1
        if self.claims > self.CLAIMS_MAX:
            raise KeyboardInterrupt("the work loop did not stop on a failing disk")
        raise StoreFailed(f"database {self.path!r}: BEGIN IMMEDIATE failed with SQLITE_FULL (database or disk is full)")


def test_run_once_on_a_failing_disk_says_what_the_database_reported(tmp_path):
    store = FullDisk(str(tmp_path / "e.db"))
    result = Worker(store, default_workflow(), clock=FakeClock(0.0), threaded=False).run_once()
    assert result.outcome == "unavailable"
    assert "SQLITE_FULL" in result.error


def test_work_on_a_failing_disk_backs_off_then_exits_2_with_the_database_s_message(tmp_path, monkeypatch, capsys):
    store = FullDisk(str(tmp_path / "e.db"))
    monkeypatch.setattr(engine._cli, "open_store", lambda url, **options: store)
    monkeypatch.setattr(engine._cli, "STORE_FAILURE_PAUSE_S", 0.001)
    assert engine._cli.main(["work", "--db", store.path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "SQLITE_FULL" in err[0] and "nothing was lost" in err[0]
    assert store.claims <= engine._cli.STORE_FAILURES_MAX


# -- what reaches the terminal ----------------------------------------------------------------------
ESCAPES = "\x1b[2J\x1b[H\x1b]0;owned\x07\r"


def test_status_and_the_job_commands_escape_control_characters_in_ids_and_errors(tmp_path):
    db = str(tmp_path / "e.db")
    job = f"doc{ESCAPES}1"
    out = run_cli("submit", "--db", db, job, '{"source": "doc-1"}')
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\r" not in out.stdout
    assert "doc\\x1b[2J" in out.stdout
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE job SET state = 'failed_fetch', last_error = ? WHERE id = ?", (f"fetch: boom{ESCAPES}fake ok", job))
    conn.close()
    out = run_cli("status", "--db", db)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and "\r" not in out.stdout
    assert "boom\\x1b[2J" in out.stdout
    out = run_cli("requeue", "--db", db, job)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "(last error: fetch: boom\\x1b[2J" in out.stdout
    out = run_cli("cancel", "--db", db, job)
    assert "\x1b" not in out.stdout + out.stderr


# -- the command line's own arguments --------------------------------------------------------------
@pytest.mark.parametrize("jobs", ["-5", "0", "many"])
def test_example_refuses_a_job_count_below_1_in_one_line(tmp_path, jobs):
    db = str(tmp_path / "ex.db")
    assert_one_line_error(run_cli("example", "--db", db, "--jobs", jobs), "--jobs")
    assert not os.path.exists(db)


def test_example_refuses_an_existing_database_and_leaves_it_as_it_was(tmp_path):
    """example runs its own jobs and drains the outbox into a collector: on a real database it
    would have marked the real jobs' effects sent without sending them."""
    db = str(tmp_path / "app.db")
    assert run_cli("submit", "--db", db, "real-1", '{"source": "doc-1"}').returncode == 0
    assert run_cli("work", "--db", db).returncode == 0  # the job is delivered: its effect waits in the outbox
    files = sorted(tmp_path.iterdir())
    before = [p.read_bytes() for p in files]
    assert_one_line_error(run_cli("example", "--db", db, "--jobs", "1"), repr(db), "exists", "a path where there is no file yet")
    assert sorted(tmp_path.iterdir()) == files and [p.read_bytes() for p in files] == before


def test_example_refuses_a_postgresql_database(tmp_path):
    """A server's database is never a new one: its real jobs' effects would be drained into the example's collector."""
    out = run_cli("example", "--db", "postgresql://ops:secret@127.0.0.1:1/prod", "--jobs", "1")
    assert_one_line_error(out, "example creates a new SQLite database")
    assert "secret" not in out.stderr


@pytest.mark.parametrize("db", ["", ":memory:", "sqlite:///:memory:", "sqlite:///", "file::memory:?cache=shared"])
@pytest.mark.parametrize("command", [["submit", "j", "{}"], ["status"], ["example", "--jobs", "1"]])
def test_a_database_that_keeps_nothing_is_refused_in_one_line(tmp_path, db, command):
    out = run_cli(command[0], "--db", db, *command[1:], cwd=tmp_path)
    assert_one_line_error(out, "keeps nothing once the command ends", "--db app.db")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("spec", ["json:dumps", "os:remove", "engine._workflow:Step", "no_such_module_xyz:wf", "engine:nope", "engine", "sys:exit",
                                  "os:abort"])
def test_a_bad_workflow_is_one_line_naming_it(tmp_path, spec):
    """It is checked before it is called: os:abort, called as a factory, ended the process with SIGABRT."""
    line = assert_one_line_error(run_cli("states", "--workflow", spec), spec)
    assert "MODULE:ATTR" in line or "Workflow" in line


def test_unknown_job_says_status_counts_jobs_per_state(tmp_path):
    db = str(tmp_path / "e.db")
    SqliteStore(db).close()
    line = assert_one_line_error(run_cli("requeue", "--db", db, "doc-404"), "'doc-404'")
    assert "lists the jobs" not in line
    assert "in each state" in line


def test_every_argument_error_is_one_line_with_exit_2():
    for args in (("submit",), ("bogus",), ("work", "--lease-s", "x", "--db", "e.db"), ("resolve", "--db", "e.db", "doc-1", "explode")):
        assert_one_line_error(run_cli(*args))


@pytest.mark.parametrize("lease", ["1e12", "1e308", "nan", "inf", "0", "-1"])
def test_work_refuses_a_lease_it_cannot_keep_in_one_line_and_claims_nothing(tmp_path, lease):
    """A lease near the float limit overflowed the clock's arithmetic and failed every job claimed."""
    db = str(tmp_path / "app.db")
    assert run_cli("submit", "--db", db, "doc-1", '{"source": "doc-1"}').returncode == 0
    assert_one_line_error(run_cli("work", "--db", db, "--lease-s", lease), "lease_s=")
    assert fingerprint(db) == [("doc-1", "pending", '{"source":"doc-1"}', None)]


@pytest.mark.parametrize("url", ["notaurl", "ftp://x/", "", "http://", "http://[::1", "http://127.0.0.1:99999/x", "http://a\x01b/", "http://a b/"])
def test_send_refuses_a_receiver_url_it_cannot_post_to_and_leaves_the_outbox_as_it_was(tmp_path, url):
    """A malformed url failed every due effect and pushed its retry back, or raised a ValueError."""
    db = str(tmp_path / "app.db")
    assert run_cli("submit", "--db", db, "doc-1", '{"source": "doc-1"}').returncode == 0
    assert run_cli("work", "--db", db).returncode == 0
    conn = sqlite3.connect(db)
    before = conn.execute("SELECT attempts, next_attempt_at, last_error, sent_at FROM outbox").fetchall()
    assert_one_line_error(run_cli("send", "--db", db, "--url", url), "receiver url", "e.g. http://127.0.0.1:8080/effects")
    assert conn.execute("SELECT attempts, next_attempt_at, last_error, sent_at FROM outbox").fetchall() == before
    conn.close()


def test_ctrl_c_stops_a_command_with_exit_130_and_no_traceback(tmp_path):
    import signal
    import time

    db = tmp_path / "ex.db"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "example", "--db", str(db), "--jobs", "10000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not db.exists() and time.monotonic() < deadline:  # it is working: its database is there
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.strip() == "interrupted" and "Traceback" not in err


def test_a_new_database_that_cannot_be_written_leaves_no_empty_file_and_an_old_one_stays(tmp_path, monkeypatch):
    """On a full disk the schema's write fails after SQLite made the file: it was left, 0 bytes."""
    def full(self):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(SqliteStore, "_ensure_schema", full)
    new = tmp_path / "new.db"
    with pytest.raises(EngineError) as caught:
        SqliteStore(str(new))
    assert "disk is full" in str(caught.value) and not new.exists()
    old = tmp_path / "old.db"
    old.write_bytes(b"")
    with pytest.raises(EngineError):
        SqliteStore(str(old))
    assert old.exists()  # not this open's to remove


@pytest.fixture
def full_disk(tmp_path):
    """A small tmpfs holding a crashgate database (closed: no -wal or -shm left), then filled up."""
    with _tmpfs_with_a_database(tmp_path / "full", "512k") as db:
        fill(os.path.dirname(db))
        yield db


def test_a_database_on_a_full_disk_is_one_line_saying_what_the_disk_said(full_disk):
    """The read that failed ended its transaction, and the COMMIT after it said 'cannot commit - no
    transaction is active', which hid the disk's own error."""
    before = fingerprint(full_disk)
    for command in (("status",), ("submit", "doc-2", "{}")):
        line = assert_one_line_error(run_cli(command[0], "--db", full_disk, *command[1:]), full_disk)
        assert "no transaction is active" not in line and "free disk space" in line, line
    assert fingerprint(full_disk) == before
