"""The declared adapter contract (``chaos.adapter``), proven on code that is not the reference engine.

- ``examples/minimal_engine/``: tinyflow, an engine of its own in the design's minimal form (no
  fencing token, no heartbeat), gated by an adapter of at most 60 lines built on
  ``chaos.adapters.sql.SqliteAdapter``. The gate must report its three real weaknesses, each where
  the example's README says, and nothing else.
- ``quality.user_workflows.NotesAdapter``: a workflow on ``engine/`` with its own step names and
  payload, gated by an adapter of at most 20 lines: every reference family completes its baseline.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import io
import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

from chaos import run_matrix
from chaos.adapter import capabilities, load_adapter
from chaos.adapters.sql import JobTable, MemoTable, OutboxTable, SqlSchema

from .user_workflows import NotesAdapter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "minimal_engine")
ADAPTER_LINES_MAX = 60
ENGINE_LINES_MAX = 175  # "about 150": the three tables, the claim, the steps, the sender
NOTES_ADAPTER_LINES_MAX = 20


@pytest.fixture
def tinyflow(minimal_engine_path):
    """The example's adapter, importable here and in the matrix's worker processes."""
    return load_adapter("crash:adapter")


GATE_FAULTS = "--faults crash,pause,interleave"  # what tells the README's gate command from its others


@dataclasses.dataclass
class CommandRun:
    args: list[str]
    code: int
    out: str  # what it printed, stdout then stderr
    report: object  # the MatrixReport it printed


def _run_in_this_process(command: str, monkeypatch: pytest.MonkeyPatch) -> CommandRun:
    """A README command run through the command line's own ``main`` in this process, as the README
    runs it (in the example's folder, with it on the path): its exit code, what it printed, and the
    report it printed, so that one run is both the README's proof and the gate's."""
    from chaos import __main__ as entry
    from chaos import cli

    args = _readme_args(command)
    reports: list[object] = []

    def recorded(*a, **kw):
        reports.append(run_matrix(*a, **kw))
        return reports[-1]

    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.syspath_prepend(EXAMPLE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([EXAMPLE, ROOT]))
    monkeypatch.chdir(EXAMPLE)
    monkeypatch.setattr(cli, "run_matrix", recorded)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = entry.main(args)
    assert len(reports) == 1, f"{command!r} ran {len(reports)} matrices"
    return CommandRun(args, code, stdout.getvalue() + stderr.getvalue(), reports[0])


def _code_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def test_the_adapters_are_a_page_of_code():
    with open(os.path.join(EXAMPLE, "crash.py")) as f:
        adapter_lines = _code_lines(f.read())
    with open(os.path.join(EXAMPLE, "tinyflow.py")) as f:
        engine_lines = _code_lines(f.read())
    notes_lines = _code_lines(inspect.getsource(NotesAdapter))
    assert adapter_lines <= ADAPTER_LINES_MAX, f"the tinyflow adapter has {adapter_lines} lines"
    assert engine_lines <= ENGINE_LINES_MAX, f"tinyflow has {engine_lines} lines"
    assert notes_lines <= NOTES_ADAPTER_LINES_MAX, f"the notes adapter has {notes_lines} lines"


def test_the_gate_reports_tinyflows_three_weaknesses_and_nothing_else(monkeypatch):
    # 1. a call slower than the lease is paid twice; 2. a zombie's write is not fenced; 3. it does
    # not check what it reads or is given: a row or a state it cannot read, a disk that fails, a
    # price that is not a number kill the worker, and a negative price is stored as a cost.
    # The run is the README's gate command (the README's test of its other commands leaves it to
    # this one): what it prints and its exit code, then every finding of the report it printed.
    # One matrix serves both proofs; each ran one of its own, the longest run of this file.
    (command,) = [c for c in _readme_commands() if GATE_FAULTS in c]
    gate = _run_in_this_process(command, monkeypatch)
    assert gate.code == 1, gate.out
    assert "fenced-writes" in gate.out and "bounded-spend" in gate.out, gate.out
    report = gate.report
    assert report.target == "crash:adapter" and report.faults == ("crash", "pause", "interleave"), (report.target, report.faults)
    # Its 12 interleaving pairs a family: at 20, a pair of clock-skew's shows the first weakness
    # again (a second worker ahead of the first pays for the same step), which the README's
    # findings do not list.
    assert gate.args[-2:] == ["--pairs", "12"], gate.args
    found = collections.defaultdict(set)  # invariant -> {(fault, family)}
    for result in report.results:
        for violation in result.outcome.violations:
            found[violation.invariant].add((result.fault, result.family))
    assert set(found) == {"bounded-spend", "fenced-writes", "cost-recorded"}, dict(found)
    assert {family for _, family in found["bounded-spend"]} == {"lost-lease"}  # a call slower than the lease
    assert {family for _, family in found["cost-recorded"]} == {"extract-price-negative"}  # stored as the API answered it
    assert {fault for fault, _ in found["fenced-writes"]} == {"interleave", "pause-expired"}
    # One pause is enough only where a retry puts the job back in the state the zombie expects
    # (the other worker's call fails, the job returns to queued): the retry storm.
    assert {family for fault, family in found["fenced-writes"] if fault == "pause-expired"} == {"retry-storm"}
    failing = {name for name, base in report.baselines.items() if base.violations}
    killed_by = {"damaged-payload", "damaged-memo", "damaged-state", "commit-io-error", "claim-io-error", "sender-read-error",
                 "extract-unpriced", "extract-price-missing", "extract-price-overflow"}
    assert failing == {"lost-lease", "extract-price-negative"} | killed_by, failing
    assert {v.invariant for v in report.baselines["lost-lease"].violations} == {"bounded-spend"}
    assert [str(v) for v in report.baselines["extract-price-negative"].violations] == [
        "cost-recorded: memo of job 'doc-1' step 'draft' records a cost of -0.004, not a finite amount >= 0"]
    # Nothing in tinyflow parses a stored row it cannot read, catches a database error or checks a
    # cost: each kills the worker (and the next one, on every restart).
    assert all({v.invariant for v in report.baselines[name].violations} == {"raised"} for name in killed_by)
    assert "JSONDecodeError" in report.baselines["damaged-payload"].error
    assert "JSONDecodeError" in report.baselines["damaged-memo"].error
    assert "disk I/O error" in report.baselines["commit-io-error"].error
    assert "NOT NULL constraint failed: step_result.cost" in report.baselines["extract-unpriced"].error  # NaN is stored as NULL
    assert "NOT NULL constraint failed: step_result.cost" in report.baselines["extract-price-missing"].error
    assert "OverflowError" in report.baselines["extract-price-overflow"].error
    assert "KeyError: 'review'" in report.baselines["damaged-state"].error  # a state no step owns
    assert set(report.skipped) == {"fetch-connection", "fetch-too-large", "cancel-race", "cancel-too-late", "cancel-unknown",
                                   "cancel-nul-id", "cancel-half-character-id", "requeued-after-quarantine", "poison-payload",
                                   "disk-full", "inline-steps", "hung-call"}, report.skipped
    assert "cancel()" in report.skipped["cancel-race"]
    assert "showed nothing" in report.skipped["disk-full"]  # its writes fit the pages its file has
    assert report.violations > 0


def _readme_commands() -> list[str]:
    with open(os.path.join(EXAMPLE, "README.md")) as f:
        text = f.read()
    return re.findall(r"^\s*(PYTHONPATH=\. python -m chaos .+)$", text, flags=re.M)


def _readme_args(command: str) -> list[str]:
    """A README command's arguments after ``python -m chaos``, as the shell would split them."""
    argv = re.sub(r"\s+#\s.*$", "", command.split("python -m chaos ", 1)[1])  # a trailing comment, not a point's #n
    return [a.strip("'") for a in re.findall(r"'[^']*'|\S+", argv)]


@pytest.mark.parametrize("index", [i for i, c in enumerate(_readme_commands()) if GATE_FAULTS not in c])
def test_the_readmes_commands_show_what_it_says(index):
    """Each README command but the gate's (``test_the_gate_reports_tinyflows_three_weaknesses_and_nothing_else``
    runs that one), in a process of its own."""
    command = _readme_commands()[index]
    args = _readme_args(command)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXAMPLE, ROOT]))
    done = subprocess.run([sys.executable, "-m", "chaos", *args], cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    if args[0] == "adapter":
        assert done.returncode == 0, out
        assert "no   human_actions: this disables the cancel-race and cancel-too-late families" in out
        if "helpdesk_crash:adapter" in args:  # the help desk's answer step sends its reply itself
            assert "yes  sends_from_steps" in out
    elif "lost-lease" in args:
        assert done.returncode == 1, out
        assert "FAILS WITHOUT ANY FAULT in 1 of 1 families (lost-lease)" in out and "bounded-spend: job 'doc-1' step 'draft'" in out
        assert "paid from newsletter.py:" in out  # the user's step, not the adapter that bridges it
    elif "backlog" in args:  # the host's faults (the exact findings: test_host_faults_on_tinyflow.py)
        assert done.returncode == 1, out
        for invariant in ("fenced-writes", "worker-survives", "quarantined", "drains"):
            assert re.search(rf"FINDING \d+: {invariant} at ", out), (invariant, out)
        assert "declares no schema" not in out and "no such column" not in out
    elif "commit-io-error" in args:
        assert done.returncode == 1, out
        assert "FAILS WITHOUT ANY FAULT in 1 of 1 families (commit-io-error): raised:" in out and "disk I/O error" in out
    elif "--point" in args:
        assert done.returncode == 1, out
        assert re.search(r"fenced-writes .*\n  seen: worker 'w-doomed' wrote .* after 'w-b' had taken it over", out), out
    else:
        pytest.fail(f"the README command {command!r} has no check of what it shows: add one")


def test_the_readme_lists_seven_commands():
    assert len(_readme_commands()) == 7


def test_an_adapter_names_what_its_missing_capabilities_disable(tinyflow):
    lines = {s.name: s for s in capabilities(tinyflow)}
    assert lines["human_actions"].present is False and "cancel-race" in lines["human_actions"].disabled
    assert lines["connection"].present and lines["claim_only"].present and lines["writer_attribution"].present


def test_a_workflow_on_the_engine_with_its_own_steps_completes_every_family():
    report = run_matrix(NotesAdapter(), faults=["crash"], jobs=2)
    assert not [name for name, base in report.baselines.items() if base.violations], report.baselines
    assert not report.skipped, report.skipped
    assert report.violations == 0 and report.points > 100


def test_a_schema_without_a_token_attributes_a_claim_to_the_new_lease_owner(tmp_path):
    """The writer attribution of an engine without tokens: a write by the worker that lost the job
    is recorded against the claim that took it, which is what fenced-writes reads."""
    conn = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    conn.execute("CREATE TABLE job (id TEXT PRIMARY KEY, state TEXT, payload TEXT, lease_owner TEXT, lease_until REAL,"
                 " next_run_at REAL, last_error TEXT, result TEXT)")
    conn.execute("CREATE TABLE step_result (job_id TEXT, step TEXT, output TEXT)")
    conn.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY, job_id TEXT, kind TEXT, sent_at REAL)")
    schema = SqlSchema(JobTable(token=None))
    schema.install(conn, attribute_writers=True)
    writer = ["w1"]
    conn.create_function("chaos_writer", 0, lambda: writer[0])
    conn.execute("INSERT INTO job (id, state, payload) VALUES ('j', 'queued', '{}')")
    conn.execute("UPDATE job SET lease_owner = 'w1', lease_until = 30 WHERE id = 'j'")
    writer[0] = "w2"
    conn.execute("UPDATE job SET lease_owner = 'w2', lease_until = 90 WHERE id = 'j'")
    writer[0] = "w1"
    conn.execute("UPDATE job SET state = 'drafting' WHERE id = 'j'")
    snapshot = schema.snapshot(conn)
    assert snapshot.writes == [("j", "claim", "w1", "w1"), ("j", "claim", "w2", "w2"), ("j", "state", "w1", "queued -> drafting")]
    assert snapshot.transitions == [("j", None, "queued"), ("j", "queued", "drafting")]
    from chaos.core.invariants import fenced_writes

    class Ev:  # the one field fenced_writes reads
        pass

    ev = Ev()
    ev.snapshot = snapshot
    assert [v.invariant for v in fenced_writes(ev)] == ["fenced-writes"]


