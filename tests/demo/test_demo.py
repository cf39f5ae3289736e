"""The demo end to end: real processes SIGKILLed at random, a real loopback receiver, the catalog.

Goal: show that `python -m chaos demo` survives its kills with every invariant held and prints
every figure it promises, and that it fails loudly when something is actually wrong (a planted
receiver that does not dedupe). Method: small runs (60 documents, a kill every ~0.3 s, at least
3 kills) of the real command and of the library call behind it.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

from chaos.fleet.demo import parser, run_demo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--jobs", "60", "--kill-every", "0.3", "--kills-min", "3", "--plain"]


def _demo(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", "demo", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_small_demo_survives_its_kills_holds_every_invariant_and_prints_every_figure():
    done = _demo(*SMALL, "--seed", "3")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "== the four operating queries" in out
    for query in ("where is everything", "what is stuck", "what is failing", "which step costs the money"):
        assert query in out
    assert re.search(r"delivered\s+60\b", out)
    assert re.search(r"total spend: \$\d+\.\d{4} over \d+ paid model calls", out)
    assert re.search(r"wasted spend: \$\d+\.\d{4} \(\d+ calls? paid but not memoised", out)
    kills = int(re.search(r"kills survived: (\d+)", out).group(1))
    assert kills >= 3
    receiver = re.search(r"receiver:\s+(\d+) requests received, (\d+) effects applied, duplicates applied: 0", out)
    assert receiver is not None, out
    requests, applied = int(receiver.group(1)), int(receiver.group(2))
    assert applied == 60
    assert requests >= 62  # two replies were dropped on purpose, so at least two keys arrived twice
    for name in ("legal-transitions", "no-spend-after-memo", "bounded-spend", "effects-complete", "drains", "idempotent-submit"):
        assert re.search(rf"held\s+{name}\b", out)
    assert "OK: " in out
    assert "VIOLATED" not in out


def test_the_demo_exits_non_zero_and_names_the_invariants_when_the_receiver_does_not_dedupe():
    out = io.StringIO()
    code = run_demo(parser().parse_args(SMALL), out=out, receiver_dedupes=False)
    text = out.getvalue()
    assert code == 1, text[-3000:]
    assert re.search(r"VIOLATED\s+outbox-at-least-once", text)
    assert re.search(r"VIOLATED\s+effects-complete", text)
    assert re.search(r"effect 'doc-\d{5}:delivery' was applied 2 times at the receiver", text)
    assert "FAILED (seed 0). Re-run the same schedule with:" in text
    assert "python -m chaos demo --jobs 60" in text


def test_the_demo_keeps_its_database_and_ledgers_when_given_a_path_and_refuses_to_reuse_them(tmp_path):
    db = str(tmp_path / "demo.db")
    done = _demo("--jobs", "10", "--kill-every", "0", "--kills-min", "0", "--plain", "--db", db)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert os.path.exists(db)
    assert sorted(os.listdir(db + "-chaos")) == ["calls.db", "logs", "receiver.db"]
    again = _demo("--jobs", "10", "--db", db)
    assert again.returncode == 2
    assert f"--db {db}: {db} exists" in again.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--jobs", "0"], "--jobs 0: pass from 1 to 10,000,000"),
        (["--workers", "100000"], "--workers 100000: pass from 1 to 256"),
        # NaN turned the monkey off without a word; inf divided into zero; a lease of 0 failed in every worker
        (["--kill-every", "nan"], "--kill-every nan: pass a finite number of seconds (0 turns the monkey off)"),
        (["--kill-every", "inf"], "--kill-every inf: pass a finite number of seconds (0 turns the monkey off)"),
        (["--lease", "0"], "--lease 0: pass a number of seconds > 0 and at most 604800 (a week)"),
        (["--db", ""], "--db '': pass the path of a new SQLite file, e.g. --db run.db (not a URL, not an in-memory database)"),
        (["--db", "/no/such/folder/d.db"], "--db /no/such/folder/d.db: the folder /no/such/folder does not exist; create it or pass a path in a folder that does"),
        (["--kill-every", "0"], "--kill-every 0 turns the monkey off, so --kills-min 10 cannot be met; pass --kills-min 0"),
        (["--db", "postgresql://x@127.0.0.1/y"], "the demo runs on SQLite; for PostgreSQL run: python -m chaos soak --backend postgresql"),
    ],
)
def test_the_demo_refuses_options_it_cannot_honour_with_a_message_that_names_the_fix(argv, message, capsys):
    assert run_demo(parser().parse_args(argv)) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"
