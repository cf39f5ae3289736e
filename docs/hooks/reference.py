"""MkDocs hook: fill the reference pages from the code at build time, so they cannot drift.

A page asks for a generated section with an HTML comment on a line of its own,
``<!-- generated: NAME -->``; ``on_page_markdown`` replaces it with ``generate(NAME)``. Every
section is read through a public entry point only: the ``--help`` of ``python -m chaos`` and
``python -m engine`` (their ``main``), ``chaos.plugin.OPTIONS`` checked against what pytest's own
``--help`` lists, the plan loader's own "allowed" messages (``chaos.load_plan``),
``chaos.INVARIANTS``, the ``chaos.Adapter`` / ``chaos.Session`` protocols, and ``chaos.World``
with the services it hands a step (read by ``inspect``, and the ``ctx`` attributes its code reads
by ``ast``). The code is imported
from the checkout that holds ``mkdocs.yml``. A section that cannot be produced fails the build.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)
HELP_COLUMNS = "100"
SUBCOMMANDS_MAX = 50  # a bound on the commands one CLI may list


def _checkout_first() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _help(main: Callable[[list[str]], int], argv: list[str]) -> str:
    """What ``main(argv + ['--help'])`` prints (argparse exits 0 after printing)."""
    os.environ["COLUMNS"] = HELP_COLUMNS
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([*argv, "--help"])
        except SystemExit as stop:
            if stop.code not in (0, None):
                raise RuntimeError(f"{' '.join(argv)} --help exited {stop.code}") from None
    return out.getvalue()


def _commands(top_help: str) -> list[str]:
    """The subcommands from the top-level usage line's ``{a,b,c}``."""
    found = re.search(r"\{([a-z,-]+)\}", top_help)
    if found is None:
        raise RuntimeError(f"no {{command,...}} in the usage:\n{top_help}")
    commands = found.group(1).split(",")
    if not 0 < len(commands) <= SUBCOMMANDS_MAX:
        raise RuntimeError(f"{len(commands)} commands: expected 1 to {SUBCOMMANDS_MAX}")
    return commands


def _nested(main: Callable[[list[str]], int], prog: str, command: str, text: str) -> list[str]:
    """A command's own subcommands: the positional names whose help has a usage of their own."""
    section = text.split("positional arguments:", 1)
    if len(section) < 2:
        return []
    names = re.findall(r"^  ([a-z][a-z-]*)\b", section[1].split("\n\n", 1)[0], re.M)
    nested = []
    for name in names:
        try:
            sub = _help(main, [command, name])
        except RuntimeError:
            continue
        if sub.startswith(f"usage: {prog} {command} {name}"):
            nested.append(name)
    return nested


def cli_reference(module: str, prog: str) -> str:
    """Every command of a CLI with its full ``--help``."""
    _checkout_first()
    main = __import__(module, fromlist=["main"]).main
    top = _help(main, [])
    parts = [f"```text\n$ {prog} --help\n{top.rstrip()}\n```\n"]
    for command in _commands(top):
        text = _help(main, [command])
        parts.append(f"## `{prog} {command}`\n\n```text\n{text.rstrip()}\n```\n")
        for name in _nested(main, prog, command, text):
            parts.append(f"### `{prog} {command} {name}`\n\n```text\n{_help(main, [command, name]).rstrip()}\n```\n")
    return "\n".join(parts)


