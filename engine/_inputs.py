"""What the engine accepts from a caller or a step: job ids and JSON values it can store and read back.

Both backends store the same things: a job id is text either database holds (PostgreSQL's text
holds no NUL, and neither holds a lone surrogate, which UTF-8 cannot encode), and a value is JSON
that parses back to what was given. Everything else is refused with :class:`InvalidInput`,
naming the input and the fix, before anything is written.

>>> check_job_id("doc-1")
'doc-1'
>>> dumps({"b": 1, "a": [True, None]})
'{"a":[true,null],"b":1}'
>>> dumps({"x": float("nan")})
Traceback (most recent call last):
    ...
engine._errors.InvalidInput: value holds NaN or infinity at $.x; JSON has neither: pass a finite number, or None
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Sequence

from ._errors import InvalidInput

__all__ = [
    "check_job_id",
    "check_text",
    "storable_text",
    "finite_number",
    "dumps",
    "loads",
    "payload_json",
    "JOB_ID_CHARS_MAX",
    "PAYLOAD_BYTES_MAX",
    "NESTING_DEPTH_MAX",
]

JOB_ID_CHARS_MAX = 200
PAYLOAD_BYTES_MAX = 1_000_000
# Deeper JSON than this is refused: the standard library's encoder and decoder recurse once per
# level, so a value nested thousands deep would fail with RecursionError on its way in or out.
NESTING_DEPTH_MAX = 200
# Containers one value may hold in all, a bound on the walk below (the payload's byte limit
# bounds it long before this for payloads; step outputs have no byte limit of their own).
NODES_MAX = 10_000_000
TYPES_HELP = "pass dicts with string keys, lists, str, int, finite float, bool or None"
# One encoder for every canonical dump: json.dumps with options builds a new encoder per call,
# and a step completion dumps its output on every step.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
# A probe of every kind of JSON value: the C encoder below is used only if it writes this
# exactly as _CANONICAL does.
_ENCODER_PROBE = {"b": [1, -2.5, 1e300, None, True, False, "caf\u00e9 \U0001f600 \"q\"\n"], "a": {"z": {}, "y": []}, "": 0}


def _canonical_chunks(value: Any, _indent_level: int) -> Sequence[str]:
    return (_CANONICAL.encode(value),)


def _chunks_encoder() -> Callable[[Any, int], Sequence[str]]:
    """``encode(value, 0)[0]`` is ``_CANONICAL.encode(value)``, without what that costs per call.

    ``JSONEncoder.encode`` builds a new C encoder (``json.encoder.c_make_encoder``), and a dict
    for cycle detection, on every call, through two Python frames: about a fifth of encoding a
    step's small output. This builds the C encoder once, without cycle detection: a cyclic value
    then ends in RecursionError instead of ValueError, and :func:`dumps` refuses both alike. The C
    encoder's positional signature is not a documented interface, so it is used only if it exists,
    accepts these arguments and writes the probe exactly as ``_CANONICAL`` does; otherwise
    (another interpreter or version) every encode goes through ``_CANONICAL.encode``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _canonical_chunks
    try:
        encoder = make(None, _CANONICAL.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False)
        if encoder(_ENCODER_PROBE, 0)[0] == _CANONICAL.encode(_ENCODER_PROBE):  # its one chunk
            return encoder  # type: ignore[no-any-return]
    except Exception:  # a changed signature: the documented path below
        pass
    return _canonical_chunks


_encode_chunks = _chunks_encoder()

# One decoder for every read: json.loads strips whitespace around the value with two regular
# expression matches before it decodes, and the engine's own texts have none. Its C scanner is
# called directly: ``raw_decode`` is a Python frame around it that only renames StopIteration.
_DECODER = json.JSONDecoder()
_scan = _DECODER.scan_once


def check_job_id(job_id: Any) -> str:
    """``job_id`` if both backends can store it as the idempotency key; else :class:`InvalidInput`."""
    if not isinstance(job_id, str) or not job_id.strip():
        raise InvalidInput(f"job id {job_id!r} must be a non-empty string (it is the idempotency key)")
    if len(job_id) > JOB_ID_CHARS_MAX:
        raise InvalidInput(f"job id {job_id[:40]!r}... is {len(job_id)} characters; the limit is {JOB_ID_CHARS_MAX}")
    if job_id.isascii() and "\x00" not in job_id:
        return job_id  # no surrogate in ASCII: what check_text checks, without building its message
    check_text(job_id, f"job id {job_id!r}")
    return job_id


