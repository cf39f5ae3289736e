"""A PNG reader for the tests that read a screenshot's pixels (8-bit RGB or RGBA, not interlaced:
what Chromium writes), so that no imaging library is needed."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows), each row ``width * 3`` bytes of RGB."""
    data = path.read_bytes()
    if data[:8] != SIGNATURE:
        raise ValueError(f"{path} is not a PNG")
    pos, chunks, header = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"{path}: only 8-bit RGB or RGBA, not interlaced, is read here (depth {depth}, colour type {colour})")
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        previous = line
        rows.append(bytes(line) if channels == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
    return width, height, rows


def rows_with(rows: list[bytes], colour: tuple[int, int, int], at_least: int) -> list[int]:
    """The rows (y) with at least ``at_least`` pixels of exactly ``colour``."""
    pixel = bytes(colour)
    out = []
    for y, row in enumerate(rows):
        count = sum(1 for x in range(0, len(row), 3) if row[x:x + 3] == pixel)
        if count >= at_least:
            out.append(y)
    return out


def bands(ys: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive rows, as (first, last)."""
    out: list[tuple[int, int]] = []
    for y in ys:
        if out and y == out[-1][1] + 1:
            out[-1] = (out[-1][0], y)
        else:
            out.append((y, y))
    return out