def state_table() -> str:
    """The reference workflow's state table, as ``python -m engine states`` prints it."""
    _checkout_first()
    from engine.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["states"])
    if code != 0:
        raise RuntimeError(f"python -m engine states exited {code}")
    return f"```text\n$ python -m engine states\n{out.getvalue().rstrip()}\n```\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _pytest_help() -> str:
    """pytest's own ``--help`` in an empty folder: the options the plugin really registered."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = HELP_COLUMNS
    with tempfile.TemporaryDirectory() as empty:
        out = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=empty, env=env,
                             capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"pytest --help exited {out.returncode}: {out.stderr[-500:]}")
    return out.stdout


def plugin_options() -> str:
    """Every plugin option: flag, environment variable, ini key, default, help."""
    _checkout_first()
    from chaos.plugin import OPTIONS

    registered = _pytest_help()
    rows = ["| flag | environment | ini key | default | what |", "|---|---|---|---|---|"]
    for option in OPTIONS:
        for name in (option.flag, option.ini):
            if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", registered):
                raise RuntimeError(f"pytest --help does not list {name}: the plugin did not register it")
        default = f"`{option.default}`" if option.default else "none"
        rows.append(f"| `{option.flag}` | `{option.env}` | `{option.ini}` | {default} | {_cell(option.help)} |")
    return "\n".join(rows) + "\n"


# What each plan key holds. The key names come from the plan loader (below); a key it allows and
# this table does not describe, or the other way round, fails the build.
PLAN_DESCRIPTIONS = {
    "plan": {
        "lesson": "one sentence: what the plan teaches (shown in failures and the report); required",
        "target": "the adapter as `MODULE:ATTR` (default: the `--chaos-target` setting)",
        "points": "table: kill a worker at every crash point of one iteration",
        "scenario": "array of tables: scripted scenarios",
    },
    "points": {
        "jobs": "job ids submitted first, each with the adapter's `payload(job_id)` (list of strings, or a count N: the adapter's first N `job_ids`, doc-1..doc-N by default; default: its first; `[]` for none)",
        "setup": "clean actions before the doomed iteration: `run`, `send`, `advance:<s>`, `claim[:<worker>]`",
        "phase": "what the doomed iteration runs: `worker` or `sender`",
        "faults": "faults armed for the doomed iteration (list of fault tables)",
        "second_worker": "a slow call lets a second worker run meanwhile (bool)",
        "steps": "which groups of points: `claim`, a step name, `release` (worker phase) or `send`",
        "deep": "also the lines of what the iteration calls, not only its own (bool, default true)",
        "fault": "what happens at each point: `crash`, `pause`, `interleave`, a fault of the host (`disk`, `io`, `lock`, "
                 "`clock`, `damage`, `power`, or a sub-kind such as `disk-full`), or a list (default: the `--chaos-faults` setting)",
        "expect": "checks on every point's outcome after recovery (an expect table)",
    },
    "scenario": {
        "name": "the test item's name (letters, digits, `_ . -`); required",
        "lesson": "this scenario's own lesson (default: the plan's)",
        "jobs": "job ids submitted first, each with the adapter's `payload(job_id)` (list of strings, or a count N: the adapter's first N `job_ids`, doc-1..doc-N by default; default: its first; `[]` for none)",
        "script": "the actions, in order (list of action tables); required",
        "expect": "checks once the script ran and the system drained (an expect table)",
    },
    "fault": {
        "kind": "the fault kind (below); required",
        "task": "the call it hits: a step's model task, `fetch` (documents) or `send` (receiver); default any",
        "sticky": "fail every matching call, not only the next (bool)",
        "retry_after_s": "a 429's Retry-After (number)",
        "duration_s": "how long a slow call takes (number)",
        "per_job": "with `sticky`: hit only each job's first N calls of the task, an outage every job meets and outlives (int)",
    },
    "expect": {
        "state": "every job ends in this state",
        "states": "table job id -> the state it ends in",
        "calls": "table step -> paid calls made during that step, all jobs together",
        "applied": "effects applied at the receiver (int)",
        "wasted_max": "wasted paid calls, at most (int)",
        "job_rows": "job rows in the database (int; scenarios only)",
        "burst_max": "`{ step, max, window_s = 1.0, from_s = 0.0 }`: at most `max` calls in any window (scenarios only)",
        "call_gap_min": "`{ step, seconds }`: calls of one job's step at least this far apart (scenarios only)",
    },
}
PLAN_PROBES = {  # table -> a plan with an unknown key in it; the loader's message lists the allowed ones
    "plan": 'lesson = "x"\nunknown_key = 1\n',
    "points": 'lesson = "x"\n[points]\nunknown_key = 1\n',
    "scenario": 'lesson = "x"\n[[scenario]]\nname = "a"\nunknown_key = 1\n',
    "fault": 'lesson = "x"\n[points]\nfaults = [{ kind = "timeout", unknown_key = 1 }]\n',
    "expect": 'lesson = "x"\n[points]\nexpect = { unknown_key = 1 }\n',
}
ACTIONS_PROBE = 'lesson = "x"\n[[scenario]]\nname = "a"\nscript = [{ unknown_key = 1 }]\n'


def _plan_error(text: str) -> str:
    _checkout_first()
    import chaos

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fault_plans" / "probe.toml"
        path.parent.mkdir()
        path.write_text(text)
        try:
            chaos.load_plan(path, shown="probe.toml")
        except chaos.PlanError as exc:
            return str(exc)
    raise RuntimeError(f"the plan loader accepted a plan with an unknown key:\n{text}")


def _allowed(message: str, what: str) -> list[str]:
    found = re.search(rf"allowed {what}: (.*)$", message)
    if found is None:
        raise RuntimeError(f"no 'allowed {what}:' in the loader's message: {message}")
    return [] if found.group(1) == "nothing else" else [k.strip() for k in found.group(1).split(",")]


def fault_plan_schema() -> str:
    """Every table of a plan with its keys, the actions with their extra keys, the fault kinds."""
    _checkout_first()
    import chaos

    parts = []
    for table, probe in PLAN_PROBES.items():
        keys = _allowed(_plan_error(probe), "keys")
        described = PLAN_DESCRIPTIONS[table]
        if set(keys) != set(described):
            raise RuntimeError(f"plan table {table!r}: the loader allows {keys}, the docs describe {sorted(described)}; "
                               "update PLAN_DESCRIPTIONS in docs/hooks/reference.py")
        rows = ["| key | what |", "|---|---|", *(f"| `{key}` | {_cell(described[key])} |" for key in keys)]
        parts.append(f"### `{table}` keys\n\n" + "\n".join(rows) + "\n")
    actions = _allowed(_plan_error(ACTIONS_PROBE), "actions")
    rows = ["| action | other keys it takes |", "|---|---|"]
    for verb in actions:
        message = _plan_error(f'lesson = "x"\n[[scenario]]\nname = "a"\nscript = [{{ {verb} = 1, unknown_key = 1 }}]\n')
        extra = _allowed(message, f"with '{verb}'")
        rows.append(f"| `{verb}` | {', '.join(f'`{k}`' for k in extra) or 'none'} |")
    parts.append("### Script actions (one per table)\n\n" + "\n".join(rows) + "\n")
    parts.append("### Fault kinds (`kind`)\n\n" + ", ".join(f"`{k}`" for k in chaos.FAULT_KINDS) + "\n")
    return "\n".join(parts)


def _markdown(docstring: str) -> str:
    text = re.sub(r"``([^`]+)``", r"`\1`", inspect.cleandoc(docstring))
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)  # Sphinx roles (:class:`X`, :class:`~X`) read as code


def invariants() -> str:
    """The invariant catalogue: each check's docstring (holds when; protects against; held by)."""
    _checkout_first()
    import chaos

    parts = []
    for name, check in chaos.INVARIANTS.items():
        if not check.__doc__:
            raise RuntimeError(f"invariant {name!r} has no docstring to document it")
        paragraphs = _markdown(check.__doc__).split("\n\n")
        body = "\n\n".join(" ".join(p.split()) for p in paragraphs)
        parts.append(f"## `{name}`\n\n{body}\n")
    return "\n".join(parts)


