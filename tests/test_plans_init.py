"""``python -m chaos plans init [DIR]`` copies the shipped plans, and never overwrites one unasked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from disk_fixtures import fill, mounted_tmpfs

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.name for p in (ROOT / "fault_plans").glob("*.toml"))


def _init(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-m", "chaos", "plans", "init", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_init_copies_every_shipped_plan_into_fault_plans(tmp_path):
    done = _init(tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "fault_plans").iterdir()) == SHIPPED
    copied = (tmp_path / "fault_plans" / "poison.toml").read_text()
    header, _, rest = copied.partition('target = "chaos:reference_adapter"\n\n')
    assert rest.encode() == (ROOT / "fault_plans" / "poison.toml").read_bytes()  # the shipped plan, after its target
    assert header.startswith("# Copied by `python -m chaos plans init`: written for the reference workflow")
    assert done.stdout.rstrip().endswith(
        f"{len(SHIPPED)} fault plans in fault_plans, written for the reference workflow and naming it as their target; run "
        "them with: python -m pytest fault_plans (to gate a workflow of your own with one, change its steps and states to "
        "your workflow's and delete its target line)")


MY_ADAPTER = """
from chaos import ReferenceAdapter
from engine import Step, StepOutput, Workflow

class Mine(ReferenceAdapter):
    name = "mine"
    def workflow(self, world):
        return Workflow("mine", [Step("pack", lambda ctx: StepOutput({})), Step("ship", lambda ctx: StepOutput({}))])
"""


def test_the_command_init_prints_collects_the_plans_in_a_project_gating_its_own_workflow(tmp_path):
    """The project's chaos_target is its own workflow, whose states the shipped plans do not name:
    the command printed still collects every plan, without an error."""
    (tmp_path / "mine.py").write_text(MY_ADAPTER)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nchaos_target = "mine:Mine"\npythonpath = ["."]\n')
    done = _init(tmp_path)
    command = done.stdout.rstrip().rpartition("run them with: ")[2].partition(" (")[0].split()
    assert command[:3] == ["python", "-m", "pytest"], command
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_")}
    collected = subprocess.run([sys.executable, *command[1:], "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stdout[-2000:]
    assert "error" not in collected.stdout.splitlines()[-1], collected.stdout[-2000:]


MY_PLAN = """
lesson = "A crash at any line of a parcel's run re-runs the step or finds its memo."

[points]
expect = { state = "ship_done" }
"""


def test_init_in_a_project_with_fault_plans_of_its_own_collects_them_all_without_an_error(tmp_path):
    """It put the reference workflow's plans beside the project's own, where the plugin checked them
    against the project's workflow: 14 collection errors for steps and states it does not have.
    Each copy now names its target, the reference engine, and the project's plan still runs on its own."""
    (tmp_path / "mine.py").write_text(MY_ADAPTER)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nchaos_target = "mine:Mine"\npythonpath = ["."]\n')
    (tmp_path / "fault_plans").mkdir()
    (tmp_path / "fault_plans" / "parcels.toml").write_text(MY_PLAN)
    done = _init(tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "fault_plans").iterdir()) == sorted([*SHIPPED, "parcels.toml"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "fault_plans"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    last = collected.stdout.splitlines()[-1]
    assert collected.returncode == 0 and "error" not in last, collected.stdout[-3000:]
    assert "fault_plans/parcels.toml::pack::" in collected.stdout  # the project's own plan, on its own workflow


def test_init_refuses_to_overwrite_a_plan_and_copies_nothing_unless_forced(tmp_path):
    plans = tmp_path / "tests" / "fault_plans"
    plans.mkdir(parents=True)
    (plans / "poison.toml").write_text("# my own version\n")
    refused = _init(tmp_path, "tests/fault_plans")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: plans init: 1 plan already in 'tests/fault_plans': poison.toml; nothing was copied.")
    assert "--force" in refused.stderr
    assert [p.name for p in plans.iterdir()] == ["poison.toml"]
    assert (plans / "poison.toml").read_text() == "# my own version\n"

    forced = _init(tmp_path, "tests/fault_plans", "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in plans.iterdir()) == SHIPPED
    assert (plans / "poison.toml").read_text() != "# my own version\n"


def test_init_refuses_a_folder_the_plugin_would_not_collect_and_a_file_in_the_way(tmp_path):
    wrong = _init(tmp_path, "plans")
    assert wrong.returncode == 2
    assert "is not a folder named fault_plans" in wrong.stderr and "'plans/fault_plans'" in wrong.stderr
    assert not (tmp_path / "plans").exists()
    (tmp_path / "fault_plans").write_text("not a folder")
    blocked = _init(tmp_path)
    assert blocked.returncode == 2
    assert "exists and is not a folder" in blocked.stderr


def test_force_copies_nothing_when_a_plan_name_is_taken_by_something_that_is_not_a_file(tmp_path):
    """It copied the plans before it up to the folder in the way, then stopped with a bare errno."""
    plans = tmp_path / "fault_plans"
    (plans / "poison.toml").mkdir(parents=True)
    done = _init(tmp_path, "--force")
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: plans init: 'fault_plans' holds poison.toml, which is not a plain file: --force overwrites "
                                   "only files; nothing was copied: move it away, or choose another folder")
    assert [p.name for p in plans.iterdir()] == ["poison.toml"]


def test_a_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    done = _init(tmp_path, "/proc/fault_plans")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: plans init: cannot write the plans into '/proc/fault_plans' (")
    assert done.stderr.rstrip().endswith("pass a folder you can write")


def test_init_on_a_full_disk_leaves_no_plan_empty_or_half_copied(tmp_path):
    """It left a 0-byte plan (and the plans before it), which the plugin then collected: each plan is
    written under a temporary name and renamed once all are written, or none is."""
    with mounted_tmpfs(tmp_path / "full", "1m") as disk:
        fill(disk)
        done = _init(disk)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "No space left on device" in done.stderr and "fault_plans" in done.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["fill"]  # not even the folder it made


def test_init_forced_on_a_full_disk_keeps_the_plans_that_were_there(tmp_path):
    with mounted_tmpfs(tmp_path / "full", "1m") as disk:
        plans = disk / "fault_plans"
        plans.mkdir()
        (plans / "poison.toml").write_text("# my own version\n")
        fill(disk)
        done = _init(disk, "--force")
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert [p.name for p in plans.iterdir()] == ["poison.toml"]
        assert (plans / "poison.toml").read_text() == "# my own version\n"
