"""A PostgreSQL URL that cannot be reached is an operating error that names it, without its password."""

import pytest

from engine import InvalidInput, open_store

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")


def test_an_unreachable_server_is_reported_with_the_url_and_no_password(unused_port):
    with pytest.raises(InvalidInput) as info:
        open_store(f"postgresql://app:s3cret@127.0.0.1:{unused_port}/jobs")
    message = str(info.value)
    assert f"cannot connect to 'postgresql://app:***@127.0.0.1:{unused_port}/jobs'" in message
    assert "s3cret" not in message
    assert "check the database URL" in message


@pytest.fixture
def unused_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