def _members(cls: type) -> list[str]:
    rows = []
    for name, member in vars(cls).items():
        if name.startswith("_") or not callable(member):
            continue
        doc = inspect.getdoc(member)
        summary = f" — {_cell(_markdown(doc).splitlines()[0])}" if doc else ""
        signature = str(inspect.signature(member)).replace("'", "")  # postponed annotations read as plain names
        rows.append(f"- `{name}{signature}`{summary}")
    return rows


def adapter_protocol() -> str:
    """The protocols' methods and attributes with their signatures, and ReferenceAdapter's hooks."""
    _checkout_first()
    import chaos

    parts = []
    for cls in (chaos.Adapter, chaos.Session):
        lines = [f"## `chaos.{cls.__name__}`", "", _markdown(cls.__doc__ or ""), ""]
        for name, annotation in getattr(cls, "__annotations__", {}).items():
            lines.append(f"- `{name}: {str(annotation).strip(chr(39))}` (attribute)")
        lines.extend(_members(cls))
        parts.append("\n".join(lines) + "\n")
    from chaos.adapter import CAPABILITIES
    from chaos.adapters.sql import SqliteAdapter

    rows = ["| capability | where | offer | without it |", "|---|---|---|---|"]
    for c in CAPABILITIES:
        without = f"disables {c.disables}" if c.disables else f"default: {c.default}"
        rows.append(f"| `{c.name}` | {c.where} | {_cell(c.offers)} | {_cell(without)} |")
    parts.append("## Optional capabilities (`chaos.adapter.CAPABILITIES`)\n\n"
                 "`python -m chaos adapter --target X` says which of these an adapter has.\n\n" + "\n".join(rows) + "\n")
    parts.append("## `chaos.adapters.sql.SqliteAdapter`: an engine on SQLite, declared\n\n"
                 + _markdown(SqliteAdapter.__doc__ or "").split("\n\n")[0] + "\n\n" + "\n".join(_members(SqliteAdapter)) + "\n")
    from chaos.adapters import rows as _rows

    declared = []
    for cls in (_rows.JobRows, _rows.MemoRows, _rows.OutboxRows, _rows.RowSchema):
        fields = ", ".join(cls.__dataclass_fields__)
        declared.append(f"- `chaos.adapters.rows.{cls.__name__}({fields})`: {_cell(_markdown(cls.__doc__ or '').split(chr(10) + chr(10))[0])}")
    parts.append("## `chaos.adapters.rows`: an engine without a job table, read from its own rows\n\n"
                 + _markdown(_rows.__doc__ or "").split("\n\n")[0] + "\n\n" + "\n".join(declared) + "\n\n"
                 + "`RowsAdapter` is `SqliteAdapter` with a `RowSchema`; the decoders `crashgate_json(text, '$.path')` and "
                 "`crashgate_unpickle(blob, 'key')` are registered on the harness's own connections (`register_decoders`).\n")
    protocol = {n for cls in (chaos.Adapter, chaos.Session) for n in vars(cls)}
    extra = [row for row in _members(chaos.ReferenceAdapter) if row[3:].split("(", 1)[0] not in protocol]
    parts.append("## `chaos.ReferenceAdapter`: what a subclass may override\n\n"
                 + _markdown(chaos.ReferenceAdapter.__doc__ or "").split("\n\n")[0] + "\n\n" + "\n".join(extra) + "\n")
    return "\n".join(parts)


