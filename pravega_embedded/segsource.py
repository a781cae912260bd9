"""Reading one segment: its bytes at an offset, its events, and checking positions in it.

Owns: finding a segment's bytes at an offset (the tail cache in memory, else the journal file
through the in-memory or LMDB section index, checked against the section's CRC; tier 2 once its
journal file is reclaimed), turning frames into EventRead tuples (frames parsed in C once per
chunk; tiered history's events made from its row group's columns, ``read_events``), checking
that an offset is an event boundary, fetching one event by pointer, and validating a user's
StreamCut against a stream.

Invariants:
  1. Only acknowledged data is visible: a section is read only once the journal acknowledges
     its ``visible_at`` (engine invariant 4).
  2. Reads start and stop at frame boundaries; a cut offset that is not one is rejected
     (InvalidStreamCutError), never parsed as garbage.
  3. A read of data that was truncated and reclaimed meanwhile raises TruncatedDataError, never
     another file's bytes (journal invariant 5).

Thread-safety: a SegmentSource holds no state of its own beyond the segment: any thread.
"""

from __future__ import annotations

import time
from functools import partial
from itertools import repeat
from operator import sub
from typing import TYPE_CHECKING, Any, Iterator

from ._native import ffi
from .errors import (
    CorruptDataError,
    InvalidConfigurationError,
    InvalidEventPointerError,
    InvalidStreamCutError,
    StorageError,
    TruncatedDataError,
)
from .events import EventRead
from .frames import FRAME_HEAD, FRAME_HEADER_SIZE, FrameParser, frame_length
from .largeevents import LargeFrame, read_large
from .segindex import IndexEntry
from .serializers import resolve
from .streamcut import StreamCut
from .topology import check_cut

if TYPE_CHECKING:
    from .engine import Engine
    from .segment import Segment
    from .serializers import Serializer
    from .stream import StreamState

__all__ = ["SegmentSource", "events_from", "event_runs", "deadline_of", "resolve_cut", "visible_snapshot"]

_new = tuple.__new__
_FH = FRAME_HEADER_SIZE


def events_from(data: Any, base: int, sid: int, names: tuple[str, str], ser: "Serializer | None",
                frames: FrameParser, what: str, start: int = 0, stop: int | None = None) -> list[EventRead]:
    """All events in ``data[start:stop]`` (complete frames; the first at segment offset
    ``base``), parsed in place: no copy of the slice."""
    if type(data) is LargeFrame:
        ev = data.event if ser is None else ser.deserialize(data.event)
        return [_new(EventRead, (ev, data.key, sid, base, data.length, names))]
    runs = event_runs(data, base, sid, names, frames, what, start, stop)
    out = next(runs, [])
    for more in runs:
        out += more
    if ser is not None:
        de = ser.deserialize
        out = [_new(EventRead, (de(e[0]),) + e[1:]) for e in out]
    return out


def event_runs(data: Any, base: int, sid: int, names: object, frames: FrameParser, what: str,
               start: int = 0, stop: int | None = None) -> Iterator[list[EventRead]]:
    """The events in ``data[start:stop]`` (complete frames; the first at segment offset
    ``base``) as lists of at most ``frames.cap`` events, one per call of the frame parser,
    parsed in place as they are taken: a reader that takes short runs keeps few events alive
    at once (under the collector's threshold of young objects, so none reach its older
    generations)."""
    ER = EventRead
    cbuf = ffi.from_buffer(data)
    pos, total, shift = start, len(data) if stop is None else stop, base - start
    while pos < total:
        n, consumed = frames.parse(cbuf + pos, total - pos, what)
        if n == 0:
            raise CorruptDataError(f"{what}: a damaged frame at offset {shift + pos}")
        b = shift + pos
        kls = frames.kl[:n]
        out: list[EventRead] = []
        ap = out.append
        if min(kls) >= 0:  # every event has a key: the common case, no branch per event
            for fo, pl, kl in zip(frames.fo[:n], frames.pl[:n], kls):
                s = pos + fo + _FH
                e = s + kl
                ap(_new(ER, (data[e : e + pl], data[s:e], sid, b + fo, _FH + kl + pl, names)))
        else:
            for fo, pl, kl in zip(frames.fo[:n], frames.pl[:n], kls):
                s = pos + fo + _FH
                if kl < 0:
                    ap(_new(ER, (data[s : s + pl], None, sid, b + fo, _FH + pl, names)))
                else:
                    e = s + kl
                    ap(_new(ER, (data[e : e + pl], data[s:e], sid, b + fo, _FH + kl + pl, names)))
        pos += consumed
        yield out