def _memo_db(tmp_path, memo_columns: str):
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    conn.execute("CREATE TABLE job (id TEXT PRIMARY KEY, state TEXT, payload TEXT, lease_owner TEXT, lease_until REAL,"
                 " next_run_at REAL, last_error TEXT, result TEXT)")
    conn.execute(f"CREATE TABLE step_result ({memo_columns})")
    conn.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY, job_id TEXT, kind TEXT, sent_at REAL)")
    SqlSchema().install(conn)
    return conn


def test_cost_recorded_names_each_memo_whose_cost_is_not_an_amount_of_money(tmp_path):
    from chaos.core.invariants import cost_recorded

    conn = _memo_db(tmp_path, "job_id TEXT, step TEXT, output TEXT, cost REAL")
    rows = [("a", 0.002), ("b", 0), ("c", -0.004), ("d", None), ("e", "four"), ("f", 1e999)]
    conn.executemany("INSERT INTO step_result VALUES (?, 'draft', '{}', ?)", rows)

    class Ev:  # the one field cost_recorded reads
        pass

    ev = Ev()
    ev.snapshot = SqlSchema().snapshot(conn)
    assert ev.snapshot.memo_costs[("c", "draft")] == -0.004
    assert [str(v) for v in cost_recorded(ev)] == [
        f"cost-recorded: memo of job {job!r} step 'draft' records a cost of {shown}, not a finite amount >= 0"
        for job, shown in (("c", "-0.004"), ("d", "None"), ("e", "'four'"), ("f", "inf"))
    ]


