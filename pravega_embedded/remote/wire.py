"""The wire protocol between a shared store's owner and its clients: frames, the handshake and
the binary bodies of bulk messages (docs/wire-protocol.md has every byte).

Owns: the frame header, the message kinds, the size caps, the encoders and the parsers of
every message. A parser is given bytes from the network: it trusts nothing, checks every
length against what is left and against its cap *before* anything is allocated for it, and
raises ProtocolError for anything that is not a well-formed message.

Invariants:
  1. A frame is ``u32 length | u8 kind | u32 request id | body``; ``length`` counts kind, id
     and body, and is checked against the cap of the connection's state (``HELLO_MAX`` before
     the handshake, ``FRAME_MAX`` after) before the body is read.
  2. Every parser consumes its body exactly: trailing bytes are a ProtocolError.
  3. Integers are big-endian; strings are UTF-8 (routing keys with surrogateescape, as the
     journal stores them).

Thread-safety: pure functions and immutable values.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import NamedTuple

from .._native import ffi
from ..errors import PravegaEmbeddedError, ProtocolError
from ..frames import FRAME_HEAD, FrameParser, keyed_events
from ..frames import NO_KEY as NO_KEY_LEN
from ..routing import MAX_KEY_BYTES
from ..writer import MAX_EVENT_SIZE, MAX_PENDING_EVENTS

__all__ = [
    "MAGIC", "VERSION", "HEADER", "HEADER_SIZE", "HELLO_MAX", "FRAME_MAX", "TOKEN_MAX",
    "Kind", "Hello", "Welcome", "WriteBatch", "WireEvent",
    "encode_frame", "parse_header", "encode_hello", "parse_hello", "encode_welcome",
    "parse_welcome", "encode_write", "parse_write", "encode_events", "parse_events", "EventsBody",
    "encode_bytes_write", "parse_bytes_write", "META_MAX",
]

MAGIC = b"PEW1"  # the first bytes of a HELLO body
VERSION = 3  # the protocol version this code speaks (HELLO carries a range); 2: WRITEs as frames;
# 3: the batch API's calls, SegmentRange as the batch unit, a slice's arrow(write_time, first, stream)
HEADER = struct.Struct(">IBI")  # length, kind, request id
HEADER_SIZE = HEADER.size  # 9
LENGTH_MIN = HEADER_SIZE - 4  # kind + request id
HELLO_MAX = 4096  # the largest frame read before the handshake is done (invariant 1)
FRAME_MAX = 72 << 20  # the largest frame after it: one batch of 8 MiB events and their keys
TOKEN_MAX = 1024
WELCOME_MAX = 4096

_HELLO = struct.Struct(">4sHHH")  # magic, min version, max version, token length
_WELCOME = struct.Struct(">HH")  # version, info length
_WRITE = struct.Struct(">IQI")  # writer handle, first sequence, count; then journal frames
_KEYLEN = struct.Struct("<H")
FRAME_NO_KEY = NO_KEY_LEN
WRITE_HEADER_SIZE = _WRITE.size  # a WRITE's frames start here
_KEY = struct.Struct(">i")  # key length, -1: no key
_LEN = struct.Struct(">I")
_EVENTS = struct.Struct(">IB")  # count, flags
END_FLAG = 1  # EVENTS flags: the reader read everything up to its end
META_FLAG = 2  # EVENTS flags: a JSON section follows the events (a group reader's contexts)
META_MAX = 1 << 20  # the largest JSON section of an EVENTS
_EVENT = struct.Struct(">QQI")  # segment id, offset, frame length
NO_KEY = -1


class Kind:
    """Message kinds (the header's kind byte)."""

    HELLO = 1  # client -> owner: magic, versions, token
    WELCOME = 2  # owner -> client: chosen version, store info (JSON)
    CALL = 3  # client -> owner: a method on a handle (JSON)
    RESULT = 4  # owner -> client: a call's value (JSON)
    ERROR = 5  # owner -> client: a call failed (JSON: error class, message)
    WRITE = 6  # client -> owner: a writer's events (binary, no reply unless it fails)
    EVENTS = 7  # owner -> client: events read (binary)
    WRITE_ATOMIC = 8  # client -> owner: a write_events batch (a WRITE body; one key, one record)
    BYTES = 9  # both ways: a byte stream's bytes (client -> owner: u32 handle | bytes, a write)
    ARROW = 10  # owner -> client: Arrow IPC stream bytes (a part of a slice's table)

    ALL = frozenset({HELLO, WELCOME, CALL, RESULT, ERROR, WRITE, EVENTS, WRITE_ATOMIC, BYTES, ARROW})


class Header(NamedTuple):
    length: int  # of kind, request id and body
    kind: int
    request: int

    @property
    def body_size(self) -> int:
        return self.length - LENGTH_MIN


def encode_frame(kind: int, request: int, body: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame (invariant 1)."""
    return HEADER.pack(LENGTH_MIN + len(body), kind, request) + bytes(body)


def parse_header(data: bytes | bytearray | memoryview, cap: int) -> Header:
    """The header at the start of ``data`` (HEADER_SIZE bytes); ProtocolError if the length is
    under the minimum or over ``cap`` or the kind is unknown (invariant 1)."""
    if len(data) < HEADER_SIZE:
        raise ProtocolError(f"a frame header is {HEADER_SIZE} bytes, got {len(data)}")
    length, kind, request = HEADER.unpack_from(data)
    if length < LENGTH_MIN:
        raise ProtocolError(f"frame length {length} is under the minimum {LENGTH_MIN}")
    if length > cap:
        raise ProtocolError(f"frame of {length} bytes is over the limit of {cap} bytes")
    if kind not in Kind.ALL:
        raise ProtocolError(f"unknown message kind {kind}")
    return Header(length, kind, request)


# ---------------------------------------------------------------------------- handshake
@dataclass(frozen=True, slots=True)
class Hello:
    """The client's first message: the versions it speaks and its token (empty: none)."""

    min_version: int
    max_version: int
    token: bytes


def encode_hello(token: bytes = b"", min_version: int = VERSION, max_version: int = VERSION) -> bytes:
    if len(token) > TOKEN_MAX:
        raise ProtocolError(f"a token is at most {TOKEN_MAX} bytes, got {len(token)}")
    return _HELLO.pack(MAGIC, min_version, max_version, len(token)) + token


def parse_hello(body: bytes | bytearray | memoryview) -> Hello:
    if len(body) < _HELLO.size:
        raise ProtocolError(f"a HELLO is at least {_HELLO.size} bytes, got {len(body)}")
    magic, lo, hi, n = _HELLO.unpack_from(body)
    if magic != MAGIC:
        raise ProtocolError(f"not a pravega_embedded client (magic {bytes(magic)!r})")
    if n > TOKEN_MAX or len(body) != _HELLO.size + n:
        raise ProtocolError(f"a HELLO with a {n}-byte token is {_HELLO.size + n} bytes, got {len(body)}")
    if lo > hi:
        raise ProtocolError(f"a HELLO's version range {lo}..{hi} is empty")
    return Hello(lo, hi, bytes(body[_HELLO.size:]))


@dataclass(frozen=True, slots=True)
class Welcome:
    """The owner's answer to a HELLO: the version chosen and the store's info (JSON text)."""

    version: int
    info: str


def encode_welcome(version: int, info: str) -> bytes:
    raw = info.encode()
    if len(raw) > WELCOME_MAX:
        raise ProtocolError(f"a WELCOME's info is at most {WELCOME_MAX} bytes, got {len(raw)}")
    return _WELCOME.pack(version, len(raw)) + raw


def parse_welcome(body: bytes | bytearray | memoryview) -> Welcome:
    if len(body) < _WELCOME.size:
        raise ProtocolError(f"a WELCOME is at least {_WELCOME.size} bytes, got {len(body)}")
    version, n = _WELCOME.unpack_from(body)
    if n > WELCOME_MAX or len(body) != _WELCOME.size + n:
        raise ProtocolError(f"a WELCOME with {n} bytes of info is {_WELCOME.size + n} bytes, got {len(body)}")
    try:
        return Welcome(version, bytes(body[_WELCOME.size:]).decode())
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"a WELCOME's info is not UTF-8: {exc}") from None


# ---------------------------------------------------------------------------- bulk bodies
def _put_key(out: list[bytes], kb: bytes | None) -> None:
    if kb is None:
        out.append(_KEY.pack(NO_KEY))
    else:
        out.append(_KEY.pack(len(kb)))
        out.append(kb)


def _take_key(body: memoryview, pos: int) -> tuple[bytes | None, int]:
    if pos + _KEY.size > len(body):
        raise ProtocolError("a message ends inside a routing key's length")
    (n,) = _KEY.unpack_from(body, pos)
    pos += _KEY.size
    if n == NO_KEY:
        return None, pos
    if not 0 <= n <= MAX_KEY_BYTES or pos + n > len(body):
        raise ProtocolError(f"a routing key of {n} bytes does not fit (limit {MAX_KEY_BYTES}, "
                            f"{len(body) - pos} bytes left)")
    return bytes(body[pos:pos + n]), pos + n


def _take_payload(body: memoryview, pos: int) -> tuple[bytes, int]:
    if pos + _LEN.size > len(body):
        raise ProtocolError("a message ends inside an event's length")
    (n,) = _LEN.unpack_from(body, pos)
    pos += _LEN.size
    if n > MAX_EVENT_SIZE or pos + n > len(body):
        raise ProtocolError(f"an event of {n} bytes does not fit (limit {MAX_EVENT_SIZE}, "
                            f"{len(body) - pos} bytes left)")
    return bytes(body[pos:pos + n]), pos + n


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """A WRITE body: ``count`` events of one writer handle, numbered ``first``, ``first + 1``,
    ..., as journal frames in write order (``frames``: checked whole by ``parse_write``)."""

    handle: int
    first: int
    count: int
    frames: bytes

    def events(self) -> list[tuple[str | None, bytes]]:
        """(routing key, event) in write order."""
        fp = FrameParser(max(1, self.count))
        n, _ = fp.parse(ffi.from_buffer(self.frames), len(self.frames), "a WRITE")
        return keyed_events(self.frames, fp, 0, n)


def encode_write(handle: int, first: int, events: list[tuple[bytes | None, bytes]]) -> bytes:
    """``events``: (routing key as UTF-8 bytes, event) in write order."""
    out = [_WRITE.pack(handle, first, len(events))]
    head = FRAME_HEAD.pack
    for key, ev in events:
        if key is None:
            out.append(head(len(ev), FRAME_NO_KEY))
        else:
            out.append(head(len(ev), len(key)))
            out.append(key)
        out.append(ev)
    return b"".join(out)


def key_part(key: bytes | None) -> bytes:
    """The part of a frame after its payload length: the key's length and bytes."""
    return _KEYLEN.pack(FRAME_NO_KEY) if key is None else _KEYLEN.pack(len(key)) + key


def encode_write_parts(handle: int, first: int, count: int, parts: list[bytes]) -> bytes:
    """A WRITE of ``count`` events given as their frames' parts (``encode_write`` joined)."""
    return _WRITE.pack(handle, first, count) + b"".join(parts)


def parse_write(data: bytes | bytearray | memoryview) -> WriteBatch:
    """A WRITE body, checked whole in C (frames.c) before any event is made: every frame
    complete, keys within MAX_KEY_BYTES, events within MAX_EVENT_SIZE, nothing after them."""
    if len(data) < _WRITE.size:
        raise ProtocolError(f"a WRITE is at least {_WRITE.size} bytes, got {len(data)}")
    handle, first, count = _WRITE.unpack_from(data)
    if count > MAX_PENDING_EVENTS or first + count > (1 << 63):
        raise ProtocolError(f"a WRITE of {count} events from sequence {first} is over the limits "
                            f"({MAX_PENDING_EVENTS} events, sequences under 2**63)")
    frames = bytes(memoryview(data)[_WRITE.size:])
    fp = _write_parser()
    try:
        n, consumed = fp.parse(ffi.from_buffer(frames), len(frames), "a WRITE")
    except PravegaEmbeddedError:
        raise ProtocolError(f"a WRITE has a routing key over {MAX_KEY_BYTES} bytes") from None
    if n != count or consumed != len(frames):
        raise ProtocolError(f"a WRITE of {count} events does not fit its {len(frames)} bytes: "
                            f"{n} whole events, {len(frames) - consumed} bytes left")
    if n and max(fp.pl[:n]) > MAX_EVENT_SIZE:
        raise ProtocolError(f"a WRITE has an event over the {MAX_EVENT_SIZE}-byte limit; events "
                            "that large go as BYTES frames")
    return WriteBatch(handle, first, count, frames)


_PARSERS = threading.local()


def _write_parser() -> FrameParser:
    """This thread's frame parser for WRITE bodies (each connection has a thread)."""
    fp = getattr(_PARSERS, "fp", None)
    if fp is None:
        fp = _PARSERS.fp = FrameParser(MAX_PENDING_EVENTS + 1)
    return fp


class WireEvent(NamedTuple):
    """One event of an EVENTS body."""

    segment_id: int
    offset: int
    length: int  # the frame's length in its segment
    routing_key: bytes | None  # UTF-8, as the journal holds it
    event: bytes


class EventsBody(NamedTuple):
    """A parsed EVENTS body."""

    events: list[WireEvent]
    end: bool  # the reader read everything up to its end
    meta: bytes | None  # the JSON section, if any


def encode_events(events: list[WireEvent], end: bool = False, meta: bytes | None = None) -> bytes:
    """An EVENTS body; ``end``: the reader has read everything up to its end; ``meta``: a JSON
    section after the events."""
    flags = (END_FLAG if end else 0) | (0 if meta is None else META_FLAG)
    out = [_EVENTS.pack(len(events), flags)]
    for ev in events:
        out.append(_EVENT.pack(ev.segment_id, ev.offset, ev.length))
        _put_key(out, ev.routing_key)
        out.append(_LEN.pack(len(ev.event)))
        out.append(ev.event)
    if meta is not None:
        if len(meta) > META_MAX:
            raise ProtocolError(f"an EVENTS' JSON section is at most {META_MAX} bytes, got {len(meta)}")
        out.append(_LEN.pack(len(meta)))
        out.append(meta)
    return b"".join(out)


def parse_events(data: bytes | bytearray | memoryview) -> EventsBody:
    """The events of an EVENTS body, its end flag and its JSON section."""
    body = memoryview(data)
    if len(body) < _EVENTS.size:
        raise ProtocolError(f"an EVENTS is at least {_EVENTS.size} bytes, got {len(body)}")
    count, flags = _EVENTS.unpack_from(body)
    if flags & ~(END_FLAG | META_FLAG):
        raise ProtocolError(f"an EVENTS has unknown flags {flags:#x}")
    # each event takes at least its fixed part: a count over what fits is refused before
    # anything is allocated for it
    least = _EVENT.size + _KEY.size + _LEN.size
    if count * least > len(body) - _EVENTS.size:
        raise ProtocolError(f"an EVENTS of {len(body)} bytes cannot hold {count} events")
    pos = _EVENTS.size
    out: list[WireEvent] = []
    for _ in range(count):
        if pos + _EVENT.size > len(body):
            raise ProtocolError("an EVENTS ends inside an event's position")
        sid, off, length = _EVENT.unpack_from(body, pos)
        pos += _EVENT.size
        key, pos = _take_key(body, pos)
        ev, pos = _take_payload(body, pos)
        out.append(WireEvent(sid, off, length, key, ev))
    meta = None
    if flags & META_FLAG:
        if pos + _LEN.size > len(body):
            raise ProtocolError("an EVENTS ends inside its JSON section's length")
        (n,) = _LEN.unpack_from(body, pos)
        pos += _LEN.size
        if n > META_MAX or pos + n > len(body):
            raise ProtocolError(f"an EVENTS' JSON section of {n} bytes does not fit (limit "
                                f"{META_MAX}, {len(body) - pos} bytes left)")
        meta = bytes(body[pos:pos + n])
        pos += n
    if pos != len(body):
        raise ProtocolError(f"an EVENTS has {len(body) - pos} bytes after its {count} events")
    return EventsBody(out, bool(flags & END_FLAG), meta)


_HANDLE = struct.Struct(">I")


def encode_bytes_write(handle: int, data: bytes | bytearray | memoryview) -> bytes:
    """A BYTES body from a client: a byte stream handle and the bytes to append."""
    return _HANDLE.pack(handle) + bytes(data)


def parse_bytes_write(data: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
    body = memoryview(data)
    if len(body) < _HANDLE.size:
        raise ProtocolError(f"a BYTES write is at least {_HANDLE.size} bytes, got {len(body)}")
    (handle,) = _HANDLE.unpack_from(body)
    return handle, body[_HANDLE.size:]
