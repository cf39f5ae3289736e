"""Hostile fault plans: every number is finite and bounded, and a file that is not UTF-8, nests
too deep or names a relative target is a PlanError naming the file, never a traceback or a hang."""

import math

import os

import pytest

from chaos.plans.plan import PlanError, load_plan, parse_plan

LESSON = "Bounds keep a plan from hanging the run."


def plan_with(action):
    return {"lesson": LESSON, "scenario": [{"name": "s", "script": [action]}]}


@pytest.mark.parametrize(
    "action, key",
    [
        ({"advance_s": math.nan}, "advance_s"),
        ({"advance_s": math.inf}, "advance_s"),
        ({"advance_s": 1e308}, "advance_s"),
        ({"poll_s": math.nan}, "poll_s"),
        ({"poll_s": 1e9, "tick_s": 0.001}, "poll_s"),
        ({"run": 10**12}, "run"),
        ({"fault": "slow", "duration_s": 1e308}, "duration_s"),
        ({"fault": "slow", "duration_s": math.nan}, "duration_s"),
        ({"fault": "rate_limit", "retry_after_s": math.inf}, "retry_after_s"),
        ({"fault": "rate_limit", "retry_after_s": 1e12}, "retry_after_s"),
    ],
)
def test_a_number_that_is_not_finite_or_beyond_its_bound_is_refused_naming_the_key(action, key):
    with pytest.raises(PlanError, match=rf"plan.toml: .*{key}.*") as raised:
        parse_plan(plan_with(action), "plan.toml")
    assert "at most" in str(raised.value) or "finite" in str(raised.value)


def test_a_bounded_number_is_still_accepted():
    plan = parse_plan(plan_with({"run": 100}), "plan.toml")
    assert plan.scenarios[0].script[0].value == 100


def test_a_plan_that_is_not_utf8_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('lesson = "caf\xe9"\n[points]\n'.encode("latin-1"))
    with pytest.raises(PlanError, match=r"latin1\.toml: .*UTF-8"):
        load_plan(path)


def test_a_plan_nested_20000_deep_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text('lesson = "deep"\nx = ' + "[" * 20_000 + "]" * 20_000 + "\n")
    with pytest.raises(PlanError, match=r"deep\.toml: .*nested"):
        load_plan(path)


def test_a_relative_target_is_an_error_naming_the_file_and_the_key(tmp_path):
    path = tmp_path / "relative.toml"
    path.write_text('lesson = "l"\ntarget = ".adapters:mine"\n[points]\n')
    with pytest.raises(PlanError, match=r"relative\.toml: key 'target'.*relative"):
        load_plan(path)


def test_a_plan_path_that_is_a_directory_is_an_error_naming_it(tmp_path):
    with pytest.raises(PlanError, match="not a regular file"):
        load_plan(tmp_path)


def test_a_plan_path_that_is_a_fifo_a_device_or_a_huge_file_is_refused_before_it_is_read(tmp_path):
    """Read, a FIFO blocks forever and /dev/zero never ends (it ran out of memory)."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(PlanError, match="fifo.toml: not a regular file"):
        load_plan(fifo)
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    with pytest.raises(PlanError, match="zero.toml: not a regular file"):
        load_plan(link)
    huge = tmp_path / "huge.toml"
    huge.write_text('lesson = "L."\n' + "# padding\n" * 200_000)
    with pytest.raises(PlanError, match=r"huge.toml: 2,000,014 bytes, more than a fault plan's 1,048,576"):
        load_plan(huge)


@pytest.mark.parametrize("text, fragments", [
    ('[[scenario]]\nname = "s"\nscript = [{ submit = "j", payload = { when = 1979-05-27T07:32:00Z } }]\n',
     ["key 'scenario 's' script[0].payload' is not JSON", "write a date or a time as a string"]),
    ('[[scenario]]\nname = "s"\nscript = [{ submit = "j", payload = { source = nan } }]\n', ["payload' is not JSON", "Out of range float"]),
    ('[[scenario]]\nname = "s"\njobs = ["doc-1"]\nscript = [{ drain = true }]\nexpect = { states = { doc-9 = "delivered" } }\n',
     ["key 'scenario 's'.expect.states' names job 'doc-9', which is never submitted; submitted: doc-1"]),
    ('[[scenario]]\nname = "s"\njobs = []\nscript = [{ submit = "a" }, { expect = { states = { b = "pending" } } }]\n',
     ["names job 'b', which is never submitted; submitted: a"]),
    ('[points]\njobs = ["doc-1"]\nexpect = { states = { doc-2 = "delivered" } }\n', ["key 'points.expect.states' names job 'doc-2'"]),
    ('[[scenario]]\nname = "' + "x" * 100_000 + '"\nscript = [{ drain = true }]\n', ["... (100,002 characters); use at most 63 letters"]),
])
def test_a_scenario_value_a_run_could_only_fail_on_is_a_plan_error_at_load(tmp_path, text, fragments):
    path = tmp_path / "p.toml"
    path.write_text('lesson = "L."\n' + text)
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert len(message) < 600, message[:300]
    for fragment in fragments:
        assert fragment in message, message
