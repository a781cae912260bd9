"""Name rules for scopes, streams, writer ids, reader groups, reader ids and checkpoints.

Owns: the validation of every user-supplied name that becomes part of a path, an LMDB key or a
tier-2 object key.

Invariants:
  1. A valid scope or stream name matches ``[A-Za-z0-9][A-Za-z0-9._-]{0,254}``: ASCII, 1-255
     bytes, never ``.`` or ``..``, never starting with ``.``, ``-`` or ``_`` (a leading ``_``
     is reserved for internal names; inside a name it is allowed, as Kafka and Redis users
     expect), so it can never escape the store directory or a tier-2 prefix (``/``, a backslash,
     ``=`` and ``:`` are never in it).
  2. A writer id, reader id or checkpoint name matches ``[A-Za-z0-9][A-Za-z0-9._:-]{0,254}``;
     a reader-group name follows the stream-name rule.

Thread-safety: pure functions.
"""

from __future__ import annotations

import re

from .errors import InvalidNameError

__all__ = [
    "validate_scope",
    "validate_stream",
    "validate_writer_id",
    "validate_group_name",
    "validate_reader_id",
    "validate_checkpoint_name",
    "stream_key",
    "NAME_PATTERN",
]

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._\-]{0,254}"  # scopes, streams, reader groups (invariant 1)
_NAME = re.compile(NAME_PATTERN)
_WRITER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,254}")


def _check(kind: str, name: object, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a str, not {type(name).__name__}: {name!r}")
    if pattern.fullmatch(name) is None:
        raise InvalidNameError(f"invalid {kind} name {name!r}: {rule}")
    return name


_NAME_RULE = (
    "use 1-255 ASCII letters, digits, '.', '_' and '-', starting with a letter or digit"
)


def validate_scope(name: object) -> str:
    """Return ``name`` if it is a valid scope name, else raise InvalidNameError."""
    return _check("scope", name, _NAME, _NAME_RULE)


def validate_stream(name: object) -> str:
    """Return ``name`` if it is a valid stream name, else raise InvalidNameError."""
    return _check("stream", name, _NAME, _NAME_RULE)


_ID_RULE = "use 1-255 ASCII letters, digits, '.', '_', ':' and '-', starting with a letter or digit"


def validate_writer_id(name: object) -> str:
    """Return ``name`` if it is a valid writer id, else raise InvalidNameError."""
    return _check("writer id", name, _WRITER, _ID_RULE)


def validate_group_name(name: object) -> str:
    """Return ``name`` if it is a valid reader-group name (the stream-name rule)."""
    return _check("reader group", name, _NAME, _NAME_RULE)


def validate_reader_id(name: object) -> str:
    """Return ``name`` if it is a valid reader id (the writer-id rule)."""
    return _check("reader id", name, _WRITER, _ID_RULE)


def validate_checkpoint_name(name: object) -> str:
    """Return ``name`` if it is a valid checkpoint name (the writer-id rule; names starting
    with '_' are the store's own)."""
    return _check("checkpoint", name, _WRITER, _ID_RULE)


def stream_key(scope: str, stream: str) -> str:
    """The internal key of a stream: ``scope/stream`` ('/' never occurs in a valid name)."""
    return f"{scope}/{stream}"
