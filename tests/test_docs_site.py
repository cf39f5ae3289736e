"""The docs site builds with ``mkdocs build --strict`` and shows, in a real browser, what the code says.

Goal: a warning (a broken link, a missing page, a generated section that failed) fails the build,
and the generated reference pages really hold every plugin option and every invariant. Method:
build the site into a temporary folder with ``--strict``, then open the index and two reference
pages in headless Chromium (``--dump-dom``, after Material's scripts ran) and assert on the DOM.
The built folder must work opened from disk, as a reader who downloads it opens it: over the
DevTools protocol (``browser.DevTools``) a test loads ``index.html`` from ``file://``, clicks a
link of the navigation, checks the page it lands on, and searches, noting every request the pages
make: none may leave the machine (no web font from Google, no script from a CDN), and no page of
the build, nor a stylesheet, names a file to load from elsewhere.
Without mkdocs or Chromium the test skips, saying what to install; under ``CI=true`` it fails.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from browser import DevTools, chromium, run_chromium
from pg_fixtures import require

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = [name for name in ("mkdocs", "material") if importlib.util.find_spec(name) is None]
    require(f"{' and '.join(missing)} not installed (pip install -e '.[docs]')" if missing else None)
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_")}
    env["NO_MKDOCS_2_WARNING"] = "1"  # Material's notice about its successor, printed on every build
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out), "--config-file", str(ROOT / "mkdocs.yml")],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout[-3000:]}\n{build.stderr[-5000:]}"
    return out


def _dom(page: Path, profile: Path) -> str:
    assert page.is_file(), f"the build made no {page}"
    return run_chromium(chromium(), profile, "--dump-dom", page.as_uri()).stdout


def test_the_site_builds_strict_and_its_index_shows_the_install_an_example_and_the_three_ways_in(site, tmp_path):
    dom = _dom(site / "index.html", tmp_path / "profile")
    assert "Three ways in" in dom
    # A newcomer reads how to install and a first example before the ways in.
    # The page's own text (the navigation's table of contents comes first), its code unsplit from
    # the highlighter's spans.
    text = html.unescape(re.sub(r"<[^>]+>", "", dom.split("<article", 1)[-1]))
    install = text.find("pip install 'crashgate @ git+https://github.com/crashgate/crashgate'")
    example = text.find("send_outbox(store, PrintSender(), clock=clock)")
    assert 0 <= install < example < text.find("Three ways in"), (install, example)
    for way in ("Gate my workflow in CI.", "Gate my own engine.", "Learn the invariants."):
        assert way in dom, way
    for section in ("Tutorial", "How-to guides", "Reference", "Explanation"):  # the navigation Material rendered
        assert section in dom, section


def test_the_generated_reference_pages_show_every_plugin_option_and_invariant(site, tmp_path):
    import chaos
    from chaos.plugin import OPTIONS

    options = _dom(site / "reference" / "plugin-options.html", tmp_path / "profile")
    for option in OPTIONS:
        for name in (option.flag, option.env, option.ini):
            assert name in options, f"{name} missing from the rendered plugin-options page"
    invariants = _dom(site / "reference" / "invariants.html", tmp_path / "profile")
    for name in chaos.INVARIANTS:
        assert f'id="{name}"' in invariants, f"no section for invariant {name} in the rendered page"
    cli = _dom(site / "reference" / "chaos-cli.html", tmp_path / "profile")
    assert "python -m chaos plans init" in cli


# A request that leaves the machine: the site opened from disk offline must make none (a web font
# fetched from Google's servers hangs or fails there, and tells a third party who reads the docs).
OFF_MACHINE = re.compile(r"^(?:https?|wss?|ftp)://(?!(?:localhost|127\.0\.0\.1)(?:[:/]|$))", re.I)
# What a page loads by itself, as opposed to a link a reader may follow: a stylesheet, a preconnect,
# a script, an image, a CSS import or url().
LOADED_URL = re.compile(r"<(?:link|script|img|source|iframe)\b[^>]*\b(?:href|src)=[\"']?(https?://[^\"' >]+)|"
                        r"@import\s+(?:url\()?[\"']?(https?://[^\"') ;]+)|url\([\"']?(https?://[^\"')]+)", re.I)


def test_the_site_opened_from_disk_follows_a_navigation_link_to_the_next_page_and_searches(site, tmp_path):
    with DevTools(chromium(), tmp_path / "profile") as page:
        page.record_requests()
        page.open((site / "index.html").as_uri())
        page.click("nav.md-nav--primary a.md-nav__link[href*='demo']")
        landed = page.evaluate("location.href")
        # From file://, a link to a folder (tutorial/demo/) opens Chromium's listing of it.
        assert landed == (site / "tutorial" / "demo.html").as_uri(), f"the navigation's link led to {landed}"
        assert page.evaluate("document.title") == "The demo - crashgate"
        assert page.evaluate("document.querySelector('article h1').firstChild.textContent") == "Tutorial: the demo"

        page.evaluate("document.querySelector('input.md-search__input').focus()")
        page.send("Input.insertText", {"text": "outbox"})
        found = page.wait_for("document.querySelectorAll('.md-search-result__item').length")
        assert found, f"no search result for 'outbox': {page.evaluate('document.querySelector(`.md-search-result__meta`).textContent.trim()')}"
        first = page.evaluate("document.querySelector('.md-search-result__item a').href")
        assert first.startswith(site.as_uri()) and ".html" in first, first
        requested = page.requested()
    assert any(url.startswith(site.as_uri()) for url in requested), requested[:5]  # the recording saw the pages' own files
    off = sorted({url for url in requested if OFF_MACHINE.match(url)})
    assert not off, f"the site opened from disk asked for files off the machine: {off}"


def test_no_page_or_stylesheet_of_the_built_site_loads_anything_from_off_the_machine(site):
    """Every page, not only the ones the browser test visits: a stylesheet, script, font or image
    a page loads by itself must ship in the folder (links a reader may follow are not loads)."""
    files = sorted(p for p in site.rglob("*") if p.suffix in (".html", ".css"))
    assert len(files) > 20, files
    loads = {}
    for path in files:
        found = sorted({next(g for g in m.groups() if g) for m in LOADED_URL.finditer(path.read_text(errors="replace"))})
        if found:
            loads[str(path.relative_to(site))] = found
    assert not loads, f"loaded from off the machine: {loads}"


WIDE_CODE = ("[...document.querySelectorAll('.md-typeset pre > code')]"
             ".filter(c => c.scrollWidth > c.clientWidth).map(c => c.textContent.split('\\n')[0].slice(0, 60))")


def test_no_code_block_on_any_page_scrolls_sideways_at_1280_px(site, tmp_path):
    pages = sorted(p for p in site.rglob("*.html") if "assets" not in p.relative_to(site).parts)
    blocks = 0
    scrolling = {}
    with DevTools(chromium(), tmp_path / "profile", width=1280, height=800) as page:
        for html_page in pages:
            page.open(html_page.as_uri())
            blocks += page.evaluate("document.querySelectorAll('.md-typeset pre > code').length")
            wide = page.evaluate(WIDE_CODE)
            if wide:
                scrolling[str(html_page.relative_to(site))] = wide
    assert blocks > 50, f"only {blocks} code blocks measured in {len(pages)} pages"
    assert not scrolling, f"code blocks wider than their box at 1280 px (their first lines): {scrolling}"


def _hook():
    """The build hook that fills the reference pages, loaded from its file as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _public_api(cls: type) -> list[str]:
    """The class's public methods and properties, found here independently of the build hook."""
    return [name for name, _ in inspect.getmembers(cls, lambda v: callable(v) or isinstance(v, property)) if not name.startswith("_")]


