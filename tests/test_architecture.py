"""The shape of the code: honest ``__all__`` lists and no private name reached across modules.

Read statically (``ast``), so that a check costs nothing and imports nothing. The rules:

- every module of ``chaos/`` and ``engine/`` declares ``__all__``, and each name in it is defined;
- a subpackage's ``__all__`` lists exactly its modules;
- no module imports another module's private name (``from x import _y``) or reads one through a
  module it imported (``x._y``);
- a ``chaos`` module imports from another ``chaos`` module only names in that module's ``__all__``
  (or its submodules), and from ``engine`` only through public modules (never ``engine._x``);
- no module of ``chaos/`` is longer than ``LINES_MAX`` lines, but those listed in ``TO_SPLIT``, and a
  listed one leaves the list once it is split.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("chaos", "engine")
LINES_MAX = 600  # a module a reader can hold: past this, it holds more than one concern
# The modules of chaos/ still longer than LINES_MAX, each to be split by concern as chaos/plugin/ was (none left).
TO_SPLIT: frozenset[str] = frozenset()


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[union-attr]
    return None


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    for node in tree.body:  # a package's lazy exports: ``_EXPORTS = {"Name": ".module"}``
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            names.update(ast.literal_eval(node.value))
    return names


def _target(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not MODULES[module].name == "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, str, int]]:
    """(target module, name, line) for each ``from target import name`` and each ``target._name``."""
    found, aliases = [], {}
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom):
            target = _target(module, node)
            for alias in node.names:
                found.append((target, alias.name, node.lineno))
                aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name or alias.name.split(".")[0]
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            base = aliases[node.value.id]
            if base in MODULES and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append((base, node.attr, node.lineno))
    return [f for f in found if f[0].split(".")[0] in PACKAGES]


def _package(module: str) -> str:
    return module.rsplit(".", 1)[0] if MODULES[module].name != "__init__.py" else module


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_declares_an_honest_all(module):
    declared = _declared_all(TREES[module])
    assert declared is not None, f"{MODULES[module].relative_to(ROOT)} has no __all__"
    missing = sorted(set(declared) - _defined(TREES[module]) - _submodules(module))
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"
    assert len(declared) == len(set(declared)), f"{module}.__all__ names a name twice"


def _submodules(module: str) -> set[str]:
    if MODULES[module].name != "__init__.py":
        return set()
    prefix = module + "."
    return {m[len(prefix):] for m in MODULES if m.startswith(prefix) and "." not in m[len(prefix):]}


@pytest.mark.parametrize("package", sorted(m for m in MODULES if MODULES[m].name == "__init__.py" and m.count(".") == 1))
def test_a_subpackage_lists_exactly_its_modules(package):
    if package.split(".")[0] != "chaos":
        pytest.skip("engine has no subpackages")
    assert sorted(_declared_all(TREES[package]) or []) == sorted(_submodules(package))


def test_no_module_imports_another_modules_private_name():
    reached = [f"{MODULES[m].relative_to(ROOT)}:{line} {target}.{name}" for m in MODULES for target, name, line in _imports(m)
               if name.startswith("_") and not name.startswith("__") and target in MODULES and target != m
               and f"{target}.{name}" not in MODULES]
    assert not reached, "private names reached across modules:\n" + "\n".join(reached)


def test_chaos_imports_only_what_other_modules_export():
    wrong = []
    for module in (m for m in MODULES if m.startswith("chaos")):
        for target, name, line in _imports(module):
            where = f"{MODULES[module].relative_to(ROOT)}:{line}"
            if target.startswith("engine") and any(part.startswith("_") for part in target.split(".")):
                wrong.append(f"{where} imports {name} from the engine's private module {target}")
            elif target in MODULES and target != module and f"{target}.{name}" not in MODULES \
                    and name not in (_declared_all(TREES[target]) or []) and name != "*":
                wrong.append(f"{where} imports {name}, which {target}.__all__ does not export")
    assert not wrong, "\n".join(wrong)


def test_the_rules_catch_a_private_import(tmp_path):
    """The checks above can fail: a module that reaches into a private name is reported."""
    tree = ast.parse("from chaos.core.scenario import _hidden\nimport chaos.core.scenario as s\ns._other()\n")
    TREES["chaos.probe_module"] = tree
    MODULES["chaos.probe_module"] = tmp_path / "probe_module.py"
    try:
        names = {name for _, name, _ in _imports("chaos.probe_module")}
        assert {"_hidden", "_other"} <= names
    finally:
        del TREES["chaos.probe_module"], MODULES["chaos.probe_module"]


def test_the_wheel_ships_every_package():
    """pyproject.toml lists packages by name: a new subpackage must be listed, or the wheel lacks it."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    packages = {m for m in MODULES if MODULES[m].name == "__init__.py"}
    assert packages - listed == set(), f"packages missing from [tool.setuptools] packages: {sorted(packages - listed)}"