# What the world does with each attribute of a call's ``ctx``. The names come from the world's own
# code (every ``ctx.NAME`` it reads is required, every ``getattr(ctx, "NAME", ...)`` optional); a
# name it reads and this table does not describe, or the other way round, fails the build.
CTX_DESCRIPTIONS = {
    "job_id": "the job the call belongs to: the ledger's record, and the job a `per_job` or `jobs` fault counts",
    "step": "the step making the call, as the engine names it",
    "worker_id": "the worker making the call",
    "token": "the lease's fencing token, handed to the adapter's probe (none: the engine has no fencing)",
    "heartbeat": "called (no arguments) while a slow or stalled call goes on, as a long call renews its lease "
                 "(none: the lease simply runs out)",
}
# Each public method of chaos.World, by what it is for; a method in no group (or a group naming a
# method the class lacks) fails the build, so that the page lists every one.
WORLD_GROUPS = {
    "Faults": ("arm", "disarm", "pending_faults", "discard", "take_fault", "strike"),
    "What the ledger recorded": ("calls", "deliveries", "applied_effects", "faults_met", "step_send_faults", "escapes", "raised"),
    "Making and closing a world": ("for_adapter", "close", "conn"),
    "The harness's own (the services and the checks call these; a step never does)":
        ("record_call", "record_fault", "record_send_fault", "record_escape", "record_raised", "deliver", "stall", "slow"),
}
WORLD_SERVICES = ("model", "documents", "sender")


