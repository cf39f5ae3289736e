"""Helpers for the plugin's end-to-end tests: a throwaway pytest project, plans and planted bugs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from chaos.plugin import OPTIONS

REPO = Path(__file__).resolve().parents[2]
SHIPPED_PLANS = REPO / "fault_plans"

# Planted bugs the plan checks must catch, importable in a pytester project as ``planted:...``.
PLANTED = '''
import random
from chaos import ReferenceAdapter
from engine import Worker


class _Fixed(random.Random):
    def uniform(self, a, b):  # BUG: every retry waits the longest delay: no jitter at all
        return b


class _NoJitterWorker(Worker):
    def _failed(self, claim, step, exc):
        rng, self.rng = self.rng, _Fixed()
        try:
            return super()._failed(claim, step, exc)
        finally:
            self.rng = rng


class NoJitter(ReferenceAdapter):
    def make_worker(self, store, workflow, **kw):
        return _NoJitterWorker(store, workflow, lease_s=self.lease_s, threaded=False, **kw)


class _ImpatientWorker(Worker):
    def _failed(self, claim, step, exc):
        exc.retry_after_s = None  # BUG: the provider's Retry-After is ignored
        return super()._failed(claim, step, exc)


class IgnoreRetryAfter(ReferenceAdapter):
    def make_worker(self, store, workflow, **kw):
        return _ImpatientWorker(store, workflow, lease_s=self.lease_s, threaded=False, **kw)
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project with no crashgate setting leaking in from the environment."""
    for option in OPTIONS:
        monkeypatch.delenv(option.env, raising=False)
    pytester.makepyfile(planted=PLANTED)
    pytester.syspathinsert()
    return pytester


@pytest.fixture
def example(project: pytest.Pytester) -> pytest.Pytester:
    """The example user project (examples/: the invoice workflow, its tests and fault plans) in a pytester project."""
    for name in ("invoices", "tests", "fault_plans", "pyproject.toml"):
        source = REPO / "examples" / name
        if source.is_dir():
            shutil.copytree(source, project.path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, project.path / name)
    return project


def unsafe_line() -> int:
    """The line of examples/invoices/unsafe.py that sends the email from inside the step (the planted bug)."""
    with open(REPO / "examples" / "invoices" / "unsafe.py") as f:
        return next(n for n, line in enumerate(f, 1) if "UNSAFE: sent before the step commits" in line)


def add_plan(pytester: pytest.Pytester, name: str, text: str | None = None) -> Path:
    """Write ``fault_plans/<name>.toml``: ``text``, or the shipped plan of that name."""
    directory = pytester.path / "fault_plans"
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.toml"
    if text is None:
        shutil.copyfile(SHIPPED_PLANS / f"{name}.toml", path)
    else:
        path.write_text(text)
    return path


def collected_ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and not line.startswith(("=", " "))]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_") or k == "CRASHGATE_WORKDIR"}
    env.pop("PYTEST_ADDOPTS", None)
    return env