def _session_openings(module: str) -> list[int]:
    """Lines where ``module`` opens an adapter's session itself: a call ``<x>.open(...)`` that
    passes ``worker_id=``, as only the protocol's ``open(db, world, *, worker_id, clock, rng)`` does."""
    return [
        node.lineno
        for node in ast.walk(TREES[module])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "open"
        and any(k.arg == "worker_id" for k in node.keywords)
    ]


def test_sessions_open_in_one_place():
    """Every mode (the matrix, random histories, fault plans, the host's faults) opens its workers'
    sessions through chaos.core.context.RunContext: the engine reads the run's clock there and
    its writes name their writer, once for all of them."""
    opening = {m: lines for m in MODULES if m.startswith("chaos") and (lines := _session_openings(m))}
    assert set(opening) == {"chaos.core.context"}, opening


def _oversized(paths: list[pathlib.Path], root: pathlib.Path = ROOT) -> dict[str, int]:
    """Each module longer than LINES_MAX lines, as its path from ``root`` -> its length."""
    lengths = {path.relative_to(root).as_posix(): len(path.read_text().splitlines()) for path in paths}
    return {path: lines for path, lines in lengths.items() if lines > LINES_MAX}


def test_no_chaos_module_is_longer_than_the_limit_but_those_still_to_split():
    oversized = _oversized([path for m, path in MODULES.items() if m.split(".")[0] == "chaos"])
    grown = {path: lines for path, lines in oversized.items() if path not in TO_SPLIT}
    assert not grown, (f"modules over {LINES_MAX} lines: {grown}; split each by concern (a module per concept, "
                       "as chaos/plugin/ is), rather than adding it to TO_SPLIT")
    split = sorted(TO_SPLIT - set(oversized))
    assert not split, f"no longer over {LINES_MAX} lines, so to drop from TO_SPLIT: {split}"


def test_the_length_rule_catches_a_long_module(tmp_path):
    """The check above can fail: a module one line past the limit is reported, one at it is not."""
    long, short = tmp_path / "long.py", tmp_path / "short.py"
    long.write_text("x = 1\n" * (LINES_MAX + 1))
    short.write_text("x = 1\n" * LINES_MAX)
    assert _oversized([long, short], root=tmp_path) == {"long.py": LINES_MAX + 1}


def _module_imports(module: str) -> set[str]:
    """The chaos modules ``module`` imports when it is imported: its statements at module level,
    those under ``if TYPE_CHECKING:`` and ``try:`` included (a type named there is still a
    dependency a reader follows), those inside functions not (they run later, on purpose)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom):
                target = _target(module, node)
                for alias in node.names:
                    found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in MODULES else target)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))
    visit(TREES[module].body)
    return {m for m in found if m in MODULES and m != module and m.split(".")[0] == "chaos"}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module in ``graph`` (Tarjan's algorithm), each as a cycle's modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def test_no_import_cycle_among_chaos_modules():
    """No chaos module imports, through others, a module that imports it: the contract
    (chaos.adapter) stands on the core's leaves, and the core never leans back on the modules above it."""
    graph = {m: _module_imports(m) for m in MODULES if m.split(".")[0] == "chaos"}
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other in a circle:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_rule_catches_a_circle():
    """The check above can fail: three modules importing each other in a ring are one group."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
