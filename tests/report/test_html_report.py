"""The HTML crash report: self-contained, everything escaped, every line coloured by outcome across
every fault kind, pauses and the faults of the machine counted beside crashes (each of the latter
with where it showed), and rendered by a real headless Chromium showing the same counts as the
terminal summary."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from browser import chromium as _chromium, run_chromium as _run_chromium
from chaos.report.html import render_html, render_pages, summarize, terminal_lines

HOSTILE = "<script>alert('x')</script>"


def _page(summary, name: str = "code_py.html") -> str:
    """The source page of a file (by its page's name: the file's path with _ for . and /)."""
    pages = render_pages(summary)[1]
    return next(page for key, page in pages.items() if key.endswith(name))


def _records(source: Path) -> list[dict]:
    base = {"plan": f"fault_plans/{HOSTILE}.toml", "lesson": f"lesson {HOSTILE}", "mode": "fork", "seed": 0, "function": "f", "exit": "killed"}
    return [
        {**base, "kind": "point", "nodeid": "p::g::held", "group": "g", "point": "m.f:L2#1", "file": str(source), "line": 2, "hit": 1,
         "source": "", "held": True, "violations": [], "failures": [], "wasted": 1, "seconds": 0.01, "replay": "python -m pytest p::g::held",
         "executable": {str(source): [2, 3, 4]}},
        {**base, "kind": "point", "nodeid": f"p::g::{HOSTILE}", "group": "g", "point": "m.f:L3#1", "file": str(source), "line": 3, "hit": 1,
         "source": "", "held": False, "violations": [["outbox-at-least-once", f"effect {HOSTILE} arrived"]], "failures": [],
         "wasted": 0, "seconds": 0.02, "replay": f"python -m pytest '{HOSTILE}'"},
        {**base, "kind": "scenario", "nodeid": "p::s", "name": "s", "held": False, "violations": [], "failures": [f"expected {HOSTILE}"],
         "wasted": 0, "seconds": 0.1, "replay": "r"},
    ]


def test_the_report_escapes_everything_and_loads_nothing_from_elsewhere(tmp_path):
    source = tmp_path / "code.py"
    source.write_text(f"def f():\n    x = '{HOSTILE}'\n    return x  # <b>bold</b>\n    pass\n")
    index, pages = render_pages(summarize(_records(source)))
    assert len(pages) == 1
    for page in (index, *pages.values()):
        assert "<script>alert" not in page
        assert page.count("<script>") == 1  # the report's own few lines
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    page = next(iter(pages.values()))
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page


def test_each_line_is_coloured_by_its_outcome_and_its_points_are_one_click_away(tmp_path):
    source = tmp_path / "code.py"
    source.write_text("def f():\n    a = 1\n    b = 2\n    return a + b\n")
    summary = summarize(_records(source))
    page, index = _page(summary), render_html(summary)
    rows = dict(re.findall(r'<tr class="(\w+)" id="L(\d)"', page)[i][::-1] for i in range(4))
    assert rows == {"1": "plain", "2": "held", "3": "violated", "4": "missed"}
    violated_row = page[page.index('id="L3"') :].split("</tr>", 1)[0]
    assert "<details><summary>" in violated_row
    assert "outbox-at-least-once" in violated_row
    assert "Protects against the three outbox mistakes" in violated_row
    assert "python -m pytest &#x27;&lt;script&gt;" in violated_row
    assert re.search(r'id="count-points">2<', index) and re.search(r'id="count-violated">1<', index)
    assert re.search(r'id="count-coverage">66.7%<', index)  # lines 2 and 3 of the 3 executable ones


def test_each_fault_kind_is_counted_beside_the_crashes_and_a_line_is_coloured_across_all_of_them(tmp_path):
    source = tmp_path / "code.py"
    source.write_text("def f():\n    a = 1\n    b = 2\n    return a + b\n")
    records = _records(source)
    paused = {**records[0], "fault": "pause-expired", "nodeid": "p::g::m.f:L2#1@pause-expired", "exit": "paused", "zombie": 1,
              "blocked_s": 0.0512, "held": False, "violations": [["fenced-writes", "a write after the takeover"]]}
    live = {**records[0], "fault": "pause-live", "nodeid": "p::g::m.f:L2#1@pause-live", "exit": "paused", "zombie": 0, "blocked_s": 0.0}
    summary = summarize(records + [paused, live])
    lines = terminal_lines(summary)
    assert lines[:3] == [
        "2 crash points: 1 held, 1 violated; 1 wasted calls (fork mode, seed 0)",
        "1 pause-live scenarios: 1 held, 0 violated; 1 wasted calls (0 without a valid lease); other worker blocked 0.000s",
        "1 pause-expired scenarios: 0 held, 1 violated; 1 wasted calls (1 without a valid lease); other worker blocked 0.051s",
    ]
    page = render_html(summary)
    for cell, value in (("pause-expired-scenarios", "1"), ("pause-expired-violated", "1"), ("pause-live-held", "1"),
                        ("pause-expired-blocked", "0.051s"), ("crash-scenarios", "2"), ("crash-blocked", "&ndash;")):
        assert re.search(rf'id="fault-{cell}">{value}<', page), cell
    assert re.search(r'id="count-points">4<', page) and re.search(r'id="count-violated">2<', page)  # totals over every kind
    page = _page(summary)
    row = page[page.index('id="L2"') :].split("</tr>", 1)[0]
    assert '<tr class="violated" id="L2"' in page  # a pause broke at a line where every crash held
    assert 'title="crash 1, pause-live 1, pause-expired 1"' in row
    assert '<span class="fault pause-expired">pause-expired</span>' in row and "other worker blocked 0.051s" in row
    assert "while another takes over its expired lease" in row and "1 paid call without a valid lease" in row


def _run_with_report(pytester, monkeypatch, plans, project):
    """Run pytest in a project with these shipped plans and this test module, writing the report
    to out/report.html; no CRASHGATE_* setting of the caller's leaks in."""
    for name in ("CRASHGATE_TARGET", "CRASHGATE_MODE", "CRASHGATE_SEED", "CRASHGATE_POINTS", "CRASHGATE_REPORT", "CRASHGATE_FAULTS",
                 "CRASHGATE_PAIRS"):
        monkeypatch.delenv(name, raising=False)
    directory = pytester.path / "fault_plans"
    directory.mkdir()
    repo = Path(__file__).resolve().parents[2]
    for name in plans:
        shutil.copyfile(repo / "fault_plans" / f"{name}.toml", directory / f"{name}.toml")
    pytester.makepyfile(test_gate=project)
    return pytester.runpytest("--chaos-report", "out/report.html")