def test_a_memo_table_without_the_cost_column_is_read_as_an_engine_that_records_no_cost(tmp_path):
    conn = _memo_db(tmp_path, "job_id TEXT, step TEXT, output TEXT")
    conn.execute("INSERT INTO step_result VALUES ('a', 'draft', '{}')")
    # SQLite reads a double-quoted name it does not know as a text: the harness must not take the
    # word "cost" for every row's cost.
    snapshot = SqlSchema().snapshot(conn)
    assert snapshot.memos == {("a", "draft"): "{}"} and snapshot.memo_costs == {}
    with pytest.raises(ValueError, match=r"MemoTable\(cost='price'\): table 'step_result' has no such column"):
        SqlSchema(memo=MemoTable(cost="price")).snapshot(conn)
    assert SqlSchema(memo=MemoTable(cost=None)).snapshot(conn).memo_costs == {}


def test_a_payload_kept_in_a_table_of_its_own_is_read_damaged_and_checked_there(tmp_path):
    """An engine of its own names, whose payload is a row of another table (as the reference
    engine's job_payload is): the snapshot joins it, the damage fault overwrites it there, and the
    consistency query counts a payload row without its task and a task without its payload row."""
    conn = sqlite3.connect(tmp_path / "p.db", isolation_level=None)
    conn.execute("CREATE TABLE task (key TEXT PRIMARY KEY, status TEXT, owner TEXT, owner_until REAL)")
    conn.execute("CREATE TABLE task_input (task_key TEXT PRIMARY KEY, body TEXT)")
    conn.execute("CREATE TABLE memo (task_key TEXT, step TEXT, output TEXT)")
    schema = SqlSchema(JobTable(name="task", id="key", state="status", payload="body", payload_table="task_input",
                                payload_job_id="task_key", lease_owner="owner", lease_until="owner_until",
                                next_run_at=None, last_error=None, result=None),
                       MemoTable(name="memo", job_id="task_key", cost=None), outbox=None)
    schema.install(conn)
    conn.execute("INSERT INTO task (key, status) VALUES ('t1', 'new'), ('t2', 'new')")
    conn.execute("""INSERT INTO task_input (task_key, body) VALUES ('t1', '{"n":1}'), ('orphan', '{}')""")
    snapshot = schema.snapshot(conn)
    assert {key: (view.state, view.payload) for key, view in snapshot.jobs.items()} == {"t1": ("new", '{"n":1}'), "t2": ("new", None)}
    assert schema.overwrite(conn, "t1", "payload", "not json") == '{"n":1}'
    assert conn.execute("SELECT body FROM task_input WHERE task_key = 't1'").fetchone() == ("not json",)
    assert schema.overwrite(conn, "t2", "payload", "x") is None  # no row: nothing written
    counts = {what: conn.execute(query).fetchone()[0] for what, query in schema.consistency_sql()}
    assert counts["payload rows without their job"] == 1 and counts["jobs without their payload row"] == 1
    assert schema.tables() == ["task", "task_input", "memo"]


