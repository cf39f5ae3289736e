"""The docs show everything a user can type: every CLI command, plugin option and fault plan.

Each name is its own test, so a failure says exactly what is missing and where to add it. The
lists come from the code (the commands in each CLI's own ``--help``, ``chaos.plugin.OPTIONS``)
and from the files in ``fault_plans/``, never from a copy kept here. The README stays short: at
most 200 lines, the Quickstart's two commands, links into the docs. Its links are absolute, into
the repository's home (``[project.urls] Repository`` in pyproject.toml), so that they also work on a
package index's page, where README.md is shown without the files beside it; each still names a file
of this checkout.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import importlib.util
import io
import os
import re
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
README_LINES_MAX = 200
QUICKSTART_INSTALL = "pip install -e '.[test]' && python -m chaos demo"
QUICKSTART_TESTS = "python -m pytest -n auto"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _blob_prefix() -> str:
    """Where README.md's links into the repository start: the files of its main branch."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        home = tomllib.load(f)["project"]["urls"]["Repository"]
    return f"{home}/blob/main/"


def _checkout_path(link: str) -> str | None:
    """The file of this checkout a README link names, or None for a link out of the repository."""
    if not link.startswith(_blob_prefix()):
        return None
    return os.path.join(ROOT, *link[len(_blob_prefix()):].split("#", 1)[0].split("/"))


def _readme() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def _docs() -> str:
    """Every hand-written page of the docs (the generated reference sections are not in them)."""
    texts = []
    for path in sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    return "\n".join(texts)


def _generated(name: str) -> str:
    """A generated reference section, as the site's build hook makes it."""
    sys.path.insert(0, os.path.join(DOCS, "hooks"))
    try:
        return importlib.import_module("reference").generate(name)
    finally:
        sys.path.remove(os.path.join(DOCS, "hooks"))


def _commands(module: str) -> list[str]:
    """The subcommands in the usage line of the CLI's own --help."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        importlib.import_module(module).main(["--help"])
    found = re.search(r"\{([a-z,-]+)\}", out.getvalue())
    assert found is not None, out.getvalue()
    return found.group(1).split(",")


def _plugin_options() -> list[object] | None:
    """The plugin's options, or None while chaos.plugin does not exist (it is imported lazily)."""
    if importlib.util.find_spec("chaos.plugin") is None:
        return None
    return list(importlib.import_module("chaos.plugin").OPTIONS)


def _fault_plans() -> list[str]:
    return sorted(os.path.basename(path) for path in glob.glob(os.path.join(ROOT, "fault_plans", "*.toml")))


@pytest.mark.parametrize("command", _commands("engine.__main__"))
def test_every_engine_command_is_shown_in_the_docs(command):
    if not re.search(rf"python -m engine\s+{re.escape(command)}\b", _docs()):
        pytest.fail(f"no page of docs/ shows `python -m engine {command}`; add it to docs/how-to/use-the-engine.md", pytrace=False)


@pytest.mark.parametrize("command", _commands("chaos.__main__"))
def test_every_chaos_command_is_shown_in_the_docs(command):
    if not re.search(rf"python -m chaos\s+{re.escape(command)}\b", _docs()):
        pytest.fail(f"no page of docs/ shows `python -m chaos {command}`; add a how-to section or a line that shows it", pytrace=False)


_OPTIONS = _plugin_options()


@pytest.mark.parametrize(
    "option",
    _OPTIONS if _OPTIONS else [pytest.param(None, marks=pytest.mark.skip(reason="chaos.plugin does not exist yet: no plugin options to check"))],
    ids=lambda o: getattr(o, "flag", "no-plugin"),
)
def test_every_plugin_option_is_in_the_reference_as_flag_environment_variable_and_ini_key(option):
    text = _generated("plugin-options")
    missing = [f"{what} {name}" for what, name in (("flag", option.flag), ("environment variable", option.env), ("ini key", option.ini))
               if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)]
    if missing:
        pytest.fail(f"the plugin-options reference does not show the option's {', '.join(missing)}; see docs/hooks/reference.py", pytrace=False)


@pytest.mark.parametrize(
    "plan",
    _fault_plans() or [pytest.param(None, marks=pytest.mark.skip(reason="no fault_plans/*.toml in this checkout"))],
)
def test_every_fault_plan_is_in_the_docs(plan):
    if plan not in _docs():
        pytest.fail(f"no page of docs/ mentions fault_plans/{plan}; say what it protects against in docs/how-to/write-a-fault-plan.md", pytrace=False)


def test_the_quickstart_is_exactly_two_commands_install_and_demo_then_the_tests():
    section = _readme().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the Quickstart has no ```bash block"
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == [QUICKSTART_INSTALL, QUICKSTART_TESTS]


def test_the_readme_has_at_most_200_lines():
    with open(README, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= README_LINES_MAX, f"README.md has {len(lines)} lines; move the long parts into docs/ and link them"


def test_the_readme_links_into_the_docs_for_each_way_in():
    text = _readme()
    for page in ("docs/how-to/gate-in-ci.md", "docs/how-to/write-an-adapter.md", "docs/reference/invariants.md"):
        assert f"]({_blob_prefix()}{page})" in text, f"README.md does not link {page}"
        assert os.path.exists(os.path.join(ROOT, page)), page


@pytest.mark.parametrize("link", LINK.findall(_readme()))
def test_every_readme_link_is_absolute_and_a_link_into_the_repository_names_a_file_of_the_checkout(link):
    if "://" not in link:
        pytest.fail(f"README.md links {link!r}, which breaks on a package index's page; "
                    f"write {_blob_prefix()}{link.lstrip('./')}", pytrace=False)
    path = _checkout_path(link)
    if path is not None and not os.path.exists(path):
        pytest.fail(f"README.md links {link}, but {os.path.relpath(path, ROOT)} is not in the repository", pytrace=False)
