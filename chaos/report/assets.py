"""What every page of the HTML crash report inlines: its style sheet, its few lines of JavaScript
(the index's sorting and filtering, the keyboard navigation of coverage.py's HTML report) and the
legend of the source pages' colours. Each page carries its own copy, so that any one of them opens
from disk alone.
"""

from __future__ import annotations

__all__ = ["CSS", "JS", "LEGEND", "KEYS_HELP"]

LEGEND = (
    '<p class="legend"><span class="sw plain"></span> not a crash point '
    '<span class="sw held"></span> every point held (crash, pause, interleave, faults of the machine) '
    '<span class="sw violated"></span> a point of some fault kind violated an invariant '
    '<span class="sw missed"></span> executable, but no point killed or froze here '
    '<span class="sw culprit"></span> the culprit: the line of your code a failure names (it raised, sent or paid from here). '
    "Click a coloured line for its points; press ? for the keys.</p>"
)

KEYS_HELP = (
    '<div id="keys" hidden><b>Keys</b><br><kbd>j</kbd> or <kbd>n</kbd> next marked line &middot; '
    '<kbd>k</kbd> or <kbd>p</kbd> previous marked line<br><kbd>]</kbd> next file &middot; <kbd>[</kbd> previous file<br>'
    '<kbd>u</kbd> or <kbd>i</kbd> the index &middot; <kbd>?</kbd> this help (<kbd>Esc</kbd> closes it)</div>'
)

