"""An outbox sender that POSTs each effect as JSON with an ``Idempotency-Key`` header.

The receiver must dedupe on that key: the outbox delivers at least once, so the same key can
arrive twice after a crash between delivering and marking.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ._errors import BadRequest, ConnectionFailed, RateLimited, ServerError

__all__ = ["HttpSender"]


class HttpSender:
    """POST ``{"kind": ..., "payload": ...}`` to ``url``; raise a typed error on failure."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"receiver url {url!r} must start with http:// or https://")
        self.url = url
        self.timeout_s = timeout_s

    def send(self, key: str, kind: str, payload: Any) -> None:
        body = json.dumps({"kind": kind, "payload": payload}, sort_keys=True).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 429:
                retry_after = exc.headers.get("Retry-After")
                raise RateLimited(f"429 from {self.url}", float(retry_after) if retry_after else None) from exc
            if exc.code >= 500:
                raise ServerError(f"{exc.code} from {self.url}", exc.code) from exc
            raise BadRequest(f"{exc.code} from {self.url}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionFailed(f"{self.url}: {exc}") from exc
