"""The plugin's options: each a flag, an environment variable and an ini key, command line first;
the plugin costs nothing and says nothing where it is not used."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import sys

import pytest

import chaos.plugin as plugin
from chaos.plugin import HELP_GROUP, HELP_MARKER, OPTIONS, resolve

from .conftest import REPO


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_option_is_a_flag_and_an_ini_key_with_the_help_text_of_its_constant(project):
    result = project.runpytest("--help")
    out = _flat(result.stdout.str())
    assert HELP_GROUP in out
    for option in OPTIONS:
        assert f"{option.flag} " in out if option.boolean else f"{option.flag}={option.key.upper()}" in out
        assert _flat(option.help) in out, option.flag
        assert f"{option.ini} (string)" in out or f"{option.ini} " in out, option.ini


def test_the_crash_matrix_marker_is_registered_with_its_help(project):
    result = project.runpytest("--markers")
    assert _flat(HELP_MARKER[len("crash_matrix") :]) in _flat(result.stdout.str())


@pytest.mark.parametrize(
    ("cli", "env", "ini", "expected", "source"),
    [
        ("7", "5", "3", 7, "command line --chaos-seed"),
        (None, "5", "3", 5, "environment variable CRASHGATE_SEED"),
        (None, None, "3", 3, "ini key chaos_seed"),
        (None, None, None, 0, "default"),
        (None, "", "3", 3, "ini key chaos_seed"),  # an empty variable is unset
    ],
)
def test_the_command_line_wins_over_the_environment_which_wins_over_the_ini_file(project, monkeypatch, cli, env, ini, expected, source):
    if env is not None:
        monkeypatch.setenv("CRASHGATE_SEED", env)
    if ini is not None:
        project.makeini(f"[pytest]\nchaos_seed = {ini}\n")
    config = project.parseconfigure(*(["--chaos-seed", cli] if cli else []))
    settings = resolve(config)
    assert settings.seed == expected
    assert settings.sources["seed"] == source


@pytest.mark.parametrize(
    ("cli", "env", "ini", "expected", "source"),
    [
        ("pause", "interleave", "crash,pause", ("pause",), "command line --chaos-faults"),
        (None, "interleave,crash", "crash,pause", ("interleave", "crash"), "environment variable CRASHGATE_FAULTS"),
        (None, None, "crash, pause", ("crash", "pause"), "ini key chaos_faults"),
        (None, None, None, ("crash",), "default"),
    ],
)
def test_the_fault_kinds_follow_the_same_precedence(project, monkeypatch, cli, env, ini, expected, source):
    if env is not None:
        monkeypatch.setenv("CRASHGATE_FAULTS", env)
    if ini is not None:
        project.makeini(f"[pytest]\nchaos_faults = {ini}\nchaos_pairs = 9\n")
    config = project.parseconfigure(*(["--chaos-faults", cli] if cli else []))
    settings = resolve(config)
    assert settings.faults == expected
    assert settings.sources["faults"] == source
    assert settings.pairs == (9 if ini is not None else plugin.PAIRS_DEFAULT)


def test_every_setting_resolves_from_each_source(project, monkeypatch):
    project.makeini("[pytest]\nchaos_target = planted:NoJitter\nchaos_points = 4\nchaos_report = out/report.html\n")
    monkeypatch.setenv("CRASHGATE_MODE", "inprocess")
    config = project.parseconfigure("--chaos-points", "all")
    s = resolve(config)
    assert (s.target, s.mode, s.seed, s.points) == ("planted:NoJitter", "inprocess", 0, "all")
    # An ini path is relative to the ini file's directory, whatever the working directory.
    assert s.report == str(project.path / "out" / "report.html")


@pytest.mark.parametrize(
    ("where", "value", "fragments"),
    [
        ("env", "forky", ["'forky'", "environment variable CRASHGATE_MODE", "fork, inprocess"]),
        ("cli", "forky", ["'forky'", "command line --chaos-mode", "fork, inprocess"]),
        ("ini", "forky", ["'forky'", "ini key chaos_mode", "fork, inprocess"]),
    ],
)
def test_a_bad_setting_is_a_usage_error_naming_its_source_and_the_allowed_values(project, monkeypatch, where, value, fragments):
    args = []
    if where == "env":
        monkeypatch.setenv("CRASHGATE_MODE", value)
    elif where == "cli":
        args = ["--chaos-mode", value]
    else:
        project.makeini(f"[pytest]\nchaos_mode = {value}\n")
    project.makepyfile(test_ok="def test_ok(): pass")
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--chaos-seed", "zero", "must be an integer"),
        ("--chaos-points", "some", "use all, a sample size N > 0, or one point"),
        ("--chaos-points", "0", "use all, a sample size N > 0, or one point"),
        ("--chaos-target", "no_colon", "must look like MODULE:ATTR"),
        ("--chaos-faults", "crash,freeze", ("has unknown kind 'freeze'; use a comma list of: crash, pause, interleave, disk, io, lock, "
                                            "clock, damage, power (or a sub-kind: disk-full, io-eio, io-enospc, lock-held, clock-back, "
                                            "clock-forward, clock-skew, damage-payload, damage-state, damage-memo, power-full, "
                                            "power-normal), e.g. crash,pause")),
        ("--chaos-faults", ",", "names no fault kind; use a comma list of: crash, pause, interleave"),
        ("--chaos-pairs", "0", "must be an integer > 0, e.g. 200"),
    ],
)
def test_a_malformed_value_is_refused_with_what_to_write_instead(project, flag, value, fragment):
    result = project.runpytest(flag, value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert fragment in result.stderr.str()


def test_the_plugin_prints_nothing_in_a_project_that_does_not_use_it(project):
    project.makepyfile(test_plain="def test_ok():\n    assert True\n")

    def lines(*args: str) -> list[str]:
        result = project.runpytest("-v", "-p", "no:cacheprovider", *args)
        result.assert_outcomes(passed=1)
        # pytest itself lists the installed plugins, and times the run: neither is the plugin talking.
        # The summary line's '=' padding follows the time's width (9.89s, 10.92s): collapsed too.
        return [re.sub(r"=+", "=", re.sub(r" in [0-9.]+s", "", line)) for line in result.outlines if not line.startswith("plugins:")]

    assert lines() == lines("-p", "no:crashgate")


def test_loading_the_plugin_imports_neither_the_engine_nor_the_harness():
    code = (
        "import sys, chaos.plugin\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('engine', 'coverage', 'hypothesis', 'sqlite3')"
        " or (m.startswith('chaos.') and m != 'chaos.plugin'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"


def test_the_plugin_names_the_same_modes_and_reference_target_as_the_harness():
    from chaos import MODES, REFERENCE_TARGET
    from chaos.hostfaults.faults import KIND_OF
    from chaos.matrix.runner import FAULTS, PAIRS_DEFAULT
    from chaos.plans.runner import ITEM_FAULTS
    from chaos.plans.plan import POINT_FAULTS, machine_fault_names

    assert plugin.MODES == MODES
    assert plugin.REFERENCE_TARGET == REFERENCE_TARGET
    assert plugin.FAULTS[:3] == POINT_FAULTS == FAULTS[:3]
    assert plugin.FAULTS == FAULTS == POINT_FAULTS + machine_fault_names()[0]  # then the faults of the machine
    assert plugin.MACHINE_SUBKINDS == tuple(KIND_OF) == machine_fault_names()[1]
    assert plugin.ITEM_KINDS == ITEM_FAULTS  # what may follow @ in a --chaos-points item
    assert plugin.PAIRS_DEFAULT == PAIRS_DEFAULT


def test_every_fixture_and_the_marker_are_documented_in_the_docs():
    # The options and the shipped plans are checked by tests/test_readme.py.
    for page in ("docs/how-to/gate-in-ci.md", "docs/reference/plugin-options.md"):
        text = (REPO / page).read_text()
        for name in ("chaos_world", "crash_matrix", "chaos_state_machine", "@pytest.mark.crash_matrix"):
            assert name in text, f"{name} is missing from {page}"


def test_a_report_path_the_run_must_not_overwrite_or_cannot_write_is_refused_before_any_test(project):
    """Checked when the run starts, not after it: a file that is not a crashgate report (a database
    passed by mistake) is left as it is; a folder, or a place no file can be created, is named."""
    victim = project.path / "app.db"
    sqlite3.connect(str(victim)).execute("CREATE TABLE job (id TEXT)").connection.commit()
    before = victim.read_bytes()
    (project.path / "reports").mkdir()
    project.makepyfile(test_ok="def test_ok(): pass")
    for value, fragment in [
        ("app.db", "app.db' exists and is not a crashgate report; it is left as it is"),
        ("reports", "is a folder; pass the path of the report's file"),
        ("/proc/crash-report.html", "no file can be created in '/proc'"),
        ("app.db/sub/r.html", "cannot be created"),
    ]:
        result = project.runpytest("--chaos-report", value)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (value, result.stdout.str()[-500:])
        err = result.stderr.str()
        assert "crashgate report (from command line --chaos-report): " in err and fragment in err, (value, err)
        assert "Traceback" not in err
    assert victim.read_bytes() == before


def test_a_report_path_that_is_not_a_regular_file_is_refused_without_reading_it(project):
    """A FIFO made pytest wait for a writer before any test ran; a device is no report either."""
    fifo = project.path / "report.html"
    os.mkfifo(fifo)
    project.makepyfile(test_ok="def test_ok(): pass")
    for value, kind in [(str(fifo), "is a named pipe (FIFO), not a regular file"), ("/dev/null", "is a character device")]:
        # In a subprocess with a deadline: without the check, the run blocks on the FIFO for ever.
        result = project.runpytest_subprocess("--chaos-report", value, timeout=120)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (value, result.stdout.str()[-500:])
        err = result.stderr.str()
        assert "crashgate report (from command line --chaos-report): " in err and kind in err, (value, err)
        assert "Traceback" not in err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_report_is_written_whole_or_not_at_all_and_an_old_one_is_replaced(tmp_path, monkeypatch):
    from chaos.report import html

    path = tmp_path / "crash-report.html"
    html.write_html(str(path), html.summarize([]))
    first = path.read_text()
    assert html.REPORT_TITLE in first[:4096]
    html.check_report_path(str(path))  # a report of an earlier run may be overwritten

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(html.os, "replace", full_disk)
    with pytest.raises(OSError):
        html.write_html(str(path), html.summarize([]))
    assert path.read_text() == first and sorted(p.name for p in tmp_path.iterdir()) == ["crash-report.html"]


def test_a_report_keeps_the_mode_a_file_of_the_run_would_have_and_an_empty_file_may_be_overwritten(tmp_path):
    """Written through a temporary file (mode 0600), the report was readable by its owner only."""
    from chaos.report import html

    path = tmp_path / "crash-report.html"
    path.touch()
    html.check_report_path(str(path))  # an empty file holds nothing to lose
    path.chmod(0o640)
    html.write_html(str(path), html.summarize([]))
    assert path.stat().st_mode & 0o777 == 0o640
    fresh = tmp_path / "fresh.html"
    umask = os.umask(0o022)
    try:
        html.write_html(str(fresh), html.summarize([]))
    finally:
        os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o644  # what the umask leaves of 0666, as for any file the run writes


@pytest.mark.parametrize(
    ("cli", "env", "ini", "expected", "source"),
    [
        ("2", "5", "7", 2.0, "command line --chaos-scenario-timeout"),
        (None, "5", "7", 5.0, "environment variable CRASHGATE_SCENARIO_TIMEOUT"),
        (None, None, "7", 7.0, "ini key chaos_scenario_timeout"),
        (None, None, None, None, "default"),
    ],
)
def test_the_scenario_timeout_follows_the_same_precedence(project, monkeypatch, cli, env, ini, expected, source):
    if env is not None:
        monkeypatch.setenv("CRASHGATE_SCENARIO_TIMEOUT", env)
    if ini is not None:
        project.makeini(f"[pytest]\nchaos_scenario_timeout = {ini}\n")
    settings = resolve(project.parseconfigure(*(["--chaos-scenario-timeout", cli] if cli else [])))
    assert settings.scenario_timeout_s == expected
    assert settings.sources["scenario_timeout"] == source


def test_a_bad_scenario_timeout_is_a_usage_error_naming_its_source(project, monkeypatch):
    monkeypatch.setenv("CRASHGATE_SCENARIO_TIMEOUT", "soon")
    project.makepyfile(test_ok="def test_ok(): pass")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("scenario timeout 'soon' (from environment variable CRASHGATE_SCENARIO_TIMEOUT) is not a number of seconds > 0"
            in result.stderr.str())