def _ctx_reads() -> dict[str, bool]:
    """Each attribute of ``ctx`` that chaos/core/world.py reads -> whether it is required."""
    import ast

    import chaos.core.world

    tree = ast.parse(Path(chaos.core.world.__file__).read_text(encoding="utf-8"))
    reads: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ctx":
            reads[node.attr] = True
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) == 3 and isinstance(node.args[0], ast.Name) and node.args[0].id == "ctx"
              and isinstance(node.args[1], ast.Constant)):
            reads.setdefault(node.args[1].value, False)
    return reads


def _public(obj: object) -> list[str]:
    """The public methods and properties of ``obj``'s class (or of ``obj``, a class), inherited ones
    included, in the order of their definition."""
    cls = obj if isinstance(obj, type) else type(obj)
    names: list[str] = []
    for klass in reversed(cls.__mro__[:-1]):  # object's own are not the class's API
        names.extend(n for n, v in vars(klass).items()
                     if not n.startswith("_") and n not in names and (callable(v) or isinstance(v, (property, classmethod, staticmethod))))
    return names


def _annotation(annotation: object) -> str:
    # A postponed annotation is the string it was written as; inspect would show it quoted.
    return annotation.strip("'\"") if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _default(value: object) -> str:
    import enum

    return f"{type(value).__name__}.{value.name}" if isinstance(value, enum.Enum) else repr(value)


def _signature(member: object) -> str:
    """``(name: type = default, ...) -> type`` as written in the code, without ``self``."""
    signature = inspect.signature(member)
    shown: list[str] = []
    star = False  # a '*' (or '*args') already separates the keyword-only parameters
    for p in signature.parameters.values():
        if p.name == "self" and not shown:
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            shown.append("*")
        star = star or p.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL)
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}" if p.annotation is not p.empty else f"={_default(p.default)}"
        shown.append(text)
    returns = "" if signature.return_annotation is signature.empty else f" -> {_annotation(signature.return_annotation)}"
    return f"({', '.join(shown)}){returns}"


def _method(owner: object, name: str, prefix: str) -> str:
    """One method (or property) as a bullet: its signature and its whole docstring, as one paragraph."""
    static = inspect.getattr_static(owner if isinstance(owner, type) else type(owner), name)
    member = getattr(owner, name)
    if isinstance(static, classmethod):
        prefix = f"{(owner if isinstance(owner, type) else type(owner)).__name__}."
    if isinstance(static, property):
        head, doc = f"`{prefix}{name}` (property)", inspect.getdoc(static)
    else:
        head, doc = f"`{prefix}{name}{_signature(member)}`", inspect.getdoc(member)
    body = " ".join(_markdown(doc).split()) if doc else "(no docstring)"
    return f"- {head} — {_cell(body)}"


