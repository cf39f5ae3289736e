"""Without PostgreSQL binaries the PostgreSQL tests skip with one line, except under CI=true."""

import os

pytest_plugins = ["pytester"]

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFTEST = f"""
import sys
sys.path.insert(0, {TESTS_DIR!r})
import engine.pgserver
engine.pgserver.find_server_bindir = lambda: None  # a machine without the server binaries
from pg_fixtures import pg_server, pg_url
"""


def run(pytester, monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("def test_needs_postgres(pg_url):\n    pass\n")
    return pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider", "-p", "no:xdist")


def test_without_server_binaries_postgres_tests_skip_with_a_one_line_reason(pytester, monkeypatch):
    result = run(pytester, monkeypatch, None)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*PostgreSQL unavailable: no PostgreSQL server binaries*apt-get install postgresql*"])


def test_under_ci_a_missing_server_is_a_failure_not_a_skip(pytester, monkeypatch):
    result = run(pytester, monkeypatch, "true")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*CI=true and PostgreSQL is unavailable*"])