def test_a_schema_refuses_a_name_that_is_not_an_identifier():
    with pytest.raises(ValueError, match="'job; DROP TABLE x' is not a plain SQL identifier"):
        SqlSchema(JobTable(name="job; DROP TABLE x")).audit_sql()


SCHEMA_OF_MY_OWN = """
CREATE TABLE tasks (task_key TEXT PRIMARY KEY, phase TEXT, args TEXT, holder TEXT, holder_until REAL, fence INTEGER,
                    wake_at REAL, problem TEXT, outcome TEXT);
CREATE TABLE checkpoints (task_key TEXT, stage TEXT, blob TEXT, PRIMARY KEY (task_key, stage));
CREATE TABLE mailbag (mail_id INTEGER PRIMARY KEY, task_key TEXT, effect TEXT, delivered_at REAL);
"""
MY_SCHEMA = SqlSchema(
    JobTable(name="tasks", id="task_key", state="phase", payload="args", lease_owner="holder", lease_until="holder_until",
             token="fence", next_run_at="wake_at", last_error="problem", result="outcome"),
    MemoTable(name="checkpoints", job_id="task_key", step="stage", output="blob", cost=None),
    OutboxTable(name="mailbag", id="mail_id", job_id="task_key", kind="effect", sent_at="delivered_at"),
)


