"""Parsing event frames: reusable output arrays for the C frame parser, and the frame constants.

Owns: the arrays ``pe_parse_frames`` fills (frame offsets, payload lengths, key lengths), shared
by readers (EventRead tuples) and slices (Arrow columns); ``FRAME_HEADER_SIZE`` and
``FRAME_HEAD`` (a frame's u32 payload length and u16 key length, little-endian) and ``NO_KEY``
(the key length of an event without a key), the names every module uses for them
(csrc/frames.c).

Invariants:
  1. The C parser is never told to write more entries than the arrays hold (``max_events`` is
     the parser's own capacity).

Thread-safety: a FrameParser is used by one thread at a time (each reader/slice has its own).
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

from ._native import check, ffi, lib

__all__ = ["FrameParser", "FRAME_HEAD", "FRAME_HEADER_SIZE", "NO_KEY", "frame_length", "keyed_events"]

FRAME_HEADER_SIZE = lib.PE_FRAME_HEADER_SIZE
FRAME_HEAD = struct.Struct("<IH")  # payload length, key length
if FRAME_HEAD.size != FRAME_HEADER_SIZE:
    raise ImportError(f"the C core's frame header is {FRAME_HEADER_SIZE} bytes, not {FRAME_HEAD.size}")
NO_KEY = lib.PE_NO_KEY


def frame_length(payload_len: int, key_len: int) -> int:
    """The bytes of a frame with a payload of ``payload_len`` and a key of ``key_len`` bytes
    (``NO_KEY``: none)."""
    return FRAME_HEADER_SIZE + (0 if key_len == NO_KEY else key_len) + payload_len


class FrameParser:
    """Parses frames of a buffer into ``fo`` (frame offsets), ``pl`` (payload lengths) and
    ``kl`` (key lengths, -1: no key), at most ``cap`` per call."""

    __slots__ = ("cap", "fo", "pl", "kl", "c_fo", "c_pl", "c_kl", "n", "consumed")

    def __init__(self, cap: int = 65536) -> None:
        self.cap = cap
        self.fo = array("I", [0]) * cap  # (a repeat: 20x faster than from bytes(4 * cap))
        self.pl = array("I", [0]) * cap
        self.kl = array("i", [0]) * cap
        self.c_fo = ffi.from_buffer("uint32_t[]", self.fo)
        self.c_pl = ffi.from_buffer("uint32_t[]", self.pl)
        self.c_kl = ffi.from_buffer("int32_t[]", self.kl)
        self.n = ffi.new("uint32_t *")
        self.consumed = ffi.new("uint64_t *")

    def parse(self, cbuf: Any, length: int, what: str) -> tuple[int, int]:
        """Parse frames of cbuf[0..length); return (count, consumed bytes)."""
        status = lib.pe_parse_frames(cbuf, length, self.cap, self.c_fo, self.c_pl, self.c_kl,
                                     self.n, self.consumed)
        if status != lib.PE_OK:
            check(status, what)
        return self.n[0], self.consumed[0]


def keyed_events(data: bytes, fp: FrameParser, start: int, n: int) -> list[tuple[str | None, bytes]]:
    """Frames ``start`` .. ``n`` of ``data`` (already parsed into ``fp``) as (routing key or
    None, event bytes) in order."""
    out: list[tuple[str | None, bytes]] = []
    for fo, pl, kl in zip(fp.fo[start:n], fp.pl[start:n], fp.kl[start:n]):
        s = fo + FRAME_HEADER_SIZE
        e = s + max(kl, 0)
        out.append((None if kl < 0 else data[s:e].decode("utf-8", "surrogateescape"), data[e:e + pl]))
    return out