def check_text(text: str, what: str) -> str:
    """``text`` if both databases can hold it: no NUL character, no lone surrogate."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be a string, not {_kind(text)}")  # not a crash point: a bad path, worker id or job id, refused where the store opens, the worker is made or a job is submitted
    if "\x00" in text:
        raise InvalidInput(f"{what} holds a NUL character (\\x00), which PostgreSQL cannot store; use another value")  # not a crash point: a bad path, worker id or job id, refused where the store opens, the worker is made or a job is submitted
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # not a crash point: a bad path, worker id or job id, refused where the store opens, the worker is made or a job is submitted
        raise InvalidInput(
            f"{what} holds a lone surrogate ({text[exc.start]!r} at index {exc.start}), which UTF-8 cannot encode; "
            "use a valid Unicode string"
        ) from None
    return text


def storable_text(text: Any) -> bool:
    """Whether both databases can hold ``text`` (a string without NUL or a lone surrogate).

    A job id that is not storable names no job: a lookup answers UnknownJob on both backends
    instead of PostgreSQL's DataError and SQLite's UnicodeEncodeError.
    """
    if not isinstance(text, str) or "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def finite_number(name: str, value: Any, *, minimum: float | None = None) -> float:
    """``value`` as a float if it is a finite int or float (not a bool) and at least ``minimum``.

    NaN passes every comparison-based check (``nan < 1`` is false), so it is refused by name here:
    a NaN lease or attempt limit would otherwise be accepted and never reached.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name}={value!r} must be a number, not {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidInput(f"{name}={value!r} is too large; pass a finite number") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{name}={value!r} must be a finite number")
    if minimum is not None and number < minimum:
        raise InvalidInput(f"{name}={value!r} must be >= {minimum:g}")
    return number


def dumps(value: Any, *, what: str = "value") -> str:
    """Canonical JSON (sorted keys, no NaN), so equal payloads compare equal as text.

    Refused with :class:`InvalidInput` naming ``what``: anything JSON cannot hold or would not
    give back unchanged (a set, a datetime, NaN, a non-string key, a lone surrogate), or nesting
    deeper than :data:`NESTING_DEPTH_MAX`.
    """
    text = _plain_dumps(value)
    if text is not None:
        return text
    _check_json(value, what)  # names what is wrong and where; or finds nothing (a tuple, say)
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable ({exc}); {TYPES_HELP}") from exc


def _plain_dumps(value: Any) -> str | None:
    """The canonical JSON of ``value`` if it certainly passes :func:`dumps`'s checks, else None.

    The common case costs one encode and one decode, both in C: the encoder itself refuses NaN,
    infinity and types JSON cannot hold, and :func:`_gives_back` checks the rest on the text.
    For None, :func:`dumps` takes the full walk, which names what is wrong and where.
    """
    try:
        text = _encode_chunks(value, 0)[0]
    except (TypeError, ValueError, RecursionError):
        return None
    return text if _gives_back(text, value) else None


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same error; faster for a text that is only a value.

    >>> loads('{"a":[1.5,null]}'), loads(' [1] ')
    ({'a': [1.5, None]}, [1])
    """
    if type(text) is str:
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError):
            pass  # json.loads below raises the error (or strips leading whitespace and decodes)
        else:
            if end == len(text):
                return value
    return json.loads(text)


def payload_json(job_id: str, payload: Any) -> str:
    """The canonical JSON of a job's payload: a JSON object within :data:`PAYLOAD_BYTES_MAX`."""
    text = _plain_dumps(payload) if isinstance(payload, dict) else None
    # The canonical text is ASCII (every other character is escaped): its length is its size.
    if text is not None and len(text) <= PAYLOAD_BYTES_MAX:
        return text
    what = f"payload of job {job_id!r}"  # only built when something may be wrong
    if isinstance(payload, float) and not math.isfinite(payload):
        raise InvalidInput(f"{what} is {payload!r}; JSON has no NaN or infinity")
    if not isinstance(payload, dict):
        raise InvalidInput(
            f"{what} is {_kind(payload)}, not a JSON object; a payload is an object of named fields, "
            'e.g. {"source": "doc-1"}: wrap the value in one'
        )
    text = dumps(payload, what=what)
    if len(text.encode()) > PAYLOAD_BYTES_MAX:
        raise InvalidInput(
            f"{what} is {len(text.encode())} bytes of JSON; the limit is {PAYLOAD_BYTES_MAX}: "
            "store large documents elsewhere and submit a reference to them"
        )
    return text


def _check_json(value: Any, what: str) -> None:
    """Walk ``value`` without recursion; raise InvalidInput at the first thing JSON cannot hold."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    for _ in range(NODES_MAX):
        if not stack:
            return
        node, where, depth = stack.pop()
        if node is None or isinstance(node, (bool, int)):
            continue
        if isinstance(node, float):
            if not math.isfinite(node):
                raise InvalidInput(f"{what} holds NaN or infinity at {where}; JSON has neither: pass a finite number, or None")
            continue
        if isinstance(node, str):
            _check_string(node, what, where)
            continue
        if not isinstance(node, (dict, list, tuple)):
            raise InvalidInput(f"{what} holds {_kind(node)} at {where}, which JSON cannot hold; {TYPES_HELP}")
        if depth >= NESTING_DEPTH_MAX:
            raise InvalidInput(f"{what} is nested deeper than {NESTING_DEPTH_MAX} levels (at {where[:60]}...); flatten it")
        if isinstance(node, dict):
            for key, item in node.items():
                if not isinstance(key, str):
                    raise InvalidInput(f"{what} has the key {key!r} at {where}; JSON object keys must be strings: convert it with str()")
                _check_string(key, what, f"{where} (a key)")
                stack.append((item, f"{where}.{key[:20]}", depth + 1))
        else:
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(node))
    raise InvalidInput(f"{what} holds more than {NODES_MAX} values; store it elsewhere and pass a reference")


def _gives_back(text: str, value: Any) -> bool:
    """Whether ``text``, the encoding of ``value``, passes what :func:`_check_json` checks beyond
    the encoder. False sends the value to the full walk, so a False may be cautious, never a True.
    """
    return (
        # With ensure_ascii every character outside ASCII is an escape: no "\ud", no surrogate.
        "\\ud" not in text
        # Every value takes at least one character, and every container a bracket (so a text
        # shorter than the depth limit cannot reach it: the common case, counted by len alone).
        and len(text) < NODES_MAX
        and (len(text) < NESTING_DEPTH_MAX or text.count("[") + text.count("{") < NESTING_DEPTH_MAX)
        # A key the encoder turned into a string (1 -> "1") does not compare equal.
        # (The text is the encoder's own: one JSON value, which the scanner reads whole.)
        and _scan(text, 0)[0] == value
    )


def _check_string(text: str, what: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{what} holds a lone surrogate at {where} (index {exc.start}), which UTF-8 cannot encode; use a valid Unicode string"
        ) from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return f"a {type(value).__name__}"
