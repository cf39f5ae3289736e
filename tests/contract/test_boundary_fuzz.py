"""Hostile input at every boundary, on both backends: what finds the next one.

Hypothesis throws ids, payloads, step outputs, effect bodies, costs, worker settings, command
lines and database paths at the API and at ``python -m engine``. Each input gets a typed engine
error (refused, nothing stored changes) or a clean round trip (what was stored reads back equal);
the command line answers with exit status 0, or 2 and one line, never a traceback. Afterwards a
worker and the outbox drain everything that was stored: no job is lost, none is left leased,
every effect key survives the trip to a receiver. The figures are printed (run with ``-s``).

The profile is chosen by CRASHGATE_FUZZ_PROFILE: ``ci`` (the default, derandomized, about a
minute for both backends) or ``nightly`` (many more examples, a fresh seed each run).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import string
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine._cli
from engine import (
    EngineError,
    FakeClock,
    InvalidInput,
    Step,
    StepOutput,
    Worker,
    Workflow,
    decode_idempotency_key,
    encode_idempotency_key,
    open_store,
    send_outbox,
)

PROFILES = {
    "ci": {"api": 300, "cli": 100, "settings": 100},
    "nightly": {"api": 3000, "cli": 600, "settings": 1000},
}
PROFILE = os.environ.get("CRASHGATE_FUZZ_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"CRASHGATE_FUZZ_PROFILE={PROFILE!r} is not one of: {', '.join(PROFILES)}")
EXAMPLES = PROFILES[PROFILE]
DRAIN_ITERATIONS_MAX = 10_000
SETTLED_PREFIXES = ("failed_",)
FUZZ_SETTINGS = dict(
    deadline=None,
    database=None,
    derandomize=PROFILE == "ci",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- what a hostile caller sends -------------------------------------------------------------------
HOSTILE_CHARS = st.one_of(
    st.characters(),  # any code point, lone surrogates included
    st.sampled_from(["\x00", "\x1b", "\r", "\n", "\u202e", "\ufeff", "\U0001f642", "文", "%", ":", "'", '"', "\\", " "]),
)
TEXT = st.text(HOSTILE_CHARS, max_size=30)
# Valid Unicode text of any script, escapes and emoji included: what both backends must store.
STORABLE_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
IDS = st.one_of(
    STORABLE_TEXT,
    STORABLE_TEXT,
    TEXT,
    st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=12),
    st.text(min_size=195, max_size=210),
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**5000), max_value=10**5000),
    st.floats(),  # NaN, infinities, -0.0, subnormals
)
JSON_LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
NOT_JSON = st.one_of(
    st.sets(st.integers(), max_size=2),
    st.just(b"bytes"),
    st.builds(object),
    st.dates(),
    st.complex_numbers(),
)


def deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def hostile_values() -> Any:
    """Anything a caller might hand over: JSON, and what JSON cannot hold, mixed at any depth."""
    return st.recursive(
        st.one_of(JSON_LEAVES, NOT_JSON),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.one_of(TEXT, st.integers(), st.none()), children, max_size=4),
        ),
        max_leaves=12,
    )


# JSON values both backends must store and give back equal: any valid string, any finite number.
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**300), 10**300), st.floats(allow_nan=False, allow_infinity=False), STORABLE_TEXT),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(STORABLE_TEXT, children, max_size=4)),
    max_leaves=12,
)


def values() -> Any:
    return st.one_of(JSON_VALUES, JSON_VALUES, hostile_values())


PAYLOADS = st.one_of(
    st.dictionaries(STORABLE_TEXT, JSON_VALUES, max_size=5),
    st.dictionaries(STORABLE_TEXT, JSON_VALUES, max_size=5),
    hostile_values(),
    st.dictionaries(TEXT, hostile_values(), max_size=4),
    st.builds(lambda n: {"deep": deep(n)}, st.integers(150, 5000)),
)
COSTS = st.one_of(
    st.floats(0, 100, allow_nan=False),
    st.floats(0, 100, allow_nan=False),
    st.floats(),
    st.integers(-5, 10**400),
    st.just("0.1"),
    st.none(),
)


def is_json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: what a clean round trip must give back (NaN never gets this far)."""
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return a == b
    return type(a) is type(b) and (
        (isinstance(a, dict) and a.keys() == b.keys() and all(is_json_equal(a[k], b[k]) for k in a))
        or (isinstance(a, list) and len(a) == len(b) and all(is_json_equal(x, y) for x, y in zip(a, b)))
        or (not isinstance(a, (dict, list)) and a == b)
    )


def snapshot(store: Any) -> list[tuple]:
    return [(j.id, j.state, repr(j.payload), j.attempts, j.last_error) for j in store.jobs()]


# -- a workflow whose one step returns what the fuzzer chose for its job --------------------------
class ChosenOutputs:
    """Step outputs, effect bodies and costs by job id, set when the job is submitted."""

    def __init__(self) -> None:
        self.by_job: dict[str, tuple[Any, Any, Any]] = {}

    def __call__(self, ctx: Any) -> StepOutput:
        output, body, cost = self.by_job.get(ctx.job_id, ({"ok": True}, {"ok": True}, 0.0))
        return StepOutput(output, cost_usd=cost, effects={"notify": body})