REPORT_PROJECT = '''
import pytest

@pytest.mark.crash_matrix(target="quality.variants:MarkBeforeSend", families=["sender"], faults=["crash", "pause"])
def test_a_sender_that_marks_before_sending(crash_matrix):
    crash_matrix()
'''


def test_the_report_renders_in_headless_chromium_with_the_counts_of_the_summary(pytester, monkeypatch, tmp_path):
    binary = _chromium()
    result = _run_with_report(pytester, monkeypatch, ("outbox_crash", "double_submit"), REPORT_PROJECT)
    kinds = {}  # fault kind -> (points, held, violated, wasted), one summary line each
    for line in result.outlines:
        m = re.match(r"(\d+) (crash points|pause-live scenarios|pause-expired scenarios): (\d+) held, (\d+) violated; (\d+) wasted", line)
        if m:
            kinds[m.group(2).split()[0]] = tuple(map(int, m.group(1, 3, 4, 5)))
    assert list(kinds) == ["crash", "pause-live", "pause-expired"]
    points, held, violated, wasted = (sum(k[i] for k in kinds.values()) for i in range(4))
    assert violated > 0 and held > 0
    report = pytester.path / "out" / "report.html"
    assert f"crash report: {report}" in result.stdout.str()

    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", report.as_uri()).stdout
    for key, value in (("points", points), ("held", held), ("violated", violated), ("wasted", wasted), ("scenarios", "2/2")):
        assert re.search(rf'id="count-{key}">{value}<', dom), key
    for kind, (n, n_held, n_violated, _) in kinds.items():  # the pauses are counted beside the crashes
        for key, value in (("scenarios", n), ("held", n_held), ("violated", n_violated)):
            assert re.search(rf'id="fault-{kind}-{key}">{value}<', dom), (kind, key)
    assert kinds["pause-live"][0] > 0
    # The planted bug's own file: its first violated line is the one after the early mark. (The
    # report's first file is the one with the most points, the engine's store, whose first
    # violated line depends on how the store's code is laid out.)
    planted = pytester.path / "out" / "report_files" / re.search(r'<a href="report_files/([^"]*quality_variants_py\.html)">', dom).group(1)
    first_bad = re.search(r'<tr class="violated" id="(L\d+)"', planted.read_text()).group(1)
    opened = _run_chromium(binary, tmp_path / "profile", "--dump-dom", f"{planted.as_uri()}#{first_bad}").stdout
    row = opened[opened.index(f'id="{first_bad}"') :].split("</tr>", 1)[0]
    assert "<details open" in row  # a link to a line opens its points
    assert "outbox-at-least-once" in row

    shot = tmp_path / "report.png"
    _run_chromium(binary, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,1600", report.as_uri())
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 1280
    assert len(png) > 50_000, "a blank page compresses to a few kilobytes"
    keep = os.environ.get("CRASHGATE_SCREENSHOT_DIR")
    if keep:
        shutil.copyfile(shot, Path(keep) / "crash-report.png")


def test_each_fault_of_the_machine_is_counted_with_where_it_showed_and_each_point_says_what_it_did(tmp_path):
    source = tmp_path / "code.py"
    source.write_text("def f():\n    a = 1\n    b = 2\n    return a + b\n")
    records = _records(source)
    machine = [
        {**records[0], "fault": "disk-full", "nodeid": "p::g::m.f:L2#1@disk-full", "exit": "faulted"},
        {**records[0], "fault": "disk-full", "nodeid": "p::g::m.f:L3#1@disk-full", "line": 3, "exit": "no-effect"},
        {**records[0], "fault": "lock-held", "nodeid": "p::g::m.f:L2#1@lock-held", "exit": "no-effect", "held": False,
         "violations": [["worker-survives", "the worker process survived but did not resume"]]},
    ]
    summary = summarize(records + machine)
    lines = terminal_lines(summary)
    assert lines[1:3] == [
        "2 disk-full scenarios: 2 held, 0 violated; 2 wasted calls; the fault showed at 1, no effect at 1",
        # The loop reported no error, yet its check failed: the fault showed (as a stall).
        "1 lock-held scenarios: 0 held, 1 violated; 1 wasted calls; the fault showed at 1, no effect at 0",
    ]
    page = render_html(summary)
    for cell, value in (("disk-full-scenarios", "2"), ("disk-full-held", "2"), ("disk-full-showed", "1 of 2"),
                        ("lock-held-violated", "1"), ("lock-held-showed", "1 of 1"), ("crash-showed", "&ndash;")):
        assert re.search(rf'id="fault-{cell}">{value}<', page), cell
    page = _page(summary)
    row = page[page.index('id="L2"') :].split("</tr>", 1)[0]
    assert 'title="crash 1, disk-full 1, lock-held 1"' in row
    assert '<span class="fault lock-held machine">lock-held</span>' in row
    assert "another process holds the write lock from the point on, past the busy timeout" in row
    assert "the worker died or stalled on it, and a check failed" in row and "Protects against a loop that dies" in row
    assert "the fault showed: the worker met it at this point" in row
    other = page[page.index('id="L3"') :].split("</tr>", 1)[0]
    assert "held (no-effect)" in other and "the fault had no effect here" in other


def test_the_report_knows_every_fault_of_the_machine_and_says_what_each_does():
    from chaos.hostfaults.faults import KIND_OF
    from chaos.plans.runner import ITEM_FAULTS
    from chaos.report.html import FAULT_MEANING, FAULT_ORDER, MACHINE_KIND_OF

    assert MACHINE_KIND_OF == KIND_OF
    assert FAULT_ORDER == ITEM_FAULTS
    assert all(FAULT_MEANING[kind] for kind in FAULT_ORDER)


MACHINE_PROJECT = '''
import pytest

@pytest.mark.crash_matrix(target="quality.machine_variants:DiesOnDiskError", families=["backlog"], faults=["disk"])
def test_a_loop_that_dies_on_a_full_disk(crash_matrix):
    crash_matrix()
'''


def test_a_report_with_faults_of_the_machine_renders_their_counts_and_outcomes_in_headless_chromium(pytester, monkeypatch, tmp_path):
    binary = _chromium()
    # The plans hold (every item green); the test gates a planted bug, a loop the full disk kills.
    result = _run_with_report(pytester, monkeypatch, ("disk_full", "held_lock"), MACHINE_PROJECT)
    kinds = {}  # sub-kind -> (scenarios, held, violated, showed), one summary line each
    for line in result.outlines:
        m = re.match(r"(\d+) (disk-full|lock-held) scenarios: (\d+) held, (\d+) violated; \d+ wasted calls; the fault showed at (\d+)", line)
        if m:
            kinds[m.group(2)] = tuple(map(int, m.group(1, 3, 4, 5)))
    assert list(kinds) == ["disk-full", "lock-held"], result.outlines
    assert kinds["disk-full"][1] > 0 and kinds["disk-full"][2] > 0  # the plan's points held, the planted bug's did not
    assert kinds["lock-held"][2] == 0 and kinds["lock-held"][3] > 0
    report = pytester.path / "out" / "report.html"

    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", report.as_uri()).stdout
    points = sum(k[0] for k in kinds.values())
    for key, value in (("points", points), ("violated", kinds["disk-full"][2])):
        assert re.search(rf'id="count-{key}">{value}<', dom), key
    for kind, (n, held, violated, showed) in kinds.items():
        for key, value in (("scenarios", n), ("held", held), ("violated", violated), ("showed", f"{showed} of {n}")):
            assert re.search(rf'id="fault-{kind}-{key}">{value}<', dom), (kind, key)
    assert "another process holds the write lock from the point on" in dom  # what each kind does, in its row
    assert re.search(r'id="count-coverage">\u2013<', dom)  # no point was killed or frozen: no crash coverage to show
    bad_page = next(p for p in sorted((report.parent / "report_files").glob("*.html")) if '<tr class="violated"' in p.read_text())
    first_bad = re.search(r'<tr class="violated" id="(L\d+)"', bad_page.read_text()).group(1)
    opened = _run_chromium(binary, tmp_path / "profile", "--dump-dom", f"{bad_page.as_uri()}#{first_bad}").stdout
    row = opened[opened.index(f'id="{first_bad}"') :].split("</tr>", 1)[0]
    assert "<details open" in row
    assert '<span class="fault disk-full machine">disk-full</span>' in row
    assert "worker-survives</b>: the worker process died: OperationalError: database or disk is full" in row
    assert "the worker died or stalled on it, and a check failed" in row
    assert re.search(r"python -m pytest \S*test_a_loop_that_dies_on_a_full_disk --chaos-points (?:'|&#x27;)?backlog::", row)  # pasteable
    assert re.search(r"python -m chaos matrix --target quality\.machine_variants:DiesOnDiskError .*--faults disk-full --point (?:'|&#x27;)?backlog::", row)


def test_violations_are_grouped_by_cause_and_the_users_line_is_marked(tmp_path):
    """The report groups as the command line does: one finding per invariant and cause, with its
    count; a failure without any fault first; the line a delivery was sent from marked."""
    source = tmp_path / "steps.py"
    source.write_text("def notify(ctx):\n    message = {}\n    send(message)\n    return message\n")
    base = {"plan": "t.py::test_gate", "lesson": "L.", "mode": "fork", "seed": 0, "function": "notify", "exit": "killed",
            "group": "clean", "source": "", "failures": [], "wasted": 0, "seconds": 0.01, "replay": "r", "kind": "point",
            "hit": 1, "executable": {str(source): [2, 3, 4]}, "file": str(source)}
    sent = f"arrived at the receiver without a committed outbox row (sent from {source.name}:3)"
    records = [
        {**base, "nodeid": "t::a", "point": "steps.notify:L2#1", "line": 2, "held": False,
         "violations": [["outbox-at-least-once", f"effect 'doc-1:email' {sent}"]]},
        {**base, "nodeid": "t::b", "point": "steps.notify:L4#1", "line": 4, "held": False,
         "violations": [["outbox-at-least-once", f"effect 'doc-2:email' {sent}"]]},
        {**base, "kind": "baseline", "nodeid": "t::clean::baseline", "held": False,
         "violations": [["baseline", "family 'clean' fails without any fault: job 'doc-1' ended 'failed'"]]},
    ]
    page = render_html(summarize(records))
    assert "3 violated, in 2 findings" in page
    findings = re.findall(r'<li class="finding( baseline)?">(.*?)</li>', page, flags=re.S)
    assert findings[0][0] == " baseline" and "without any fault" in findings[0][1]  # first
    assert "outbox-at-least-once" in findings[1][1] and "2 items" in findings[1][1]
    assert re.search(rf'at <a href="report_files/[^"#]*steps_py\.html#L3">{source.name}:3</a>', findings[1][1])  # to its line
    assert "fix: the step sent the effect itself" in findings[1][1]
    assert re.search(r'<tr class="culprit" id="L3"><td class="ln">3</td><td class="badge">the culprit</td>', _page(summarize(records), "steps_py.html"))


PROBE = """<script>
// Drives the report's own controls in the real browser, then writes what it saw into the DOM.
var index = document.getElementById('file-index');
var th = index.querySelector('th[data-key="violated"]');
th.click();
var first = index.tBodies[0].rows[0].dataset.file;
th.click();
var last = index.tBodies[0].rows[0].dataset.file;
var filter = document.getElementById('file-filter'); filter.value = 'other'; filter.dispatchEvent(new Event('input'));
var shown = Array.prototype.filter.call(index.tBodies[0].rows, function (r) { return !r.hidden; }).map(function (r) { return r.dataset.file; });
document.body.setAttribute('data-probe', [first, last, shown.join('|')].join(';'));
</script>"""
HIDE_PROBE = """<script>
var box = document.getElementById('hide-held'); box.checked = true; box.dispatchEvent(new Event('change'));
document.body.setAttribute('data-probe', getComputedStyle(document.querySelector('table.code tr.held')).display);
</script>"""


def test_the_index_sorts_filters_and_hides_held_lines_in_headless_chromium(tmp_path):
    binary = _chromium()
    bad, other = tmp_path / "steps.py", tmp_path / "other.py"
    bad.write_text("def f():\n    a = 1\n    b = 2\n")
    other.write_text("def g():\n    c = 3\n")
    base = {"plan": "p", "lesson": "L.", "mode": "fork", "seed": 0, "exit": "killed", "group": "g", "source": "", "failures": [],
            "wasted": 0, "seconds": 0.01, "replay": "r", "kind": "point", "hit": 1}
    records = [
        {**base, "nodeid": "p::1", "point": "steps.f:L2#1", "function": "f", "file": str(bad), "line": 2, "held": False,
         "violations": [["drains", "job 'a' is stuck"]], "executable": {str(bad): [2, 3], str(other): [2]}},
        {**base, "nodeid": "p::2", "point": "steps.f:L3#1", "function": "f", "file": str(bad), "line": 3, "held": True, "violations": []},
        {**base, "nodeid": "p::3", "point": "other.g:L2#1", "function": "g", "file": str(other), "line": 2, "held": True, "violations": []},
    ]
    index, pages = render_pages(summarize(records, rootdir=str(tmp_path)))
    page = tmp_path / "report.html"
    page.write_text(index.replace("</body>", PROBE + "</body>"))
    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout
    probe = re.search(r'data-probe="([^"]*)"', dom).group(1).split(";")
    assert probe[0] == "steps.py" and probe[1] == "other.py"  # sorted by violations, then reversed
    assert probe[2] == "other.py"  # the filter keeps the matching file
    steps = tmp_path / "steps_py.html"
    steps.write_text(pages["steps_py.html"].replace("</body>", HIDE_PROBE + "</body>"))
    dom = _run_chromium(binary, tmp_path / "profile", "--dump-dom", steps.as_uri()).stdout
    assert re.search(r'data-probe="none"', dom)  # a held line hidden by the switch, on the file's page
