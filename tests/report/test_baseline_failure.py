"""A workflow that fails without any fault: the report leads with the cause and marks one line.

Method: a user's project of its own (a two-step workflow whose ``charge`` step reads a key that
``fetch`` never wrote) gated by the crash_matrix fixture, run by pytest with ``--chaos-report``;
the report's pages are rendered by headless Chromium and their screenshots read pixel by pixel:
the culprit's colour marks exactly one line's band in the source, the banner with the cause is
at the top of the index, and no line is marked as violated.
"""

from __future__ import annotations

import colorsys
import os
import re
import shutil
from pathlib import Path

from browser import chromium as _chromium, run_chromium as _run_chromium
from chaos.plugin import OPTIONS

from .png import bands, read_png, rows_with

WORKFLOW = '''
"""A tiny workflow whose charge step fails on every run."""
import os
from typing import Any

from chaos import ReferenceAdapter
from engine import Step, StepOutput, Workflow


def build(payments: Any, orders: Any) -> Workflow:
    def fetch(ctx: Any) -> StepOutput:
        return StepOutput({"order": orders.fetch(ctx, ctx.payload["order"])[:40]})

    def charge(ctx: Any) -> StepOutput:
        amount = ctx.inputs["fetch"]["amount"]  # BUG: fetch never wrote an amount
        reply = payments.complete(ctx, "charge", str(amount))
        return StepOutput({"charged": len(reply.text)}, cost_usd=reply.cost_usd)

    return Workflow("shop", [Step("fetch", fetch), Step("charge", charge)])


class ShopAdapter(ReferenceAdapter):
    name = "shop"

    def workflow(self, world: Any) -> Any:
        return build(world.model, world.documents)

    def payload(self, job_id: str) -> dict:
        return {"order": job_id}

    def trace_paths(self) -> list:
        return super().trace_paths() + [os.path.dirname(os.path.abspath(__file__))]
'''
CULPRIT_LINE = 14  # the line of WORKFLOW (in shop/flow.py) that raises KeyError: 'amount'
GATE = '''
import pytest

@pytest.mark.crash_matrix(target="shop.flow:ShopAdapter", families=["clean", "cancel-race"])
def test_the_shop_survives_a_crash_anywhere(crash_matrix):
    crash_matrix()
'''


def _colour(name: str) -> tuple[int, int, int]:
    """A colour of the report's style sheet (``--culprit-bg``), as RGB."""
    from chaos.report.assets import CSS

    value = re.search(rf"--{name}:#([0-9a-f]{{6}})", CSS).group(1)
    return tuple(int(value[i:i + 2], 16) for i in (0, 2, 4))


CULPRIT_RGB = _colour("culprit-bg")
BANNER_RGB = _colour("bad-bar")  # the banner's border
WINDOW = (1280, 1000)


def _report(pytester, monkeypatch, gate: str = GATE) -> Path:
    for option in OPTIONS:
        monkeypatch.delenv(option.env, raising=False)
    (pytester.path / "shop").mkdir()
    (pytester.path / "shop" / "__init__.py").write_text("")
    (pytester.path / "shop" / "flow.py").write_text(WORKFLOW.lstrip("\n"))
    assert "BUG" in (pytester.path / "shop" / "flow.py").read_text().splitlines()[CULPRIT_LINE - 1]
    pytester.makepyfile(test_gate=gate)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "--chaos-report", "out/report.html")
    out = result.stdout.str()
    # The terminal names the line too: the family's run without any fault noted where the user's code raised.
    assert f"last_error: \"charge: KeyError: 'amount'\", raised from shop/flow.py:{CULPRIT_LINE})" in out, out
    return pytester.path / "out" / "report.html"