@pytest.mark.parametrize("declared, says", [
    (dataclasses.replace(MY_SCHEMA, job=dataclasses.replace(MY_SCHEMA.job, state="status")),
     "table 'tasks' has no column 'status' (JobTable(state=...); it has args, "),
    # a default name the engine does not have: read as a constant text, it would make every result alike
    (dataclasses.replace(MY_SCHEMA, job=dataclasses.replace(MY_SCHEMA.job, result="result")),
     "table 'tasks' has no column 'result' (JobTable(result=...), or None if the engine keeps none;"),
    (dataclasses.replace(MY_SCHEMA, job=dataclasses.replace(MY_SCHEMA.job, name="task")),
     "table 'task' does not exist (named by JobTable(name=...); the tables: checkpoints, mailbag, tasks)"),
    (dataclasses.replace(MY_SCHEMA, memo=dataclasses.replace(MY_SCHEMA.memo, cost="price")),
     "table 'checkpoints' has no column 'price' (MemoTable(cost=...), or None"),
])
def test_a_declared_schema_that_does_not_match_the_tables_is_refused_naming_each_mismatch(declared, says):
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA_OF_MY_OWN)
    MY_SCHEMA.check(conn)  # the right declaration passes
    with pytest.raises(ValueError, match="the adapter's schema does not match the tables create_schema made") as caught:
        declared.check(conn)
    assert says in str(caught.value), str(caught.value)


