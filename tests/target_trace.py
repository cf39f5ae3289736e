"""Follow the loaded target through one real crash-matrix run: which harness modules receive it.

Run as a script (``python tests/target_trace.py OUT.json``), in a process of its own that declares
itself pristine, so that ``run_matrix`` runs here rather than in the pristine server. A profile
hook notes every call of a function of ``chaos`` (the shipped adapters and the engine left out:
they are the code under test, not the harness) that receives the target as an argument: the
adapter object, or the value the harness resolves it into. Forked children inherit the hook and
append to the same file, so the trip is followed into the scenario's processes too; the events
are then read in the order they happened.

:func:`figures` counts, over that sequence of modules: the **stays** (runs of calls in one module),
the **climbs** (a call made from a module of a lower layer into a higher one, the layers taken from
the package structure: ``chaos.core`` lowest, then the modes and the contract, then the plugin and
the command line) and the **returns** (a stay in a module the trip had already left).
"""

from __future__ import annotations

import json
import os
import sys
import time

__all__ = ["figures", "layer", "trace", "trip"]

# The lowest layer: the process core every mode shares. The contract (chaos.adapter) sits above it,
# with the modes; the plugin and the command line on top.
TOP = ("chaos.plugin", "chaos.cli", "chaos.__main__")
LEFT_OUT = ("chaos.adapters",)  # the shipped adapters are the engine's side of the contract


def layer(module: str) -> int:
    if module.startswith("chaos.core"):
        return 0
    if module == "chaos" or module.startswith(TOP):
        return 2
    return 1


def _followed(module: str) -> bool:
    return (module == "chaos" or module.startswith("chaos.")) and not module.startswith(LEFT_OUT)


def trace(out_path: str, **run: object) -> None:
    """Run ``run_matrix(**run)`` on the reference target with the hook set, events appended to ``out_path``."""
    from chaos.core import pristine

    pristine.declare_pristine()
    from chaos.matrix.runner import run_matrix

    followed = _followed_types()
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def hook(frame, event, arg):  # noqa: ARG001
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not _followed(module):
            return
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount
        values = frame.f_locals
        if not any(type(values.get(name)) in followed for name in code.co_varnames[:count]):
            return
        caller = frame.f_back
        while caller is not None and not _followed(caller.f_globals.get("__name__", "")):
            caller = caller.f_back
        by = caller.f_globals.get("__name__", "") if caller is not None else ""
        line = json.dumps([time.monotonic_ns(), os.getpid(), module, code.co_name, by]) + "\n"
        os.write(fd, line.encode())

    sys.setprofile(hook)
    try:
        run_matrix("chaos:reference_adapter", **run)
    finally:
        sys.setprofile(None)
        os.close(fd)


def _followed_types() -> set[type]:
    """The types of the values followed: the reference adapter's, and the resolved target's where there is one."""
    from chaos.adapter import load_adapter

    types: set[type] = {type(load_adapter("chaos:reference_adapter"))}
    try:
        from chaos.core.target import Target
    except ImportError:  # before the target was resolved once, only the adapter travelled
        pass
    else:
        types.add(Target)
    return types


def trip(events: list[list]) -> list[list]:
    """The trip ``events`` make, each distinct call (the module calling, the function called) kept
    where it first happened: a loop over fifty families is one step of the trip, not fifty."""
    seen: set[tuple[str, str, str]] = set()
    first = []
    for event in sorted(events, key=lambda e: e[0]):
        key = (event[4], event[2], event[3])
        if key not in seen:
            seen.add(key)
            first.append(event)
    return first


def figures(events: list[list]) -> dict[str, object]:
    """Stays, climbs and returns of the trip ``events`` (as :func:`trace` writes them) describe."""
    events = sorted(events, key=lambda e: e[0])
    modules = [e[2] for e in events]
    stays: list[str] = []
    for module in modules:
        if not stays or stays[-1] != module:
            stays.append(module)
    returns = sum(1 for i, module in enumerate(stays) if module in stays[:i])
    climbs = [f"{by} -> {module}.{function}" for _, _, module, function, by in events
              if by and by != module and layer(by) < layer(module)]
    entered: dict[str, int] = {}
    for module in stays:
        entered[module] = entered.get(module, 0) + 1
    return {"calls": len(events), "stays": len(stays), "climbs": len(climbs), "returns": returns,
            "climbed": climbs, "entered": dict(sorted(entered.items(), key=lambda kv: -kv[1])), "sequence": stays}


if __name__ == "__main__":
    path = sys.argv[1]
    if os.path.exists(path):
        os.remove(path)
    trace(path, families=["clean"], sample=2)
    with open(path) as f:
        events = [json.loads(line) for line in f]
    print(json.dumps({"trip": figures(trip(events)), "every_call": figures(events)}, indent=1))