CSS = """
:root { --good:#1e7e34; --bad:#c62828; --held-bg:#e7f5ea; --held-bar:#34a853; --bad-bg:#fdecea;
  --bad-bar:#d93025; --miss-bg:#fff8e1; --miss-bar:#f2b600; --culprit-bg:#e4d4ff; --culprit-bar:#7b2fd0; --ink:#1f2328; --muted:#59636e; --line:#d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  margin: 0 auto; padding: 24px 32px 64px; max-width: 1280px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 2px; } h2 { font-size: 17px; margin: 28px 0 10px; }
h3 { font: 600 14px ui-monospace, SFMono-Regular, Menlo, monospace; margin: 24px 0 6px; }
.meta { color: var(--muted); margin: 0; }
.sample { margin: 8px 0 0; padding: 6px 12px; border: 1px solid var(--line); border-left: 4px solid var(--miss-bar); border-radius: 6px; }
.cards { display: grid; grid-template-columns: repeat(6, 1fr); gap: 12px; margin-top: 18px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card .num { font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .label { color: var(--muted); font-size: 12px; }
.card.good .num { color: var(--good); } .card.bad { border-color: var(--bad); background: var(--bad-bg); }
.card.bad .num { color: var(--bad); }
#violations.ok h2 { color: var(--good); }
ol.violations { padding-left: 22px; } ol.violations li { margin-bottom: 12px; }
code, .code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
code.nodeid { font-weight: 600; } .lesson { color: var(--muted); font-style: italic; margin: 2px 0; }
code.replay { display: block; background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px;
  padding: 4px 8px; margin-top: 4px; white-space: pre-wrap; word-break: break-all; user-select: all; }
table.plans { border-collapse: collapse; width: 100%; }
table.plans th, table.plans td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
table.plans td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.plans tr.bad td:first-child { border-left: 4px solid var(--bad-bar); }
table.plans tr.good td:first-child { border-left: 4px solid var(--held-bar); }
.legend { color: var(--muted); } .sw { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: -1px; margin: 0 4px 0 12px; border: 1px solid var(--line); }
.sw.held { background: var(--held-bg); border-left: 3px solid var(--held-bar); }
.sw.violated { background: var(--bad-bg); border-left: 3px solid var(--bad-bar); }
.sw.missed { background: var(--miss-bg); border-left: 3px solid var(--miss-bar); }
.sw.culprit { background: var(--culprit-bg); border-left: 3px solid var(--culprit-bar); }
#cause { border: 2px solid var(--bad-bar); background: var(--bad-bg); border-radius: 8px; padding: 10px 16px; margin: 12px 0 4px; }
#cause h2 { margin: 0 0 6px; color: var(--bad); } #cause .where code { background: var(--culprit-bg); padding: 0 4px; }
#cause .fix { font-weight: 600; } #cause p { margin: 4px 0; }
nav.pages { display: flex; gap: 14px; align-items: baseline; font-size: 13px; margin-bottom: 6px; }
nav.pages .keys-hint { margin-left: auto; color: var(--muted); }
#keys { position: fixed; top: 16px; right: 16px; background: #fff; border: 1px solid var(--line); border-radius: 8px;
  box-shadow: 0 4px 16px rgba(0,0,0,.15); padding: 8px 16px; z-index: 10; }
#keys[hidden] { display: none; } #keys kbd { font: 12px ui-monospace, monospace; border: 1px solid var(--line);
  border-radius: 4px; padding: 0 4px; background: #f6f8fa; }
nav.files { display: flex; flex-wrap: wrap; gap: 6px; }
nav.files a { font: 12px ui-monospace, monospace; text-decoration: none; color: var(--ink);
  border: 1px solid var(--line); border-radius: 999px; padding: 2px 10px; }
nav.files a span { color: var(--muted); } nav.files a.bad { border-color: var(--bad-bar); background: var(--bad-bg); }
table.code { border-collapse: collapse; width: 100%; table-layout: fixed; border: 1px solid var(--line); }
table.code td { padding: 0 8px; vertical-align: top; }
table.code col.ln { width: 56px; } table.code col.badge { width: 112px; }
table.code td.ln { text-align: right; color: var(--muted); user-select: none;
  font: 12px ui-monospace, monospace; border-right: 1px solid var(--line); }
table.code td.badge { font-size: 11px; color: var(--muted); white-space: nowrap; }
table.code td.src code { white-space: pre-wrap; overflow-wrap: anywhere; }
table.code tr.held td { background: var(--held-bg); } table.code tr.held td.ln { box-shadow: inset 3px 0 var(--held-bar); }
table.code tr.violated td { background: var(--bad-bg); } table.code tr.violated td.ln { box-shadow: inset 3px 0 var(--bad-bar); }
table.code tr.violated td.badge { color: var(--bad); font-weight: 600; }
table.code tr.missed td { background: var(--miss-bg); } table.code tr.missed td.ln { box-shadow: inset 3px 0 var(--miss-bar); }
table.code tr.fold td { color: var(--muted); background: #f6f8fa; font-size: 11px; padding: 1px 8px; }
details > summary { cursor: pointer; list-style: none; } details > summary::-webkit-details-marker { display: none; }
details[open] > summary { font-weight: 600; }
.points { margin: 4px 0 8px; white-space: normal; }
.pt { background: #fff; border: 1px solid var(--line); border-left: 4px solid var(--held-bar); border-radius: 6px;
  padding: 6px 10px; margin: 4px 0; }
.pt.violated { border-left-color: var(--bad-bar); }
.pt .head { display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.pt .tag { font-size: 11px; font-weight: 700; color: var(--good); } .pt.violated .tag { color: var(--bad); }
.pt .wasted { margin-left: auto; color: var(--muted); font-size: 12px; }
body.hide-held table.code tr.held, body.hide-held table.code tr.plain, body.hide-held table.code tr.fold { display: none; }
table.index th { cursor: pointer; text-align: left; } table.index tr.mine td:first-child { font-weight: 600; }
table.index tr.bad td { color: #b91c1c; } .controls input[type=search] { padding: 2px 6px; }
table.code tr.culprit td { background: var(--culprit-bg); } table.code tr.culprit td.ln { box-shadow: inset 3px 0 var(--culprit-bar); }
table.code tr.culprit td.badge { color: var(--culprit-bar); font-weight: 700; }
table.code tr.symptom td.badge { color: var(--muted); font-style: italic; }
table.code tr.current td { outline: 2px solid #0969da; outline-offset: -2px; }
.violations .tag.baseline { background: #b91c1c; color: #fff; } .violations .tag.culprit { background: var(--culprit-bg); color: var(--culprit-bar); }
.violations .count { color: var(--muted); } .violations .fix { margin-top: 2px; }
.pt .inv { margin-top: 4px; } .pt .why { color: var(--muted); font-size: 12.5px; }
.pt .what { color: var(--muted); font-size: 12.5px; }
.pt .fault { font: 600 11px ui-monospace, monospace; border-radius: 4px; padding: 0 5px; background: #eef1f4; }
.pt .fault.pause-live, .pt .fault.pause-expired { background: #e8eefc; } .pt .fault.interleave { background: #f3e8fc; }
.pt .fault.machine { background: #fdf0dc; }
"""

