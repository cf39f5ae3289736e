"""Headless Chromium for the tests that check what a page really shows (the HTML report, the docs).

Without Chromium such a test skips, saying what to install; under ``CI=true`` it fails instead,
since CI must not pass without rendering the page.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pg_fixtures import require

CHROMIUM_TIMEOUT_S = 120
DEVTOOLS_WAIT_S = 60  # for one answer or one page load; generous, the machine may be busy
REQUESTS_SETTLE_S = 1.0  # quiet on the pipe this long: the page has asked for all it will


def chromium() -> str:
    """The Chromium binary; skips (or fails under CI=true) when there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(None if found else "chromium is not installed (Debian: apt-get install chromium); .ci/run installs it")
    assert found is not None
    return found


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium with a profile of its own and nothing fetched from the network."""
    command = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=True)


class DevTools:
    """One headless Chromium page driven over the DevTools protocol, for what ``--dump-dom`` cannot
    show: following a link the way a reader does, typing into a box, measuring laid-out elements.

    The protocol runs over ``--remote-debugging-pipe`` (the browser reads commands from its file
    descriptor 3 and answers on 4, each message JSON ended by a NUL byte), so no port is opened and
    nothing beyond the standard library is needed. Use it as a context manager::

        with DevTools(chromium(), tmp_path / "profile", width=1280, height=800) as page:
            page.open(Path("site/index.html").as_uri())
            page.evaluate("document.title")
    """

    def __init__(self, binary: str, profile: Path, *, width: int = 1280, height: int = 800) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        command = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank",
        ]

        def descriptors() -> None:
            # In the child, before exec: the two ends where Chromium expects them. They are first
            # copied above 9, since a pipe's own descriptor may be 3 or 4 (dup2 onto itself would
            # leave it closed on exec).
            reads, writes = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(reads, 3)
            os.dup2(writes, 4)

        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, preexec_fn=descriptors, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        self._session = ""
        self._size = (width, height)

    def __enter__(self) -> "DevTools":
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                  session=False)["sessionId"]
        self.send("Page.enable")
        width, height = self._size
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close", session=False)
            self._process.wait(timeout=CHROMIUM_TIMEOUT_S)
        except Exception:  # a browser that does not close is killed: the test's outcome stands
            self._process.kill()
            self._process.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not select.select([self._from_browser], [], [], left_s)[0]:
                raise TimeoutError(f"Chromium sent nothing for {DEVTOOLS_WAIT_S} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed its DevTools pipe (exit {self._process.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept for :meth:`wait_event`."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + DEVTOOLS_WAIT_S
        while True:
            answer = self._message(deadline)
            if answer.get("id") != self._next_id:
                self._events.append(answer)
                continue
            if "error" in answer:
                raise RuntimeError(f"DevTools {method} failed: {answer['error']}")
            return answer["result"]

    def wait_event(self, method: str) -> dict[str, Any]:
        """The next event ``method`` (one that already arrived counts), waiting up to DEVTOOLS_WAIT_S."""
        deadline = time.monotonic() + DEVTOOLS_WAIT_S
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(index)
            self._events.append(self._message(deadline))

    def record_requests(self) -> None:
        """Note every request the page makes from now on (the Network domain's
        ``requestWillBeSent``, sent before anything goes out, so a request that then fails offline
        is still noted); read them with :meth:`requested`."""
        self.send("Network.enable")

    def requested(self, settle_s: float = REQUESTS_SETTLE_S) -> list[str]:
        """The URLs of the requests noted since :meth:`record_requests`, once the browser has sent
        nothing more for ``settle_s`` (a font asked for by a stylesheet comes after the load event),
        or DEVTOOLS_WAIT_S at most."""
        deadline = time.monotonic() + DEVTOOLS_WAIT_S
        while time.monotonic() < deadline and select.select([self._from_browser], [], [], settle_s)[0]:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed its DevTools pipe (exit {self._process.poll()})")
            self._buffer += chunk
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                self._events.append(json.loads(raw))
        return [e["params"]["request"]["url"] for e in self._events if e.get("method") == "Network.requestWillBeSent"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def click(self, selector: str) -> None:
        """Click the first element ``selector`` matches as a reader would, and wait for the page it loads."""
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        box = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
                            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                            " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        if box is None:
            raise LookupError(f"nothing on {self.evaluate('location.href')} matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})
        self.wait_event("Page.loadEventFired")

    def wait_for(self, expression: str) -> Any:
        """Poll a JavaScript expression until it is truthy (up to DEVTOOLS_WAIT_S); its last value."""
        deadline = time.monotonic() + DEVTOOLS_WAIT_S
        value = self.evaluate(expression)
        while not value and time.monotonic() < deadline:
            time.sleep(0.1)
            value = self.evaluate(expression)
        return value
