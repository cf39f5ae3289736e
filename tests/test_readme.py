"""The README documents everything a user can type: every CLI command, plugin option and fault plan.

Each name is its own test, so a failure says exactly what is missing and where to add it. The
lists come from the code (``engine._cli.COMMANDS``, ``chaos.cli.COMMANDS``, ``chaos.plugin.OPTIONS``)
and from the files in ``fault_plans/``, never from a copy kept here.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
QUICKSTART_INSTALL = "pip install -e '.[test]' && python -m chaos demo"
QUICKSTART_TESTS = "python -m pytest -n auto"


def _readme() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def _commands(module: str) -> list[str]:
    return list(importlib.import_module(module).COMMANDS)


def _plugin_options() -> list[object] | None:
    """The plugin's options, or None while chaos.plugin does not exist (it is imported lazily)."""
    if importlib.util.find_spec("chaos.plugin") is None:
        return None
    return list(importlib.import_module("chaos.plugin").OPTIONS)


def _fault_plans() -> list[str]:
    return sorted(os.path.basename(path) for path in glob.glob(os.path.join(ROOT, "fault_plans", "*.toml")))


@pytest.mark.parametrize("command", _commands("engine._cli"))
def test_every_engine_command_is_in_the_readme(command):
    if not re.search(rf"python -m engine\s+{re.escape(command)}\b", _readme()):
        pytest.fail(f"README.md never shows `python -m engine {command}`; add it to the engine's command-line section", pytrace=False)


@pytest.mark.parametrize("command", _commands("chaos.cli"))
def test_every_chaos_command_is_in_the_readme(command):
    if not re.search(rf"python -m chaos\s+{re.escape(command)}\b", _readme()):
        pytest.fail(f"README.md never shows `python -m chaos {command}`; add a section or a line that shows it", pytrace=False)


_OPTIONS = _plugin_options()


@pytest.mark.parametrize(
    "option",
    _OPTIONS if _OPTIONS else [pytest.param(None, marks=pytest.mark.skip(reason="chaos.plugin does not exist yet: no plugin options to check"))],
    ids=lambda o: getattr(o, "flag", "no-plugin"),
)
def test_every_plugin_option_is_in_the_readme_as_flag_environment_variable_and_ini_key(option):
    text = _readme()
    missing = [f"{what} {name}" for what, name in (("flag", option.flag), ("environment variable", option.env), ("ini key", option.ini))
               if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)]
    if missing:
        pytest.fail(f"README.md does not mention the plugin option's {', '.join(missing)}; document it with the other options", pytrace=False)


@pytest.mark.parametrize(
    "plan",
    _fault_plans() or [pytest.param(None, marks=pytest.mark.skip(reason="no fault_plans/*.toml in this checkout"))],
)
def test_every_fault_plan_is_in_the_readme(plan):
    if plan not in _readme():
        pytest.fail(f"README.md does not mention fault_plans/{plan}; say what it protects against", pytrace=False)


def test_the_quickstart_is_exactly_two_commands_install_and_demo_then_the_tests():
    section = _readme().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the Quickstart has no ```bash block"
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == [QUICKSTART_INSTALL, QUICKSTART_TESTS]