JS = """
// Keyboard navigation, as coverage.py's HTML report has it: j/n and k/p the next and previous
// marked line (the culprit, a violated line, a line no point killed), ] and [ the next and
// previous file, u or i the index, ? these keys.
function marked() { return Array.prototype.slice.call(document.querySelectorAll('table.code tr.culprit, table.code tr.violated, table.code tr.missed')); }
function go(row) {
  var old = document.querySelector('table.code tr.current'); if (old) old.classList.remove('current');
  row.classList.add('current');
  row.scrollIntoView({block: 'center'});
  if (history.replaceState) history.replaceState(null, '', '#' + row.id);
}
function step(by) {
  var rows = marked(); if (!rows.length) return;
  var cur = document.querySelector('table.code tr.current'), at = rows.indexOf(cur);
  if (at < 0 && cur) {  // a line that is not marked: the next marked one after it (or before it)
    var all = Array.prototype.slice.call(document.querySelectorAll('table.code tr')), here = all.indexOf(cur);
    at = by > 0 ? -1 : rows.length;
    rows.forEach(function (r, n) { var i = all.indexOf(r); if (by > 0 ? i < here : i > here) at = n; });
  }
  var next = at < 0 ? (by > 0 ? 0 : rows.length - 1) : at + by;
  if (next >= 0 && next < rows.length) go(rows[next]);
}
function follow(id) { var a = document.getElementById(id); if (a && a.href) location.href = a.href; }
document.addEventListener('keydown', function (ev) {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  var t = ev.target; if (t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA')) return;
  var keys = document.getElementById('keys');
  switch (ev.key) {
    case 'j': case 'n': step(1); break;
    case 'k': case 'p': step(-1); break;
    case ']': follow('next-file'); break;
    case '[': follow('prev-file'); break;
    case 'u': case 'i': follow('to-index'); break;
    case '?': if (keys) keys.hidden = !keys.hidden; break;
    case 'Escape': if (keys) keys.hidden = true; break;
    default: return;
  }
  ev.preventDefault();
});
function openTarget() {
  var row = location.hash && document.getElementById(location.hash.slice(1));
  if (!row) return;
  var d = row.querySelector('details'); if (d) d.open = true;
  if (row.tagName === 'TR') { var old = document.querySelector('table.code tr.current'); if (old) old.classList.remove('current'); row.classList.add('current'); }
  row.scrollIntoView({block: 'center'});
}
window.addEventListener('hashchange', openTarget); openTarget();
var hide = document.getElementById('hide-held');
if (hide) hide.addEventListener('change', function (ev) { document.body.classList.toggle('hide-held', ev.target.checked); });
// The index of files: sort by a column (click its header; again to reverse), filter by name.
var index = document.getElementById('file-index');
if (index) {
  index.querySelectorAll('th').forEach(function (th) {
    th.addEventListener('click', function () {
      var key = th.dataset.key, body = index.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var down = th.dataset.dir !== 'down'; th.dataset.dir = down ? 'down' : 'up';
      rows.sort(function (a, b) {
        var x = a.dataset[key], y = b.dataset[key];
        var c = key === 'file' ? x.localeCompare(y) : parseFloat(x) - parseFloat(y);
        return down ? -c : c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  document.getElementById('file-filter').addEventListener('input', function (ev) {
    var q = ev.target.value.toLowerCase();
    Array.prototype.forEach.call(index.tBodies[0].rows, function (r) { r.hidden = q && r.dataset.file.toLowerCase().indexOf(q) < 0; });
  });
}
"""
