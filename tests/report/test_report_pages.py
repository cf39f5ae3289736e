"""The report's pages: an index and a page per source file, linked both ways, with the keys of
coverage.py's HTML report (checked in headless Chromium), files named as a reader wants them,
and a file's figures counting the failures that name a line of it (under a sample, the points
killed are often all in the engine)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from browser import chromium as _chromium, run_chromium as _run_chromium
from chaos.report.html import summarize, write_html

import engine

BASE = {"plan": "p", "lesson": "L.", "mode": "fork", "seed": 0, "exit": "killed", "group": "g", "source": "", "failures": [],
        "wasted": 0, "seconds": 0.01, "replay": "r", "kind": "point", "hit": 1, "function": "f"}


def _project(tmp_path):
    a, b = tmp_path / "steps.py", tmp_path / "other.py"
    a.write_text("".join(f"x{n} = {n}\n" for n in range(1, 41)))
    b.write_text("def g():\n    c = 3\n")
    records = [
        {**BASE, "nodeid": "p::1", "point": "steps:L5#1", "file": str(a), "line": 5, "held": False,
         "violations": [["drains", "job 'a' is stuck"]], "executable": {str(a): list(range(1, 41)), str(b): [2]}},
        {**BASE, "nodeid": "p::2", "point": "steps:L6#1", "file": str(a), "line": 6, "held": True, "violations": []},
        {**BASE, "nodeid": "p::3", "point": "steps:L30#1", "file": str(a), "line": 30, "held": False,
         "violations": [["drains", "job 'b' is stuck"]]},
        {**BASE, "nodeid": "p::4", "point": "other:L2#1", "file": str(b), "line": 2, "held": True, "violations": []},
    ]
    # Every line of steps.py but 5, 6 and 30 had no point killed: marked as missed too.
    return summarize(records, rootdir=str(tmp_path))


def test_the_report_is_an_index_and_a_page_per_file_linked_both_ways(tmp_path):
    report = tmp_path / "out" / "crash-report.html"
    write_html(str(report), _project(tmp_path))
    folder = tmp_path / "out" / "crash-report_files"
    index = report.read_text()
    pages = re.findall(r'<td><a href="crash-report_files/([^"#]+)">([^<]+)</a>', index)
    assert [name for _, name in pages] == ["steps.py", "other.py"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(page for page, _ in pages)
    for n, (page, name) in enumerate(pages):
        text = (folder / page).read_text()
        assert '<a id="to-index" href="../crash-report.html">' in text and f'<h1 class="file">{name}</h1>' in text
        assert ('id="prev-file"' in text) == (n > 0) and ('id="next-file"' in text) == (n + 1 < len(pages))
    steps = (folder / pages[0][0]).read_text()
    assert f'<a id="next-file" href="{pages[1][0]}">' in steps
    assert 'class="code"' not in index  # the source is on the files' pages only
    # A later report of fewer files leaves no page of the earlier one behind.
    write_html(str(report), summarize([], rootdir=str(tmp_path)))
    assert not list(folder.glob("*.html"))


KEYS_PROBE = """<script>
// Presses keys as a reader would (keydown events on the document, as the browser sends them),
// then writes where each press left the current line into the DOM.
function press(key) { document.dispatchEvent(new KeyboardEvent('keydown', {key: key, bubbles: true, cancelable: true})); }
function current() { var row = document.querySelector('table.code tr.current'); return row ? row.id : 'none'; }
var seen = [current()];
press('j'); seen.push(current());
press('j'); seen.push(current());
press('n'); seen.push(current());
press('k'); seen.push(current());
var keys = document.getElementById('keys'); var before = keys.hidden; press('?');
seen.push(String(before) + '/' + String(keys.hidden));
document.body.setAttribute('data-probe', seen.join(';'));
</script>"""


def test_j_and_k_move_to_the_next_and_previous_marked_line_and_question_mark_shows_the_keys_in_headless_chromium(tmp_path):
    binary = _chromium()
    report = tmp_path / "report.html"
    write_html(str(report), _project(tmp_path))
    page = tmp_path / "report_files" / "steps_py.html"
    page.write_text(page.read_text().replace("</body>", KEYS_PROBE + "</body>"))
    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    seen = re.search(r'data-probe="([^"]*)"', dom).group(1).split(";")
    # Line 1 to 4 are missed (no point), 5 violated, 6 held (not marked), 7 missed...
    assert seen[:5] == ["none", "L1", "L2", "L3", "L2"], seen
    assert seen[5] == "true/false"  # the help, hidden, shown by ?


def test_the_index_key_goes_to_the_first_file_page(tmp_path):
    """``]`` on the index follows its link to the first file; ``u`` on a page, to the index."""
    report = tmp_path / "report.html"
    write_html(str(report), _project(tmp_path))
    index = report.read_text()
    assert re.search(r'<a id="next-file" href="report_files/steps_py\.html"', index)
    assert "case ']': follow('next-file')" in index and "case 'u': case 'i': follow('to-index')" in index


def test_engine_files_are_named_from_their_package_not_by_an_absolute_path(tmp_path):
    worker = os.path.join(os.path.dirname(os.path.abspath(engine.__file__)), "_worker.py")
    records = [{**BASE, "nodeid": "p::1", "point": "w:L10#1", "file": worker, "line": 10, "held": True, "violations": [],
                "executable": {worker: [10]}}]
    report = tmp_path / "report.html"
    write_html(str(report), summarize(records, rootdir=str(tmp_path / "project")))  # the engine lies outside the run's folder
    index = report.read_text()
    assert re.search(r'<td><a href="report_files/engine_worker_py\.html">engine/_worker\.py</a>', index), index[-2000:]
    assert os.path.dirname(worker) not in index
    assert '<h1 class="file">engine/_worker.py</h1>' in (tmp_path / "report_files" / "engine_worker_py.html").read_text()


def test_under_a_sample_a_users_file_counts_the_failures_that_name_its_lines(tmp_path):
    """A sample of 12 points killed the worker only in the engine; each recovery raised in the
    user's file, which said "0 points, 0.0%" beside the finding that names it."""
    project = tmp_path / "project"
    (project / "orders").mkdir(parents=True)
    users = project / "orders" / "unsafe.py"
    users.write_text("def charge(ctx):\n    order = ORDERS[ctx.job_id]\n    return order\n")
    worker = os.path.join(os.path.dirname(os.path.abspath(engine.__file__)), "_worker.py")
    raised = "job 'doc-1' ended 'failed_charge' (last_error: \"charge: KeyError: 'doc-1'\", raised from orders/unsafe.py:2) after the fault"
    records = [{**BASE, "nodeid": f"t::clean::p{n}", "point": f"w:L{n}#1", "file": worker, "line": n, "held": False,
                "violations": [["same-outcome", raised]], "executable": {worker: [10, 11], str(users): [2, 3]}} for n in (10, 11)]
    report = project / "report.html"
    write_html(str(report), summarize(records, rootdir=str(project)))
    index = report.read_text()
    row = re.search(r'<tr class="(\w+) mine" data-file="orders/unsafe\.py"[^>]*data-named="(\d+)"', index)
    assert row and row.groups() == ("bad", "2"), index
    page = (project / "report_files" / "orders_unsafe_py.html").read_text()
    assert "0 points, 0 violated; 2 failures naming a line of it" in page
    assert re.search(r'<tr class="culprit" id="L2">', page)