def fuzz_workflow(outputs: ChosenOutputs) -> Workflow:
    return Workflow("fuzz", [Step("work", outputs, effects=("notify",))])


class Collect:
    def __init__(self) -> None:
        self.keys: Counter[str] = Counter()

    def send(self, key: str, kind: str, payload: Any) -> None:
        header = encode_idempotency_key(key)
        assert header.isascii() and header.isprintable(), header
        assert decode_idempotency_key(header) == key
        self.keys[key] += 1


def drain(store: Any, workflow: Workflow, clock: FakeClock) -> Collect:
    """Run a worker and the outbox until nothing is due, moving time past every backoff."""
    worker = Worker(store, workflow, worker_id="drainer", clock=clock, threaded=False)
    receiver = Collect()
    for _ in range(DRAIN_ITERATIONS_MAX):
        outcome = worker.run_once().outcome
        assert outcome not in ("busy", "unavailable"), outcome
        if outcome == "idle":
            sent = send_outbox(store, receiver, clock=clock).sent
            due = [j.next_run_at for j in store.jobs() if j.next_run_at is not None]
            if not due and not sent:
                return receiver
            clock.advance(max(1.0, (min(due) - clock.now()) if due else 60.0))
    raise AssertionError(f"no drain after {DRAIN_ITERATIONS_MAX} iterations")


def assert_drained(store: Any, workflow: Workflow, stored: set[str], receiver: Collect) -> None:
    jobs = {j.id: j for j in store.jobs()}
    lost = stored - set(jobs)
    assert not lost, f"{len(lost)} stored jobs lost: {sorted(lost)[:5]}"
    for job in jobs.values():
        assert job.state == workflow.final_state or job.state.startswith(SETTLED_PREFIXES), (job.id, job.state)
        assert job.lease_owner is None and job.next_run_at is None, job
    unsent = store.conn.execute("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL").fetchone()[0]
    assert unsent == 0
    delivered = [j for j in jobs.values() if j.state == workflow.final_state]
    assert set(receiver.keys) == {f"{j.id}:notify" for j in delivered}


# -- the API ---------------------------------------------------------------------------------------
def test_hostile_api_input_gets_a_typed_error_or_a_clean_round_trip_and_everything_stored_drains(backend, db_url, capsys):
    store = open_store(db_url)
    clock = FakeClock(1_700_000_000.0)
    outputs = ChosenOutputs()
    workflow = fuzz_workflow(outputs)
    figures: Counter[str] = Counter()
    stored: set[str] = set()

    @settings(max_examples=EXAMPLES["api"], **FUZZ_SETTINGS)
    @given(job_id=IDS, payload=PAYLOADS, output=values(), body=values(), cost=COSTS)
    def one(job_id: Any, payload: Any, output: Any, body: Any, cost: Any) -> None:
        figures["inputs"] += 1
        before = snapshot(store)
        try:
            job = store.submit(job_id, payload, now=clock.now())
        except EngineError as exc:
            figures["refused"] += 1
            assert str(exc).strip(), "an error without a message"
            assert snapshot(store) == before, "a refused submit changed what was stored"
            return
        figures["stored"] += 1
        assert job.id == job_id
        assert is_json_equal(store.get(job_id).payload, payload), "the stored payload reads back different"
        if job_id not in stored:
            stored.add(job_id)
            outputs.by_job[job_id] = (output, body, cost)

    try:
        one()
        receiver = drain(store, workflow, clock)
        assert_drained(store, workflow, stored, receiver)
        states = Counter("delivered" if j.state == workflow.final_state else j.state for j in store.jobs())
        poisoned = sum(1 for j in store.jobs() if j.last_error and "ValidationFailed" in j.last_error)
    finally:
        store.close()
    with capsys.disabled():
        print(
            f"\nfuzz[{backend.name}] API: {figures['inputs']} hostile inputs, {figures['refused']} refused with a typed "
            f"error, {figures['stored']} stored and read back equal; drained {len(stored)} jobs ({dict(states)}; "
            f"{poisoned} failed as poison on an output, effect or cost JSON cannot hold); 0 tracebacks, 0 jobs lost"
        )


WORKER_NUMBERS = st.one_of(st.floats(), st.integers(-3, 10**30), st.just(True), st.just("5"))


