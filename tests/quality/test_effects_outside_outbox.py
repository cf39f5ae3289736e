"""Planted bugs: a step that sends its receipt through its own client (a file append, an HTTP
POST, an SMTP send, a subprocess) instead of returning it as an effect. The crash matrix must fail
each with effects-through-outbox, at the step's own line, saying what was done to what; the same
workflow returning the receipt as an effect, and one whose write is declared no effect, hold.

Method: run_matrix on the clean family in fork mode (real forks, real SIGKILLs), against a real
local HTTP server and a real local SMTP listener on 127.0.0.1 started by the test.
"""

from __future__ import annotations

import http.client
import http.server
import inspect
import logging
import logging.handlers
import os
import smtplib
import socketserver
import sqlite3
import subprocess
import sys
import tempfile
import threading
from typing import Any

import pytest

from chaos import ReferenceAdapter, run_matrix
from engine import Step, StepOutput, Workflow

MARK = "# the planted send"


class Receipts(ReferenceAdapter):
    """charge (the paid call) -> receipt, which sends the receipt as ``send(ctx, email)`` does."""

    name = "receipts"
    effect_kinds: tuple[str, ...] = ()

    def __init__(self, where: str = "") -> None:
        super().__init__()
        self.where = where

    def send(self, ctx: Any, email: dict) -> dict:
        return {}

    def workflow(self, world: Any) -> Workflow:
        def charge(ctx: Any) -> StepOutput:
            reply = world.model.complete(ctx, "charge", f"order {ctx.job_id}")
            return StepOutput({"charged": len(reply.text)}, cost_usd=reply.cost_usd)

        def receipt(ctx: Any) -> StepOutput:
            email = {"to": f"{ctx.job_id}@customers.example", "amount": ctx.inputs["charge"]["charged"]}
            return StepOutput({"sent": True}, effects=self.send(ctx, email))

        return Workflow("receipts", [Step("charge", charge), Step("receipt", receipt, effects=self.effect_kinds)])

    def payload(self, job_id: str) -> dict:
        return {"order": job_id}


class Outboxed(Receipts):
    effect_kinds = ("receipt",)

    def send(self, ctx: Any, email: dict) -> dict:
        return {"receipt": email}


class SpoolFile(Receipts):
    def send(self, ctx: Any, email: dict) -> dict:
        with open(self.where, "a", encoding="utf-8") as spool:  # the planted send
            spool.write(repr(email) + "\n")
        return {}


class HttpPost(Receipts):
    def send(self, ctx: Any, email: dict) -> dict:
        host, port = self.where.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", "/receipts", body=repr(email), headers={"Idempotency-Key": f"{ctx.job_id}:receipt"})  # the planted send
        conn.getresponse().read()
        conn.close()
        return {}


class SmtpSend(Receipts):
    def send(self, ctx: Any, email: dict) -> dict:
        host, port = self.where.split(":")
        with smtplib.SMTP(host, int(port), timeout=10) as smtp:  # the planted send
            smtp.sendmail("shop@example.com", [email["to"]], f"Subject: receipt\n\n{email}")
        return {}


class Subprocess(Receipts):
    def send(self, ctx: Any, email: dict) -> dict:
        subprocess.run([sys.executable, "-c", "pass"], check=True)  # the planted send
        return {}


class TempInSpool(Receipts):
    """A scratch file made with tempfile, but in the mail-drop folder and kept: a sent email."""

    def send(self, ctx: Any, email: dict) -> dict:
        with tempfile.NamedTemporaryFile("w", dir=self.where, suffix=".eml", delete=False) as drop:  # the planted send
            drop.write(repr(email))
        return {}


class TempScratch(Receipts):
    """A scratch file in the temporary folder, and a log file: neither is an effect."""

    def send(self, ctx: Any, email: dict) -> dict:
        with tempfile.NamedTemporaryFile("w", suffix=".eml") as scratch:
            scratch.write(repr(email))
        log = logging.getLogger(f"receipts.{self.where}")
        if not log.handlers:
            log.addHandler(logging.FileHandler(os.path.join(self.where, "receipts.log")))
        log.warning("receipt for %s", ctx.job_id)
        return {}


class MailLog(Receipts):
    """A log record sent by mail (logging's SMTPHandler) is mail."""

    def send(self, ctx: Any, email: dict) -> dict:
        host, port = self.where.split(":")
        log = logging.getLogger(f"receipts.mail.{port}")
        if not log.handlers:
            log.addHandler(logging.handlers.SMTPHandler((host, int(port)), "shop@example.com", [email["to"]], "receipt"))
        log.error("receipt for %s", ctx.job_id)  # the planted send
        return {}


class OwnSqlite(Receipts):
    """The receipt inserted into a SQLite table of the team's own."""

    def send(self, ctx: Any, email: dict) -> dict:
        conn = sqlite3.connect(self.where)  # the planted send
        conn.execute("CREATE TABLE IF NOT EXISTS mail (body TEXT)")
        conn.execute("INSERT INTO mail VALUES (?)", (repr(email),))
        conn.commit()
        conn.close()
        return {}


class SpoolAllowed(SpoolFile):
    """The same write, declared no effect (a cache, say) by the adapter."""

    @property
    def allowed_effects(self) -> tuple[str, ...]:
        return (f"file:{self.where}",)


def _line(cls: type) -> str:
    source, first = inspect.getsourcelines(cls.send)
    offset = next(n for n, text in enumerate(source) if MARK in text)
    return f"{os.path.relpath(inspect.getsourcefile(cls))}:{first + offset}"  # the user's line, as the finding shows it


