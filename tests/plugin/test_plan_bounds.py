"""Hostile fault plans: every number is finite and bounded, and a file that is not UTF-8, nests
too deep or names a relative target is a PlanError naming the file, never a traceback or a hang."""

import math

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
    with pytest.raises(PlanError, match="cannot be read"):
        load_plan(tmp_path)
