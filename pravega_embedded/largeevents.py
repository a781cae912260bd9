"""Large events: events over the 8 MiB record-friendly size, up to ``large_event_limit``
(default 1 GiB), written and read atomically with a few MiB of buffer.

Owns: writing a large event (its frame cut into BYTES chunks staged under uid 0, then one MERGE
record appends them to the segment owning the key, ``staging``) and reading one back (the
chunks gathered straight into the event's bytes object).

Invariants:
  1. A large event is one ordinary frame (u32 payload length, u16 key length, key, payload) that
     spans several sections of its segment: the first section starts with the frame and counts
     one event, the rest count none. Readers tell it by a frame longer than its section.
  2. It is invisible until its MERGE is durable, then visible whole (staging invariants 1, 2);
     a crash before leaves only unreferenced chunks, which retention reclaims.
  3. Writing holds at most one chunk (``CHUNK``, 4 MiB) beyond the caller's bytes; reading
     allocates the payload once (a fresh bytes object, filled in place, straight from the
     journal files, before anyone else can see it) plus the first section's bytes.
  4. The MERGE carries the writer's sequence number, so exactly-once resumption counts a large
     event like any batch.

Thread-safety: ``write_large`` is called by one writer thread (under the writer's I/O lock);
``read_large`` by one reader at a time; both take the store's locks as needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ._native import ffi
from .errors import CorruptDataError
from .frames import FRAME_HEAD, FRAME_HEADER_SIZE, NO_KEY
from .routing import key_point, owner_index
from .staging import CHUNK, merge, stage

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["LargeFrame", "read_large", "write_large", "DEFAULT_LARGE_EVENT_LIMIT"]

DEFAULT_LARGE_EVENT_LIMIT = 1 << 30


class LargeFrame:
    """A large event read whole: its payload, key bytes (or None) and frame length."""

    __slots__ = ("event", "key", "length")

    def __init__(self, event: bytes, key: bytes | None, length: int) -> None:
        self.event, self.key, self.length = event, key, length

    def __len__(self) -> int:
        return self.length

    def frame(self) -> bytes:
        """The frame's bytes (a copy; for consumers that parse frames, such as Arrow)."""
        kl = NO_KEY if self.key is None else len(self.key)
        return FRAME_HEAD.pack(len(self.event), kl) + (self.key or b"") + self.event


def write_large(engine: "Engine", st: "StreamState", writer_id: str, seq: int, kb: bytes | None,
                event: Any, spread: int, on_append: Callable[[int], None] | None = None) -> int:
    """Append one large event for the writer ``writer_id`` (sequence ``seq``); returns the
    MERGE record's end position once it is written (durable after a journal sync to it).
    ``on_append(end)`` runs as soon as the MERGE is in the journal (staging.merge)."""
    view = memoryview(event).cast("B")
    head = FRAME_HEAD.pack(len(view), NO_KEY if kb is None else len(kb)) + (kb or b"")
    first = CHUNK - len(head)
    pieces = [(head + view[:first], 1)]  # the frame's first chunk starts the event (invariant 1)
    pieces += ((view[a : a + CHUNK], 0) for a in range(first, len(view), CHUNK))
    what = f"large event for {st.key}"
    engine.admit_bytes(what)  # the local budget
    with engine.files.pinned():
        refs = stage(engine, pieces, what)

        def plan() -> list[tuple[Any, list[tuple[int, int, int]]]]:
            lows, segs = st.routing
            if kb is None:
                seg = segs[spread % len(segs)]
            else:
                seg = segs[owner_index(lows, key_point(kb.decode("utf-8")))]
            return [(seg, refs)]

        while True:
            end = merge(engine, st, plan, writer_id=writer_id, last_seq=seq, on_append=on_append)
            if end >= 0:
                return end


def read_large(src: Any, offset: int, limit: int, first: Any) -> tuple[LargeFrame, int]:
    """The large event whose frame starts at ``offset`` (``first`` = the bytes of its first
    section, already read) from ``src`` (a reader.SegmentSource): (LargeFrame, offset after
    it)."""
    seg = src.seg
    pl, kl = FRAME_HEAD.unpack_from(first, 0)
    klen = 0 if kl == NO_KEY else kl
    flen = FRAME_HEADER_SIZE + klen + pl
    if offset + flen > limit or len(first) < FRAME_HEADER_SIZE + klen:
        raise CorruptDataError(
            f"segment {seg.name}: the event at offset {offset} claims {flen} bytes, past the "
            f"readable end {limit}"
        )
    key = None if kl == NO_KEY else bytes(first[FRAME_HEADER_SIZE : FRAME_HEADER_SIZE + klen])
    event = bytes(pl)  # invariant 3: filled in place below, before anyone else holds it
    dst = ffi.from_buffer(event)
    got = len(first) - FRAME_HEADER_SIZE - klen
    if got > 0:
        ffi.memmove(dst, memoryview(first)[FRAME_HEADER_SIZE + klen :], got)
    at = offset + len(first)
    journal = src.journal
    while got < pl:
        entry, data = src.section(at)
        if entry.n_events != 0 or entry.start != at:
            raise CorruptDataError(
                f"segment {seg.name}: the large event at offset {offset} is cut short at {at}"
            )
        n = min(entry.nbytes, pl - got)
        if data is not None:
            ffi.memmove(dst + got, data[:n], n)
        elif n == entry.nbytes:  # straight from the file into the event: no chunk buffer
            journal.read_section_into(entry.pos, n, ffi.buffer(dst + got, n))
        else:
            ffi.memmove(dst + got, journal.read_section(entry.pos, entry.nbytes, 0, n), n)
        got += n
        at += n
    return LargeFrame(event, key, flen), offset + flen