def _fields(cls: type) -> str:
    import dataclasses

    rows = ["| field | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = "" if f.default is dataclasses.MISSING else f"`{f.default!r}`"
        rows.append(f"| `{f.name}` | `{_cell(str(f.type))}` | {default} |")
    return "\n".join(rows)


def world_api() -> str:
    """What the world offers a step (its services, the model's reply, what ``ctx`` carries), and every
    public method of ``chaos.World`` and of the ``chaos_world`` fixture's ``chaos.Sandbox``."""
    _checkout_first()
    import ast

    import chaos
    import engine
    from chaos.core.world import Call, Delivery

    parts = []
    with tempfile.TemporaryDirectory() as folder:
        world = chaos.World(folder, engine.FakeClock(0.0))  # its ledger opens on first use: never here
        services = []
        for name in WORLD_SERVICES:
            service = getattr(world, name)
            methods = _public(service)
            if not methods:
                raise RuntimeError(f"world.{name} has no public method to document")
            services.append(f"### `world.{name}`\n\n{_markdown(inspect.getdoc(service) or '')}\n\n"
                            + "\n".join(_method(service, m, f"world.{name}.") for m in methods) + "\n")
        parts.append("## The services a step calls\n\n" + "\n".join(services))

        reads = _ctx_reads()
        if set(reads) != set(CTX_DESCRIPTIONS):
            raise RuntimeError(f"chaos/core/world.py reads ctx.{{{', '.join(sorted(reads))}}}; the docs describe "
                               f"{sorted(CTX_DESCRIPTIONS)}: update CTX_DESCRIPTIONS in docs/hooks/reference.py")
        rows = ["| attribute | needed | what the world does with it |", "|---|---|---|"]
        for name, required in sorted(reads.items(), key=lambda item: not item[1]):
            rows.append(f"| `ctx.{name}` | {'yes' if required else 'where the engine has it'} | {_cell(CTX_DESCRIPTIONS[name])} |")
        context = engine.StepContext
        init = ast.parse(inspect.cleandoc("\n" + inspect.getsource(context.__init__)))
        attributes = [t.attr for node in ast.walk(init) if isinstance(node, ast.Assign) for t in node.targets
                      if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                      and not t.attr.startswith("_")]
        missing = [name for name in reads if name not in attributes and name not in _public(context)]
        if missing:
            raise RuntimeError(f"engine.StepContext lacks {missing}, which the world reads from ctx")
        parts.append("## What `ctx` must carry\n\nEvery call of the model and of the documents takes the step's "
                     "context first. The world reads these from it:\n\n" + "\n".join(rows) + "\n\n"
                     f"### The reference engine's context: `engine.StepContext`\n\n{_markdown(context.__doc__ or '')} "
                     "It carries all of the above.\n\n"
                     + "\n".join(f"- `ctx.{a}` (attribute)" for a in attributes) + "\n"
                     + "\n".join(_method(context, m, "ctx.") for m in _public(context)) + "\n")

        parts.append(f"## The model's reply: `engine.ModelReply`\n\n{_markdown(inspect.getdoc(engine.ModelReply) or '')}\n\n"
                     + _fields(engine.ModelReply) + "\n")

        methods = _public(chaos.World)
        grouped = [m for group in WORLD_GROUPS.values() for m in group]
        if sorted(grouped) != sorted(methods):
            raise RuntimeError(f"chaos.World's public methods are {sorted(methods)}, the docs group {sorted(grouped)}: "
                               "update WORLD_GROUPS in docs/hooks/reference.py")
        doc = _markdown(inspect.getdoc(chaos.World) or "").split("\n\n")
        lines = [f"## `chaos.World`: the whole class\n\n{' '.join(doc[0].split())}\n\n"
                 f"`chaos.World{_signature(chaos.World)}`\n"]
        for group, names in WORLD_GROUPS.items():
            lines.append(f"### {group}\n\n" + "\n".join(_method(world, m, "world.") for m in names) + "\n")
        parts.append("\n".join(lines))
    for cls in (chaos.Fault, Call, Delivery):
        module = "chaos" if getattr(chaos, cls.__name__, None) is cls else cls.__module__
        parts.append(f"## `{module}.{cls.__name__}`\n\n{_markdown(inspect.getdoc(cls) or '').split(chr(10) * 2 + '>>>')[0]}\n\n"
                     + _fields(cls) + "\n")
    sandbox = chaos.Sandbox
    parts.append("## The `chaos_world` fixture: `chaos.Sandbox`\n\n"
                 + _markdown(inspect.getdoc(sandbox) or "").split("\n\n")[0] + "\n\n"
                 + "\n".join(_method(sandbox, m, "chaos_world.") for m in _public(sandbox)) + "\n")
    return "\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "chaos-cli": lambda: cli_reference("chaos.__main__", "python -m chaos"),
    "engine-cli": lambda: cli_reference("engine.__main__", "python -m engine"),
    "state-table": state_table,
    "plugin-options": plugin_options,
    "fault-plan-schema": fault_plan_schema,
    "invariants": invariants,
    "adapter-protocol": adapter_protocol,
    "world-api": world_api,
}


def generate(name: str) -> str:
    if name not in GENERATORS:
        raise RuntimeError(f"unknown generated section {name!r}; known: {', '.join(GENERATORS)}")
    return GENERATORS[name]()


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' hook signature)
    return MARKER.sub(lambda m: generate(m.group(1)), markdown)