def _shot(binary: str, profile: Path, page: Path, shot: Path) -> list[bytes]:
    _run_chromium(binary, profile, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars", page.as_uri())
    width, _, rows = read_png(shot)
    assert width == WINDOW[0]
    keep = os.environ.get("CRASHGATE_SCREENSHOT_DIR")
    if keep:
        shutil.copyfile(shot, Path(keep) / shot.name)
    return rows


def test_a_baseline_failure_leads_with_its_cause_and_marks_only_the_users_line(pytester, monkeypatch, tmp_path):
    binary = _chromium()
    report = _report(pytester, monkeypatch)
    page = report.parent / "report_files" / "shop_flow_py.html"
    index_dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", report.as_uri()).stdout

    # The index: the cause first, before the counts, naming the invariant, the message, the line and the fix.
    body = index_dom[index_dom.index("<body>"):]
    assert body.index('id="cause"') < body.index('class="cards"') < body.index('id="violations"')
    cause = body[body.index('id="cause"'):].split("</section>", 1)[0]
    assert "The workflow fails without any fault" in cause and "<b>baseline</b>" in cause
    assert "KeyError: &#x27;amount&#x27;" in cause or "KeyError: 'amount'" in cause
    assert re.search(rf'<a id="cause-line" href="report_files/shop_flow_py\.html#L{CULPRIT_LINE}">shop/flow\.py:{CULPRIT_LINE}</a>', cause)
    assert "fix: the workflow fails without any fault" in cause

    rows = _shot(binary, tmp_path / "profile", report, tmp_path / "baseline-index.png")
    border = rows_with(rows, BANNER_RGB, WINDOW[0] // 2)  # the banner's top and bottom borders span the page
    assert border and border[0] < 120, f"the banner is not at the top of the index: its border at y={border[:1]}"

    # The file's page: one line marked, in the culprit's colour, the one that raised; nothing red.
    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    assert re.findall(r'<tr class="culprit" id="L(\d+)"', dom) == [str(CULPRIT_LINE)]
    assert '<tr class="violated"' not in dom
    # ... nor on any page: the 50 points of another family that fail the same way (the job ends
    # 'failed_charge', raised from the same line) are the same cause, not 50 more marks.
    pages = sorted((report.parent / "report_files").glob("*.html"))
    assert len(pages) > 3 and all("<tr class=\"violated\"" not in p.read_text() for p in pages)
    assert any('<tr class="symptom"' in p.read_text() for p in pages)
    rows = _shot(binary, tmp_path / "profile", page, tmp_path / "baseline-page.png")
    border = rows_with(rows, BANNER_RGB, WINDOW[0] // 2)
    assert border and border[0] < 200, "the file's page repeats the cause at its top"
    source = border[-1] + 1  # the source view: below the banner (whose quoted line wears the culprit's colour too)
    marked = bands([source + y for y in rows_with(rows[source:], CULPRIT_RGB, WINDOW[0] // 2)])  # a whole row of the table
    assert len(marked) == 1, f"the culprit's colour marks {len(marked)} bands of rows in the source view, not one line: {marked}"
    first, last = marked[0]
    assert 12 <= last - first + 1 <= 30, f"the marked band is {last - first + 1} px high, not one line"


def test_the_culprits_colour_is_not_the_amber_of_a_line_no_point_killed():
    """They were both amber: a reader took the culprit for a line the matrix missed."""
    from chaos.report.assets import LEGEND

    hue = {name: colorsys.rgb_to_hsv(*(c / 255 for c in _colour(name)))[0] for name in ("culprit-bg", "miss-bg", "bad-bg", "held-bg")}
    for other in ("miss-bg", "bad-bg", "held-bg"):
        distance = abs(hue["culprit-bg"] - hue[other])
        assert min(distance, 1 - distance) > 0.15, (other, hue)
    assert '<span class="sw culprit"></span> the culprit' in LEGEND


def test_a_family_whose_job_fails_while_it_is_prepared_names_the_users_line_in_its_banner(pytester, monkeypatch):
    """The sender family runs the job through every step in its setup, before the iteration it
    records (the sender's): the step raised there, where no raise was noted, and the banner named
    no line. The setup's raises are noted as the recorded run's are."""
    report = _report(pytester, monkeypatch, GATE.replace('families=["clean", "cancel-race"]', 'families=["sender"]'))
    index = report.read_text()
    cause = index[index.index('id="cause"'):].split("</section>", 1)[0]
    assert "family" in cause and "failed_charge" in cause, cause
    assert re.search(rf'<a id="cause-line" href="report_files/shop_flow_py\.html#L{CULPRIT_LINE}">shop/flow\.py:{CULPRIT_LINE}</a>', cause), cause