def test_a_declared_schema_names_columns_as_sqlite_does():
    """No false refusal: column names in another case, a generated column, and a rowid table's
    rowid are columns SQLite reads; a payload table that is missing is named by its own field."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        "CREATE TABLE job (ID TEXT PRIMARY KEY, State TEXT, payload TEXT, lease_owner TEXT, lease_until REAL, next_run_at REAL, "
        "last_error TEXT, result TEXT GENERATED ALWAYS AS (State) VIRTUAL);"
        "CREATE TABLE step_result (job_id TEXT, step TEXT, output TEXT, PRIMARY KEY (job_id, step)) WITHOUT ROWID;"
        "CREATE TABLE outbox (job_id TEXT, kind TEXT, sent_at REAL);")
    SqlSchema(outbox=OutboxTable(id="rowid")).check(conn)
    with pytest.raises(ValueError, match=r"table 'job_payload' does not exist \(named by JobTable\(payload_table=...\)"):
        SqlSchema(JobTable(payload_table="job_payload"), outbox=OutboxTable(id="rowid")).check(conn)
    with pytest.raises(ValueError, match=r"table 'step_result' has no column 'rowid'"):  # a WITHOUT ROWID table has none
        SqlSchema(memo=MemoTable(step="rowid"), outbox=OutboxTable(id="rowid")).check(conn)


@pytest.mark.parametrize("body, says", [
    ("    steps = [('draft', 'drafTing', 'drafted'), ('review', 'reviewing', 'reviewed')]",
     "step 'draft''s working state 'drafTing' is not in table"),
    ("    final = {}", "final is empty: declare the state(s) a finished job ends in"),
    ("    parked = ('failed', 'dead')", "parked state 'dead' is not in table"),
    ("    submit_conflict = 'last-wins'", "submit_conflict is 'last-wins'; use 'raises' or 'first-wins'"),
])
def test_a_declaration_that_does_not_match_the_engine_is_one_line_exit_2(tmp_path, body, says):
    """A misspelt state gave a bogus bounded-spend finding; no final state, 'every job should end in .'."""
    (tmp_path / "mine.py").write_text("import crash\nclass Mine(crash.TinyflowAdapter):\n" + body + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), EXAMPLE, ROOT]))
    done = subprocess.run([sys.executable, "-m", "chaos", "matrix", "-n", "1", "--family", "clean", "--target", "mine:Mine"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_a_schema_mismatch_is_one_line_exit_2_from_the_adapter_and_matrix_commands(tmp_path):
    """Before, a misspelt column failed every family as if the engine raised (exit 1)."""
    (tmp_path / "mine.py").write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {os.path.join(EXAMPLE)!r})\n"
        "import crash\n"
        "from chaos.adapters.sql import JobTable, SqlSchema\n"
        "class Misspelt(crash.TinyflowAdapter):\n"
        "    schema = SqlSchema(JobTable(state='status'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), EXAMPLE, ROOT]))
    for command in (["adapter"], ["matrix", "-n", "1", "--family", "clean"]):
        done = subprocess.run([sys.executable, "-m", "chaos", *command, "--target", "mine:Misspelt"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "table 'job' has no column 'status' (JobTable(state=...)" in lines[0], done.stderr


def test_the_how_tos_walkthrough_quotes_the_adapter_verbatim():
    """docs/how-to/write-an-adapter.md walks through crash.py in three excerpts: each is the file's text."""
    with open(os.path.join(ROOT, "docs", "how-to", "write-an-adapter.md")) as f:
        page = f.read()
    with open(os.path.join(EXAMPLE, "crash.py")) as f:
        source = f.read()
    excerpts = re.findall(r"<!-- docs-test: skip: an excerpt of examples/minimal_engine/crash.py[^>]*-->\n```python\n(.*?)^```",
                          page, flags=re.S | re.M)
    assert len(excerpts) == 3
    for excerpt in excerpts:
        assert excerpt in source, excerpt[:200]
    assert sum(len(e.splitlines()) for e in excerpts) >= len([l for l in source.splitlines() if l.startswith(("class", "    "))]) - 2


def _sent_from(result) -> list[str]:
    return [m for v in result.outcome.violations for m in re.findall(r"sent from (\S+?)\)", str(v))]


def test_a_strict_receiver_reports_tinyflows_re_send_and_the_default_receiver_does_not(tinyflow):
    """tinyflow delivers an effect, then marks its row sent: a crash between the two re-sends it.
    Its receiver by default dedupes on the key, and the gate is rightly green; declared strict (an
    engine promising exactly-once effects), the crash point on the mark-sent line is reported, with
    the effect's key, its job and the line of tinyflow that sent it."""
    dedupes = run_matrix(tinyflow, families=["sender"], faults=["crash"], jobs=2)
    strict = run_matrix(load_adapter("crash:strict_adapter"), families=["sender"], faults=["crash"], jobs=2)
    assert dedupes.points == strict.points > 5, (dedupes.points, strict.points)
    assert dedupes.violations == 0, [str(v) for r in dedupes.results for v in r.outcome.violations]
    violated = [r for r in strict.results if r.outcome.violations]
    assert len(violated) == 1, [(r.point, [str(v) for v in r.outcome.violations]) for r in violated]
    (result,) = violated
    with open(result.point.file) as f:
        source = f.read().splitlines()
    assert result.point.function == "send_outbox" and "UPDATE outbox SET sent_at" in source[result.point.line - 1]
    assert {v.invariant for v in result.outcome.violations} == {"outbox-at-least-once", "effects-complete"}
    duplicate = next(str(v) for v in result.outcome.violations if v.invariant == "outbox-at-least-once")
    assert "effect 'doc-1:publish' was applied 2 times at the receiver (job 'doc-1', sent from " in duplicate, duplicate
    (sent_from,) = _sent_from(result)
    path, _, line = sent_from.rpartition(":")
    assert path.endswith("tinyflow.py") and "deliver(" in source[int(line) - 1], sent_from


