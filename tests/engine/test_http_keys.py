"""Every idempotency key reaches the receiver: the header carries it percent-encoded (UTF-8),
so a key with an emoji, CJK or CR/LF is delivered, cannot inject a header, and decodes back."""

import http.server
import json
import threading

import pytest

from engine import HttpSender, decode_idempotency_key


@pytest.fixture
def receiver():
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.headers.get_all("Idempotency-Key"), self.headers.get("X-Evil"), json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/effects", seen
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("key", ["doc-\U0001f642:delivery", "文書-7:delivery", "doc\r\nX-Evil: 1:delivery", "100%:delivery", "é:delivery"])
def test_a_key_outside_latin_1_or_with_cr_lf_is_delivered_once_and_decodes_to_itself(receiver, key):
    url, seen = receiver
    HttpSender(url, timeout_s=5).send(key, "delivery", {"n": 1})
    assert len(seen) == 1
    headers, evil, body = seen[0]
    assert evil is None  # no header was injected
    assert len(headers) == 1 and headers[0].isascii() and headers[0].isprintable()
    assert decode_idempotency_key(headers[0]) == key
    assert body == {"kind": "delivery", "payload": {"n": 1}}


def test_a_plain_ascii_key_travels_unchanged(receiver):
    url, seen = receiver
    HttpSender(url, timeout_s=5).send("doc-1:delivery", "delivery", {})
    assert seen[0][0] == ["doc-1:delivery"]
