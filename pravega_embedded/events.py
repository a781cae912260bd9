"""What readers return: EventRead and EventPointer.

Owns: the per-event result type of reads and the stable, serialisable pointer to one event.

Invariants:
  1. ``EventRead`` is a tuple (cheap to create: catch-up reads make a million per second); its
     fields are ``event, routing_key, segment_id, offset`` plus the frame length and the stream
     context: ``(scope, stream)``, or for reader-group reads a tuple subclass that also knows
     the reader's position when the event's chunk was read (so ``.position`` costs nothing
     per event until asked for).
  2. ``EventPointer.from_bytes(p.to_bytes()) == p``; the byte form starts with ``b"PEP1"``.

Thread-safety: immutable values, safe to share.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .errors import InvalidEventPointerError
from .names import validate_scope, validate_stream
from .streamcut import format_segment_id

if TYPE_CHECKING:
    from .readergroup.config import Position

__all__ = ["EventRead", "EventPointer"]

_PTR = struct.Struct("<4sQQIBB")  # magic, segment id, offset, frame length, len(scope), len(stream)
_PTR_MAGIC = b"PEP1"


@dataclass(frozen=True, slots=True, kw_only=True)
class EventPointer:
    """Where one event lives: enough to fetch it again with ``store.fetch_event(pointer)``."""

    scope: str
    stream: str
    segment_id: int
    offset: int
    length: int

    def to_bytes(self) -> bytes:
        s, t = self.scope.encode(), self.stream.encode()
        return _PTR.pack(_PTR_MAGIC, self.segment_id, self.offset, self.length, len(s), len(t)) + s + t

    @classmethod
    def from_bytes(cls, data: bytes) -> "EventPointer":
        try:
            magic, sid, off, length, ns, nt = _PTR.unpack_from(data)
        except (struct.error, TypeError) as exc:
            raise InvalidEventPointerError(f"not an EventPointer: {exc}") from None
        if magic != _PTR_MAGIC or len(data) != _PTR.size + ns + nt:
            raise InvalidEventPointerError("not an EventPointer: bad magic or length")
        try:
            scope = validate_scope(bytes(data[_PTR.size : _PTR.size + ns]).decode("ascii"))
            stream = validate_stream(bytes(data[_PTR.size + ns :]).decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidEventPointerError(f"not an EventPointer: {exc}") from None
        return cls(scope=scope, stream=stream, segment_id=sid, offset=off, length=length)

    def __str__(self) -> str:
        return (
            f"{self.scope}/{self.stream}/{format_segment_id(self.segment_id)}"
            f"@{self.offset}+{self.length}"
        )


class EventRead(tuple):
    """One event as read: ``.event``, ``.routing_key``, ``.segment_id``, ``.offset``,
    ``.event_pointer``. A tuple subclass; create it with ``EventRead.make(...)``."""

    __slots__ = ()

    is_checkpoint = False
    """True only for the checkpoint marker a reader-group reader returns (``event`` is None)."""
    checkpoint_name: str | None = None
    is_read_completed = False
    """True only for the marker a reader-group reader returns once the group has read every
    segment to its end cut (or to the end of a sealed stream)."""

    event: Any = property(itemgetter(0))  # type: ignore[assignment]
    segment_id: int = property(itemgetter(2))  # type: ignore[assignment]
    offset: int = property(itemgetter(3))  # type: ignore[assignment]
    length: int = property(itemgetter(4))  # type: ignore[assignment]
    """Frame length: the bytes this event occupies in its segment."""

    @classmethod
    def make(
        cls,
        event: object,
        routing_key: bytes | None,
        segment_id: int,
        offset: int,
        length: int,
        stream: tuple[str, str],
    ) -> "EventRead":
        return tuple.__new__(cls, (event, routing_key, segment_id, offset, length, stream))

    @property
    def routing_key(self) -> str | None:
        kb = self[1]
        return None if kb is None else kb.decode("utf-8", "surrogateescape")

    @property
    def scope(self) -> str:
        return self[5][0]

    @property
    def stream(self) -> str:
        return self[5][1]

    @property
    def event_pointer(self) -> EventPointer:
        scope, stream = self[5]
        return EventPointer(
            scope=scope, stream=stream, segment_id=self[2], offset=self[3], length=self[4]
        )

    @property
    def position(self) -> "Position | None":
        """For a reader-group read: the reader's Position just after this event (what
        ``group.reader_offline(reader_id, position)`` takes). None for standalone reads."""
        position_of = getattr(self[5], "position_of", None)
        return None if position_of is None else position_of(self)

    @property
    def next_offset(self) -> int:
        """The offset just after this event in its segment."""
        return self[3] + self[4]

    def __repr__(self) -> str:
        ev = self[0]
        if isinstance(ev, (bytes, str)) and len(ev) > 40:
            ev = ev[:37]
            shown = repr(ev)[:-1] + "..." + repr(ev)[-1]
        else:
            shown = repr(ev)
        return (
            f"EventRead(event={shown}, routing_key={self.routing_key!r}, "
            f"segment_id={format_segment_id(self[2])}, offset={self[3]})"
        )

    def __reduce__(self):  # pickle as the plain fields
        return (tuple.__new__, (EventRead, tuple(self)))
