"""Command-line arguments shared by ``python -m engine`` and ``python -m chaos``.

An operating error on the command line is one line and exit status 2; argparse's own errors are
a usage block and a message, so :class:`OneLineParser` prints only the message, the argument it
is about and where help is. Numbers are checked by their type, so ``--jobs -5`` never gets in.

>>> positive_int("3"), non_negative_int("0")
(3, 0)
>>> positive_int("-5")
Traceback (most recent call last):
    ...
argparse.ArgumentTypeError: -5 must be >= 1
"""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["OneLineParser", "positive_int", "non_negative_int"]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``prog: error: ...; see prog --help``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}; see {self.prog} --help\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer; pass a whole number >= {minimum}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
    return value
