"""A model an adapter declares in one word: ``receiver = "strict"``, ``iteration = "until-idle"``,
``recovery = "restart"``. Each model is a ``StrEnum`` whose first member is the default, read by
:func:`declared`, which refuses any other word with the words allowed and what each means.

>>> from enum import StrEnum
>>> class Colour(StrEnum):
...     PLAIN = "plain"
...     LOUD = "loud"
>>> class Adapter:
...     name = "mine"
...     colour = "red"
>>> declared(object(), "colour", Colour, {Colour.PLAIN: "no colour", Colour.LOUD: "bright"})
<Colour.PLAIN: 'plain'>
>>> declared(Adapter(), "colour", Colour, {Colour.PLAIN: "no colour", Colour.LOUD: "bright"})
Traceback (most recent call last):
ValueError: adapter 'mine': colour is 'red'; use 'plain' (the default: no colour) or 'loud' (bright)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Mapping, TypeVar

__all__ = ["declared"]

Model = TypeVar("Model", bound=StrEnum)


def declared(adapter: Any, name: str, model: type[Model], meanings: Mapping[Model, str]) -> Model:
    """The member of ``model`` that ``adapter`` declares as its attribute ``name``, or the first
    (the default) if it declares none; any other word is a ``ValueError`` naming the adapter and
    every allowed word with its meaning (``meanings``)."""
    members = list(model)
    word = getattr(adapter, name, None)
    if word is None:
        return members[0]
    if word in [m.value for m in members]:
        return model(word)
    choices = [f"{m.value!r} ({'the default: ' if m is members[0] else ''}{meanings[m]})" for m in members]
    allowed = choices[0] if len(choices) == 1 else f"{', '.join(choices[:-1])} or {choices[-1]}"
    raise ValueError(f"adapter {getattr(adapter, 'name', adapter)!r}: {name} is {word!r}; use {allowed}")
