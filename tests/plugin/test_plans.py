"""Fault plans collected as tests: ids a person can paste back, checked schemas, failures that
explain themselves, and checks that catch the bugs they exist for."""

from __future__ import annotations

import re
import shlex

import pytest

from chaos import ReferenceAdapter, load_plan
from chaos.plans.plan import check_against

from .conftest import SHIPPED_PLANS, add_plan, collected_ids

POINT_ID = re.compile(r"^fault_plans/poison\.toml::(extract|release)::_\w+\.\w+:L\d+#\d+$")  # no <>: pasteable in a shell
# A pause item: the point, then @ and the kind (no [ ] either: zsh would read them as a glob).
PAUSE_ID = re.compile(r"^fault_plans/frozen_worker\.toml::extract::_\w+\.\w+:L\d+#\d+@pause-(live|expired)$")
PAIR_ID = re.compile(r"^fault_plans/pairs\.toml::extract::_\w+\.\w+:L\d+#\d+\+_\w+\.\w+:L\d+#\d+@interleave$")


def test_every_shipped_plan_is_valid_and_states_its_lesson_in_one_sentence():
    plans = sorted(SHIPPED_PLANS.glob("*.toml"))
    assert len(plans) >= 9
    adapter = ReferenceAdapter()
    for path in plans:
        plan = load_plan(path)
        check_against(plan, adapter)
        assert plan.lesson.endswith("."), path.name
        assert plan.lesson.count(". ") == 0, f"{path.name}: the lesson is one sentence"


def test_a_plan_is_collected_as_a_baseline_a_group_per_step_an_item_per_point_and_its_scenarios(project):
    add_plan(project, "poison")
    result = project.runpytest("--collect-only", "-q", "--chaos-points", "6")
    ids = collected_ids(result)
    assert ids[0] == "fault_plans/poison.toml::baseline"
    points = [i for i in ids if i.count("::") == 2]
    assert len(points) == 6
    assert all(POINT_ID.match(i) for i in points), points
    assert ids[-2:] == ["fault_plans/poison.toml::poison-parks-after-one-call", "fault_plans/poison.toml::unparseable-answer-is-poison"]


