"""Name rules for scopes, streams and writer ids.

Owns: the validation of every user-supplied name that becomes part of a path, an LMDB key or a
tier-2 object key.

Invariants:
  1. A valid scope or stream name matches ``[A-Za-z0-9][A-Za-z0-9.-]{0,254}``: ASCII, 1-255
     bytes, never ``.`` or ``..``, never starting with ``.``, ``-`` or ``_`` (``_`` is reserved
     for internal names), so it can never escape the store directory or a tier-2 prefix.
  2. A writer id matches ``[A-Za-z0-9][A-Za-z0-9._:-]{0,254}``.

Thread-safety: pure functions.
"""

from __future__ import annotations

import re

from .errors import InvalidNameError

__all__ = ["validate_scope", "validate_stream", "validate_writer_id", "stream_key"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,254}")
_WRITER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,254}")


def _check(kind: str, name: object, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a str, not {type(name).__name__}: {name!r}")
    if pattern.fullmatch(name) is None:
        raise InvalidNameError(f"invalid {kind} name {name!r}: {rule}")
    return name


_NAME_RULE = (
    "use 1-255 ASCII letters, digits, '.' and '-', starting with a letter or digit"
)


def validate_scope(name: object) -> str:
    """Return ``name`` if it is a valid scope name, else raise InvalidNameError."""
    return _check("scope", name, _NAME, _NAME_RULE)


def validate_stream(name: object) -> str:
    """Return ``name`` if it is a valid stream name, else raise InvalidNameError."""
    return _check("stream", name, _NAME, _NAME_RULE)


def validate_writer_id(name: object) -> str:
    """Return ``name`` if it is a valid writer id, else raise InvalidNameError."""
    return _check(
        "writer id",
        name,
        _WRITER,
        "use 1-255 ASCII letters, digits, '.', '_', ':' and '-', starting with a letter or digit",
    )


def stream_key(scope: str, stream: str) -> str:
    """The internal key of a stream: ``scope/stream`` ('/' never occurs in a valid name)."""
    return f"{scope}/{stream}"