def deadline_of(timeout: Any) -> float | None:
    """The monotonic deadline of a read ``timeout`` (None: no deadline); a timeout that is not a
    number raises InvalidConfigurationError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidConfigurationError(f"timeout must be a number of seconds or None, got {timeout!r}")
    return time.monotonic() + max(0.0, timeout)


class SegmentSource:
    """Reads one segment's bytes for readers and slices."""

    __slots__ = ("engine", "seg", "journal")

    def __init__(self, engine: "Engine", seg: "Segment") -> None:
        self.engine, self.seg, self.journal = engine, seg, engine.journal

    def section(self, offset: int) -> tuple[IndexEntry, Any]:
        """The section containing ``offset`` and its cached bytes (or None). An offset before
        the head is TruncatedDataError: a truncation drops its index entries (from LMDB too)."""
        try:
            return self.engine.index.lookup(self.seg, offset)
        except CorruptDataError:
            self._truncated(offset)
            raise

    def entries(self, offset: int, stop: int, limit: int) -> list[tuple[IndexEntry, Any]]:
        """The sections from the one containing ``offset`` on (at most ``limit``, none past the
        one containing ``stop - 1``) with their cached bytes (or None), in offset order
        (``SegmentIndex.entries``); the first contains ``offset``, else TruncatedDataError
        if it was truncated away meanwhile, or CorruptDataError."""
        run = self.engine.index.entries(self.seg, offset, stop, limit)
        if not run or run[0][0].start > offset:
            self._truncated(offset)
            raise CorruptDataError(f"segment {self.seg.name}: no section indexed at offset {offset}")
        return run

    def read_section_into(self, entry: IndexEntry, buf: Any) -> None:
        """Section ``entry`` (not cached, still in its journal file: data not yet tiered) read
        whole into the writable ``buf`` and checked, with the GIL released while it is read;
        a section truncated away meanwhile is TruncatedDataError."""
        try:
            self.journal.read_section_into(entry.pos, entry.nbytes, buf)
        except (CorruptDataError, StorageError):
            self._truncated(entry.start)
            raise

    def visible_length(self, acked: int) -> int:
        """The segment's length counting only visible sections (invariant 1)."""
        return self.engine.index.visible_length(self.seg, acked)

    def read(self, offset: int, limit: int, *, copy: bool = True) -> tuple[Any, int]:
        """Complete frames from ``offset`` to the end of its section or ``limit``: (bytes, end).
        With copy=False a cached section comes back as a read-only memoryview (no copy). A
        large event (a frame longer than its section, ``largeevents``) comes back whole as a
        LargeFrame."""
        data, stop = self.read_raw(offset, limit, copy=copy)
        if len(data) >= _FH:
            pl, kl = FRAME_HEAD.unpack_from(data, 0)
            if frame_length(pl, kl) > len(data):
                try:
                    return read_large(self, offset, limit, data)
                except OSError as exc:  # CorruptDataError and StorageError are OSErrors too
                    self._truncated(offset)
                    if self.engine.cold is not None and offset < self.engine.tiered.get(self.seg.uid, 0):
                        # tiered, and a chunk's journal file was reclaimed: tier 2 has it whole
                        return self._read_cold(offset, limit, copy)
                    if isinstance(exc, (CorruptDataError, StorageError)):
                        raise
                    raise StorageError(f"read of segment {self.seg.name} at {offset}: {exc}") from exc
        return data, stop

    def read_events(self, offset: int, limit: int, names: Any, ser: "Serializer | None",
                    frames: FrameParser, what: str) -> tuple[list[EventRead], int]:
        """The events of ``read(offset, limit)``: (EventRead tuples, end). Events whose
        journal file was reclaimed after they were tiered are made straight from their tier-2
        row group's columns (no frames rebuilt, no bytes copied twice); the rest are parsed
        from the bytes ``read`` returns."""
        e = self.engine
        cold = e.cold
        seg = self.seg
        if cold is not None and offset < e.tiered.get(seg.uid, 0):
            entry, data = self.section(offset)
            if data is None and e.local_read_gone(seg, offset, entry.pos):
                try:
                    payloads, keys, offsets, stop = cold.rows(seg, offset, limit)
                except (CorruptDataError, StorageError):
                    self._truncated(offset)  # truncated (and its tier-2 file deleted) meanwhile
                    raise
                if ser is not None:
                    payloads = list(map(ser.deserialize, payloads))
                lengths = map(sub, offsets[1:] + [stop], offsets)
                return list(map(partial(_new, EventRead), zip(
                    payloads, keys, repeat(seg.segment_id), offsets, lengths, repeat(names)))), stop
        data, stop = self.read(offset, limit)
        return events_from(data, offset, seg.segment_id, names, ser, frames, what), stop

    def _truncated(self, offset: int) -> None:
        """Raise TruncatedDataError if ``offset`` is before the head now (a failed read raced
        with a truncation whose reclaim deleted the journal file, invariant 3)."""
        seg = self.seg
        head = seg.stream.head.get(seg.segment_id, 0)
        if offset < head:
            raise TruncatedDataError(f"offset {offset} of segment {seg.name} was truncated (head {head})") from None

    def read_raw(self, offset: int, limit: int, *, copy: bool = True) -> tuple[Any, int]:
        """The bytes from ``offset`` to the end of its section or ``limit``: (bytes, end). Data
        whose journal file was reclaimed after it was tiered comes from tier 2, in the same
        form, up to ``limit`` or the end of a row group (never ending inside a frame)."""
        e: IndexEntry | None = None
        try:
            e, data = self.section(offset)
            stop = min(e.end, limit)
            if data is not None:
                view = data[offset - e.start : stop - e.start]
                return (bytes(view) if copy else view.toreadonly()), stop
            cold = self.engine.local_read_gone(self.seg, offset, e.pos)
            if not cold:
                return self.journal.read_section(e.pos, e.nbytes, offset - e.start, stop - e.start), stop
        except (CorruptDataError, StorageError):
            self._truncated(offset)  # truncated (and its journal file deleted) meanwhile
            if e is None or not self.engine.local_read_gone(self.seg, offset, e.pos):
                raise
            # tiered, and its journal file was reclaimed during the read: tier 2 has it
        try:
            return self._read_cold(offset, limit, copy)
        except (CorruptDataError, StorageError):
            self._truncated(offset)
            raise

    def cold_table(self, offset: int, limit: int, timed: bool = False) -> tuple[Any, int] | None:
        """The events from ``offset`` (an event boundary) to ``limit`` or the segment's tiered
        end as one Arrow table in ``arrow.SCHEMA``, read in bulk from tier 2, if the journal no
        longer holds ``offset``: (table, end). None if it does (read it from there)."""
        e = self.engine
        tiered = e.tiered.get(self.seg.uid, 0)
        if e.cold is None or offset >= tiered:
            return None
        entry, data = self.section(offset)
        if data is not None or not e.local_read_gone(self.seg, offset, entry.pos):
            return None
        stop = min(limit, tiered)
        try:
            return e.cold.table(self.seg, offset, stop, timed), stop
        except (CorruptDataError, StorageError):
            self._truncated(offset)  # truncated (and its tier-2 file deleted) meanwhile
            raise

    def _read_cold(self, offset: int, limit: int, copy: bool) -> tuple[Any, int]:
        cold = self.engine.cold
        if cold is None:
            raise CorruptDataError(
                f"offset {offset} of segment {self.seg.name} is only in tier 2 (its journal file "
                "was reclaimed after it was tiered) and this store was opened with tier2=False: "
                "open it with its tier2 target to read it")
        view, stop = cold.read(self.seg, offset, limit)
        return (bytes(view) if copy else view.toreadonly()), stop

    def check_boundary(self, offset: int, what: str) -> None:
        """Raise InvalidStreamCutError unless ``offset`` starts a frame (or is the end)."""
        seg = self.seg
        if offset == 0 or offset == seg.length:
            return
        e, _ = self.section(offset)
        if e.n_events == 0:  # inside a large event (its continuation chunks start no event)
            raise InvalidStreamCutError(
                f"{what}: offset {offset} is inside a large event in segment {seg.name}"
            )
        head = seg.stream.head.get(seg.segment_id, 0)
        if offset == e.start or offset == head:
            return
        # parse whole frames from the section's start (or the head inside it: data before the
        # head may be in neither tier) up to ``offset``; a read from tier 2 may end early (a
        # row group's end) or late (a frame crossing ``offset``: not a boundary)
        at = max(e.start, head) if offset > head else e.start
        frames = FrameParser(1024)
        while at < offset:
            data, stop = self.read_raw(at, offset)
            cbuf = ffi.from_buffer(data)
            p = 0
            while p < len(data):
                n, consumed = frames.parse(cbuf + p, len(data) - p, what)
                if n == 0:
                    break
                p += consumed
            if p != len(data) or stop > offset or stop <= at:
                raise InvalidStreamCutError(
                    f"{what}: offset {offset} is not an event boundary in segment {seg.name}"
                )
            at = stop

    def fetch(self, offset: int, length: int, serializer: Any) -> EventRead:
        seg = self.seg
        head = seg.stream.head.get(seg.segment_id, 0)
        if offset < head:
            raise TruncatedDataError(f"offset {offset} of segment {seg.name} was truncated (head {head})")
        bad = InvalidEventPointerError(f"no event at {offset}+{length} in segment {seg.name}")
        if offset + length > seg.length or length < _FH:
            raise bad
        try:
            self.check_boundary(offset, f"fetch from {seg.name}")
        except InvalidStreamCutError:
            raise InvalidEventPointerError(
                f"no event starts at offset {offset} of segment {seg.name}"
            ) from None
        try:
            data, stop = self.read(offset, offset + length)
        except CorruptDataError:  # a large event's frame is longer than the pointer says
            raise bad from None
        if stop != offset + length:
            raise bad
        try:
            evs = events_from(data, offset, seg.segment_id, seg.stream.names, resolve(serializer),
                              FrameParser(4), f"fetch from {seg.name}")
        except CorruptDataError:
            raise bad from None
        if len(evs) != 1 or evs[0].length != length:
            raise bad
        return evs[0]