def test_a_collected_point_id_pasted_back_runs_exactly_that_point(project):
    add_plan(project, "outbox_crash")
    ids = collected_ids(project.runpytest("--collect-only", "-q"))
    point = ids[len(ids) // 2]
    result = project.runpytest(point, "-v")
    result.assert_outcomes(passed=1)
    assert f"{point} PASSED" in result.stdout.str()


def test_the_points_setting_picks_one_point_by_its_id(project):
    add_plan(project, "outbox_crash")
    ids = collected_ids(project.runpytest("--collect-only", "-q"))
    point = ids[3].split("::", 1)[1]  # GROUP::POINT
    result = project.runpytest("--collect-only", "-q", "--chaos-points", point)
    assert collected_ids(result) == ["fault_plans/outbox_crash.toml::baseline", ids[3]]


def test_a_sample_is_the_same_for_the_same_seed_and_differs_for_another(project):
    add_plan(project, "outbox_crash")

    def sample(seed: str) -> list[str]:
        return collected_ids(project.runpytest("--collect-only", "-q", "--chaos-points", "5", "--chaos-seed", seed))

    first = sample("1")
    assert len(first) == 6  # the baseline and five points
    assert sample("1") == first
    assert sample("2") != first


MALFORMED = [
    ("unknown-top-key", 'lesson = "L."\nlessons = "typo"\n[points]\n', ["'lessons'", "allowed keys: lesson, target, points, scenario"]),
    ("missing-lesson", "[points]\n", ["missing key 'lesson'"]),
    ("unknown-points-key", 'lesson = "L."\n[points]\nstep = ["extract"]\n', ["unknown key 'step' in [points]", "allowed keys: jobs, setup, phase"]),
    ("wrong-type", 'lesson = "L."\n[points]\nsecond_worker = "yes"\n', ["'points.second_worker'", "must be true or false", "a string ('yes')"]),
    ("unknown-step", 'lesson = "L."\n[points]\nsteps = ["extrct"]\n', ["'points.steps'", "'extrct'", "allowed for phase 'worker': claim, fetch, extract, verify, deliver, release"]),
    ("unknown-fault", 'lesson = "L."\n[points]\nfaults = [{ kind = "melt" }]\n', ["'points.faults[0].kind'", "'melt'", "allowed: timeout, connection, rate_limit"]),
    ("unknown-task", 'lesson = "L."\n[points]\nfaults = [{ kind = "timeout", task = "summarise" }]\n', ["'summarise'", "not a task of the target", "allowed: deliver, extract, fetch, send, verify"]),
    ("unknown-action", 'lesson = "L."\n[[scenario]]\nname = "s"\nscript = [{ explode = true }]\n', ["needs exactly one action key", "allowed actions: submit, run, send"]),
    ("bad-action-option", 'lesson = "L."\n[[scenario]]\nname = "s"\nscript = [{ drain = true, tick_s = 1 }]\n', ["unknown key 'tick_s' for action 'drain'", "allowed with 'drain': worker"]),
    ("unknown-state", 'lesson = "L."\n[[scenario]]\nname = "s"\nscript = [{ drain = true }]\nexpect = { state = "done" }\n', ["'done'", "not a state of the target", "delivered"]),
    ("unknown-expect", 'lesson = "L."\n[[scenario]]\nname = "s"\nscript = []\nexpect = { finally = 1 }\n', ["unknown key 'finally'", "allowed keys: state, states, calls"]),
    ("bad-resolution", 'lesson = "L."\n[[scenario]]\nname = "s"\nscript = [{ resolve = "doc-1", action = "approve" }]\n', ["'approve'", "allowed: reverify, cancel"]),
    ("not-toml", 'lesson = "unterminated\n', ["not valid TOML"]),
    ("unknown-point-fault", 'lesson = "L."\n[points]\nfault = "freeze"\n', ["'points.fault'", "'freeze'", "allowed: crash, pause, interleave"]),
    ("bad-point-fault-list", 'lesson = "L."\n[points]\nfault = ["crash", "kill"]\n', ["'points.fault[1]'", "'kill'", "allowed: crash, pause, interleave"]),
    ("point-fault-table", 'lesson = "L."\n[points]\nfault = { kind = "pause" }\n', ["'points.fault'", "must be one of crash, pause, interleave, disk, io, lock, clock, damage, power or an array of them"]),
    ("unknown-machine-fault", 'lesson = "L."\n[points]\nfault = ["crash", "disk-empty"]\n',
     ["'points.fault[1]'", "'disk-empty'", "allowed: crash, pause, interleave, disk, io, lock, clock, damage, power (or a sub-kind: disk-full, io-eio"]),
]


def test_a_malformed_plan_is_a_collection_error_naming_the_file_the_key_and_the_allowed_values(project):
    for case, text, _ in MALFORMED:  # one run collects them all: each file is its own error
        add_plan(project, case, text)
    result = project.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "Traceback" not in out
    sections = {block.split(" ", 1)[0].strip("_ "): block for block in out.split("ERROR collecting fault_plans/")[1:]}
    for case, _, fragments in MALFORMED:
        block = sections[f"{case}.toml"]
        assert f"fault_plans/{case}.toml: " in block, case
        for fragment in fragments:
            assert fragment in block, (case, fragment, block)


def test_a_lesson_with_escape_sequences_is_printed_escaped(project):
    """A plan's text reached the terminal raw: an ESC in its lesson could clear the screen or retitle the window."""
    add_plan(project, "evil", 'lesson = "Evil \\u001b[2J\\u001b]0;title\\u0007 lesson\\u0008."\n[[scenario]]\nname = "s"\n'
                              'script = [{ drain = true }]\nexpect = { state = "cancelled" }\n')
    result = project.runpytest("fault_plans/evil.toml::s")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "lesson: Evil \\x1b[2J\\x1b]0;title\\x07 lesson\\x08." in out, out
    assert not any(c in out for c in "\x1b\x07\x08")


def test_a_failed_expectation_says_what_was_expected_what_was_seen_the_lesson_and_how_to_replay(project):
    add_plan(project, "rate_limit")
    result = project.runpytest("--chaos-target", "planted:IgnoreRetryAfter", "fault_plans/rate_limit.toml::retry-after-is-honoured")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "scenario 'retry-after-is-honoured'" in out
    assert re.search(r"two calls of step 'extract' for job 'doc-1' were \d\.\d\ds apart; at least 60s expected", out)
    assert "lesson: A 429's Retry-After is honoured as the minimum delay" in out
    replay = "replay: python -m pytest fault_plans/rate_limit.toml::retry-after-is-honoured --chaos-mode fork --chaos-seed 0 --chaos-target planted:IgnoreRetryAfter"
    assert replay in out


def test_the_outage_plan_catches_retries_without_jitter_and_passes_with_it(project):
    add_plan(project, "outage")
    project.runpytest().assert_outcomes(passed=1)
    result = project.runpytest("--chaos-target", "planted:NoJitter")
    result.assert_outcomes(failed=1)
    assert re.search(r"40 calls of step 'extract' within 1s \(from t=\d+\.\d\ds\); at most 12 allowed", result.stdout.str())


def test_a_violated_point_names_the_invariant_why_it_matters_the_line_and_the_replay(project):
    add_plan(project, "every_line")
    ids = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-target", "quality.variants:SplitMemo"))
    result = project.runpytest("--chaos-target", "quality.variants:SplitMemo", "-x", *[i for i in ids if "::extract::" in i])
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert re.search(r"crash at \S+ \(the job in 'extract'\), then recovery", out)
    assert re.search(r"VIOLATED progress-recorded: job 'doc-1' reached '\w+' but step '\w+' has no memo row", out)
    assert "why it matters: Protects against advancing the state in one transaction and writing the result in another" in out
    assert "lesson: A crash at any line of a job's run leaves one of two cases" in out
    assert re.search(r"replay: python -m pytest 'fault_plans/every_line\.toml::extract::\S+' --chaos-mode fork --chaos-seed 0 --chaos-target quality\.variants:SplitMemo", out)


def test_many_points_failing_alike_are_one_finding_in_the_summary_and_explained_once(project):
    """One unsafe commit fails a point after another with the same cause: the summary groups them
    (count, fix, one replay command) and stands for them in pytest's failures section; with
    --chaos-all-failures each is there, and the paragraph on why the invariant matters is printed
    once."""
    add_plan(project, "every_line")
    ids = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-target", "quality.variants:SplitMemo"))
    extract = [i for i in ids if "::extract::" in i]
    result = project.runpytest("--chaos-target", "quality.variants:SplitMemo", *extract)
    out = result.stdout.str()
    failed = result.parseoutcomes()["failed"]
    assert failed >= 2, out[-3000:]
    found = re.search(r"^findings: (\d+) findings? in (\d+) violated points?, baselines? (?:and|or) scenarios? "
                      r"\(grouped by invariant and cause, each shown once\):$", out, re.M)
    assert found and int(found.group(2)) == failed and int(found.group(1)) < failed, out[-3000:]
    counted = re.search(r"^  progress-recorded \((\d+) points?\): job 'doc-1' reached '\w+' but step '\w+' has no memo row", out, re.M)
    assert counted and int(counted.group(1)) >= 2, out[-3000:]
    assert re.search(r"^    fix: .*one transaction", out, re.M)
    assert re.search(r"^    replay: python -m pytest '?fault_plans/every_line\.toml::extract::\S+ ", out, re.M)
    assert "VIOLATED progress-recorded" not in out  # pytest's failures section leaves them to the summary
    assert re.search(r"^\d+ failed items of fault plans left out of pytest's failures and short summary", out, re.M)

    every = project.runpytest("--chaos-target", "quality.variants:SplitMemo", "--chaos-all-failures", *extract)
    out = every.stdout.str()
    # The failures section (pytest's short summary repeats a failure's text whole when CI is set).
    failures = out.split("short test summary info")[0]
    assert failures.count("why it matters: Protects against advancing the state in one transaction") == 1
    assert failures.count("why it matters: as in the first failure of progress-recorded above") == failed - 1
    assert len(re.findall(r"^  fault_plans/every_line\.toml::extract::\S+: progress-recorded", out, re.M)) == failed


def test_a_pause_plan_collects_two_items_per_point_with_pasteable_ids_and_they_pass(project):
    add_plan(project, "frozen_worker")
    ids = collected_ids(project.runpytest("--collect-only", "-q"))
    assert ids[0] == "fault_plans/frozen_worker.toml::baseline"
    items = ids[1:]
    assert items and all(PAUSE_ID.match(i) for i in items), items[:5]
    assert sorted(i.rsplit("@", 1)[0] for i in items[::2]) == sorted(i.rsplit("@", 1)[0] for i in items[1::2])  # each point twice
    one = items[-1].split("::", 1)[1]  # GROUP::POINT@KIND
    picked = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-points", one))
    assert picked == ["fault_plans/frozen_worker.toml::baseline", items[-1]]
    chosen = items[:2] + items[-2:]
    result = project.runpytest("-v", *chosen)
    result.assert_outcomes(passed=4)
    assert f"{chosen[0]} PASSED" in result.stdout.str()


def test_the_faults_setting_adds_pause_items_to_plans_without_a_fault_key_and_a_plans_own_key_wins(project):
    add_plan(project, "outbox_crash")
    add_plan(project, "frozen_worker")
    ids = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-faults", "crash"))
    assert not any("outbox_crash" in i and "@" in i for i in ids)
    assert all(i.endswith(("@pause-live", "@pause-expired")) for i in ids if "frozen_worker.toml::extract" in i)
    paused = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-faults", "crash,pause"))
    crash_ids = [i for i in paused if "outbox_crash.toml::send::" in i and "@" not in i]
    assert {f"{i}@pause-live" for i in crash_ids} | {f"{i}@pause-expired" for i in crash_ids} == {
        i for i in paused if "outbox_crash" in i and "@" in i
    }


def test_the_replay_of_an_item_that_exists_only_with_the_faults_setting_carries_the_setting(project):
    add_plan(project, "lost_lease")
    target = "quality.variants:ClaimIgnoresLiveLease"
    result = project.runpytest("--chaos-faults", "pause", "--chaos-target", target, "-x", "-k", "pause-live")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    replay = re.search(r"^replay: (.*)$", result.stdout.str(), re.M).group(1)
    assert re.fullmatch(rf"python -m pytest 'fault_plans/lost_lease\.toml::extract::\S+@pause-live' --chaos-mode fork --chaos-seed 0 "
                        rf"--chaos-target {re.escape(target)} --chaos-faults pause", replay), replay
    item = shlex.split(replay)[3]
    again = project.runpytest(*shlex.split(replay)[3:])
    again.assert_outcomes(failed=1)
    assert f"FAILED {item}" in again.stdout.str()


def test_an_interleaving_plan_collects_a_seeded_sample_of_pairs_and_the_summary_counts_them(project):
    add_plan(project, "pairs", 'lesson = "Two workers on one job stay safe in any order."\n[points]\nsteps = ["extract"]\nfault = "interleave"\n')
    ids = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-pairs", "3"))
    pairs = ids[1:]
    assert 1 <= len(pairs) <= 3 and all(PAIR_ID.match(i) for i in pairs), ids  # at most the budget, each p its share
    result = project.runpytest("--chaos-pairs", "3")
    result.assert_outcomes(passed=1 + len(pairs))
    n = len(pairs)
    assert re.search(rf"^{n} interleavings: {n} held, 0 violated; \d+ wasted calls; {n} pairs run of \d+ possible \(fork mode, seed 0\)$",
                     result.stdout.str(), re.M)


def test_a_frozen_worker_whose_lease_is_stolen_is_explained_with_its_fault_kind_and_replay(project):
    add_plan(project, "frozen_worker")
    target = "quality.variants:ClaimIgnoresLiveLease"
    result = project.runpytest("--chaos-target", target, "-x", "-k", "pause-live")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert re.search(r"worker frozen at \S+ \(the job in 'extract'\); another worker ran with its lease still valid, then it resumed", out)
    assert re.search(r"VIOLATED bounded-spend: job 'doc-1' step 'extract': 2 paid calls, at most 1 allowed", out)
    assert "lesson: A frozen worker only believes it holds the lease" in out
    assert re.search(r"paid calls without a valid lease, after the memo was committed: \d+; the other worker was blocked \d\.\d{3}s", out)
    assert re.search(rf"replay: python -m pytest 'fault_plans/frozen_worker\.toml::extract::\S+@pause-live' --chaos-mode fork --chaos-seed 0 --chaos-target {re.escape(target)}\n", out)


@pytest.mark.parametrize("seed", ["0", "1", "2", "3"])
def test_a_sample_of_a_plans_points_keeps_every_fault_kind_it_asks_for(project, seed):
    """--chaos-points N draws one item of each kind first: drawn uniformly, a plan's few
    interleavings (5 of 359 in a user's plan) were left out of a sample of 25 most of the time."""
    add_plan(project, "mixed", 'lesson = "A frozen or overtaken worker stays safe."\n[points]\nfault = ["pause", "interleave"]\n')
    ids = collected_ids(project.runpytest("--collect-only", "-q", "--chaos-points", "6", "--chaos-pairs", "2", "--chaos-seed", seed))
    kinds = {i.rpartition("@")[2] for i in ids if "@" in i}
    assert kinds == {"pause-live", "pause-expired", "interleave"}, ids
    assert len(ids) == 1 + 6, ids  # the baseline and the sample


@pytest.mark.parametrize("own_key", [True, False])
def test_a_plan_whose_target_does_not_load_names_the_plan_and_where_the_target_was_set(project, own_key):
    add_plan(project, "t", 'lesson = "L."\n' + ('target = "nosuch:x"\n' if own_key else "") + "[points]\n")
    result = project.runpytest(*([] if own_key else ["--chaos-target", "nosuch:x"]))
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error: nothing runs
    where = "the plan's key 'target'" if own_key else "command line --chaos-target"
    assert f"fault_plans/t.toml: target 'nosuch:x' (from {where}): cannot load target 'nosuch:x'" in result.stdout.str()


def test_a_plan_whose_target_is_not_an_adapter_is_refused_before_it_is_called(project):
    """A plan's target os:abort was called to make an adapter: pytest died of SIGABRT, saying nothing."""
    add_plan(project, "t", 'lesson = "L."\ntarget = "os:abort"\n[points]\n')
    result = project.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stderr.str()  # a collection error: nothing runs
    out = result.stdout.str()
    assert "fault_plans/t.toml: target 'os:abort' (from the plan's key 'target'): target 'os:abort' is not an adapter" in out
    assert "built-in function" in out