SAMPLED_GATE = '''
import pytest

@pytest.mark.crash_matrix(families=["clean"])
def test_gate(crash_matrix):
    crash_matrix()
'''


def _sampled_run(pytester, monkeypatch, *args):
    from chaos.plugin import OPTIONS

    for option in OPTIONS:
        monkeypatch.delenv(option.env, raising=False)
    plans = pytester.path / "fault_plans"
    plans.mkdir(exist_ok=True)
    shipped = Path(__file__).resolve().parents[2] / "fault_plans" / "outbox_crash.toml"
    (plans / "outbox_crash.toml").write_text(shipped.read_text())
    pytester.makepyfile(test_gate=SAMPLED_GATE)
    return pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *args)


def test_a_sampled_run_says_on_the_index_how_many_points_of_how_many_ran(pytester, monkeypatch):
    """Under --chaos-points N a line without points may only not have been drawn: the index said
    nothing of the sample, and a reader took the coverage for the code's."""
    collected = _sampled_run(pytester, monkeypatch, "--collect-only", "-q", "fault_plans")
    every = len([line for line in collected.stdout.lines if line.startswith("fault_plans/outbox_crash.toml::") and "::baseline" not in line])
    result = _sampled_run(pytester, monkeypatch, "--chaos-points", "3", "--chaos-report", "out/report.html")
    index = (pytester.path / "out" / "report.html").read_text()
    sample = re.search(r'<p class="sample" id="sample">A sample: <strong>(\d+) of ([\d,]+) points</strong>.*?</p>', index)
    assert sample, result.stdout.str()[-3000:]
    text = sample.group(0)
    assert f"3 of {every:,} in <code>fault_plans/outbox_crash.toml</code>" in text, (every, text)
    matrix = re.search(r"3 of ([\d,]+) in <code>test_gate\.py::test_gate</code>", text)
    assert matrix and int(matrix.group(1).replace(",", "")) > 3, text
    assert int(sample.group(1)) == 6 and int(sample.group(2).replace(",", "")) == every + int(matrix.group(1).replace(",", ""))
    assert index.index('id="sample"') < index.index('class="cards"')  # said before the figures it qualifies

    whole = _sampled_run(pytester, monkeypatch, "--chaos-report", "out/whole.html", "fault_plans")
    assert whole.ret == 0, whole.stdout.str()[-2000:]
    assert 'id="sample"' not in (pytester.path / "out" / "whole.html").read_text()  # every point ran: no word of a sample