def test_hostile_worker_settings_are_refused_with_a_typed_error_or_accepted_as_finite(store, backend, capsys):
    workflow = fuzz_workflow(ChosenOutputs())
    tried = refused = 0

    @settings(max_examples=EXAMPLES["settings"], **FUZZ_SETTINGS)
    @given(lease_s=WORKER_NUMBERS, attempts_max=WORKER_NUMBERS, backoff_s_max=WORKER_NUMBERS, worker_id=TEXT)
    def one(lease_s: Any, attempts_max: Any, backoff_s_max: Any, worker_id: str) -> None:
        nonlocal tried, refused
        tried += 1
        try:
            worker = Worker(store, workflow, worker_id=worker_id, lease_s=lease_s, attempts_max=attempts_max,
                            backoff_s_max=backoff_s_max, threaded=False)
        except InvalidInput as exc:
            refused += 1
            assert str(exc).strip()
            return
        assert math.isfinite(worker.lease_s) and worker.lease_s > 0
        assert isinstance(worker.attempts_max, int) and worker.attempts_max >= 1

    one()
    with capsys.disabled():
        print(f"\nfuzz[{backend.name}] worker settings: {tried} hostile inputs, {refused} refused with InvalidInput, 0 tracebacks")


# -- the command line ------------------------------------------------------------------------------
def run_main(argv: list[str]) -> tuple[int, str, str]:
    """``python -m engine`` in this process: (exit status, stdout, stderr); any other exception fails."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = engine._cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


CLI_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)  # argv holds no NUL
JSON_TEXT = st.one_of(CLI_TEXT, st.dictionaries(CLI_TEXT, JSON_VALUES, max_size=3).map(json.dumps), st.sampled_from(["{}", "[]", "null", "NaN", '{"a": NaN}', "1e999", '{"source": "doc-1"}', "[" * 3000 + "]" * 3000, '"\\ud800"']))


def commands(db: str) -> Any:
    return st.one_of(
        st.tuples(st.just("submit"), CLI_TEXT, JSON_TEXT),
        st.tuples(st.just("requeue"), CLI_TEXT),
        st.tuples(st.just("cancel"), CLI_TEXT),
        st.tuples(st.just("replay"), CLI_TEXT, CLI_TEXT),
        st.tuples(st.just("resolve"), CLI_TEXT, st.sampled_from(["reverify", "cancel", "explode"])),
        st.tuples(st.just("status")),
    ).map(lambda c: [c[0], "--db", db, *c[1:]])


PATHS = st.one_of(
    st.sampled_from(["", ".", "/", "/proc/self/mem", "/dev/null", "/no/such/dir/e.db", "sqlite:///", "mysql://x/y", "postgresql://"]),
    CLI_TEXT,
    st.text(st.characters(), max_size=20),  # lone surrogates and NUL, as a library caller may pass
)


def test_hostile_command_lines_exit_0_or_2_with_one_line_and_everything_stored_drains(backend, db_url, tmp_path, capsys, monkeypatch):
    from engine import default_workflow

    monkeypatch.chdir(tmp_path)  # relative paths the fuzzer invents land here
    seed = open_store(db_url)
    seed.submit("doc-1", {"source": "doc-1"}, now=1.0)
    seed_before = snapshot(seed)
    figures: Counter[str] = Counter()

    @settings(max_examples=EXAMPLES["cli"], **FUZZ_SETTINGS)
    @given(argv=commands(db_url))
    def one(argv: list[str]) -> None:
        figures["command lines"] += 1
        code, out, err = run_main(argv)
        assert "Traceback" not in err
        assert code in (0, 2), (argv, code, err)
        if code == 2:
            figures["refused"] += 1
            lines = err.strip().splitlines()
            assert len(lines) == 1, (argv, err)
            assert "error" in lines[0]
        assert "\x1b" not in out and "\x1b" not in err

    @settings(max_examples=EXAMPLES["cli"], **FUZZ_SETTINGS)
    @given(path=PATHS, command=st.sampled_from(["status", "work", "submit"]))
    def one_path(path: str, command: str) -> None:
        figures["paths"] += 1
        if backend.name == "sqlite":  # a library caller passes anything; the CLI gets what argv holds
            try:
                open_store(path, create=False).close()
            except EngineError:
                pass
        argv = [command, "--db", path] + (["doc-p", "{}"] if command == "submit" else [])
        if "\x00" in path or any(0xD800 <= ord(c) <= 0xDFFF for c in path):
            return
        code, out, err = run_main(argv)
        assert code in (0, 2) and "Traceback" not in err, (argv, code, err)
        if code == 2:
            assert len(err.strip().splitlines()) == 1, (argv, err)

    try:
        one()
        one_path()
        assert [row for row in snapshot(seed) if row[0] == "doc-1"] == seed_before, "a command changed a job it was not about"
        workflow = default_workflow()
        drain(seed, workflow, FakeClock(time.time()))  # the CLI stamped its jobs with the real time
        jobs = seed.jobs()
        settled = workflow.terminal_states | workflow.parked_states
        assert all(j.state in settled for j in jobs), [(j.id, j.state) for j in jobs if j.state not in settled]
        assert all(j.lease_owner is None for j in jobs)
    finally:
        seed.close()
    with capsys.disabled():
        print(
            f"\nfuzz[{backend.name}] CLI: {figures['command lines']} hostile command lines ({figures['refused']} refused: "
            f"exit 2, one line) and {figures['paths']} hostile database paths; drained {len(jobs)} jobs; "
            "0 tracebacks, 0 jobs lost"
        )
