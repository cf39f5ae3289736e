"""The wheel a user installs: only the library, the fault plans inside it, and a console script.

Goal: what ``pip install crashgate`` puts into site-packages works on its own, outside the checkout.
Method: build the wheel from the checkout (``pip wheel --no-deps``, verbose so that the build
backend's warnings are kept), read its metadata, list its top-level names,
install it into a fresh virtual environment (with the system's site-packages, so that pytest,
Hypothesis and the rest need no download, and ``--force-reinstall`` so that the wheel's copy is
the one imported, never an editable install of a checkout), then, in a directory outside the
checkout and with no PYTHONPATH, ask ``crashgate`` for its usage and version, run ``crashgate demo``
and a shipped plan copied there by ``crashgate plans init``, through pytest.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

from builds import ROOT, RUN_TIMEOUT_S, Built, built_wheel, clean_env, installed_wheel, run, warnings_in


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    return built_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built.wheel


def test_the_wheel_holds_only_engine_and_chaos_with_the_fault_plans_as_package_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = sorted({name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")})
    assert top == ["chaos", "engine"], f"the wheel's top-level packages: {top} (benchmarks/ is development tooling and must not ship)"
    shipped = sorted(name.rsplit("/", 1)[1] for name in names if name.startswith("chaos/fault_plans/") and name.endswith(".toml"))
    assert shipped == sorted(p.name for p in (ROOT / "fault_plans").glob("*.toml"))
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[console_scripts]\ncrashgate = " in text
    assert "[pytest11]\ncrashgate = chaos.plugin" in text


def test_the_build_backend_warns_of_nothing_in_the_project_s_configuration(built):
    """setuptools prints a deprecation (``project.license`` as a table, say) long before it fails
    the build; a warning of the build backend's is a failure here, while it is one line to fix."""
    warnings = warnings_in(built.log)
    assert warnings == [], "the build warned:\n" + "\n".join(warnings)


def test_the_wheel_declares_an_spdx_license_with_its_text_and_the_project_s_urls(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    metadata_name = next(name for name in names if name.endswith(".dist-info/METADATA"))
    metadata = HeaderParser().parsestr(zipfile.ZipFile(wheel).read(metadata_name).decode())
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    license_text = next(name for name in names if name.endswith(".dist-info/licenses/LICENSE"))
    assert zipfile.ZipFile(wheel).read(license_text).decode() == (ROOT / "LICENSE").read_text(encoding="utf-8")
    urls = dict(line.split(", ", 1) for line in metadata.get_all("Project-URL"))
    assert sorted(urls) == ["Documentation", "Homepage", "Issues", "Repository"]
    home = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Repository"]
    assert urls["Homepage"] == home
    assert urls["Issues"] == f"{home}/issues"


@pytest.mark.slow
def test_the_installed_wheel_runs_the_demo_and_a_copied_plan_outside_the_checkout(tmp_path_factory, tmp_path):
    venv = installed_wheel(tmp_path_factory)
    python = venv / "bin" / "python"
    env = clean_env(venv)
    project = tmp_path / "project"
    project.mkdir()

    where = run([str(python), "-c", "import chaos, engine; print(chaos.__file__); print(engine.__file__)"], cwd=project, env=env).stdout.split()
    for path in where:
        assert Path(path).resolve().is_relative_to(venv.resolve()), f"imported {path}, not the wheel installed in {venv}"
    assert not any(Path(p).resolve().is_relative_to(ROOT) for p in where)

    crashgate = str(venv / "bin" / "crashgate")
    usage = run([crashgate, "--help"], cwd=project, env=env).stdout
    assert usage.startswith("usage: crashgate "), usage[:200]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert run([crashgate, "--version"], cwd=project, env=env).stdout == f"crashgate {version}\n"  # the wheel's metadata: no checkout there
    demo = run([crashgate, "demo", "--jobs", "20", "--kill-every", "0.3", "--kills-min", "1", "--lease", "1", "--plain"], cwd=project, env=env)
    assert "OK:" in demo.stdout, demo.stdout[-2000:]

    init = run([crashgate, "plans", "init"], cwd=project, env=env)
    assert "fault_plans/double_submit.toml" in init.stdout
    again = subprocess.run([crashgate, "plans", "init"], cwd=project, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert again.returncode == 2 and "--force" in again.stderr

    # A seeded sample of each plan's points: what this test proves is that the wheel's plugin collects
    # and runs the copied plans outside the checkout; every point of the same plans runs from the
    # checkout's fault_plans/ in this suite. pytest adds " (0:01:24)" to a run over a minute.
    plans = run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--chaos-points", "12",
                 "fault_plans/double_submit.toml", "fault_plans/rate_limit.toml"], cwd=project, env=env)
    summary = plans.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in [\d.]+s( \(\d+:\d\d:\d\d\))?", summary), plans.stdout[-2000:]
