"""The report card (docs/explanation/report-card.md) agrees with the survey's registry
(:data:`chaos.survey.ENGINES`): each row's library is a registry engine whose installed
distribution has the row's version, its "what is lost or done twice" names known behaviours of
that engine (their ``summary``), its "documented" cell says yes only for a documented behaviour
and links the page read for it, and every known behaviour of the registry has a row (an engine
with none recorded yet is listed below the table). So neither the page nor the registry can change
without the other."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from chaos.survey import ENGINES, SurveyedEngine

CARD = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "report-card.md"
HEADER = ["library", "version", "what is lost or done twice", "under which fault", "documented", "how to avoid it with that library"]


def rows(text: str) -> list[list[str]]:
    """The cells of each row of the card's table (the first table whose header is HEADER)."""
    lines = text.splitlines()
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None for line in lines]
    start = next((i for i, c in enumerate(cells) if c == HEADER), None)
    if start is None:
        raise AssertionError(f"no table with the header {HEADER} in the card")
    out = []
    for row in cells[start + 2:]:  # past the header and its separator
        if row is None:
            break
        out.append(row)
    return out


def drift(text: str, engines: dict[str, SurveyedEngine] = ENGINES) -> list[str]:
    """Every way the card's rows disagree with the registry ``engines``, one line each."""
    problems: list[str] = []
    named: dict[str, set[str]] = {}  # engine -> the summaries its rows name
    for library, version, what, _, documented, _ in rows(text):
        engine = engines.get(library)
        if engine is None:
            problems.append(f"row {library!r}: no engine of that name in chaos.survey.ENGINES")
            continue
        try:
            installed = importlib.metadata.version(engine.distribution)
        except importlib.metadata.PackageNotFoundError:
            installed = "not installed"
        if version.split()[0] != installed:
            problems.append(f"row {library!r}: version {version.split()[0]!r}, but {engine.distribution} {installed} is installed")
        # One check per summary: several behaviours (a finding under other faults) may share one row.
        known = list({b.summary: b for b in reversed(engine.behaviours) if b.summary and b.summary in what}.values())[::-1]
        if not known:
            problems.append(f"row {library!r}: names no known behaviour of the engine: {what!r}")
        for b in known:
            named.setdefault(library, set()).add(b.summary)
            if documented.startswith("yes") != bool(b.documented):
                problems.append(f"row {library!r}: documented {documented.split(':')[0]!r} for {b.summary!r}, "
                                f"whose registry entry says {'yes' if b.documented else 'no'}")
            if (b.documented or b.read) not in documented:
                problems.append(f"row {library!r}: the documented cell does not link {b.documented or b.read} for {b.summary!r}")
    for engine in engines.values():
        for summary in dict.fromkeys(b.summary for b in engine.behaviours):  # once each, in the registry's order
            if summary not in named.get(engine.name, set()):
                problems.append(f"engine {engine.name!r}: its known behaviour {summary!r} has no row on the card")
    return problems


def test_the_cards_rows_agree_with_the_survey_registry():
    assert drift(CARD.read_text()) == []


def test_every_known_behaviour_has_the_summary_a_card_row_names():
    assert [(e.name, b.invariant, b.cause) for e in ENGINES.values() for b in e.behaviours if not b.summary] == []


def test_a_card_that_drifted_from_the_registry_is_caught():
    """A planted card: a library the registry does not know, a version that is not installed, a
    row naming no known behaviour, a 'yes' for an undocumented one, and a known behaviour left out."""
    lq, pq = ENGINES["litequeue"], ENGINES["persist-queue"]
    lq_version = importlib.metadata.version(lq.distribution)
    planted = "\n".join([
        "| " + " | ".join(HEADER) + " |",
        "| --- | --- | --- | --- | --- | --- |",
        "| celery | 5.4 | a task is lost | a kill | no | ack late |",
        f"| litequeue | 0.0.1 | {lq.behaviours[0].summary} | a kill | yes: [README]({lq.behaviours[0].read}) | a lease |",
        f"| litequeue | {lq_version} | something else entirely | a kill | no: [README]({lq.behaviours[0].read}) | a lease |",
        f"| persist-queue | {importlib.metadata.version(pq.distribution)} | {pq.behaviours[0].summary} | a pause | no: the README | auto_resume=False |",
        "",
        "after the table",
    ])
    problems = drift(planted, {"litequeue": lq, "persist-queue": pq})
    assert problems == [
        "row 'celery': no engine of that name in chaos.survey.ENGINES",
        f"row 'litequeue': version '0.0.1', but litequeue {lq_version} is installed",
        f"row 'litequeue': documented 'yes' for {lq.behaviours[0].summary!r}, whose registry entry says no",
        "row 'litequeue': names no known behaviour of the engine: 'something else entirely'",
        f"row 'persist-queue': the documented cell does not link {pq.behaviours[0].read} for {pq.behaviours[0].summary!r}",
        *(f"engine 'persist-queue': its known behaviour {summary!r} has no row on the card"
          for summary in dict.fromkeys(b.summary for b in pq.behaviours[1:]) if summary != pq.behaviours[0].summary),
    ], problems
