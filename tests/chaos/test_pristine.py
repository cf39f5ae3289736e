"""The pristine process that forks a run's scenarios for a test process: what it answers, when it
starts afresh, and what is refused rather than forked from a process that ran jobs."""

from __future__ import annotations

import os

import pytest

from chaos.core import pristine


def _pid() -> int:
    return os.getpid()


def _env(name: str) -> str | None:
    return os.environ.get(name)


def _fail(message: str) -> None:
    raise ValueError(message)


def _refuse_to_load() -> None:
    raise ImportError("this object loads nowhere")


class _Unloadable:
    """Pickles, but cannot be loaded: as a class of a module the other process cannot import."""

    def __reduce__(self):
        return _refuse_to_load, ()


def test_a_call_runs_in_another_process_and_what_it_raises_is_raised_here():
    assert pristine.call(_pid) != os.getpid()
    with pytest.raises(ValueError, match="^bad input$"):
        pristine.call(_fail, "bad input")


def test_the_same_server_answers_until_the_environment_changes(monkeypatch):
    first = pristine.call(_pid)
    assert pristine.call(_pid) == first
    monkeypatch.setenv("CRASHGATE_TEST_PRISTINE", "another value")  # a test's environment: the scenarios must see it
    assert pristine.call(_pid) != first
    assert pristine.call(_env, "CRASHGATE_TEST_PRISTINE") == "another value"


def test_a_call_the_server_cannot_load_is_an_error_and_the_server_goes_on():
    before = pristine.call(_pid)
    with pytest.raises(RuntimeError, match="could not load the call: ImportError: this object loads nowhere"):
        pristine.call(print, _Unloadable())
    assert pristine.call(_pid) == before


def test_a_matrix_whose_adapter_cannot_be_pickled_is_refused_in_a_process_that_ran_jobs(monkeypatch):
    from chaos import ReferenceAdapter, run_matrix
    from chaos.matrix.runner import MatrixUsageError

    monkeypatch.setattr(pristine, "_taint", "the in-process sandbox")  # as a chaos_world test leaves it
    closure = type("Closure", (ReferenceAdapter,), {})()  # a class made at run time: pickle cannot name it
    with pytest.raises(MatrixUsageError, match=r"cannot be pickled.*ran jobs \(the in-process sandbox\); name the adapter by its "
                                               r"'module:attribute'"):
        run_matrix(closure, families=["clean"], faults=["crash"])


def test_a_process_that_ran_the_sandbox_is_marked(tmp_path):
    from chaos import Sandbox, reference_adapter

    Sandbox(reference_adapter(), str(tmp_path)).close()
    assert "sandbox" in pristine.tainted()
    assert not pristine.is_pristine()