def _effects(report: Any) -> list[str]:
    found = [str(v) for base in report.baselines.values() for v in base.violations]
    found += [str(v) for r in report.results for v in r.outcome.violations]
    return [v for v in found if v.startswith("effects-through-outbox")]


class _Posts(http.server.BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self) -> None:
        self.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class _Smtp(socketserver.StreamRequestHandler):
    """Just enough SMTP for smtplib.sendmail: greet, accept every command, take the data."""

    messages: list[str] = []

    def handle(self) -> None:
        self.wfile.write(b"220 localhost ready\r\n")
        while True:
            line = self.rfile.readline()
            if not line:
                return
            verb = line.strip().split(b" ")[0].upper()
            if verb == b"DATA":
                self.wfile.write(b"354 go on\r\n")
                body = []
                for data in iter(self.rfile.readline, b""):
                    if data in (b".\r\n", b".\n"):
                        break
                    body.append(data.decode())
                self.messages.append("".join(body))
                self.wfile.write(b"250 queued\r\n")
            elif verb == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


@pytest.fixture
def http_receiver():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Posts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def smtp_listener():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _matrix(adapter: Any, **kwargs: Any) -> Any:
    return run_matrix(adapter, families=["clean"], faults=["crash"], **kwargs)


def test_a_receipt_appended_to_a_spool_file_fails_at_the_steps_line(tmp_path):
    spool = str(tmp_path / "sent_emails.txt")
    report = _matrix(SpoolFile(spool))
    found = _effects(report)
    assert found, "the gate was green on a step that writes its email itself"
    assert f"opened {spool!r} for append, done from {_line(SpoolFile)}" in found[0]
    assert report.baselines["clean"].violations  # the run without any fault already does it: one headline
    assert open(spool).read().count("customers.example") >= 2  # it really was sent more than once


def test_a_receipt_posted_to_a_local_http_server_fails_at_the_steps_line(http_receiver):
    report = _matrix(HttpPost(http_receiver))
    found = _effects(report)
    assert found and f"connected to {http_receiver}, done from {_line(HttpPost)}" in found[0]
    assert len(_Posts.received) >= 2


def test_a_receipt_sent_to_a_local_smtp_listener_fails_at_the_steps_line(smtp_listener):
    report = _matrix(SmtpSend(smtp_listener))
    found = _effects(report)
    assert found and f"connected to {smtp_listener}, done from {_line(SmtpSend)}" in found[0]
    assert len(_Smtp.messages) >= 2


def test_a_step_that_runs_a_subprocess_fails_at_the_steps_line():
    report = _matrix(Subprocess())
    found = _effects(report)
    assert found and f"started the process '{sys.executable} -c pass', done from {_line(Subprocess)}" in found[0]


def test_the_receipt_returned_as_an_effect_holds():
    report = _matrix(Outboxed())
    assert report.points > 0 and report.violations == 0


def test_a_write_the_adapter_declares_no_effect_holds_and_a_run_may_declare_it_too(tmp_path):
    spool = str(tmp_path / "cache.txt")
    assert _effects(_matrix(SpoolAllowed(spool))) == []
    assert _effects(_matrix(SpoolFile(spool), allowed_effects=[f"file:{tmp_path}/*"])) == []
    assert _effects(_matrix(SpoolFile(spool), allowed_effects=["connect:127.0.0.1:*"])) != []  # another kind allows nothing here


def test_an_allowed_effect_that_is_not_kind_and_pattern_is_refused_before_any_scenario(tmp_path):
    from chaos.matrix.runner import MatrixUsageError

    with pytest.raises(MatrixUsageError, match=r"allowed effect 'cache' is not KIND:PATTERN"):
        _matrix(Outboxed(), allowed_effects=["cache"])


def test_a_tempfile_kept_in_a_mail_drop_folder_is_an_effect_and_one_in_the_temporary_folder_is_not(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    found = _effects(_matrix(TempInSpool(str(drop))))
    assert found and f"for writing, done from {_line(TempInSpool)}" in found[0] and str(drop) in found[0]
    logs = tmp_path / "logs"
    logs.mkdir()
    assert _effects(_matrix(TempScratch(str(logs)))) == []
    assert "receipt for doc-1" in (logs / "receipts.log").read_text()  # the log was written, and is no finding


def test_mail_sent_by_a_logging_handler_is_an_effect(smtp_listener):
    found = _effects(_matrix(MailLog(smtp_listener)))
    assert found and f"connected to {smtp_listener}, done from {_line(MailLog)}" in found[0]


def test_a_sqlite_table_of_the_teams_own_is_an_effect_unless_opened_read_only(tmp_path):
    found = _effects(_matrix(OwnSqlite(str(tmp_path / "mail.db"))))
    assert found and f"opened the SQLite database {str(tmp_path / 'mail.db')!r}" in found[0] and _line(OwnSqlite) in found[0]


def test_allowing_a_services_connections_does_not_allow_mail_or_a_post_to_it(smtp_listener, http_receiver):
    for adapter, where in ((SmtpSend(smtp_listener), "sent mail over SMTP to"), (HttpPost(http_receiver), "sent an HTTP POST to")):
        found = _effects(_matrix(adapter, allowed_effects=["connect:127.0.0.1:*"]))
        assert found and where in found[0], (type(adapter).__name__, found)
        host, port = adapter.where.split(":")
        kind = "mail" if isinstance(adapter, SmtpSend) else "http"
        assert _effects(_matrix(adapter, allowed_effects=["connect:127.0.0.1:*", f"{kind}:{host}:{port}"])) == []
