"""An effect's idempotency key, ``<job id>:<kind>``, and why it splits back into exactly one pair.

The receiver dedupes on the key, so two different effects must never share one. A job id may hold
any character, ``:`` included (it is the caller's own key); an effect kind may not: a kind is an
identifier, :data:`EFFECT_KIND_PATTERN`, checked when the workflow is defined. So the key splits at
its *last* colon, and distinct ``(job id, kind)`` pairs give distinct keys. Were a kind allowed a
colon, job ``a`` with kind ``b:c`` and job ``a:b`` with kind ``c`` would both send ``a:b:c``, and
the receiver would apply only one of them while the outbox marked both sent.

>>> idempotency_key("invoice:7", "email")
'invoice:7:email'
>>> split_idempotency_key("invoice:7:email")
('invoice:7', 'email')
>>> check_effect_kind("b:c", "of step 'notify'")
Traceback (most recent call last):
    ...
engine._errors.InvalidInput: effect kind 'b:c' of step 'notify' must match [A-Za-z_][A-Za-z0-9_.-]{0,99} (letters, digits, '_', '.', '-'; no ':'): the idempotency key '<job id>:<kind>' is split at its last ':', so a kind holding one could give another effect's key; rename it, e.g. 'b_c'
"""

from __future__ import annotations

import re

from ._errors import InvalidInput

__all__ = ["EFFECT_KIND_PATTERN", "check_effect_kind", "idempotency_key", "split_idempotency_key", "check_unambiguous_kind"]

# An identifier: letters, digits, "_", "." and "-", first a letter or "_", at most 100 characters.
# No ":" (the key's separator), no space or control character (the kind also names the effect in
# the POST body, in logs and in `status`).
EFFECT_KIND_PATTERN = r"[A-Za-z_][A-Za-z0-9_.-]{0,99}"
_KIND = re.compile(EFFECT_KIND_PATTERN)
_NOT_KIND_CHAR = re.compile(r"[^A-Za-z0-9_.-]")


def check_effect_kind(kind: object, where: str) -> str:
    """``kind`` if it is an identifier (:data:`EFFECT_KIND_PATTERN`); else :class:`InvalidInput`
    naming the kind, where it was declared (``where``) and a kind that would do."""
    if isinstance(kind, str) and _KIND.fullmatch(kind):
        return kind
    suggestion = _NOT_KIND_CHAR.sub("_", kind) if isinstance(kind, str) else ""
    suggestion = suggestion if suggestion[:1].isalpha() or suggestion[:1] == "_" else f"_{suggestion}"
    raise InvalidInput(  # not a crash point: a bad workflow, refused when it is defined
        f"effect kind {kind!r} {where} must match {EFFECT_KIND_PATTERN} (letters, digits, '_', '.', '-'; no ':'): "
        "the idempotency key '<job id>:<kind>' is split at its last ':', so a kind holding one could give another "
        f"effect's key; rename it, e.g. {suggestion[:100]!r}"
    )


def idempotency_key(job_id: str, kind: str) -> str:
    """The key the receiver dedupes on: stable across re-sends, unambiguous for a checked kind."""
    return f"{job_id}:{kind}"


def split_idempotency_key(key: str) -> tuple[str, str]:
    """``(job id, kind)`` of a key; :class:`InvalidInput` if it holds no colon or no valid kind.

    >>> split_idempotency_key("a:b:c")
    ('a:b', 'c')
    """
    job_id, colon, kind = key.rpartition(":")
    if not colon or not job_id or not _KIND.fullmatch(kind):
        raise InvalidInput(f"idempotency key {key!r} is not '<job id>:<kind>' with a kind matching {EFFECT_KIND_PATTERN}")
    return job_id, kind


def check_unambiguous_kind(kind: str) -> str:
    """``kind`` if a stored outbox row of this kind may be sent; else :class:`InvalidInput`.

    Rows written before kinds were checked may hold any kind. A kind without ``:`` still gives a
    key that splits into one pair (its key is unchanged, and it is sent); a kind with ``:`` does
    not, and delivering it could make the receiver drop it, or another job's effect, as a
    duplicate. The message names no job, so ``status`` groups every such row into one line.
    """
    if ":" not in kind:
        return kind
    raise InvalidInput(
        f"effect kind {kind!r} holds ':', so its idempotency key '<job id>:{kind}' could be another effect's: "
        f"not sent. Rename the kind in the workflow to one matching {EFFECT_KIND_PATTERN}, then in these rows "
        f"(UPDATE outbox SET kind = '<new kind>' WHERE kind = '{kind}' AND sent_at IS NULL) once the receiver "
        "knows the new kind, or deliver them by hand and set sent_at"
    )
