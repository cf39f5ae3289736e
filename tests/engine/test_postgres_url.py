"""A PostgreSQL URL is never shown with its password, and what is wrong with it is said in one line.

The password may be in the userinfo (``postgresql://app:secret@host/db``) or a query parameter
(``?password=secret``), and a driver's message may quote the part of a URL it could not parse:
every message hides it. A URL libpq cannot read is an operating error that names it (redacted)
and the form to use; a server that answers "the database system is starting up" is not a bad URL:
opening waits for it (as a worker would), then says the server is starting up.
"""

import socket
import struct
import subprocess
import sys
import threading

import pytest

from engine import InvalidInput, PostgresStore, StoreFailed, open_store

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")


@pytest.fixture
def unused_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_server_is_reported_with_the_url_and_no_password(unused_port):
    with pytest.raises(InvalidInput) as info:
        open_store(f"postgresql://app:s3cret@127.0.0.1:{unused_port}/jobs")
    message = str(info.value)
    assert f"cannot connect to 'postgresql://app:***@127.0.0.1:{unused_port}/jobs'" in message
    assert "s3cret" not in message
    assert "check the database URL" in message


def test_a_password_in_the_query_string_is_hidden_too(unused_port):
    with pytest.raises(InvalidInput) as info:
        open_store(f"postgresql://app@127.0.0.1:{unused_port}/jobs?password=s3cret&connect_timeout=5")
    message = str(info.value)
    assert f"'postgresql://app@127.0.0.1:{unused_port}/jobs?password=***&connect_timeout=5'" in message
    assert "s3cret" not in message


@pytest.mark.parametrize("url, shown, why", [
    ("postgresql://app:my s3cret@127.0.0.1/jobs", "postgresql://app:***@127.0.0.1/jobs", "unexpected spaces found in \"***\""),
    ("postgresql://127.0.0.1/jobs?password=s3cret&colour=blue", "postgresql://127.0.0.1/jobs?password=***&colour=blue",
     'invalid URI query parameter: "colour"'),
    ("postgresql://app:s3cret@127.0.0.1/jobs?sslmode", "postgresql://app:***@127.0.0.1/jobs?sslmode", "missing key/value separator"),
])
def test_a_url_libpq_cannot_read_is_one_line_naming_it_without_its_password_and_the_fix(url, shown, why):
    with pytest.raises(InvalidInput) as info:
        open_store(url)
    message = str(info.value)
    assert message.startswith(f"database URL {shown!r} cannot be read: ")
    assert why in message
    assert "write it as postgresql://user[:password]@host[:port]/dbname" in message
    assert "s3cret" not in message and "\n" not in message


def test_the_command_line_refuses_an_unreadable_url_with_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "engine", "status", "--db", "postgresql://app:my s3cret@127.0.0.1/jobs"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: database URL 'postgresql://app:***@127.0.0.1/jobs'")
    assert "Traceback" not in out.stderr and "s3cret" not in out.stderr


@pytest.mark.parametrize("url, shown", [
    ("postgresql://app:s3cret@db/jobs?password=other&sslmode=require", "postgresql://app:***@db/jobs?password=***&sslmode=require"),
    ("postgresql://db/jobs?PassWord=s3cret", "postgresql://db/jobs?PassWord=***"),
    ("postgresql://app:p/w@db:5432/jobs", "postgresql://app:***@db:5432/jobs"),
    ("postgresql://app:s3cret@db/jobs?options=-c%20x%3Dy@z", "postgresql://app:***@db/jobs?options=-c%20x%3Dy@z"),
    ("host=db password='a b' user=app", "host=db password=*** user=app"),
    ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
])
def test_redacted_hides_the_password_of_any_form(url, shown):
    assert PostgresStore.redacted(url) == shown


class StartingUpServer:
    """A loopback TCP server that answers every connection as a PostgreSQL server that is starting
    up does: an ErrorResponse with SQLSTATE 57P03 to the startup packet. Counts the attempts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.attempts = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        fields = b"".join(code + text.encode() + b"\0" for code, text in (
            (b"S", "FATAL"), (b"V", "FATAL"), (b"C", "57P03"), (b"M", "the database system is starting up")))
        reply = b"E" + struct.pack("!i", 4 + len(fields) + 1) + fields + b"\0"
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.attempts += 1
                length = struct.unpack("!i", conn.recv(4))[0]
                conn.recv(length - 4)
                conn.sendall(reply)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def starting_up():
    server = StartingUpServer()
    yield server
    server.close()


def test_a_server_starting_up_is_waited_for_then_reported_as_starting_up_not_as_a_bad_url(starting_up):
    url = f"postgresql://app:s3cret@127.0.0.1:{starting_up.port}/jobs?sslmode=disable&gssencmode=disable"
    with pytest.raises(StoreFailed) as info:
        PostgresStore(url, startup_wait_s=1.0)
    message = str(info.value)
    assert not isinstance(info.value, InvalidInput)
    assert "the server is starting up" in message and "try again in a moment" in message
    assert "check the database URL" not in message and "s3cret" not in message
    assert starting_up.attempts >= 3  # it tried again while it waited
