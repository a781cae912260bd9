"""Serializers: turn application values into event bytes and back.

Owns: the three built-in serializers (bytes, UTF-8 text, JSON) and the lookup by name.

Invariants:
  1. ``deserialize(serialize(v)) == v`` for every value a serializer accepts.
  2. Failures raise SerializationError naming the serializer.

Thread-safety: serializers are stateless and safe to share.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from .errors import SerializationError

__all__ = ["Serializer", "BytesSerializer", "TextSerializer", "JsonSerializer", "resolve"]


class Serializer(Protocol):
    name: str

    def serialize(self, value: object) -> bytes: ...

    def deserialize(self, data: bytes) -> object: ...


class BytesSerializer:
    """Events are bytes (bytearray and memoryview are accepted and copied)."""

    name = "bytes"

    def serialize(self, value: object) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise SerializationError(
            f"bytes serializer: event must be bytes-like, not {type(value).__name__}"
        )

    def deserialize(self, data: bytes) -> bytes:
        return data


class TextSerializer:
    """Events are str, stored as UTF-8."""

    name = "text"

    def serialize(self, value: object) -> bytes:
        if not isinstance(value, str):
            raise SerializationError(f"text serializer: event must be str, not {type(value).__name__}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SerializationError(f"text serializer: event is not valid Unicode: {exc}") from None

    def deserialize(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerializationError(f"text serializer: event is not UTF-8: {exc}") from exc


class JsonSerializer:
    """Events are JSON values, stored as compact UTF-8 JSON."""

    name = "json"

    def serialize(self, value: object) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"json serializer: {exc}") from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            return json.loads(data)
        except ValueError as exc:
            raise SerializationError(f"json serializer: event is not JSON: {exc}") from exc


_BY_NAME = {"bytes": BytesSerializer(), "text": TextSerializer(), "json": JsonSerializer()}


def resolve(serializer: "Serializer | str | None") -> "Serializer | None":
    """None or "bytes" -> None (raw bytes, the fast path); a name or an object -> that object."""
    if serializer is None or serializer == "bytes":
        return None
    if isinstance(serializer, str):
        try:
            return _BY_NAME[serializer]
        except KeyError:
            raise SerializationError(
                f"unknown serializer {serializer!r}; use one of {sorted(_BY_NAME)} or an object "
                "with serialize()/deserialize()"
            ) from None
    if not (hasattr(serializer, "serialize") and hasattr(serializer, "deserialize")):
        raise SerializationError(f"{serializer!r} has no serialize()/deserialize()")
    return serializer
