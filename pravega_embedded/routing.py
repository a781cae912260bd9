"""Routing keys to key-space points and segments.

Owns: the stable hash from a routing key to a point in [0, 1), and the lookup of the segment
owning a point.

Invariants:
  1. ``key_point(k)`` is identical in every process, platform and release: the first 8 bytes of
     BLAKE2b (digest_size=8, no key, no salt, no person) of the key's UTF-8 bytes, read as a
     big-endian unsigned 64-bit integer, shifted right by 11, divided by 2**53. (Python's
     ``hash()`` is salted per process and is never used.)
  2. A segment owns the half-open range [low, high); the open segments of a stream partition
     [0, 1) exactly, so every point has exactly one owner.

Thread-safety: pure functions.
"""

from __future__ import annotations

from bisect import bisect_right
from hashlib import blake2b
from typing import Any, Sequence

from .errors import InvalidRoutingKeyError

__all__ = ["key_point", "equal_ranges", "owner_index", "encode_key", "MAX_KEY_BYTES"]

MAX_KEY_BYTES = 4096

_SCALE = 1.0 / (1 << 53)


def key_point(key: str) -> float:
    """The point in [0, 1) a routing key maps to (see invariant 1)."""
    digest = blake2b(key.encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) * _SCALE


def encode_key(key: Any) -> bytes | None:
    """A routing key's UTF-8 bytes (None for no key); InvalidRoutingKeyError if it is not a
    str, not valid Unicode, or over MAX_KEY_BYTES."""
    if key is None:
        return None
    if type(key) is not str:
        raise InvalidRoutingKeyError(f"routing key must be a str or None, not {type(key).__name__}")
    try:
        kb = key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRoutingKeyError(f"routing key {key!r} is not valid Unicode (lone surrogate)") from None
    if len(kb) > MAX_KEY_BYTES:
        raise InvalidRoutingKeyError(f"routing key of {len(kb)} bytes is over the {MAX_KEY_BYTES}-byte limit")
    return kb


def equal_ranges(n: int, low: float = 0.0, high: float = 1.0) -> list[tuple[float, float]]:
    """Split [low, high) into n equal, contiguous ranges (the last one ends exactly at high)."""
    width = (high - low) / n
    bounds = [low + i * width for i in range(n)] + [high]
    return [(bounds[i], bounds[i + 1]) for i in range(n)]


def owner_index(lows: Sequence[float], point: float) -> int:
    """Index of the range owning ``point`` given the sorted lower bounds of a partition."""
    return bisect_right(lows, point) - 1