def test_the_reference_engine_declared_strict_shows_its_at_least_once_re_send():
    """The reference engine is at-least-once by design (its receiver must dedupe): declared strict,
    a crash anywhere between its delivery and its mark-sent is reported; by default nothing is."""
    from chaos import ReferenceAdapter

    from .receiver_variants import StrictReference

    dedupes = run_matrix(ReferenceAdapter(), families=["sender"], faults=["crash"], jobs=2)
    strict = run_matrix(StrictReference(), families=["sender"], faults=["crash"], jobs=2)
    assert dedupes.points == strict.points and dedupes.violations == 0
    violated = [r for r in strict.results if r.outcome.violations]
    assert len(violated) >= 3, len(violated)
    # The points lie on the way from the delivery to the row marked sent (the sender, the store's SQL).
    assert "_outbox.py" in {os.path.basename(r.point.file) for r in violated}
    assert {v.invariant for r in violated for v in r.outcome.violations} == {"outbox-at-least-once", "effects-complete"}
    assert all("sent from the engine's outbox sender)" in str(v) for r in violated for v in r.outcome.violations if v.invariant == "outbox-at-least-once")


def test_a_receiver_is_declared_as_a_word_and_a_wrong_word_is_refused(tmp_path):
    from engine import FakeClock

    from chaos import ReferenceAdapter
    from chaos.core.target import resolve
    from chaos.core.world import World

    class Strict(ReferenceAdapter):
        receiver = "strict"

    class Typo(ReferenceAdapter):
        receiver = "exactly-once"

    lines = {s.name: s.line() for s in capabilities(Strict())}
    assert lines["receiver"] == "  yes  receiver = 'strict'"
    assert lines["receiver"] != {s.name: s.line() for s in capabilities(ReferenceAdapter())}["receiver"]
    with pytest.raises(ValueError, match="receiver is 'exactly-once'; use 'dedupes' .* or 'strict'"):
        World.for_adapter(str(tmp_path), FakeClock(0.0), resolve(Typo()))
    applied = {}
    for adapter in (ReferenceAdapter(), Strict()):
        directory = tmp_path / type(adapter).__name__
        directory.mkdir()
        world = World.for_adapter(str(directory), FakeClock(0.0), resolve(adapter))
        world.sender.send("doc-1:delivery", "delivery", {"n": 1})
        world.sender.send("doc-1:delivery", "delivery", {"n": 1})
        applied[world.receiver] = (world.applied_effects(), [d.applied for d in world.deliveries()])
        world.close()
    assert applied == {"dedupes": ({"doc-1:delivery": 1}, [True, False]), "strict": ({"doc-1:delivery": 2}, [True, True])}
    from chaos.core.sandbox import Sandbox  # what a fault plan runs on: the same world

    assert Sandbox(Strict(), str(tmp_path / "plan")).world.receiver == "strict"


def test_a_paid_task_no_family_faults_is_named_with_the_fix(tmp_path):
    """tinyflow with a third paid step the reference's task names do not map to: every family holds,
    and the run says which task's error paths it never tried, instead of a silent green."""
    (tmp_path / "mine.py").write_text(
        "import crash, newsletter\n"
        "class ThreeTasks(crash.TinyflowAdapter):\n"
        "    def tasks(self):\n"
        "        return {'extract': 'draft'}  # 'review' is left unmapped\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), EXAMPLE, ROOT]))
    done = subprocess.run([sys.executable, "-m", "chaos", "matrix", "-n", "2", "--target", "mine:ThreeTasks", "--faults", "crash",
                           "--sample", "20", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    report = json.loads(done.stdout)
    assert report["unfaulted_tasks"] == ["review"], done.stderr[-2000:]
    text = subprocess.run([sys.executable, "-m", "chaos", "matrix", "-n", "2", "--target", "mine:ThreeTasks", "--faults", "crash",
                           "--sample", "20"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900).stdout
    assert re.search(r"not faulted: no family's fault reached the paid calls of task 'review' \(faults were armed on [^)]*'draft'", text), text
    # A part of the matrix (some families, or a point) says nothing: the rest would arm other faults.
    part = subprocess.run([sys.executable, "-m", "chaos", "matrix", "-n", "2", "--target", "mine:ThreeTasks", "--faults", "crash",
                           "--family", "clean", "--family", "extract-timeout", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert json.loads(part.stdout)["unfaulted_tasks"] == []