def test_the_world_page_shows_every_public_method_of_the_world_its_services_and_the_fixture(site, tmp_path):
    import chaos
    import engine

    dom = _dom(site / "reference" / "world.html", tmp_path / "profile")
    text = html.unescape(re.sub(r"<[^>]+>", "", dom.split("<article", 1)[-1]))
    for signature in ("world.model.complete(ctx: Any, task: str, prompt: str) -> ModelReply",
                      "world.documents.fetch(ctx: Any, source: str) -> str",
                      "world.sender.send(key: str, kind: str, payload: Any) -> None"):
        assert signature in text, signature
    world = chaos.World(str(tmp_path), engine.FakeClock(0.0))
    for service in ("model", "documents", "sender"):
        for name in _public_api(type(getattr(world, service))):
            assert f"world.{service}.{name}(" in text, f"world.{service}.{name} missing from the world page"
    for name in _public_api(chaos.World):
        assert f"world.{name}" in text or f"World.{name}(" in text, f"World.{name} missing from the world page"
    for name in _public_api(chaos.Sandbox):
        assert f"chaos_world.{name}" in text, f"Sandbox.{name} (the chaos_world fixture) missing from the world page"
    for name in ("job_id", "step", "worker_id", "token", "heartbeat", "payload", "inputs"):
        assert f"ctx.{name}" in text, f"ctx.{name} missing from the world page"
    for field in dataclasses.fields(engine.ModelReply):
        assert re.search(rf"{field.name}\s+{field.type.__name__ if isinstance(field.type, type) else field.type}", text), field.name


def test_the_world_page_fails_the_build_when_the_world_gains_a_method_or_reads_ctx_the_docs_do_not_describe(monkeypatch):
    import chaos

    hook = _hook()
    monkeypatch.setattr(chaos.World, "replay", lambda self: None, raising=False)
    with pytest.raises(RuntimeError, match="update WORLD_GROUPS"):
        hook.world_api()
    monkeypatch.delattr(chaos.World, "replay")
    described = dict(hook.CTX_DESCRIPTIONS)
    del described["token"]
    monkeypatch.setattr(hook, "CTX_DESCRIPTIONS", described)
    with pytest.raises(RuntimeError, match=r"reads ctx\.\{.*token.*update CTX_DESCRIPTIONS"):
        hook.world_api()


def test_the_schema_page_fails_the_build_when_the_loader_allows_a_key_the_docs_do_not_describe(monkeypatch):
    hook = _hook()
    assert "`call_gap_min`" in hook.fault_plan_schema()
    described = {table: dict(keys) for table, keys in hook.PLAN_DESCRIPTIONS.items()}
    del described["expect"]["call_gap_min"]
    monkeypatch.setattr(hook, "PLAN_DESCRIPTIONS", described)
    with pytest.raises(RuntimeError, match="call_gap_min"):
        hook.fault_plan_schema()


def test_a_page_asking_for_an_unknown_generated_section_fails_the_build():
    hook = _hook()
    with pytest.raises(RuntimeError, match="unknown generated section 'nonsense'"):
        hook.on_page_markdown("# A page\n\n<!-- generated: nonsense -->\n", None, None, None)
    assert hook.on_page_markdown("# A page\n", None, None, None) == "# A page\n"