def visible_snapshot(engine: "Engine", scope: str, stream: str
                     ) -> tuple["StreamState", dict[int, "Segment"], dict[int, int], dict[int, int]]:
    """An event stream's state, segments, heads and visible lengths taken together (the
    segments, heads and acknowledged position under the append lock)."""
    st = engine.stream(scope, stream, "events")
    with engine.append_lock:
        segs = dict(st.segments)
        acked = engine.journal.acked()
        head = st.full_head()
    return st, segs, head, engine.index.visible_lengths(segs, acked)


def resolve_cut(engine: "Engine", st: "StreamState", cut: StreamCut | None, what: str,
                *, check_boundaries: bool = True) -> dict[int, int] | None:
    """Validate a user's cut against the stream: its full map (None for UNBOUNDED/None)."""
    if cut is None or (isinstance(cut, StreamCut) and cut.positions is None):
        return None
    if not isinstance(cut, StreamCut):
        raise InvalidStreamCutError(f"{what}: expected a StreamCut, got {type(cut).__name__}")
    if (cut.scope, cut.stream) != st.names:
        raise InvalidStreamCutError(
            f"{what}: the StreamCut is of {cut.scope}/{cut.stream}, not of {st.key}"
        )
    named = cut.as_dict()
    full = check_cut(dict(st.segments), named, what, st.key)
    if check_boundaries:
        for sid, off in named.items():
            SegmentSource(engine, st.segments[sid]).check_boundary(off, what)
    return full

